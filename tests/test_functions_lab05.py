"""Lab 05's function exercises and its timeline question (issue 38).

ex1 (the share of copy time some kernel hid, from intervals) and ex3 (the bound of hiding a copy, both floors) are
checked on the lab's recorded traces, the other GPU's recording and perturbed copies: the reference passes every
case, a typed constant fails on a named case, a half-right function (kernels not merged, copies not merged, input
assumed in time order, Amdahl's floor alone, the larger bound taken) fails on the case built to catch it, and the
reference on the lab's own case is the number the lab's copy table shows. q8 is read in Perfetto: its key is the
stream of the copies beside the kernels, derived from the exported trace, and the export names the rows it asks about.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import intervals, overlap_tables
from infralens_lab.analysis.overlap import copy_stream, hidden_fraction, overlap_bound
from infralens_lab.labs_support import lab05
from infralens_lab.parse.trace import Trace, load_trace
from infralens_lab.quiz import check, grader, question
from infralens_lab.quiz import functions as fx
from infralens_lab.quiz.check import GRADE_ENV
from infralens_lab.quiz.keys import lab05 as keys


@pytest.fixture(autouse=True)
def learner(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)


@pytest.fixture(scope="module")
def expected():
    """``{qid: [(case, right value)]}`` for lab 05's two function exercises, built once."""
    got = {qid: fx.reference_values(question(qid)) for qid in ("lab05.ex1", "lab05.ex3")}
    if any(v is None for v in got.values()):
        pytest.skip("no recorded copy traces in this checkout")
    return got


@pytest.fixture(scope="module")
def copies():
    """The lab's copy table, from the set the lab reads (the cells' own call)."""
    st = lab05.store()
    return overlap_tables.copy_table({m: load_trace(st.load(f"trace_copy_{m}")) for m in
                                      ("pageable", "pinned", "double_buffered")}, lab05.COPY_BYTES).set_index("mode")


def _hidden_share(copies, kernels):
    """The learner's function, as the hint says: merge both, cut the kernels out of the copies, divide."""
    total = intervals.length(intervals.union(copies))
    return (total - intervals.length(intervals.subtract(copies, kernels))) / total


def _pairs_summed(copies, kernels):
    """A slip: the overlap of every (copy, kernel) pair summed, nothing merged."""
    hid = sum(max(0.0, min(b, d) - max(a, c)) for a, b in copies for c, d in kernels)
    return hid / sum(b - a for a, b in copies)


def _copies_unmerged(copies, kernels):
    """A slip: kernels merged, copies not (time two copies share counts twice)."""
    return sum(intervals.hidden([c], kernels)[1] for c in copies) / sum(b - a for a, b in copies)


def _time_ordered(copies, kernels):
    """A slip: a two-pointer sweep that assumes both lists sorted and each free of overlaps."""
    hid, j = 0.0, 0
    for a, b in copies:
        while j < len(kernels) and kernels[j][1] <= a:
            j += 1
        m = j
        while m < len(kernels) and kernels[m][0] < b:
            hid += max(0.0, min(b, kernels[m][1]) - max(a, kernels[m][0]))
            m += 1
    return hid / sum(b - a for a, b in copies)


def _first_line(r) -> str:
    return r.message.splitlines()[0]


# ---------------------------------------------------------------- ex1: the hidden share
def test_ex1_right_function_passes_every_case_and_held_out_ones_are_there(expected, capsys):
    cases = expected["lab05.ex1"]
    assert not cases[0][0].held_out and sum(c.held_out for c, _ in cases) >= 4
    assert any("recording (held out)" in c.name for c, _ in cases)  # the other GPU's trace
    r = check("lab05.ex1", _hidden_share)
    assert r.status == "correct" and r.points == 2
    assert f"right on all {len(cases)} cases" in capsys.readouterr().out


def test_ex1_reference_is_the_copy_tables_hidden_share_on_the_recorded_traces(expected, copies):
    (db, v_db), (pinned, v_pinned) = expected["lab05.ex1"][:2]
    assert "double-buffered" in db.name and "pinned" in pinned.name
    assert v_db == pytest.approx(copies.loc["double_buffered", "hidden_fraction"], abs=1e-12)
    assert v_pinned == pytest.approx(copies.loc["pinned", "hidden_fraction"], abs=1e-12)
    assert 0.5 < v_db < 1 and v_pinned < 0.05  # one stream hides nothing of its own copy


@pytest.mark.parametrize("fn, case", [
    (_pairs_summed, "every kernel doubled on a second stream"),
    (_copies_unmerged, "two more copies after the last kernel"),
    (_time_ordered, "every kernel doubled on a second stream"),  # unsorted is caught where kernels overlap first
], ids=["kernels not merged", "copies not merged", "assumes time order"])
def test_ex1_a_half_right_function_fails_on_the_case_built_for_it(fn, case, expected):
    assert fn(*expected["lab05.ex1"][0][0].args) == pytest.approx(expected["lab05.ex1"][0][1])  # right on the lab's
    r = check("lab05.ex1", fn)
    assert r.status == "wrong" and case in _first_line(r), _first_line(r)


