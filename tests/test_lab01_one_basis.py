"""Lab 01 under issue 37 (items 3 and 4): a bound and the speed-up it bounds come from one basis (no profiler),
with the profiler's overhead a measured number; and one statement, one GPU (a live number is held against its
own GPU's ceiling, found by :func:`infralens_lab.evidence.own_set`, never another GPU's). Checked on every
committed one-GPU recorded set (H100 and H200) and on inputs that make the other branches fire."""
from __future__ import annotations

import copy

import pytest

from infralens_lab import device, evidence
from infralens_lab.analysis import bottleneck, variants
from infralens_lab.analysis.hardware import matmul_rate_table
from infralens_lab.analysis.overlap import step_bound
from infralens_lab.labs_support import lab01
from infralens_lab.quiz.derive import derive


def _sets_with(*names: str) -> list:
    """Every committed recorded set holding the records ``names`` (a skip when there is none)."""
    sets = [s for s in evidence.load_all_sets() if all(n in s.names() for n in names)]
    if not sets:
        pytest.skip(f"no recorded set holds {names} yet")
    return sets


def _variant_sets():
    return _sets_with(variants.RECORD, "ceilings")


def _inputs(st):
    return st.load(variants.RECORD).values, matmul_rate_table(st.load("ceilings").values).set_index(
        "dtype")["rate_TFLOPs"].to_dict()


@pytest.fixture(params=["nvidia-h100-80gb-hbm3", "nvidia-h200"])
def one_gpu_set(request):
    """Each committed one-GPU set by name: the issue's two GPUs must both be here, or this fails."""
    have = evidence.recordings()
    assert request.param in have, f"recorded set {request.param!r} missing; sets here: {have}"
    return evidence.reference(request.param)


# ---------------------------------------------------------------- item 3: one basis, the untraced one
def test_the_untraced_tf32_bound_holds_on_every_recorded_set(one_gpu_set):
    values, rates = _inputs(one_gpu_set)
    fx = variants.untraced_fix(values, rates, "fixed+tf32")
    v = values["variants"]
    # every input is on the untraced basis: the period is the fixed step back to back, no profiler ...
    assert fx.inputs["period_ms"] == v["fixed"]["timing"]["throughput_ms_per_step"]
    # ... and the CPU floor is the profiled CPU time over a factor measured on another precision, never tf32's own
    assert fx.cpu_x_from != "fixed+tf32" and fx.cpu_x > 1
    assert fx.inputs["cpu_ms"] == pytest.approx(v["fixed"]["trace"]["cpu_step_ms"] / fx.cpu_x)
    src = v[fx.cpu_x_from]
    assert fx.cpu_x == pytest.approx(src["trace"]["cpu_step_ms"] / src["timing"]["throughput_ms_per_step"])
    assert src["trace"]["gpu_work_ms"] < 0.5 * src["timing"]["throughput_ms_per_step"]  # host-bound untraced
    bound = step_bound(**fx.inputs)
    measured = v["fixed"]["timing"]["throughput_ms_per_step"] / v["fixed+tf32"]["timing"]["throughput_ms_per_step"]
    assert measured <= bound.bound, (one_gpu_set.gpu, measured, bound)  # the issue: 1.63x beat a 1.15x bound
    t = variants.untraced_bounds(values, rates).set_index("variant")
    assert t.loc["fixed+tf32", "held"] and t.loc["fixed+tf32", "bound"] == pytest.approx(bound.bound)
    assert t.loc["fixed+tf32", "speedup"] == pytest.approx(measured)
    assert t.loc["fixed+tf32", "low"] <= measured <= t.loc["fixed+tf32", "high"]
    # the traced bound is another basis: its CPU floor, measured under the profiler, is larger than the estimate
    fd = v["fixed"]["trace"]
    traced = variants.fix_bound(fd, fx.inputs["fraction"], fx.inputs["speedup"])
    assert traced.cpu_floor_ms > bound.cpu_floor_ms


def test_every_untraced_bound_holds_where_it_can_be_built():
    for st in _variant_sets():
        values, rates = _inputs(st)
        t = variants.untraced_bounds(values, rates)
        built = t[t["bound"].notna()]
        assert not built.empty, st.gpu
        assert built["held"].all(), (st.gpu, built[["variant", "speedup", "bound"]])
        for r in t[t["bound"].isna()].itertuples():
            assert "no untraced CPU floor" in r.why, r.why


