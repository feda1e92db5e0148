"""The spread rule's owner (stats.Spread, require_steady, ratio_range) on numbers whose answer is known by hand."""
from __future__ import annotations

import pytest

from infralens_lab import stats
from infralens_lab.errors import InfraLensError


def test_spread_of_gives_numpy_percentiles_and_the_relative_width():
    sp = stats.spread_of([10.0, 11.0, 9.0, 10.5, 9.5])
    assert (sp.median, sp.n) == (10.0, 5)
    assert sp.p10 == pytest.approx(9.2) and sp.p90 == pytest.approx(10.8)
    assert sp.rel == pytest.approx(0.16)
    assert not sp.steady() and sp.steady(0.2)
    assert sp.text("ms") == "10.00 ms (p10-p90 9.20-10.80, n=5)"


def test_require_steady_refuses_a_wide_median_by_name_and_passes_a_narrow_one():
    wide = stats.Spread(median=9.65, p10=5.71, p90=14.96, n=40)  # lab 07's channels_first forward, issue 37
    with pytest.raises(stats.SpreadTooWide, match=r"forward ms: .*spans 96% .*at most 10%") as err:
        stats.require_steady("forward ms", wide)
    assert isinstance(err.value, InfraLensError) and isinstance(err.value, ValueError)
    narrow = stats.Spread(median=10.0, p10=9.8, p90=10.3, n=20)
    assert stats.require_steady("forward ms", narrow) is narrow


def test_ratio_range_brackets_the_median_ratio_and_refuses_non_positive_p10():
    lo, mid, hi = stats.ratio_range(stats.Spread(4.0, 3.0, 5.0, 9), stats.Spread(2.0, 1.0, 2.5, 9))
    assert (lo, mid, hi) == pytest.approx((1.2, 2.0, 5.0))
    assert lo < mid < hi
    with pytest.raises(ValueError, match="expected positive"):
        stats.ratio_range(stats.Spread(1.0, 0.0, 2.0, 3), stats.Spread(1.0, 0.5, 2.0, 3))
