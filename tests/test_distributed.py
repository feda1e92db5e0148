"""analysis.distributed on synthetic per-rank traces whose answers are worked out by hand: a gloo rank (CPU
ranges) and NCCL-shaped GPU ranks (kernels on a compute stream and NCCL's stream, the CPU running a step
ahead of the GPU, warm-up leftovers in the window, a late rank, clocks off by a margin)."""
import json
import logging

import pytest

from infralens_lab.analysis import distributed
from infralens_lab.parse.trace import Trace

MAIN, GLOO, AUTOGRAD = 1, 2, 3
COMPUTE, NCCL = 7, 20


def _x(name, cat, ts, dur, tid=MAIN, pid=10, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


# ---------------------------------------------------------------- a gloo rank
def cpu_rank(shift=0.0, pid=10, leftover=False):
    """One step of a gloo rank (µs, absolute = 1000 + shift + t):

    step 0..100; backward ops 10..20, 20..40 (a c10d call 28..30 inside), 40..50 (a c10d call 46..47 inside);
    the two all-reduces they enqueue run on the gloo thread 30..45 and 48..70.
    Backward compute = [10,28) ∪ [30,46) ∪ [47,50) = 37 µs. Comm = [30,45) ∪ [48,70) = 37 µs.
    Comm ∩ backward = [30,45) + [48,50) = 17 µs: hidden 17/37, exposed 20.
    'all' compute adds the forward 0..8 and the optimizer 75..90 (no more overlap): HTA's number is 17/37 too.
    ``leftover``: a gloo range at -5..5 enqueued before the profiler started (no c10d call in the trace)."""
    b = 1000 + shift
    ev = [_x("ProfilerStep#1", "user_annotation", b, 100, pid=pid),
          _x("aten::linear", "cpu_op", b + 0, 8, pid=pid),
          _x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", b + 10, 10, pid=pid),
          _x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", "cpu_op", b + 20, 20, pid=pid),
          _x("c10d::allreduce_", "cpu_op", b + 28, 2, pid=pid),
          _x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", b + 40, 10, pid=pid),
          _x("c10d::allreduce_", "cpu_op", b + 46, 1, pid=pid),
          _x("gloo:all_reduce", "user_annotation", b + 30, 15, tid=GLOO, pid=pid),
          _x("gloo:all_reduce", "user_annotation", b + 48, 22, tid=GLOO, pid=pid),
          _x("aten::add_", "cpu_op", b + 75, 15, pid=pid)]
    if leftover:
        ev.append(_x("gloo:all_reduce", "user_annotation", b - 5, 10, tid=GLOO, pid=pid))
    return Trace({"traceEvents": ev})


def test_gloo_overlap_by_hand():
    tr = cpu_rank()
    assert distributed.compute_intervals(tr, "backward") == [(10.0, 28.0), (30.0, 46.0), (47.0, 50.0)]
    t = distributed.overlap_table([tr]).iloc[0]
    assert (t["allreduce_calls"], t["step_us"], t["basis"]) == (2, 100.0, "cpu range")
    assert t["comm_us"] == pytest.approx(37.0) and t["hidden_us"] == pytest.approx(17.0)
    assert t["hidden_fraction"] == pytest.approx(17 / 37) and t["hta_overlap"] == pytest.approx(17 / 37)
    assert t["exposed_us"] == pytest.approx(20.0) and t["exposed_fraction"] == pytest.approx(0.20)
    assert t["backward_us"] == pytest.approx(37.0)


def test_gloo_ranges_pair_with_the_calls_that_enqueued_them():
    c = distributed.comm_events(cpu_rank(leftover=True))  # the leftover range has no call: not this window's work
    assert list(c["enqueue_us"]) == [28.0 + 5, 46.0 + 5] and list(c["step"]) == [0, 0] and list(c["seq"]) == [0, 1]
    broken = Trace({"traceEvents": [e for e in cpu_rank().data["traceEvents"] if not (e["name"] == "gloo:all_reduce"
                                                                                     and e["ts"] == 1048)]})
    with pytest.raises(ValueError, match=r"2 c10d::allreduce_ calls but 1 gloo:all_reduce ranges"):
        distributed.comm_events(broken)


def test_overlap_edge_cases():
    assert distributed.overlap([], [(0, 10)])["hidden_fraction"] is None
    assert distributed.overlap([(0, 10)], [])["hidden_fraction"] == 0
    assert distributed.overlap([(0, 10), (5, 15)], [(0, 100)]) == {"comm_us": 15, "hidden_us": 15, "exposed_us": 0,
                                                       "hidden_fraction": 1.0}
    with pytest.raises(ValueError, match="phase"):
        distributed.compute_intervals(cpu_rank(), "forward")
    with pytest.raises(ValueError, match="no ProfilerStep"):
        distributed.step_windows(Trace({"traceEvents": [_x("aten::mm", "cpu_op", 0, 5)]}))


# ---------------------------------------------------------------- NCCL-shaped GPU ranks
P, LAG = 100.0, 50.0  # a step every 100 µs on the CPU; its kernels run 50 µs after their launches


def nccl_rank(late=0.0, skew=0.0, clock=0.0, steps=3, leftover=True, pid=1):
    """Profiled steps of one NCCL rank, CPU a step ahead of the GPU (µs). Per step s, on the CPU (t = s·P + ...):
    ProfilerStep [0, 60]; DDP forward [1, 10] launching 2 gemms; a backward op [12, 40] on the autograd thread
    launching 4 gemms, with c10d::allreduce_ calls at 22 and 34 launching the NCCL kernels (cuLaunchKernelEx);
    Optimizer.step [45, 55] launching one kernel. On the GPU (t = s·P + LAG + ... + ``late``): forward [0, 16),
    backward [18, 66), NCCL all-reduce 1 from 32 and 2 from 66, transfers of 20 and 14 µs that end at the same
    moment on every rank (``skew``: how late the latest rank arrives; an early rank's kernel spins until then),
    the optimizer after the last all-reduce. ``clock`` shifts every timestamp (a clock off by that much).
    ``leftover``: a gemm and an NCCL kernel left queued by a warm-up step (no launch call in the trace), inside
    step 0's CPU range: a start-time rule would count them, the attribution rule does not."""
    ev, corr = [], [0]

    def launch(t, name="cudaLaunchKernel", tid=MAIN, cat="cuda_runtime"):
        corr[0] += 1
        ev.append(_x(name, cat, clock + t, 0.5, tid=tid, pid=pid, correlation=corr[0]))
        return corr[0]

    def kernel(name, stream, a, b, c):
        ev.append(_x(name, "kernel", clock + a, b - a, tid=stream, pid=0, correlation=c, stream=stream, device=0))

    for s in range(steps):
        c0, g0 = s * P, s * P + LAG + late
        ev.append(_x(f"ProfilerStep#{s + 2}", "user_annotation", clock + c0, 60, pid=pid))
        ev.append(_x("DistributedDataParallel.forward", "user_annotation", clock + c0 + 1, 9, pid=pid))
        fwd = [launch(c0 + 2), launch(c0 + 4)]
        ev.append(_x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", clock + c0 + 12, 28,
                     tid=AUTOGRAD, pid=pid))
        bwd = [launch(c0 + t, tid=AUTOGRAD) for t in (14, 20, 26, 32)]
        comm = []
        for t in (22, 34):
            ev.append(_x("c10d::allreduce_", "cpu_op", clock + c0 + t, 2, tid=AUTOGRAD, pid=pid))
            comm.append(launch(c0 + t + 0.5, "cuLaunchKernelEx", AUTOGRAD, "cuda_driver"))
        ev.append(_x("Optimizer.step#SGD.step", "user_annotation", clock + c0 + 45, 10, pid=pid))
        opt = launch(c0 + 46)
        for c, a in zip(fwd, (0, 8), strict=True):
            kernel("sm90_gemm_fwd", COMPUTE, g0 + a, g0 + a + 8, c)
        for c, a in zip(bwd, (18, 30, 42, 54), strict=True):
            kernel("sm90_gemm_bwd", COMPUTE, g0 + a, g0 + a + 12, c)
        base = s * P + LAG  # the all-reduces end at the latest rank's arrival + transfer, on every rank
        for c, a, d in zip(comm, (32, 66), (20, 14), strict=True):
            kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", NCCL, g0 + a,
                   base + skew + a + d, c)
        kernel("multi_tensor_apply_kernel", COMPUTE, base + skew + 82, base + skew + 88, opt)
    if leftover:
        kernel("sm90_gemm_bwd", COMPUTE, 5, 15, 9001)
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", NCCL, 20, 30, 9002)
    return Trace({"traceEvents": ev})


