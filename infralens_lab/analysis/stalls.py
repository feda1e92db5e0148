"""Warp stall reasons: what each one means, and the usual fix.

Nsight Compute samples, at a fixed interval, the program counter and state of warps on each
SM sub-partition; each sample is charged to one *reason* the warp could not issue an
instruction that cycle (``smsp__pcsamp_warps_issue_stalled_<reason>``). ``selected`` is not
a stall: the warp issued. The share of samples per reason says where warps spend their time;
the dominant reason points at the usual fix. :data:`STALLS` maps each reason to a plain
meaning and fix, the meanings after Nsight Compute's Kernel Profiling Guide (warp scheduler states); :func:`explain` looks one up (bare reason or full metric name);
:func:`dominant` names the largest reason in a stall table such as the one
:func:`infralens_lab.parse.ncu.stall_breakdown` returns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..parse.ncu import stall_metric


@dataclass(frozen=True)
class Stall:
    reason: str
    meaning: str
    fix: str
    is_stall: bool = True


def _s(reason: str, meaning: str, fix: str, is_stall: bool = True) -> tuple[str, Stall]:
    return reason, Stall(reason, meaning, fix, is_stall)


# Meanings paraphrase the Kernel Profiling Guide's warp stall reasons (Nsight Compute docs, ProfilingGuide
# "metrics-reference" / Warp Stall Reasons, and the WarpStateStats rule texts, sections/CPIStall.py): long_scoreboard
# = L1TEX (local, global, surface, texture); short_scoreboard = MIO, not L1TEX (shared memory, MUFU, BRX/JMX);
# mio_throttle = MIO queue full; drain = after EXIT, memory operations outstanding. The guide's pipeline table: the
# LSU pipe issues loads, stores, atomics, reductions and also special register reads (S2R) and shuffles; NVIDIA's
# developer forum: the scheduler hands LSU instructions over through the MIO instruction queue. Which SASS
# instruction a copy's samples sit on: infralens_lab.analysis.sass (ncu's Source page).
STALLS: dict[str, Stall] = dict([
    _s("long_scoreboard", "waiting on a scoreboard dependency on an L1TEX operation (global, local, surface or "
                          "texture memory): the wait for the data of a load, L1 hits included, not only misses to "
                          "L2 or DRAM",
       "fewer or better-coalesced global loads, higher hit rates (data locality), reuse data from shared memory or "
       "registers, keep more loads in flight (more warps or more independent loads per thread); in a memory-bound "
       "kernel this is expected"),
    _s("short_scoreboard", "waiting on a scoreboard dependency on an MIO operation (not L1TEX): shared memory "
                           "mostly, also special math (MUFU: exp, rsqrt...) and dynamic branches",
       "avoid shared-memory bank conflicts, use fewer special-math ops (e.g. exp2 instead of exp), keep values "
       "in registers"),
    _s("barrier", "waiting at a block-wide barrier (__syncthreads / tl barrier) for the other warps of the block",
       "balance work across warps, fewer barriers, smaller blocks so fewer warps wait on each other"),
    _s("lg_throttle", "the local/global memory instruction queue is full",
       "issue fewer, wider memory instructions (vectorised 128-bit loads), avoid register spills to local memory"),
    _s("mio_throttle", "waiting for the MIO (memory input/output) instruction queue to be not full: extreme use "
                       "of the MIO pipes (special math, dynamic branches, shared memory); the LSU's loads, stores "
                       "and special-register reads (S2R) are handed over through the same queue",
       "fewer or wider memory instructions (one 128-bit load instead of four 32-bit ones), fewer shared-memory "
       "accesses or special-math instructions"),
    _s("math_pipe_throttle", "the math pipe this instruction needs (FMA, tensor, FP64...) is busy",
       "expected in a compute-bound kernel; otherwise mix instruction types or use a faster pipe (tensor cores)"),
    _s("tex_throttle", "the texture/L1TEX unit queue is full", "fewer texture or L1TEX operations per cycle; spread them out"),
    _s("wait", "a fixed-latency dependency on the previous instruction (a few cycles)",
       "more independent instructions (ILP) or more warps to hide it; usually small"),
    _s("not_selected", "the warp was ready but another warp was picked this cycle",
       "nothing to fix: the scheduler had more ready warps than it could issue (a sign of enough parallelism)"),
    _s("selected", "the warp issued an instruction (not a stall)", "nothing to fix", is_stall=False),
    _s("no_instruction", "no instruction fetched yet: instruction-cache miss or after a branch",
       "smaller kernels (less unrolling), fewer distinct code paths; common in very short kernels"),
    _s("dispatch_stall", "the dispatcher could not issue the picked instruction (pipeline conflict)",
       "rarely actionable; check for register-bank or pipe conflicts"),
    _s("drain", "after EXIT, waiting for all the warp's memory instructions to complete so its resources can be "
                "freed: many stores issued towards the end of the kernel",
       "store patterns that coalesce (fewer sectors per store), or spread the stores over the kernel"),
    _s("membar", "waiting at a memory fence (membar / fence)", "fewer or narrower fences (block scope instead of GPU scope)"),
    _s("branch_resolving", "waiting for a branch target or the warp's active mask to be computed",
       "fewer divergent branches; predicate instead of branching"),
    _s("sleeping", "the warp is sleeping (nanosleep or waiting at a yield)", "fewer sleeps or spin-waits"),
    _s("misc", "a reason not covered by the others", "look at the source-level counters for that kernel"),
    _s("imc_miss", "waiting on an immediate constant cache miss", "fewer distinct constants; reuse kernel arguments"),
    _s("gmma", "waiting on warpgroup matrix-multiply (Hopper wgmma) resources",
       "expected in a tensor-core-bound kernel; deeper pipelining of wgmma"),
])

def normalize(name: str) -> str:
    """Bare reason from a reason or a metric name, read by ncu's one stall-name grammar
    (:func:`infralens_lab.parse.ncu.stall_metric`): ``smsp__pcsamp_warps_issue_stalled_long_scoreboard``
    -> ``long_scoreboard``; ``no_instructions`` -> ``no_instruction``. A name outside the grammar comes back
    lowered and stripped."""
    if not isinstance(name, str):
        raise TypeError(f"stall reason is {type(name).__name__}; expected a str such as 'long_scoreboard'")
    parts = stall_metric(name)
    return parts["reason"] if parts is not None else name.strip().lower()


def explain(reason: str) -> Stall:
    """The :class:`Stall` (meaning and usual fix) for a reason or metric name; ValueError if unknown."""
    r = normalize(reason)
    if r not in STALLS:
        raise ValueError(f"unknown stall reason {reason!r}; expected one of {sorted(STALLS)}")
    return STALLS[r]


def dominant_item(totals: dict, include_selected: bool = False) -> tuple[str, float]:
    """``(reason, value)`` of the dominant stall in ``{reason: samples or share}`` (reasons normalised,
    values of one reason summed). The package's one rule: ``selected`` (issuing, not a stall) is
    skipped unless ``include_selected``; the largest value wins; ties go to the alphabetically first
    reason. ValueError when nothing is left."""
    acc: dict[str, float] = {}
    for r, v in totals.items():
        if v is None or v != v:
            continue
        r = normalize(r)
        if include_selected or r != "selected":
            acc[r] = acc.get(r, 0.0) + float(v)
    if not acc:
        raise ValueError("stall table is empty; expected at least one reason with a value")
    return sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def dominant(table: Any, include_selected: bool = False) -> str:
    """The reason with the largest share in a stall table (rule: :func:`dominant_item`).

    ``table``: a DataFrame with columns ``reason`` and ``share`` (or ``samples``), or a dict
    ``{reason: share}``. ``selected`` is skipped unless ``include_selected`` (it is issuing,
    not stalling). Raises ValueError on an empty table.
    """
    if isinstance(table, dict):
        items = list(table.items())
    else:
        cols = list(getattr(table, "columns", []))
        if "reason" not in cols:
            raise ValueError(f"stall table has columns {cols}; expected 'reason' and 'share' (or 'samples')")
        value = "share" if "share" in cols else "samples" if "samples" in cols else None
        if value is None:
            raise ValueError(f"stall table has columns {cols}; expected a 'share' or 'samples' column")
        items = list(zip(table["reason"], table[value], strict=True))
    totals: dict[str, float] = {}
    for r, v in items:
        if v is not None and v == v:
            totals[normalize(r)] = totals.get(normalize(r), 0.0) + float(v)
    return dominant_item(totals, include_selected)[0]


def card(table: Any) -> str:
    """Two lines: the dominant stall, its share if known, what it means and the usual fix."""
    r = dominant(table)
    s = STALLS.get(r)
    if s is None:
        return f"dominant stall: {r} (no explanation on file)"
    share = ""
    if isinstance(table, dict):
        share = f" ({table.get(r, 0):.0%} of samples)" if r in table else ""
    elif "share" in getattr(table, "columns", []):
        vals = [v for rr, v in zip(table["reason"], table["share"], strict=True) if normalize(rr) == r]
        share = f" ({vals[0]:.0%} of samples)" if vals else ""
    return f"dominant stall: {r}{share} - {s.meaning}\nusual fix: {s.fix}"
