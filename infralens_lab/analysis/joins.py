"""Joins of ncu counters, the benchmark and the traffic model: the tables labs 02 and 04 read.

:func:`copy_family` joins, per copy configuration (coalesced, then every stride), what the
32-byte sector model predicts (:func:`infralens_lab.analysis.traffic.sector_model`) with what
Nsight Compute measured (sectors per request, DRAM bytes read against the useful bytes, kernel
time, achieved DRAM bandwidth, occupancy), the stall mix from the sampling run and, if given,
the benchmark's useful bandwidth. :func:`attention_kernels` does the same per attention kernel
(naive's three, the tiled ones) against :func:`~infralens_lab.analysis.traffic.attention_naive_traffic`
and :func:`~infralens_lab.analysis.traffic.attention_tiled_traffic`; :func:`attention_variants`
folds the naive kernels into one row per variant; :func:`before_after` and
:func:`infralens_lab.present.tables.before_after` lays two such rows side by side. Inputs are the tidy frame of
:func:`infralens_lab.parse.ncu.parse_raw_csv` (the recorder labels each run with a
``config`` such as ``copy_strided stride=8 n=16777216 fp32`` or ``naive shape=1,8,2048,64
fp16``) and the ``bench`` record's rows. Units are in the column names: ``_us``
microseconds, ``_mb`` 1e6 bytes, ``_tbps`` 1e12 byte/s, ``_pct`` percent, ``_x`` a ratio.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from ..parse import ncu
from ..parse.runs import RunConfig
from ..parse.trace import idle_by_cause, step_gpu_work
from ..units import ELEM_BYTES, MB
from . import traffic
from .idle import window_split
from .stalls import dominant_item


def config_fields(label: str) -> dict:
    """Fields of a recorder config label (:meth:`RunConfig.fields`): ``'copy_strided stride=8 n=16777216 fp32'``
    -> ``{'family': 'copy_strided', 'stride': 8, 'n': 16777216, 'dtype': 'fp32', ...}``; attention labels
    have ``family`` ``'attention'`` and ``variant``, ``shape`` a tuple. ValueError for another form."""
    return RunConfig.parse(label).fields()


def _per_config(df, view):
    """A per-launch view averaged over the launches of each (config, kernel)."""
    v = view(df)
    cols = [c for c in v.columns if c not in ncu.KEYS]
    return v.groupby(["config", "kernel"], sort=False)[cols].mean().reset_index()


def _stall_table(stalls_df):
    """(config, kernel) -> samples per reason, summed over launches."""
    if not ncu.has_stalls(stalls_df):
        return pd.DataFrame(columns=["config", "kernel", "reason", "samples"])
    b = ncu.stall_breakdown(stalls_df)
    return b.groupby(["config", "kernel", "reason"], sort=False)["samples"].sum().reset_index()


def _stall_summary(samples, config: str, kernels: Sequence[str]) -> dict:
    sub = samples[(samples["config"] == config) & samples["kernel"].isin(list(kernels))]
    per = sub.groupby("reason")["samples"].sum()
    total = per.sum()
    if not total > 0:
        return {"long_scoreboard_pct": math.nan, "dominant_stall": None, "dominant_stall_pct": math.nan}
    top = dominant_item(per.to_dict()) if len(per.drop(labels=["selected"], errors="ignore")) else (None, math.nan)
    return {"long_scoreboard_pct": 100 * per.get("long_scoreboard", 0.0) / total, "dominant_stall": top[0],
            "dominant_stall_pct": 100 * top[1] / total}


def _copy_row_key(fields: dict) -> tuple[str, int]:
    fam = fields["family"]
    if fam == "copy":
        return "coalesced", 1
    if fam == "copy_strided":
        if "stride" not in fields:
            raise ValueError(f"copy_strided config {fields!r} has no stride=")
        return f"stride {fields['stride']}", int(fields["stride"])
    raise ValueError(f"config family {fam!r} is not a copy; expected 'copy' or 'copy_strided'")


def copy_family(ncu_df, stalls_df=None, bench_rows: Sequence[dict] | None = None):
    """One row per copy configuration, predicted beside measured (see module doc for units).

    Columns: ``config, label, kernel, stride, elem_bytes, pred_sectors_per_req, sectors_per_req,
    useful_read_mb, pred_dram_read_mb, dram_read_mb, pred_read_x, read_x, time_us, dram_tbps,
    achieved_occupancy_pct`` and, with ``stalls_df`` (the ncu CSV with ``smsp__pcsamp_*``),
    ``long_scoreboard_pct, dominant_stall, dominant_stall_pct``; with ``bench_rows`` (the bench
    record's ``copies``), ``useful_tbps, pred_useful_fraction, useful_fraction`` for the same dtype.
    ``read_x`` is DRAM bytes read per useful byte read; ``dram_tbps`` is (read + written) / time.
    """
    _frame_with(ncu_df, ["config", "kernel", "metric", "value"], "copy_family")
    copies = ncu_df[ncu_df["kernel"].isin(["copy_coalesced", "copy_strided"])]
    if copies.empty:
        raise ValueError(f"copy_family: no copy_coalesced/copy_strided launches; kernels seen: "
                         f"{sorted(set(ncu_df['kernel']))}")
    sol = _per_config(copies, ncu.speed_of_light)
    spr = _per_config(copies, ncu.sectors_per_request)
    dram = _per_config(copies, ncu.dram_bytes)
    occ = _per_config(copies, ncu.occupancy)
    keys = ["config", "kernel"]
    m = sol.merge(spr, on=keys, how="left").merge(dram, on=keys, how="left").merge(occ, on=keys, how="left")
    samples = _stall_table(stalls_df) if stalls_df is not None else None
    bench = {}
    for r in bench_rows or ():
        if r.get("variant") in ("coalesced", "strided"):
            bench[(r["variant"], r.get("dtype"), int(r.get("stride", 1)))] = r
    rows = []
    for r in m.itertuples(index=False):
        f = config_fields(r.config)
        label, stride = _copy_row_key(f)
        e = ELEM_BYTES.get(f.get("dtype", "fp32"))
        if e is None or "n" not in f:
            raise ValueError(f"copy_family: config {r.config!r} lacks n= or a dtype (fp32/fp16)")
        model = traffic.sector_model(stride, e)
        useful = f["n"] * e
        row = {"config": r.config, "label": label, "kernel": r.kernel, "stride": stride, "elem_bytes": e,
               "pred_sectors_per_req": model.sectors_per_request, "sectors_per_req": r.sectors_per_request,
               "useful_read_mb": useful / MB, "pred_dram_read_mb": useful * model.read_amplification / MB,
               "dram_read_mb": r.read_bytes / MB, "pred_read_x": model.read_amplification,
               "read_x": r.read_bytes / useful, "time_us": r.time_ns / 1e3,
               "dram_tbps": (r.read_bytes + r.write_bytes) / (r.time_ns * 1e-9) / 1e12,
               "achieved_occupancy_pct": r.achieved_pct}
        if samples is not None:
            row.update(_stall_summary(samples, r.config, [r.kernel]))
        if bench_rows is not None:
            dt = {"fp32": "float32", "fp16": "float16"}.get(f.get("dtype"), f.get("dtype"))
            b = bench.get(("coalesced" if label == "coalesced" else "strided", dt, stride))
            row["useful_tbps"] = b["useful_tbps"] if b else math.nan
            row["pred_useful_fraction"] = 1.0 if label == "coalesced" else model.useful_fraction
            row["useful_fraction"] = 1.0 if (label == "coalesced" and b) else (
                b.get("measured_fraction") if b and b.get("measured_fraction") is not None else math.nan)
        rows.append(row)
    out = pd.DataFrame(rows)
    out["_coalesced_first"] = out["label"] != "coalesced"
    return out.sort_values(["_coalesced_first", "stride"], kind="stable").drop(columns="_coalesced_first") \
        .reset_index(drop=True)


def _frame_with(df, cols, what):
    if not hasattr(df, "columns"):
        raise TypeError(f"{what}: got {type(df).__name__}; expected the DataFrame of parse.ncu.parse_raw_csv")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: frame lacks columns {missing}; expected the tidy ncu frame "
                         f"(config, kernel, launch, metric, unit, value)")


ATTN_KERNELS = ("naive_qk", "naive_softmax", "naive_pv", "attn_fwd", "attn_fwd_fast")


def _grid_size(df, config: str, kernel: str, metric: str = "launch__grid_size") -> float:
    sub = df[(df["config"] == config) & (df["kernel"] == kernel) & (df["metric"] == metric)]
    return float(sub["value"].mean()) if len(sub) else math.nan


def block_m_from_grid(grid_size: float, B: int, H: int, N_ctx: int) -> int:
    """BLOCK_M of a tiled attention launch from its grid: ``grid = ceil(N / BLOCK_M) * B * H``.

    Returns the smallest power of two ``BLOCK_M`` whose grid matches; ValueError if none does."""
    if not grid_size == grid_size or grid_size <= 0:
        raise ValueError(f"grid size {grid_size!r}; expected a positive number of blocks")
    n_blocks = grid_size / (B * H)
    for bm in (16, 32, 64, 128, 256):
        if -(-N_ctx // bm) == n_blocks:
            return bm
    raise ValueError(f"grid of {grid_size:g} blocks is not ceil({N_ctx}/BLOCK_M)*{B * H} for any power-of-two BLOCK_M")


def attention_kernels(ncu_df, stall_source=None):
    """One row per attention kernel launch configuration, predicted DRAM traffic beside measured.

    Columns: ``config, variant, kernel, time_us, pred_dram_read_mb, dram_read_mb,
    pred_dram_write_mb, dram_write_mb, pred_dram_mb, dram_mb, l2_hit_pct, sm_pct, memory_pct,
    achieved_occupancy_pct, theoretical_occupancy_pct, block_m`` (tiled kernels, read off the grid
    size), ``flops`` (nominal, from the model), ``grid_blocks, block_threads`` (the launch), and ``long_scoreboard_pct, dominant_stall, dominant_stall_pct`` when the CSV (or
    ``stall_source``) holds the stall samples.
    """
    _frame_with(ncu_df, ["config", "kernel", "metric", "value"], "attention_kernels")
    att = ncu_df[ncu_df["kernel"].isin(ATTN_KERNELS)]
    if att.empty:
        raise ValueError(f"attention_kernels: no attention kernels {ATTN_KERNELS}; kernels seen: "
                         f"{sorted(set(ncu_df['kernel']))}")
    sol = _per_config(att, ncu.speed_of_light)
    keys = ["config", "kernel"]
    m = sol.merge(_per_config(att, ncu.dram_bytes), on=keys, how="left") \
        .merge(_per_config(att, ncu.hit_rates), on=keys, how="left") \
        .merge(_per_config(att, ncu.occupancy), on=keys, how="left")
    src = att if stall_source is None else stall_source
    samples = _stall_table(src)
    rows = []
    for r in m.itertuples(index=False):
        f = config_fields(r.config)
        if "shape" not in f or len(f["shape"]) != 4:
            raise ValueError(f"attention_kernels: config {r.config!r} lacks shape=B,H,N,D")
        B, H, n_ctx, D = f["shape"]
        e = ELEM_BYTES.get(f.get("dtype", "fp16"), 2)
        causal = bool(f.get("causal", False))
        block_m = None
        if r.kernel.startswith("naive_"):
            model = {t.kernel: t for t in traffic.attention_naive_traffic(B, H, n_ctx, D, e, causal)}[r.kernel]
        else:
            block_m = block_m_from_grid(_grid_size(att, r.config, r.kernel), B, H, n_ctx)
            model = traffic.attention_tiled_traffic(B, H, n_ctx, D, e, block_m, causal)
        row = {"config": r.config, "variant": f["variant"], "kernel": r.kernel, "time_us": r.time_ns / 1e3,
               "pred_dram_read_mb": model.bytes_read / MB, "dram_read_mb": r.read_bytes / MB,
               "pred_dram_write_mb": model.bytes_written / MB, "dram_write_mb": r.write_bytes / MB,
               "pred_dram_mb": model.bytes / MB, "dram_mb": (r.read_bytes + r.write_bytes) / MB,
               "l2_hit_pct": r.l2_hit_pct, "sm_pct": r.sm_pct, "memory_pct": r.memory_pct,
               "achieved_occupancy_pct": r.achieved_pct, "theoretical_occupancy_pct": r.theoretical_pct,
               "block_m": block_m, "flops": model.flops,
               "grid_blocks": _grid_size(att, r.config, r.kernel),
               "block_threads": _grid_size(att, r.config, r.kernel, ncu.BLOCK),
               "waves": _grid_size(att, r.config, r.kernel, ncu.WAVES)}
        if len(samples):
            row.update(_stall_summary(samples, r.config, [r.kernel]))
        rows.append(row)
    return pd.DataFrame(rows)


_ADD = ("time_us", "pred_dram_read_mb", "dram_read_mb", "pred_dram_write_mb", "dram_write_mb", "pred_dram_mb",
        "dram_mb", "flops")
_WEIGHTED = ("l2_hit_pct", "sm_pct", "memory_pct", "achieved_occupancy_pct", "theoretical_occupancy_pct")


def attention_variants(kernels, ncu_df=None):
    """One row per variant (naive's three kernels folded into one): additive columns summed, rates
    (hit rate, % of peak, occupancy) weighted by kernel time, stall shares from the summed samples
    (pass the ncu frame as ``ncu_df`` for those). Adds ``kernels`` (how many launches per forward)."""
    _frame_with(kernels, ["variant", "kernel", "time_us"], "attention_variants")
    samples = _stall_table(ncu_df) if ncu_df is not None else None
    rows = []
    for variant, g in kernels.groupby("variant", sort=False):
        row = {"variant": variant, "kernels": len(g), "config": g["config"].iloc[0]}
        for c in _ADD:
            if c in g.columns:
                row[c] = float(g[c].sum())
        w = g["time_us"] / g["time_us"].sum()
        for c in _WEIGHTED:
            if c in g.columns:
                row[c] = float((g[c] * w).sum())
        if samples is not None and len(samples):
            row.update(_stall_summary(samples, row["config"], list(g["kernel"])))
        rows.append(row)
    return pd.DataFrame(rows)


def occupancy_table(copy_family_table=None, attention_variants_table=None) -> pd.DataFrame:
    """Achieved occupancy beside what the kernel achieved, one row per copy (:func:`copy_family`) and
    attention variant (:func:`attention_variants`): time (µs), useful GB moved (read + written, copies)
    and DRAM TB/s (read + written over time)."""
    rows = []
    if copy_family_table is not None:
        for r in copy_family_table.to_dict(orient="records"):
            rows.append({"kernel": f"copy {r['label']}", "achieved_occupancy_pct": r["achieved_occupancy_pct"],
                         "time_us": r["time_us"], "useful GB moved": 2 * r["useful_read_mb"] / 1e3,
                         "dram_tbps": r["dram_tbps"]})
    if attention_variants_table is not None:
        for r in attention_variants_table.to_dict(orient="records"):
            rows.append({"kernel": f"attention {r['variant']}", "achieved_occupancy_pct": r["achieved_occupancy_pct"],
                         "time_us": r["time_us"], "useful GB moved": math.nan,
                         "dram_tbps": r["dram_mb"] * 1e6 / (r["time_us"] * 1e-6) / 1e12})
    return pd.DataFrame(rows)


def attention_predictions(kernels: pd.DataFrame) -> pd.DataFrame:
    """The traffic model alone at the recorded shape, one row per kernel of :func:`attention_kernels`
    (what to expect before looking at the counters): predicted DRAM MB read and written, nominal GFLOP,
    intensity (FLOP/byte)."""
    k = kernels
    out = pd.DataFrame({"variant": k["variant"], "kernel": k["kernel"], "block_m": k["block_m"],
                        "pred_dram_read_mb": k["pred_dram_read_mb"], "pred_dram_write_mb": k["pred_dram_write_mb"],
                        "gflop": k["flops"] / 1e9})
    out["flop_per_byte"] = k["flops"] / (k["pred_dram_mb"] * 1e6)
    return out


def trace_comparison(traces: dict) -> pd.DataFrame:
    """Before/after table of traces (``{version: Trace}``), one row per version.

    ``period_ms``: steady-state time per step, the spacing between the moments successive profiled
    steps' GPU work finished (``(last gpu_end - first gpu_end) / (steps - 1)`` of :func:`step_gpu_work`);
    a step is done when its GPU work is, whether or not the CPU has moved on. ``cpu_step_ms``: time the
    CPU spent inside the step range. ``gpu_work_ms``: GPU time of the work each step launched.
    ``gpu_util_pct``: GPU busy share of the profiled window (``Trace.summary``). Then the idle gaps over
    ``min_gap_us`` (50 µs) in the same window as ``period_ms`` (:func:`idle_budget`), per step.
    """
    rows = []
    for v, tr in traces.items():
        w = step_gpu_work(tr)
        n = len(w)
        if n < 2 or w["gpu_end_us"].isna().any():
            raise ValueError(f"{v}: need at least two profiled steps that launched GPU work; got {n} steps, "
                             f"{int(w['gpu_end_us'].notna().sum())} with GPU work")
        s = tr.summary()
        gaps, b = tr.idle_gaps(), idle_budget(tr)
        row = {"version": v, "steps": n, "period_ms": b["period_ms"],
               "cpu_step_ms": s["mean_step_us"] / 1e3, "gpu_work_ms": w["gpu_work_us"].mean() / 1e3,
               "gpu_util_pct": 100 * (s.get("gpu_utilization") or 0.0),
               "idle_gaps_per_step": b["gaps_over_per_step"], "idle_ms_per_step": b["idle_over_ms"],
               "largest_gap_ms": float(gaps["gap_us"].max()) / 1e3 if len(gaps) else 0.0,
               "main_idle_cause": idle_by_cause(tr)["cause"].iloc[0] if len(gaps) else "none"}
        rows.append(row)
    return pd.DataFrame(rows)


def idle_budget(tr, min_gap_us: float = 50.0) -> dict:
    """Where the time of one steady step goes, over the window ``period_ms`` is measured on (from the end of
    the first profiled step's GPU work to the end of the last one's, :func:`step_gpu_work`), per step:
    ``busy_ms`` (GPU running a kernel, copy or memset on any stream), ``idle_over_ms`` (idle gaps longer than
    ``min_gap_us``, the ones :meth:`Trace.idle_gaps` lists), ``idle_under_ms`` (the short gaps between
    back-to-back launches, not listed), ``gaps_over_per_step``. ``busy + idle_over + idle_under = period``
    exactly; ``min_gap_us`` is returned with them so a table can print the threshold it used.
    """
    sw = tr.steady_window()
    if sw is None:
        raise ValueError(f"need at least two profiled steps that launched GPU work; got {len(tr.steps())} steps")
    a, b, n = sw
    busy_us, inside, over = window_split(tr, a, b, min_gap_us)  # the work the profiled steps launched
    return {"period_ms": (b - a) / n / 1e3, "busy_ms": busy_us / n / 1e3,
            "idle_over_ms": float(inside[over].sum()) / n / 1e3, "idle_under_ms": float(inside[~over].sum()) / n / 1e3,
            "gaps_over_per_step": int(((inside > 0) & over).sum()) / n, "min_gap_us": float(min_gap_us)}


__all__ = ["ATTN_KERNELS", "ELEM_BYTES", "attention_kernels", "attention_predictions", "attention_variants",
           "block_m_from_grid", "config_fields", "copy_family", "idle_budget", "occupancy_table", "trace_comparison"]
