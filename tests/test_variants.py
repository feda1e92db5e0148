"""analysis.variants and the recorder's `variants` step: the digest of a real recorded trace, hand-checkable
numbers, the step run on a CPU at tiny sizes, and the lab tables on a SYNTHETIC record."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infralens_lab import record
from infralens_lab.analysis import variants
from infralens_lab.analysis.joins import idle_budget
from infralens_lab.evidence import EvidenceWriter, RecordedStore
from infralens_lab.parse.trace import load_trace, step_gpu_work
from infralens_lab.workloads.pipeline import VARIANTS
from infralens_lab.workloads.tiny_gpt import GPTConfig

H200 = Path(__file__).resolve().parents[1] / "data" / "recorded" / "nvidia-h200"
TINY = GPTConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=32, ffn=64, vocab=97, block_size=16)


@pytest.fixture(scope="module")
def fixed_trace():
    return load_trace(RecordedStore(H200).load("trace_fixed"))


def test_digest_of_the_recorded_fixed_trace(fixed_trace):
    d = variants.trace_digest(fixed_trace)
    k = fixed_trace.kernels()
    assert d["steps"] == 3 and d["has_gpu"] and len(d["top_kernels"]) == 5
    # the top kernels are the trace's own, in order, with their totals (µs, summed from the events)
    assert [t["name"] for t in d["top_kernels"]] == list(k["name"].head(5))
    # only the kernels the profiled steps launched (the attribution rule): the trace also holds kernels still
    # queued from the warm-up step, which would make the count no multiple of the steps
    ev = fixed_trace.gpu_events(scope="steps")
    first = d["top_kernels"][0]
    kev = ev[(ev["cat"] == "kernel") & (ev["name"] == first["name"])]
    assert first["count"] == len(kev) and first["total_us"] == pytest.approx(float(kev["dur_us"].sum()))
    assert first["count"] % d["steps"] == 0 and len(fixed_trace.gpu_events(scope="all")) > len(ev)
    assert first["name"].startswith("sm80_xmma_gemm_f32f32") and first["kind"] == "fp32 SIMT GEMM"
    # fp32 SIMT GEMMs hold most of the recorded fixed step's kernel time and no tensor-core kernel runs
    fp32 = k.loc[k["name"].map(variants.kernel_kind) == "fp32 SIMT GEMM", "pct"].sum()
    assert d["fp32_gemm_pct"] == pytest.approx(fp32) and 60 < fp32 < 90 and d["tensor_core_pct"] == 0.0
    # the period splits exactly into busy + gaps over 50 µs + shorter gaps (idle_budget's identity); the fixed
    # step leaves no gap over 50 µs, and its short gaps are under 5% of the period
    b = idle_budget(fixed_trace)
    assert d["period_ms"] == pytest.approx(b["period_ms"]) and d["idle_under_ms"] == pytest.approx(b["idle_under_ms"])
    assert b["busy_ms"] + b["idle_over_ms"] + b["idle_under_ms"] == pytest.approx(b["period_ms"])
    assert d["idle_ms_per_step"] == 0.0 and 0 < d["idle_under_ms"] < 0.05 * d["period_ms"]
    assert 95 < d["gpu_busy_pct"] <= 100
    # launch calls per step: every step of the recorded fixed trace makes the same launches (counted from the
    # events: calls inside the step ranges), each taking a few microseconds of CPU time
    w = step_gpu_work(fixed_trace)
    assert w["launch_calls"].nunique() == 1 and d["launch_calls_per_step"] == float(w["launch_calls"].iloc[0])
    assert d["launch_calls_per_step"] >= w["kernels"].iloc[0] and 1 < d["launch_call_us"] < 50
    json.dumps(d)  # JSON-shaped


def test_digest_of_the_recorded_bubble_has_its_idle_gaps(fixed_trace):
    tr = load_trace(RecordedStore(H200).load("trace_bubble"))
    d, b = variants.trace_digest(tr), idle_budget(tr)
    assert d["idle_ms_per_step"] == pytest.approx(b["idle_over_ms"]) and d["idle_ms_per_step"] > 2
    # the tokenizer's gaps: a longer period than the fixed step's, and a GPU idle a fifth of the time or so
    assert d["period_ms"] > variants.trace_digest(fixed_trace)["period_ms"] + 2 and 70 < d["gpu_busy_pct"] < 90


@pytest.mark.parametrize("name, kind", [
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(...)", "fp32 SIMT GEMM"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4", "fp32 SIMT GEMM"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off", "tensor-core kernel"),
    ("nvjet_tst_128x64_64x8_1x2_h_bz_coopA_NNT", "tensor-core kernel"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "tensor-core kernel"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "other"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", "tensor-core kernel"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", "other"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(...)", "tensor-core kernel"),
])
def test_kernel_kind_by_name(name, kind):
    assert variants.kernel_kind(name) == kind


def test_recorder_step_runs_on_cpu_at_tiny_sizes(tmp_path):
    w = EvidenceWriter(tmp_path / "rec", "test")
    rec = record.Recorder(w, log=lambda m: None)
    detail = rec.step_variants(device_name="cpu", config=TINY, batch=2, synced=3, batched=2, skip=1)
    w.close()
    ev = RecordedStore(tmp_path / "rec").load(variants.RECORD)
    got = ev.values["variants"]
    assert list(got) == list(VARIANTS) and all(n in detail for n in VARIANTS)
    for name, v in got.items():
        assert len(v["timing"]["per_step_sync_ms"]) == 3 and v["timing"]["throughput_ms_per_step"] > 0
        assert v["trace"]["has_gpu"] is False and v["trace"]["steps"] == 3 and "note" in v["trace"]
        assert v["precision"] == VARIANTS[name].precision and v["pins"] is False  # a CPU pins nothing
        assert len(v["loss_curve"]) == v["steps_run"] == 3 + 2 + 5  # synced, batched, profiled (wait+warmup+active)
        assert v["workers"] == (2 if VARIANTS[name].prefetch else 0)
    # the record says its prefetching variants did the bubble's work, and the losses show it: fp32 variants train
    # on the same batches, so their curves are the bubble's to fp32 rounding (bf16 autocast moves them a little)
    assert variants.same_work(ev.values) and variants.SAME_WORK in ev.values
    chk = variants.loss_check(ev.values).set_index("variant")
    fp32 = chk[chk["precision"] != "bf16"]
    assert (fp32["max_diff"] < 1e-4).all(), fp32
    assert ev.values["sizes"]["batch"] == 2 and ev.units["_ms"] == "ms" and "trace_digest" in ev.notes
    assert "variants" in record.STEPS and record.STEPS.index("variants") == record.STEPS.index("step_times") + 1


# ---------------------------------------------------------------- SYNTHETIC record (no GPU recording yet)
def synthetic_record() -> dict:
    """SYNTHETIC values, made up for this test only, shaped like `pipeline_variants`: NOT a measurement."""
    def v(name, period, busy, idle, fp32, tc, top, kind, step_ms):
        return {"changed": VARIANTS[name].changed, "precision": VARIANTS[name].precision,
                "timing": {"throughput_ms_per_step": step_ms},
                "trace": {"has_gpu": True, "period_ms": period, "gpu_busy_pct": busy, "idle_ms_per_step": idle,
                          "cpu_step_ms": 12.0,
                          "fp32_gemm_pct": fp32, "tensor_core_pct": tc,
                          "top_kernels": [{"name": top, "kind": kind, "count": 3, "total_us": 100.0, "pct": 20.0}]}}
    sgemm = "cutlass_80_simt_sgemm_256x128"
    return {"variants": {
        "bubble": v("bubble", 25.0, 80.0, 4.5, 78.0, 0.0, sgemm, "fp32 SIMT GEMM", 24.0),
        "bubble+prefetch": v("bubble+prefetch", 21.0, 95.0, 0.5, 78.0, 0.0, sgemm, "fp32 SIMT GEMM", 20.5),
        "bubble+pinned": v("bubble+pinned", 26.0, 77.0, 5.0, 78.0, 0.0, sgemm, "fp32 SIMT GEMM", 25.5),
        "bubble+no_sync": v("bubble+no_sync", 22.0, 90.0, 1.0, 78.0, 0.0, sgemm, "fp32 SIMT GEMM", 21.5),
        "fixed": v("fixed", 20.0, 98.0, 0.0, 80.0, 0.0, sgemm, "fp32 SIMT GEMM", 19.5),
        "fixed+tf32": v("fixed+tf32", 8.0, 97.0, 0.0, 0.0, 50.0, "sm90_xmma_gemm_tf32", "tensor-core kernel", 7.9),
        "fixed+bf16": v("fixed+bf16", 6.4, 96.0, 0.0, 0.0, 45.0, "nvjet_hsh", "tensor-core kernel", 6.3),
    }}


def test_one_change_table_on_a_synthetic_record():
    t = variants.one_change_table(synthetic_record()).set_index("variant")
    assert list(t.index) == ["bubble", "bubble+prefetch", "bubble+pinned", "bubble+no_sync", "fixed"]
    assert t.loc["bubble", "speedup"] == 1.0 and t.loc["bubble+prefetch", "speedup"] == pytest.approx(25 / 21)
    assert t.loc["bubble+pinned", "speedup"] == pytest.approx(25 / 26)  # slower (synthetic): a pinning copy per step
    assert list(t["amdahl_bound"]) == pytest.approx([1 / 0.8] * 5) and t.loc["fixed", "step_ms"] == 19.5
    assert t.loc["bubble+no_sync", "changed"] == VARIANTS["bubble+no_sync"].changed
    assert list(t["kind"]) == ["baseline", "one change", "one change", "one change", "bundle"]
    # the argmax derivation on this table: the one-change row with the largest speedup (lab01.q6 asks the smallest)
    from infralens_lab.quiz.derive import derive
    assert derive("argmax", t.reset_index(), column="speedup", label="variant", where={"kind": "one change"}) \
        == "bubble+prefetch"


def test_precision_table_on_a_synthetic_record():
    ceil = {"fp32": 50.0, "tf32": 400.0, "bf16": 800.0}  # SYNTHETIC ceilings (TFLOP/s)
    t = variants.precision_table(synthetic_record(), ceil).set_index("variant")
    assert t.loc["fixed+tf32", "speedup"] == pytest.approx(2.5) and t.loc["fixed+bf16", "speedup"] == pytest.approx(20 / 6.4)
    # fixed: period 20 ms, GPU busy 98% = 19.6 ms, CPU 12 ms per step; 80% of kernel time in fp32 GEMMs, 8x faster
    # at the TF32 ceiling: GPU floor 19.6 * (0.2 + 0.8 / 8) = 5.88 ms, under the CPU's 12 ms: bound 20 / 12
    assert t.loc["fixed+tf32", "gpu_floor_ms"] == pytest.approx(19.6 * 0.3)
    assert t.loc["fixed+tf32", "bound"] == pytest.approx(20 / 12) and t.loc["fixed+tf32", "limited_by"] == "cpu"
    assert t.loc["fixed+tf32", "gpu_only_bound"] == pytest.approx(20 / (19.6 * 0.3))  # the GPU floor alone: 3.4x
    assert t.loc["fixed+bf16", "bound"] == pytest.approx(20 / 12) and t["bound"].isna().tolist() == [True, False, False]
    assert t.loc["fixed+tf32", "top_kind"] == "tensor-core kernel" and t.loc["fixed", "fp32_gemm_pct"] == 80.0
    assert t.loc["fixed+tf32", "step_ms"] == 7.9
    assert "bound" not in variants.precision_table(synthetic_record()).columns


def test_tables_name_what_is_missing():
    rec = synthetic_record()
    del rec["variants"]["bubble+pinned"]
    with pytest.raises(ValueError, match=r"variants \['bubble\+pinned'\] missing"):
        variants.one_change_table(rec)
    rec = synthetic_record()
    rec["variants"]["bubble"]["trace"] = {"has_gpu": False}
    with pytest.raises(ValueError, match="no GPU side"):
        variants.one_change_table(rec)


def test_effect_words_are_sized_by_the_spread():
    assert variants.effect_words(1.01, 1.5).startswith("no change beyond the run-to-run spread (+1.0% against ±0.8%")
    assert variants.effect_words(1.04, 10.0).startswith("no change")  # a p10-p90 width of 10%: ±5% around the median
    # issue 26.7: a 15.1% p10-p90 width is ±7.5% around the median; against a baseline of ±7.0% the bands overlap
    # until the medians are 14.5% apart (the recorded bubble+pinned: +12.9%)
    assert variants.effect_words(1.129, 15.1) == "13% faster"  # beyond its own ±7.5% alone
    assert variants.effect_words(1.129, 15.1, 13.9) == ("no change beyond the run-to-run spread (+12.9% against ±7.5% and "
                                                 "±7.0%: the p10-p90 bands overlap)")
    assert variants.effect_words(1.16, 15.1, 13.9) == "16% faster"
    assert variants.effect_words(1.23, 2.0) == "23% faster" and variants.effect_words(0.9, 2.0) == "10% slower"
    assert variants.effect_words(1.05, float("nan")) == "5% faster"  # no percentiles: the 2% floor


def test_notes_on_a_synthetic_record():
    one = variants.one_change_table(synthetic_record())
    notes = variants.one_change_notes(one)
    assert notes[0].startswith("bubble+prefetch, batches tokenized ahead") and "19% faster" in notes[0]
    assert "80% of the 5.0 ms per step the three edits bought together" in notes[0]  # (25 - 21) / (25 - 20)
    assert "4% slower" in notes[1] and "-20% of the 5.0 ms" in notes[1]  # no percentiles: the 2% floor
    # single gains 4 - 1 + 3 = 6 ms against 5 ms for the bundle: more than 10% apart
    assert "bought 6.0 ms per step against 5.0 ms" in notes[-1] and "the edits overlap" in notes[-1]
    rec = synthetic_record()
    rec["variants"]["bubble+no_sync"]["trace"]["period_ms"] = 24.5  # single gains 4 - 1 + 0.5 = 3.5 < 0.9 * 5
    assert "an edit pays off only once another is in" in variants.one_change_notes(variants.one_change_table(rec))[-1]
    ceil = {"fp32": 50.0, "tf32": 400.0, "bf16": 800.0}
    prec = variants.precision_notes(variants.precision_table(synthetic_record(), ceil), values=synthetic_record())
    # 2.5x against 20 / 12 = 1.67x: past it (the synthetic CPU time did not stay at 12 ms... it is 12 in both)
    assert prec[0].startswith("fixed+tf32: 8.0 ms per step, 2.50x the fp32 step against a bound of 1.67x with both "
                              "floors (the CPU's decides: GPU work left 5.9 ms, CPU 12.0 ms per step; the GPU floor "
                              "alone would allow 3.4x), and past it")
    assert "top kernel is a tensor-core kernel (sm90_xmma_gemm_tf32)" in prec[0] and "(fp32: 80%)" in prec[0]
    assert "the CPU sets the pace" not in prec[0]  # 97% busy
    rec = synthetic_record()
    rec["variants"]["fixed+bf16"]["trace"].update(period_ms=15.0, gpu_busy_pct=45.0, cpu_step_ms=14.5)
    bf16 = variants.precision_notes(variants.precision_table(rec, ceil), values=rec)[1]
    assert "1.33x the fp32 step against a bound of 1.67x with both floors (the CPU's decides" in bf16
    assert "busy only 45% of the step now: the CPU sets the pace; its CPU time per step went from 12.0 to 14.5 ms; " \
           "this record predates the digest's launch counts" in bf16
    assert "Without the profiler the same steps take 6.3 ms back to back (2.38x less than traced)" in bf16
    for d, n, us in ((rec["variants"]["fixed"]["trace"], 300, 4.0), (rec["variants"]["fixed+bf16"]["trace"], 400, 5.0)):
        d.update(launch_calls_per_step=n, launch_call_us=us)
    bf16 = variants.precision_notes(variants.precision_table(rec, ceil), values=rec)[1]
    # 100 more calls at 4 µs = +0.4 ms; 400 calls 1 µs slower = +0.4 ms; the rest of the 2.5 ms rise: +1.7 ms
    assert ("went from 12.0 to 14.5 ms: 400 launch calls per step against 300 (+0.4 ms at fixed's 4.0 µs a call), "
            "each call 5.0 µs against 4.0 (+0.4 ms), and +1.7 ms of other CPU work") in bf16


def test_traces_and_step_times_mark_the_same_work_prefetch(tmp_path, monkeypatch):
    """The recorder's traces and step_times records say their fixed step tokenized every batch (issue 26.3), the
    flag analysis.variants.same_work reads; the train-step ncu run records the SM clock (issue 26.9)."""
    from infralens_lab.workloads.pipeline import make_step

    monkeypatch.setattr(record, "make_step", lambda v: make_step(v, device="cpu", config=TINY, batch=2, workers=1))
    monkeypatch.setattr(record, "STEP_TIME_STEPS", 12)
    monkeypatch.setattr(record, "STEP_TIME_BATCHED", 2)
    w = EvidenceWriter(tmp_path / "rec", "test")
    rec = record.Recorder(w, log=lambda m: None)
    rec.step_traces()
    rec.step_step_times()
    w.close()
    st = RecordedStore(tmp_path / "rec")
    summary, times = st.load("trace_summary").values, st.load("step_times").values
    assert all(variants.same_work(summary[v]) and variants.same_work(times[v]) for v in ("bubble", "fixed"))
    assert not variants.same_work({}) and not variants.same_work({variants.SAME_WORK: "yes"})  # only a recorded True counts
    assert len(times["fixed"]["per_step_sync_ms"]) == 12
    assert "sm__cycles_elapsed.avg.per_second" in record.TRAIN_STEP_METRICS
