"""analysis.overlap: overlap fractions, pipeline periods, launches per step and Amdahl bounds, checked
by hand on synthetic traces, plus the workloads' clear errors without a GPU and the CPU pipeline."""
import math

import pytest
import torch

from infralens_lab.analysis import overlap as analysis_overlap
from infralens_lab.device import is_gpu
from infralens_lab.parse.trace import Trace


def X(name, cat, ts, dur, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


# ---------------------------------------------------------------- intervals
def test_hidden_fraction_by_hand():
    # copy 0-10 and 20-30 (20 µs); kernels 5-25: hides 5-10 and 20-25 = 10 µs -> 0.5
    assert analysis_overlap.hidden_us([(0, 10), (20, 30)], [(5, 25)]) == pytest.approx(10.0)
    assert analysis_overlap.hidden_fraction([(0, 10), (20, 30)], [(5, 25)]) == pytest.approx(0.5)
    # overlapping kernels count once; a copy fully under them is fully hidden
    assert analysis_overlap.hidden_fraction([(2, 8)], [(0, 5), (3, 10)]) == pytest.approx(1.0)
    assert analysis_overlap.hidden_fraction([(0, 4)], [(4, 9)]) == pytest.approx(0.0)  # touching is not overlapping
    assert analysis_overlap.hidden_fraction([], [(0, 1)]) is None


@pytest.mark.parametrize("bad", [[(5, 1)], [(0, float("nan"))], [("a", 1)], [(1,)]])
def test_hidden_fraction_rejects_bad_intervals(bad):
    with pytest.raises(ValueError, match="expected"):
        analysis_overlap.hidden_fraction(bad, [(0, 1)])


def _copy_trace():
    """Two H2D copies on stream 7, kernels on stream 3: copy 100-200 under kernel 150-400 (half hidden),
    copy 500-600 with nothing under it. Launch calls on the CPU carry the correlation ids."""
    ev = [X("ProfilerStep#1", "user_annotation", 0, 1000),
          X("cudaMemcpyAsync", "cuda_runtime", 90, 5, correlation=1),
          X("cudaLaunchKernel", "cuda_runtime", 140, 5, correlation=2),
          X("cudaMemcpyAsync", "cuda_runtime", 490, 5, correlation=3),
          X("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 100, 100, tid=7, pid=0, correlation=1, stream=7),
          X("gemm", "kernel", 150, 250, tid=3, pid=0, correlation=2, stream=3),
          X("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 500, 100, tid=7, pid=0, correlation=3, stream=7),
          X("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 700, 50, tid=3, pid=0, stream=3)]
    return Trace({"traceEvents": ev})


def test_copy_overlap_by_hand():
    c = analysis_overlap.copy_overlap(_copy_trace())
    # HtoD copy time 200 µs; hidden 150-200 = 50 µs; the DtoH copy is not counted
    assert c == {"copies": 2, "copy_us": 200.0, "hidden_us": 50.0, "exposed_us": 150.0, "fraction": 0.25, "steps": 1}


def test_copy_overlap_leaves_out_a_copy_the_profiled_steps_did_not_launch():
    # a copy still queued from the warm-up step (its launch call was not recorded) runs inside the window:
    # it is no copy of the profiled step, whatever its start time (the attribution rule)
    tr = _copy_trace()
    tr = Trace({"traceEvents": tr.data["traceEvents"] + [
        X("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 20, 60, tid=7, pid=0, correlation=77, stream=7)]})
    c = analysis_overlap.copy_overlap(tr)
    assert c["copies"] == 2 and c["copy_us"] == 200.0 and c["steps"] == 1


def test_copy_overlap_without_copies_is_none():
    tr = Trace({"traceEvents": [X("k", "kernel", 0, 10, pid=0, tid=3)]})
    assert analysis_overlap.copy_overlap(tr)["fraction"] is None


# ---------------------------------------------------------------- pipeline
def _stages(s0, s1, period, n, start=0.0, overlapped=True):
    """Intervals of a steady pipeline: item i's stage0 at start + i * period, stage1 right after it
    (overlapped: next stage0 starts while this stage1 runs)."""
    st0 = [(start + i * period, start + i * period + s0) for i in range(n)]
    st1 = [(a + s0, a + s0 + s1) for a, _ in st0]
    return st0, st1


def test_pipeline_serialised_by_hand():
    st0, st1 = _stages(20, 30, 50, 6)  # period = s0 + s1: turns taken
    m = analysis_overlap.pipeline_metrics(st0, st1, skip=1)
    assert (m["items"], m["period_us"], m["stage0_us"], m["stage1_us"]) == (5, 50.0, 20.0, 30.0)
    assert m["serial_us"] == 50.0 and m["overlapped_us"] == 30.0
    assert m["overlap_score"] == 0.0 and m["hidden_fraction"] == 0.0 and m["verdict"] == "serialised"


def test_pipeline_serialised_with_a_hand_off_above_the_sum():
    """Turns taken plus 9 µs between them: the period (59) is over the sum (50) by more than the margin
    (0.25 * 20 = 5), and it is still serialised, not 'between'."""
    st0 = [(i * 59.0, i * 59.0 + 20) for i in range(6)]
    st1 = [(a + 29, a + 59) for a, _ in st0]  # stage 1 starts 9 µs after stage 0 ends
    m = analysis_overlap.pipeline_metrics(st0, st1, skip=1)
    assert m["period_us"] == 59.0 and m["overlap_score"] == 0.0 and m["verdict"] == "serialised"


def test_pipeline_overlapped_by_hand():
    st0, st1 = _stages(20, 30, 30, 6)  # period = max: stage0 of item i+1 runs under stage1 of item i
    m = analysis_overlap.pipeline_metrics(st0, st1, skip=1)
    assert m["period_us"] == 30.0 and m["overlap_score"] == 1.0 and m["verdict"] == "overlapped"
    # stage0 of items 2..5 lies under stage1 of the item before; item 1's stage0 is under item 0's
    # stage1, which skip=1 dropped: 4 of 5 stage-0 intervals hidden
    assert m["hidden_fraction"] == pytest.approx(0.8)


def test_pipeline_between_and_errors():
    st0, st1 = _stages(20, 30, 40, 5)  # halfway: score (50 - 40) / 20 = 0.5
    m = analysis_overlap.pipeline_metrics(st0, st1, skip=0)
    assert m["overlap_score"] == pytest.approx(0.5) and m["verdict"] == "between"
    with pytest.raises(ValueError, match="at least 2 items"):
        analysis_overlap.pipeline_metrics(st0[:2], st1[:2], skip=1)
    with pytest.raises(ValueError, match="skip"):
        analysis_overlap.pipeline_metrics(st0, st1, skip=-1)


def test_range_intervals_and_metrics_from_a_trace():
    st0, st1 = _stages(200, 300, 300, 4, start=10)
    ev = [X("stage0", "user_annotation", a, b - a, tid=2) for a, b in st0] + \
         [X("stage1", "user_annotation", a, b - a, tid=1) for a, b in st1]
    tr = Trace({"traceEvents": ev})
    assert analysis_overlap.range_intervals(tr, "stage0") == [(a - 10, b - 10) for a, b in st0]  # relative to the first event
    assert analysis_overlap.pipeline_metrics(analysis_overlap.range_intervals(tr, "stage0"), analysis_overlap.range_intervals(tr, "stage1"))["period_us"] == 300.0


# ---------------------------------------------------------------- launches
def test_launches_per_step_by_hand():
    ev = []
    for s, t0 in enumerate((0, 1000)):
        ev.append(X(f"ProfilerStep#{s}", "user_annotation", t0, 500))
        ev.append(X("aten::mul", "cpu_op", t0 + 10, 100))
        ev.append(X("aten::empty", "cpu_op", t0 + 20, 5))  # nested in aten::mul: not top-level
        ev.append(X("cudaLaunchKernel", "cuda_runtime", t0 + 50, 10, correlation=10 * s + 1))
        ev.append(X("aten::add", "cpu_op", t0 + 200, 100))
        ev.append(X("cudaLaunchKernel", "cuda_runtime", t0 + 250, 10, correlation=10 * s + 2))
        ev.append(X("k1", "kernel", t0 + 300, 5, pid=0, tid=7, correlation=10 * s + 1))
        ev.append(X("k2", "kernel", t0 + 310, 5, pid=0, tid=7, correlation=10 * s + 2))
    ev.append(X("ProfilerStep#2", "user_annotation", 2000, 100))
    ev.append(X("cudaGraphLaunch", "cuda_runtime", 2010, 10, correlation=99))
    ev += [X(f"g{i}", "kernel", 2050 + 3 * i, 2, pid=0, tid=7, correlation=99) for i in range(3)]
    t = analysis_overlap.launches_per_step(Trace({"traceEvents": ev}))
    assert list(t["launch_calls"]) == [2, 2, 1]
    assert list(t["graph_launches"]) == [0, 0, 1]
    assert list(t["gpu_events"]) == [2, 2, 3]
    assert list(t["cpu_ops"]) == [2, 2, 0]
    assert list(t["gpu_busy_us"]) == [10.0, 10.0, 6.0]
    assert list(t["cpu_us"]) == [500.0, 500.0, 100.0]
    # the CPU's time: two 100 µs top-level ops (the second's launch call is not inside the first), 10 µs per launch
    assert list(t["op_cpu_us"]) == [200.0, 200.0, 0.0] and list(t["launch_cpu_us"]) == [20.0, 20.0, 10.0]


def test_launches_per_step_needs_steps():
    with pytest.raises(ValueError, match="ProfilerStep"):
        analysis_overlap.launches_per_step(Trace({"traceEvents": [X("aten::mul", "cpu_op", 0, 1)]}))


# ---------------------------------------------------------------- Amdahl and the byte model
def test_amdahl_by_hand():
    assert analysis_overlap.amdahl(0.5) == pytest.approx(2.0)
    assert analysis_overlap.amdahl(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert analysis_overlap.amdahl(0.0) == 1.0
    assert math.isinf(analysis_overlap.amdahl(1.0))
    with pytest.raises(ValueError, match="share between 0 and 1"):
        analysis_overlap.amdahl(1.2)
    with pytest.raises(ValueError, match=">= 1"):
        analysis_overlap.amdahl(0.3, 0.5)


def test_overlap_bound_by_hand():
    # hiding a 4 ms copy of a 5 ms step under 0.7 ms of kernels: Amdahl says 5x, the copy itself floors it at 1.25x
    b = analysis_overlap.overlap_bound(5.0, 4.0, (4.0, 0.7))
    assert b["amdahl"] == pytest.approx(5.0) and b["overlap_floor"] == pytest.approx(1.25)
    assert b["bound"] == pytest.approx(1.25) and b["best_period"] == 4.0 and b["binds"] == "overlap floor"
    # a short copy under long kernels: the rest of the step binds
    b = analysis_overlap.overlap_bound(2.0, 0.5, (0.5, 1.2))
    assert b["bound"] == pytest.approx(2.0 / 1.5) and b["binds"] == "amdahl"
    # a pipeline stage hidden entirely: the rest is the slower stage, the same floor twice
    assert analysis_overlap.overlap_bound(5.0, 2.0, (2.0, 3.0))["binds"] == "both"
    assert analysis_overlap.overlap_bound(1.0, 1.0, (0.5,))["amdahl"] == math.inf


@pytest.mark.parametrize("args, match", [((0.0, 0.0, (1.0,)), "period"), ((1.0, 2.0, (0.5,)), "hidden"),
                                         ((1.0, 0.5, ()), "floors"), ((1.0, 0.5, (2.0,)), "floors")])
def test_overlap_bound_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        analysis_overlap.overlap_bound(*args)


def test_step_bound_holds_both_floors_by_hand():
    # issue 26.5's case: a 19.1 ms step, GPU busy 17.19 ms, CPU 9.16 ms per step; 78% of the GPU work 7.9x faster.
    # GPU floor 17.19 * (0.22 + 0.78 / 7.9) = 5.48 ms is under the CPU's 9.16 ms: the CPU decides, 19.1 / 9.16
    b = analysis_overlap.step_bound(19.1, 17.19, 9.16, 0.78, 7.9)
    assert b.gpu_floor_ms == pytest.approx(17.19 * (0.22 + 0.78 / 7.9)) and b.cpu_floor_ms == 9.16
    assert b.bound == pytest.approx(19.1 / 9.16) and b.limited_by == "cpu" and b.bound < 2.1
    assert b.gpu_only == pytest.approx(19.1 / b.gpu_floor_ms) and b.gpu_only > 3
    # a fix that only removes idle time (fraction 0): the GPU's busy time is the floor when the CPU's is lower
    p = analysis_overlap.step_bound(24.2, 18.8, 12.3)
    assert p.bound == pytest.approx(24.2 / 18.8) and p.limited_by == "gpu" and p.gpu_only == p.bound
    assert analysis_overlap.amdahl_rest(0.5, 2.0) == pytest.approx(0.75) and analysis_overlap.amdahl_rest(0.25) == pytest.approx(0.75)
    assert math.isinf(analysis_overlap.step_bound(10.0, 10.0, 0.0, 1.0).bound)  # all GPU work removed and no CPU floor


@pytest.mark.parametrize("args, match", [
    ((10.0, 12.0, 5.0), "gpu_ms=12.0 is more than the period 10.0"),
    ((10.0, 5.0, -1.0), "cpu_ms=-1.0; expected a finite number"),
    ((float("nan"), 5.0, 1.0), "period_ms=nan"),
    ((10.0, 5.0, 1.0, 1.5), "fraction=1.5; expected a share"),
    ((10.0, 5.0, 1.0, 0.5, 0.5), "speedup=0.5; expected a number >= 1"),
])
def test_step_bound_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        analysis_overlap.step_bound(*args)


def _engines_trace():
    """Three 100 µs steps; each launches a 40 µs copy then a 30 µs kernel, back to back."""
    ev, c = [], 0
    for s in range(3):
        t0 = 100.0 * s
        ev.append(X(f"ProfilerStep#{s}", "user_annotation", t0, 100))
        for name, cat, start, dur in (("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", t0 + 10, 40), ("k", "kernel", t0 + 50, 30)):
            c += 1
            ev += [X("cudaLaunchKernel", "cuda_runtime", t0 + c % 2, 1, correlation=c),
                   X(name, cat, start, dur, pid=0, tid=7, correlation=c)]
    return Trace({"traceEvents": ev})


def test_engine_busy_by_hand():
    e = analysis_overlap.engine_busy(_engines_trace())
    # steady window: from the first step's work end (80) to the last's (280), two periods of 100 µs
    assert e["period_us"] == pytest.approx(100.0)
    assert e["copy_us"] == pytest.approx(40.0) and e["kernel_us"] == pytest.approx(30.0) and e["any_us"] == pytest.approx(70.0)
    assert (e["copy_pct"], e["kernel_pct"], e["any_pct"]) == pytest.approx((40.0, 30.0, 70.0))
    with pytest.raises(ValueError, match="two profiled steps"):
        analysis_overlap.engine_busy(Trace({"traceEvents": [X("k", "kernel", 0, 10, pid=0, tid=7)]}))


def test_compiled_regions_count_calls_and_distinct_graphs():
    ev = [X("ProfilerStep#0", "user_annotation", 0, 100), X("ProfilerStep#1", "user_annotation", 100, 100)]
    ev += [X("Torch-Compiled Region: 1/0", "cpu_op", t, 5) for t in (10, 30, 50, 110, 130)]
    ev += [X("Torch-Compiled Region: 2/0", "cpu_op", 170, 5)]
    r = analysis_overlap.compiled_regions(Trace({"traceEvents": ev}))
    assert list(r["regions"]) == [3, 3] and list(r["distinct"]) == [1, 2] and list(r["ids"]) == ["1/0", "1/0, 2/0"]
    with pytest.raises(ValueError, match="ProfilerStep"):
        analysis_overlap.compiled_regions(Trace({"traceEvents": [X("Torch-Compiled Region: 0/0", "cpu_op", 0, 5)]}))


def test_host_bound_rule():
    assert analysis_overlap.host_bound(0.3) and not analysis_overlap.host_bound(0.5) and not analysis_overlap.host_bound(0.9)
    with pytest.raises(ValueError, match="fraction"):
        analysis_overlap.host_bound(42.0)


def test_elementwise_chain_traffic():
    eager = analysis_overlap.elementwise_chain_traffic(1000, 4, 8, fused=False)
    fused = analysis_overlap.elementwise_chain_traffic(1000, 4, 8, fused=True)
    assert (eager.bytes_read, eager.bytes_written) == (32_000, 32_000)
    assert (fused.bytes_read, fused.bytes_written) == (4_000, 4_000)
    assert eager.bytes / fused.bytes == 8 and eager.flops == fused.flops == 8000
    with pytest.raises(ValueError, match="positive int"):
        analysis_overlap.elementwise_chain_traffic(0, 4, 8, fused=True)


# ---------------------------------------------------------------- workloads: clear errors and CPU runs
@pytest.mark.skipif(is_gpu(), reason="checks the explained errors on a machine without a GPU")
def test_gpu_only_requests_explain_themselves():
    from infralens_lab.workloads import overlap as workloads_overlap

    with pytest.raises(workloads_overlap.NeedsGpu, match=r"Pinned .* needs a CUDA GPU.*pinned allocator.*Fix"):
        workloads_overlap.pinned(torch.zeros(4))
    with pytest.raises(workloads_overlap.NeedsGpu, match=r"CUDA graph needs a CUDA GPU.*stream"):
        workloads_overlap.cuda_graphed(lambda t: t * 2, torch.zeros(4))
    with pytest.raises(workloads_overlap.NeedsGpu, match="CopyComputeStep"):
        workloads_overlap.CopyComputeStep("pinned")
    with pytest.raises(workloads_overlap.NeedsGpu, match="gpu_stages"):
        workloads_overlap.gpu_stages()


def test_workload_input_errors():
    from infralens_lab.workloads import overlap as workloads_overlap

    with pytest.raises(ValueError, match="copy mode 'fast'"):
        workloads_overlap.CopyComputeStep("fast")
    with pytest.raises(ValueError, match="CPU tensor"):
        workloads_overlap.pinned([1, 2])
    with pytest.raises(ValueError, match="depth=0"):
        workloads_overlap.run_two_stage(lambda i: i, lambda x: None, 3, 0)
    with pytest.raises(ValueError, match="stage0_ms"):
        workloads_overlap.sleep_stages(0, 5)
    with pytest.raises(ValueError, match="ops=1"):
        workloads_overlap.small_ops_step(torch.zeros(2), 1)


def test_two_stage_runs_every_item_in_order_and_surfaces_errors():
    from infralens_lab.workloads import overlap as workloads_overlap

    seen = []
    workloads_overlap.run_two_stage(lambda i: i * 10, seen.append, 5, 2)
    assert seen == [0, 10, 20, 30, 40]

    def boom(i):
        if i == 2:
            raise RuntimeError("stage0 broke on item 2")
        return i

    with pytest.raises(RuntimeError, match="item 2"):
        workloads_overlap.run_two_stage(boom, lambda x: None, 5, 1)


def test_small_ops_and_chain_match_references():
    from infralens_lab.workloads import overlap as workloads_overlap

    x = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    ref = x.clone()
    for _ in range(3):
        ref = ref * 1.0001 + 0.0001
    torch.testing.assert_close(workloads_overlap.small_ops_step(x, 6), ref)  # same op order, so exact up to fp32 rounding
    y = torch.tanh(torch.exp(torch.sin(x * 1.5 + 0.25) ** 2 - 0.5) * 0.75)
    torch.testing.assert_close(workloads_overlap.elementwise_chain(x), y)


def test_blocknet_break_does_not_change_results():
    from infralens_lab.workloads import overlap as workloads_overlap

    torch.manual_seed(0)
    a = workloads_overlap.BlockNet(16, 3, graph_break=False)
    b = workloads_overlap.BlockNet(16, 3, graph_break=True)
    b.load_state_dict(a.state_dict())
    x = torch.randn(4, 16)
    torch.testing.assert_close(a(x), b(x))  # the overflow guard never fires on ordinary inputs
    with pytest.raises(ValueError, match="positive ints"):
        workloads_overlap.BlockNet(0, 3)
