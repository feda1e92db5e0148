"""The naive → tiled attention before/after table: one row per quantity, both values, the ratio and a reason
computed from the numbers in the same row (so the reason states the direction the evidence shows).

Inputs are the per-variant rows of :func:`infralens_lab.analysis.joins.attention_variants` (times in µs,
bytes in MB, rates in %), the profiled shape (B, H, N, D) and, optionally, the ``bench`` record's attention
rows (TFLOP/s, CUDA events) for one extra row timed without a profiler, at the profiled shape when the bench has it
(:func:`bench_shape_words` says which shape it is).
"""
from __future__ import annotations

import math

import pandas as pd

from ..analysis import stalls as stall_info
from ..analysis.joins import ELEM_BYTES, config_fields
from .tables import before_after as _pair


def _pct(v) -> str:
    return "—" if v is None or v != v else f"{v:.0f}%"


def _metrics(b: dict, f: dict, sp_mb: float, e: int) -> list:
    def speed(x, y):
        return f"{x / y:.1f}x faster: the {int(b['kernels'])} naive kernels round-trip S and P through HBM; " \
               f"one tiled kernel keeps them on chip" if y < x else "not faster here: look at the rows below"

    def l2(x, y):
        if x != x or y != y:
            return "no L2 counter recorded"
        return ("higher: K/V tiles re-read by neighbouring query blocks are served from L2" if y > x else
                "lower: the naive kernels' reads of S and P just written hit L2 more often")

    def stall(x, y):
        text = f"naive: {x} {_pct(b.get('dominant_stall_pct'))}, tiled: {y} {_pct(f.get('dominant_stall_pct'))}"
        try:
            return text + f"; {y} = {stall_info.explain(y).meaning}"
        except (ValueError, TypeError):
            return text

    def occ(x, y):
        return (f"tiled runs at {'lower' if y < x else 'higher'} occupancy yet is "
                f"{'faster' if f['time_us'] < b['time_us'] else 'slower'}: occupancy is a means to hide latency")

    return [
        ("time_us", "kernel time (ncu, sum over kernels)", "µs", speed),
        ("pred_dram_mb", "DRAM bytes predicted (traffic model)", "MB",
         lambda x, y: f"{x / y:.1f}x less predicted: tiled never writes S or P"),
        ("dram_mb", "DRAM bytes measured (read + write)", "MB",
         lambda x, y: f"S (fp32) and P ({e}-byte) written then read back would be {sp_mb:.0f} MB; measured naive "
                      f"moved {x:.0f} MB, tiled {y:.0f} MB"),
        ("dram_tbps", "DRAM throughput (bytes / kernel time)", "TB/s",
         lambda x, y: "the DRAM rate behind the memory % row: hold it against the measured copy ceiling"),
        ("l2_hit_pct", "L2 hit rate (time-weighted)", "%", l2),
        ("memory_pct", "memory throughput, % of peak (SOL)", "%",
         lambda x, y: "the busiest memory unit (L1, L2 or DRAM), not DRAM alone"),
        ("sm_pct", "SM throughput, % of peak (SOL)", "%",
         lambda x, y: "tiled spends its time in matmuls and exp, not in moving bytes" if y > x else
         "tiled has not turned saved bytes into SM work here"),
        ("dominant_stall", "dominant stall reason", "", stall),
        ("long_scoreboard_pct", "long-scoreboard share of samples", "%",
         lambda x, y: "fewer warps wait on global memory" if y < x else "warps still wait on global memory"),
        ("achieved_occupancy_pct", "achieved occupancy (time-weighted)", "%", occ),
    ]


def bench_shape_words(bench_shape: tuple, profiled: tuple) -> str:
    """How the benchmark's shape relates to the profiled one, in words: ``"the profiled shape"``, ``"a larger
    shape"`` or ``"a smaller shape"`` (by B*H*N*N*D, the FLOPs), or ``"another shape"`` when the FLOPs are equal."""
    b, p = tuple(bench_shape), tuple(profiled)
    if b == p:
        return "the profiled shape"
    fb, fp = math.prod(b) * b[2], math.prod(p) * p[2]  # B*H*N*D*N
    return "a larger shape" if fb > fp else "a smaller shape" if fb < fp else "another shape"


def _bench_row(bench: list, before: str, after: str, shape: tuple):
    big = [r for r in bench if r.get("dtype") == "float16" and not r.get("causal") and r.get("variant") in (before, after)]
    have: dict = {}
    for r in big:
        have.setdefault(tuple(r["shape"]), set()).add(r["variant"])
    both = [s for s, v in have.items() if v == {before, after}]
    if not both:
        return None
    # the profiled shape if the bench has it, else the same head dim, then the largest N
    shp = sorted(both, key=lambda s: (s != tuple(shape), s[3] != shape[3], -s[2]))[0]
    vals = {r["variant"]: r["tflops"] for r in big if tuple(r["shape"]) == shp}
    faster = vals.get(after, 0) > vals.get(before, math.inf)
    where = bench_shape_words(shp, shape)
    return _pair({"t": vals.get(before, math.nan)}, {"t": vals.get(after, math.nan)},
                 [("t", f"bench TFLOP/s at B,H,N,D = {','.join(map(str, shp))} (CUDA events)", "TFLOP/s",
                   f"{where}, timed without a profiler: the speedup holds outside ncu" if faster else
                   f"{where}, timed without a profiler")], names=(before, after))


