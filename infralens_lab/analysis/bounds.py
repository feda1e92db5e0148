"""A measured speedup against its own bound: the one verdict of the series (``holds``, ``BEATEN`` or
``undecided``), with its tolerance.

A bound (Amdahl's ``1 / (1 - f)``, the overlap floor, the weak-scaling identity ``n(1 - f)``) and the speedup it
bounds must come from the same runs (TEACHING.md, "Every number carries its conditions": one basis). Given both,
:func:`bound_check` says whether the measurement stays under the bound times :data:`BOUND_SLACK`; with the
measurement's range (its inputs' p10-p90, :func:`infralens_lab.stats.ratio_range`) it says ``undecided`` when
the range straddles that line, so no verdict is decided by noise. Lab 05's fix table and lab 06's scaling
sentence, and the recorder's invariant check of the NCCL set, all ask here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..units import decimals_to_show

BOUND_SLACK = 1.05  # a measured speedup within 5% above its bound is run-to-run noise, not a broken premise

VERDICTS = ("holds", "BEATEN", "undecided")


@dataclass(frozen=True)
class BoundCheck:
    """What :func:`bound_check` found: ``measured`` and its ``low``-``high`` range (equal to it when the inputs
    carry no spread), ``bound``, ``slack``, ``limit`` (``bound * slack``: above it the bound is beaten) and
    ``verdict``: ``'holds'`` (the whole range at or under the limit), ``'BEATEN'`` (the whole range above it)
    or ``'undecided'`` (the range straddles it: these runs cannot tell)."""

    measured: float
    low: float
    high: float
    bound: float
    slack: float
    limit: float
    verdict: str

    def decimals(self) -> int:
        """The decimals (2 to 6) it takes for every printed number of the range to sit on the same side of the
        printed limit as the number itself (the printed comparison is the one made)."""
        pts = (self.low, self.measured, self.high)

        def agrees(d: int) -> bool:
            lim = round(self.limit, d)
            return all((round(x, d) > lim) == (x > self.limit) for x in pts)

        return decimals_to_show(agrees)

    def numbers(self) -> str:
        """``'measured 2.84x (range 2.78-2.90x) against a bound of 2.71x (x 1.05 = 2.84x)'``, at :meth:`decimals`."""
        d = self.decimals()
        lo, hi = f"{self.low:.{d}f}", f"{self.high:.{d}f}"
        spread = "" if lo == hi else f" (range {lo}-{hi}x)"
        return (f"measured {self.measured:.{d}f}x{spread} against a bound of {self.bound:.{d}f}x "
                f"(x {self.slack:g} = {self.limit:.{d}f}x)")

    def text(self) -> str:
        """:meth:`numbers` and the verdict: ``'... (x 1.05 = 2.84x): undecided'``."""
        return f"{self.numbers()}: {self.verdict}"


def bound_check(measured: float, bound: float, low: float | None = None, high: float | None = None,
                slack: float = BOUND_SLACK) -> BoundCheck:
    """The verdict of a measured speedup against its bound, both from the same runs: ``holds`` when ``high`` (the
    top of the measurement's range; ``measured`` without one) is at most ``bound * slack``, ``BEATEN`` when
    ``low`` is above it, ``undecided`` otherwise. The range is widened to hold ``measured`` (a median ratio can
    sit outside p10/p90 ratios of skewed samples). Raises ValueError naming the value seen and the one expected
    for a speedup or bound that is not a positive finite number, a ``low`` above ``high``, or a slack below 1."""
    m, b = float(measured), float(bound)
    for name, v in (("measured", m), ("bound", b)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name}={v!r}; expected a positive finite speedup (x)")
    lo = m if low is None else float(low)
    hi = m if high is None else float(high)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise ValueError(f"range low={low!r}, high={high!r}; expected 0 < low <= high")
    if not slack >= 1:
        raise ValueError(f"slack={slack!r}; expected a factor >= 1 (a bound is never tightened)")
    lo, hi = min(lo, m), max(hi, m)
    limit = b * slack
    verdict = "holds" if hi <= limit else "BEATEN" if lo > limit else "undecided"
    return BoundCheck(measured=m, low=lo, high=hi, bound=b, slack=float(slack), limit=limit, verdict=verdict)
