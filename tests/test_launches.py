"""analysis.launches on the recorded matmuls (issue 26.2): what the counters say about a small matmul (waves,
achieved occupancy, the tensor pipe's share) and, apart from the kernel, the host gap of calls back to back."""
from __future__ import annotations

import math

import pytest

from infralens_lab import evidence
from infralens_lab.analysis import launches
from infralens_lab.parse.ncu import parse_raw_csv


def _set(slug):
    st = evidence.reference(slug)
    return parse_raw_csv(st.text("ncu_matmul.csv")), st.load("ceilings").values["sweep"]


@pytest.mark.parametrize("slug", ["nvidia-h200", "nvidia-h100-80gb-hbm3"])
def test_the_tensor_peak_per_sm_cycle_is_4096_on_both_hoppers(slug):
    """SM % of the big cuBLAS matmuls is their tensor pipe's share: tensor FLOPs per SM-cycle over SM % is the same
    4096 for every one (dense fp16 on Hopper; 132 SMs x 4096 x 1.83 GHz is the datasheet's 989.5 TFLOP/s)."""
    mm, _ = _set(slug)
    assert launches.tensor_peak_per_sm_cycle(mm) == pytest.approx(4096, rel=1e-3)
    assert launches.tensor_peak_per_sm_cycle(mm, spread=0.0) is None  # the launches agree within 0.1%, not exactly


def test_the_h200_small_matmuls_fill_the_gpu_yet_leave_the_tensor_pipe_idle():
    mm, sweep = _set("nvidia-h200")
    t = launches.matmul_launches(mm, sweep, launches.tensor_peak_per_sm_cycle(mm)).set_index("size")
    assert list(t.index) == [256, 512, 1024, 2048, 4096, 8192]
    # 1024³: 128 CTAs on 132 SMs, 0.97 waves; 4096³ and 8192³ are persistent kernels of one CTA per SM
    assert (t.loc[1024, "ctas"], t.loc[1024, "waves"]) == (128, 0.97)
    assert (t.loc[[4096, 8192], "ctas"] == 132).all() and (t.loc[[4096, 8192], "waves"] == 1.0).all()
    assert t.loc[1024, "tensor_pipe_pct"] == pytest.approx(31.3, abs=0.1)  # the tensor pipe busy a third of the time
    assert t.loc[8192, "tensor_pipe_pct"] == pytest.approx(93.4, abs=0.1)
    assert t["occupancy_pct"].between(13, 16).all()  # one 12-warp CTA per SM at every size
    # the H200 set of 2026-12-03: kernel 7.2 us; calls back to back 21.2 us each (one event pair around them all):
    # the host paces calls back to back, not the kernel
    assert t.loc[1024, "paced_by"] == "host" and t.loc[1024, "host_gap_us"] == pytest.approx(14.1, abs=0.1)
    assert t.loc[8192, "paced_by"] == "kernel" and math.isnan(t.loc[8192, "host_gap_us"])
    assert (t["timing"] == "one event pair around the calls").all()  # the recorder's batched timing


def test_a_batched_timing_is_preferred_when_recorded():
    mm, sweep = _set("nvidia-h200")
    rows = [dict(r, batched_ms=0.010) if r["M"] == 1024 else r for r in sweep]
    t = launches.matmul_launches(mm, rows).set_index("size")
    assert t.loc[1024, "per_call_us"] == pytest.approx(10.0) and t.loc[1024, "timing"].startswith("one event pair")
    assert math.isnan(t.loc[1024, "tensor_pipe_pct"])  # no per-cycle peak given
    assert "per_call_us" not in launches.matmul_launches(mm).columns


def test_host_gap_rule_and_bad_input():
    g = launches.host_gap(20e-6, 4e-6)
    assert g["gap_s"] == pytest.approx(16e-6) and g["gpu_busy"] == pytest.approx(0.2) and g["paced_by"] == "host"
    assert launches.host_gap(1.43e-3, 1.44e-3) == {"gap_s": 0.0, "gpu_busy": 1.0, "paced_by": "kernel"}
    assert launches.host_gap(10e-6, 6e-6)["paced_by"] == "kernel"  # 60% busy: the threshold itself binds
    for bad in (0, -1e-6, float("nan"), None):
        with pytest.raises(ValueError, match="positive duration"):
            launches.host_gap(bad, 1e-6)


