"""stalls: every reason named in the labs has a meaning and a fix; names normalise; dominant()."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import infralens_lab
from infralens_lab.analysis.stalls import STALLS, card, dominant, explain, normalize
from infralens_lab.parse.ncu import stall_metric

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


@pytest.mark.parametrize("name, parts", [
    ("smsp__pcsamp_warps_issue_stalled_long_scoreboard", ("pcsamp_warps", "long_scoreboard", False, "")),
    ("smsp__pcsamp_warps_issue_stalled_no_instructions_not_issued", ("pcsamp_warps", "no_instruction", True, "")),
    ("smsp__pcsamp_warps_issue_stalled_wait.sum", ("pcsamp_warps", "wait", False, ".sum")),
    ("smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio",
     ("average_warps", "gmma", False, "_per_issue_active.ratio")),
    ("barrier", (None, "barrier", False, "")),
])
def test_one_grammar_reads_every_stall_name(name, parts):
    """parse.ncu.stall_metric is the one reader of stall-metric names: the breakdown, normalize and the quiz's
    dominant_stall all go through it (issue 41: the regex was written three times)."""
    got = stall_metric(name)
    assert (got["family"], got["reason"], got["not_issued"], got["rollup"]) == parts
    assert normalize(name) == parts[1]
    assert stall_metric("smsp__pcsamp_sample_count.sum ") is not None and stall_metric("a b") is None


def test_no_other_module_writes_the_stall_regex():
    pkg = Path(infralens_lab.__file__).resolve().parent
    bad = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
           if p.name != "ncu.py" and re.search(r"re\.compile\([^)]*issue_stalled", p.read_text(), re.S)]
    assert not bad, f"stall-metric regexes outside parse/ncu.py: {bad}; expected parse.ncu.stall_metric only"


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