def test_nccl_collectives_belong_to_the_step_that_launched_them():
    tr = nccl_rank()
    c = distributed.comm_events(tr)
    assert list(c["step"]) == [-1, 0, 0, 1, 1, 2, 2]  # the warm-up leftover belongs to no step
    assert list(c[c["step"] == 1]["start_us"]) == [100 + LAG + 32, 100 + LAG + 66]
    # a start-time rule would have put the leftover into step 0 and step 0's second all-reduce into step 1
    st = tr.steps()
    by_start = [int(((c["start_us"] >= a) & (c["start_us"] < b)).sum()) for a, b in zip(st["cpu_start_us"], st["cpu_end_us"], strict=True)]
    assert by_start != [2, 2, 2]


def test_nccl_overlap_table_by_hand():
    """Rank 0 of a pair whose other rank arrives 5 µs late (skew 5): per step forward [50, 66), backward
    [68, 116), all-reduce 1 [82, 107) (5 µs of wait + 20 of transfer), all-reduce 2 [116, 135), optimizer
    [137, 143). Comm 25 + 19 = 44; under backward [82, 107) = 25; exposed: all-reduce 2, 19. Windows: step 0
    from its first kernel (50) to its last end (143); later steps one period (100)."""
    t = distributed.overlap_table([nccl_rank(skew=5)])
    assert list(t["basis"]) == ["gpu work"] * 3 and list(t["steady"]) == [False, True, True]
    assert list(t["step_us"]) == pytest.approx([93.0, 100.0, 100.0])
    assert set(t["allreduce_calls"]) == {2} and set(t["kernels"]) == {9}
    assert list(t["comm_us"]) == pytest.approx([44.0] * 3)
    assert list(t["hidden_us"]) == pytest.approx([25.0] * 3) and list(t["exposed_us"]) == pytest.approx([19.0] * 3)
    assert list(t["backward_us"]) == pytest.approx([48.0] * 3)
    assert distributed.invariant_violations(t, buckets=2) == []


