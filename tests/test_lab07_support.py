"""labs_support.lab07 on a hand-made recorded set (traces and a gates_gpu record with known answers):
the family comparison, forward times, the k table, the regression tables, the quiz evidence, and the
notes printed when a record is missing."""
from __future__ import annotations

import pytest

from infralens_lab.evidence import EvidenceWriter, RecordedStore
from infralens_lab.labs_support import lab07
from infralens_lab.quiz import check

T0 = 1_000_000.0


def X(name, cat, start, end, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": T0 + start, "dur": end - start,
            "args": args}


def trace(layout: bool) -> dict:
    """One convolution (100 µs kernel), with a 30 µs NCHW->NHWC transform before it when ``layout``."""
    cpu = [X("aten::conv2d", "cpu_op", 0, 100), X("aten::cudnn_convolution", "cpu_op", 5, 95),
           X("cudaLaunchKernel", "cuda_runtime", 20, 25, correlation=1),
           X("cudaLaunchKernel", "cuda_runtime", 40, 45, correlation=2)]
    gpu = [X("sm90_xmma_fprop_implicit_gemm_bf16", "kernel", 60, 160, tid=7, pid=0, correlation=2)]
    if layout:
        gpu.append(X("nchwToNhwcKernel", "kernel", 26, 56, tid=7, pid=0, correlation=1))
    else:
        cpu.pop(2)
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


def test_formats_compared_and_q5_evidence(store):
    rec = lab07.recorded_resnet(store)
    cmp = lab07.format_compare(rec).set_index("family")
    assert cmp.loc["layout transform", "channels_first_us"] == 30 and cmp.loc["layout transform", "channels_last_us"] == 0
    assert cmp.loc["all kernels", "channels_first_us"] == 130 and cmp.loc["all kernels", "channels_last_us"] == 100
    ch = lab07.change_by_family(cmp.reset_index())
    assert "all kernels" not in set(ch["family"])
    assert check("lab07.q5", "layout transform", evidence=ch).status == "correct"
    assert check("lab07.q5", "convolution", evidence=ch).status == "wrong"
    fam_first = lab07.kernel_families(rec["channels_first"][0])
    assert check("lab07.q4", "convolution", evidence=fam_first).status == "correct"
    top = lab07.top_kernels(rec["channels_first"][0])
    assert list(top["family"]) == ["convolution", "layout transform"]


def test_forward_times_and_k_table(store):
    ev = lab07.recorded_gates(store)
    ft = lab07.forward_times(ev).set_index("memory_format")
    assert ft.loc["channels_last", "median_ms"] == 9.0
    kt = lab07.k_table(ev.values["aa_ratios"], tolerance=0.05)
    assert list(kt["k"]) == list(lab07.KS)
    assert (kt["false_alarm_pct"] == 0).all()  # every A/A ratio is within 2% of the median: nothing fails at 5%
    assert lab07.smallest_k(kt) == 1
    assert check("lab07.q7", 1, evidence={"smallest_k": lab07.smallest_k(kt)}).status == "correct"
    assert lab07.smallest_k(kt.assign(false_alarm_pct=50.0)) is None


def test_regression_tables(store):
    ev = lab07.recorded_gates(store)
    t = lab07.regression_times(ev).set_index("regression")
    # tolerance = A/A spread: p10 0.986, p90 1.014 -> 2.8%
    assert t.attrs["tolerance"] == pytest.approx(0.028)
    assert bool(t.loc["fp32_matmul", "caught_by_time"]) and bool(t.loc["noncontig", "caught_by_time"])
    assert not t.loc["item", "caught_by_time"] and not t.loc["lost_fusion", "caught_by_time"]
    assert "intended" not in t.index
    mk = lab07.matmul_kernels(ev)
    assert set(mk["step"]) == {"intended", "fp32_matmul"} and mk["kernel"].str.contains("tf32").sum() == 1
    assert len(lab07.gpu_counts(ev)) == 6
    rg = lab07.ratio_gate_table(ev, {"ratios": {"coalesced / copy_ (float32)": {"tolerance": 0.05, "k": 7}}})
    assert rg["gate_reference"].iloc[0] == 1.0 and rg["k_needed"].iloc[0] >= 1
    b = rg["bench_ratio"].iloc[0]  # the committed reference's bench ratio of the same pair
    assert rg["procedure_gap_pct"].iloc[0] == pytest.approx(100 * (1.0 / b - 1))


def test_caught_by_counts():
    import pandas as pd

    t = pd.DataFrame([
        {"regression": "intended", "aten_ops_per_step": 6, "syncs_per_step": 0, "graph_breaks": 0, "peak_bytes": 1000},
        {"regression": "item", "aten_ops_per_step": 8, "syncs_per_step": 1, "graph_breaks": 0, "peak_bytes": 1000},
        {"regression": "fp32_matmul", "aten_ops_per_step": 6, "syncs_per_step": 0, "graph_breaks": 0, "peak_bytes": 1040},
    ])
    c = lab07.caught(t).set_index("regression")
    assert c.loc["item", "caught_by"] == "aten_ops_per_step, syncs_per_step"
    assert c.loc["fp32_matmul", "caught_by"] == "none"  # 4% more bytes is inside the 5% slack


def test_missing_records_print_a_note(tmp_path, capsys):
    w = EvidenceWriter(tmp_path / "rec", "test")
    w.write("device", {"name": "x"})
    w.close()
    st = RecordedStore(tmp_path / "rec")
    assert lab07.recorded_resnet(st) is None and lab07.recorded_gates(st) is None
    out = capsys.readouterr().out
    assert "resnet_trace_channels_first" in out and "gates_gpu" in out and "--only gates" in out
    assert lab07.regression_times(None) is None and lab07.ratio_gate_table(None, {}) is None
    lab07.show_question("lab07.q7", None)
    assert "cannot be checked now" in capsys.readouterr().out


def test_live_noise_shape():
    df = lab07.live_noise(runs=3, steps=1)
    assert list(df.columns) == ["run", "a_ms", "b_ms", "ratio"] and len(df) == 3 and (df["ratio"] > 0).all()
    s = lab07.noise_summary(df)
    assert list(s["what"]) == ["absolute time a (ms)", "ratio a / b"]


def test_grader_rebuilds_the_notebooks_recorded_evidence(store, monkeypatch):
    """The grader's providers for q4, q5 and q7 (quiz.grading_evidence) build the same evidence as the
    notebook's cells from the same recorded set, so the grader's right answer is the notebook's."""
    from infralens_lab.quiz import question
    from infralens_lab.quiz import grader as G

    monkeypatch.setattr(lab07, "store", lambda: store)
    G.grader_evidence.cache_clear()
    try:
        k = lab07.smallest_k(lab07.k_table(lab07.recorded_gates(store).values["aa_ratios"], tolerance=0.05))
        def status(qid, answer):
            return G.judge_question(question(qid), G.Answer(value=answer))[0]

        assert status("lab07.q4", "convolution") == "correct" and status("lab07.q4", "elementwise") == "wrong"
        assert status("lab07.q5", "layout transform") == "correct" and status("lab07.q5", "convolution") == "wrong"
        assert k is not None and status("lab07.q7", k) == "correct" and status("lab07.q7", k + 2) == "wrong"
    finally:
        G.grader_evidence.cache_clear()
