"""Naive against tiled attention from one ncu recording: the per-kernel and per-variant tables, the speed-of-light
pair per variant, and how many times the tiled kernels read K and V from DRAM against the traffic model.

:func:`profile` is the one path from ``ncu_attention.csv`` to those tables (the lab and the grader call it);
:func:`kv_reads` turns measured DRAM bytes into K/V passes (``(dram__bytes_read.sum - Q bytes) / (K + V bytes)``,
:func:`infralens_lab.analysis.traffic.kv_passes`) beside the model's ``ceil(N / BLOCK_M)``; :func:`sol_lines` says,
per variant, the speed-of-light pair, the series' verdict of each kernel and the DRAM rate against the copy
ceiling. Units as in :mod:`infralens_lab.analysis.joins`: ``_us`` µs, ``_mb`` 1e6 bytes, ``_pct`` percent.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..parse import ncu
from ..units import MB, dtype_bytes
from . import joins, traffic
from .clocks import kernel_clock_ghz
from .roofline import sol_verdict


@dataclass
class AttentionProfile:
    """``kernels`` (:func:`infralens_lab.analysis.joins.attention_kernels`, plus ``clock_ghz``), ``variants``
    (:func:`~infralens_lab.analysis.joins.attention_variants`, plus a time-weighted ``clock_ghz``), the profiled
    ``shape`` (B, H, N, D), ``dtype`` (``'fp16'``...), ``breakdown`` (stall samples per launch, may be empty) and
    ``raw`` (the tidy ncu frame the tables came from)."""

    kernels: pd.DataFrame
    variants: pd.DataFrame
    shape: tuple
    dtype: str
    breakdown: pd.DataFrame
    raw: pd.DataFrame


def profile(text: str) -> AttentionProfile:
    """The :class:`AttentionProfile` of an ncu CSV of the attention variants (the recorder's ``ncu_attention.csv``)."""
    df = ncu.parse_raw_csv(text)
    k = joins.attention_kernels(df)
    v = joins.attention_variants(k, df)
    try:
        clk = kernel_clock_ghz(df)
    except ValueError:  # recorded without the clock metric
        clk = None
    if clk is not None:
        k = k.merge(clk, on=["config", "kernel"], how="left")
        w = k.assign(_w=k["clock_ghz"] * k["time_us"]).groupby("variant", sort=False)[["_w", "time_us"]].sum()
        v = v.merge((w["_w"] / w["time_us"]).rename("clock_ghz").reset_index(), on="variant", how="left")
    f = joins.config_fields(k["config"].iloc[0])
    return AttentionProfile(k, v, tuple(f["shape"]), f.get("dtype", "fp16"), ncu.stall_breakdown(df), df)


def sol_pairs(variants: pd.DataFrame) -> pd.DataFrame:
    """Per variant: ``sm_pct``, ``memory_pct`` (speed of light, % of peak) and ``busiest_pct``, the larger of the
    two (how close the variant comes to a roof)."""
    missing = [c for c in ("variant", "sm_pct", "memory_pct") if c not in variants.columns]
    if missing:
        raise ValueError(f"sol_pairs: variants table lacks {missing}; has {list(variants.columns)}")
    v = variants[["variant", "sm_pct", "memory_pct"]]
    return v.assign(busiest_pct=v[["sm_pct", "memory_pct"]].max(axis=1))


def sol_lines(p: AttentionProfile, ceiling_bps: float | None = None, verdicts: dict[str, str] | None = None) -> list[str]:
    """One sentence per variant: its speed-of-light pair, the series' verdict for each of its kernels
    (``verdicts``: kernel -> text, e.g. :func:`infralens_lab.analysis.counters.store_kernel_table`'s ``bound_text``;
    without it, :func:`infralens_lab.analysis.roofline.sol_verdict` on the pair alone), and the DRAM rate (bytes /
    time, TB/s) against the measured copy ceiling ``ceiling_bps`` (bytes/s), at the SM clock it ran at."""
    out = []
    for r in p.variants.to_dict(orient="records"):
        kernels = list(p.kernels.loc[p.kernels["variant"] == r["variant"], "kernel"])
        tbps = r["dram_mb"] / r["time_us"]  # MB/µs = TB/s
        dram = f"DRAM {tbps:.2f} TB/s" + (f" = {tbps * 1e12 / ceiling_bps:.0%} of the measured copy ceiling "
                                          f"({ceiling_bps / 1e12:.2f} TB/s)" if ceiling_bps else "")
        clk = r.get("clock_ghz")
        clock = f" at an SM clock of {clk:.2f} GHz" if clk is not None and clk == clk else ""
        said = ("; ".join(f"{k} {verdicts[k]}" for k in kernels) if verdicts and all(k in verdicts for k in kernels)
                else sol_verdict(r["sm_pct"], r["memory_pct"]))
        out.append(f"{r['variant']}: SM {r['sm_pct']:.0f}%, memory {r['memory_pct']:.0f}% (speed of light){clock}; "
                   f"{said}; {dram}")
    return out


def kv_reads(p: AttentionProfile) -> pd.DataFrame:
    """Per tiled kernel (``attn_fwd*``): ``block_m``, ``model_kv_passes`` (the traffic model's K/V reads per head,
    ``ceil(N / BLOCK_M)``: no L2 reuse counted) and ``dram_kv_passes`` (measured:
    :func:`infralens_lab.analysis.traffic.kv_passes` of the kernel's ``dram__bytes_read.sum``)."""
    B, H, n_ctx, D = p.shape
    e = dtype_bytes(p.dtype)
    rows = []
    for r in p.kernels[p.kernels["kernel"].str.startswith("attn_fwd")].to_dict(orient="records"):
        rows.append({"kernel": r["kernel"], "block_m": int(r["block_m"]), "model_kv_passes": -(-n_ctx // int(r["block_m"])),
                     "dram_kv_passes": traffic.kv_passes(r["dram_read_mb"] * MB, B, H, n_ctx, D, e)})
    return pd.DataFrame(rows)