def test_matmul_launches_needs_the_tensor_counter():
    mm, _ = _set("nvidia-h200")
    with pytest.raises(ValueError, match="tensor-path op counter"):
        launches.matmul_launches(mm[~mm["metric"].str.startswith("sm__ops_path_tensor")])
    with pytest.raises(ValueError, match="lacks"):
        launches.per_sm_cycle(mm.head(0).assign(), mm["value"])


def test_ceilings_carry_their_clock_when_recorded():
    from infralens_lab.analysis.hardware import Ceilings

    recorded = evidence.reference("nvidia-h200").load("ceilings").values
    assert set(Ceilings.from_values(recorded, "NVIDIA H200").clock_hz) == {"copy", "fp32", "tf32", "fp16", "bf16"}
    strip = lambda r: {k: v for k, v in r.items() if k != "sm_clock_hz"}  # noqa: E731  (a record from before them)
    vals = dict(recorded, copy=strip(recorded["copy"]), matmul=[strip(r) for r in recorded["matmul"]])
    old = Ceilings.from_values(vals, "NVIDIA H200")
    assert old.clock_hz == {} and old.versus_datasheet()["clock_GHz"].isna().all()
    new = dict(vals, copy=dict(vals["copy"], sm_clock_hz=1.98e9),
               matmul=[dict(r, sm_clock_hz=1.55e9) if r["dtype"] == "fp16" else r for r in vals["matmul"]])
    c = Ceilings.from_values(new, "NVIDIA H200")
    assert c.clock_hz == {"copy": 1.98e9, "fp16": 1.55e9}
    v = c.versus_datasheet().set_index("quantity")["clock_GHz"]
    assert v["fp16 matmul"] == pytest.approx(1.55) and v["copy bandwidth"] == pytest.approx(1.98)
    assert v[["fp32 matmul", "bf16 matmul"]].isna().all()


def test_ncu_tensor_percentage_is_kept_apart_from_the_pipe_share():
    mm, sweep = _set("nvidia-h200")
    mm = mm[mm["metric"] != "sm__ops_path_tensor_src_fp16.sum.pct_of_peak_sustained_elapsed"]  # planted below instead
    extra = mm[mm["metric"] == "sm__throughput.avg.pct_of_peak_sustained_elapsed"].assign(
        metric="sm__ops_path_tensor_src_fp16.sum.pct_of_peak_sustained_elapsed", value=50.0)
    import pandas as pd

    t = launches.matmul_launches(pd.concat([mm, extra]), sweep, 4096.0).set_index("size")
    assert (t["ncu_tensor_pct"] == 50.0).all()  # ncu's own share, of its own (twice the dense) peak
    assert (t["tensor_pipe_pct"] == 100 * t["tensor_per_sm_cycle"] / 4096.0).all()  # the dense fp16 peak


def test_ncus_tensor_percentage_is_of_twice_the_dense_peak_on_the_h100():
    """The recorded H100 matmuls: ncu's sm__ops_path_tensor_src_fp16 pct_of_peak is half the share of the dense fp16
    peak per SM-cycle (4096 FLOP, which gives the datasheet's 989.5 TFLOP/s at 1.83 GHz) at every size."""
    mm, sweep = _set("nvidia-h100-80gb-hbm3")
    t = launches.matmul_launches(mm, sweep, launches.tensor_peak_per_sm_cycle(mm))
    big = t[t["size"] >= 1024]
    assert ((big["tensor_pipe_pct"] / big["ncu_tensor_pct"]).between(1.95, 2.05)).all(), t


@pytest.mark.parametrize("slug", ["nvidia-h200", "nvidia-h100-80gb-hbm3"])
def test_lab04s_launch_floor_is_lab02s_per_call_time_of_the_smallest_matmul(slug):
    """One number for one call in both labs (issue 39: lab 04 said 33.9 µs, lab 02 20.5 µs for the H100's 256³):
    Ceilings.launch_floor_s is the per-call time back to back that lab 02's host-gap table shows, not an event
    pair around each call."""
    from infralens_lab.analysis.hardware import Ceilings

    st = evidence.reference(slug)
    mm, sweep = _set(slug)
    per_call = launches.matmul_launches(mm, sweep).set_index("size").loc[256, "per_call_us"]
    floor = Ceilings.from_values(st.load("ceilings").values, st.gpu).launch_floor_s
    assert floor * 1e6 == pytest.approx(per_call, rel=1e-9)
    assert floor * 1e6 < launches.matmul_launches(mm, sweep).set_index("size").loc[256, "single_call_us"]
