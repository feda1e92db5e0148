"""analysis.gates: count rules, the ratio verdict, and the arithmetic for choosing k and the tolerance,
on hand-checked numbers."""
from __future__ import annotations

import math

import pytest

from infralens_lab.analysis import gates as A


def test_count_rules():
    assert A.count_verdict("w", "syncs_per_step", 0, {"max": 0}).passed
    v = A.count_verdict("w", "syncs_per_step", 1, {"max": 0})
    assert not v.passed and "allowed at most 0" in v.message and "threshold file" in v.message
    assert A.count_verdict("w", "launches_per_step", 3, {"equals": 3}).passed
    assert not A.count_verdict("w", "launches_per_step", 2, {"equals": 3}).passed  # fewer is a change too
    # slack: 5% over max passes, just beyond fails
    assert A.count_verdict("w", "peak_bytes", 1050, {"max": 1000, "slack": 0.05}).passed
    assert not A.count_verdict("w", "peak_bytes", 1051, {"max": 1000, "slack": 0.05}).passed


@pytest.mark.parametrize("rule, match", [({}, "exactly one of"), ({"max": 1, "equals": 1}, "exactly one of"),
                                         ({"max": 1, "slack": 1.5}, "slack=1.5")])
def test_bad_rules(rule, match):
    with pytest.raises(ValueError, match=match):
        A.count_verdict("w", "m", 1, rule)


def test_spread_and_ratio_verdict():
    r = [0.9, 1.0, 1.0, 1.0, 1.1]
    # p10 = 0.94, p90 = 1.06 by linear interpolation, median 1.0
    assert A.spread(r) == pytest.approx(0.12)
    ok = A.ratio_verdict("g", r, expected=1.02, tolerance=0.05)
    assert ok.passed and ok.measured == pytest.approx(1.0) and ok.limit == pytest.approx(1.02 * 0.95)
    assert "wider than the tolerance" in ok.message  # 12% spread vs 5% tolerance: take more runs
    bad = A.ratio_verdict("g", [0.8, 0.81, 0.82], expected=1.0, tolerance=0.05)
    assert not bad.passed and "wider" not in bad.message


@pytest.mark.parametrize("kwargs, match", [(dict(ratios=[], expected=1, tolerance=0.1), "no ratios"),
                                           (dict(ratios=[1.0], expected=0, tolerance=0.1), "positive number"),
                                           (dict(ratios=[1.0], expected=1, tolerance=1.0), "fraction in")])
def test_ratio_verdict_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        A.ratio_verdict("g", **kwargs)


def test_runs_needed_by_hand():
    # spread 10%: sd = 0.10 / 2.5632 = 0.03901; k = (2 * 1.2533 * 0.03901 / 0.05)^2 = 3.83 -> 4
    assert A.runs_needed(0.10, 0.05) == 4
    # halving the tolerance needs four times the runs (before rounding up)
    assert A.runs_needed(0.10, 0.025) == math.ceil(4 * 3.8251) == 16
    assert A.runs_needed(0.0, 0.05) == 1
    with pytest.raises(ValueError, match="tolerance"):
        A.runs_needed(0.1, 0)


def test_bootstrap_helpers():
    flat = [1.0] * 10
    assert A.median_band(flat, 5) == (1.0, 1.0, 1.0)
    assert A.false_alarm_rate(flat, 3, 0.01) == 0.0
    assert A.detection_rate(flat, 3, 0.05, slowdown=0.10) == 1.0  # 1/1.1 = 0.909 < 0.95
    assert A.detection_rate(flat, 3, 0.05, slowdown=0.02) == 0.0  # 1/1.02 = 0.980 > 0.95
    noisy = [0.8, 0.9, 1.0, 1.0, 1.0, 1.1, 1.2] * 3
    lo1, _, hi1 = A.median_band(noisy, 1)
    lo9, _, hi9 = A.median_band(noisy, 9)
    assert hi9 - lo9 < hi1 - lo1  # the median of more runs varies less
    assert A.false_alarm_rate(noisy, 9, 0.05) < A.false_alarm_rate(noisy, 1, 0.05)
    assert A.median_band(noisy, 5) == A.median_band(noisy, 5)  # fixed seed: reproducible
    with pytest.raises(ValueError, match="k=0"):
        A.median_band(noisy, 0)
    with pytest.raises(ValueError, match="at least 2"):
        A.false_alarm_rate([1.0], 3, 0.05)


def test_absolute_flake_rate():
    assert A.absolute_flake_rate([1, 2, 3, 4], 2.5) == 0.5
    with pytest.raises(ValueError, match="no times"):
        A.absolute_flake_rate([], 1)
