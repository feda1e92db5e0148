"""The series' one attribution rule (parse.trace.Trace.gpu_step): GPU work belongs to the profiled step whose
CPU range holds its launch call, on every committed trace, with the invariants that must hold and the
numbers the review found wrong under the old start-time window (issues 25, 27, 32)."""
from __future__ import annotations

import pytest

from infralens_lab import evidence
from infralens_lab.analysis import overlap
from infralens_lab.parse.trace import GPU_CATS, load_trace, step_gpu_work
from infralens_lab.present.trace_tables import hot_kernel_name, hot_kernels

SETS = {"h200": "nvidia-h200", "h100": "nvidia-h100-80gb-hbm3"}


def _store(gpu):
    return evidence.reference(SETS[gpu])


def _traces():
    out = []
    for gpu in SETS:
        st = _store(gpu)
        for name in st.names():
            if name.startswith(("trace_", "resnet_trace_")) and name != "trace_summary":
                out.append(pytest.param(gpu, name, id=f"{gpu}-{name}"))
    return out


@pytest.fixture(scope="module")
def cache():
    return {}


def _tr(cache, gpu, name):
    if (gpu, name) not in cache:
        cache[(gpu, name)] = load_trace(_store(gpu).load(name))
    return cache[(gpu, name)]


@pytest.mark.parametrize("gpu,name", _traces())
def test_invariants_on_every_committed_trace(cache, gpu, name):
    tr = _tr(cache, gpu, name)
    ev = tr.events
    gpu_rows = ev[ev["cat"].isin(GPU_CATS)]
    step = tr.gpu_step()
    assert set(step.index) == set(gpu_rows.index)  # every GPU event gets a step or -1
    if not tr.has_steps:  # threaded pipeline traces: no schedule, so every event is in scope
        assert len(tr.gpu_events(scope="steps")) == len(gpu_rows)
        return
    st = tr.steps()
    # a step's work was launched inside its CPU range (checked against the launch call's own time)
    for g, k in step[step >= 0].items():
        t = ev.at[tr.launcher[g], "start_us"]
        assert st.at[k, "cpu_start_us"] <= t < st.at[k, "cpu_end_us"]
    w = step_gpu_work(tr)
    # counts are whole numbers by construction, and the parts add up to the whole
    assert w["gpu_ops"].sum() + tr.leftover()["events"] == len(gpu_rows)
    assert w["kernels"].sum() == tr.kernels()["count"].sum()
    # a part never exceeds its whole: merged busy <= summed work, busy <= the window it is measured in
    assert (w["gpu_busy_us"] <= w["gpu_work_us"] + 1e-6).all()
    s = tr.summary()
    assert 0 < s["gpu_busy_us"] <= s["window_us"] + 1e-6 and 0 < s["gpu_utilization"] <= 1 + 1e-9
    assert abs(tr.kernels()["pct"].sum() - 100) < 1e-6


def test_h200_hot_kernel_counts_only_the_profiled_steps(cache):
    # the H200 set of 2026-12-03: the profiled steps launched 51 (17 per step), 10.72 ms, 19.09 % of their kernel
    # time; the trace's other kernels (166 outside the steps) launch none of it
    tr = _tr(cache, "h200", "trace_fixed")
    top = tr.kernels().iloc[0]
    assert top["name"].startswith("sm80_xmma_gemm_f32f32") and top["count"] == 51
    assert top["total_us"] == pytest.approx(10_722, abs=5) and top["pct"] == pytest.approx(19.09, abs=0.01)
    everything = tr.kernels(scope="all").set_index("name").loc[top["name"]]
    assert everything["count"] >= top["count"] and tr.leftover()["kernels"] == 166


def test_h100_hot_kernel_is_the_one_the_steps_launched(cache):
    # in the H100 recording of 2026-11-23 a CUTLASS SIMT GEMM from the warm-up step looked hottest over the whole
    # trace, so lab 01 would have handed the wrong kernel to ncu; the re-recorded set (2026-11-25) is read by the
    # same rule: the hot kernel is the one the profiled steps launched most time in, counted from their events
    tr = _tr(cache, "h100", "trace_fixed")
    assert hot_kernel_name(tr).startswith("sm80_xmma_gemm_f32f32")
    g = tr.gpu_events(scope="steps")
    k = g[g["cat"] == "kernel"].groupby("name")["dur_us"].sum()
    assert hot_kernel_name(tr) == k.idxmax()
    assert hot_kernels(tr)["pct_of_kernel_time"].iloc[0] == pytest.approx(100 * k.max() / k.sum())


def test_busy_share_is_measured_on_the_work_the_steps_launched(cache):
    tr = _tr(cache, "h200", "trace_copy_pinned")
    st, g = tr.steps(), tr.gpu_events(scope="steps")
    # the CPU's profiled window ends before the steps' first GPU work starts: it runs that far ahead
    assert st["cpu_end_us"].max() < g["start_us"].min()
    s = tr.summary()
    assert s["window_us"] > 0 and s["cpu_window_us"] < s["window_us"]


# the H200 numbers are those of its set of 2026-12-03 (the review's, issue 27, were 0.6375 and 0.0428 ms on the set
# of 2026-11-23); the H100 set's are None: the same checks without pinned values
@pytest.mark.parametrize("gpu,copy_ms,exposed_ms", [("h200", 0.6083, 0.0773), ("h100", None, None)])
def test_lab05_copy_per_step_counts_three_copies_not_four(cache, gpu, copy_ms, exposed_ms):
    pinned = overlap.copy_overlap(_tr(cache, gpu, "trace_copy_pinned"))
    assert pinned["copies"] == pinned["steps"] == 3  # one copy per step; the warm-up's copy is left out
    db = overlap.copy_overlap(_tr(cache, gpu, "trace_copy_double_buffered"))
    copy_ms = copy_ms or pinned["copy_us"] / pinned["steps"] / 1e3
    assert pinned["copy_us"] / pinned["steps"] / 1e3 == pytest.approx(copy_ms, abs=5e-4)
    if exposed_ms is not None:
        assert db["exposed_us"] / db["steps"] / 1e3 == pytest.approx(exposed_ms, abs=5e-4)
    # a period can never be shorter than the single-stream copy it hides: max(copy, compute) bounds it
    w = step_gpu_work(_tr(cache, gpu, "trace_copy_double_buffered"))
    period_ms = (w["gpu_end_us"].iloc[-1] - w["gpu_end_us"].iloc[0]) / (len(w) - 1) / 1e3
    assert period_ms >= copy_ms
