"""The sentences of a timeline investigation (lab 01), written from the tables the lab shows, by rules a test pins.

* :func:`range_notes`: each phase's CPU time against the GPU time of the work it launched (a factor of 2 either
  way is the rule: the CPU only queues, or the CPU holds the step while the GPU gets little from it).
* :func:`bottleneck_statement`: where the time goes (busy share, idle gaps and their main cause, the Amdahl
  bound), what the bundled fix bought against it, the hot kernel to hand to Nsight Compute, the next lever
  bounded with both floors (:func:`infralens_lab.analysis.overlap.step_bound`), and why the hot kernel takes its
  time (speed of light read by the series' one rule, :func:`infralens_lab.analysis.roofline.sol_verdict`, at the
  SM clock ncu saw).

Inputs are the DataFrames of :func:`infralens_lab.analysis.joins.trace_comparison`,
:func:`infralens_lab.parse.trace.idle_by_cause`, :func:`infralens_lab.present.trace_tables.ranges_view` and
``hot_kernels`` (plain frames: nothing here reads a trace). Times in ms unless a name says ``_us``.
"""
from __future__ import annotations

import pandas as pd

from .roofline import sol_verdict
from .stalls import explain

PHASES = ("data", "forward", "backward", "optimizer", "log")  # the pipeline's ranges a note speaks of
FACTOR = 2.0  # a phase's CPU and GPU times differ when one is more than FACTOR times the other
MIN_CPU_MS = 0.1  # below this a phase's CPU time is too small to call it a holder of the CPU


def range_notes(ranges: pd.DataFrame, version: str) -> list[str]:
    """Sentences comparing each phase's CPU time per step with the GPU time of the work it launched, from a
    ``ranges_view(tr, with_times=True)`` table (``range, cpu_ms_per_step, gpu_ms_per_step``); a table without
    times (a CPU-only trace) gets one sentence saying there is no GPU side."""
    if "gpu_ms_per_step" not in ranges.columns:
        return [f"{version}: CPU-only trace, so there is no GPU time to hold the ranges against."]
    out = []
    for row in ranges.itertuples(index=False):
        if row.range not in PHASES:
            continue
        if row.gpu_ms_per_step > FACTOR * row.cpu_ms_per_step:
            out.append(f"{version}: '{row.range}' takes {row.cpu_ms_per_step:.1f} ms of CPU time per step but launches "
                       f"{row.gpu_ms_per_step:.1f} ms of GPU work: the CPU only queues it and runs ahead.")
        elif row.cpu_ms_per_step > FACTOR * row.gpu_ms_per_step and row.cpu_ms_per_step >= MIN_CPU_MS:
            out.append(f"{version}: '{row.range}' holds the CPU for {row.cpu_ms_per_step:.1f} ms per step for "
                       f"{row.gpu_ms_per_step:.1f} ms of GPU work: the CPU waits (or works) here while the GPU "
                       f"gets little new from it.")
    return out or [f"{version}: every phase's CPU time is within a factor {FACTOR:g} of the GPU work it launched."]


def _meaning(reason: str) -> str:
    try:
        return explain(reason).meaning
    except ValueError:
        return "no explanation on file"


def lever_outcome(lever, name: str, base_period_ms: float, period_ms: float, cpu_ms: float | None = None,
                  plain_speedup: float | None = None, basis: str = "traced", traced_speedup: float | None = None,
                  spread: tuple[float, float] | None = None) -> str:
    """A sentence holding a measured fix against its :class:`~infralens_lab.analysis.overlap.StepBound`, both on one
    ``basis`` (``"traced"``: profiled periods and a CPU floor measured under the profiler; any other words name an
    untraced basis, whose CPU floor is an estimate): the speed-up ``base_period_ms / period_ms``; within the
    bound, the share of the possible gain it took; past it, which floor failed: every floor above the measured
    period (``cpu_ms``: the fixed step's own CPU time per step, on the traced basis). ``plain_speedup``: the same
    steps without the profiler (traced basis); ``traced_speedup``: the same steps under it (untraced basis);
    ``spread``: ``(low, high)`` of the speed-up from its runs' p10-p90 (:func:`infralens_lab.stats.ratio_range`),
    which says when the bound lies inside the noise."""
    s = base_period_ms / period_ms
    traced = basis == "traced"
    noise = ""
    if spread is not None:
        lo, hi = spread
        noise = f"; p10-p90 {lo:.2f}-{hi:.2f}x" + (", the bound inside it" if lo <= lever.bound <= hi else "")
    head = f"Measured, {name} gave {s:.2f}x ({period_ms:.1f} ms per step, {basis}{noise})"
    plain = f" Without the profiler (steps back to back) it gave {plain_speedup:.2f}x." if plain_speedup else ""
    if traced_speedup:
        plain += (f" Under the profiler the same steps gave {traced_speedup:.2f}x: its CPU cost per op hides the gain "
                  "once the CPU sets the pace.")
    if s <= lever.bound:
        share = 100 * (s - 1) / (lever.bound - 1) if lever.bound > 1 else float("nan")
        return f"{head}: within the bound, {share:.0f}% of the possible gain.{plain}"
    failed = []
    if lever.cpu_floor_ms > period_ms and traced:
        own = (f", and so does the {name} step's own CPU time under the profiler ({cpu_ms:.1f} ms)"
               if cpu_ms is not None and cpu_ms > period_ms else "")
        failed.append(f"the CPU floor ({lever.cpu_floor_ms:.1f} ms, CPU time per step measured under the profiler) "
                      f"sits above the measured period{own}: CPU time measured under the profiler is not a hard floor")
    elif lever.cpu_floor_ms > period_ms:
        failed.append(f"the CPU floor ({lever.cpu_floor_ms:.1f} ms, estimated from the profiled CPU time and the "
                      "profiler's measured factor) sits above the measured period: the estimate was too high")
    if lever.gpu_floor_ms > period_ms:
        failed.append(f"the GPU floor ({lever.gpu_floor_ms:.1f} ms) sits above the measured period: kernels the bound "
                      "held fixed got faster too")
    return f"{head}: past the bound, so a floor it assumed did not hold: " + "; ".join(failed) + "." + plain


