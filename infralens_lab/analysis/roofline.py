"""The roofline model: arithmetic intensity, attainable rate, ridge point, and what bounds a kernel.

A kernel that does ``F`` FLOPs while moving ``B`` bytes to and from DRAM has arithmetic
intensity ``I = F / B`` (FLOP/byte). On a GPU with peak compute ``P`` (FLOP/s) and peak
memory bandwidth ``W`` (byte/s) it can at best reach ``min(P, I * W)`` FLOP/s: the memory
roof below the *ridge point* ``I* = P / W``, the compute roof above it. Use measured
ceilings (``Ceilings`` in :mod:`infralens_lab.analysis.hardware`) rather than datasheet peaks
where you have them. All functions take SI units (FLOP, byte, second, FLOP/s, byte/s), so
rates come back in FLOP/s; divide by 1e12 for TFLOP/s.

This module owns the series' one bound classifier, :func:`verdict`; :func:`classify` (a roofline
point, with Nsight Compute's speed of light when measured) and :func:`sol_verdict` (the speed-of-light
pair alone) only compute the fractions it reads. The rule, :data:`RULE`, in words: a kernel is bound by a
roof when one *unit* reaches at least :data:`BOUND_THRESHOLD` (60%) of its peak, which is the threshold
Nsight Compute's own speed-of-light rule uses. The units (:data:`UNITS`): the roofline's FLOP/s against the
compute roof at the kernel's intensity, its DRAM bytes/s against the memory roof, Nsight Compute's SM %
(``sm__throughput``, the busiest of the SM's pipelines and issue) and Memory % (``gpu__compute_memory_throughput``,
the busiest memory unit: L1, L2 or DRAM). The verdict names the unit that decided and its percentage.
Below 60% on every unit it is *latency-bound*, and the verdict says why when the evidence does:

* ``grid below one wave``: the launch has too few blocks to fill the GPU; named when
  ``launch__waves_per_multiprocessor`` is under the threshold itself, since then the grid alone keeps the
  kernel under 60% of any roof however well each block runs (1024³ at 0.97 waves is not this case);
* ``latency not hidden``: the grid fills the GPU, yet no unit is busy: a short kernel's fill and drain,
  too few warps or bytes in flight, dependent loads.

Host launch overhead is not a reason here: ``gpu__time_duration`` runs from the kernel's start to its end
on the GPU and excludes the launch path. Whether back-to-back calls are paced by the host is judged per
call, from CUDA-event timings against the kernel's duration (:func:`infralens_lab.analysis.launches.host_gap`).

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
GRID_BELOW_WAVE = "grid below one wave"  # the reasons a latency verdict names: Verdict.reasons holds these words
LATENCY_NOT_HIDDEN = "latency not hidden"
REASONS = (GRID_BELOW_WAVE, LATENCY_NOT_HIDDEN)
# the units a verdict can name, the bound each one stands for, and what it measures
UNITS = {
    "FLOP/s roof": ("compute", "the kernel's FLOP/s over its compute roof at its own clock: SMs x peak FLOP per "
                               "SM-cycle x the clock it ran at (the roofline, per cycle)"),
    "DRAM roof": ("memory", "the kernel's DRAM bytes/s (or FLOP/s at its intensity) over the measured memory roof"),
    "SM %": ("compute", "sm__throughput.avg.pct_of_peak_sustained_elapsed: the busiest SM pipeline or issue"),
    "Memory %": ("memory", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed: the busiest memory "
                           "unit (L1, L2 or DRAM)"),
}
RULE = (f"bound by a roof when one unit reaches at least {BOUND_THRESHOLD:.0%} of its peak (the roofline's FLOP/s or "
        f"DRAM bytes/s against the roof at its intensity, per cycle at the kernel's own clock for FLOP/s, or Nsight Compute's SM % or Memory %); the "
        f"verdict names that unit. Below {BOUND_THRESHOLD:.0%} on every unit it is latency-bound: a grid below one "
        f"wave when launch__waves_per_multiprocessor < {BOUND_THRESHOLD:g} (the grid alone keeps it under the "
        f"threshold), else latency not hidden. Launch overhead is outside gpu__time_duration and is judged per call")


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
    """The one rule's answer: ``kind`` (one of :data:`BOUNDS`), ``roof`` (the bound of the unit nearest to
    binding), ``fraction`` of its peak that unit reached, ``unit`` (its name, a key of :data:`UNITS` or the
    caller's), ``reasons`` (for a latency-bound kernel, those of :data:`REASONS` the evidence supports),
    ``text`` (one sentence naming the unit and its %) and ``rule`` (:data:`RULE`, for a lab to print)."""

    kind: str
    roof: str
    fraction: float
    reasons: tuple[str, ...]
    text: str
    rule: str = RULE
    unit: str = ""


def _as_units(fractions) -> dict[str, tuple[str, float]]:
    """``{unit: (bound, fraction)}`` from ``{"memory"|"compute": f}`` or ``{unit: (bound, f)}`` or ``{unit: f}``
    with ``unit`` a key of :data:`UNITS`; unknown values (None, NaN) are dropped."""
    out = {}
    for k, v in dict(fractions).items():
        if isinstance(v, tuple):
            kind, f = v
        elif k in ("memory", "compute"):
            kind, f = k, v
        elif k in UNITS:
            kind, f = UNITS[k][0], v
        else:
            raise ValueError(f"fractions={fractions!r}: unit {k!r} unknown; expected 'memory', 'compute', one of "
                             f"{list(UNITS)} or a (bound, fraction) pair")
        if kind not in ("memory", "compute"):
            raise ValueError(f"fractions={fractions!r}: unit {k!r} stands for {kind!r}; expected 'memory' or 'compute'")
        if _known(f):
            out[k] = (kind, float(f))
    if not out:
        raise ValueError(f"fractions={fractions!r}; expected a dict with 'memory' and/or 'compute' fractions "
                         "(or units of UNITS)")
    return out


def verdict(fractions: dict, waves: float | None = None, time_s: float | None = None,
            launch_floor_s: float | None = None, threshold: float = BOUND_THRESHOLD) -> Verdict:
    """Apply :data:`RULE` to the fraction of its peak each unit reached.

    ``fractions``: ``{"memory": f, "compute": g}`` (fractions, not percent; a bound may be left out), or one
    entry per unit, ``{"SM %": 0.67, "FLOP/s roof": 0.44}`` (keys of :data:`UNITS`) or ``{name: (bound, f)}``.
    The largest fraction decides (a tie goes to memory); the verdict names its unit. ``waves``: ncu
    ``launch__waves_per_multiprocessor`` (blocks launched / blocks the GPU holds at once). ``time_s`` (the
    kernel's duration, s) and ``launch_floor_s`` (a timed per-call floor, s) do not change the verdict: the
    duration excludes the launch path; when both are given the text adds whether back-to-back calls of this
    kernel would wait on the host.
    """
    if not 0 < threshold < 1:
        raise ValueError(f"threshold={threshold!r}; expected a fraction in (0, 1)")
    units = _as_units(fractions)
    unit, (roof, frac) = max(units.items(), key=lambda kv: (kv[1][1], kv[1][0] == "memory"))
    host = ""
    if _known(time_s) and _known(launch_floor_s) and time_s < launch_floor_s:
        host = (f"; outside the kernel, calls back to back would wait on the host (kernel {time_s * 1e6:.1f} µs < "
                f"timed per-call floor {launch_floor_s * 1e6:.1f} µs)")
    named = roof if unit == roof else f"{unit} ({roof})"
    if frac >= threshold:
        return Verdict(roof, roof, frac, (), f"{roof}-bound: {named} at {frac:.0%} of its peak "
                                             f"(at least {threshold:.0%} binds){host}", unit=unit)
    reasons = []
    if _known(waves) and waves < threshold:
        reasons.append(f"{GRID_BELOW_WAVE} ({waves:.2f} waves: the grid alone caps it under {threshold:.0%})")
    elif _known(waves):
        room = "fill the GPU" if waves >= 1 else f"leave room for {waves:.0%} of it"
        reasons.append(f"{LATENCY_NOT_HIDDEN} ({waves:.2f} waves {room}, more than the busiest unit reaches)")
    parts = ", ".join(f"{k} {f:.0%}" for k, (_, f) in sorted(units.items(), key=lambda kv: -kv[1][1]))
    text = f"latency-bound: no unit reaches {threshold:.0%} (largest {parts})"
    if reasons:
        text += "; " + "; ".join(reasons)
    return Verdict("latency", roof, frac, tuple(r.split(" (")[0] for r in reasons), text + host, unit=unit)


@dataclass(frozen=True)
class Bound:
    """Where a measured kernel sits on the roofline. Rates in FLOP/s, intensities in FLOP/byte.
    ``reasons``: for a latency-bound kernel, the :data:`REASONS` its evidence supports; ``unit`` and
    ``unit_fraction``: the unit that decided the verdict and the fraction of its peak it reached."""

    kind: str  # one of BOUNDS
    intensity: float
    ridge: float
    attainable: float
    achieved: float
    fraction_of_roof: float
    explanation: str
    reasons: tuple[str, ...] = ()
    unit: str = ""
    unit_fraction: float = float("nan")


def classify(flops: float, bytes_moved: float, seconds: float, peak_flops: float, peak_bw: float,
             threshold: float = BOUND_THRESHOLD, waves: float | None = None,
             launch_floor_s: float | None = None, sm_pct: float | None = None,
             memory_pct: float | None = None) -> Bound:
    """Classify a measured kernel as memory-, compute- or latency-bound with :func:`verdict`.

    ``flops`` and ``bytes_moved`` (DRAM bytes, e.g. ncu ``dram__bytes.sum``) per launch,
    ``seconds`` per launch (ncu ``gpu__time_duration``), peaks in FLOP/s and byte/s. The roofline's unit is
    the achieved rate over the roof at its intensity (a kernel with no FLOPs: bytes/s over the bandwidth), on
    the side of the ridge it sits ("FLOP/s roof" right of the ridge, "DRAM roof" left of it). ``sm_pct`` and
    ``memory_pct``: Nsight Compute's speed of light (% of peak), when measured, are units too (:data:`RULE`:
    one rule over every unit; ``fraction_of_roof`` stays the roofline's). ``waves`` and ``launch_floor_s`` as
    in :func:`verdict`. The same call with the same counters gives the same verdict in every lab.
    """
    t = _positive("seconds", seconds)
    i = intensity(flops, bytes_moved)
    r = ridge(peak_flops, peak_bw)
    roof = attainable(i, peak_flops, peak_bw)
    achieved = flops / t
    # a kernel with no FLOPs is judged on bandwidth: fraction of peak bytes/s
    frac = (bytes_moved / t) / peak_bw if flops == 0 else achieved / roof
    side = "memory" if i < r else "compute"
    own = "DRAM roof" if side == "memory" else "FLOP/s roof"
    units = {own: frac, "SM %": None if sm_pct is None else sm_pct / 100,
             "Memory %": None if memory_pct is None else memory_pct / 100}
    v = verdict(units, waves=waves, time_s=t, launch_floor_s=launch_floor_s, threshold=threshold)
    host = v.text.split("; outside the kernel", 1)[1] if "; outside the kernel" in v.text else ""
    host = "; outside the kernel" + host if host else ""
    if v.kind != "latency" and v.unit != own:  # the speed of light found the roof
        unit = ("the SM's busiest unit (SM %, sm__throughput)" if v.kind == "compute" else
                "the busiest memory unit (Memory %, gpu__compute_memory_throughput)")
        why = (f"{v.kind}-bound: {unit} at {v.fraction:.0%} of its peak (speed of light), although the kernel "
               f"reaches {frac:.0%} of the roofline's {side} roof at intensity {i:.3g} FLOP/B: the "
               f"{'SM, not its FLOP rate' if v.kind == 'compute' else 'memory system, not DRAM bandwidth alone'}, "
               f"is what is busy")
    elif v.kind == "latency":
        why = (f"latency-bound: no unit reaches {threshold:.0%} (largest {v.unit} {v.fraction:.0%}); it reaches "
               f"{frac:.0%} of the {side} roof at intensity {i:.3g} FLOP/B (ridge {r:.3g})")
        if v.reasons:
            why += "; " + v.text.split("; ", 1)[1].split("; outside the kernel")[0]
    else:
        why = (f"{v.kind}-bound: intensity {i:.3g} FLOP/B is {'below' if side == 'memory' else 'above'} the ridge "
               f"({r:.3g}) and it reaches {frac:.0%} of the {side} roof ({own})")
    return Bound(v.kind, i, r, roof, achieved, frac, why + host, v.reasons, v.unit, v.fraction)


def sol_verdict(sm_pct: float, memory_pct: float, waves: float | None = None, time_s: float | None = None,
                launch_floor_s: float | None = None) -> str:
    """Read Nsight Compute's speed-of-light pair (SM and memory throughput, % of peak) with the same
    rule as :func:`classify` (:data:`RULE`): the busier unit binds when it reaches
    :data:`BOUND_THRESHOLD`; below it on both the kernel is latency-bound, with the reasons the
    optional ``waves`` supports (``time_s`` / ``launch_floor_s`` as in :func:`verdict`). "Memory" is the
    busiest memory unit (L1, L2 or DRAM): pair it with DRAM throughput before calling a kernel DRAM-bound."""
    v = verdict({"Memory %": memory_pct / 100, "SM %": sm_pct / 100}, waves, time_s, launch_floor_s)
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
