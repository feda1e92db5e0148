"""A function exercise refuses a learner's function that hands the step to the grader's own key (issue 44: "an
exercise answered by calling the grader's own key function scores").

The check runs the learner's function under a profile hook (``quiz.functions.outputs``): a call of the exercise's
reference, of a function the reference delegates the whole step to (``lab01.ex4``'s ``overlap.step_bound``,
``lab02.ex3``'s ``roofline.verdict``), or of any function defined under ``quiz/keys/`` is refused by name, whether
the reference is handed in itself, wrapped, called from a thread, or its exception caught. A function that removes
the hook is not checked. An honest function passes, and the hook before the check is put back after it.
"""
from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np
import pytest

from infralens_lab.analysis import intervals, overlap, roofline
from infralens_lab.quiz import check
from infralens_lab.quiz import functions as fx
from infralens_lab.quiz.check import GRADE_ENV
from infralens_lab.quiz.keys import lab01 as lab01_key


@pytest.fixture(autouse=True)
def learner(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)


def _idle_share(busy, start, end):
    inside = (np.clip(busy[:, 1], start, end) - np.clip(busy[:, 0], start, end)).sum()
    return 1 - inside / (end - start)


def _refused(r, key):
    first = r.message.splitlines()[0]
    assert r.status == "wrong", r.message
    assert f"called the grader's key {key}: write the step yourself" in first, first


def test_the_reference_handed_in_itself_or_wrapped_is_refused_by_name():
    _refused(check("lab01.ex1", intervals.idle_share), "infralens_lab.analysis.intervals.idle_share")
    alias = intervals.idle_share  # bound to another name first: the code object is what is caught
    _refused(check("lab01.ex1", lambda busy, start, end: alias(busy, start, end)),
             "infralens_lab.analysis.intervals.idle_share")


def test_a_function_the_reference_delegates_to_is_refused():
    _refused(check("lab01.ex4", lambda p, g, c, f, s: overlap.step_bound(p, g, c, f, s).bound),
             "infralens_lab.analysis.overlap.step_bound")
    _refused(check("lab02.ex3", lambda rf, sm, mem: 100 * roofline.verdict(
        {"FLOP/s roof": rf, "SM %": sm / 100, "Memory %": mem / 100}).fraction),
        "infralens_lab.analysis.roofline.verdict")


def test_any_function_under_quiz_keys_is_refused_even_another_exercises():
    _refused(check("lab01.ex4", lab01_key.fix_bound), "infralens_lab.quiz.keys.lab01.fix_bound")

    def via_cases(busy, start, end):  # reads the grader's cases to look the answer up
        lab01_key.idle_share_cases()
        return _idle_share(busy, start, end)
    _refused(check("lab01.ex1", via_cases), "infralens_lab.quiz.keys.lab01.idle_share_cases")


def test_catching_the_refusal_does_not_help():
    def sly(busy, start, end):
        try:
            return intervals.idle_share(busy, start, end)
        except Exception:
            return _idle_share(busy, start, end)  # the right value, after the refused call
    _refused(check("lab01.ex1", sly), "infralens_lab.analysis.intervals.idle_share")


def test_a_key_called_from_a_thread_is_refused():
    def threaded(busy, start, end):
        out = []

        def run():
            with contextlib.suppress(Exception):  # the refusal, caught in the thread: the check has noted it already
                out.append(intervals.idle_share(busy, start, end))
        t = threading.Thread(target=run)
        t.start()
        t.join()
        return out[0] if out else _idle_share(busy, start, end)
    _refused(check("lab01.ex1", threaded), "infralens_lab.analysis.intervals.idle_share")


def test_removing_the_hook_is_not_checked():
    def unhook(busy, start, end):
        sys.setprofile(None)
        return intervals.idle_share(busy, start, end)
    r = check("lab01.ex1", unhook)
    assert r.status == "wrong" and "removed the profile hook the check runs it under" in r.message


def test_an_honest_function_passes_and_the_hook_before_is_put_back():
    seen = []

    def mine(frame, event, arg):  # a learner's own profiler, running before the check
        seen.append(event)
    sys.setprofile(mine)
    try:
        r = check("lab01.ex1", _idle_share)
        assert sys.getprofile() is mine
    finally:
        sys.setprofile(None)
    assert r.status == "correct", r.message
    assert threading.getprofile() is None


def test_delegates_refuses_what_has_no_code():
    with pytest.raises(fx.FunctionCaseError, match="expected Python functions"):
        fx.delegates(len)
    assert fx.key_codes(lab01_key.fix_bound) == {lab01_key.fix_bound.__code__, overlap.step_bound.__code__}
