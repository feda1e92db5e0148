"""The pipeline variants, one change at a time: a profiled trace reduced to the few numbers a table needs,
and the tables lab 01 reads from the ``pipeline_variants`` record.

:func:`trace_digest` keeps, per variant, the numbers of :func:`~infralens_lab.analysis.joins.trace_comparison`
(period, GPU busy share, idle gaps over 50 µs) and the top kernels by GPU time, not the trace itself.
:func:`one_change_table` and :func:`precision_table` join those digests with the wall-clock step times
and the Amdahl bounds (:func:`infralens_lab.analysis.overlap.amdahl`). Kernel kinds are read from kernel
names (:data:`FP32_GEMM`, :data:`TENSOR_CORE`): cuBLAS and CUTLASS spell their instruction path
into the name. Times: ``_ms`` milliseconds, ``_us`` microseconds, ``_pct`` percent.
"""
from __future__ import annotations

import re

import pandas as pd

from .joins import idle_budget, trace_comparison
from .overlap import amdahl

FP32_GEMM = "sgemm|ffma"  # kernel-name marks of fp32 matmuls on the CUDA cores (SIMT FMAs, no tensor cores)
# kernel-name marks of tensor-core kernels (GEMMs, and attention kernels built on them): TF32/half inputs in
# cuBLAS/CUTLASS names, Hopper's gmma and cuBLASLt's nvjet kernels, Ampere-style mma shapes (s1688, h16816...)
TENSOR_CORE = r"tf32|bf16|f16|tensorop|gmma|nvjet|hmma|[sh]1688|[sh]16816|[sh]884"
TOP = 5
SINGLE_CHANGES = ("bubble+prefetch", "bubble+pinned", "bubble+no_sync")  # one edit each, from the bubble
RECORD = "pipeline_variants"


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


def one_change_table(values: dict, names=("bubble",) + SINGLE_CHANGES + ("fixed",)) -> pd.DataFrame:
    """One row per variant of the ``pipeline_variants`` record: ``variant``, ``kind`` (``baseline``, ``one change``:
    one of :data:`SINGLE_CHANGES`, or ``bundle``), ``changed``, ``period_ms`` (trace),
    ``step_ms`` (wall clock, steps back to back), ``speedup`` (bubble's period / this period), ``gpu_busy_pct``,
    ``idle_ms_per_step`` (gaps over 50 µs), ``amdahl_bound``: 1 / the bubble's GPU busy share, the most
    any change that only removes idle time can give (the same for every row), and ``spread_pct``: (p90 - p10) /
    median of the variant's synced step times, what a change must beat to count."""
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
                    "amdahl_bound": bound, "spread_pct": _spread_pct(v["timing"])})
    return pd.DataFrame(out)


def _spread_pct(timing: dict) -> float:
    """(p90 - p10) / median of the synced step times, percent (NaN when the record has no percentiles)."""
    try:
        return 100 * (timing["p90_ms"] - timing["p10_ms"]) / timing["median_ms"]
    except (KeyError, TypeError, ZeroDivisionError):
        return float("nan")


def effect_words(speedup: float, spread_pct: float) -> str:
    """Words sized to a measured speed-up: within the run-to-run spread (``spread_pct``, at least 2%) it is
    "no change beyond the run-to-run spread"; else "x% faster" / "x% slower" (the percentage is the claim)."""
    noise = max(2.0, spread_pct if spread_pct == spread_pct else 2.0)  # NaN: fall back to 2%
    pct = 100 * (speedup - 1)
    if abs(pct) < noise:
        return f"no change beyond the run-to-run spread ({pct:+.1f}% against ±{noise:.0f}%)"
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
                   f"{effect_words(r['speedup'], r['spread_pct'])}{share}; GPU busy {r['gpu_busy_pct']:.0f}%.")
    total = sum(gains)
    how = ("more than the bundle: the edits overlap, removing parts of the same idle time" if total > 1.1 * bundle
           else "less than the bundle: an edit pays off only once another is in" if total < 0.9 * bundle
           else "about the bundle's: here the edits add up")
    out.append(f"fixed (all three): {f['speedup']:.2f}x against the Amdahl bound {f['amdahl_bound']:.2f}x. The single "
               f"changes together bought {total:.1f} ms per step against {bundle:.1f} ms for the bundle, {how}.")
    return out