def test_the_profiler_overhead_is_measured_on_the_same_config(one_gpu_set):
    values, _ = _inputs(one_gpu_set)
    ov = variants.profiler_overhead(values).set_index("variant")
    v = values["variants"]
    for n, r in ov.iterrows():
        assert r["period_x"] == pytest.approx(v[n]["trace"]["period_ms"] / v[n]["timing"]["throughput_ms_per_step"])
    # the GPU-paced fixed step: the profiler leaves its period within 1% (its cost is on the CPU, hidden here)
    assert abs(ov.loc["fixed", "period_x"] - 1) < 0.01 and not ov.loc["fixed", "host_bound"]
    assert ov["cpu_x"].isna().tolist() == (~ov["host_bound"]).tolist()


def test_exercise_4_key_is_the_untraced_bound(monkeypatch):
    from infralens_lab.quiz.keys import lab01 as keys

    for st in _variant_sets():
        monkeypatch.setattr(keys, "_store", lambda st=st: st)
        fix = keys.tf32_fix()
        values, rates = _inputs(st)
        assert fix == variants.untraced_fix(values, rates, "fixed+tf32").inputs
        got = derive("step_bound", fix)
        v = values["variants"]
        measured = v["fixed"]["timing"]["throughput_ms_per_step"] / v["fixed+tf32"]["timing"]["throughput_ms_per_step"]
        assert got >= measured, (st.gpu, got, measured)


def _synthetic():
    """SYNTHETIC record (made up for this test, NOT a measurement): the pipeline_variants fields these functions read."""
    def v(precision, period, busy, cpu, gpu_work, step, fp32=80.0):
        return {"precision": precision, "changed": precision,
                "timing": {"throughput_ms_per_step": step, "median_ms": step, "p10_ms": 0.95 * step,
                           "p90_ms": 1.05 * step, "per_step_sync_ms": [step] * 40},
                "trace": {"has_gpu": True, "period_ms": period, "gpu_busy_pct": busy, "cpu_step_ms": cpu,
                          "gpu_work_ms": gpu_work, "fp32_gemm_pct": fp32, "tensor_core_pct": 0.0}}
    return {"variants": {"fixed": v("fp32", 20.0, 98.0, 16.0, 19.6, 19.8),
                         "fixed+tf32": v("tf32", 19.0, 40.0, 19.0, 7.0, 12.0, 0.0),
                         "fixed+bf16": v("bf16", 20.0, 25.0, 20.0, 5.0, 12.5, 0.0)}}


CEIL = {"fp32": 50.0, "tf32": 400.0, "bf16": 800.0}  # SYNTHETIC ceilings (TFLOP/s)


def test_untraced_fix_on_synthetic_inputs_and_its_refusals():
    rec = _synthetic()
    fx = variants.untraced_fix(rec, CEIL)
    # bf16: 20 ms traced CPU over a 12.5 ms untraced step (GPU 5 ms: host-bound) = 1.6x; 16 / 1.6 = 10 ms
    assert fx.cpu_x_from == "fixed+bf16" and fx.cpu_x == pytest.approx(1.6)
    assert fx.inputs == pytest.approx({"period_ms": 19.8, "gpu_ms": 19.6, "cpu_ms": 10.0, "fraction": 0.8,
                                       "speedup": 8.0})
    assert step_bound(**fx.inputs).bound == pytest.approx(1.98) and fx.period_x == pytest.approx(20 / 19.8)
    assert any("over 1.600, the profiler's factor" in ln for ln in fx.lines())
    # bf16 is bounded with tf32's factor only when tf32 is host-bound untraced; here it is not (7 of 12 ms)
    t = variants.untraced_bounds(rec, CEIL).set_index("variant")
    assert t.loc["fixed+tf32", "held"] and t["bound"].isna().tolist() == [False, True]
    assert "fixed+tf32's GPU is busy 58% of its untraced step" in t.loc["fixed+bf16", "why"]
    notes = variants.untraced_notes(t.reset_index())
    assert notes[0].startswith("fixed+tf32 without the profiler: 12.0 ms per step back to back, 1.65x the fixed step")
    assert "within it, 66% of the possible gain" in notes[0] and "cpu_issue_ms" in notes[1]
    no_src = copy.deepcopy(rec)
    no_src["variants"]["fixed+bf16"]["trace"]["gpu_work_ms"] = 12.0  # GPU-paced untraced: no factor to measure
    with pytest.raises(variants.UntracedFloorMissing, match=r"fixed\+bf16's GPU is busy 96%.*cpu_issue_ms"):
        variants.untraced_fix(no_src, CEIL)
    with pytest.raises(ValueError, match="no 'tf32' ceiling in \\['bf16', 'fp32'\\]"):
        variants.untraced_fix(rec, {"fp32": 50.0, "bf16": 800.0})
    bad = copy.deepcopy(rec)
    bad["variants"]["fixed"]["timing"]["throughput_ms_per_step"] = None
    with pytest.raises(ValueError, match=r"fixed has timing\.throughput_ms_per_step=None"):
        variants.profiler_overhead(bad)
    # past the bound: a CPU estimate that was too high is named as such
    past = copy.deepcopy(rec)
    past["variants"]["fixed+tf32"]["timing"]["throughput_ms_per_step"] = 9.0
    line = variants.untraced_notes(variants.untraced_bounds(past, CEIL))[0]
    assert "past it, so the CPU floor's estimate was too high" in line


