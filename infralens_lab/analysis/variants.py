"""The pipeline variants, one change at a time: a profiled trace reduced to the few numbers a table needs,
and the tables lab 01 reads from the ``pipeline_variants`` record.

:func:`trace_digest` keeps, per variant, the numbers of :func:`~infralens_lab.analysis.joins.trace_comparison`
(period, GPU busy share, idle gaps over 50 µs) and the top kernels by GPU time, not the trace itself.
:func:`one_change_table` and :func:`precision_table` join those digests with the wall-clock step times
and the bounds: Amdahl's for a fix that only removes idle time (:func:`infralens_lab.analysis.overlap.amdahl`),
both floors for a fix that speeds up GPU work (:func:`infralens_lab.analysis.overlap.step_bound`: the GPU work
left and the CPU's time per step). Kernel kinds are read from kernel names (:data:`FP32_GEMM`,
:data:`TENSOR_CORE`): cuBLAS and CUTLASS spell their instruction path into the name. :func:`same_work` says
whether a record's prefetching variants did the baseline's work (tokenized every batch, in worker processes)
or predate that (a ring of 4 batches recycled, the tokenizer skipped). Times: ``_ms`` milliseconds,
``_us`` microseconds, ``_pct`` percent.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from ..errors import InfraLensError
from ..parse.trace import LAUNCH_CALLS, RUNTIME_CATS, step_gpu_work
from ..stats import Spread, ratio_range
from .joins import idle_budget, trace_comparison
from .overlap import amdahl, host_bound, step_bound

FP32_GEMM = "sgemm|ffma"  # kernel-name marks of fp32 matmuls on the CUDA cores (SIMT FMAs, no tensor cores)
# kernel-name marks of tensor-core kernels (GEMMs, and attention kernels built on them): TF32/half inputs in
# cuBLAS/CUTLASS names, Hopper's gmma and cuBLASLt's nvjet kernels, Ampere-style mma shapes (s1688, h16816...)
TENSOR_CORE = r"tf32|bf16|f16|tensorop|gmma|nvjet|hmma|[sh]1688|[sh]16816|[sh]884"
TOP = 5
SINGLE_CHANGES = ("bubble+prefetch", "bubble+pinned", "bubble+no_sync")  # one edit each, from the bubble
RECORD = "pipeline_variants"
PRECISIONS = ("fixed", "fixed+tf32", "fixed+bf16")  # the fixed step and its precision variants, one change each
SYNCED_SKIP = 10  # the recorder's warm-up steps left out of the synced percentiles (Recorder.step_variants(skip=10))
# What the recorder would need for an untraced CPU floor of its own (issue 37.3): the untraced CPU floor of a step
# the GPU paces is hidden behind the GPU; only its issue time, timed without waiting, shows it.
RECORDER_NEEDS = ("per variant, `cpu_issue_ms`: the CPU's time to issue a few steps without the profiler and without "
                  "waiting (perf_counter around step() calls right after a synchronize, divided by the steps; the "
                  "`launch_overhead` record of lab 05 times its steps this way)")
SAME_WORK = "prefetch_same_work"  # the record's flag: prefetching variants tokenized every batch, in workers


def kernel_kind(name: str) -> str:
    """``'fp32 SIMT GEMM'``, ``'tensor-core kernel'`` or ``'other'``, read from a kernel's name (fp32 marks
    first: ``..._f32f32_..._ffma_...`` is SIMT). A name is a claim of the library that built the kernel, not a
    counter: ncu's ``sm__inst_executed_pipe_tensor`` is the measurement that settles it."""
    n = name.lower()
    if re.search(FP32_GEMM, n):
        return "fp32 SIMT GEMM"
    if re.search(TENSOR_CORE, n):
        return "tensor-core kernel"
    return "other"


