"""Lab 07's function exercises (issue 38): an op's self CPU time from a trace's raw events (ex1) and the smallest k
whose false-alarm rate stays within a budget (ex2), checked on the lab's recording, the other GPU's and perturbed
copies (rows shuffled, two forwards, children nested deeper; more noise, another tolerance, every ratio lower).

The references are the trace's own nesting rule (``parse.trace.enclosing_parent``) and the exact false-alarm rate
(``analysis.gates.false_alarm_exact``): on the recorded forwards the first equals ``measure.top_ops.op_times`` (the
table the lab shows), and on every case the second picks the k the lab's bootstrap (``false_alarm_rate``) picks.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import gates
from infralens_lab.measure.top_ops import cpu_events, op_times
from infralens_lab.parse.trace import load_trace
from infralens_lab.quiz import check
from infralens_lab.quiz.check import GRADE_ENV
from infralens_lab.quiz.keys import lab07 as key
from infralens_lab.stats import percentile


@pytest.fixture(autouse=True)
def learner(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)


@pytest.fixture(scope="module")
def self_cases():
    got = key.self_time_cases()
    if got is None:
        pytest.skip("no recorded ResNet traces in this checkout")
    return got


@pytest.fixture(scope="module")
def k_cases():
    got = key.smallest_k_cases()
    if got is None:
        pytest.skip("no recorded A/A ratios in this checkout")
    return got


def _self_right(events, op, forwards):
    """The learner's function as the hint says: a stack walk in start order (longer first on a tie)."""
    return _walk_as_given(events.sort_values(["start_us", "dur_us"], ascending=[True, False]), op, forwards)


def _all_descendants(events, op, forwards):
    """A slip: subtract every event inside a call, grandchildren too."""
    s, e = events["start_us"].to_numpy(), (events["start_us"] + events["dur_us"]).to_numpy()
    total = 0.0
    for i in np.flatnonzero((events["name"] == op).to_numpy()):
        inside = (s >= s[i]) & (e <= e[i])
        inside[i] = False
        total += e[i] - s[i] - (e[inside] - s[inside]).sum()
    return total / forwards / 1e3


def _walk_as_given(events, op, forwards):
    """The stack walk over the rows in the order given (a slip when they are not in start order)."""
    own, stack = {}, []
    for row, start, dur in zip(events.index, events["start_us"], events["dur_us"], strict=True):
        while stack and stack[-1][1] <= start:
            stack.pop()
        own[row] = dur
        if stack:
            parent, end = stack[-1]
            own[parent] -= min(dur, end - start)
        stack.append((row, start + dur))
    return sum(own[r] for r in events.index[events["name"] == op]) / forwards / 1e3


def _first(r) -> str:
    return r.message.splitlines()[0]


# ---------------------------------------------------------------- ex1: self time from the events
def test_ex1_right_function_passes_and_the_reference_too(self_cases, capsys):
    assert check("lab07.ex1", _self_right).status == "correct"
    assert "called the grader's key" in check("lab07.ex1", key.self_ms).message  # the reference itself: refused
    assert f"right on all {len(self_cases)} cases" in capsys.readouterr().out
    assert sum(c.held_out for c in self_cases) >= 4 and not self_cases[0].held_out


@pytest.mark.parametrize("fn, case, says", [
    (None, "aten::conv2d, channels_first forward", "your function gave"),  # the lab's value typed in
    (lambda ev, op, n: ev.loc[ev["name"] == op, "dur_us"].sum() / n / 1e3, "aten::cudnn_convolution, channels_first",
     "Too high"),  # inclusive time
    (_all_descendants, "aten::conv2d, channels_first forward", "Too low"),  # grandchildren subtracted too
    (lambda ev, op, n: _self_right(ev, op, 1), "twice, back to back", "divide by the forwards"),  # per run, not forward
    (_walk_as_given, "(this lab)", "gave"),  # assumes the rows are in time order: the trace's are not
    # sorted by start alone, ties left in row order: a range starting with its first child comes after it
    (lambda ev, op, n: _walk_as_given(ev.sort_values("start_us", kind="stable"), op, n), "nested one level deeper", "gave"),
    (lambda ev, op, n: 1e3 * _self_right(ev, op, n), "(this lab)", "µs"),  # µs, not ms
], ids=["typed value", "inclusive", "all descendants", "per run", "row order", "ties by row order", "microseconds"])
def test_ex1_a_half_right_function_fails_on_a_named_case(fn, case, says, self_cases):
    if fn is None:
        shown = key.self_ms(*self_cases[0].args)

        def fn(ev, op, n):
            return shown
    r = check("lab07.ex1", fn)
    assert r.status == "wrong" and case in _first(r).split("(case")[0], r.message
    assert says in r.message, r.message


