"""The roofline model: arithmetic intensity, attainable rate, ridge point, and what bounds a kernel.

A kernel that does ``F`` FLOPs while moving ``B`` bytes to and from DRAM has arithmetic
intensity ``I = F / B`` (FLOP/byte). On a GPU with peak compute ``P`` (FLOP/s) and peak
memory bandwidth ``W`` (byte/s) it can at best reach ``min(P, I * W)`` FLOP/s: the memory
roof below the *ridge point* ``I* = P / W``, the compute roof above it. Use measured
ceilings (``Ceilings`` in :mod:`infralens_lab.analysis.hardware`) rather than datasheet peaks
where you have them. All functions take SI units (FLOP, byte, second, FLOP/s, byte/s), so
rates come back in FLOP/s; divide by 1e12 for TFLOP/s.

Classification: a kernel reaching at least :data:`LATENCY_THRESHOLD` (20%) of the roof at its
intensity is called *memory-bound* (left of the ridge) or *compute-bound* (right of it). Below
that it is *latency/launch-bound*: far under both roofs, so neither bandwidth nor arithmetic
explains its time; what is left is latency that is not hidden (too few warps or bytes in
flight, dependent loads, tails) or fixed costs (launch, synchronisation). Why 20%: streaming
kernels that are truly limited by a roof reach 60-95% of the measured ceiling (a Triton copy
reaches the torch ``copy_`` bandwidth); a factor of five below the roof cannot be blamed on
the roof, and a threshold any closer (e.g. 50%) would call ordinary untuned kernels
latency-bound.
"""
from __future__ import annotations

from dataclasses import dataclass

LATENCY_THRESHOLD = 0.2  # fraction of the attainable rate below which a kernel is latency/launch-bound
BOUNDS = ("memory", "compute", "latency/launch")


def _positive(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} is {type(v).__name__}; expected a number")
    if not v > 0:
        raise ValueError(f"{name}={v!r}; expected a positive number")
    return float(v)


def intensity(flops: float, bytes_moved: float) -> float:
    """Arithmetic intensity in FLOP/byte: ``flops / bytes_moved`` (bytes to and from DRAM)."""
    if isinstance(flops, bool) or not isinstance(flops, (int, float)) or flops < 0:
        raise ValueError(f"flops={flops!r}; expected a number >= 0")
    return float(flops) / _positive("bytes_moved", bytes_moved)


def ridge(peak_flops: float, peak_bw: float) -> float:
    """Ridge point in FLOP/byte: the intensity where the memory roof meets the compute roof."""
    return _positive("peak_flops", peak_flops) / _positive("peak_bw", peak_bw)


def attainable(intens: float, peak_flops: float, peak_bw: float) -> float:
    """Best rate (FLOP/s) a kernel of intensity ``intens`` (FLOP/byte) can reach: ``min(P, I*W)``."""
    p, w = _positive("peak_flops", peak_flops), _positive("peak_bw", peak_bw)
    if isinstance(intens, bool) or not isinstance(intens, (int, float)) or intens < 0:
        raise ValueError(f"intensity={intens!r}; expected a number >= 0 (FLOP/byte)")
    return min(p, float(intens) * w)


@dataclass(frozen=True)
class Bound:
    """Where a measured kernel sits on the roofline. Rates in FLOP/s, intensities in FLOP/byte."""

    kind: str  # one of BOUNDS
    intensity: float
    ridge: float
    attainable: float
    achieved: float
    fraction_of_roof: float
    explanation: str


def classify(flops: float, bytes_moved: float, seconds: float, peak_flops: float, peak_bw: float,
             threshold: float = LATENCY_THRESHOLD) -> Bound:
    """Classify a measured kernel as memory-, compute- or latency/launch-bound (see module doc).

    ``flops`` and ``bytes_moved`` (DRAM bytes, e.g. ncu ``dram__bytes.sum``) per launch,
    ``seconds`` per launch, peaks in FLOP/s and byte/s. ``threshold`` is the fraction of the
    attainable rate below which the kernel is called latency/launch-bound.
    """
    t = _positive("seconds", seconds)
    if not 0 < threshold < 1:
        raise ValueError(f"threshold={threshold!r}; expected a fraction in (0, 1)")
    i = intensity(flops, bytes_moved)
    r = ridge(peak_flops, peak_bw)
    roof = attainable(i, peak_flops, peak_bw)
    achieved = flops / t
    # a kernel with no FLOPs is judged on bandwidth: fraction of peak bytes/s
    frac = (bytes_moved / t) / peak_bw if flops == 0 else achieved / roof
    side = "memory" if i < r else "compute"
    if frac < threshold:
        kind = "latency/launch"
        why = (f"reaches {frac:.0%} of the {side} roof at intensity {i:.3g} FLOP/B (ridge {r:.3g}): far under "
               f"both roofs, so latency or launch/sync overhead, not bandwidth or math, sets its time")
    else:
        kind = side
        why = (f"intensity {i:.3g} FLOP/B is {'below' if side == 'memory' else 'above'} the ridge ({r:.3g}) "
               f"and it reaches {frac:.0%} of the {side} roof")
    return Bound(kind, i, r, roof, achieved, frac, why)


def roof_curve(peak_flops: float, peak_bw: float, lo: float = 1 / 16, hi: float = 4096, points: int = 64):
    """(intensities, attainable rates) on a log grid from ``lo`` to ``hi`` FLOP/byte, for plotting."""
    import numpy as np

    xs = np.geomspace(_positive("lo", lo), _positive("hi", hi), int(points))
    return xs, np.minimum(float(peak_flops), xs * float(peak_bw))