def trace_digest(tr, top: int = TOP, min_gap_us: float = 50.0) -> dict:
    """The summary of one profiled variant (a :class:`~infralens_lab.parse.trace.Trace`), JSON-shaped:
    ``period_ms``, ``cpu_step_ms``, ``gpu_work_ms``, ``gpu_busy_pct`` (GPU busy share of the profiled window),
    ``idle_ms_per_step`` (gaps over ``min_gap_us``) and ``idle_under_ms`` (shorter gaps), from
    :func:`trace_comparison` and :func:`idle_budget`; ``fp32_gemm_pct`` and
    ``tensor_core_pct`` (shares of kernel time by :func:`kernel_kind`); ``top_kernels``: the ``top`` kernels by
    GPU time (name, kind, count, total_us, pct). A CPU-only trace keeps ``cpu_step_ms`` and a ``note``."""
    s = tr.summary(min_gap_us)
    out = {"steps": s["steps"], "cpu_step_ms": s["mean_step_us"] / 1e3 if s["mean_step_us"] is not None else None,
           "has_gpu": bool(tr.has_gpu)}
    if not tr.has_gpu:
        out["note"] = s.get("note", "CPU-only trace: no kernels")
        return out
    row = trace_comparison({"v": tr}).iloc[0]
    b = idle_budget(tr, min_gap_us)
    k = tr.kernels()
    kind = k["name"].map(kernel_kind)
    w = step_gpu_work(tr)
    ev = tr.events
    calls = ev[ev["cat"].isin(RUNTIME_CATS) & ev["name"].isin(LAUNCH_CALLS)]
    mine = calls[calls["start_us"].between(w["cpu_start_us"].min(), w["cpu_end_us"].max())]
    out.update({"launch_calls_per_step": float(w["launch_calls"].mean()),
                "launch_call_us": float(mine["dur"].mean()) if len(mine) else None})
    out.update({"period_ms": float(row["period_ms"]), "gpu_work_ms": float(row["gpu_work_ms"]),
                "gpu_busy_pct": float(row["gpu_util_pct"]), "idle_ms_per_step": float(row["idle_ms_per_step"]),
                "idle_under_ms": b["idle_under_ms"], "min_gap_us": float(min_gap_us),
                "fp32_gemm_pct": float(k.loc[kind == "fp32 SIMT GEMM", "pct"].sum()),
                "tensor_core_pct": float(k.loc[kind == "tensor-core kernel", "pct"].sum()),
                "top_kernels": [{"name": r.name, "kind": kernel_kind(r.name), "count": int(r.count),
                                 "total_us": float(r.total_us), "pct": float(r.pct)}
                                for r in k.head(top).itertuples(index=False)]})
    return out


def _rows(values: dict, names) -> list[tuple[str, dict]]:
    missing = [n for n in names if n not in values.get("variants", {})]
    if missing:
        raise ValueError(f"record {RECORD}: variants {missing} missing; it has {sorted(values.get('variants', {}))}")
    return [(n, values["variants"][n]) for n in names]


def one_change_table(values: dict, names=("bubble", *SINGLE_CHANGES, "fixed")) -> pd.DataFrame:
    """One row per variant of the ``pipeline_variants`` record: ``variant``, ``kind`` (``baseline``, ``one change``:
    one of :data:`SINGLE_CHANGES`, or ``bundle``), ``changed``, ``period_ms`` (trace),
    ``step_ms`` (wall clock, steps back to back), ``speedup`` (bubble's period / this period), ``gpu_busy_pct``,
    ``idle_ms_per_step`` (gaps over 50 µs), ``amdahl_bound``: 1 / the bubble's GPU busy share, the most
    any change that only removes idle time can give (the same for every row), and ``spread_pct``: (p90 - p10) /
    median of the variant's synced step times, what a change must beat to count; ``median_ms`` (the median of
    those synced steps, no profiler) and ``gpu_work_ms`` (the GPU work each traced step launched)."""
    rows = _rows(values, names)
    base = dict(rows)[names[0]]["trace"]
    if not base.get("has_gpu"):
        raise ValueError(f"record {RECORD}: the {names[0]} trace has no GPU side, so it has no period to compare")
    bound = amdahl(1 - base["gpu_busy_pct"] / 100)
    out = []
    for n, v in rows:
        t = v["trace"]
        kind = "baseline" if n == names[0] else "one change" if n in SINGLE_CHANGES else "bundle"
        out.append({"variant": n, "kind": kind, "changed": v["changed"], "period_ms": t["period_ms"],
                    "step_ms": v["timing"]["throughput_ms_per_step"], "speedup": base["period_ms"] / t["period_ms"],
                    "gpu_busy_pct": t["gpu_busy_pct"], "idle_ms_per_step": t["idle_ms_per_step"],
                    "amdahl_bound": bound, "spread_pct": _spread_pct(v["timing"]),
                    "median_ms": v["timing"].get("median_ms", math.nan), "gpu_work_ms": t.get("gpu_work_ms", math.nan)})
    return pd.DataFrame(out)


def _spread_pct(timing: dict) -> float:
    """(p90 - p10) / median of the synced step times, percent (NaN when the record has no percentiles)."""
    try:
        return 100 * (timing["p90_ms"] - timing["p10_ms"]) / timing["median_ms"]
    except (KeyError, TypeError, ZeroDivisionError):
        return float("nan")


NOISE_FLOOR_PCT = 2.0  # below this a change is never called an effect, whatever the recorded spread says


def _halves(spread_pct: float, base_spread_pct: float) -> list[float]:
    """The half-widths of the two runs' p10-p90 bands, percent; a NaN width (no percentiles for that run) is left out."""
    return [w / 2 for w in (spread_pct, base_spread_pct) if w == w]


def noise_pct(spread_pct: float, base_spread_pct: float = float("nan")) -> float:
    """The run-to-run noise two runs are compared against, percent: the sum of their half-widths (``spread_pct``
    and ``base_spread_pct`` are p10-p90 widths over the median; NaN: no percentiles for that run), at least
    :data:`NOISE_FLOOR_PCT`."""
    return max(NOISE_FLOOR_PCT, sum(_halves(spread_pct, base_spread_pct)))


