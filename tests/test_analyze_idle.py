"""Issue 40: ``analyze``'s idle, stream, launch-delay and short-kernel tables (analysis/idle.py) on every committed
trace with steps: the idle rows and the merged busy time make the steady window, each stream's waits make its
idle time, and the launch and short-kernel counts match a count recomputed here from the raw chrome-trace events
(ProfilerStep ranges, runtime calls and GPU events joined by their ``correlation`` arg). HTA 0.5.0's idle time
breakdown is recomputed on the H100 bubble/fixed pair."""
from __future__ import annotations

import functools
import json
import logging
import statistics

import numpy as np
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import idle as analysis_idle
from infralens_lab.analysis.joins import idle_budget
from infralens_lab.analyze import (
    IDLE_TABLE,
    KERNELS_TABLE,
    LAUNCH_TABLE,
    SHORT_TABLE,
    STEPS_TABLE,
    STREAMS_TABLE,
    analyze,
    single,
)
from infralens_lab.parse.trace import GPU_CATS, RUNTIME_CATS, TraceError, load_trace, step_gpu_work

SETS = ("nvidia-h200", "nvidia-h100-80gb-hbm3")
REL = 1e-6


def _step_traces():
    out = []
    for gpu in SETS:
        st = evidence.reference(gpu)
        for name in st.names():
            if name.startswith(("trace_", "resnet_trace_")) and name != "trace_summary" and "pipeline" not in name:
                out.append(pytest.param(gpu, name, id=f"{gpu}-{name}"))
    return out


DDP_SET = "2x-nvidia-h100-80gb-hbm3"
DDP_LABELS = ("cap 25 MiB", "mystery")  # two NCCL configs of its DDP run (ncclDevKernel_* on a stream of their own)


def _values(gpu, name):
    return evidence.reference(gpu).load(name).values


@functools.cache
def _case(key: tuple) -> tuple[dict, object]:
    """(the trace's recorded values, its parsed Trace) for a case key of :func:`_all_traces`, read and parsed once
    for the three tests that check every trace (they read both; none changes them)."""
    if key[0] == "ddp":
        cfgs = evidence.reference(DDP_SET).load("ddp_rank0").values["configs"]
        values = next(c["trace"] for c in cfgs if c["label"] == key[1])
    else:
        values = _values(*key[1:])
    return values, load_trace(values)


def _all_traces():
    """Case keys (read when a test runs, not while pytest collects): every committed single-GPU trace with steps of
    :data:`SETS`, and :data:`DDP_LABELS` of the 2-GPU DDP run."""
    return ([pytest.param(("set", *p.values), id=p.id) for p in _step_traces()]
            + [pytest.param(("ddp", label), id=f"ddp_rank0-{label}") for label in DDP_LABELS])


