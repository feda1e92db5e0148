"""The physics check (analysis.hardware: no rate above SMs x peak-per-cycle x clock) on every committed recording,
on the shared 2026-11-26 H200 set whose clocks were read off the wrong GPU, and the per-cycle table against the
peak the recorded counters give."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infralens_lab import evidence
from infralens_lab.analysis import hardware, launches
from infralens_lab.analysis.hardware import Ceilings, check_physics, physics_rows, physics_violations
from infralens_lab.parse.ncu import parse_raw_csv

ROOT = Path(__file__).resolve().parents[1]
SETS = [p.parent.name for p in sorted((ROOT / "data" / "recorded").glob("*/ceilings.json"))]
SHARED = ROOT / "tests" / "data" / "shared_h200_2026-11-26"  # copied unedited from ../shared/recordings


def _values(folder: Path) -> tuple[dict, dict]:
    read = lambda n: json.loads((folder / n).read_text())["values"]  # noqa: E731
    return read("ceilings.json"), read("device.json")


def test_every_committed_set_is_checked_and_only_the_h100_set_s_clocks_read_after_the_timing_fail():
    assert {"nvidia-h100-80gb-hbm3", "nvidia-h200"} <= set(SETS)
    for gpu in SETS:
        values, dev = _values(ROOT / "data" / "recorded" / gpu)
        rows = physics_rows(values, dev["sm_count"], dev["compute_capability"])
        assert [r["ceiling"] for r in rows] == ["fp32 matmul", "tf32 matmul", "fp16 matmul", "bf16 matmul"]
        for r in rows:  # the definition, recomputed by hand
            need = r["rate_TFLOPs"] * 1e12 / (dev["sm_count"] * r["clock_ghz"] * 1e9)
            assert r["flop_per_sm_cycle"] == pytest.approx(need) and r["ok"] == (need <= r["peak_per_sm_cycle"])
        bad = {r["ceiling"] for r in rows if r["ok"] is False}
        if gpu == "nvidia-h200":  # recorded 2026-12-03 with NVML readings during the timing
            assert bad == set() and all(r["ok"] for r in rows)
            assert all(values["matmul"][i]["clock_samples"] >= 20 for i in range(4))
        else:  # the 2026-11-24 H100 set: nvidia-smi read the clock after the timing, in a loop of its own
            assert bad == {"tf32 matmul", "fp16 matmul", "bf16 matmul"}


def test_the_shared_h200_set_s_ceiling_clocks_are_flagged_by_name():
    values, dev = _values(SHARED)
    assert {r.get("sm_clock_hz") for r in values["matmul"]} == {345e6}  # the idle GPU 0's clock (its README)
    msgs = physics_violations(values, dev["sm_count"], dev["compute_capability"])
    assert [m.split(":")[0] for m in msgs] == ["fp32 matmul", "tf32 matmul", "fp16 matmul", "bf16 matmul"]
    assert "at the recorded 0.345 GHz needs" in msgs[2] and "above the 4,096" in msgs[2]
    with pytest.raises(hardware.PhysicsError, match=r"fp16 matmul: .* 0\.345 GHz"):
        check_physics(values, dev["sm_count"], dev["compute_capability"])


def test_a_ceiling_keeps_only_the_clocks_physics_allows():
    h100 = Ceilings.from_store(evidence.reference("nvidia-h100-80gb-hbm3"))
    assert set(h100.clock_hz) == {"copy", "fp32", "tf32", "fp16", "bf16"}
    assert set(h100.trusted_clock_hz()) == {"copy", "fp32"}
    table = h100.versus_datasheet().set_index("quantity")
    assert table.loc["fp16 matmul", "clock_read"] == "impossible (physics)"
    assert table.loc["fp32 matmul", "clock_read"] == "after the timing"
    h200 = Ceilings.from_store(evidence.reference("nvidia-h200")).versus_datasheet()
    assert set(h200["clock_read"]) == {"during the timing"}
    bare = Ceilings.from_values(_values(SHARED)[0])  # no device facts: nothing to check, nothing refuted
    assert bare.clock_checks() == [] and bare.trusted_clock_hz() == bare.clock_hz


@pytest.mark.parametrize("gpu", ["nvidia-h100-80gb-hbm3", "nvidia-h200"])
def test_the_table_s_hopper_tensor_peak_is_what_the_recorded_counters_give(gpu):
    mm = parse_raw_csv((ROOT / "data" / "recorded" / gpu / "ncu_matmul.csv").read_text())
    assert launches.tensor_peak_per_sm_cycle(mm) == pytest.approx(hardware.peak_per_cycle("9.0", "fp16"), rel=0.01)


def test_peak_per_cycle_knows_the_architectures_a_learner_may_have_and_refuses_bad_input():
    assert hardware.peak_per_cycle("7.5", "bf16") is None and hardware.peak_per_cycle("7.5", "fp16") == 1024
    assert hardware.peak_per_cycle("8.0", "fp16") == 2048 and hardware.peak_per_cycle("6.1", "fp16") is None
    with pytest.raises(TypeError, match="expected strings"):
        hardware.peak_per_cycle(9.0, "fp16")
    with pytest.raises(ValueError, match="expected the GPU's SM count"):
        physics_rows({"matmul": []}, 0, "9.0")


def test_the_lab_sentences_and_table_follow_the_check_on_both_gpus():
    for gpu, refuted in (("nvidia-h100-80gb-hbm3", 3), ("nvidia-h200", 0)):
        st = evidence.reference(gpu)
        values, dev = st.load("ceilings").values, st.load("device").values
        lines = hardware.clock_sentences(values, dev)
        assert sum("was not the one the timing ran at" in ln for ln in lines) == refuted
        assert lines[-1].startswith("clocks that hold: fp32 matmul")  # fp32 passes on both
        table = hardware.matmul_rate_table(values, dev).set_index("dtype")
        assert (table["clock_check"] == "impossible").sum() == refuted
        assert table.loc[table["clock_check"] == "impossible", "sm_clock_ghz"].isna().all()  # never shown as its clock
        ok = table[table["clock_check"] == "ok"]
        assert (ok["flop_per_sm_cycle"] <= ok["peak_per_sm_cycle"]).all()
    plain = hardware.matmul_rate_table(values)  # without the device facts: the record as it is, no physics columns
    assert "clock_check" not in plain.columns and plain["sm_clock_ghz"].notna().all()


def test_a_kernel_s_compute_roof_is_per_cycle_at_its_own_clock_or_says_it_fell_back():
    from infralens_lab.analysis.counters import compute_roof
    ceil = Ceilings.from_store(evidence.reference("nvidia-h200"))
    roof, basis = compute_roof(ceil, "fp16", 1.766e9, 132)
    assert roof == pytest.approx(132 * 4096 * 1.766e9) and "the kernel's 1.77 GHz" in basis
    # attn_fwd_fast on the H100 set (issue 37): 482.4 TFLOP/s is 50.5 % of that roof, under the 60 % threshold
    assert 482.4e12 / roof == pytest.approx(0.505, abs=0.001)
    bare = Ceilings.from_values(ceil.values, ceil.gpu)  # no device facts: the measured ceiling, and it says so
    roof, basis = compute_roof(bare, "fp16", 1.766e9, 132)
    assert roof == bare.fp16 and basis.startswith("measured fp16 ceiling")
    assert compute_roof(ceil, "fp16", None, 132)[1].startswith("measured fp16 ceiling")