def within_spread(speedup: float, spread_pct: float, base_spread_pct: float = float("nan")) -> bool:
    """True when a speed-up (base time / this time) is inside the run-to-run spread, :func:`noise_pct`: the two
    runs' p10-p90 bands overlap, so they cannot be told apart. The rule :func:`effect_words` words."""
    return abs(100 * (speedup - 1)) < noise_pct(spread_pct, base_spread_pct)


def effect_words(speedup: float, spread_pct: float, base_spread_pct: float = float("nan")) -> str:
    """Words sized to a measured speed-up against the run-to-run spread. ``spread_pct`` (this run) and
    ``base_spread_pct`` (the run it is compared with) are p10-p90 widths as a share of the median
    ((p90 - p10) / median), so each run spreads ± half of its width around its median. Two runs cannot be told
    apart while their bands overlap: a change within the sum of the two half-widths (at least
    :data:`NOISE_FLOOR_PCT`) is "no change beyond the run-to-run spread"; else "x% faster" / "x% slower" (the
    percentage is the claim)."""
    halves = _halves(spread_pct, base_spread_pct)
    pct = 100 * (speedup - 1)
    if within_spread(speedup, spread_pct, base_spread_pct):
        bands = " and ".join(f"±{h:.1f}%" for h in halves) or f"±{NOISE_FLOOR_PCT:.1f}%"
        why = ("the p10-p90 bands overlap" if sum(halves) >= NOISE_FLOOR_PCT else
               f"under the {NOISE_FLOOR_PCT:g}% floor below which no change counts")
        return f"no change beyond the run-to-run spread ({pct:+.1f}% against {bands}: {why})"
    return f"{pct:.0f}% faster" if pct > 0 else f"{-pct:.0f}% slower"


def one_change_notes(table: pd.DataFrame) -> list[str]:
    """Sentences from :func:`one_change_table`: each single change's effect (sized by :func:`effect_words`)
    and its share of what the bundled fix bought, then whether the single gains add up to the bundle's (within
    10%), overlap (more) or need each other (less)."""
    t = table.set_index("variant")
    b, f = t.iloc[0], t.loc["fixed"]
    bundle = b["period_ms"] - f["period_ms"]
    out, gains = [], []
    for name, r in t.iterrows():
        if name in (t.index[0], "fixed"):
            continue
        got = b["period_ms"] - r["period_ms"]
        gains.append(got)
        share = f", {100 * got / bundle:.0f}% of the {bundle:.1f} ms per step the three edits bought together" \
            if bundle > 0 else ""
        out.append(f"{name}, {r['changed']}: {r['period_ms']:.1f} ms per step, "
                   f"{effect_words(r['speedup'], r['spread_pct'], b['spread_pct'])}{share}; GPU busy {r['gpu_busy_pct']:.0f}%.")
    total = sum(gains)
    how = ("more than the bundle: the edits overlap, removing parts of the same idle time" if total > 1.1 * bundle
           else "less than the bundle: an edit pays off only once another is in" if total < 0.9 * bundle
           else "about the bundle's: here the edits add up")
    out.append(f"fixed (all three): {f['speedup']:.2f}x against the Amdahl bound {f['amdahl_bound']:.2f}x. The single "
               f"changes together bought {total:.1f} ms per step against {bundle:.1f} ms for the bundle, {how}.")
    return out