def test_lever_outcome_on_the_untraced_basis():
    lever = step_bound(19.8, 19.6, 10.0, fraction=0.8, speedup=8.0)  # CPU floor 10 ms decides: 1.98x
    inside = bottleneck.lever_outcome(lever, "TF32", 19.8, 12.0, basis="untraced, back to back", traced_speedup=1.05)
    assert inside.startswith("Measured, TF32 gave 1.65x (12.0 ms per step, untraced, back to back): within the bound")
    assert "Under the profiler the same steps gave 1.05x" in inside
    noisy = bottleneck.lever_outcome(lever, "TF32", 19.8, 10.1, basis="untraced", spread=(1.8, 2.1))
    assert noisy.startswith("Measured, TF32 gave 1.96x (10.1 ms per step, untraced; p10-p90 1.80-2.10x, the bound inside it)")
    past = bottleneck.lever_outcome(lever, "TF32", 19.8, 9.0, basis="untraced, back to back")
    assert "estimated from the profiled CPU time and the profiler's measured factor" in past
    assert "measured under the profiler" not in past


# ---------------------------------------------------------------- item 4: one statement, one GPU
def _fake_gpu(monkeypatch, name: str):
    """Fake the device facts of a live GPU called ``name`` (no GPU here)."""
    f = device.DeviceFacts(mode="gpu", mode_reason="SYNTHETIC test GPU", name=name, sm_count=132)
    monkeypatch.setattr(device, "facts", lambda: f)
    monkeypatch.setattr(device, "is_gpu", lambda: True)
    monkeypatch.setattr(lab01, "facts", lambda: f)
    return f


def test_own_set_matches_the_device_slug_only():
    for slug in ("nvidia-h100-80gb-hbm3", "nvidia-h200"):
        st = evidence.reference(slug)
        own = evidence.own_set(st.gpu)
        assert own is not None and own.folder.name == slug and own.gpu == st.gpu
    assert evidence.own_set("NVIDIA A100-SXM4-80GB") is None
    assert evidence.own_set("NVIDIA H100 PCIe") is None  # another H100: not the HBM3 SXM set
    assert evidence.own_set() is None or device.is_gpu()  # no live GPU here: nothing to match


@pytest.mark.parametrize("slug", ["nvidia-h100-80gb-hbm3", "nvidia-h200"])
def test_a_live_gpu_gets_its_own_recorded_ceiling(monkeypatch, slug):
    mine = evidence.reference(slug)
    _fake_gpu(monkeypatch, mine.gpu)
    other = next(evidence.reference(s) for s in ("nvidia-h100-80gb-hbm3", "nvidia-h200") if s != slug)
    assert evidence.own_set().folder.name == slug
    c = lab01.copy_ceiling(other, live=True, measure_now=lambda: pytest.fail("its own set has the rate"))
    want = mine.load("ceilings").values["copy"]["bandwidth_bytes_per_s"] / 1e12
    theirs = other.load("ceilings").values["copy"]["bandwidth_bytes_per_s"] / 1e12
    assert c.gpu == mine.gpu and c.tbps == pytest.approx(want) and c.tbps != pytest.approx(theirs)
    assert slug in c.basis
    # a recorded number keeps its own recording's ceiling, whatever GPU runs the notebook
    r = lab01.copy_ceiling(other, live=False)
    assert r.gpu == other.gpu and r.tbps == pytest.approx(theirs)


