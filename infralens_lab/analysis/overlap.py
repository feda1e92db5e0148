"""Overlap, pipeline periods, launch counts and Amdahl bounds: pure maths on traces and timings.

Everything here reads intervals (start, end) in microseconds, or a parsed
:class:`~infralens_lab.parse.trace.Trace`, and returns plain numbers or DataFrames; nothing
runs on a device. Interval union and subtraction are :mod:`~infralens_lab.measure.torch_trace`'s
(one owner), so a gap there and an overlap here are measured the same way.

* :func:`hidden_fraction`: the share of one set of intervals covered by another (copy time hidden
  under compute; stage-0 time hidden under stage 1). 1.0 = fully hidden, 0.0 = fully exposed.
* :func:`copy_overlap`: that fraction for a GPU trace: host-to-device memcpy time under kernels.
* :func:`copy_stream`: the stream (a trace viewer's row) of the copies that ran beside kernels.
* :func:`pipeline_metrics`: a two-stage pipeline's period (the spacing of stage-1 completions in steady
  state), each stage's mean time, the two predictions (``s0 + s1`` serialised, ``max(s0, s1)``
  overlapped), the overlap score ``(s0 + s1 - period) / min(s0, s1)`` clipped to [0, 1], and which
  prediction the period is closer to.
* :func:`launches_per_step`: per ``ProfilerStep`` range, the kernel launch calls the CPU made, the GPU
  events they produced, the CPU ops dispatched, the CPU time of the step and the GPU busy time.
* :func:`engine_busy`: per steady period, how long the copy engine (memcpys) and the SMs (kernels) were busy,
  apart and together: one "GPU busy" share hides which engine did the work.
* :func:`compiled_regions`: per profiled step, the compiled graphs torch.compile ran (its ``Torch-Compiled
  Region: frame/compile`` ranges) and how many distinct compiled graphs they were.
* :func:`amdahl`: the best speedup of a whole when a fraction ``f`` of it gets ``s`` times faster.
* :func:`step_bound`: the best speedup of a training step when part of its GPU work gets faster, held by
  both floors: the GPU work that remains and the CPU's own time per step (a step cannot finish before the
  CPU has launched it). Amdahl on the GPU side alone forgets the second floor.
* :func:`overlap_bound`: the best speedup of a step when part of it is *hidden* under the rest (overlap, not
  removal): Amdahl's ``1 / (1 - f)`` and the overlap floor (the period cannot drop below the longest part that
  still runs), whichever binds.
* :func:`elementwise_chain_traffic`: a model (not a measurement) of the DRAM bytes an elementwise
  chain moves eagerly (every op reads and writes the whole tensor) and fused (read once, write once).
* :func:`graph_refusals`: what a CUDA graph refused in :func:`~infralens_lab.measure.overlap.graph_limits`
  (the recorded ``graph_limits``), one line per case: what was done and why capture or replay refuses it,
  with the raw error kept for whoever asks.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import pandas as pd

from ..parse.trace import GRAPH_LAUNCH_CALLS, LAUNCH_CALLS, RUNTIME_CATS, step_gpu_work  # (re-exported)
from ..stats import Spread, percentile
from .intervals import hidden as _hidden
from .traffic import Traffic

VERDICT_MARGIN = 0.25  # a period counts as "serialised" or "overlapped" when within 25% of min(s0, s1) of it


def _check_intervals(iv, what: str) -> list[tuple[float, float]]:
    out = []
    for k, pair in enumerate(iv):
        try:
            a, b = float(pair[0]), float(pair[1])
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"{what}[{k}] is {pair!r}; expected a (start_us, end_us) pair of numbers") from None
        if not (math.isfinite(a) and math.isfinite(b)) or b < a:
            raise ValueError(f"{what}[{k}] is ({a}, {b}); expected finite start <= end")
        out.append((a, b))
    return out


def hidden_us(hidden, under) -> float:
    """Length (µs) of the union of ``hidden`` that lies inside the union of ``under``."""
    return _hidden(_check_intervals(hidden, "hidden"), _check_intervals(under, "under"))[1]


def hidden_fraction(hidden, under) -> float | None:
    """Share (0..1) of the time covered by ``hidden`` intervals during which some ``under`` interval
    also runs; None when ``hidden`` covers no time. Overlapping intervals within one set count once."""
    total, hid = _hidden(_check_intervals(hidden, "hidden"), _check_intervals(under, "under"))
    return None if total <= 0 else hid / total


def copy_overlap(trace, copy_kind: str = "HtoD") -> dict:
    """Host-to-device copy time hidden under kernels in a GPU ``trace``, over the copies the profiled steps
    launched (the series' attribution rule, :meth:`~infralens_lab.parse.trace.Trace.gpu_step`: a copy still
    queued from the warm-up step is not one of them): ``copy_us`` (union of memcpy events whose name contains
    ``copy_kind``), ``hidden_us``, ``exposed_us``, ``fraction`` (hidden / copy, None if there were no such
    copies), ``copies`` and ``steps`` (profiled steps, the divisor of a per-step figure). Any kernel running at
    the time hides a copy, whoever launched it: the GPU was busy either way."""
    g = trace.gpu_events(scope="steps")
    cp = g[(g["cat"] == "gpu_memcpy") & g["name"].str.contains(copy_kind, regex=False)]
    k = trace.gpu_events(scope="all")
    k = k[k["cat"] == "kernel"]
    civ = list(zip(cp["start_us"], cp["end_us"], strict=True))
    kiv = list(zip(k["start_us"], k["end_us"], strict=True))
    total, hid = _hidden(civ, kiv)
    return {"copies": len(cp), "copy_us": total, "hidden_us": hid, "exposed_us": total - hid,
            "fraction": (hid / total) if total > 0 else None, "steps": max(1, len(trace.steps()))}


def copy_stream(trace, copy_kind: str = "HtoD") -> int:
    """The CUDA stream (the row a trace viewer draws it on) of the ``copy_kind`` copies the profiled steps launched
    that ran beside a kernel: of the streams holding such copies, the one with the most copy time under kernels. A
    second-stream copy gives a stream other than the kernels'; a copy on the kernels' own stream is never under
    them. ValueError, naming what was seen, when no such copy ran while a kernel did."""
    g = trace.gpu_events(scope="steps")
    cp = g[(g["cat"] == "gpu_memcpy") & g["name"].str.contains(copy_kind, regex=False)]
    k = trace.gpu_events(scope="all")
    kiv = list(zip(k.loc[k["cat"] == "kernel", "start_us"], k.loc[k["cat"] == "kernel", "end_us"], strict=True))
    under = {int(s): _hidden(list(zip(c["start_us"], c["end_us"], strict=True)), kiv)[1]
             for s, c in cp.groupby("stream")}
    best = max(under, key=lambda s: (under[s], -s), default=None)
    if best is None or under[best] <= 0:
        raise ValueError(f"{len(cp)} {copy_kind} copies launched by the profiled steps on streams {sorted(under)}, "
                         "none of them while a kernel ran; expected a copy on a second stream beside the kernels")
    return best


def range_intervals(trace, name: str) -> list[tuple[float, float]]:
    """``(start_us, end_us)`` of every ``record_function`` range called ``name``, in time order."""
    ev = trace.events
    r = ev[(ev["cat"] == "user_annotation") & (ev["name"] == name)].sort_values("start_us")
    return list(zip(r["start_us"].astype(float), r["end_us"].astype(float), strict=True))


def pipeline_metrics(stage0, stage1, skip: int = 1) -> dict:
    """Steady-state metrics of a two-stage pipeline from each stage's intervals (µs, one per item, in
    order). ``skip`` items at the start are warm-up and left out. Returns ``items``, ``period_us``
    (``(last stage-1 end - first) / (n - 1)``), ``stage0_us``, ``stage1_us`` (mean durations),
    ``serial_us`` (= s0 + s1), ``overlapped_us`` (= max), ``overlap_score`` (``(s0 + s1 - period) /
    min(s0, s1)`` clipped to [0, 1]: 0 serialised, 1 fully overlapped), ``overlap_score_spread`` (the score's own
    spread: half the p10-p90 width of the item-to-item periods over min(s0, s1); a grader's tolerance), ``hidden_fraction`` (share of
    stage-0 time under stage-1 ranges) and ``verdict`` (``'overlapped'``, ``'serialised'`` or
    ``'between'``: ``overlapped`` when the period is within ``VERDICT_MARGIN`` · min(s0, s1) of max(s0, s1),
    ``serialised`` when it is no more than that margin below s0 + s1 or anywhere above it: a hand-off between
    the turns makes a serialised period longer than the sum, as on the recorded GPU)."""
    s0 = _check_intervals(stage0, "stage0")
    s1 = _check_intervals(stage1, "stage1")
    if not isinstance(skip, int) or skip < 0:
        raise ValueError(f"skip={skip!r}; expected an int >= 0")
    s0, s1 = s0[skip:], s1[skip:]
    n = min(len(s0), len(s1))
    if n < 2:
        raise ValueError(f"need at least 2 items per stage after skipping {skip}; got {len(s0)} stage-0 and "
                         f"{len(s1)} stage-1 intervals")
    s0, s1 = s0[:n], s1[:n]
    d0 = sum(b - a for a, b in s0) / n
    d1 = sum(b - a for a, b in s1) / n
    period = (s1[-1][1] - s1[0][1]) / (n - 1)
    short = min(d0, d1)
    score = None if short <= 0 else min(1.0, max(0.0, (d0 + d1 - period) / short))
    # the score's own spread: half the p10-p90 width of the item-to-item periods, over the shorter stage
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(s1)]
    score_spread = None if short <= 0 else (percentile(gaps, 90) - percentile(gaps, 10)) / 2 / short
    margin = VERDICT_MARGIN * short
    # at or above the sum (a hand-off between turns can add to it) the stages take turns: serialised
    verdict = "overlapped" if abs(period - max(d0, d1)) <= margin else \
        "serialised" if period >= d0 + d1 - margin else "between"
    return {"items": n, "period_us": period, "stage0_us": d0, "stage1_us": d1, "serial_us": d0 + d1,
            "overlapped_us": max(d0, d1), "overlap_score": score, "overlap_score_spread": score_spread,
            "hidden_fraction": hidden_fraction(s0, s1),
            "verdict": verdict}


def launches_per_step(trace):
    """One row per ``ProfilerStep`` range: ``launch_calls`` (CPU calls that launch GPU work, from
    :data:`LAUNCH_CALLS`; a CUDA graph replay is one), ``graph_launches``, ``gpu_events`` (kernels,
    memcpys, memsets the step launched: the series' attribution rule, :func:`~infralens_lab.parse.trace.step_gpu_work`),
    ``cpu_ops`` (top-level aten ops on the step's thread), ``cpu_us`` (the step range's CPU time),
    ``op_cpu_us`` (the top-level ops' CPU time, launch calls inside them included), ``launch_cpu_us`` (CPU
    time inside the step's launch calls) and ``gpu_busy_us`` (merged time of the step's GPU events). So per
    op, ``launch_cpu_us`` is the driver's share, ``op_cpu_us - launch_cpu_us`` the dispatcher's (torch's C++
    between Python and the driver) and ``cpu_us - op_cpu_us`` the Python between ops. On a CPU-only trace the
    launch and GPU columns are 0 and ``cpu_ops`` still counts the dispatches."""
    w = step_gpu_work(trace)  # raises for a trace without ProfilerStep ranges
    ev = trace.events
    steps = ev[(ev["cat"] == "user_annotation") & ev["name"].str.startswith("ProfilerStep")].sort_values("start_us")
    rt = ev[ev["cat"].isin(RUNTIME_CATS)]
    graphs = rt[rt["name"].isin(GRAPH_LAUNCH_CALLS)]
    calls = rt[rt["name"].isin(LAUNCH_CALLS)]
    ops = ev[ev["cat"] == "cpu_op"].sort_values(["pid", "tid", "start_us"])
    top = []  # top-level ops: not nested inside another op of the same thread
    end, key = -math.inf, None
    for r in ops.itertuples():
        if (r.pid, r.tid) != key:
            key, end = (r.pid, r.tid), -math.inf
        if r.start_us >= end:
            top.append(r.Index)
            end = r.end_us
    top_ops = ops.loc[top]
    rows = []
    for s, wr in zip(steps.itertuples(), w.itertuples(index=False), strict=True):
        inside = (graphs["start_us"] >= s.start_us) & (graphs["start_us"] < s.end_us) & (graphs["pid"] == s.pid)
        mine = top_ops[(top_ops["tid"] == s.tid) & (top_ops["start_us"] >= s.start_us) & (top_ops["end_us"] <= s.end_us)]
        lc = calls[(calls["start_us"] >= s.start_us) & (calls["start_us"] < s.end_us) & (calls["pid"] == s.pid)]
        rows.append({"step": s.name, "launch_calls": int(wr.launch_calls), "graph_launches": int(inside.sum()),
                     "gpu_events": int(wr.gpu_ops), "cpu_ops": len(mine), "cpu_us": float(s.dur),
                     "op_cpu_us": float(mine["dur"].sum()), "launch_cpu_us": float(lc["dur"].sum()),
                     "gpu_busy_us": float(wr.gpu_busy_us)})
    return pd.DataFrame(rows)


def amdahl(fraction: float, speedup: float = math.inf) -> float:
    """Best overall speedup when a share ``fraction`` (0..1) of the time gets ``speedup`` times faster
    (``inf``: removed entirely): ``1 / ((1 - f) + f / s)``."""
    f, s = float(fraction), float(speedup)
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"fraction={fraction!r}; expected a share between 0 and 1")
    if not s >= 1.0:
        raise ValueError(f"speedup={speedup!r}; expected a number >= 1 (the part gets faster, not slower)")
    rest = amdahl_rest(f, s)
    return math.inf if rest == 0 else 1.0 / rest


@dataclass(frozen=True)
class StepBound:
    """What :func:`step_bound` found: ``bound`` (old period / the larger floor), ``gpu_floor_ms`` (the GPU work
    left after the fix), ``cpu_floor_ms`` (the CPU's time per step), ``limited_by`` (``'gpu'`` or ``'cpu'``:
    the larger floor; ``'gpu'`` on a tie) and ``gpu_only`` (the bound with the GPU floor alone, Amdahl's)."""

    bound: float
    gpu_floor_ms: float
    cpu_floor_ms: float
    limited_by: str
    gpu_only: float


def step_bound(period_ms: float, gpu_ms: float, cpu_ms: float, fraction: float = 0.0,
               speedup: float = math.inf) -> StepBound:
    """The most a fix can speed up a step of ``period_ms`` (ms), bounded by both floors. The GPU is busy
    ``gpu_ms`` per step; the fix makes a share ``fraction`` (0..1) of that GPU work ``speedup`` times faster
    (``fraction=0``: a fix that only removes idle time, such as an input-pipeline fix). After it a step lasts at
    least ``max(gpu_floor, cpu_floor)``: the GPU work left, ``gpu_ms * ((1 - f) + f / s)``, and ``cpu_ms``, the
    CPU's own time per step (launching the work; a CPU that waits on the GPU inside the step must not be
    counted here). Returns a :class:`StepBound`; ``bound`` is ``period_ms / max(floors)``."""
    for name, v in (("period_ms", period_ms), ("gpu_ms", gpu_ms), ("cpu_ms", cpu_ms)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name}={v!r}; expected a finite number of milliseconds >= 0")
    if gpu_ms > period_ms * (1 + 1e-9):
        raise ValueError(f"gpu_ms={gpu_ms!r} is more than the period {period_ms!r}: the GPU cannot be busy longer "
                         "than the step lasts (expected the merged busy time per step, not summed kernel times)")
    amdahl(fraction, speedup)  # the same checks on the share and the factor (0..1, >= 1)
    gpu_floor = gpu_ms * amdahl_rest(fraction, speedup)
    cpu_floor = float(cpu_ms)
    floor = max(gpu_floor, cpu_floor)

    def ratio(over: float) -> float:
        return math.inf if over == 0 else period_ms / over

    return StepBound(bound=ratio(floor), gpu_floor_ms=gpu_floor, cpu_floor_ms=cpu_floor,
                     limited_by="gpu" if gpu_floor >= cpu_floor else "cpu", gpu_only=ratio(gpu_floor))


def amdahl_rest(fraction: float, speedup: float = math.inf) -> float:
    """The share of a whole left after a share ``fraction`` of it gets ``speedup`` times faster:
    ``(1 - f) + f / s`` (``inf``: that part removed); :func:`amdahl` is its reciprocal."""
    f, s = float(fraction), float(speedup)
    return (1.0 - f) + (0.0 if math.isinf(s) else f / s)
def overlap_bound(period: float, hidden: float, floors) -> dict:
    """The best speedup of a step of ``period`` (any time unit) when ``hidden`` of it is taken off its critical
    path by running it under the rest (a copy on a second stream, a stage with a spare buffer, idle time
    filled by a graph), with two floors: Amdahl's, the rest of the step (``period - hidden``, so at most
    ``1 / (1 - f)`` with ``f = hidden / period``), and the overlap floor, the longest part that must still run
    (``max(floors)``: each engine or stage still does its own work, so hiding a copy cannot take the period
    below ``max(copy, compute)``). Returns ``amdahl`` (``period / (period - hidden)``, inf when nothing is
    left), ``overlap_floor`` (``period / max(floors)``), ``bound`` (the smaller), ``best_period`` and
    ``binds``: ``'amdahl'``, ``'overlap floor'``, or ``'both'`` when the two floors agree within
    :data:`BOUND_TIE` of the larger."""
    p, h = float(period), float(hidden)
    fl = [float(x) for x in floors]
    if not (math.isfinite(p) and p > 0):
        raise ValueError(f"period={period!r}; expected a positive time")
    if not 0.0 <= h <= p:
        raise ValueError(f"hidden={hidden!r}; expected a time between 0 and the period {p:g}")
    if not fl or any(not (math.isfinite(x) and 0 < x <= p) for x in fl):
        raise ValueError(f"floors={floors!r}; expected one or more positive times, none above the period {p:g}")
    rest, floor = p - h, max(fl)
    best = max(rest, floor)
    binds = "both" if abs(rest - floor) <= BOUND_TIE * best else "amdahl" if rest > floor else "overlap floor"
    return {"amdahl": math.inf if rest == 0 else p / rest, "overlap_floor": p / floor, "bound": p / best,
            "best_period": best, "binds": binds}


def step_periods(trace) -> list[float]:
    """The steady periods of a profiled trace one by one, in milliseconds: from the end of each profiled step's
    GPU work (the attribution rule, :func:`~infralens_lab.parse.trace.step_gpu_work`) to the end of the next
    one's, the periods :meth:`~infralens_lab.parse.trace.Trace.steady_window` spans (their mean is
    :func:`~infralens_lab.analysis.joins.idle_budget`'s ``period_ms``). Their spread
    (:func:`infralens_lab.stats.spread_of`) is what a ratio of two such periods carries. Raises ValueError for a
    trace with fewer than two profiled steps that launched GPU work."""
    ends = step_gpu_work(trace)["gpu_end_us"].to_numpy(dtype=float)
    if len(ends) < 2 or not all(math.isfinite(e) for e in ends):
        raise ValueError(f"per-step GPU work ends {list(ends)!r}; expected two or more profiled steps, each "
                         "launching GPU work")
    return [(b - a) / 1e3 for a, b in itertools.pairwise(ends)]


BOUND_TIE = 0.01  # two floors within 1% of each other both bind: the timings behind them are not finer than that


def engine_busy(trace) -> dict:
    """Per steady period (:meth:`~infralens_lab.parse.trace.Trace.steady_window`), the time the copy engine
    was busy (``copy_us``: merged memcpys), the SMs were (``kernel_us``: merged kernels), and either was
    (``any_us``), over the work the profiled steps launched, with ``period_us`` and the shares ``copy_pct``,
    ``kernel_pct``, ``any_pct``. Memsets (a few µs here) are left out of both engines. Raises ValueError for a
    trace with fewer than two profiled steps of GPU work."""
    sw = trace.steady_window()
    if sw is None:
        raise ValueError(f"need at least two profiled steps that launched GPU work; got {len(trace.steps())} steps")
    a, b, n = sw
    g = trace.gpu_events(scope="steps")
    out = {"period_us": (b - a) / n}
    for key, sel in (("copy_us", g["cat"] == "gpu_memcpy"), ("kernel_us", g["cat"] == "kernel"),
                     ("any_us", g["cat"].isin(("gpu_memcpy", "kernel")))):
        iv = [(max(s, a), min(e, b)) for s, e in zip(g.loc[sel, "start_us"], g.loc[sel, "end_us"], strict=True) if e > a and s < b]
        out[key] = _hidden(iv, [(a, b)])[0] / n
    for k in ("copy", "kernel", "any"):
        out[f"{k}_pct"] = 100 * out[f"{k}_us"] / out["period_us"]
    return out


HOST_BOUND_BELOW = 0.5  # a step whose GPU is busy less than half of it waits on the host more than it works


def host_bound(busy_share: float) -> bool:
    """The series' rule for a whole step: True when the GPU ran work for less than :data:`HOST_BOUND_BELOW` of
    it (it spent more time waiting for the host to launch the next piece of work than working: faster kernels
    then shorten the wait, not the step). ``busy_share``: a fraction 0..1."""
    b = float(busy_share)
    if not 0.0 <= b <= 1.0:
        raise ValueError(f"busy_share={busy_share!r}; expected a fraction between 0 and 1")
    return b < HOST_BOUND_BELOW


PACE_VERDICTS = ("host-bound", "not host-bound", "borderline")


@dataclass(frozen=True)
class PaceVerdict:
    """:func:`host_bound` applied with the forward's spread (:func:`host_pace`): ``busy`` is the GPU's busy share
    of the forward at its median time, ``low`` / ``high`` at its p90 / p10 time (fractions 0..1), ``threshold`` the
    rule's :data:`HOST_BOUND_BELOW`; ``verdict`` one of :data:`PACE_VERDICTS` (``borderline`` when the threshold
    lies within ``low``..``high``: the spread of the evidence itself can put the forward on either side)."""

    verdict: str
    busy: float
    low: float
    high: float
    busy_ms: float
    forward: Spread
    threshold: float = HOST_BOUND_BELOW

    def as_row(self) -> dict:
        """The numbers behind the verdict, for a table: ms, and shares in percent."""
        return {"kernel_ms": self.busy_ms, "forward_ms": self.forward.median, "forward_p10_ms": self.forward.p10,
                "forward_p90_ms": self.forward.p90, "busy_pct": 100 * self.busy, "busy_low_pct": 100 * self.low,
                "busy_high_pct": 100 * self.high, "verdict": self.verdict}

    def short(self) -> str:
        """``'borderline (busy 50.0%, 42.9-54.2% over the forward's p10-p90; threshold 50%)'``."""
        return (f"{self.verdict} (busy {100 * self.busy:.1f}%, {100 * self.low:.1f}-{100 * self.high:.1f}% over the "
                f"forward's p10-p90; threshold {100 * self.threshold:.0f}%)")

    def sentence(self) -> str:
        """The verdict with both numbers: the busy share (and its range over the forward's p10-p90) and the
        threshold, e.g. ``'borderline: the GPU ran kernels 50.0% of the forward (42.9-54.2% over its p10-p90
        time), and the rule's threshold, 50%, lies inside that range'``."""
        busy = (f"the GPU ran kernels {100 * self.busy:.1f}% of the forward ({100 * self.low:.1f}-"
                f"{100 * self.high:.1f}% over its p10-p90 time)")
        rule = f"the rule's threshold, {100 * self.threshold:.0f}%"
        if self.verdict == "borderline":
            return f"borderline: {busy}, and {rule}, lies inside that range: the rule cannot call it either way"
        side = "below" if self.verdict == "host-bound" else "at or above"
        return f"{self.verdict}: {busy}, all of it {side} {rule}"


def host_pace(busy_ms: float, forward: Spread) -> PaceVerdict:
    """Who sets the pace of a forward, with the spread of its time: ``busy_ms`` (GPU busy time per forward, from
    a trace: kernel durations, steady run to run) over the forward's wall time ``forward`` (a
    :class:`~infralens_lab.stats.Spread` in ms, timed without the profiler). :func:`host_bound` (the one rule)
    decides at the median, at p90 (the lowest share) and at p10 (the highest, at most 1): one answer at all
    three is the verdict; otherwise ``borderline``. ValueError for a non-positive time or a busy time longer
    than the forward's median."""
    if not (busy_ms > 0 and forward.p10 > 0 and forward.p10 <= forward.median <= forward.p90):
        raise ValueError(f"busy_ms={busy_ms!r}, forward p10/median/p90={forward.p10!r}/{forward.median!r}/"
                         f"{forward.p90!r}; expected positive times with p10 <= median <= p90")
    if busy_ms > forward.median:
        raise ValueError(f"busy_ms={busy_ms!r} exceeds the forward's median {forward.median!r} ms; a part never "
                         "exceeds its whole: expected the busy time of the same forward")
    busy, low, high = busy_ms / forward.median, busy_ms / forward.p90, min(1.0, busy_ms / forward.p10)
    calls = {host_bound(x) for x in (low, busy, high)}
    verdict = "borderline" if len(calls) > 1 else ("host-bound" if calls.pop() else "not host-bound")
    return PaceVerdict(verdict, busy, low, high, float(busy_ms), forward)


def pace_flip_reason(a: PaceVerdict, b: PaceVerdict, gpu_a: str, gpu_b: str) -> str:
    """Why one forward gets two verdicts on two GPUs (each :class:`PaceVerdict` from its own recording): a
    borderline side is named with its range, and the busy share's move is traced to its two parts, the GPU busy
    time and the forward's wall time, whichever changed more (the forward's length is the host's issue time
    when the GPU waits), or, when both medians sit on one side of the threshold, to the spread alone. ValueError
    when the verdicts agree."""
    if a.verdict == b.verdict:
        raise ValueError(f"both verdicts are {a.verdict!r}; a flip needs two different verdicts")
    parts = []
    for v, g in ((a, gpu_a), (b, gpu_b)):
        if v.verdict == "borderline":
            parts.append(f"on the {g} the forward's own spread ({v.forward.p10:.2f}-{v.forward.p90:.2f} ms) "
                         f"puts the busy share at {100 * v.low:.1f}-{100 * v.high:.1f}%, across the "
                         f"{100 * v.threshold:.0f}% threshold")
    k = b.busy_ms / a.busy_ms - 1
    f = b.forward.median / a.forward.median - 1
    if host_bound(a.busy) == host_bound(b.busy):
        side = "below" if host_bound(a.busy) else "at or above"
        cause = (f"at their medians both forwards sit {side} the threshold ({100 * a.busy:.1f}% on the {gpu_a}, "
                 f"{100 * b.busy:.1f}% on the {gpu_b}): the verdicts differ because of how widely the forward's time "
                 "spreads, not because the share moved")
    elif abs(f) >= abs(k):
        cause = (f"the forward's wall time differs more ({100 * f:+.0f}% on the {gpu_b} against the {gpu_a}) than "
                 f"the GPU's busy time ({100 * k:+.0f}%): the share moved with the forward's length, which is the "
                 "host's time to issue the launches when the GPU waits: the host machine, not the GPU, moved "
                 "the verdict")
    else:
        cause = (f"the GPU's busy time differs more ({100 * k:+.0f}% on the {gpu_b} against the {gpu_a}) than the "
                 f"forward's wall time ({100 * f:+.0f}%): the share moved with the kernels")
    return "; ".join([*parts, cause])


def pace_flips(verdicts: dict[str, dict[str, PaceVerdict]]) -> list[str]:
    """One line per format (and pair of GPUs) whose verdict differs between two GPUs, ``verdicts``:
    ``{gpu: {format: PaceVerdict}}``, each from its own recording, saying why (:func:`pace_flip_reason`); empty
    when every GPU gives each format one verdict."""
    gpus = list(verdicts)
    formats = list(dict.fromkeys(f for g in gpus for f in verdicts[g]))
    out = []
    for f in formats:
        for i, ga in enumerate(gpus):
            for gb in gpus[i + 1:]:
                a, b = verdicts[ga].get(f), verdicts[gb].get(f)
                if a is not None and b is not None and a.verdict != b.verdict:
                    out.append(f"{f}: {a.verdict} on the {ga}, {b.verdict} on the {gb}. Why: "
                               f"{pace_flip_reason(a, b, ga, gb)}.")
    return out


COMPILED_REGION = "Torch-Compiled Region"  # torch.compile's range around each call of a compiled graph


def compiled_regions(trace):
    """Per profiled step: ``regions`` (calls of compiled graphs, the ``Torch-Compiled Region: f/c`` ranges
    torch.compile opens around each, f = frame, c = compile of that frame) and ``distinct`` (how many
    different compiled graphs those calls ran). A graph compiled once and run many times shows as many
    regions of one id. CPU ops of each step's thread, inside its ``ProfilerStep`` range."""
    st = trace.steps()
    if st.empty:
        raise ValueError("trace has no ProfilerStep ranges; expected a trace taken with a profiler schedule")
    ev = trace.events
    reg = ev[(ev["cat"].isin(("cpu_op", "user_annotation"))) & ev["name"].str.startswith(COMPILED_REGION)]
    rows = []
    for s in st.itertuples(index=False):
        mine = reg[(reg["start_us"] >= s.cpu_start_us) & (reg["start_us"] < s.cpu_end_us) & (reg["pid"] == s.pid)]
        rows.append({"step": s.name, "regions": len(mine), "distinct": int(mine["name"].nunique()),
                     "ids": ", ".join(sorted(n.split(":", 1)[-1].strip() for n in set(mine["name"])))})
    return pd.DataFrame(rows)


def elementwise_chain_traffic(n: int, elem_bytes: int, ops: int, fused: bool) -> Traffic:
    """Model of the DRAM traffic of ``ops`` unary elementwise operations on ``n`` elements: eagerly each
    op is its own kernel that reads and writes the whole tensor (``ops`` reads + ``ops`` writes); fused
    into one kernel the input is read once and the result written once. A model, assuming the tensor
    does not stay in L2 between kernels (true when it is much larger than L2)."""
    for name, v in (("n", n), ("elem_bytes", elem_bytes), ("ops", ops)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}; expected a positive int")
    k = 1 if fused else ops
    size = n * elem_bytes
    return Traffic(kernel=f"elementwise x{ops} {'fused' if fused else 'eager'}", bytes_read=k * size,
                   bytes_written=k * size, flops=n * ops,
                   assumptions=f"{'one kernel' if fused else f'{ops} kernels'}, each reading and writing {n} "
                               f"elements of {elem_bytes} B from DRAM (no L2 reuse between kernels)")


# ---------------------------------------------------------------- what a CUDA graph refuses
@dataclass(frozen=True)
class GraphRefusal:
    """One case of :func:`~infralens_lab.measure.overlap.graph_limits` in words: what was done (``done``),
    whether CUDA graphs refused it, why (``why``), and the raw error text as recorded (``raw``; its first
    line), shown only on demand."""

    case: str
    done: str
    refused: bool
    why: str
    raw: str

    @property
    def line(self) -> str:
        """What was done, refused or not, and why: one line."""
        return f"{self.done}: {'refused' if self.refused else 'no error'}. {self.why}"

    def __str__(self) -> str:
        return self.line


# graph_limits' wording when a case did not fail (see measure.overlap.graph_limits)
_NO_ERROR = ("captured without error", "copied a larger input into the static buffer without error")
_SIZES = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


def _host_sync(raw: str, refused: bool) -> tuple[str, str]:
    done = "Captured a step that calls .item() (it reads a GPU value back to the host)"
    if not refused:
        return done, "This GPU's CUDA and torch captured it without complaint, so the host read was not checked here."
    return done, ("While a stream is captured its work is only recorded, not run, so there is no value to read yet: "
                  "the host read is not allowed, it invalidates the capture, and CUDA reports that at the next call "
                  "of the capture.")


def _new_shape(raw: str, refused: bool) -> tuple[str, str]:
    m = _SIZES.search(raw)
    sizes = f" ({m.group(2)} elements into its {m.group(1)}-element static input)" if m else ""
    done = f"Fed a captured graph an input of another shape{sizes}"
    if not refused:
        return done, "The copy went through here; the graph would still replay its recorded shapes."
    return done, ("A graph replays the kernels it recorded on the buffers and shapes it recorded; new data is "
                  "copied into the static input, whose shape is fixed, so another shape needs another capture "
                  "(torch.compile's reduce-overhead mode records one graph per shape).")


GRAPH_CASES = {"host_sync_in_capture": _host_sync, "new_shape": _new_shape}


def graph_refusals(values: dict) -> list[GraphRefusal]:
    """Each case of a ``graph_limits`` record (``{case: raw error or what happened}``) as a
    :class:`GraphRefusal`, in the record's order. An unknown case or a non-text value raises ValueError
    naming what was seen and what is known."""
    if not isinstance(values, dict) or not values:
        raise ValueError(f"graph_limits values {values!r}: expected a non-empty dict {{case: error text}} "
                         f"with cases among {sorted(GRAPH_CASES)}")
    out = []
    for case, raw in values.items():
        if case not in GRAPH_CASES:
            raise ValueError(f"graph_limits case {case!r} is not one this package explains; known: {sorted(GRAPH_CASES)}")
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError(f"graph_limits case {case!r} holds {raw!r}; expected the error text it recorded")
        refused = raw.strip() not in _NO_ERROR
        done, why = GRAPH_CASES[case](raw, refused)
        out.append(GraphRefusal(case, done, refused, why, raw.strip()))
    return out
