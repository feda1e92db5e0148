"""labs_support.lab07 on a hand-made recorded set (traces and a gates_gpu record with known answers): the
family comparison, the GPU busy share, forward times and variants, the regression tables, the derived questions
against the notebook's evidence, the grading keys (quiz.keys.lab07) on the committed set, and the notes printed
when a record is missing."""
from __future__ import annotations

import pytest

from infralens_lab import evidence
from infralens_lab.analysis import gates
from infralens_lab.evidence import EvidenceWriter, RecordedStore
from infralens_lab.labs_support import lab07
from infralens_lab.quiz import check

T0 = 1_000_000.0


def X(name, cat, start, end, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": T0 + start, "dur": end - start,
            "args": args}


def trace(layout: bool) -> dict:
    """One profiled forward (a 300 µs step): one convolution (100 µs kernel), with a 30 µs NCHW->NHWC transform
    before it when ``layout``."""
    cpu = [X("ProfilerStep#0", "user_annotation", 0, 300), X("aten::conv2d", "cpu_op", 0, 100),
           X("aten::cudnn_convolution", "cpu_op", 5, 95),
           X("cudaLaunchKernel", "cuda_runtime", 20, 25, correlation=1),
           X("cudaLaunchKernel", "cuda_runtime", 40, 45, correlation=2)]
    gpu = [X("sm90_xmma_fprop_implicit_gemm_bf16", "kernel", 60, 160, tid=7, pid=0, correlation=2)]
    if layout:
        gpu.append(X("nchwToNhwcKernel", "kernel", 26, 56, tid=7, pid=0, correlation=1))
    else:
        cpu.pop(3)
    return {"traceEvents": cpu + gpu}


def gates_values() -> dict:
    def reg(name, compiled, ratios, launches, kernels=()):
        return {"regression": name, "compiled": compiled, "ratio_samples": ratios, "launches_per_step": launches,
                "cuda_syncs_per_step": 1.0 if name == "item" else 0.0, "graph_breaks": int(name == "lost_fusion"),
                "aten_ops_per_step": None if compiled else 6.0, "kernels": list(kernels)}

    tf32 = [{"name": "sm90_xmma_gemm_f32f32_tf32f32_f32_nn", "per_step": 2.0, "total_us": 200.0}]
    fp32 = [{"name": "sm90_xmma_gemm_f32f32_f32f32_f32_nn", "per_step": 2.0, "total_us": 1400.0}]
    return {"errors": {},
            "resnet": {f: {"batch": 32, "size": 224, "dtype": "bfloat16", "median_ms": m, "p10_ms": m * 0.99,
                           "p90_ms": m * 1.01} for f, m in (("channels_first", 12.0), ("channels_last", 9.0))},
            "regressions": [reg("intended", False, [1.0, 1.0, 1.0], 5, tf32), reg("item", False, [0.99, 1.0, 0.98], 7),
                            reg("noncontig", False, [0.9, 0.91, 0.9], 6), reg("lost_fusion", False, [1.0, 1.0, 1.0], 5),
                            reg("fp32_matmul", False, [0.2, 0.21, 0.2], 5, fp32),
                            reg("intended", True, [1.0, 1.0, 1.0], 3)],
            "aa_ratios": [0.98, 0.99, 1.0, 1.0, 1.0, 1.01, 1.02],
            "ratio_gates": {"coalesced / copy_ (float32)": [1.0, 1.01, 0.99, 1.0, 1.0]}}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    w = EvidenceWriter(d, "test")
    w.write("resnet_trace_channels_first", trace(True))
    w.write("resnet_trace_channels_last", trace(False))
    w.write("gates_gpu", gates_values())
    w.close()
    return RecordedStore(d)