# ---------------------------------------------------------------- raw recount: no Trace, only the JSON events
def _raw(values: dict):
    """GPU events launched inside a ProfilerStep range (the launch call's start inside the range, same pid), each
    with its launch call, by the ``correlation`` arg alone."""
    ev = [e for e in values["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["pid"], float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ev
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep")]
    calls = {}
    for e in ev:
        if e.get("cat") in RUNTIME_CATS and "correlation" in (e.get("args") or {}):
            calls[e["args"]["correlation"]] = e
    out = []
    for e in ev:
        c = calls.get((e.get("args") or {}).get("correlation")) if e.get("cat") in GPU_CATS else None
        if c is None:
            continue
        t = float(c["ts"])
        if any(p == c["pid"] and a <= t < b for p, a, b in steps):
            out.append((e, c))
    return out


def _raw_host_waits(values: dict) -> int:
    """Gaps on one stream whose next event's launch call started at or after the previous event's end."""
    by_stream: dict = {}
    for e, c in _raw(values):
        by_stream.setdefault(e["args"]["stream"], []).append((float(e["ts"]), float(e["ts"]) + float(e["dur"]),
                                                              float(c["ts"])))
    n = 0
    for evs in by_stream.values():
        evs.sort(key=lambda x: x[0])
        end = evs[0][1]
        for s, e, call in evs[1:]:
            n += s > end and call >= end
            end = max(end, e)
    return n


# ---------------------------------------------------------------- every committed trace with steps
@pytest.mark.parametrize("case", _all_traces())
def test_idle_rows_and_busy_time_make_the_window(case):
    _, tr = _case(case)
    tables, notes = single(tr)
    idle = tables[IDLE_TABLE]
    a, b, n = analysis_idle.window(tr)
    win, busy = b - a, idle.attrs["busy_us"]
    total_us = float(idle["idle_ms"].sum()) * 1e3
    assert total_us + busy == pytest.approx(win, rel=REL)  # ALL idle time is in the rows
    assert idle.attrs["window_us"] == pytest.approx(win) and (idle["idle_ms"] >= 0).all()
    assert (idle["idle_ms"] * 1e3 <= win * (1 + REL)).all() and busy <= win * (1 + REL)
    if total_us > 0:
        assert idle["share_of_idle"].sum() == pytest.approx(1.0)
    s = tr.summary()
    assert busy == pytest.approx(s["gpu_busy_us"], rel=REL) and win == pytest.approx(s["window_us"], rel=REL)
    # the rows over the threshold are the listed gaps (Trace.idle_gaps) inside the window, to the µs
    gaps = tr.idle_gaps()
    inside = gaps[(gaps["start_us"] >= a - 1e-6) & (gaps["end_us"] <= b + 1e-6)]
    short = idle["cause"] == analysis_idle.SHORT_ROW.format(t=50)
    assert short.sum() == 1
    assert idle.loc[~short, "idle_ms"].sum() * 1e3 == pytest.approx(inside["gap_us"].sum(), rel=REL, abs=1e-6)
    assert idle.loc[~short, "gaps"].sum() == len(inside)
    if tr.steady_window() is not None:  # the short row is idle_budget's idle_under, the rest its idle_over
        bud = idle_budget(tr)
        assert idle.loc[short, "ms_per_step"].iloc[0] == pytest.approx(bud["idle_under_ms"], rel=REL, abs=1e-9)
        assert idle.loc[~short, "ms_per_step"].sum() == pytest.approx(bud["idle_over_ms"], rel=REL, abs=1e-9)
        assert busy / n / 1e3 == pytest.approx(bud["busy_ms"], rel=REL)
    # steps: the sum over streams is at least the merged time; the merged time fits in a step's period
    st = tables[STEPS_TABLE]
    assert (st["gpu_busy_ms"] <= st["gpu_work_sum_ms"] * (1 + REL)).all()
    assert st["gpu_busy_ms"].tolist() == pytest.approx((step_gpu_work(tr)["gpu_busy_us"] / 1e3).tolist())
    w = step_gpu_work(tr)
    assert (st["gpu_busy_ms"] * 1e3 <= (w["gpu_end_us"] - w["gpu_start_us"]).fillna(0) * (1 + REL)).all()
    assert busy / n <= win / n * (1 + REL)  # busy per steady step <= the period; a single step may exceed the mean
    # period when steps differ (trace_copy_pageable's third step: 16.4 ms of GPU work against a 10.9 ms mean)
    assert any(x.startswith("idle: ") for x in notes)
    assert {IDLE_TABLE, STREAMS_TABLE, LAUNCH_TABLE, SHORT_TABLE, KERNELS_TABLE, STEPS_TABLE} <= set(tables)


@pytest.mark.parametrize("case", _all_traces())
def test_each_streams_waits_make_its_idle_time(case):
    values, tr = _case(case)
    a, b, _ = analysis_idle.window(tr)
    si = analysis_idle.stream_idle(tr)
    assert len(si) == tr.gpu_events(scope="steps")["stream"].nunique()
    parts = si["host_wait_ms"] + si["other_stream_wait_ms"] + si["other_ms"]
    assert parts.tolist() == pytest.approx(si["idle_ms"].tolist(), rel=REL, abs=1e-9)
    assert (si[["busy_ms", "idle_ms", "host_wait_ms", "other_stream_wait_ms", "other_ms"]] >= 0).all().all()
    win_ms = (b - a) / 1e3
    assert ((si["busy_ms"] + si["idle_ms"]) <= win_ms * (1 + REL)).all()
    g = tr.gpu_events(scope="steps")
    for r in si.itertuples():
        mine = g[g["stream"] == r.stream]
        if mine["start_us"].min() <= a and mine["end_us"].max() >= b:  # work at both ends: the window exactly
            assert r.busy_ms + r.idle_ms == pytest.approx(win_ms, rel=REL)
    if len(si) == 1:  # one stream: its busy time is the GPU's, and nothing runs elsewhere to wait on
        assert si["busy_ms"].iloc[0] * 1e3 == pytest.approx(tr.summary()["gpu_busy_us"], rel=REL)
        assert si["other_stream_wait_ms"].iloc[0] == 0
    # the host-wait count, recomputed from the raw events
    gaps = analysis_idle.stream_gaps(tr)
    assert int((gaps["category"] == "host wait").sum()) == _raw_host_waits(values)


@pytest.mark.parametrize("case", _all_traces())
def test_launch_delay_and_short_kernels_match_a_raw_recount(case):
    values, tr = _case(case)
    raw = _raw(values)
    ld = analysis_idle.launch_delay(tr)
    every = ld.iloc[0]
    assert every["call"] == "all launch calls"
    assert every["gpu_events"] == len(raw) == ld["gpu_events"].iloc[1:].sum()
    assert every["calls"] == len({id(c) for _, c in raw})
    delays = [float(e["ts"]) - float(c["ts"]) for e, c in raw]
    assert every["delay_median_us"] == pytest.approx(statistics.median(delays), abs=1e-6)
    assert every["delay_max_us"] == pytest.approx(max(delays), abs=1e-6)
    assert every["delay_median_us"] <= every["delay_p90_us"] <= every["delay_max_us"]
    assert every["call_median_us"] <= every["call_p90_us"] <= every["call_max_us"]
    sk = analysis_idle.short_kernels(tr)
    kernels = [(e, c) for e, c in raw if e["cat"] == "kernel"]
    short = [(e, c) for e, c in kernels if float(e["dur"]) < analysis_idle.SHORT_KERNEL_US]
    assert sk.attrs["kernels"] == len(kernels)
    if not short:
        assert sk.empty
        return
    top = sk.iloc[0]
    assert top["count"] == len(short) and top["share_of_kernels"] == pytest.approx(len(short) / len(kernels))
    assert top["total_ms"] == pytest.approx(sum(float(e["dur"]) for e, _ in short) / 1e3, rel=REL)
    assert top["launch_calls"] == len({id(c) for _, c in short})
    assert top["launch_overhead_ms"] == pytest.approx(top["launch_calls"] * top["call_median_us"] / 1e3)
    assert 0 < top["share_of_kernel_time"] <= 1 and (sk["count"].iloc[1:] <= top["count"]).all()


# ---------------------------------------------------------------- the launch kinds, named
def test_a_graph_launch_is_one_call_for_many_kernels():
    tr = load_trace(_values("nvidia-h100-80gb-hbm3", "trace_launch_graph"))
    ld = analysis_idle.launch_delay(tr)
    graph = ld[ld["call"].str.startswith("cudaGraphLaunch")].iloc[0]
    assert "from the graph launch" in graph["call"]
    assert graph["gpu_events"] == 600 and graph["calls"] == 3  # 200 kernels per replay, one call per step
    sk = analysis_idle.short_kernels(tr).iloc[0]
    assert sk["count"] == 600 and sk["launch_calls"] == 3  # launch overhead: 3 calls, not 600


def test_sub_microsecond_kernels_and_cuLaunchKernel():
    tr = load_trace(_values("nvidia-h100-80gb-hbm3", "trace_launch_eager"))
    k = tr.gpu_events(scope="steps")
    assert (k["dur_us"] < 1.5).mean() > 0.5  # about a µs each: kept to the trace's sub-µs timestamps
    sk = analysis_idle.short_kernels(tr).iloc[0]
    assert sk["count"] == len(k) and sk["launch_calls"] == len(k)
    ld = analysis_idle.launch_delay(load_trace(_values("nvidia-h100-80gb-hbm3", "trace_compile_breaks")))
    assert {"cuLaunchKernel", "cudaLaunchKernelExC"} <= set(ld["call"])


def test_ncclDevKernel_runs_on_a_stream_that_waits_on_the_others():
    tr = load_trace(_case(("ddp", DDP_LABELS[0]))[0])
    si = analysis_idle.stream_idle(tr).set_index("kind")
    assert {"nccl", "compute"} <= set(si.index)
    assert tr.gpu_events(scope="steps")["name"].str.startswith("ncclDevKernel_").any()
    assert si.loc["nccl", "other_stream_wait_ms"] > 0  # the all-reduce waits on the backward's gradients


def _synthetic():
    """Two streams, one step: A (s7) then C (s7, launched in time, after B on s8 ends), D (s7, launched after C
    ended: host wait), E (s7, launched in time, nothing ended elsewhere: other)."""
    def x(name, cat, ts, dur, tid, **args):
        return {"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}
    ev = [x("ProfilerStep#1", "user_annotation", 0, 100, 1), x("ProfilerStep#2", "user_annotation", 100, 10, 1)]
    launches = [("A", 7, 1, 10, 10), ("B", 8, 2, 25, 15), ("C", 7, 3, 45, 5), ("D", 7, 55, 60, 2), ("E", 7, 56, 63, 1)]
    for i, (name, stream, call, ts, dur) in enumerate(launches):
        ev.append(x("cudaLaunchKernel", "cuda_runtime", call, 0.5, 1, correlation=i + 1))
        ev.append(x(name, "kernel", ts, dur, stream, correlation=i + 1, stream=stream))
    return {"traceEvents": ev}


def test_the_stream_rule_on_a_trace_built_by_hand():
    tr = load_trace(_synthetic())
    gaps = analysis_idle.stream_gaps(tr)
    s7 = gaps[gaps["stream"] == 7]
    assert s7["category"].tolist() == ["other-stream wait", "host wait", "other"]
    assert s7["gap_us"].tolist() == pytest.approx([25.0, 10.0, 1.0])
    assert gaps[gaps["stream"] == 8].empty  # one event: no gap


def test_a_cpu_only_trace_keeps_its_two_tables():
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": 10 * i,
           "dur": 9} for i in range(3)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10 * i + 1, "dur": 5}
           for i in range(3)]
    tables, notes = single(load_trace({"traceEvents": ev}))
    assert list(tables) == ["top ops (CPU time)", "steps (CPU)"] and notes[0].startswith("CPU-only trace")