def _merge_in_order(pairs):
    """A merge that assumes its input sorted by start: it joins neighbours only."""
    out = []
    for a, b in pairs:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def test_ex1_a_merge_that_assumes_time_order_fails_on_the_shuffled_case(expected):
    """Both lists merged, but by joining neighbours only: right wherever the input is in time order, wrong (and
    named) where it is shuffled."""
    def in_order(copies, kernels):
        return _time_ordered(_merge_in_order(copies), _merge_in_order(kernels))
    r = check("lab05.ex1", in_order)
    assert r.status == "wrong" and "shuffled order" in _first_line(r), _first_line(r)


def test_ex1_a_typed_constant_fails_and_names_another_case(expected):
    cases = expected["lab05.ex1"]
    shown = cases[0][1]
    r = check("lab05.ex1", lambda copies, kernels: shown)
    named = next(c.name for c, v in cases if abs(v - shown) > 0.002)
    assert r.status == "wrong" and named in _first_line(r)


def test_ex1_a_percent_reads_as_that_slip(expected):
    r = check("lab05.ex1", lambda copies, kernels: 100 * _hidden_share(copies, kernels))
    assert r.status == "wrong" and "percent" in r.message.lower()


def test_hidden_fraction_matches_a_brute_force_count_on_random_intervals():
    rng = np.random.default_rng()
    for _ in range(10):
        n, m = int(rng.integers(1, 6)), int(rng.integers(0, 8))  # unsorted, overlapping, some kernels empty
        cp = [(a, a + w) for a, w in zip(rng.uniform(0, 100, n), rng.uniform(1, 30, n), strict=True)]
        kn = [(a, a + w) for a, w in zip(rng.uniform(0, 100, m), rng.uniform(0, 30, m), strict=True)]
        t = np.linspace(-1, 141, 142_001)[:-1] + 0.0005  # midpoints of a 1e-3 µs grid
        in_copy = np.zeros_like(t, dtype=bool)
        for a, b in cp:
            in_copy |= (t >= a) & (t < b)
        in_kernel = np.zeros_like(t, dtype=bool)
        for a, b in kn:
            in_kernel |= (t >= a) & (t < b)
        # each of the at most 26 interval ends is off by half a grid step at most: 0.013 µs over at least 1 µs of copy
        assert hidden_fraction(cp, kn) == pytest.approx((in_copy & in_kernel).sum() / in_copy.sum(), abs=0.02)
        assert _hidden_share(cp, kn) == pytest.approx(hidden_fraction(cp, kn), abs=1e-12)


# ---------------------------------------------------------------- ex3: the bound of hiding a copy
def test_ex3_right_function_passes_and_is_the_lab_formula_on_the_pageable_row(expected, copies):
    def worked(period_ms, exposed_copy_ms, copy_ms, kernel_ms):
        return period_ms / max(period_ms - exposed_copy_ms, copy_ms, kernel_ms)
    assert check("lab05.ex3", worked).status == "correct"
    (c, v) = expected["lab05.ex3"][0]
    pg = copies.loc["pageable"]
    assert "pageable" in c.name and c.args == tuple(float(pg[k]) for k in keys.BOUND_ARGS)
    assert v == pytest.approx(overlap_bound(pg["period_ms"], pg["exposed_copy_ms"], [pg["copy_ms"], pg["kernel_ms"]])["bound"])
    assert overlap_bound(*c.args[:2], c.args[2:])["binds"] == "overlap floor"  # the lab's point: the copy binds


@pytest.mark.parametrize("fn, case", [
    (lambda p, x, c, k: p / (p - x), "pageable step, "),                      # Amdahl's floor alone
    (lambda p, x, c, k: p / max(c, k), "pinned step, "),                      # the overlap floor alone
    (lambda p, x, c, k: max(p / (p - x), p / max(c, k)), "pageable step, "),  # the larger bound, not the smaller
    (lambda p, x, c, k: min(p / (p - x), p / min(c, k)), "pageable step, "),  # the shorter part as the floor
], ids=["amdahl alone", "overlap floor alone", "max of the two", "min(copy, kernels)"])
def test_ex3_a_half_right_function_fails_on_a_named_case(fn, case, expected):
    r = check("lab05.ex3", fn)
    assert r.status == "wrong" and case in _first_line(r), _first_line(r)


def test_ex3_each_perturbed_case_is_decided_by_what_it_names(expected):
    got = {c.name: (c, v) for c, v in expected["lab05.ex3"]}
    binds = {n: overlap_bound(*c.args[:2], c.args[2:])["binds"] for n, (c, _) in got.items()}
    assert [b for n, b in binds.items() if "copy at a tenth" in n] == ["amdahl"]
    assert [v for n, (_, v) in got.items() if "no copy time exposed" in n] == [1.0]
    r = check("lab05.ex3", lambda p, x, c, k: min(p / (p - x), p / c) if x else 1.1)
    assert r.status == "wrong" and "no copy time exposed" in _first_line(r)