def precision_notes(table: pd.DataFrame, busy_floor_pct: float = 80.0) -> list[str]:
    """Sentences from :func:`precision_table`: each precision's speed-up against its Amdahl bound (when the
    table has one; a speed-up past it means kernels other than the GEMMs changed too, which the bound held
    fixed), its top kernel by name, the kernel-time shares by kind, and, when the GPU is busy less than
    ``busy_floor_pct`` of the step, that the step is no longer GPU-bound: the CPU's time per step is the floor."""
    out = []
    for r in table.iloc[1:].itertuples(index=False):
        b = getattr(r, "amdahl_bound", None)
        bound = ""
        if b and b > 1:
            bound = (f" against an Amdahl bound of {b:.1f}x ({100 * (r.speedup - 1) / (b - 1):.0f}% of the possible gain)"
                     if r.speedup <= b else f", past the Amdahl bound of {b:.1f}x, which held every non-GEMM kernel "
                     f"fixed: other kernels got faster at this precision too")
        kind = {"other": "not a GEMM"}.get(r.top_kind, f"a {r.top_kind}")
        line = (f"{r.variant}: {r.period_ms:.1f} ms per step, {r.speedup:.2f}x the fp32 step{bound}; its top kernel "
                f"is {kind} ({r.top_kernel}), fp32 SIMT GEMMs {r.fp32_gemm_pct:.0f}% of kernel time "
                f"(fp32: {table.iloc[0]['fp32_gemm_pct']:.0f}%), tensor-core kernels {r.tensor_core_pct:.0f}%.")
        if r.gpu_busy_pct < busy_floor_pct:
            line += (f" The GPU is busy only {r.gpu_busy_pct:.0f}% of the step now, with {r.cpu_step_ms:.1f} ms of CPU "
                     f"time per step: the step is host-bound again, and the CPU sets the floor the bound ignored.")
        out.append(line)
    return out


def precision_table(values: dict, ceilings: dict | None = None,
                    names=("fixed", "fixed+tf32", "fixed+bf16")) -> pd.DataFrame:
    """fixed vs its precision variants: ``variant, period_ms, speedup`` (fixed's period / this one), ``gpu_busy_pct``,
    ``cpu_step_ms`` (CPU time in the step range: once the GPU work shrinks below it, the CPU sets the pace),
    ``fp32_gemm_pct`` and ``tensor_core_pct`` of kernel time, ``top_kernel`` (its whole name), ``top_kind``, ``mean_loss``
    (over every step the recorder ran: same data and steps, so the precisions' losses compare), and, with
    ``ceilings`` (``{dtype: TFLOP/s}``, the recorded 8192³ matmul rates), ``amdahl_bound``: the step's best speedup
    if fixed's fp32-GEMM share of kernel time ran at this precision's ceiling (a GPU-bound step:
    ``amdahl(share, ceiling / fp32 ceiling)``)."""
    rows = _rows(values, names)
    base = dict(rows)[names[0]]["trace"]
    out = []
    for n, v in rows:
        t, prec = v["trace"], v["precision"]
        top = t["top_kernels"][0] if t.get("top_kernels") else {"name": "", "kind": ""}
        r = {"variant": n, "period_ms": t["period_ms"], "speedup": base["period_ms"] / t["period_ms"],
             "gpu_busy_pct": t["gpu_busy_pct"], "cpu_step_ms": t["cpu_step_ms"],
             "fp32_gemm_pct": t["fp32_gemm_pct"], "tensor_core_pct": t["tensor_core_pct"],
             "top_kernel": top["name"], "top_kind": top["kind"], "mean_loss": v.get("mean_loss", float("nan"))}
        if ceilings and prec in ceilings and "fp32" in ceilings:
            r["amdahl_bound"] = amdahl(base["fp32_gemm_pct"] / 100, max(ceilings[prec] / ceilings["fp32"], 1.0))
        out.append(r)
    return pd.DataFrame(out)


__all__ = ["FP32_GEMM", "RECORD", "SINGLE_CHANGES", "TENSOR_CORE", "effect_words", "kernel_kind", "one_change_notes",
           "one_change_table", "precision_notes", "precision_table", "trace_digest"]
