"""Function exercises (issue 38): the learner hands in a function, checked on the lab's evidence and held-out evidence.

Every function exercise of every bank: its reference passes, and a constant equal to the right value of any one
of its cases fails on another case, named in the feedback. Lab 01's two: a function right only on the lab's own
trace (a typed value, a window not clipped, a floor left out) fails on a held-out case, named; an exception is
reported with the case and its one-line message; a percent for a fraction reads as that slip. The grader judges
the values the run recorded (RUN=1) and says plainly that it did not check a function with RUN=0 (end to end, through
``make grade`` with RUN=1 and RUN=0: tests/test_grading.py's judy). A malformed bank entry is refused with a message
naming what was seen and what was expected.
"""
from __future__ import annotations

import numpy as np
import pytest

from infralens_lab.analysis.intervals import idle_share
from infralens_lab.parse.trace import load_trace
from infralens_lab.quiz import all_questions, check, grader, question
from infralens_lab.quiz import functions as fx
from infralens_lab.quiz.answers import Answer, parse_record
from infralens_lab.quiz.bank import BankError, question_from_plain
from infralens_lab.quiz.check import GRADE_ENV, judge_function
from infralens_lab.quiz.isolation import RunOutcome
from infralens_lab.quiz.keys import lab01 as lab01_key

FUNCTIONS = [q for q in all_questions() if q.kind == "function"]


@pytest.fixture(autouse=True)
def learner(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)


@pytest.fixture(scope="module")
def expected():
    """``{qid: [(case, right value)]}``, built once (the cases load recorded traces)."""
    got = {q.id: fx.reference_values(q) for q in FUNCTIONS}
    missing = [k for k, v in got.items() if v is None]
    if missing:
        pytest.skip(f"no recording in this checkout for {missing}")
    return got


def _idle_share(busy, start, end):
    """The learner's function, written as the lab's hint says (clip to the window, sum, divide)."""
    inside = (np.clip(busy[:, 1], start, end) - np.clip(busy[:, 0], start, end)).sum()
    return 1 - inside / (end - start)


def _fix_bound(period_ms, gpu_ms, cpu_ms, fraction, speedup):
    return period_ms / max(gpu_ms * ((1 - fraction) + fraction / speedup), cpu_ms)


def _whole_intervals_only(busy, start, end):
    """A slip: keep the intervals wholly inside the window instead of clipping them to it."""
    b = busy[(busy[:, 0] >= start) & (busy[:, 1] <= end)]
    return 1 - (b[:, 1] - b[:, 0]).sum() / (end - start)


# ---------------------------------------------------------------- every function exercise of every bank
def test_lab01_has_two_function_exercises():
    assert {q.id for q in FUNCTIONS} >= {"lab01.ex1", "lab01.ex4"}


@pytest.mark.parametrize("q", FUNCTIONS, ids=lambda q: q.id)
def test_reference_passes_and_a_constant_fails_on_every_case(q, expected, capsys, monkeypatch):
    cases = expected[q.id]
    assert sum(c.held_out for c, _ in cases) >= 2 and not cases[0][0].held_out  # the lab's own first, then held out
    ref = fx.load(q.reference, "reference")
    assert check(q.id, ref).status == "wrong"  # handed in as it is, the grader's key is refused (test_quiz_keys_guard)
    with monkeypatch.context() as m:  # with the key guard off, the reference is right on every case
        m.setattr(fx._Watch, "__call__", lambda self, frame, event, arg: None)
        assert check(q.id, ref).status == "correct"
    for c, v in cases:  # a typed constant equal to the right value of any one case fails on another, named
        r = check(q.id, lambda *a, _v=v, **k: _v)
        assert r.status == "wrong", f"{q.id}: the constant {v} (case {c.name!r}) passed every case"
        failed = [d.name for d, w in cases if d.name in r.message]
        assert failed and failed[0] != c.name and "your function gave" in r.message
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("q", FUNCTIONS, ids=lambda q: q.id)
@pytest.mark.parametrize("answer", [0.3125, 1.63, "0.31", 7])
def test_a_typed_constant_is_refused_as_a_value(q, answer, monkeypatch):
    r = check(q.id, answer)
    assert r.status == "wrong" and "a value; this exercise asks for a function" in r.message
    monkeypatch.setenv(GRADE_ENV, "1")
    with pytest.raises(AssertionError, match="asks for a function"):
        check(q.id, answer)