def attention_before_after(variants: pd.DataFrame, shape: tuple, bench: list | None = None,
                           before: str = "naive", after: str = "tiled") -> pd.DataFrame:
    """The before → after table of two attention variants (rows of ``variants``) at ``shape`` = (B, H, N, D),
    plus a CUDA-event TFLOP/s row from ``bench`` where both variants ran at one fp16 shape. ``dram_tbps`` is
    DRAM bytes (read + write) over the summed kernel time (MB/µs = TB/s)."""
    rows = {r["variant"]: r for r in variants.to_dict(orient="records")}
    if before not in rows or after not in rows:
        raise ValueError(f"before_after: variants {before!r} and {after!r} needed; have {sorted(rows)}")
    b, f = dict(rows[before]), dict(rows[after])
    for r in (b, f):
        r["dram_tbps"] = r["dram_mb"] / r["time_us"]
    B, H, n_ctx, _ = shape
    e = ELEM_BYTES.get(config_fields(b["config"]).get("dtype") or "fp16", 2)
    sp_mb = B * H * n_ctx * n_ctx * (4 + e) * 2 / 1e6  # S (fp32) and P (input dtype), each written once, read once
    metrics = _metrics(b, f, sp_mb, e)
    if "clock_ghz" in b and "clock_ghz" in f:  # the SM clock the rates above were measured at
        metrics.append(("clock_ghz", "SM clock (time-weighted)", "GHz",
                        lambda x, y: "the clock the SMs ran at under ncu: rates per second scale with it"))
    out = _pair(b, f, metrics, names=(before, after))
    extra = _bench_row(bench, before, after, tuple(shape)) if bench else None
    return out if extra is None else pd.concat([out, extra], ignore_index=True)


def traffic_notes(kernels: pd.DataFrame) -> list[str]:
    """Where measured DRAM bytes (``dram_mb``) part from the traffic model (``pred_dram_mb``), per kernel, and
    the likely reason; MB both."""
    out = []
    for r in kernels.to_dict(orient="records"):
        x = r["dram_mb"] / r["pred_dram_mb"] if r["pred_dram_mb"] else math.nan
        if r["kernel"].startswith("attn_fwd") and x < 0.5:
            out.append(f"{r['kernel']}: measured {r['dram_mb']:.1f} MB is {x:.2f}x the model's {r['pred_dram_mb']:.0f} MB: "
                       f"the model counts every K/V re-read as DRAM traffic (an upper bound); L2 served most of them")
        elif abs(x - 1) > 0.2:
            out.append(f"{r['kernel']}: measured {r['dram_mb']:.1f} MB is {x:.2f}x the model's {r['pred_dram_mb']:.0f} MB")
        else:
            out.append(f"{r['kernel']}: measured within 20% of the model ({x:.2f}x)")
    return out


def occupancy_facts(occ: pd.DataFrame) -> str:
    """Two sentences computed from :func:`infralens_lab.analysis.joins.occupancy_table`: is higher occupancy
    faster here? (achieved occupancy in %, DRAM rate in TB/s, time in µs)."""
    if occ.empty:
        return "No occupancy counters recorded."
    out = []
    copies = occ[occ["kernel"].str.startswith("copy stride")]
    if len(copies) >= 2:
        hi = copies.loc[copies["achieved_occupancy_pct"].idxmax()]
        fast = copies.loc[copies["dram_tbps"].idxmax()]
        out.append(f"Strided copies: occupancy spans {copies['achieved_occupancy_pct'].min():.0f}–"
                   f"{copies['achieved_occupancy_pct'].max():.0f}%, the highest at {hi['kernel']}; the highest DRAM "
                   f"rate is at {fast['kernel']}.")
    att = occ[occ["kernel"].str.startswith("attention")].sort_values("time_us")
    if len(att) >= 2:
        f, s = att.iloc[0], att.iloc[-1]
        out.append(f"Attention: the fastest variant ({f['kernel']}) runs at {f['achieved_occupancy_pct']:.0f}% "
                   f"occupancy, the slowest ({s['kernel']}) at {s['achieved_occupancy_pct']:.0f}%.")
    return " ".join(out)


VOCABULARY = ("long_scoreboard", "short_scoreboard", "lg_throttle", "mio_throttle", "drain", "math_pipe_throttle",
              "barrier", "wait", "not_selected", "selected", "no_instruction")


def vocabulary_table(reasons=VOCABULARY) -> pd.DataFrame:
    """Meaning and usual fix per stall reason, from :data:`infralens_lab.analysis.stalls.STALLS`."""
    return pd.DataFrame([{"reason": r, "meaning": stall_info.explain(r).meaning, "usual fix": stall_info.explain(r).fix}
                         for r in reasons])
