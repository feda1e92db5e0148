"""Interval arithmetic on ``(start, end)`` pairs (µs), for overlap questions asked of traces.

Lists in, lists out, so analyses can clip and combine them freely; the merge itself is the trace
module's vectorised :func:`infralens_lab.parse.trace.union`. Empty or reversed pairs are
dropped. Used by the overlap (lab 05) and distributed (lab 06) analyses; :func:`hidden` is the one
overlap rule both use.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..parse.trace import union as _merge

Pairs = list[tuple[float, float]]


def union(pairs: Iterable[tuple[float, float]]) -> Pairs:
    """Sorted, non-overlapping pairs covering the same time as ``pairs``."""
    a = np.asarray(list(pairs), dtype=float).reshape(-1, 2)
    return [(float(s), float(e)) for s, e in _merge(a[:, 0], a[:, 1])]


def subtract(pairs: Iterable[tuple[float, float]], cut: Iterable[tuple[float, float]]) -> Pairs:
    """The time covered by ``pairs`` and not by ``cut`` (both merged first), as sorted pairs."""
    out: Pairs = []
    cut = union(cut)
    j = 0
    for a, b in union(pairs):
        while j < len(cut) and cut[j][1] <= a:
            j += 1
        k, start = j, a
        while k < len(cut) and cut[k][0] < b:
            if cut[k][0] > start:
                out.append((start, cut[k][0]))
            start = max(start, cut[k][1])
            k += 1
        if start < b:
            out.append((start, b))
    return out


def length(pairs: Iterable[tuple[float, float]]) -> float:
    """Total length of ``pairs`` (as given: merge first with :func:`union` if they may overlap)."""
    return float(sum(b - a for a, b in pairs))


def hidden(pairs: Iterable[tuple[float, float]], under: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """``(total, hidden)``: the length of the union of ``pairs``, and how much of it ``under`` also covers
    (e.g. communication or copy time that ran while some compute ran)."""
    merged = union(pairs)
    total = length(merged)
    return total, total - length(subtract(merged, under))


def idle_share(busy: Iterable[tuple[float, float]], start: float, end: float) -> float:
    """The share (0..1) of the window ``[start, end]`` (µs) not covered by ``busy`` (``(start, end)`` pairs, in any
    order, overlapping or not): 1 - (merged busy time clipped to the window) / (end - start). The series' idle share
    (``Trace.summary()['gpu_utilization']`` is 1 minus it on the steady window). ValueError when the window is empty."""
    if not end > start:
        raise ValueError(f"idle_share: the window [{start}, {end}] is empty; expected start < end (µs)")
    inside = [(max(a, start), min(b, end)) for a, b in union(busy) if b > start and a < end]
    return 1.0 - length(inside) / (end - start)
