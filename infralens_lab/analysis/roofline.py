"""The roofline model: arithmetic intensity, attainable rate, ridge point, and what bounds a kernel.

A kernel that does ``F`` FLOPs while moving ``B`` bytes to and from DRAM has arithmetic
intensity ``I = F / B`` (FLOP/byte). On a GPU with peak compute ``P`` (FLOP/s) and peak
memory bandwidth ``W`` (byte/s) it can at best reach ``min(P, I * W)`` FLOP/s: the memory
roof below the *ridge point* ``I* = P / W``, the compute roof above it. Use measured
ceilings (``Ceilings`` in :mod:`infralens_lab.analysis.hardware`) rather than datasheet peaks
where you have them. All functions take SI units (FLOP, byte, second, FLOP/s, byte/s), so
rates come back in FLOP/s; divide by 1e12 for TFLOP/s.

This module owns the series' one bound classifier, :func:`verdict`; :func:`classify` (a roofline
point) and :func:`sol_verdict` (Nsight Compute's speed-of-light pair) only compute the fractions
it reads. The rule, :data:`RULE`, in words: a kernel is bound by a roof when it reaches at least
:data:`BOUND_THRESHOLD` (60%) of it, which is the threshold Nsight Compute's own speed-of-light
rule uses. Below 60% of every roof neither bandwidth nor arithmetic explains its time: it is
*latency-bound*, and the verdict names why when the evidence says so:

* ``grid below one wave``: the launch has fewer blocks than the GPU holds at once
  (ncu ``launch__waves_per_multiprocessor`` < 1), so SMs sit idle however fast each block runs;
* ``host launch overhead``: the kernel is shorter than the timed floor of a tiny launch
  (CUDA events around a call), so back-to-back calls are paced by the launch, not the kernel;
* ``latency not hidden``: neither of those; too few warps or bytes in flight, dependent loads.

Why 60% and not lower: a kernel truly limited by a roof reaches 60-95% of the measured ceiling (a
Triton copy reaches the torch ``copy_`` bandwidth); at a third of the roof, the roof is not what
stops it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BOUND_THRESHOLD = 0.6  # fraction of a roof from which that roof is said to bind (Nsight Compute's SOL rule)
LATENCY_THRESHOLD = BOUND_THRESHOLD  # the former name; one threshold for the series
BOUNDS = ("memory", "compute", "latency")
REASONS = ("grid below one wave", "host launch overhead", "latency not hidden")
RULE = (f"bound by a roof when it reaches at least {BOUND_THRESHOLD:.0%} of it (of the roofline's attainable "
        f"rate at its intensity, or of peak in Nsight Compute's speed of light); below {BOUND_THRESHOLD:.0%} of "
        f"every roof it is latency-bound, because of a grid below one wave (launch__waves_per_multiprocessor < 1), "
        f"host launch overhead (kernel shorter than the timed floor of a tiny launch), or latency not hidden")


def _positive(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} is {type(v).__name__}; expected a number")
    if not v > 0:
        raise ValueError(f"{name}={v!r}; expected a positive number")
    return float(v)


def _known(v) -> bool:
    return v is not None and not isinstance(v, bool) and isinstance(v, (int, float)) and v == v


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
class Verdict:
    """The one rule's answer: ``kind`` (one of :data:`BOUNDS`), ``roof`` (the roof nearest to binding),
    ``fraction`` of it reached, ``reasons`` (for a latency-bound kernel, those of :data:`REASONS` the
    evidence supports), ``text`` (one sentence) and ``rule`` (:data:`RULE`, for a lab to print)."""

    kind: str
    roof: str
    fraction: float
    reasons: tuple[str, ...]
    text: str
    rule: str = RULE


def verdict(fractions: dict, waves: float | None = None, time_s: float | None = None,
            launch_floor_s: float | None = None, threshold: float = BOUND_THRESHOLD) -> Verdict:
    """Apply :data:`RULE` to the fraction of each roof a kernel reached.

    ``fractions``: ``{"memory": f, "compute": g}`` (fractions, not percent; a roof may be left out).
    ``waves``: ncu ``launch__waves_per_multiprocessor`` (blocks launched / blocks the GPU holds at
    once); ``time_s``: the kernel's duration (s); ``launch_floor_s``: the timed per-call floor of a
    tiny launch (s, CUDA events). Reasons are only named when their evidence is given.
    """
    if not 0 < threshold < 1:
        raise ValueError(f"threshold={threshold!r}; expected a fraction in (0, 1)")
    known = {k: float(v) for k, v in dict(fractions).items() if _known(v)}
    bad = [k for k in known if k not in ("memory", "compute")]
    if bad or not known:
        raise ValueError(f"fractions={fractions!r}; expected a dict with 'memory' and/or 'compute' fractions")
    roof, frac = max(known.items(), key=lambda kv: (kv[1], kv[0] == "memory"))
    if frac >= threshold:
        return Verdict(roof, roof, frac, (), f"{roof}-bound: {frac:.0%} of the {roof} roof "
                                              f"(at least {threshold:.0%} binds)")
    reasons = []
    if _known(waves) and waves < 1:
        reasons.append(f"grid below one wave ({waves:.2f} waves)")
    if _known(time_s) and _known(launch_floor_s) and time_s < launch_floor_s:
        reasons.append(f"host launch overhead (kernel {time_s * 1e6:.1f} µs < timed launch floor "
                       f"{launch_floor_s * 1e6:.1f} µs)")
    if not reasons and (_known(waves) or _known(launch_floor_s)):
        reasons.append("latency not hidden")
    parts = ", ".join(f"{k} {v:.0%}" for k, v in sorted(known.items()))
    text = f"latency-bound: no roof reaches {threshold:.0%} ({parts})"
    if reasons:
        text += "; " + "; ".join(reasons)
    return Verdict("latency", roof, frac, tuple(r.split(" (")[0] for r in reasons), text)


@dataclass(frozen=True)
class Bound:
    """Where a measured kernel sits on the roofline. Rates in FLOP/s, intensities in FLOP/byte.
    ``reasons``: for a latency-bound kernel, the :data:`REASONS` its evidence supports."""

    kind: str  # one of BOUNDS
    intensity: float
    ridge: float
    attainable: float
    achieved: float
    fraction_of_roof: float
    explanation: str
    reasons: tuple[str, ...] = ()


def classify(flops: float, bytes_moved: float, seconds: float, peak_flops: float, peak_bw: float,
             threshold: float = BOUND_THRESHOLD, waves: float | None = None,
             launch_floor_s: float | None = None, sm_pct: float | None = None,
             memory_pct: float | None = None) -> Bound:
    """Classify a measured kernel as memory-, compute- or latency-bound with :func:`verdict`.

    ``flops`` and ``bytes_moved`` (DRAM bytes, e.g. ncu ``dram__bytes.sum``) per launch,
    ``seconds`` per launch, peaks in FLOP/s and byte/s. The fraction judged is the achieved rate
    over the roof at its intensity (a kernel with no FLOPs: bytes/s over the bandwidth), on the side
    of the ridge it sits. ``waves`` and ``launch_floor_s`` as in :func:`verdict`. ``sm_pct`` and
    ``memory_pct``: Nsight Compute's speed-of-light pair (% of peak), when measured: :data:`RULE` is one rule
    over every roof, so a unit at or over the threshold binds even when the roofline fraction does not reach
    it (``fraction_of_roof`` stays the roofline's; the explanation names the unit and its fraction). The same call with
    the same counters gives the same verdict in every lab.
    """
    t = _positive("seconds", seconds)
    i = intensity(flops, bytes_moved)
    r = ridge(peak_flops, peak_bw)
    roof = attainable(i, peak_flops, peak_bw)
    achieved = flops / t
    # a kernel with no FLOPs is judged on bandwidth: fraction of peak bytes/s
    frac = (bytes_moved / t) / peak_bw if flops == 0 else achieved / roof
    side = "memory" if i < r else "compute"
    fractions = {side: frac}
    sol = {"compute": sm_pct, "memory": memory_pct}  # Nsight Compute's speed of light, % of each unit's peak
    for k, pct in sol.items():
        if _known(pct):
            fractions[k] = max(fractions.get(k, 0.0), float(pct) / 100)
    v = verdict(fractions, waves=waves, time_s=t, launch_floor_s=launch_floor_s, threshold=threshold)
    if v.kind != "latency" and (v.kind != side or v.fraction > frac):  # the speed of light found the roof
        unit = "the SM's busiest unit" if v.kind == "compute" else "the busiest memory unit"
        why = (f"{v.kind}-bound: {unit} at {v.fraction:.0%} of its peak (speed of light), although the kernel "
               f"reaches {frac:.0%} of the roofline's {side} roof at intensity {i:.3g} FLOP/B: the "
               f"{'SM, not its FLOP rate' if v.kind == 'compute' else 'memory system, not DRAM bandwidth alone'}, "
               f"is what is busy")
        return Bound(v.kind, i, r, roof, achieved, frac, why, v.reasons)
    if v.kind == "latency":
        why = (f"reaches {frac:.0%} of the {side} roof at intensity {i:.3g} FLOP/B (ridge {r:.3g}), under "
               f"{threshold:.0%}: latency, not bandwidth or math, sets its time")
        if v.reasons:
            why += "; " + v.text.split("; ", 1)[1]
    else:
        why = (f"intensity {i:.3g} FLOP/B is {'below' if side == 'memory' else 'above'} the ridge ({r:.3g}) "
               f"and it reaches {frac:.0%} of the {side} roof")
    return Bound(v.kind, i, r, roof, achieved, frac, why, v.reasons)


def sol_verdict(sm_pct: float, memory_pct: float, waves: float | None = None, time_s: float | None = None,
                launch_floor_s: float | None = None) -> str:
    """Read Nsight Compute's speed-of-light pair (SM and memory throughput, % of peak) with the same
    rule as :func:`classify` (:data:`RULE`): the busier unit binds when it reaches
    :data:`BOUND_THRESHOLD`; below it on both the kernel is latency-bound, with the reasons the
    optional ``waves`` / ``time_s`` / ``launch_floor_s`` support. "Memory" is the busiest memory unit
    (L1, L2 or DRAM): pair it with DRAM throughput before calling a kernel DRAM-bound."""
    v = verdict({"memory": memory_pct / 100, "compute": sm_pct / 100}, waves, time_s, launch_floor_s)
    if v.kind != "latency":
        unit = "memory" if v.kind == "memory" else "compute (SM)"
        return f"{unit}-bound: {v.fraction:.0%} of its peak"
    text = (f"latency-bound: neither memory ({memory_pct:.0f}%) nor SM ({sm_pct:.0f}%) reaches "
            f"{BOUND_THRESHOLD:.0%} of peak")
    return text + ("; " + v.text.split("; ", 1)[1] if "; " in v.text else "")


def roof_curve(peak_flops: float, peak_bw: float, lo: float = 1 / 16, hi: float = 4096, points: int = 64):
    """(intensities, attainable rates) on a log grid from ``lo`` to ``hi`` FLOP/byte, for plotting."""
    xs = np.geomspace(_positive("lo", lo), _positive("hi", hi), int(points))
    return xs, np.minimum(float(peak_flops), xs * float(peak_bw))