def bottleneck_statement(cmp: pd.DataFrame, causes: pd.DataFrame, hot: pd.DataFrame | None = None,
                         counters: dict | None = None, lever=None, lever_name: str = "TF32",
                         measured: dict | None = None, gpu: str | None = None, lever_basis: str | None = None,
                         counters_gpu: str | None = None) -> str:
    """The bottleneck statement, every number taken from the tables passed in: ``cmp`` (rows ``bubble`` and
    ``fixed``), ``causes``, ``hot`` (kernels by GPU time), ``counters`` (the hot kernel's speed of light:
    ``sm_pct``, ``memory_pct``, optional ``dominant_stall`` and ``sm_clock_ghz``) and ``lever`` (a
    :class:`~infralens_lab.analysis.overlap.StepBound` of the next fix, named ``lever_name``, on ``lever_basis``
    when given: words saying which runs its floors come from); ``measured``: the fix as measured, the keyword
    arguments of :func:`lever_outcome`, which then says whether the bound held. ``gpu``: the one GPU every number
    of the statement was measured on, named in its first words; ``counters_gpu``: the GPU that ran the counters,
    which must be ``gpu`` (one statement, one GPU: a ValueError names both otherwise)."""
    if counters and gpu and counters_gpu and counters_gpu != gpu:
        raise ValueError(f"bottleneck_statement: counters from {counters_gpu!r}, every other number from {gpu!r}; "
                         "expected one GPU (pass that GPU's own counters, or none)")
    b = cmp.set_index("version").loc["bubble"]
    f = cmp.set_index("version").loc["fixed"]
    top, bound, r = causes.iloc[0], 100 / b["gpu_util_pct"], b["period_ms"] / f["period_ms"]
    lines = [
        (f"On {gpu}: w" if gpu else "W") + f"here time goes: in the bubble step the GPU is busy {b['gpu_util_pct']:.0f}% of each "
        f"{b['period_ms']:.1f} ms step; {b['idle_ms_per_step']:.1f} ms per step sit in idle gaps over 50 µs, "
        f"{100 * top['share']:.0f}% of that idle time while the CPU was in '{top['cause']}' work. Removing all "
        f"idle time could make the step at most {bound:.2f}x faster (Amdahl).",
        f"The fixed version (three edits at once: batches prepared ahead into pinned memory, "
        f"non-blocking copies, no per-step .item()) takes {f['period_ms']:.1f} ms per step: {r:.2f}x, "
        f"{100 * (r - 1):.0f}% more steps per second, {100 * (r - 1) / (bound - 1):.0f}% of the possible gain, with "
        f"the GPU busy {f['gpu_util_pct']:.0f}% of the time. Which edit bought what is the one-change table's question.",
    ]
    if hot is not None and len(hot):
        h = hot.iloc[0]
        lines.append(f"What is left is GPU work: the hottest kernel ({h['kernel']}) takes {h['pct_of_kernel_time']:.0f}% "
                     f"of kernel time, so it is the one to hand to Nsight Compute.")
    if lever is not None:
        floor = "the CPU's time per step" if lever.limited_by == "cpu" else "the GPU work left"
        lines.append(f"The next lever, {lever_name}, {'was' if measured else 'is'} bounded at {lever.bound:.2f}x with both "
                     f"floors: the GPU work left ({lever.gpu_floor_ms:.1f} ms) and the CPU's time per step "
                     f"({lever.cpu_floor_ms:.1f} ms); {floor} decides (the GPU floor alone would allow {lever.gpu_only:.1f}x)"
                     + (f"; {lever_basis}." if lever_basis else ".")
                     + (" " + lever_outcome(lever, lever_name, **measured) if measured else ""))
    if counters:
        c = counters
        ghz = c.get("sm_clock_ghz")
        clock = f" at an SM clock of {ghz:.2f} GHz" if ghz is not None and ghz == ghz else ""
        lines.append(f"Why it takes that long: its speed of light ({c['memory_pct']:.0f}% of peak memory throughput, "
                     f"{c['sm_pct']:.0f}% of SM throughput{clock}) reads {sol_verdict(c['sm_pct'], c['memory_pct'])}"
                     + (f"; besides issuing, its sampled warps are most often in '{c['dominant_stall']}' "
                        f"({_meaning(c['dominant_stall'])})." if c.get("dominant_stall") else "."))
    return "\n".join(lines)


__all__ = ["FACTOR", "PHASES", "bottleneck_statement", "lever_outcome", "range_notes"]
