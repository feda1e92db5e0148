"""analysis.distributed on synthetic per-rank traces whose answers are worked out by hand, plus the formulas."""
import math

import pytest

from infralens_lab.analysis import distributed as A
from infralens_lab.parse.trace import Trace

MAIN, GLOO = 1, 2


def _x(name, cat, ts, dur, tid=MAIN, pid=10, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def cpu_rank(shift=0.0, pid=10):
    """One step of a gloo rank (times in µs, absolute = 1000 + shift + t):

    step 0..100; backward ops 10..20, 20..40 (with a c10d call 35..40 inside it), 40..50;
    all-reduces on the gloo thread 30..45 and 48..70.
    Backward compute = [10,35) ∪ [40,50) = 35 µs. Comm = [30,45) ∪ [48,70) = 37 µs.
    Comm ∩ backward = [30,35) + [40,45) + [48,50) = 12 µs → hidden 12/37.
    'all' compute adds the forward 0..8 and the optimizer 75..90 (no more overlap), so HTA's number is also 12/37.
    """
    b = 1000 + shift
    ev = [_x("ProfilerStep#1", "user_annotation", b, 100, pid=pid),
          _x("aten::linear", "cpu_op", b + 0, 8, pid=pid),
          _x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", b + 10, 10, pid=pid),
          _x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", "cpu_op", b + 20, 20, pid=pid),
          _x("c10d::allreduce_", "cpu_op", b + 35, 5, pid=pid),
          _x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", b + 40, 10, pid=pid),
          _x("gloo:all_reduce", "user_annotation", b + 30, 15, tid=GLOO, pid=pid),
          _x("gloo:all_reduce", "user_annotation", b + 48, 22, tid=GLOO, pid=pid),
          _x("aten::add_", "cpu_op", b + 75, 15, pid=pid)]
    return Trace({"traceEvents": ev})


def test_overlap_by_hand():
    tr = cpu_rank()
    assert A.compute_intervals(tr, "backward") == [(10.0, 35.0), (40.0, 50.0)]
    comm = A.comm_events(tr)
    o = A.overlap(list(zip(comm["start_us"], comm["end_us"])), A.compute_intervals(tr, "backward"))
    assert o["comm_us"] == pytest.approx(37.0)
    assert o["hidden_us"] == pytest.approx(12.0)
    assert o["exposed_us"] == pytest.approx(25.0)
    assert o["hidden_fraction"] == pytest.approx(12 / 37)


def test_overlap_table_one_row_per_rank_and_step():
    t = A.overlap_table([cpu_rank(), cpu_rank(shift=3, pid=11)])
    assert list(t["rank"]) == [0, 1] and list(t["allreduce_calls"]) == [2, 2]
    assert t["hidden_fraction"].tolist() == pytest.approx([12 / 37] * 2)
    assert t["hta_overlap"].tolist() == pytest.approx([12 / 37] * 2)
    assert t["backward_us"].tolist() == pytest.approx([35.0, 35.0])


def test_overlap_edge_cases():
    assert A.overlap([], [(0, 10)])["hidden_fraction"] is None
    assert A.overlap([(0, 10)], [])["hidden_fraction"] == 0
    assert A.overlap([(0, 10), (5, 15)], [(0, 100)]) == {"comm_us": 15, "hidden_us": 15, "exposed_us": 0,
                                                       "hidden_fraction": 1.0}
    with pytest.raises(ValueError, match="phase"):
        A.compute_intervals(cpu_rank(), "forward")


def gpu_rank():
    """A GPU rank: backward op 0..50 launches a gemm (kernel 10..30) and the NCCL kernel runs 20..60 on
    another stream; a forward op launches a gemm 70..80 (not backward). Comm 40 µs; under backward
    compute 10 µs (20..30); under any compute also 10 µs."""
    ev = [_x("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 0, 50, tid=3),
          _x("cudaLaunchKernel", "cuda_runtime", 1, 2, tid=3, correlation=1),
          _x("aten::mm", "cpu_op", 60, 5),
          _x("cudaLaunchKernel", "cuda_runtime", 61, 2, correlation=2),
          _x("c10d::allreduce_", "cpu_op", 5, 4, tid=3),
          _x("cudaLaunchKernel", "cuda_runtime", 6, 2, tid=3, correlation=3),
          _x("sm90_gemm", "kernel", 10, 20, tid=7, pid=0, correlation=1, stream=7),
          _x("sm90_gemm", "kernel", 70, 10, tid=7, pid=0, correlation=2, stream=7),
          _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 20, 40, tid=8, pid=0, correlation=3, stream=8)]
    return Trace({"traceEvents": ev})


def test_gpu_trace_uses_nccl_kernels_and_backward_launches():
    tr = gpu_rank()
    assert list(A.comm_events(tr)["name"]) == ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert A.compute_intervals(tr, "backward") == [(10.0, 30.0)]
    assert A.compute_intervals(tr, "all") == [(10.0, 30.0), (70.0, 80.0)]
    o = A.overlap([(20.0, 60.0)], A.compute_intervals(tr, "backward"))
    assert o["hidden_fraction"] == pytest.approx(10 / 40)


def test_align_same_clock_and_skewed_clock():
    ok = A.align([cpu_rank(), cpu_rank(shift=3, pid=11)])
    assert len(ok) == 2 and ok.attrs["violations"] == 0
    assert ok.attrs["offset_us"][1] == pytest.approx(3.0)
    # rank 1's clock 100 µs ahead: its all-reduces "start" after rank 0's ended, which cannot happen
    bad = A.align([cpu_rank(), cpu_rank(shift=100, pid=11)])
    assert bad.attrs["violations"] == 2
    assert bad["causality_gap_us"].iloc[0] == pytest.approx(100 - 15)


def test_align_refuses_mismatched_ranks():
    with pytest.raises(ValueError, match="at least 2"):
        A.align([cpu_rank()])
    short = Trace({"traceEvents": [e for e in cpu_rank().data["traceEvents"] if e["ts"] != 1048]})
    with pytest.raises(ValueError, match=r"different numbers of all-reduces \[2, 1\]"):
        A.align([cpu_rank(), short])


def test_bucket_plan_whole_tensors():
    MiB = A.MiB
    layer = [2048, MiB]  # bias then weight, in gradient-ready order
    assert A.bucket_plan(layer * 4, MiB, first_cap_bytes=MiB) == [MiB + 2048] * 4
    assert A.bucket_plan(layer * 4, 5 * MiB, first_cap_bytes=5 * MiB) == [4 * (MiB + 2048)]
    # torch's default: a 1 MiB first bucket, then the cap
    assert A.bucket_plan([300_000] * 10, 2 * MiB) == [4 * 300_000, 3_000_000 - 1_200_000]
    assert A.bucket_plan([], MiB) == []
    with pytest.raises(ValueError, match="cap_bytes=0"):
        A.bucket_plan([1], 0)


def test_ledger_bucket_count_is_the_ledgers_formula():
    g = 8 * (A.MiB + 2048)
    assert A.ledger_bucket_count(g, 1) == 1 + math.ceil((g - A.MiB) / A.MiB) == 9
    assert A.ledger_bucket_count(A.MiB // 2, 25) == 1


def test_bandwidth_conventions():
    assert A.algbw(1e9, 0.5) == pytest.approx(2.0)
    assert A.busbw(100.0, 2) == pytest.approx(100.0)  # 2(n-1)/n = 1 at n = 2
    assert A.busbw(100.0, 8) == pytest.approx(175.0)
    assert A.busbw(100.0, 1) == 0
    with pytest.raises(ValueError, match="seconds=0"):
        A.algbw(1, 0)
    with pytest.raises(ValueError, match="n=0"):
        A.busbw(1.0, 0)


def test_scaling_and_amdahl():
    s = A.scaling(t1_step_s=0.010, tn_step_s=0.0125, n=2)
    assert s["speedup"] == pytest.approx(1.6) and s["efficiency"] == pytest.approx(0.8)
    assert A.amdahl_bound(0.2, 2) == pytest.approx(1.6)
    assert A.amdahl_bound(0.0, 8) == 8
    with pytest.raises(ValueError, match="exposed_fraction=1.5"):
        A.amdahl_bound(1.5, 2)


def test_ring_and_multinode_model():
    # 1 GB over 8 ranks at 100 GB/s bus bandwidth: 2·7/8 · 1e9 / 1e11 = 17.5 ms
    assert A.ring_allreduce_s(1e9, 8, 100.0) == pytest.approx(0.0175)
    assert A.ring_allreduce_s(1e9, 8, 100.0, latency_s=1e-5) == pytest.approx(0.0175 + 14e-5)
    df = A.multinode_model(compute_s=0.010, grad_bytes=1e9, hidden_fraction=0.5, gpus=(1, 8, 64), achievable=1.0,
                           latency_s=0.0)
    assert "MODEL" in df.attrs["label"]
    assert list(df["link"]) == ["none", "NVLink (one node)", "network (across nodes)"]
    assert df["step_ms"].iloc[0] == pytest.approx(10.0)
    assert df["comm_ms"].iloc[1] == pytest.approx(1e3 * 2 * 7 / 8 * 1e9 / 450e9)
    assert df["comm_ms"].iloc[2] == pytest.approx(1e3 * 2 * 63 / 64 * 1e9 / 50e9)
    assert df["step_ms"].iloc[2] == pytest.approx(10.0 + 0.5 * df["comm_ms"].iloc[2])
    with pytest.raises(ValueError, match="hidden_fraction=2"):
        A.multinode_model(0.01, 1e9, 2)


def _hta_overlap(comm, comp, tmp_path, monkeypatch):
    """Holistic Trace Analysis itself (0.5.0, get_comm_comp_overlap) on a chrome trace holding these intervals as
    NCCL kernels (communication, HTA's own kernel-type rule) and GEMM kernels (computation): the independent
    reference, called rather than re-typed."""
    import json
    import logging

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
    assert A.overlap(comm, comp)["hidden_fraction"] == pytest.approx(_hta_overlap(comm, comp, tmp_path, monkeypatch),
                                                                     abs=5e-5)