def test_formats_compared_and_busy_share(store):
    rec = lab07.recorded_resnet(store)
    cmp = lab07.format_compare(rec).set_index("family")
    assert cmp.loc["layout transform", "channels_first_us"] == 30 and cmp.loc["layout transform", "channels_last_us"] == 0
    assert cmp.loc["all kernels", "channels_first_us"] == 130 and cmp.loc["all kernels", "channels_last_us"] == 100
    busy = lab07.busy_table(rec, lab07.recorded_gates(store)).set_index("format")
    # channels_first: kernels 26-56 and 60-160 (130 µs) of a forward profiled from 0 to 160 µs; 12 ms unprofiled
    assert busy.loc["channels_first", "kernels"] == 2 and busy.loc["channels_first", "kernel_ms"] == pytest.approx(0.13)
    assert busy.loc["channels_first", "busy_profiled_pct"] == pytest.approx(100 * 130 / 160)
    assert busy.loc["channels_first", "busy_pct"] == pytest.approx(100 * 0.13 / 12.0)
    assert lab07.busy_table(rec, None)["busy_pct"].isna().all()


def test_forward_times_and_variants(store, capsys):
    ev = lab07.recorded_gates(store)
    ft = lab07.forward_times(ev).set_index("format")
    assert ft.loc["channels_last", "median_ms"] == 9.0
    assert lab07.variants_table(ev) is None and "not in this recording yet" in capsys.readouterr().out
    from types import SimpleNamespace

    rows = [{"variant": "eager", "median_ms": 8.0, "kernels": [282, 282], "kernel_us": 2400.0, "gpu_busy_us": 2400.0},
            {"variant": "cuda_graph", "median_ms": 3.0, "kernels": [282, 282], "kernel_us": 2400.0, "gpu_busy_us": 2400.0}]
    v = lab07.variants_table(SimpleNamespace(values={"resnet_variants": {"rows": rows}})).set_index("variant")
    assert v.loc["cuda_graph", "vs_eager"] == pytest.approx(8 / 3) and v.loc["cuda_graph", "busy_pct"] == pytest.approx(80.0)


def test_regression_tables(store):
    ev = lab07.recorded_gates(store)
    t = lab07.regression_times(ev, tolerance=0.028).set_index("regression")
    assert bool(t.loc["fp32_matmul", "caught"]) and bool(t.loc["noncontig", "caught"])
    assert not t.loc["item", "caught"] and not t.loc["lost_fusion", "caught"]
    assert "intended" not in t.index and list(t.columns) == ["mode", "launches", "syncs", "ratio", "p10", "p90", "caught"]
    mk = lab07.matmul_kernels(ev)
    assert set(mk["step"]) == {"intended", "fp32_matmul"} and mk["kernel"].str.contains("tf32").sum() == 1
    assert "per_step" not in mk.columns and "warm-up" in mk.attrs["note"]  # this record predates whole counts
    assert mk.set_index("step").loc["fp32_matmul", "us_per_launch"] == pytest.approx(700.0)
    new = ev.values["regressions"][0] | {"per_step": {"kernels": [2, 2]}}
    from types import SimpleNamespace

    mk2 = lab07.matmul_kernels(SimpleNamespace(values={"regressions": [new]}))
    assert list(mk2["per_step"]) == [2] and "note" not in mk2.attrs


def test_the_default_set_counts_whole_launches_and_syncs_per_step():
    """Issue 27.9 on the recorded H100 set: counts per step are whole numbers (each step's own work, by the
    attribution rule), and only the .item() regression syncs, once per step, eager and compiled."""
    t = lab07.regression_times(lab07.recorded_gates(evidence.reference("nvidia-h100-80gb-hbm3")), 0.03)
    assert all(float(v).is_integer() for v in [*t["launches"], *t["syncs"]])
    assert {(r.regression, r.mode): r.syncs for r in t.itertuples()} == {
        (g, m): (1 if g == "item" else 0) for g in ("item", "noncontig", "lost_fusion", "fp32_matmul")
        for m in ("eager", "compiled")}