@pytest.mark.parametrize("q", FUNCTIONS, ids=lambda q: q.id)
def test_unanswered_scaffold_fails_softly(q, monkeypatch):
    assert check(q.id, ...).status == "unanswered"
    r = check(q.id, lambda *a, **k: ...)  # the scaffold's body left as `...`
    assert r.status == "unanswered" and "not answered yet" in r.message and "returned None" in r.message
    monkeypatch.setenv(GRADE_ENV, "1")
    with pytest.raises(AssertionError, match="not answered yet"):
        check(q.id, lambda *a, **k: None)


# ---------------------------------------------------------------- lab 01's two, case by case
def test_lab01_ex1_reference_is_the_trace_summary_on_the_recorded_traces(expected):
    """The reference on the lab's own case is 1 - Trace.summary()['gpu_utilization'] (the lab's tables' number)."""
    st = lab01_key._store()
    for version, (c, v) in zip(("bubble", "fixed"), expected["lab01.ex1"][:2], strict=True):
        util = load_trace(st.load(f"trace_{version}")).summary()["gpu_utilization"]
        assert v == pytest.approx(1 - util, abs=1e-12), c.name


def test_idle_share_matches_a_brute_force_count_on_random_intervals():
    rng = np.random.default_rng()
    for _ in range(10):
        n = int(rng.integers(1, 12))
        a = rng.uniform(0, 100, n)
        pairs = np.stack([a, a + rng.uniform(0, 30, n)], axis=1)  # overlapping, unsorted, some sticking out
        start, end = sorted(rng.uniform(-10, 140, 2))
        if end - start < 1:
            continue
        t = np.linspace(start, end, 40_001)[:-1] + (end - start) / 80_000  # midpoints of a fine grid
        busy = ((t[:, None] >= pairs[:, 0]) & (t[:, None] < pairs[:, 1])).any(axis=1).mean()
        # each of the 2n interval ends is off by at most half a grid step: 24 / 80,000 of the window at most
        assert idle_share(pairs, start, end) == pytest.approx(1 - busy, abs=5e-4)
    with pytest.raises(ValueError, match=r"window \[5, 5\] is empty"):
        idle_share([(0, 1)], 5, 5)


def test_lab01_ex1_right_function_passes_and_names_every_case(expected, capsys):
    r = check("lab01.ex1", _idle_share)
    assert r.status == "correct" and r.points == 2
    assert "right on all 7 cases (5 held out)" in capsys.readouterr().out


@pytest.mark.parametrize("fn, case, says", [
    (None, None, "your function gave"),  # the lab's shown value typed in (its own first case's: see the test)
    (lambda busy, start, end: _idle_share(busy, busy[0, 0], busy[-1, 1]), "bubble trace", "gave"),  # ignores the window
    (lambda busy, start, end: _whole_intervals_only(busy, start, end),
     "window starting and ending inside busy intervals", "too much idle"),  # no clipping
    (lambda busy, start, end: 100 * _idle_share(busy, start, end), "recording (this lab)", "looks like a percent"),
], ids=["lab's value", "ignores the window", "not clipped", "percent"])
def test_lab01_ex1_a_function_right_only_on_the_labs_case_names_the_failed_case(fn, case, says, expected):
    if fn is None:  # the value the lab shows (its first case, on whichever GPU's set the lab reads) typed in: the
        cases = expected["lab01.ex1"]  # first case with another right value is named
        shown = cases[0][1]
        case = next(c.name for c, v in cases if abs(v - shown) > 1e-3)

        def fn(busy, start, end):
            return shown
    r = check("lab01.ex1", fn)
    assert r.status == "wrong"
    first = r.message.splitlines()[0]
    assert f"on '{case}" in first or f"{case}" in first.split("(case")[0], first
    assert says.lower() in r.message.lower()