# ---------------------------------------------------------------- against HTA 0.5.0
def _hta_breakdown(values, tmp_path, monkeypatch):
    hta = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is a test extra")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    logging.getLogger("hta").setLevel(logging.ERROR)
    (tmp_path / "rank-0.json").write_text(json.dumps({**values, "distributedInfo": {"rank": 0}}))
    ta = hta.TraceAnalysis(trace_dir=str(tmp_path), include_last_profiler_step=True)
    res, _ = ta.get_idle_time_breakdown(visualize=False)
    return res.groupby("idle_category")["idle_time"].sum()


@pytest.mark.filterwarnings("ignore::Warning:hta.*")
@pytest.mark.parametrize("name", ["trace_bubble", "trace_fixed"])
def test_host_wait_matches_htas_idle_time_breakdown(name, tmp_path, monkeypatch):
    """HTA's host wait is ours (same test, same events: HTA keeps the GPU work from the first profiled step on,
    which on these traces is the work the profiled steps launched); its kernel wait (a non-host gap under 30,
    µs in effect) plus other is our other-stream wait plus other. HTA rounds its table to 0.01 µs."""
    values = _values("nvidia-h100-80gb-hbm3", name)
    theirs = _hta_breakdown(values, tmp_path, monkeypatch)
    gaps = analysis_idle.stream_gaps(load_trace(values))
    ours = gaps.groupby("category")["gap_us"].sum()
    assert ours.get("host wait", 0.0) == pytest.approx(theirs.get("host_wait", 0.0), abs=0.02)
    assert ours.get("other-stream wait", 0.0) + ours.get("other", 0.0) == pytest.approx(
        theirs.get("kernel_wait", 0.0) + theirs.get("other", 0.0), abs=0.02)
    kernel_wait = gaps[(gaps["category"] != "host wait") & (gaps["gap_us"] < 30)]["gap_us"].sum()
    assert kernel_wait == pytest.approx(theirs.get("kernel_wait", 0.0), abs=0.02)


