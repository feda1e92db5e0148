"""Small statistics every layer uses (the one owner): percentiles of plain lists of samples."""
from __future__ import annotations

import math
from collections.abc import Sequence


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