def test_lab01_ex1_held_out_gpu_is_named_when_only_the_labs_gpu_is_right(expected):
    """Right on the lab's own GPU and its perturbed copies, wrong on the other GPU's recording: named."""
    cases = expected["lab01.ex1"]
    held = next(c for c, _ in cases if "recording (held out)" in c.name)

    def only_own_gpu(busy, start, end):  # right everywhere but on the other GPU's trace
        return 0.5 if busy.shape == held.args[0].shape and np.array_equal(busy, held.args[0]) else \
            _idle_share(busy, start, end)
    r = check("lab01.ex1", only_own_gpu)
    assert r.status == "wrong" and f"not right on '{held.name}'" in r.message and "gave 0.5" in r.message


def test_lab01_ex1_an_exception_is_named_with_its_case_not_a_traceback(capsys):
    calls = []

    def boom(busy, start, end):  # raises on the second case, whichever GPU's set the lab reads
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("no such column\nsecond line")
        return _idle_share(busy, start, end)
    r = check("lab01.ex1", boom)
    out = capsys.readouterr().out
    assert r.status == "wrong" and "raised ValueError: no such column." in out and "second line" not in out
    assert "Traceback" not in out and "(case " in out


def test_a_function_that_edits_its_inputs_does_not_change_the_next_case(expected):
    def clobber(busy, start, end):
        v = _idle_share(busy, start, end)
        busy[:] = 0
        return v
    assert check("lab01.ex1", clobber).status == "correct"


def test_lab01_ex4_a_floor_left_out_fails_on_the_case_that_needs_it(expected):
    assert check("lab01.ex4", _fix_bound).status == "correct"
    cpu_only = check("lab01.ex4", lambda p, g, c, f, s: p / c)          # right wherever the CPU decides
    assert cpu_only.status == "wrong" and "with the CPU floor at a third" in cpu_only.message.splitlines()[0]
    amdahl = check("lab01.ex4", lambda p, g, c, f, s: p / (g * ((1 - f) + f / s)))  # the GPU floor alone
    assert amdahl.status == "wrong" and "(this lab)' (case 1 of" in amdahl.message
    named = check("lab01.ex4", lambda period_ms, gpu_ms, cpu_ms, fraction, speedup: str(period_ms))
    assert named.status == "wrong" and "a str, not a number" in named.message


def test_slip_is_read_per_case(expected):
    q = question("lab01.ex1")
    cases = expected["lab01.ex1"]
    got = {c.name: v for c, v in cases}
    held = cases[2][0]
    got[held.name] *= 100
    status, text = judge_function(q, got, cases)
    assert status == "wrong" and held.name in text and "looks like a percent" in text


def test_a_case_with_spread_takes_its_own_tolerance():
    q = question("lab01.ex4")
    c = fx.Case("noisy", (1.0,), spread=0.5)
    assert judge_function(q, {"noisy": 2.4}, [(c, 2.0)])[0] == "correct"
    assert judge_function(q, {"noisy": 2.6}, [(c, 2.0)])[0] == "wrong"


# ---------------------------------------------------------------- records and the grader
def _run(cell: int, payload: dict | None, state: str = "ok") -> RunOutcome:
    return RunOutcome(state="ok", cells={cell: {"state": state, "error": ""}},
                      records={cell: [payload]} if payload else {})