def test_ex1_the_deeper_nesting_changes_the_answer_and_only_direct_children_count(self_cases):
    """The perturbed case with an inner range around the top op's children: its self time is its duration less the
    inner ranges (smaller than before: the gaps between children now belong to the range), which a function that
    subtracts every event inside gets wrong by the children's whole time."""
    plain = next(c for c in self_cases if "(this lab)" in c.name and c.args[1] != "aten::conv2d")
    deeper = next(c for c in self_cases if "nested one level deeper" in c.name)
    ev, op, n = deeper.args
    inner = ev[ev["name"] == "cudnn::inner_setup"]
    calls = ev[ev["name"] == op]
    assert len(inner) == len(calls) > 0
    want = (calls["dur_us"].sum() - inner["dur_us"].sum()) / n / 1e3
    assert key.self_ms(*deeper.args) == pytest.approx(want, rel=1e-9)
    assert want < key.self_ms(*plain.args)
    assert _all_descendants(*deeper.args) < want - 0.1


def test_ex1_reference_is_op_times_on_every_recorded_forward():
    """On every recorded ResNet forward of every GPU, the reference on the raw events equals the self time of the
    table the lab shows (measure.top_ops.op_times, from Trace.self_us), op by op."""
    seen = 0
    for slug in evidence.recordings():
        st = evidence.reference(slug)
        for f in key.FORMATS:
            if f"resnet_trace_{f}" not in st.names():
                continue
            tr = load_trace(st.load(f"resnet_trace_{f}"))
            events, n = cpu_events(tr), max(1, len(tr.steps()))
            table = op_times(tr).set_index("name")["self_ms"]
            for op in table.index[:8]:
                assert key.self_ms(events, op, n) == pytest.approx(table[op], rel=1e-9, abs=1e-12), (slug, f, op)
            seen += 1
    assert seen >= 4


def _grow(rng, rows: list, want: dict, name: str, start: float, length: float, depth: int) -> None:
    """A random tree of nested intervals: ``rows`` gets (name, start, length), ``want`` each node's own time."""
    rows.append((name, start, length))
    kids, t = [], start
    while depth < 4 and t < start + length and rng.random() < 0.7:
        gap, dur = float(rng.uniform(0, length / 4)), float(rng.uniform(0.5, max(0.6, length / 3)))
        if t + gap + dur > start + length:
            break
        kids.append((t + gap, dur))
        t += gap + dur  # a gap of 0 leaves two children touching
    want[name] = length - sum(d for _, d in kids)
    for i, (s, d) in enumerate(kids):
        _grow(rng, rows, want, f"{name}.{i}", s, d, depth + 1)


def test_ex1_reference_on_random_nested_intervals():
    """Fresh random trees of intervals (random depths, rows shuffled): the reference equals a count made from the
    tree as built, each node's length less its children's."""
    rng = np.random.default_rng()
    for _ in range(5):
        rows, want = [], {}
        _grow(rng, rows, want, "root", 0.0, 1000.0, 0)
        events = pd.DataFrame(rows, columns=["name", "start_us", "dur_us"]).sample(frac=1.0, random_state=int(rng.integers(1 << 30)))
        for name, own in want.items():
            assert key.self_ms(events, name, 1) == pytest.approx(own / 1e3, rel=1e-9, abs=1e-12), name


def test_cpu_events_refuses_a_trace_with_two_threads():
    class _Two:
        events = pd.DataFrame({"name": ["a", "b"], "cat": ["cpu_op", "cpu_op"], "pid": [1, 1], "tid": [1, 2],
                               "start_us": [0.0, 1.0], "dur": [1.0, 1.0]})

        @staticmethod
        def steps():
            return pd.DataFrame()
    with pytest.raises(ValueError, match=r"CPU events on 2 threads .*expected one"):
        cpu_events(_Two())