def baseline_notes(traced: pd.DataFrame, table: pd.DataFrame, names=("bubble", "fixed")) -> list[str]:
    """Sentences holding the trace run (``traced``: :func:`~infralens_lab.analysis.joins.trace_comparison` rows
    ``version, period_ms, gpu_work_ms, idle_ms_per_step``) against the one-change run (:func:`one_change_table`)
    for the same versions: each pair of periods judged by :func:`within_spread` (the one-change run's spread; the
    trace run's three steps have no percentiles), the bundle's gain against each baseline, where the baselines'
    difference sits (idle gaps or GPU work, whichever moved more) and the untraced median of the one-change run's
    baseline, with the traced period it is nearer to."""
    tr, one = traced.set_index("version"), table.set_index("variant")
    out = []
    for n in names:
        p0, p1, w = tr.loc[n, "period_ms"], one.loc[n, "period_ms"], one.loc[n, "spread_pct"]
        verdict = ("the same step twice" if within_spread(p0 / p1, w) else
                   f"beyond the run-to-run spread (±{noise_pct(w):.1f}%: half the one-change run's p10-p90 width, "
                   f"at least {NOISE_FLOOR_PCT:g}%; the trace run's three steps have no spread of their own)")
        out.append(f"{n}: {p1:.1f} ms per step in the one-change run against {p0:.1f} ms in the trace run, "
                   f"{effect_words(p0 / p1, w)}; {verdict}.")
    b, f = names
    r0, r1 = tr.loc[b, "period_ms"] / tr.loc[f, "period_ms"], one.loc[b, "period_ms"] / one.loc[f, "period_ms"]
    same = within_spread(tr.loc[b, "period_ms"] / one.loc[b, "period_ms"], one.loc[b, "spread_pct"])
    out.append(f"So {f} reads {r0:.2f}x against the trace run's {b} and {r1:.2f}x against the one-change run's: "
               + ("the same gain within the spread." if same else
                  "two gains from two baselines that differ beyond the spread; compare rows within one table."))
    d = tr.loc[b, "period_ms"] - one.loc[b, "period_ms"]
    di = tr.loc[b, "idle_ms_per_step"] - one.loc[b, "idle_ms_per_step"]
    dg = tr.loc[b, "gpu_work_ms"] - one.loc[b, "gpu_work_ms"]
    where = ("idle time (the CPU's work between the GPU's steps), not GPU work" if abs(di) >= abs(dg) else
             "GPU work, not idle time")
    out.append(f"Of the {d:+.1f} ms between the two {b} periods, idle gaps over 50 µs account for {di:+.1f} ms "
               f"({tr.loc[b, 'idle_ms_per_step']:.1f} against {one.loc[b, 'idle_ms_per_step']:.1f} ms per step) and GPU "
               f"work for {dg:+.1f} ms ({tr.loc[b, 'gpu_work_ms']:.1f} against {one.loc[b, 'gpu_work_ms']:.1f}): the "
               f"difference is {where}.")
    m = one.loc[b, "median_ms"]
    if m == m:
        near = "the trace run's" if abs(m - tr.loc[b, "period_ms"]) < abs(m - one.loc[b, "period_ms"]) else "its own run's"
        out.append(f"Both periods are traced. Without the profiler the one-change run's {b} steps took {m:.1f} ms "
                   f"(synced median): nearer {near} traced period ({tr.loc[b, 'period_ms']:.1f} against "
                   f"{one.loc[b, 'period_ms']:.1f} ms).")
    return out


def expectation_notes(table: pd.DataFrame, name: str, base: str = "bubble") -> list[str]:
    """Whether the expectation "``name`` is no change from ``base``" held, by :func:`within_spread` (both runs'
    spreads), on both readings of :func:`one_change_table`: the traced periods (three profiled steps) and the
    synced medians without the profiler (the steps the spread is measured on); the last sentence says whether it
    held on both, failed on both, or the two readings disagree."""
    t = table.set_index("variant")
    r, b, ws = t.loc[name], t.loc[base], (t.loc[name, "spread_pct"], t.loc[base, "spread_pct"])
    held = []
    out = [f"Expected: {name} within the run-to-run spread of {base}."]
    for what, x, y in (("Traced period", r["period_ms"], b["period_ms"]),
                       ("Untraced, synced median", r["median_ms"], b["median_ms"])):
        if x != x or y != y:
            continue
        ok = within_spread(y / x, *ws)
        held.append(ok)
        out.append(f"{what}: {x:.1f} against {y:.1f} ms, {effect_words(y / x, *ws)}: the expectation "
                   f"{'held' if ok else 'failed'} there.")
    if held and all(held):
        out.append(f"It held on every reading: {name} on its own buys nothing measurable.")
    elif held and not any(held):
        out.append(f"It failed on every reading: {name} on its own changes the step beyond the spread.")
    elif held:
        out.append("The two readings disagree, so this recording does not settle it: the traced period is three "
                   "steps with no spread of its own, the synced medians many steps with theirs.")
    return out


