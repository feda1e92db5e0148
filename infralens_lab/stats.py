"""Small statistics every layer uses (the one owner): percentiles of plain lists of samples, and the spread
rule: a median carries its p10-p90, and no key or verdict is derived from one whose spread is too wide."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InfraLensError


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``samples`` by linear interpolation (numpy's default)."""
    if not samples:
        raise ValueError("percentile of an empty list of samples; expected at least one sample")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q!r}; expected a number in [0, 100]")
    s = sorted(float(x) for x in samples)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# The spread rule (TEACHING.md, "Every number carries its conditions"): a median whose p10-p90 width is more than
# this share of it is too noisy to grade against or to conclude from; measure more samples or ask another question.
SPREAD_LIMIT = 0.10


class SpreadTooWide(InfraLensError, ValueError):
    """A derived value (a key, a ratio, a verdict) was asked of a median whose p10-p90 spread is too wide."""


@dataclass(frozen=True)
class Spread:
    """A median with its p10 and p90 and the sample count; ``rel`` = (p90 - p10) / median, the width as a share."""

    median: float
    p10: float
    p90: float
    n: int

    @property
    def rel(self) -> float:
        return (self.p90 - self.p10) / self.median if self.median else math.inf

    def steady(self, limit: float = SPREAD_LIMIT) -> bool:
        """True when the p10-p90 width is at most ``limit`` of the median."""
        return self.rel <= limit

    def text(self, unit: str = "", digits: int = 2) -> str:
        """``'9.65 ms (p10-p90 5.71-14.96, n=40)'``."""
        u = f" {unit}" if unit else ""
        return (f"{self.median:.{digits}f}{u} (p10-p90 {self.p10:.{digits}f}-{self.p90:.{digits}f}, "
                f"n={self.n})")


def spread_of(samples: Sequence[float]) -> Spread:
    """The :class:`Spread` of a plain list of samples (ValueError for an empty list)."""
    return Spread(percentile(samples, 50), percentile(samples, 10), percentile(samples, 90), len(samples))


def require_steady(name: str, spread: Spread, limit: float = SPREAD_LIMIT) -> Spread:
    """``spread`` when its p10-p90 width is at most ``limit`` of its median; otherwise :class:`SpreadTooWide`
    naming ``name``, the width seen and the limit (derive no key or verdict from it)."""
    if not spread.steady(limit):
        raise SpreadTooWide(f"{name}: median {spread.median:.4g} with p10-p90 {spread.p10:.4g}-{spread.p90:.4g} "
                            f"spans {spread.rel:.0%} of it; expected at most {limit:.0%} before a key or a verdict "
                            "is derived from it (measure more samples, or ask another question)")
    return spread


def ratio_range(num: Spread, den: Spread) -> tuple[float, float, float]:
    """``(low, mid, high)`` of ``num / den`` from their spreads: p10/p90, median/median, p90/p10 (the widest
    the ratio can be when both vary independently within their p10-p90)."""
    if min(num.p10, den.p10) <= 0:
        raise ValueError(f"ratio_range: p10 values {num.p10!r} and {den.p10!r}; expected positive numbers")
    return num.p10 / den.p90, num.median / den.median, num.p90 / den.p10