def test_a_live_gpu_without_a_set_never_gets_another_gpus_ceiling(monkeypatch):
    _fake_gpu(monkeypatch, "NVIDIA A100-SXM4-80GB")  # SYNTHETIC: a GPU with no recorded set here
    assert evidence.own_set() is None
    recorded = {evidence.reference(s).load("ceilings").values["copy"]["bandwidth_bytes_per_s"] / 1e12
                for s in ("nvidia-h100-80gb-hbm3", "nvidia-h200")}
    for st in (evidence.reference(s) for s in ("nvidia-h100-80gb-hbm3", "nvidia-h200")):
        c = lab01.copy_ceiling(st, live=True, measure_now=lambda: 1.8e12)  # SYNTHETIC "measured now"
        assert c.gpu == "NVIDIA A100-SXM4-80GB" and c.tbps == pytest.approx(1.8) and "measured now" in c.basis

        def broken():
            raise RuntimeError("SYNTHETIC: no CUDA")
        c = lab01.copy_ceiling(st, live=True, measure_now=broken)
        assert c.tbps is None and c.tbps not in recorded and "'nvidia-a100-sxm4-80gb'" in c.basis
        assert "RuntimeError: SYNTHETIC: no CUDA" in c.basis


def test_the_statement_names_its_one_gpu(one_gpu_set):
    import pandas as pd

    st = one_gpu_set
    traces = lab01.recorded_traces(st)
    cmp = lab01.compare(traces)
    causes = pd.DataFrame([{"cause": "host", "share": 0.9}])
    values, rates = _inputs(st)
    fx = variants.untraced_fix(values, rates, "fixed+tf32")
    text = bottleneck.bottleneck_statement(cmp, causes, lever=step_bound(**fx.inputs), gpu=st.gpu,
                                           lever_basis="all without the profiler")
    assert text.startswith(f"On {st.gpu}: where time goes")
    assert "(the GPU floor alone would allow" in text and "; all without the profiler." in text
    counters = {"sm_pct": 81.0, "memory_pct": 63.0}  # SYNTHETIC speed of light
    assert "Why it takes that long" in bottleneck.bottleneck_statement(cmp, causes, counters=counters, gpu=st.gpu,
                                                                      counters_gpu=st.gpu)
    other = "NVIDIA H200" if st.gpu != "NVIDIA H200" else "NVIDIA H100 80GB HBM3"
    with pytest.raises(ValueError, match=f"counters from '{other}', every other number from '{st.gpu}'"):
        bottleneck.bottleneck_statement(cmp, causes, counters=counters, gpu=st.gpu, counters_gpu=other)


def test_live_counters_carry_their_gpu_and_the_recording_can_be_asked_for(monkeypatch):
    from infralens_lab.measure import ncu as NR
    from infralens_lab.present.trace_tables import hot_kernel_name

    h100, h200 = evidence.reference("nvidia-h100-80gb-hbm3"), evidence.reference("nvidia-h200")
    hot = hot_kernel_name(lab01.recorded_traces(h100)["fixed"][0])
    rec = lab01.hot_kernel_ncu(h100, hot, live=False)
    assert rec is not None and rec.gpu == h100.gpu and not rec.live and h100.gpu in rec.caption
    _fake_gpu(monkeypatch, h200.gpu)  # SYNTHETIC live H200: its "live" ncu output is the H200 set's recorded CSV
    monkeypatch.setattr(lab01, "is_gpu", lambda: True)
    monkeypatch.setattr(NR, "ncu_binary", lambda: "ncu")
    monkeypatch.setattr(NR, "run_ncu", lambda *a, **k: h200.text(lab01.TRAIN_STEP_FILE))
    monkeypatch.setattr(evidence, "current_provenance", lambda command, source="live": h200.provenance)
    live = lab01.hot_kernel_ncu(h100, hot)
    assert live is not None and live.live and live.gpu == h200.gpu != h100.gpu
    forced = lab01.hot_kernel_ncu(h100, hot, live=False)  # what the statement takes on a GPU of another slug
    assert forced.gpu == h100.gpu and not forced.live
