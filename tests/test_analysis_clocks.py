"""analysis.clocks: the SM clock per kernel from the recorded ncu CSVs (and a hand-made one), and the
--clock-control flag of an ncu command."""
from __future__ import annotations

import re

import helpers
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import clocks
from infralens_lab.parse import ncu


def test_clock_per_kernel_hand_computed_and_averaged_over_launches():
    text = helpers.ncu_block("copy n=8 fp32", [("copy_coalesced", {clocks.CLOCK_METRIC: 1.5e9}),
                                                ("copy_coalesced", {clocks.CLOCK_METRIC: 1.7e9})], chatter=False)
    got = clocks.kernel_clock_ghz(ncu.parse_raw_csv(text))
    assert got.to_dict(orient="records") == [{"config": "copy n=8 fp32", "kernel": "copy_coalesced",
                                              "clock_ghz": pytest.approx(1.6)}]


def test_clock_errors_name_what_was_seen():
    text = helpers.ncu_block("copy n=8 fp32", [("copy_coalesced", {"gpu__time_duration.sum": 10})], chatter=False)
    with pytest.raises(ValueError, match=re.escape("sm__cycles_elapsed.avg.per_second")):
        clocks.kernel_clock_ghz(ncu.parse_raw_csv(text))
    with pytest.raises(TypeError, match="tidy frame"):
        clocks.kernel_clock_ghz([1, 2])


def test_recorded_clocks_are_plausible_sm_clocks_and_the_recorder_left_them_free():
    st = evidence.reference()
    for name in ("ncu_copies.csv", "ncu_attention.csv"):
        got = clocks.kernel_clock_ghz(ncu.parse_raw_csv(st.text(name)))
        assert len(got) >= 5 and got["clock_ghz"].between(0.5, 3.0).all(), got  # GHz, not Hz or MHz
        cmd = ncu.command_of(st.text(name), got["config"].iloc[0])
        assert clocks.clock_control(cmd) == "none", cmd  # the recorder runs ncu with --clock-control none


@pytest.mark.parametrize("cmd, want", [("ncu --clock-control none --csv x", "none"),
                                       ("ncu --clock-control=base x", "base"),
                                       ("ncu --csv x", "base"), (None, None), ("", None)])
def test_clock_control_flag(cmd, want):
    assert clocks.clock_control(cmd) == want
    with pytest.raises(TypeError):
        clocks.clock_control(3)


def test_has_clock_says_whether_the_csv_recorded_the_clock():
    st = evidence.reference()
    df = ncu.parse_raw_csv(st.text("ncu_attention.csv"))
    assert clocks.has_clock(df) and not clocks.has_clock(df[df["metric"] != clocks.CLOCK_METRIC])