def precision_table(values: dict, ceilings: dict | None = None,
                    names=("fixed", "fixed+tf32", "fixed+bf16")) -> pd.DataFrame:
    """fixed vs its precision variants: ``variant, period_ms, speedup`` (fixed's period / this one, both traced),
    ``step_ms`` (wall clock, no profiler, steps back to back), ``gpu_busy_pct``, ``cpu_step_ms`` (CPU time in the
    step range: once the GPU work shrinks below it, the CPU sets the pace), ``fp32_gemm_pct`` and
    ``tensor_core_pct`` of kernel time, ``top_kernel`` (its whole name), ``top_kind``, ``mean_loss`` (over every step
    the recorder ran: same data and steps, so the precisions' losses compare), and, with ``ceilings``
    (``{dtype: TFLOP/s}``, the recorded 8192³ matmul rates), the bound of each precision change with both floors
    (:func:`~infralens_lab.analysis.overlap.step_bound` on fixed's period, GPU busy time and CPU time per step, its
    fp32-GEMM share of kernel time run at ``ceiling / fp32 ceiling``): ``bound``, ``gpu_floor_ms``,
    ``cpu_floor_ms``, ``limited_by``, and ``gpu_only_bound`` (the GPU floor alone, which Amdahl gives); NaN on the
    baseline row, which is no change."""
    rows = _rows(values, names)
    base = dict(rows)[names[0]]["trace"]
    out = []
    for n, v in rows:
        t, prec = v["trace"], v["precision"]
        top = t["top_kernels"][0] if t.get("top_kernels") else {"name": "", "kind": ""}
        r = {"variant": n, "period_ms": t["period_ms"], "speedup": base["period_ms"] / t["period_ms"],
             "step_ms": v.get("timing", {}).get("throughput_ms_per_step", math.nan),
             "gpu_busy_pct": t["gpu_busy_pct"], "cpu_step_ms": t["cpu_step_ms"],
             "fp32_gemm_pct": t["fp32_gemm_pct"], "tensor_core_pct": t["tensor_core_pct"],
             "top_kernel": top["name"], "top_kind": top["kind"], "mean_loss": v.get("mean_loss", math.nan)}
        if ceilings and prec in ceilings and "fp32" in ceilings and n != names[0]:
            b = fix_bound(base, base["fp32_gemm_pct"] / 100, max(ceilings[prec] / ceilings["fp32"], 1.0))
            r.update(bound=b.bound, gpu_floor_ms=b.gpu_floor_ms, cpu_floor_ms=b.cpu_floor_ms, limited_by=b.limited_by,
                     gpu_only_bound=b.gpu_only)
        out.append(r)
    return pd.DataFrame(out)


def fix_inputs(digest: dict, fraction: float, speedup: float) -> dict:
    """The inputs of :func:`~infralens_lab.analysis.overlap.step_bound` for a fix of the step a trace digest
    describes: ``period_ms``, ``gpu_ms`` (GPU busy time per step: busy share x period), ``cpu_ms`` (CPU time in the
    step range), ``fraction`` of the GPU work the fix speeds up and its ``speedup``."""
    return {"period_ms": float(digest["period_ms"]), "gpu_ms": float(digest["gpu_busy_pct"] * digest["period_ms"] / 100),
            "cpu_ms": float(digest["cpu_step_ms"]), "fraction": float(fraction), "speedup": float(speedup)}


def fix_bound(digest: dict, fraction: float, speedup: float):
    """:func:`~infralens_lab.analysis.overlap.step_bound` on :func:`fix_inputs`."""
    return step_bound(**fix_inputs(digest, fraction, speedup))


class UntracedFloorMissing(InfraLensError, ValueError):
    """No untraced CPU floor can be built from a ``pipeline_variants`` record (see :data:`RECORDER_NEEDS`)."""


def profiler_overhead(values: dict, names=PRECISIONS) -> pd.DataFrame:
    """The profiler's measured cost, profiled against untraced runs of the same config, one row per variant:
    ``traced_period_ms`` (the three profiled steps), ``step_ms`` (the same config back to back, no profiler),
    ``period_x`` = traced / untraced period; ``traced_cpu_ms`` (CPU time in the profiled step range),
    ``gpu_work_ms`` (GPU time of the kernels a step launched, timed on the GPU), ``host_bound``
    (:func:`~infralens_lab.analysis.overlap.host_bound` of ``gpu_work_ms / step_ms``: untraced, the GPU works under
    half the step, so the step's time is the CPU's time per step) and ``cpu_x`` = ``traced_cpu_ms / step_ms``,
    the profiler's factor on the CPU's time per step, measured only where the step is host-bound untraced (NaN
    elsewhere: there the GPU hides the CPU's untraced time)."""
    rows = []
    for n, v in _rows(values, names):
        t, step = v["trace"], v.get("timing", {}).get("throughput_ms_per_step")
        if not (isinstance(step, (int, float)) and step > 0):
            raise ValueError(f"record {RECORD}: {n} has timing.throughput_ms_per_step={step!r}; expected the "
                             "untraced back-to-back step time in ms (> 0)")
        hb = host_bound(min(t["gpu_work_ms"] / step, 1.0))
        rows.append({"variant": n, "traced_period_ms": t["period_ms"], "step_ms": step,
                     "period_x": t["period_ms"] / step, "traced_cpu_ms": t["cpu_step_ms"], "gpu_work_ms": t["gpu_work_ms"],
                     "host_bound": hb, "cpu_x": t["cpu_step_ms"] / step if hb else math.nan})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class UntracedFix:
    """A fix of the fixed step bounded on the untraced basis. ``inputs``: the keyword arguments of
    :func:`~infralens_lab.analysis.overlap.step_bound` (``period_ms``: the base step back to back without the
    profiler; ``gpu_ms``: its GPU busy time per step, timed on the GPU; ``cpu_ms``: the CPU floor, estimated as
    ``cpu_traced_ms / cpu_x``; ``fraction``, ``speedup``). ``cpu_x`` is the profiler's factor on the CPU's time per
    step, measured on ``cpu_x_from`` (another precision of the same step, host-bound untraced); ``period_x``: the
    base step's traced period over its untraced one (the profiler's cost where the GPU sets the pace)."""

    inputs: dict
    variant: str
    cpu_traced_ms: float
    cpu_x: float
    cpu_x_from: str
    period_x: float
    cpu_x_spread: Spread  # the synced steps of cpu_x_from: the noise around the back-to-back time cpu_x divides by

    def lines(self) -> list[str]:
        """Where each input comes from, one line each (ms)."""
        i = self.inputs
        return [f"period_ms = {i['period_ms']:.3f}: the fixed step back to back, no profiler",
                f"gpu_ms    = {i['gpu_ms']:.3f}: its GPU busy time per step (kernel times are taken on the GPU; traced "
                f"{self.period_x:.3f}x its untraced period: the profiler does not stretch the GPU-paced step)",
                f"cpu_ms    = {i['cpu_ms']:.3f}: its CPU time per step under the profiler, {self.cpu_traced_ms:.3f}, over "
                f"{self.cpu_x:.3f}, the profiler's factor on the CPU's time per step measured on {self.cpu_x_from} "
                f"(whose synced steps spread {100 * self.cpu_x_spread.rel:.0f}% p10-p90; an estimate: untraced, the GPU "
                "hides the fixed step's CPU time)",
                f"fraction  = {i['fraction']:.3f}: the fp32 GEMMs' share of its kernel time",
                f"speedup   = {i['speedup']:.3f}: the {self.variant.split('+')[-1]} / fp32 matmul ceilings"]


