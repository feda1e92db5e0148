"""No test-taking clues in any bank (issue 14): the right option is not the long one by habit,
and right letters are spread over the options. Runs over every bank present, new labs included.

Bounds: over all banks at most a third of the choice questions may have the right option
strictly longest (four equal options would give a quarter by chance); per bank at most half;
no right option more than 25% longer than the longest wrong one; within a bank of three or
more choice questions not every right letter the same; over all banks no letter right in more
than half of the questions.
"""
from __future__ import annotations

from collections import Counter

import pytest

from infralens_lab.quiz import labs, load_bank

CHOICE = {lab: [q for q in load_bank(lab).values() if q.kind == "choice" and q.answer is not None] for lab in labs()}
ALL = [q for qs in CHOICE.values() for q in qs]
LONGEST_SHARE_ALL = 1 / 3
LONGEST_SHARE_BANK = 1 / 2
MAX_LENGTH_RATIO = 1.25


def _right_is_longest(q) -> bool:
    right = len(q.options[q.answer])
    return right > max(len(t) for k, t in q.options.items() if k != q.answer)


def test_right_option_is_not_the_longest_by_habit_over_all_banks():
    longest = [q.id for q in ALL if _right_is_longest(q)]
    assert len(longest) <= LONGEST_SHARE_ALL * len(ALL), (
        f"the right option is strictly the longest in {len(longest)} of {len(ALL)} choice questions: {longest}")


@pytest.mark.parametrize("lab", [lab for lab, qs in CHOICE.items() if len(qs) >= 2])
def test_right_option_is_not_the_longest_by_habit_in_each_bank(lab):
    longest = [q.id for q in CHOICE[lab] if _right_is_longest(q)]
    assert len(longest) <= LONGEST_SHARE_BANK * len(CHOICE[lab]), f"{lab}: right option longest in {longest}"


@pytest.mark.parametrize("q", ALL, ids=[q.id for q in ALL])
def test_right_option_is_not_much_longer_than_the_wrong_ones(q):
    right = len(q.options[q.answer])
    wrong = max(len(t) for k, t in q.options.items() if k != q.answer)
    assert right <= MAX_LENGTH_RATIO * wrong, (
        f"{q.id}: the right option has {right} characters, the longest wrong one {wrong}; balance them")


@pytest.mark.parametrize("lab", [lab for lab, qs in CHOICE.items() if len(qs) >= 3])
def test_right_letters_vary_within_a_bank(lab):
    letters = [q.answer for q in CHOICE[lab]]
    assert len(set(letters)) > 1, f"{lab}: every right answer is {letters[0]}"


def test_no_letter_is_right_in_most_questions():
    counts = Counter(q.answer for q in ALL)
    letter, n = counts.most_common(1)[0]
    assert n <= len(ALL) / 2, f"{letter} is the right answer in {n} of {len(ALL)} choice questions: {dict(counts)}"