def test_missing_records_print_a_note(tmp_path, capsys):
    w = EvidenceWriter(tmp_path / "rec", "test")
    w.write("device", {"name": "x"})
    w.close()
    st = RecordedStore(tmp_path / "rec")
    assert lab07.recorded_resnet(st) is None and lab07.recorded_gates(st) is None
    out = capsys.readouterr().out
    assert "resnet_trace_channels_first" in out and "gates_gpu" in out and "--only gates" in out
    assert lab07.regression_times(None, 0.03) is None and lab07.matmul_kernels(None) is None


def test_live_op_counts():
    tr, ev = lab07.live_resnet()
    c = lab07.op_counts(tr).set_index("op")
    assert c.loc["aten::conv2d", "calls_per_step"] == 53 and c.loc["aten::batch_norm", "calls_per_step"] == 53
    assert ev.provenance.source == "live"


def test_derived_questions_mark_against_the_notebooks_evidence(store):
    from infralens_lab.measure.top_ops import op_times

    rec = lab07.recorded_resnet(store)
    ot = op_times(rec["channels_first"][0])  # conv2d keeps 100 - 90 = 10 µs, cudnn_convolution 90 - 5 - 5 = 80 µs
    assert ot.set_index("name").loc["aten::cudnn_convolution", "self_ms"] == pytest.approx(0.08)
    assert ot.set_index("name").loc["aten::conv2d", "self_ms"] == pytest.approx(0.01)
    # the hand-made traces: channels_first 130 µs of kernels (30 of them the layout transform), channels_last 100
    g = lab07.layout_saving(rec, lab07.recorded_gates(store))
    assert g["share"] == pytest.approx(1.0)
    assert check("lab07.q5", 1.0, evidence=g).correct and not check("lab07.q5", 0.3 / 1.3, evidence=g).correct
    from infralens_lab.quiz import question

    assert question("lab07.ex1").kind == question("lab07.ex2").kind == "function"  # tests/test_functions_lab07.py
    import pandas as pd

    rc = pd.DataFrame([
        {"regression": "intended", "aten_ops_per_step": 6, "syncs_per_step": 0, "graph_breaks": 0, "peak_bytes": 1000},
        {"regression": "item", "aten_ops_per_step": 8, "syncs_per_step": 1, "graph_breaks": 0, "peak_bytes": 1000},
        {"regression": "noncontig", "aten_ops_per_step": 7, "syncs_per_step": 0, "graph_breaks": 0, "peak_bytes": 1100}])
    assert check("lab07.ex3", 4, evidence=rc).correct and not check("lab07.ex3", 3, evidence=rc).correct


def test_grader_keys_use_the_recorded_set():
    """quiz.keys.lab07 builds the notebook's evidence from the committed default set by the same functions:
    the grader's keys for q5 and q6 are what the notebook's cells compute (ex1 and ex2 are function exercises:
    tests/test_functions_lab07.py)."""
    from infralens_lab.quiz import grader, question

    st = lab07.store()
    rec, gev = lab07.recorded_resnet(st), lab07.recorded_gates(st)
    if rec is None or gev is None:
        pytest.skip("no recorded lab 07 evidence")
    grader.grader_evidence.cache_clear()
    try:
        cmp = lab07.format_compare(rec).set_index("family")  # the family table the notebook shows
        d = cmp["channels_first_us"] - cmp["channels_last_us"]
        assert grader.expected_for_grading(question("lab07.q5")) == pytest.approx(d["layout transform"] / d["all kernels"])
        procs = gev.values.get("aa_processes")
        if procs:  # q6: the median over processes of ratio spread / a's spread, from the table the notebook shows
            t = gates.drift_table({i: (p["a_ms"], p["b_ms"]) for i, p in enumerate(procs)}).iloc[:-1]
            by_table = sorted(t["ratio_spread_pct"] / t["a_spread_pct"])[len(procs) // 2]
            assert grader.expected_for_grading(question("lab07.q6")) == pytest.approx(by_table)
    finally:
        grader.grader_evidence.cache_clear()
