"""analysis.gates: count rules, the ratio verdict, and the arithmetic for choosing k and the tolerance,
on hand-checked numbers."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from infralens_lab.analysis import gates


def test_count_rules():
    assert gates.count_verdict("w", "syncs_per_step", 0, {"max": 0}).passed
    v = gates.count_verdict("w", "syncs_per_step", 1, {"max": 0})
    assert not v.passed and "allowed at most 0" in v.message and "threshold file" in v.message
    assert gates.count_verdict("w", "launches_per_step", 3, {"equals": 3}).passed
    assert not gates.count_verdict("w", "launches_per_step", 2, {"equals": 3}).passed  # fewer is a change too
    # slack: 5% over max passes, just beyond fails
    assert gates.count_verdict("w", "peak_bytes", 1050, {"max": 1000, "slack": 0.05}).passed
    assert not gates.count_verdict("w", "peak_bytes", 1051, {"max": 1000, "slack": 0.05}).passed


@pytest.mark.parametrize("rule, match", [({}, "exactly one of"), ({"max": 1, "equals": 1}, "exactly one of"),
                                         ({"max": 1, "slack": 1.5}, "slack=1.5")])
def test_bad_rules(rule, match):
    with pytest.raises(ValueError, match=match):
        gates.count_verdict("w", "m", 1, rule)


def test_spread_and_ratio_verdict():
    r = [0.9, 1.0, 1.0, 1.0, 1.1]
    # p10 = 0.94, p90 = 1.06 by linear interpolation, median 1.0
    assert gates.spread(r) == pytest.approx(0.12)
    ok = gates.ratio_verdict("g", r, expected=1.02, tolerance=0.05)
    assert ok.passed and ok.measured == pytest.approx(1.0) and ok.limit == pytest.approx(1.02 * 0.95)
    assert "wider than the tolerance" in ok.message  # 12% spread vs 5% tolerance: take more runs
    bad = gates.ratio_verdict("g", [0.8, 0.81, 0.82], expected=1.0, tolerance=0.05)
    assert not bad.passed and "wider" not in bad.message


@pytest.mark.parametrize("kwargs, match", [(dict(ratios=[], expected=1, tolerance=0.1), "no ratios"),
                                           (dict(ratios=[1.0], expected=0, tolerance=0.1), "positive number"),
                                           (dict(ratios=[1.0], expected=1, tolerance=1.0), "fraction in")])
def test_ratio_verdict_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gates.ratio_verdict("g", **kwargs)


def test_runs_needed_by_hand():
    # spread 10%: sd = 0.10 / 2.5632 = 0.03901; k = (2 * 1.2533 * 0.03901 / 0.05)^2 = 3.83 -> 4
    assert gates.runs_needed(0.10, 0.05) == 4
    # halving the tolerance needs four times the runs (before rounding up)
    assert gates.runs_needed(0.10, 0.025) == math.ceil(4 * 3.8251) == 16
    assert gates.runs_needed(0.0, 0.05) == 1
    with pytest.raises(ValueError, match="tolerance"):
        gates.runs_needed(0.1, 0)


def test_bootstrap_helpers():
    flat = [1.0] * 10
    assert gates.median_band(flat, 5) == (1.0, 1.0, 1.0)
    assert gates.false_alarm_rate(flat, 3, 0.01) == 0.0
    assert gates.detection_rate(flat, 3, 0.05, slowdown=0.10) == 1.0  # 1/1.1 = 0.909 < 0.95
    assert gates.detection_rate(flat, 3, 0.05, slowdown=0.02) == 0.0  # 1/1.02 = 0.980 > 0.95
    noisy = [0.8, 0.9, 1.0, 1.0, 1.0, 1.1, 1.2] * 3
    lo1, _, hi1 = gates.median_band(noisy, 1)
    lo9, _, hi9 = gates.median_band(noisy, 9)
    assert hi9 - lo9 < hi1 - lo1  # the median of more runs varies less
    assert gates.false_alarm_rate(noisy, 9, 0.05) < gates.false_alarm_rate(noisy, 1, 0.05)
    assert gates.median_band(noisy, 5) == gates.median_band(noisy, 5)  # fixed seed: reproducible
    with pytest.raises(ValueError, match="k=0"):
        gates.median_band(noisy, 0)
    with pytest.raises(ValueError, match="at least 2"):
        gates.false_alarm_rate([1.0], 3, 0.05)


def test_absolute_flake_rate():
    assert gates.absolute_flake_rate([1, 2, 3, 4], 2.5) == 0.5
    with pytest.raises(ValueError, match="no times"):
        gates.absolute_flake_rate([], 1)


def test_k_table_and_smallest_k():
    ratios = [0.98, 0.99, 1.0, 1.0, 1.0, 1.01, 1.02]
    t = gates.k_table(ratios, tolerance=0.05, slowdown=0.10)
    assert list(t["k"]) == list(gates.KS) and (t["false_alarm_pct"] == 0).all()  # every ratio within 2%: nothing fails at 5%
    assert (t["caught_pct"] == 100).all() and t.attrs == {"tolerance": 0.05, "slowdown": 0.10}
    assert gates.smallest_k(t) == 1 and gates.smallest_k(t.assign(false_alarm_pct=50.0)) is None
    tight = gates.k_table(ratios, tolerance=0.015)  # the 0.98 sample fails a lone run; medians of 5 or more rarely do
    assert tight.loc[0, "false_alarm_pct"] > 1 and gates.smallest_k(tight) > 1


def test_noise_verdict_rule_and_quotients():
    # a's own noise only (b constant): the ratio carries all of it, quotient 1, not below the threshold
    assert gates.spread_quotient(pd.Series([1.0, 2.0, 3.0, 4.0, 5.0]), pd.Series([1.0] * 5)) == pytest.approx(1.0)  # a column
    assert "outweighed the drift" in gates.noise_verdict(1.0) and "cancels" in gates.noise_verdict(0.4)
    assert gates.noise_verdict(0.99).startswith("ratio/time spread 0.99 < 1")
    # shared drift: b follows a, so a / b barely moves
    shared = ([1.0, 2.0, 3.0, 4.0, 5.0], [1.1, 2.0, 3.1, 4.0, 5.1])
    q = gates.process_quotients([{"a_ms": shared[0], "b_ms": shared[1]}, {"a_ms": [1.0, 2.0, 3.0], "b_ms": [1.0] * 3}])
    assert q["quotients"][0] < 0.1 and q["quotients"][1] == pytest.approx(1.0) and q["shared"] == 1
    assert q["median"] == pytest.approx(sum(q["quotients"]) / 2)
    with pytest.raises(ValueError, match="do not spread"):
        gates.spread_quotient([1.0, 1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="no A/A processes"):
        gates.process_quotients([])


def test_noise_verdict_on_the_recorded_processes():
    """Every recorded set with A/A processes: the verdict each process gets follows its own two spreads."""
    from infralens_lab import evidence
    for st in evidence.load_all_sets():
        procs = st.load("gates_gpu").values.get("aa_processes") if "gates_gpu" in st.names() else None
        for p in procs or []:
            t = gates.noise_table(p["a_ms"], p["b_ms"]).set_index("what")["spread_pct"]
            q = gates.spread_quotient(p["a_ms"], p["b_ms"])
            assert q == pytest.approx(t["a / b"] / t["a (ms)"])
            assert ("cancels" in gates.noise_verdict(q)) == (t["a / b"] < t["a (ms)"]) == gates.ratio_helped(t.reset_index())


def test_noise_and_drift_tables_by_hand():
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 1.0, 1.0, 1.0, 1.0]
    t = gates.noise_table(a, b).set_index("what")
    assert t.loc["a (ms)", "median"] == 3.0 and t.loc["b (ms)", "spread_pct"] == 0.0
    assert t.loc["a / b", "median"] == 3.0
    assert not gates.ratio_helped(t.reset_index())  # a's own noise, none of it shared: the ratio carries it all
    shared = gates.noise_table([1.0, 2.0, 3.0, 4.0, 5.0], [1.1, 2.0, 3.1, 4.0, 5.1])
    assert gates.ratio_helped(shared)  # both moved alike: the ratio cancels it
    with pytest.raises(ValueError, match="two equal lists"):
        gates.noise_table([1.0], [1.0])
    # a shared slowdown: every time doubles in the second group, the ratios stay at 1
    d = gates.drift_table({"as is": ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]), "slowed": ([2.0, 2.0, 2.0], [2.0, 2.0, 2.0])})
    assert d.attrs["between_pct"] == {"absolute": pytest.approx(100 * 1.0 / 1.5), "ratio": 0.0}
    assert list(d["group"]) == ["as is", "slowed", gates.BETWEEN] and "(%)" in gates.BETWEEN
    with pytest.raises(ValueError, match="at least 2"):
        gates.drift_table({"one": ([1.0], [1.0])})


def test_gates_tripped_is_the_count_rule():
    import pandas as pd

    t = pd.DataFrame([
        {"regression": "intended", "aten_ops_per_step": 6, "syncs_per_step": 0, "graph_breaks": 0, "peak_bytes": 1000},
        {"regression": "item", "aten_ops_per_step": 8, "syncs_per_step": 1, "graph_breaks": 0, "peak_bytes": 1000},
        {"regression": "fp32_matmul", "aten_ops_per_step": 6, "syncs_per_step": 0, "graph_breaks": 0, "peak_bytes": 1040},
        {"regression": "noncontig", "aten_ops_per_step": 7, "syncs_per_step": 0, "graph_breaks": 0, "peak_bytes": 1060},
    ])
    c = gates.gates_tripped(t).set_index("regression")
    assert c.loc["item", "caught_by"] == "aten_ops_per_step, syncs_per_step"
    assert c.loc["fp32_matmul", "caught_by"] == "none"  # 4% more bytes is inside the 5% slack
    assert c.loc["noncontig", "caught_by"] == "aten_ops_per_step, peak_bytes"
    with pytest.raises(ValueError, match="no 'base' row"):
        gates.gates_tripped(t, base="base")


def test_ratio_gate_table_by_hand():
    t = gates.ratio_gate_table({"g": [1.0, 1.01, 0.99, 1.0, 1.0], "absent": []}, {"g": {"tolerance": 0.05, "k": 7},
                                                                           "other": {"tolerance": 0.05, "k": 3}},
                           {"g": 0.98})
    assert list(t["ratio"]) == ["g"] and t.loc[0, "gate_reference"] == 1.0
    assert t.loc[0, "procedure_gap_pct"] == pytest.approx(100 * (1 / 0.98 - 1)) and t.loc[0, "k_needed"] >= 1


@pytest.mark.parametrize("fn", [gates.noise_table, gates.spread_quotient])
@pytest.mark.parametrize("a,b", [([1.0, 2.0, 3.0], [1.0, 2.0]), ([1.0], [1.0])], ids=["unequal", "one-each"])
def test_an_aa_pair_of_the_wrong_shape_is_named(fn, a, b):
    with pytest.raises(ValueError, match=f"{len(a)} a timings and {len(b)} b timings; expected two equal lists of 2"):
        fn(a, b)