# ---------------------------------------------------------------- ex2: the smallest k
def _k_right(ratios, tolerance, budget):
    limit = percentile(ratios, 50) * (1 - tolerance)
    p = sum(x < limit for x in ratios) / len(ratios)
    return next((k for k in gates.KS if _tail(p, k) <= budget), None)


def _limit_from_one(ratios, tolerance, budget):
    """A slip: the gate's limit at 1 - tolerance, as if the expected ratio were 1 rather than the ratios' median."""
    p = sum(x < 1 - tolerance for x in ratios) / len(ratios)
    return next((k for k in gates.KS if _tail(p, k) <= budget), None)


def _tail(p, k):
    return sum(math.comb(k, j) * p**j * (1 - p) ** (k - j) for j in range((k + 1) // 2, k + 1))


def test_ex2_right_function_passes_and_the_labs_bootstrap_too(k_cases):
    """The exact rate and the lab's resampled one (analysis.gates.false_alarm_rate, 2,000 draws) pick the same k on
    every case, so a learner who loops over the lab's function passes as well as one who writes the binomial tail."""
    assert check("lab07.ex2", _k_right).status == "correct"
    assert "called the grader's key" in check("lab07.ex2", key.smallest_k).message  # the reference itself: refused

    def boot(ratios, tolerance, budget):
        return next(k for k in gates.KS if gates.false_alarm_rate(ratios, k, tolerance) <= budget)
    assert check("lab07.ex2", boot).status == "correct"
    assert len({key.smallest_k(*c.args) for c in k_cases}) >= 3


def test_ex2_budgets_sit_clear_of_every_rate(k_cases):
    """Each case's budget lies at least 2 bootstrap standard errors (2,000 draws) from every k's exact rate, so any
    honest resampling picks the case's k (the docstring of the cases provider says so)."""
    for c in k_cases:
        ratios, tol, budget = c.args
        for k in gates.KS:
            r = gates.false_alarm_exact(ratios, k, tol)
            se = math.sqrt(max(r * (1 - r), budget * (1 - budget)) / 2000)
            assert abs(r - budget) >= 2 * se, (c.name, k, r, budget)


@pytest.mark.parametrize("fn, case", [
    (None, "held out)"),  # the lab's value typed in: fails on a held-out case
    (lambda r, t, b: next((k for k in gates.KS if sum(x < 1 - t for x in r) / len(r) <= b), 31), "(this lab)"),  # one run
    (lambda r, t, b: _limit_from_one(r, t, b), "held out)"),  # the limit held to 1, not to the median
    (lambda r, t, b: _k_right(r, t, 0.01), "(this lab)"),  # a budget of its own, not the argument
], ids=["typed value", "k=1 rate for every k", "limit from 1", "budget ignored"])
def test_ex2_a_half_right_function_fails_on_a_named_case(fn, case, k_cases):
    if fn is None:
        shown = key.smallest_k(*k_cases[0].args)

        def fn(r, t, b):
            return shown
    r = check("lab07.ex2", fn)
    assert r.status == "wrong" and case in _first(r).split("(case")[0], r.message


def test_false_alarm_exact_is_the_bootstraps_limit_on_random_ratios():
    """Fresh random ratios: the exact rate lies within 4 standard errors of a 2,000-draw bootstrap for every odd k,
    and an even k is refused with what was seen."""
    rng = np.random.default_rng()
    ratios = list(1 + rng.normal(0, 0.02, int(rng.integers(15, 60))))
    for k in (1, 3, 5, 9):
        exact, boot = gates.false_alarm_exact(ratios, k, 0.01), gates.false_alarm_rate(ratios, k, 0.01)
        assert abs(exact - boot) <= 4 * math.sqrt(max(exact * (1 - exact), 1e-4) / 2000) + 1e-9, (k, exact, boot)
    with pytest.raises(ValueError, match="k=4; expected an odd k"):
        gates.false_alarm_exact(ratios, 4, 0.01)
    with pytest.raises(ValueError, match="1 ratios; expected at least 2"):
        gates.false_alarm_exact([1.0], 3, 0.01)


def test_ex2_reference_picks_the_labs_k_table_k_on_the_recorded_ratios(k_cases):
    """The lab's own case: the k the k table the lab shows (bootstrap) gives at the case's budget."""
    ratios, tol, budget = k_cases[0].args
    table = gates.k_table(ratios, tol)
    assert key.smallest_k(ratios, tol, budget) == gates.smallest_k(table, 100 * budget)