def test_the_bubble_reads_as_host_wait_and_the_fix_as_short_gaps():
    """The numbers the issue quotes for the H100 pair: the bubble's idle is the host's (its `data` range), the
    fix leaves only the short gaps between back-to-back launches."""
    bub = analyze(load_trace(_values("nvidia-h100-80gb-hbm3", "trace_bubble")))
    fix = analyze(load_trace(_values("nvidia-h100-80gb-hbm3", "trace_fixed")))
    bi, fi = bub.tables[IDLE_TABLE].set_index("cause"), fix.tables[IDLE_TABLE].set_index("cause")
    short = analysis_idle.SHORT_ROW.format(t=50)
    assert bi["share_of_idle"].idxmax() == "host" and bi.loc["host", "share_of_idle"] > 0.85
    assert fi.loc[short, "share_of_idle"] == pytest.approx(1.0)
    assert bub.tables[STREAMS_TABLE]["host_wait_share"].iloc[0] > 0.9
    assert fix.tables[STREAMS_TABLE]["host_wait_ms"].iloc[0] == 0
    assert np.isfinite(fix.tables[LAUNCH_TABLE]["delay_median_us"]).all()


@pytest.mark.filterwarnings("ignore::Warning:hta.*")
@pytest.mark.parametrize("name", ["trace_bubble", "trace_fixed"])
def test_launch_delay_is_htas_plus_the_call_and_counts_what_it_leaves_out(name, tmp_path, monkeypatch):
    """HTA's cuda_kernel_launch_stats: delay from the call's END, clipped at 0, for cudaLaunchKernel(ExC) and
    cudaMemcpy/MemsetAsync only. Ours from the call's start, for every launch call: on the same calls ours less the
    call's duration (clipped) is HTA's, event by event in sum and median; the rest (cuLaunchKernel) are ours alone."""
    hta = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is a test extra")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    logging.getLogger("hta").setLevel(logging.ERROR)
    values = _values("nvidia-h100-80gb-hbm3", name)
    (tmp_path / "rank-0.json").write_text(json.dumps({**values, "distributedInfo": {"rank": 0}}))
    theirs = hta.TraceAnalysis(trace_dir=str(tmp_path), include_last_profiler_step=True) \
        .get_cuda_kernel_launch_stats(visualize=False)[0]
    r = analysis_idle.launch_records(load_trace(values))
    same = r[r["call"].isin(["cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"])]
    from_end = np.clip(same["delay_us"] - same["call_dur_us"], 0, None)
    assert len(theirs) == len(same) < len(r)  # HTA leaves out the cuLaunchKernel launches (Triton's, cuBLASLt's)
    assert from_end.sum() == pytest.approx(theirs["launch_delay"].sum(), rel=REL)
    assert np.median(from_end) == pytest.approx(theirs["launch_delay"].median(), rel=REL)
    assert same["call_dur_us"].sum() == pytest.approx(theirs["cpu_duration"].sum(), rel=REL)


def test_gpu_events_no_profiled_step_launched_get_one_clear_message():
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": 10 * i,
           "dur": 9} for i in range(3)]
    ev += [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 * i + 1, "dur": 5,
            "args": {"stream": 7}} for i in range(3)]  # no correlation, no runtime call
    with pytest.raises(TraceError, match="3 GPU events, none launched inside a ProfilerStep range"):
        analyze({"traceEvents": ev})