def test_ex3_a_typed_constant_fails_and_names_another_case(expected):
    shown = expected["lab05.ex3"][0][1]
    r = check("lab05.ex3", lambda *a: shown)
    assert r.status == "wrong" and "(this lab)' (case 2 of" in _first_line(r)


# ---------------------------------------------------------------- q8: read in Perfetto
def test_q8_key_is_the_stream_of_the_copies_beside_the_kernels():
    tr = keys.double_buffered_trace()
    if tr is None:
        pytest.skip("no recorded double-buffered trace")
    s = copy_stream(tr)
    g = tr.gpu_events(scope="all")
    kernel_streams = set(g.loc[g["cat"] == "kernel", "stream"].astype(int))
    assert s not in kernel_streams  # the side stream: not the matmuls' row
    assert check("lab05.q8", s, evidence=tr).correct and not check("lab05.q8", min(kernel_streams), evidence=tr).correct
    grader.grader_evidence.cache_clear()
    try:
        assert grader.expected_for_grading(question("lab05.q8")) == s
    finally:
        grader.grader_evidence.cache_clear()


def test_copy_stream_refuses_a_trace_whose_copies_run_on_the_kernels_stream():
    st = lab05.store()
    if st is None or "trace_copy_pinned" not in st.names():
        pytest.skip("no recorded pinned trace")
    with pytest.raises(ValueError, match=r"HtoD copies launched by the profiled steps on streams \[7\], none of them "
                                         r"while a kernel ran; expected a copy on a second stream"):
        copy_stream(load_trace(st.load("trace_copy_pinned")))


def _ev(name, cat, ts, dur, pid, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_copy_stream_takes_the_stream_with_most_copy_time_under_kernels():
    """Two side streams on a synthetic trace: a short copy under the kernel on stream 9, a long one on stream 13."""
    rng = np.random.default_rng()
    k0 = float(rng.uniform(50, 100))
    ev = [_ev("ProfilerStep#0", "user_annotation", 0, 2000, 1, 1)]
    for corr, (name, cat, start, dur, stream) in enumerate((
            ("gemm", "kernel", k0, 1000, 7), ("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", k0 + 10, 50, 9),
            ("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", k0 + 100, 500, 13)), start=1):
        ev.append(_ev("cudaLaunchKernel", "cuda_runtime", corr, 1, 1, 1, correlation=corr))
        ev.append(_ev(name, cat, start, dur, 0, stream, correlation=corr, stream=stream, device=0))
    assert copy_stream(Trace({"traceEvents": ev})) == 13


def test_export_names_every_row_and_keeps_the_events(tmp_path, monkeypatch):
    st = lab05.store()
    if st is None or "trace_copy_double_buffered" not in st.names():
        pytest.skip("no recorded double-buffered trace")
    tr = load_trace(st.load("trace_copy_double_buffered"))
    monkeypatch.chdir(tmp_path)
    paths = lab05.export_for_perfetto({"double_buffered": tr})
    assert paths["double_buffered"] == lab05.PERFETTO_DIR / "lab05_double_buffered.json"
    data = json.loads((tmp_path / paths["double_buffered"]).read_text())
    names = {(e["name"], e["pid"], e.get("tid")): e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M"}
    s = copy_stream(tr)
    assert names[("thread_name", 0, s)] == f"stream {s}" and names[("process_name", 0, None)] == "GPU 0"
    assert [e for e in data["traceEvents"] if e["ph"] != "M"] == tr.data["traceEvents"]
    again = load_trace(tmp_path / paths["double_buffered"])
    assert again.gpu_events(scope="all").equals(tr.gpu_events(scope="all"))
    assert copy_stream(again) == s


def test_export_leaves_rows_a_trace_already_names(tmp_path):
    ev = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "my compute stream"}},
          _ev("gemm", "kernel", 0, 10, 0, 7, stream=7, device=0), _ev("f", "cpu_op", 0, 5, 42, 43)]
    data = json.loads(Trace({"traceEvents": ev}).export_chrome_trace(tmp_path / "t.json").read_text())
    names = [(e["name"], e["pid"], e.get("tid"), e["args"]["name"]) for e in data["traceEvents"] if e["ph"] == "M"]
    assert ("thread_name", 0, 7, "my compute stream") in names and ("thread_name", 0, 7, "stream 7") not in names
    assert {("process_name", 0, None, "GPU 0"), ("process_name", 42, None, "CPU"),
            ("thread_name", 42, 43, "thread 43")} <= set(names)


def test_every_recorded_gpu_has_the_cases_it_names():
    """The held-out GPU's cases exist wherever a second recorded set holds the copy traces."""
    sets = [s for s in evidence.recordings() if "trace_copy_double_buffered" in evidence.reference(s).names()]
    if len(sets) < 2:
        pytest.skip("one recorded set only")
    names = [c.name for c in keys.hidden_share_cases()]
    assert sum("recording (held out)" in n for n in names) >= 1