def test_grader_judges_the_values_the_run_recorded(expected):
    q = question("lab01.ex1")
    code = Answer(literal=False, cell=8, how="code", source="ANSWER_EX1 = idle_share")
    right = fx.function_record(q.id, fx.outputs(_idle_share, [c for c, _ in expected[q.id]]))
    assert parse_record(right, q.id)[0]
    status, points, feedback, shown = grader.function_row(q, code, _run(8, right))
    assert (status, points, feedback) == ("correct", 2, "") and "7 cases" in shown.value
    shown = expected[q.id][0][1]  # the lab's own first case's value, typed in: the first case it is wrong on is named
    failed = next(c.name for c, v in expected[q.id] if abs(v - shown) > 1e-3)
    const = fx.function_record(q.id, fx.outputs(lambda *a: shown, [c for c, _ in expected[q.id]]))
    status, points, feedback, _ = grader.function_row(q, code, _run(8, const))
    assert (status, points) == ("wrong", 0) and f"'{failed}'" in feedback
    value = {"question": q.id, "value": shown}  # ANSWER_EX1 = idle_share(busy, start, end): a value computed by code
    status, _, feedback, _ = grader.function_row(q, code, _run(8, value))
    assert status == "wrong" and "asks for a function" in feedback


def test_grader_with_run0_says_the_function_was_not_checked():
    q = question("lab01.ex4")
    code = Answer(literal=False, cell=41, how="code", source="ANSWER_EX4 = fix_bound")
    assert grader.function_row(q, code, None) == ("not checked", 0, grader.NOT_RUN_FUNCTION, None)
    assert grader.NOT_RUN_FUNCTION == ("function exercise: not checked with RUN=0 (only final values are checked "
                                       "without running code)")
    status, points, feedback, _ = grader.function_row(q, code, _run(3, None))  # the run stopped before cell 41
    assert (status, points) == ("not checked", 0) and "did not reach code cell 41" in feedback
    typed = Answer(value=1.63, cell=41)
    for run in (None, _run(41, None)):
        status, points, feedback, _ = grader.function_row(q, typed, run)
        assert (status, points) == ("wrong", 0) and "asks for a function" in feedback
    assert grader.function_row(q, Answer(value=None, cell=41), None)[0] == "unanswered"
    assert grader.function_row(q, None, None)[0] == "unanswered"
    assert "not checked" in grader.STATUSES


@pytest.mark.parametrize("value, why", [
    ({"cases": {}}, "1 to 64"),
    ({"cases": {"a": [1]}}, "holds a list"),
    ({"cases": {"a": float("inf")}}, "finite number"),
    ({"cases": {"a": True}}, "holds a bool"),
    ({"cases": {"a": "x" * 301}}, "300 characters"),
    ({"cases": {"a": 1}, "extra": 1}, "not {'cases'"),
    ({"cases": [1, 2]}, "not {'cases'"),
])
def test_a_malformed_function_record_is_refused(value, why):
    ok, got, msg = parse_record({"question": "lab01.ex1", "value": value}, "lab01.ex1")
    assert not ok and got is None and why in msg


# ---------------------------------------------------------------- bank validation
def _plain(**over):
    d = {"id": "lab01.ex9", "kind": "function", "prompt": "Write f.", "hint": "h", "explanation": "e",
         "reference": "infralens_lab.analysis.intervals:idle_share", "cases": "infralens_lab.quiz.keys.lab01:idle_share_cases",
         "tolerance": {"abs": 0.01}}
    d.update(over)
    return {k: v for k, v in d.items() if v is not None}


def test_a_well_formed_function_entry_validates():
    q = question_from_plain(_plain(), "lab01")
    assert (q.kind, q.reference, q.answer, q.derive) == ("function", _plain()["reference"], None, None)


@pytest.mark.parametrize("over, says", [
    ({"reference": None}, "reference is None; a 'function' question needs 'infralens_lab.module:function'"),
    ({"reference": "os:system"}, "reference is 'os:system'"),
    ({"cases": "infralens_lab.quiz.keys.lab01"}, "cases is 'infralens_lab.quiz.keys.lab01'"),
    ({"answer": 0.3}, "has ['answer'], which a 'function' question does not take"),
    ({"derive": "value", "evidence": "infralens_lab.quiz.keys.lab01:bubble_trace"}, "has ['derive', 'evidence']"),
    ({"id": "lab01.q9"}, "a 'function' question is an exercise"),
    ({"tolerance": None}, "function needs 'tolerance'"),
    ({"tolerance": {"abs": -1}}, "function needs 'tolerance'"),
    ({"feedback": {"A": "x"}}, "function feedback maps 'low'/'high'"),
    ({"kind": "number", "answer": 1}, "has 'reference', which only a 'function' question takes (kind is 'number')"),
])
def test_a_malformed_function_entry_is_refused_with_what_was_seen(over, says):
    with pytest.raises(BankError) as exc:
        question_from_plain(_plain(**over), "lab01")
    assert says in str(exc.value) and "lab01." in str(exc.value)