def untraced_fix(values: dict, ceilings: dict, variant: str = "fixed+tf32", base: str = "fixed") -> UntracedFix:
    """The bound's inputs for ``variant`` (a precision change of ``base``) on the untraced basis, the basis of the
    speed-up it bounds (back-to-back steps without the profiler): ``ceilings`` is ``{dtype: TFLOP/s}`` (the recorded
    8192³ matmul rates). The CPU floor is ``base``'s profiled CPU time per step over the profiler's factor
    ``cpu_x`` (:func:`profiler_overhead`), the largest measured on the record's other precision variants that are
    host-bound untraced (never on ``variant`` itself, whose result the bound is held against): the smaller floor,
    so the larger bound. :class:`UntracedFloorMissing` when no such variant exists; :data:`RECORDER_NEEDS` says
    what would measure the floor directly."""
    names = tuple(dict.fromkeys((base, *PRECISIONS, variant)))
    prec = {n: values.get("variants", {}).get(n, {}).get("precision") for n in names}
    want = prec.get(variant)
    for d in ("fp32", want):
        if d not in (ceilings or {}):
            raise ValueError(f"untraced_fix: no {d!r} ceiling in {sorted(ceilings or {})}; expected the recorded "
                             f"matmul rates of fp32 and {want!r} (TFLOP/s)")
    ov = profiler_overhead(values, names).set_index("variant")
    others = ov.drop(index=[base, variant])
    others = others[others["host_bound"]]
    if others.empty:
        seen = ", ".join(f"{n}'s GPU is busy {100 * r.gpu_work_ms / r.step_ms:.0f}% of its untraced step"
                         for n, r in ov.drop(index=[base, variant]).iterrows()) or "the record has no other"
        raise UntracedFloorMissing(f"no untraced CPU floor for {variant}: the profiler's factor on the CPU time is "
                                   f"measured only on another precision of the step that is host-bound without the "
                                   f"profiler (GPU busy under half of it), and {seen}. The recorder would need "
                                   f"{RECORDER_NEEDS}")
    src = others["cpu_x"].idxmax()
    d = values["variants"][base]["trace"]
    cpu_x = float(others.loc[src, "cpu_x"])
    inputs = fix_inputs(d, d["fp32_gemm_pct"] / 100, max(ceilings[want] / ceilings["fp32"], 1.0))
    inputs.update(period_ms=float(ov.loc[base, "step_ms"]), cpu_ms=inputs["cpu_ms"] / cpu_x)
    return UntracedFix(inputs, variant, float(d["cpu_step_ms"]), cpu_x, str(src), float(ov.loc[base, "period_x"]),
                       synced_spread(values["variants"][src]["timing"]))


def synced_spread(timing: dict) -> Spread:
    """The :class:`~infralens_lab.stats.Spread` of a variant's synced step times (ms): the recorded median, p10 and
    p90 over the steps after the first :data:`SYNCED_SKIP`."""
    per = timing.get("per_step_sync_ms") or []
    return Spread(timing["median_ms"], timing["p10_ms"], timing["p90_ms"], max(len(per) - SYNCED_SKIP, 0))


