"""roofline maths with hand-computed cases; the datasheet table and measured Ceilings."""
from __future__ import annotations

import pytest

from infralens_lab.analysis.hardware import PEAKS, Ceilings, peaks_for
from infralens_lab.analysis.roofline import (
    BOUND_THRESHOLD,
    RULE,
    attainable,
    classify,
    intensity,
    ridge,
    roof_curve,
    sol_verdict,
    verdict,
)

P, W = 100e12, 2e12  # a toy GPU: 100 TFLOP/s, 2 TB/s -> ridge at 50 FLOP/byte


def test_intensity_ridge_attainable():
    assert intensity(2e9, 1e8) == 20.0
    assert intensity(0, 5) == 0.0
    assert ridge(P, W) == 50.0
    assert attainable(10, P, W) == 20e12  # memory roof: 10 FLOP/B x 2 TB/s
    assert attainable(50, P, W) == P  # the ridge touches both roofs
    assert attainable(1000, P, W) == P


@pytest.mark.parametrize("flops, nbytes, seconds, kind, frac", [
    (2e9, 1e8, 0.625e-4, "memory", 0.8),  # I=20 < 50; 32 TFLOP/s of a 40 TFLOP/s roof
    (2e9, 1e8, 1e-4, "latency", 0.5),  # same kernel slower: half the roof is under the 60% rule
    (1e12, 1e9, 0.0125, "compute", 0.8),  # I=1000 > 50; 80 of 100 TFLOP/s
    (0, 2e9, 1e-3, "memory", 1.0),  # a copy: 2 GB in 1 ms = the full 2 TB/s
    (0, 2e9, 1e-2, "latency", 0.1),
])
def test_classify_hand_computed(flops, nbytes, seconds, kind, frac):
    b = classify(flops, nbytes, seconds, P, W)
    assert b.kind == kind
    assert b.fraction_of_roof == pytest.approx(frac)
    assert b.ridge == 50.0 and b.achieved == pytest.approx(flops / seconds)
    assert kind in b.explanation


def test_threshold_is_the_boundary():
    # exactly at the threshold is roof-bound; just below is latency-bound
    t = 1e8 / (W * BOUND_THRESHOLD)
    assert classify(0, 1e8, t, P, W).kind == "memory"
    assert classify(0, 1e8, t * 1.01, P, W).kind == "latency"
    assert classify(0, 1e8, t * 1.01, P, W, threshold=0.1).kind == "memory"


@pytest.mark.parametrize("call, exc, match", [
    (lambda: intensity(1e9, 0), ValueError, "bytes_moved=0"),
    (lambda: intensity(-1, 10), ValueError, "flops=-1"),
    (lambda: ridge(P, "fast"), TypeError, "peak_bw is str"),
    (lambda: attainable(-1, P, W), ValueError, "intensity=-1"),
    (lambda: classify(1, 1, 0, P, W), ValueError, "seconds=0"),
    (lambda: classify(1, 1, 1, P, W, threshold=1.5), ValueError, "threshold=1.5"),
])
def test_bad_inputs(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_roof_curve():
    xs, ys = roof_curve(P, W, lo=1, hi=1000, points=4)
    assert xs.tolist() == pytest.approx([1, 10, 100, 1000])
    assert ys.tolist() == pytest.approx([2e12, 20e12, P, P])


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA L4", "L4"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
])
def test_peaks_lookup(name, key):
    assert peaks_for(name) is PEAKS[key]


def test_peaks_values_are_dense_and_unknown_gpus_are_none():
    h = PEAKS["H100 SXM5"]
    assert (h.fp16, h.tf32, h.bandwidth) == (989.5e12, 494.5e12, 3.35e12)  # half the "with sparsity" figures
    assert PEAKS["H200"].bandwidth == 4.8e12 and PEAKS["A100 80GB SXM"].fp32 == 19.5e12
    assert peaks_for("Tesla T4") is None and peaks_for("NVIDIA L40S") is None
    with pytest.raises(TypeError, match="expected a str"):
        peaks_for(None)


VALUES = {"copy": {"bandwidth_bytes_per_s": 4.0e12},
          "matmul": [{"dtype": "fp32", "flops_per_s": 50e12}, {"dtype": "tf32", "flops_per_s": 350e12},
                     {"dtype": "fp16", "flops_per_s": 660e12}, {"dtype": "bf16", "flops_per_s": 690e12}],
          "sweep": []}


def test_ceilings_from_recorded_values():
    c = Ceilings.from_values(VALUES, gpu="NVIDIA H200")
    assert (c.copy_bw, c.fp16, c.rate("bf16")) == (4.0e12, 660e12, 690e12)
    v = c.versus_datasheet().set_index("quantity")
    assert v.loc["copy bandwidth", "measured_over_datasheet"] == pytest.approx(4.0 / 4.8)
    assert v.loc["fp16 matmul", "measured"] == pytest.approx(660)
    assert v.loc["fp16 matmul", "unit"] == "TFLOP/s"
    with pytest.raises(ValueError, match="no measured matmul ceiling for dtype 'fp8'"):
        c.rate("fp8")
    with pytest.raises(ValueError, match="expected a dict with 'copy' and 'matmul'"):
        Ceilings.from_values({"copy": {}})
    with pytest.raises(ValueError, match="lacks 'bandwidth_bytes_per_s'"):
        Ceilings.from_values({"copy": {}, "matmul": []})