def test_invariants_catch_a_part_longer_than_its_whole_and_wrong_counts():
    t = distributed.overlap_table([nccl_rank()])
    assert distributed.invariant_violations(t, buckets=3)[0].endswith("2 all-reduce calls; expected 3 (DDP's buckets)")
    bad = t.copy()
    bad.loc[0, "exposed_us"] = bad.loc[0, "comm_us"] + 1
    bad.loc[1, "kernels"] = 10
    msgs = distributed.invariant_violations(bad, buckets=2)
    assert any("expected exposed <= comm <= step" in m for m in msgs)
    assert any("kernels per step [9, 9, 10]" in m for m in msgs)


def test_align_separates_wait_from_transfer():
    early, late = nccl_rank(skew=5, pid=1), nccl_rank(late=5, skew=5, pid=2)
    al = distributed.align([early, late])
    first = al[(al["step"] == 0) & (al["seq"] == 0)].set_index("rank")
    assert list(first["wait_us"]) == pytest.approx([5.0, 0.0])
    assert list(first["transfer_us"]) == pytest.approx([20.0, 20.0])
    assert al.attrs["violations"] == 0 and al.attrs["tolerance_us"] == distributed.CAUSALITY_TOL_US["nccl"]
    assert distributed.blocked_per_step(al, 0) == pytest.approx(10.0)  # both all-reduces of a step waited 5 µs
    assert distributed.blocked_per_step(al, 1) == 0.0
    t = distributed.overlap_table([early, late])
    assert list(t[t["rank"] == 0]["wait_us"]) == pytest.approx([10.0] * 3)
    assert list(t[t["rank"] == 1]["exposed_us"]) == pytest.approx([14.0] * 3)  # the late rank waits for nobody


