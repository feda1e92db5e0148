"""stalls: every reason named in the labs has a meaning and a fix; names normalise; dominant()."""
from __future__ import annotations

import pandas as pd
import pytest

from infralens_lab.analysis.stalls import STALLS, card, dominant, explain, normalize

REASONS = ("long_scoreboard", "short_scoreboard", "barrier", "lg_throttle", "mio_throttle", "math_pipe_throttle",
           "tex_throttle", "wait", "not_selected", "selected", "no_instruction", "dispatch_stall", "drain", "membar",
           "branch_resolving", "sleeping", "misc", "imc_miss")


@pytest.mark.parametrize("reason", REASONS)
def test_every_reason_has_meaning_and_fix(reason):
    s = explain(reason)
    assert s.reason == reason and len(s.meaning) > 20 and len(s.fix) > 10
    assert s.is_stall == (reason != "selected")


@pytest.mark.parametrize("name, reason", [
    ("smsp__pcsamp_warps_issue_stalled_long_scoreboard", "long_scoreboard"),
    ("smsp__pcsamp_warps_issue_stalled_no_instructions", "no_instruction"),
    ("smsp__pcsamp_warps_issue_stalled_barrier_not_issued", "barrier"),
    ("smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio", "mio_throttle"),
    ("  Long_Scoreboard ", "long_scoreboard"),
])
def test_normalize_metric_names(name, reason):
    assert normalize(name) == reason
    assert explain(name).reason == reason


def test_unknown_and_wrong_type():
    with pytest.raises(ValueError, match="unknown stall reason 'coffee_break'"):
        explain("coffee_break")
    with pytest.raises(TypeError, match="expected a str"):
        explain(3)


def test_dominant_from_dict_and_frame():
    assert dominant({"selected": 0.5, "long_scoreboard": 0.3, "wait": 0.2}) == "long_scoreboard"
    assert dominant({"selected": 0.5, "wait": 0.2}, include_selected=True) == "selected"
    df = pd.DataFrame({"reason": ["wait", "barrier", "long_scoreboard"], "share": [0.1, 0.6, 0.3]})
    assert dominant(df) == "barrier"
    assert dominant(pd.DataFrame({"reason": ["wait", "mio_throttle"], "samples": [5, 9]})) == "mio_throttle"
    text = card(df)
    assert text.startswith("dominant stall: barrier (60% of samples)") and "usual fix:" in text


@pytest.mark.parametrize("table, match", [
    ({}, "empty"), ({"selected": 1.0}, "empty"),
    (pd.DataFrame({"why": ["x"]}), "expected 'reason'"),
    (pd.DataFrame({"reason": ["wait"], "count": [1]}), "'share' or 'samples'"),
])
def test_dominant_rejects_bad_tables(table, match):
    with pytest.raises(ValueError, match=match):
        dominant(table)


def test_table_covers_the_labs_list():
    assert set(REASONS) <= set(STALLS)


def test_meanings_follow_the_kernel_profiling_guide():
    from infralens_lab.analysis.stalls import explain

    ls = explain("long_scoreboard").meaning
    assert "L1TEX" in ls and "L1 hits included" in ls and "missed" not in ls
    assert "MIO" in explain("short_scoreboard").meaning and "not L1TEX" in explain("short_scoreboard").meaning
    assert "queue" in explain("mio_throttle").meaning
    assert "after EXIT" in explain("drain").meaning and "stores" in explain("drain").meaning