def untraced_bounds(values: dict, ceilings: dict, base: str = "fixed", names=PRECISIONS[1:]) -> pd.DataFrame:
    """Each precision change of ``base`` on one basis, without the profiler: ``step_ms`` (back to back),
    ``speedup`` (``base``'s step / this step), ``low``/``high`` (:func:`~infralens_lab.stats.ratio_range` of the
    synced steps' p10-p90: the run-to-run noise around it), and its bound by :func:`untraced_fix` with both floors
    (``bound``, ``gpu_floor_ms``, ``cpu_floor_ms``, ``limited_by``, ``gpu_only_bound``, ``cpu_x``, ``cpu_x_from``,
    ``held``: speed-up <= bound); a variant without an untraced floor keeps NaN there and its reason in ``why``."""
    v = values["variants"]
    b = v[base]["timing"]
    out = []
    for n in names:
        t = v[n]["timing"]
        low, _, high = ratio_range(synced_spread(b), synced_spread(t))
        r = {"variant": n, "step_ms": t["throughput_ms_per_step"], "speedup": b["throughput_ms_per_step"] /
             t["throughput_ms_per_step"], "low": low, "high": high, "bound": math.nan, "why": ""}
        try:
            fx = untraced_fix(values, ceilings, n, base)
        except UntracedFloorMissing as exc:
            r["why"] = str(exc).split(". The recorder would need")[0]
        else:
            sb = step_bound(**fx.inputs)
            r.update(bound=sb.bound, gpu_floor_ms=sb.gpu_floor_ms, cpu_floor_ms=sb.cpu_floor_ms,
                     limited_by=sb.limited_by, gpu_only_bound=sb.gpu_only, cpu_x=fx.cpu_x, cpu_x_from=fx.cpu_x_from,
                     cpu_traced_ms=fx.cpu_traced_ms, held=bool(r["speedup"] <= sb.bound))
        out.append(r)
    return pd.DataFrame(out)


def untraced_notes(table: pd.DataFrame, base: str = "fixed") -> list[str]:
    """Sentences from :func:`untraced_bounds`: each speed-up without the profiler against its bound on the same
    basis, which floor decides and where the CPU floor comes from; within the bound the share of the possible
    gain it took, and whether the bound lies inside the p10-p90 range of the synced steps (then the step sits at
    its floor, within the noise); past it, which estimate failed; without a floor, why."""
    out = []
    for r in table.itertuples(index=False):
        head = (f"{r.variant} without the profiler: {r.step_ms:.1f} ms per step back to back, {r.speedup:.2f}x the "
                f"{base} step (the synced steps' p10-p90 give {r.low:.2f}-{r.high:.2f}x)")
        if r.bound != r.bound:
            out.append(f"{head}; {r.why} (the recorder would need `cpu_issue_ms` per variant).")
            continue
        floor = "the CPU floor" if r.limited_by == "cpu" else "the GPU work left"
        line = (f"{head}, against the untraced bound of {r.bound:.2f}x ({floor} decides: CPU {r.cpu_floor_ms:.1f} ms = "
                f"{r.cpu_traced_ms:.1f} ms profiled / {r.cpu_x:.2f}, the profiler's factor measured on {r.cpu_x_from}; "
                f"GPU work left {r.gpu_floor_ms:.1f} ms)")
        if r.held:
            share = 100 * (r.speedup - 1) / (r.bound - 1) if r.bound > 1 else float("nan")
            line += f": within it, {share:.0f}% of the possible gain"
            if r.low <= r.bound <= r.high:
                line += "; the bound lies inside the p10-p90 range, so the step runs at its floor, within the noise"
        else:
            line += (f": past it, so the CPU floor's estimate was too high (the profiler's factor at this precision "
                     f"is larger than on {r.cpu_x_from})" if r.limited_by == "cpu" else
                     ": past it, so kernels the bound held fixed got faster too")
        out.append(line + ".")
    return out


def cpu_rise_words(base: dict, digest: dict) -> str:
    """A sentence on how the CPU time per step changed between two trace digests, split (when the digests carry
    launch counts, recorded since the round-2 recorder) into more launch calls, slower launch calls, and the
    rest of the CPU's work; without those fields it says what the record lacks."""
    c0, c1 = base["cpu_step_ms"], digest["cpu_step_ms"]
    head = f"its CPU time per step went from {c0:.1f} to {c1:.1f} ms"
    n0, n1 = base.get("launch_calls_per_step"), digest.get("launch_calls_per_step")
    u0, u1 = base.get("launch_call_us"), digest.get("launch_call_us")
    if None in (n0, n1, u0, u1):
        return (f"{head}; this record predates the digest's launch counts (launch_calls_per_step, launch_call_us), "
                "so it cannot say whether more launches or slower ones added it")
    more, slower = (n1 - n0) * u0 / 1e3, n1 * (u1 - u0) / 1e3
    return (f"{head}: {n1:.0f} launch calls per step against {n0:.0f} ({more:+.1f} ms at fixed's {u0:.1f} µs a call), "
            f"each call {u1:.1f} µs against {u0:.1f} ({slower:+.1f} ms), and {c1 - c0 - more - slower:+.1f} ms of other "
            "CPU work")