def test_a_malformed_cases_provider_is_refused(monkeypatch):
    monkeypatch.setattr(lab01_key, "bad_cases", lambda: [fx.Case("a"), fx.Case("a")], raising=False)
    monkeypatch.setattr(lab01_key, "not_cases", lambda: [("a", 1)], raising=False)
    fx.cases.cache_clear()
    try:
        with pytest.raises(fx.FunctionCaseError, match=r"returned 2 cases \(names \['a', 'a'\]\); expected 2 to 64"):
            fx.cases("infralens_lab.quiz.keys.lab01:bad_cases")
        with pytest.raises(fx.FunctionCaseError, match=r"a list holding \['tuple'\]; expected a list of quiz.functions.Case"):
            fx.cases("infralens_lab.quiz.keys.lab01:not_cases")
        with pytest.raises(fx.FunctionCaseError, match="cannot be loaded"):
            fx.cases("infralens_lab.quiz.keys.lab01:no_such_provider")
    finally:
        fx.cases.cache_clear()



def test_a_function_record_for_a_value_exercise_is_refused():
    q = question("lab01.ex2")
    rec = fx.function_record(q.id, {"a": 1.0, "b": 2.0})
    got = grader.exercise_answer(q, Answer(literal=False, cell=3, how="code"), {3: [rec]})
    assert got.how == "bad record" and "asks for a value" in got.source


def test_lab02_ex2_a_roof_left_out_fails_on_the_kernel_it_decides(expected):
    """The roofline's fraction: a learner who divides by the compute roof alone is right on attn_fwd (right of the
    ridge) and wrong on naive_qk, left of it, named; one who takes the larger roof fails on attn_fwd itself."""
    cases = expected["lab02.ex2"]
    assert check("lab02.ex2", lambda f, b, s, p, w: f / s / min(p, f / b * w)).status == "correct"
    compute_only = check("lab02.ex2", lambda f, b, s, p, w: f / s / p)
    assert compute_only.status == "wrong" and "'naive_qk, " in compute_only.message.splitlines()[0]
    larger = check("lab02.ex2", lambda f, b, s, p, w: f / s / max(p, f / b * w))
    assert larger.status == "wrong" and "recording (this lab)' (case 1 of" in larger.message
    percent = check("lab02.ex2", lambda f, b, s, p, w: 100 * f / s / min(p, f / b * w))
    assert percent.status == "wrong" and "looks like a percent" in percent.message
    assert sum(c.held_out for c, _ in cases) >= 3


def test_lab02_ex3_each_unit_decides_some_case(expected):
    """The busiest unit: attn_fwd's SM %, naive_qk's roofline fraction and matmul 512³'s Memory % each decide one of the
    lab's own cases, so a function that forgets a unit, or the x100 on the fraction, fails on the one it decides."""
    assert check("lab02.ex3", lambda f, sm, mem: max(100 * f, sm, mem)).status == "correct"
    for fn, case in [(lambda f, sm, mem: max(100 * f, sm), "matmul 512³"), (lambda f, sm, mem: max(sm, mem), "naive_qk"),
                     (lambda f, sm, mem: max(f, sm, mem), "naive_qk"), (lambda f, sm, mem: max(100 * f, mem), "attn_fwd")]:
        r = check("lab02.ex3", fn)
        assert r.status == "wrong" and f"not right on '{case}, " in r.message, r.message