def test_align_causality_check_has_a_stated_tolerance():
    ok = distributed.align([nccl_rank(), nccl_rank(clock=4, pid=2)])  # clocks 4 µs apart: within the 5 µs allowed
    assert ok.attrs["violations"] == 0 and ok.attrs["offset_us"][1] == pytest.approx(4.0)
    off = distributed.align([nccl_rank(), nccl_rank(clock=30, pid=2)])  # 30 µs: rank 1 "starts" after rank 0 ended
    assert off.attrs["violations"] == 6
    assert off["causality_gap_us"].iloc[0] == pytest.approx(30 - 20)
    assert distributed.align([nccl_rank(), nccl_rank(clock=30, pid=2)], tolerance_us=16).attrs["violations"] == 0  # 30 - 14


def test_align_refuses_ranks_that_disagree():
    with pytest.raises(ValueError, match="at least 2"):
        distributed.align([nccl_rank()])
    with pytest.raises(ValueError, match=r"different all-reduces per profiled step \[\{0: 2, 1: 2, 2: 2\}, \{0: 2, 1: 2\}\]"):
        distributed.align([nccl_rank(), nccl_rank(steps=2)])


def test_gloo_ranks_align_on_one_host_clock():
    al = distributed.align([cpu_rank(), cpu_rank(shift=3, pid=11)])
    assert len(al) == 4 and al.attrs["violations"] == 0 and al.attrs["tolerance_us"] == 0.01
    assert al.attrs["offset_us"][1] == pytest.approx(3.0)
    assert list(al[al["rank"] == 0]["wait_us"]) == pytest.approx([3.0, 3.0])


def test_exposed_share_and_phases():
    tr = nccl_rank(skew=5)
    iv = distributed.step_intervals(tr)
    assert distributed.exposed_share(iv) == pytest.approx(3 * 19 / (93 + 100 + 100))
    assert distributed.exposed_share([iv, iv]) == distributed.exposed_share(iv)
    p = distributed.phase_intervals(tr, 1)
    assert p["forward"] == [(150.0, 166.0)] and p["optimizer"] == [(237.0, 243.0)]
    assert p["backward compute"] == [(168.0, 216.0)] and p["all-reduce"] == [(182.0, 207.0), (216.0, 235.0)]
    with pytest.raises(ValueError, match="no profiled step 7"):
        distributed.phase_intervals(tr, 7)


@pytest.mark.filterwarnings("ignore::Warning:hta.*")
def test_nccl_kernel_split_and_overlap_agree_with_hta(tmp_path, monkeypatch):
    """HTA 0.5.0's get_comm_comp_overlap on the synthetic NCCL rank file equals our overlap of its NCCL kernels
    with its other kernels over the whole trace (HTA's definition, no step clipping), for the kernels the profiled
    steps launched: HTA leaves the two warm-up leftovers (no launch call in the trace) out too."""
    ta_mod = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is a test extra")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    logging.getLogger("hta").setLevel(logging.ERROR)
    tr = nccl_rank(skew=5)
    (tmp_path / "rank-0.json").write_text(json.dumps({**tr.data, "distributedInfo": {"rank": 0}}))
    theirs = ta_mod.TraceAnalysis(trace_dir=str(tmp_path), include_last_profiler_step=True).get_comm_comp_overlap(
        visualize=False)
    ev = tr.gpu_events("steps")
    assert len(ev) == 27 and len(tr.gpu_events("all")) == 29
    nccl = ev["name"].str.contains("nccl")
    ours = distributed.overlap(list(zip(ev[nccl]["start_us"], ev[nccl]["end_us"], strict=True)),
                     list(zip(ev[~nccl]["start_us"], ev[~nccl]["end_us"], strict=True)))["hidden_fraction"]
    assert ours == pytest.approx(float(theirs["comp_comm_overlap_pctg"].iloc[0]) / 100, abs=5e-5)  # HTA: 0.01 %