def precision_notes(table: pd.DataFrame, busy_floor_pct: float = 80.0, values: dict | None = None) -> list[str]:
    """Sentences from :func:`precision_table`: each precision's traced speed-up against its bound with both floors
    (and which floor decides; a speed-up past it means kernels other than the GEMMs changed too, which the bound
    held fixed), its top kernel by name, the kernel-time shares by kind; when the GPU is busy less than
    ``busy_floor_pct`` of the step, that the CPU sets the pace, how its CPU time per step changed
    (:func:`cpu_rise_words`, with ``values`` the record) and what the same steps take without the profiler."""
    out = []
    first = table.iloc[0]
    digests = (values or {}).get("variants", {})
    for r in table.iloc[1:].itertuples(index=False):
        b = getattr(r, "bound", None)
        bound = ""
        if b is not None and b == b and b > 1:
            floor = "the CPU's" if r.limited_by == "cpu" else "the GPU work left"
            bound = (f" against a bound of {b:.2f}x with both floors ({floor} decides: GPU work left {r.gpu_floor_ms:.1f} ms, "
                     f"CPU {r.cpu_floor_ms:.1f} ms per step; the GPU floor alone would allow {r.gpu_only_bound:.1f}x)")
            if r.speedup > b:
                bound += (", and past it: the bound held every non-GEMM kernel and the CPU time fixed, and they "
                          "changed at this precision too")
        kind = {"other": "not a GEMM"}.get(r.top_kind, f"a {r.top_kind}")
        line = (f"{r.variant}: {r.period_ms:.1f} ms per step, {r.speedup:.2f}x the fp32 step{bound}; its top kernel "
                f"is {kind} ({r.top_kernel}), fp32 SIMT GEMMs {r.fp32_gemm_pct:.0f}% of kernel time "
                f"(fp32: {first['fp32_gemm_pct']:.0f}%), tensor-core kernels {r.tensor_core_pct:.0f}%.")
        if r.gpu_busy_pct < busy_floor_pct:
            line += f" The GPU is busy only {r.gpu_busy_pct:.0f}% of the step now: the CPU sets the pace"
            if r.variant in digests and first["variant"] in digests:
                line += "; " + cpu_rise_words(digests[first["variant"]]["trace"], digests[r.variant]["trace"])
            if r.step_ms == r.step_ms:
                line += (f". Without the profiler the same steps take {r.step_ms:.1f} ms back to back "
                         f"({r.period_ms / r.step_ms:.2f}x less than traced): the profiler's CPU cost per op stays "
                         "hidden while the GPU sets the pace and shows once the CPU does")
                plain = first["step_ms"] / r.step_ms
                if b is not None and b == b and plain > b:
                    line += (f"; untraced, the speed-up is {plain:.2f}x, past the traced bound, whose CPU floor was "
                             "measured under the profiler too")
            line += "."
        out.append(line)
    return out


def same_work(values: dict) -> bool:
    """True when the record says its prefetching variants did the baseline's work (:data:`SAME_WORK`: every
    batch tokenized, by DataLoader worker processes); False for a record made before that (their ring of 4
    batches was recycled and the tokenizer skipped)."""
    return values.get(SAME_WORK) is True


def loss_check(values: dict, base: str = "bubble") -> pd.DataFrame:
    """Per variant: ``mean_loss`` and, when the record has loss curves, ``max_diff`` (largest difference of a
    step's loss from ``base``'s at the same step): the variants train on the same batches when the record is
    :func:`same_work`, so their curves agree within the noise of the precision; a prefetch that skipped work
    trained on other batches and shows it in its mean loss."""
    v = values.get("variants", {})
    ref = v.get(base, {}).get("loss_curve")
    rows = []
    for n, d in v.items():
        curve = d.get("loss_curve")
        diff = max(abs(a - b) for a, b in zip(curve, ref, strict=False)) if curve and ref else math.nan  # over the steps both ran
        rows.append({"variant": n, "precision": d.get("precision"), "mean_loss": d.get("mean_loss", math.nan),
                     "max_diff": diff})
    return pd.DataFrame(rows)


__all__ = ["FP32_GEMM", "NOISE_FLOOR_PCT", "PRECISIONS", "RECORD", "RECORDER_NEEDS", "SAME_WORK", "SINGLE_CHANGES",
           "SYNCED_SKIP", "TENSOR_CORE", "UntracedFix", "UntracedFloorMissing", "baseline_notes", "cpu_rise_words",
           "effect_words", "expectation_notes", "fix_bound", "fix_inputs", "kernel_kind", "loss_check", "noise_pct",
           "one_change_notes", "one_change_table", "precision_notes", "precision_table", "profiler_overhead",
           "same_work", "synced_spread", "trace_digest", "untraced_bounds", "untraced_fix", "untraced_notes",
           "within_spread"]
