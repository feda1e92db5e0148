"""analysis.clocks on the recorded ncu CSVs: the SM clock each kernel ran at, the device's highest clock, whether
ncu locked the clocks, and the rescaling of a peak to another clock."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from infralens_lab.analysis import clocks
from infralens_lab.parse.ncu import parse_raw_csv

ROOT = Path(__file__).resolve().parents[1]
RECORDED = sorted((ROOT / "data" / "recorded").glob("*/ncu_*.csv"))
WITH_CLOCK = [p for p in RECORDED if p.name in ("ncu_copies.csv", "ncu_attention.csv", "ncu_matmul.csv",
                                                "ncu_copies_stalls.csv")]
TEST_DATA = sorted((ROOT / "tests" / "data").glob("ncu_*.csv"))


@pytest.mark.parametrize("path", WITH_CLOCK + TEST_DATA, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_recorded_launch_has_a_clock_between_1_and_2_1_ghz(path):
    c = clocks.kernel_clocks(parse_raw_csv(path.read_text()))
    assert len(c) >= 3 and c["clock_hz"].notna().all()
    # Hopper boosts to at most 1.98 GHz (device__attribute_clock_rate); a launch averaged a little above is ncu's
    # elapsed-cycle count over a duration rounded to 32 ns
    assert c["clock_ghz"].between(1.0, 2.1).all(), c
    assert (c["clock_ghz"] == c["clock_hz"] / 1e9).all()


@pytest.mark.parametrize("gpu", ["nvidia-h200", "nvidia-h100-80gb-hbm3"])
def test_the_matmuls_slow_down_as_they_grow(gpu):
    """Measured on both recorded sets: the larger the cuBLAS matmul, the lower its clock (power), e.g. 1.83 GHz at
    256³ to 1.56 at 8192³ on the 2026-12-03 H200 set, 1.88 to 1.52 on the H100 set."""
    mm = ROOT / "data" / "recorded" / gpu / "ncu_matmul.csv"
    per = clocks.kernel_clock_ghz(parse_raw_csv(mm.read_text()))
    by_size = [float(v) for v in per["clock_ghz"].to_numpy()]
    assert len(by_size) == 6
    assert all(b <= a + 0.01 for a, b in itertools.pairwise(by_size)), by_size  # 10 MHz: ncu's clock reading noise
    assert by_size[-1] < by_size[0] - 0.2


def test_clock_range_spans_the_copies_and_the_matmuls():
    st = ROOT / "data" / "recorded" / "nvidia-h100-80gb-hbm3"
    frames = [parse_raw_csv((st / f).read_text()) for f in ("ncu_copies.csv", "ncu_matmul.csv")]
    lo, hi = clocks.clock_range_ghz([*frames, None])
    # the same range the plain way: every launch's sm__cycles_elapsed.avg.per_second, in GHz
    every = [v / 1e9 for f in frames for v in f.loc[f["metric"] == clocks.CLOCK, "value"]]
    assert (lo, hi) == (pytest.approx(min(every)), pytest.approx(max(every))) and 1.0 < lo < hi < 2.1


@pytest.mark.parametrize("path", [p for p in WITH_CLOCK if p.name == "ncu_matmul.csv"], ids=lambda p: p.parent.name)
def test_max_clock_and_clock_control_are_read_off_the_file(path):
    text = path.read_text()
    assert clocks.max_clock_hz(text) == 1.98e9  # device__attribute_clock_rate 1,980,000 kHz
    assert clocks.clock_control(text) == "none"  # the recorder's --clock-control none
    assert clocks.UNLOCKED_WARNING in text  # and ncu said so itself


def test_clock_control_defaults_and_disagreements():
    head = "==INFRALENS== config: a\n==INFRALENS== command: ncu {flag}--csv x\n"
    assert clocks.clock_control(head.format(flag="")) == "base"  # ncu's default when the flag is absent
    assert clocks.clock_control(head.format(flag="--clock-control base ")) == "base"
    assert clocks.clock_control("==WARNING== Note: Running with unmodified GPU clocks. x") == "none"
    two = head.format(flag="--clock-control none ") + head.format(flag="")
    with pytest.raises(ValueError, match=r"\['base', 'none'\]"):
        clocks.clock_control(two)
    with pytest.raises(ValueError, match="not recorded"):
        clocks.clock_control("just text")


def test_frames_without_the_clock_metric_are_refused():
    df = parse_raw_csv((ROOT / "data" / "recorded" / "nvidia-h200" / "ncu_train_step.csv").read_text())
    assert clocks.has_clock(df)  # recorded with the clock since 2026-12-03; the same file without it is refused
    with pytest.raises(ValueError, match=re.escape("sm__cycles_elapsed.avg.per_second")):
        clocks.kernel_clocks(df[df["metric"] != clocks.CLOCK])
    with pytest.raises(TypeError, match="expected the DataFrame"):
        clocks.kernel_clocks([1, 2])


def test_rescaling_a_peak_to_a_clock():
    # 132 SMs x 4096 FLOP per cycle at 1.83 GHz is the datasheet's 989.5 TFLOP/s; at 1.548 GHz it is 837
    assert clocks.at_clock(989.5e12, 1.548e9, 1.83e9) == pytest.approx(837.0e12, rel=1e-3)
    assert clocks.clock_of_peak(989.5e12, 4096, 132) == pytest.approx(1.8301e9, rel=1e-3)
    assert clocks.per_cycle(782.6e12, 1.548e9, 132) == pytest.approx(3830, rel=1e-3)
    assert clocks.rate_share_at_clock(1.0, 1.548e9, 1.83e9) == pytest.approx(0.846, abs=1e-3)
    for bad in (0, -1.0, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="expected a positive finite number"):
            clocks.at_clock(1.0, bad, 1.0)
    with pytest.raises(ValueError, match="SM count"):
        clocks.per_cycle(1.0, 1.0, 0)
