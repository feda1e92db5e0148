"""Feedback that reads the slip (issue 38): a number answer off by 10³ or 10⁶ (s, ms, µs) or by 100 (a fraction for
a percent, or the reverse) is told so, naming the unit it reads as; a near miss keeps the question's own feedback;
a derived answer carrying its evidence's spread (quiz.check.Measured) is graded within that spread."""
from __future__ import annotations

import pytest

from infralens_lab.quiz import question
from infralens_lab.quiz.bank import Question
from infralens_lab.quiz.check import Measured, _judge, slip, tolerance
from infralens_lab.quiz.grader import expected_for_grading


def _q(unit: str, prompt: str = "How long?", tol=None) -> Question:
    return Question(id="lab99.q1", kind="number", prompt=prompt, hint="h", points=1, explanation="e", unit=unit,
                    tolerance=tol or {"rel": 0.01}, feedback={"high": "Too high: the question's own words.",
                                                              "low": "Too low: the question's own words."})


@pytest.mark.parametrize(("unit", "factor", "reads", "verb"), [
    ("ms", 1e3, "µs", "divide by 1000"), ("ms", 1e-3, "reads as s", "multiply by 1000"),
    ("s", 1e6, "µs", "divide by 1e+06"), ("µs", 1e-3, "ms", "multiply by 1000"), ("us", 1e3, "ns", "divide by 1000"),
])
def test_time_unit_slips_name_the_unit_read(unit, factor, reads, verb):
    status, text = _judge(_q(unit), 28.0 * factor, 28.0)
    assert status == "wrong" and reads in text and verb in text and f"asks for {unit}" in text, text
    assert "own words" not in text


def test_percent_and_fraction_slips():
    pct = _q("%")
    status, text = _judge(pct, 0.185, 18.5)
    assert status == "wrong" and "fraction (0 to 1)" in text and "multiply by 100" in text
    frac = _q("fraction 0..1")
    assert "divide by 100" in _judge(frac, 31.2, 0.312)[1] and "percent" in _judge(frac, 31.2, 0.312)[1]
    share = _q("", prompt="write the share (0 to 1) of the window")
    assert "looks like a percent" in _judge(share, 31.2, 0.312)[1]
    other = _q("x")
    assert "factor of 100" in _judge(other, 500.0, 5.0)[1]


def test_a_near_miss_keeps_the_questions_own_feedback_and_signs_are_respected():
    assert _judge(_q("ms"), 36.0, 28.0)[1].endswith("Too high: the question's own words.")
    assert slip(_q("ms"), -28000.0, 28.0, 0.28) is None
    assert slip(_q("ms"), 28000.0 * 1.5, 28.0, 0.28) is None  # a factor of 1500 is no unit slip


def test_lab01_slips_the_issue_found_get_the_unit_feedback():
    """Lab 01 exercise 2 answered in µs and exercise 3 as a fraction: the feedback says so, not "divide by (steps - 1)"
    or "group by the whole kernel name"."""
    ex2, ex3 = question("lab01.ex2"), question("lab01.ex3")
    period, share = expected_for_grading(ex2), expected_for_grading(ex3)
    status, text = _judge(ex2, period * 1e3, period)
    assert status == "wrong" and "reads as µs" in text and "steps - 1" not in text, text
    status, text = _judge(ex3, share / 100, share)
    assert status == "wrong" and "multiply by 100" in text and "whole kernel name" not in text, text
    assert _judge(ex2, period, period)[0] == "correct" and _judge(ex3, share, share)[0] == "correct"


def test_measured_answer_is_graded_within_its_own_spread():
    q = _q("score 0..1", tol={"abs": 0.005})
    key = Measured(0.990, 0.004)
    assert tolerance(q, key) == pytest.approx(0.005)  # the bank's floor wins over a narrower spread
    assert _judge(q, 0.9, key)[0] == "wrong" and _judge(q, 1.0, key)[0] == "wrong" and _judge(q, 0.993, key)[0] == "correct"
    wide = Measured(0.990, 0.02)
    assert tolerance(q, wide) == pytest.approx(0.02) and _judge(q, 1.0, wide)[0] == "correct"
    assert float(key) == 0.99 and key * 2 == pytest.approx(1.98)  # still a number everywhere else


def test_overlap_score_spread_is_half_the_p10_p90_of_the_periods_over_the_shorter_stage():
    """The spread lab05.q3 is graded within: stage-1 ends 30, 31, 29, 30 µs apart after the skipped first item
    (p10 29.3, p90 30.7 by linear interpolation), stages of 20 and 30 µs: (30.7 - 29.3) / 2 / 20 = 0.035."""
    from infralens_lab.analysis import overlap

    ends = [30.0, 60.0, 91.0, 120.0, 150.0, 180.0]  # the first item is warm-up (skip=1)
    s1 = [(e - 30.0, e) for e in ends]
    s0 = [(e - 50.0, e - 30.0) for e in ends]
    m = overlap.pipeline_metrics(s0, s1)
    gaps = [30.0, 31.0, 29.0, 30.0, 30.0][1:]  # after skip: ends 60, 91, 120, 150, 180
    assert gaps == [31.0, 29.0, 30.0, 30.0]
    assert m["overlap_score_spread"] == pytest.approx((30.7 - 29.3) / 2 / 20)
