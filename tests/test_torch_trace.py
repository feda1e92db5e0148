"""torch_trace: attribution and GPU idle gaps on a synthetic trace with known answers, a CPU-only
trace of the pipeline workload through profile(), a recorded GPU trace, and the timeline figure."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infralens_lab.device import is_gpu
from infralens_lab.measure.torch_trace import profile
from infralens_lab.parse.trace import NO_GPU_NOTE, Trace, load_trace, trim

DATA = Path(__file__).parent / "data"
T0 = 5_000_000.0  # absolute µs offset, as real traces have; every time below is relative to it


def X(name, cat, start, end, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": T0 + start, "dur": end - start,
            "args": args}


def synthetic(flows: bool = False) -> dict:
    """Two and a bit training steps on one CPU thread (pid 1, tid 1) and one stream (pid 0, tid 7).

    GPU busy: memcpy [280,285], gemm_a [330,530], relu_k [530,560], k3 [910,950], k4 [1010,1020],
    memcpy [1095,1100]. Idle gaps: 45 µs (285-330), 350 µs (560-910, host: 'data' prepares a
    batch), 60 µs (950-1010, a slow launch), 75 µs (1020-1095, a pageable cudaMemcpyAsync).
    """
    K = "kernel"
    cpu = [
        X("ProfilerStep#1", "user_annotation", 0, 590), X("ProfilerStep#2", "user_annotation", 590, 1130),
        X("data", "user_annotation", 0, 300), X("aten::randn", "cpu_op", 10, 200),
        X("cudaMemcpyAsync", "cuda_runtime", 250, 290, correlation=100),
        X("forward", "user_annotation", 300, 500),
        X("aten::mm", "cpu_op", 310, 400), X("cudaLaunchKernel", "cuda_runtime", 320, 330, correlation=1),
        X("aten::relu", "cpu_op", 410, 450), X("cudaLaunchKernel", "cuda_runtime", 420, 425, correlation=2),
        X("log", "user_annotation", 505, 580), X("aten::item", "cpu_op", 510, 575),
        X("aten::_local_scalar_dense", "cpu_op", 512, 574), X("cudaStreamSynchronize", "cuda_runtime", 515, 573),
        X("data", "user_annotation", 600, 880), X("aten::randn", "cpu_op", 610, 700),
        X("forward", "user_annotation", 885, 1010),
        X("aten::add", "cpu_op", 892, 908), X("cudaLaunchKernel", "cuda_runtime", 895, 905, correlation=3),
        X("aten::mul", "cpu_op", 938, 1007), X("cudaLaunchKernel", "cuda_runtime", 940, 1005, correlation=4),
        X("data", "user_annotation", 1022, 1110), X("aten::copy_", "cpu_op", 1025, 1105),
        X("cudaMemcpyAsync", "cuda_runtime", 1030, 1100, correlation=101),
    ]
    gpu = [
        ("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 280, 285, 100),
        ("gemm_a", K, 330, 530, 1), ("relu_k", K, 530, 560, 2), ("k3", K, 910, 950, 3), ("k4", K, 1010, 1020, 4),
        ("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 1095, 1100, 101),
    ]
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}, *cpu]
    for name, cat, s, e, corr in gpu:
        args = {"stream": 7, "device": 0} if flows else {"stream": 7, "device": 0, "correlation": corr}
        events.append(X(name, cat, s, e, tid=7, pid=0, **args))
        if flows:
            launch = next(c for c in cpu if c["args"].get("correlation") == corr)
            events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 1, "tid": 1, "ts": launch["ts"]})
            events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": 7, "ts": T0 + s, "bp": "e"})
            launch["args"].pop("correlation")
    return {"schemaVersion": 1, "traceEvents": events}


def test_idle_gaps_exact_on_synthetic_trace():
    gaps = Trace(synthetic()).idle_gaps(min_gap_us=50)
    assert gaps[["start_us", "end_us", "gap_us"]].values.tolist() == [[560, 910, 350], [950, 1010, 60], [1020, 1095, 75]]
    assert gaps["cause"].tolist() == ["host", "launch", "memcpy"]
    g = gaps.iloc[0]
    # sync: aten::item [560,575]; launch [895,905]; host: log [575,580] + data [600,880] + forward [885,895]+[905,910]
    assert (g.sync_us, g.launch_us, g.host_us, g.memcpy_us, g.unaccounted_us) == (15, 10, 300, 0, 25)
    assert g.ranges == "data, forward, log"
    assert g.ops.split(", ")[0] == "aten::randn"
    assert (gaps.iloc[1].launch_us, gaps.iloc[1].host_us, gaps.iloc[1].unaccounted_us) == (55, 5, 0)
    assert (gaps.iloc[2].memcpy_us, gaps.iloc[2].host_us, gaps.iloc[2].unaccounted_us) == (65, 8, 2)
    # every gap's causes add up to the gap
    cols = ["sync_us", "memcpy_us", "launch_us", "host_us", "unaccounted_us"]
    assert (gaps[cols].sum(axis=1) == gaps["gap_us"]).all()


def test_threshold_is_strict_and_includes_short_gaps_when_lowered():
    t = Trace(synthetic())
    assert len(t.idle_gaps(min_gap_us=60)) == 2  # the 60 µs gap is not longer than 60
    g = t.idle_gaps(min_gap_us=40)
    assert g["gap_us"].tolist() == [45, 350, 60, 75]
    first = g.iloc[0]
    assert (first.memcpy_us, first.launch_us, first.host_us, first.cause) == (5, 10, 30, "host")


@pytest.mark.parametrize("flows", [False, True], ids=["correlation-args", "ac2g-flows"])
def test_attribution_of_kernels_to_ops_and_ranges(flows):
    t = Trace(synthetic(flows=flows))
    r = t.ranges().set_index("name")
    assert r.loc["forward", ["count", "device_us", "launches"]].tolist() == [2, 280, 4]
    assert r.loc["data", ["count", "device_us", "launches"]].tolist() == [3, 10, 2]
    assert r.loc["log", "device_us"] == 0
    assert r.loc["ProfilerStep#1", "device_us"] == 235 and r.loc["ProfilerStep#2", "device_us"] == 55
    o = t.ops().set_index("name")
    assert o.loc[["aten::mm", "aten::relu", "aten::add", "aten::mul", "aten::copy_"], "device_us"].tolist() == [200, 30, 40, 10, 5]
    assert o.index[0] == "aten::mm"  # sorted by device time on a GPU trace
    assert o.loc["aten::item", "self_cpu_us"] == pytest.approx(3)  # 65 µs minus its 62 µs child
    assert o.loc["aten::_local_scalar_dense", "cpu_total_us"] == pytest.approx(62)


def test_kernels_table():
    k = Trace(synthetic()).kernels()
    assert k["name"].tolist() == ["gemm_a", "k3", "relu_k", "k4"]
    assert k["total_us"].tolist() == [200, 40, 30, 10]
    assert k["pct"].sum() == pytest.approx(100)
    assert len(Trace(synthetic()).kernels(top=2)) == 2


def test_summary_of_synthetic_trace():
    s = Trace(synthetic()).summary()
    assert s["steps"] == 2 and s["kernels"] == 4 and s["has_gpu"]
    # the steady window: from the end of step 1's GPU work (relu_k, 560) to the end of step 2's (memcpy, 1100),
    # one whole period; busy inside it is step 2's k3, k4 and memcpy. The CPU's step ranges span 0..1130.
    assert s["window_us"] == pytest.approx(1100 - 560) and s["cpu_window_us"] == pytest.approx(1130)
    assert s["gpu_busy_us"] == pytest.approx(40 + 10 + 5)
    assert s["gpu_utilization"] == pytest.approx(55 / 540)
    assert s["leftover"] == {"events": 0, "kernels": 0, "device_us": 0.0}
    assert s["idle_gaps"] == 3 and s["idle_gap_us"] == pytest.approx(485)
    assert s["idle_by_cause_us"]["sync"] == pytest.approx(15)


def test_trim_keeps_what_the_analysis_needs(tmp_path):
    data = synthetic(flows=True)
    data["traceEvents"].append(X("some_py_fn", "python_function", 0, 10))
    small = trim(data)
    assert all(e.get("cat") != "python_function" for e in small["traceEvents"])
    a, b = Trace(data).idle_gaps(), Trace(small).idle_gaps()
    assert a.drop(columns=["ops"]).equals(b.drop(columns=["ops"]))
    path = Trace(small).export_chrome_trace(tmp_path / "t.json")
    assert load_trace(path).ranges().equals(Trace(small).ranges())


def test_load_trace_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace file"):
        load_trace(tmp_path / "missing.json")
    with pytest.raises(TypeError, match="expected a path, a dict or an Evidence"):
        load_trace(42)
    with pytest.raises(ValueError, match="traceEvents"):
        load_trace({"events": []})


def test_profile_rejects_bad_schedule():
    with pytest.raises(ValueError, match="active=0"):
        profile(lambda: None, active=0)
    with pytest.raises(ValueError, match="steps=2"):
        profile(lambda: None, steps=2, wait=1, warmup=1, active=3)


@pytest.mark.skipif(is_gpu(), reason="checks the CPU-only behaviour")
def test_cpu_only_trace_of_the_pipeline_workload():
    from infralens_lab.workloads.pipeline import make_step

    tr = profile(make_step("bubble"), wait=0, warmup=1, active=1)
    ranges = set(tr.ranges()["name"])
    assert {"data", "forward", "backward", "optimizer", "log"} <= ranges
    ops = tr.ops()
    assert {"aten::item", "aten::embedding"} <= set(ops["name"])
    assert (ops["cpu_total_us"] > 0).all() and (ops["device_us"] == 0).all()
    gaps = tr.idle_gaps()
    assert gaps.empty and gaps.attrs["note"] == NO_GPU_NOTE
    assert tr.kernels().empty and tr.summary()["note"] == NO_GPU_NOTE


def test_timeline_figure_rows_and_gap_labels():
    import matplotlib

    matplotlib.use("Agg")
    from infralens_lab.present.timeline import timeline

    fig = timeline(Trace(synthetic()), title="synthetic")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["range: data", "range: forward", "range: log", "GPU stream 7"]
    labels = [t.get_text() for t in ax.texts]
    assert "idle 0.35 ms\nhost" in labels and "idle 0.07 ms\nmemcpy" in labels
    assert ax.get_xlabel() == "time (ms from first event)"
    cpu_only = {"traceEvents": [X("data", "user_annotation", 0, 100), X("aten::mm", "cpu_op", 10, 90)]}
    fig2 = timeline(Trace(cpu_only))
    assert [t.get_text() for t in fig2.axes[0].get_yticklabels()] == ["range: data"]
    assert "CPU-only trace: no GPU rows" in [t.get_text() for t in fig2.axes[0].texts]
    matplotlib.pyplot.close("all")


RECORDED = DATA / "trace_bubble_excerpt.json"


@pytest.mark.skipif(not RECORDED.is_file(), reason="recorded GPU trace excerpt not committed yet")
def test_recorded_gpu_trace_excerpt():
    meta = json.loads((DATA / "trace_bubble_excerpt.expected.json").read_text())
    raw = json.loads(RECORDED.read_text())
    tr = load_trace(raw)
    assert tr.has_gpu
    assert int((tr.events["cat"] == "kernel").sum()) == meta["kernels"]
    assert len(tr.launcher) == meta["attributed"]
    gaps = tr.idle_gaps(min_gap_us=50)
    # the same gaps found the plain way: keep the GPU work whose launch call (same correlation id) lies inside a
    # ProfilerStep range (the attribution rule), sort its intervals, merge, keep holes > 50 µs
    ev = raw["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and e["name"].startswith("ProfilerStep")]
    calls = {e["args"]["correlation"]: e["ts"] for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                 if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                 and any(a <= calls.get(e["args"].get("correlation"), -1) < b for a, b in steps))
    assert len(steps) == 2 and len(gpu) == len(tr.gpu_events(scope="steps")) > 400
    holes, end = [], gpu[0][1]
    for s, e in gpu[1:]:
        if s - end > 50:
            holes.append(s - end)
        end = max(end, e)
    # 1 ns tolerance: the file stores µs with 3 decimals, and Trace subtracts the trace start first
    assert gaps["gap_us"].tolist() == pytest.approx(holes, abs=1e-3)
    assert gaps["gap_us"].tolist() == pytest.approx(meta["gap_us"], abs=1e-3)
    assert gaps["cause"].tolist() == meta["causes"]
    # the bubble: the longest gap is the host preparing the next batch in the 'data' range
    big = gaps.loc[gaps["gap_us"].idxmax()]
    assert big["gap_us"] > 1000 and big["cause"] == "host" and big["ranges"].split(", ")[0] == "data"
    r = tr.ranges().set_index("name")
    assert {"data", "forward", "backward", "optimizer", "log"} <= set(r.index)
    assert r.loc["forward", "launches"] == meta["forward_launches"]


def test_trim_max_depth_drops_nested_ops_but_not_gap_causes():
    t_all, t1 = Trace(synthetic()), Trace(trim(synthetic(), max_depth=1))
    assert "aten::_local_scalar_dense" in set(t_all.ops()["name"])
    assert "aten::_local_scalar_dense" not in set(t1.ops()["name"]) and "aten::item" in set(t1.ops()["name"])
    cols = ["gap_us", "cause", "sync_us", "memcpy_us", "launch_us", "host_us", "unaccounted_us"]
    assert t_all.idle_gaps()[cols].equals(t1.idle_gaps()[cols])


def test_interval_functions_against_hand_computed_cases():
    from infralens_lab.parse.trace import covered, union

    iv = union([5, 0, 2, 10, 12], [6, 3, 4, 10, 15])  # [0,3)+[2,4) merge; [10,10) is empty
    assert iv.tolist() == [[0, 4], [5, 6], [12, 15]]
    assert covered(iv, [0, 3, 4.5, -10, 13], [4, 13, 5, 100, 14]).tolist() == [4, 3, 0, 8, 1]
    assert covered(union([], []), [0], [1]).tolist() == [0]


def test_idle_gaps_are_computed_once_per_threshold():
    tr = Trace(synthetic())
    first = tr.idle_gaps()
    first.loc[:, "gap_us"] = -1  # a caller editing its copy does not change the trace's
    cached = [k for k in tr._cache if isinstance(k, tuple) and k[0] == "idle_gaps"]
    assert (tr.idle_gaps()["gap_us"] > 0).all() and cached == [("idle_gaps", 50.0)]