def _hta_overlap(comm, comp, tmp_path, monkeypatch):
    """Holistic Trace Analysis itself (0.5.0, get_comm_comp_overlap) on a chrome trace holding these intervals as
    NCCL kernels (communication, HTA's own kernel-type rule) and GEMM kernels (computation): the independent
    reference, called rather than re-typed."""
    ta_mod = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is a test extra")
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    logging.getLogger("hta").setLevel(logging.ERROR)
    ev, corr = [], 0
    for name, stream, ivs in (("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, comm), ("sm90_gemm", 7, comp)):
        for a, b in ivs:
            corr += 1
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": 1e6 + a,
                       "dur": b - a, "args": {"stream": stream, "correlation": corr, "device": 0}})
    (tmp_path / "rank-0.json").write_text(json.dumps({"traceEvents": ev, "distributedInfo": {"rank": 0}}))
    ta = ta_mod.TraceAnalysis(trace_dir=str(tmp_path))
    return float(ta.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0]) / 100  # HTA rounds: 0.01 %


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.filterwarnings("ignore::Warning:hta.*")
def test_overlap_equals_htas_algorithm_on_random_intervals(seed, tmp_path, monkeypatch):
    import random

    rnd = random.Random(seed)

    def intervals(n):
        out = []
        for _ in range(n):
            a = rnd.uniform(0, 1000)
            out.append((a, a + rnd.uniform(1, 120)))
        return out

    comm, comp = intervals(12), intervals(20)
    # HTA returns the percentage rounded to 2 decimals: agreement within half of its last digit
    assert distributed.overlap(comm, comp)["hidden_fraction"] == pytest.approx(_hta_overlap(comm, comp, tmp_path, monkeypatch),
                                                                     abs=5e-5)


def test_wait_at_the_first_collective_needs_only_the_starts():
    al = distributed.align([nccl_rank(skew=5, pid=1), nccl_rank(late=5, skew=5, pid=2)])
    starts = al[["step", "seq", "rank", "start_us", "end_us"]]
    assert distributed.wait_at(starts, 0) == pytest.approx(5.0) and distributed.wait_at(starts, 1) == 0.0
    assert distributed.wait_at(starts, 0, seq=1) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="no collective #5 of rank 0"):
        distributed.wait_at(starts, 0, seq=5)
    iv = distributed.steady_step_intervals([nccl_rank(skew=5)])
    assert [s["step"] for s in iv[0]] == [1, 2] and distributed.exposed_share(iv) == pytest.approx(19 / 100)


def test_nccl_kernels_without_a_correlated_launch_pair_with_their_c10d_calls():
    """A trace whose NCCL kernels lost their launch correlation (the profiler missed the driver call) still gives
    each kernel the step whose c10d::allreduce_ call enqueued it, by order, as gloo ranges do."""
    tr = nccl_rank(leftover=False)
    data = {"traceEvents": [dict(e, args={k: v for k, v in e["args"].items() if k != "correlation"})
                            if "nccl" in e["name"] else e for e in tr.data["traceEvents"]]}
    c = distributed.comm_events(Trace(data))
    assert list(c["step"]) == [0, 0, 1, 1, 2, 2] and list(c["enqueue_us"]) == [22.0, 34.0, 122.0, 134.0, 222.0, 234.0]
    assert distributed.invariant_violations(distributed.overlap_table([Trace(data)]), buckets=2) == []