def test_one_rule_for_roofline_and_speed_of_light():
    """lab 02 (roofline fraction) and lab 04 (SOL %) read the same attention recording the same way:
    attn_fwd at 32% of its compute roof and at SM 50% / memory 25% is latency-bound in both."""
    assert classify(1e12, 1e9, 1e12 / (0.32 * P), P, W, waves=0.48).kind == "latency"
    assert sol_verdict(50.09, 25.05, waves=0.48).startswith("latency-bound: neither memory (25%) nor SM (50%)")
    assert sol_verdict(20.0, 72.0) == "memory-bound: 72% of its peak"
    assert sol_verdict(85.0, 40.0) == "compute (SM)-bound: 85% of its peak"
    assert str(int(BOUND_THRESHOLD * 100)) + "%" in RULE


@pytest.mark.parametrize("waves, t, floor, reasons, host", [
    (0.48, 30e-6, 19e-6, ("grid below one wave",), False),  # 128 blocks where 264 fit at once: under 60% by itself
    (0.97, 7e-6, 21e-6, ("latency not hidden",), True),  # 1024³: 128 CTAs on 132 SMs fill the GPU; a 7 us kernel
    (3.0, 4e-6, 19e-6, ("latency not hidden",), True),  # a 4 us kernel timed at 19 us per call: the host, outside
    (0.5, 4e-6, 19e-6, ("grid below one wave",), True),
    (3.0, 30e-6, 19e-6, ("latency not hidden",), False),
    (None, 30e-6, None, (), False),  # no evidence for a reason: none named
])
def test_latency_reasons_are_inside_the_kernel_and_the_host_is_said_apart(waves, t, floor, reasons, host):
    """gpu__time_duration excludes the launch path, so host launch overhead is never a reason for a kernel's
    fraction of its roof; the verdict says separately whether back-to-back calls would wait on the host."""
    v = verdict({"compute": 0.3}, waves=waves, time_s=t, launch_floor_s=floor)
    assert v.kind == "latency" and v.reasons == reasons and v.rule == RULE
    for r in reasons:
        assert r in v.text
    assert ("wait on the host" in v.text) == host
    assert "host launch overhead" not in v.reasons


def test_the_verdict_names_the_unit_that_decided_and_its_percentage():
    """#26.4: attn_fwd is compute-bound because SM % (sm__throughput) is 67%, while its FLOP/s is 44% of the roof."""
    v = verdict({"FLOP/s roof": 0.44, "SM %": 0.674, "Memory %": 0.33})
    assert (v.kind, v.unit, v.roof) == ("compute", "SM %", "compute") and v.fraction == pytest.approx(0.674)
    assert v.text.startswith("compute-bound: SM % (compute) at 67% of its peak")
    low = verdict({"FLOP/s roof": 0.39, "SM %": 0.31, "Memory %": 0.33}, waves=0.97)
    assert low.unit == "FLOP/s roof" and "largest FLOP/s roof 39%, Memory % 33%, SM % 31%" in low.text
    assert verdict({"DRAM roof": 0.9}).unit == "DRAM roof" and verdict({"x": ("memory", 0.7)}).text.startswith(
        "memory-bound: x (memory) at 70%")


def test_verdict_bad_input():
    with pytest.raises(ValueError, match="unit 'dram' unknown"):
        verdict({"dram": 0.9})
    with pytest.raises(ValueError, match="expected a dict"):
        verdict({"memory": float("nan")})
    with pytest.raises(ValueError, match="stands for 'latency'"):
        verdict({"x": ("latency", 0.9)})


def test_classify_takes_the_speed_of_light_as_roofs_too():
    """One rule over every roof: the same kernel at half of its roofline roof is latency-bound alone, but
    compute-bound when Nsight Compute's speed of light shows an SM unit at 70% (and memory-bound when the busiest
    memory unit is there); the roofline fraction is kept, the explanation names the unit; under 60% on every
    roof it stays latency-bound."""
    base = classify(1e12, 1e9, 0.02, P, W)  # I = 1000 > 50; 50 of 100 TFLOP/s
    assert base.kind == "latency" and base.fraction_of_roof == pytest.approx(0.5)
    sm = classify(1e12, 1e9, 0.02, P, W, sm_pct=70.0, memory_pct=20.0)
    assert sm.kind == "compute" and sm.fraction_of_roof == pytest.approx(0.5)
    assert "SM's busiest unit (SM %, sm__throughput) at 70%" in sm.explanation
    assert "50% of the roofline's compute roof" in sm.explanation and (sm.unit, sm.unit_fraction) == ("SM %", 0.7)
    mem = classify(1e12, 1e9, 0.02, P, W, sm_pct=30.0, memory_pct=65.0)
    assert mem.kind == "memory" and "busiest memory unit (Memory %, gpu__compute_memory_throughput) at 65%" in mem.explanation
    low = classify(1e12, 1e9, 0.02, P, W, sm_pct=55.0, memory_pct=40.0)
    assert low.kind == "latency"
    # the roofline's own roof still decides when it is the higher fraction
    hi = classify(1e12, 1e9, 0.0125, P, W, sm_pct=30.0, memory_pct=10.0)
    assert hi.kind == "compute" and "reaches 80% of the compute roof (FLOP/s roof)" in hi.explanation
    assert hi.unit == "FLOP/s roof" and hi.unit_fraction == pytest.approx(0.8)
