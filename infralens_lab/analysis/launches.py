"""How much parallel work a launch offered and whether the warp schedulers found work to issue: one row per
profiled kernel launch, read from Nsight Compute's raw counters (``launch__*``, occupancy and
:data:`infralens_lab.parse.ncu.SCHEDULER`), with the series' bound rule
(:func:`infralens_lab.analysis.roofline.sol_verdict`) applied to its speed-of-light pair.

It keeps apart the two things the rule names when no roof is reached: a grid below one wave (fewer blocks
than the GPU holds at once: ``waves`` < 1) and host launch overhead (a kernel shorter than the timed floor of
a tiny launch); a kernel with neither and no roof reached has latency not hidden inside it.
"""
from __future__ import annotations

import math

import pandas as pd

from ..parse import ncu
from ..parse.runs import RunConfig
from . import roofline as rl

LIMITS = {"launch__occupancy_limit_registers": "registers", "launch__occupancy_limit_shared_mem": "shared memory",
          "launch__occupancy_limit_warps": "warps", "launch__occupancy_limit_blocks": "blocks",
          "launch__occupancy_limit_barriers": "barriers"}
GRID = "launch__grid_size"
LAUNCH = ["launch__grid_size", "launch__block_size", "launch__sm_count", "launch__waves_per_multiprocessor"]


def launch_table(df: pd.DataFrame, launch_floor_s: float | None = None,
                 verdicts: dict[str, str] | None = None) -> pd.DataFrame:
    """Per launch of a tidy ncu frame (:func:`infralens_lab.parse.ncu.parse_raw_csv`): ``blocks``,
    ``warps_per_block``, ``sms``, ``blocks_per_sm`` (resident at once = blocks / (waves × SMs), rounded: ncu prints waves to 2 decimals), ``waves``,
    ``limited_by`` (the occupancy limiters allowing the fewest blocks per SM, ties joined), ``theoretical_pct`` and
    ``achieved_pct`` occupancy, ``issue_active_pct`` (issue-slot utilisation, % of active cycles),
    ``eligible_warps`` and ``active_warps`` (per scheduler per active cycle), ``time_us``, ``below_one_wave``,
    ``under_launch_floor`` (time < ``launch_floor_s``, seconds, CUDA events; None if not given) and
    ``verdict``: ``verdicts[kernel]`` when given (the series' verdict from the roofline and speed of light
    together, :func:`infralens_lab.analysis.counters.store_kernel_table`'s ``bound_text``), else the rule on
    SM % and memory % alone (:func:`~infralens_lab.analysis.roofline.sol_verdict`). Raises ValueError naming
    the missing counters."""
    need = LAUNCH + ncu.SCHEDULER + ncu.SOL + ncu.OCCUPANCY + ["gpu__time_duration.sum"]
    missing = [m for m in need if m not in set(df["metric"])]
    if missing:
        raise ValueError(f"the ncu frame lacks {missing}; profile with --metrics {','.join(need)} "
                         "(the recorder's attention step collects them)")
    limits = [m for m in LIMITS if m in set(df["metric"])]
    w = ncu.wide(df, need + limits)
    rows = []
    for r in w.to_dict(orient="records"):
        waves, t = r["launch__waves_per_multiprocessor"], r["gpu__time_duration.sum"] * 1e-9
        lim = {LIMITS[m]: r[m] for m in limits if not math.isnan(r[m])}
        rows.append({
            "kernel": r["kernel"], "blocks": r["launch__grid_size"], "warps_per_block": r["launch__block_size"] / 32,
            "sms": r["launch__sm_count"],
            "blocks_per_sm": round(r["launch__grid_size"] / (waves * r["launch__sm_count"])) if waves else math.nan,
            "waves": waves, "limited_by": ", ".join(k for k, v in lim.items() if v == min(lim.values())) or None,
            "theoretical_pct": r[ncu.OCCUPANCY[1]], "achieved_pct": r[ncu.OCCUPANCY[0]],
            "issue_active_pct": r[ncu.SCHEDULER[0]], "eligible_warps": r[ncu.SCHEDULER[1]],
            "active_warps": r[ncu.SCHEDULER[2]], "time_us": t * 1e6, "below_one_wave": waves < 1,
            "under_launch_floor": None if launch_floor_s is None else t < launch_floor_s,
            "verdict": (verdicts or {}).get(r["kernel"]) or rl.sol_verdict(r[ncu.SOL[0]], r[ncu.SOL[1]], waves=waves,
                                                                         time_s=t, launch_floor_s=launch_floor_s),
        })
    return pd.DataFrame(rows)


def host_gap(per_call_s: float, kernel_s: float, threshold: float = rl.BOUND_THRESHOLD) -> dict:
    """What a caller waits for beyond the kernel, per call: ``per_call_s`` is the time of one call timed from
    outside (CUDA events, calls back to back), ``kernel_s`` the kernel's own duration (ncu
    ``gpu__time_duration``, which excludes the launch path). Returns ``gap_s`` = per call - kernel (0 when the
    kernel is the longer: clocks and caches differ a little between the two runs), ``gpu_busy`` = kernel / per
    call (at most 1) and ``paced_by``: ``"host"`` when the kernel fills less than ``threshold`` of each call (the
    series' one threshold), else ``"kernel"``."""
    for name, v in (("per_call_s", per_call_s), ("kernel_s", kernel_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
            raise ValueError(f"{name}={v!r}; expected a positive duration in seconds")
    busy = min(1.0, kernel_s / per_call_s)
    return {"gap_s": max(0.0, per_call_s - kernel_s), "gpu_busy": busy,
            "paced_by": "host" if busy < threshold else "kernel"}


def tensor_peak_per_sm_cycle(df: pd.DataFrame, tensor_flops_per_op: float = 1.0, spread: float = 0.02) -> float | None:
    """Tensor FLOPs one SM can do per cycle, read off recorded matmuls: for each launch whose SM % is at or over
    :data:`~infralens_lab.analysis.roofline.BOUND_THRESHOLD` (the tensor pipe is then the SM's busiest unit),
    its tensor FLOPs per SM per cycle divided by its SM % (``sm__throughput``); the median, when every launch
    agrees within ``spread`` (else None: SM % is not the tensor pipe's share there). On the recorded H100 and H200
    cuBLAS matmuls of 2048³ to 8192³ this gives 4096 (dense fp16): the datasheet's 989.5 TFLOP/s over 132 SMs is
    that per-cycle rate at 1.83 GHz."""
    w = ncu.wide(df)
    ops = next((n for n in ncu.TENSOR_OPS_NAMES if n in w.columns), None)
    if ops is None or ncu.SOL[0] not in w.columns:
        return None
    busy = w[w[ncu.SOL[0]] >= 100 * rl.BOUND_THRESHOLD]
    if busy.empty:
        return None
    implied = per_sm_cycle(busy, busy[ops] * tensor_flops_per_op) / (busy[ncu.SOL[0]] / 100)
    if not (implied > 0).all() or implied.max() / implied.min() > 1 + spread:
        return None
    return float(implied.median())


def per_sm_cycle(w: pd.DataFrame, flops: pd.Series) -> pd.Series:
    """FLOPs per SM per cycle of each launch of a wide ncu frame: ``flops / (gpu__time_duration × SM clock ×
    launch__sm_count)``. Clock-free: what the SMs did with each cycle they had."""
    need = ["gpu__time_duration.sum", ncu.CLOCK[0], "launch__sm_count"]
    missing = [m for m in need if m not in w.columns]
    if missing:
        raise ValueError(f"the ncu frame lacks {missing}; expected them to turn FLOPs into FLOPs per SM per cycle")
    return flops / (w[need[0]] * 1e-9 * w[need[1]] * w[need[2]])


def matmul_launches(df: pd.DataFrame, sweep: list | None = None, tensor_peak_per_sm_cycle: float | None = None,
                    tensor_flops_per_op: float = 1.0) -> pd.DataFrame:
    """One row per profiled matmul size (the recorder's ``matmul size=M,N,K`` runs, their kernels summed): what
    the counters say about why a small matmul stays under its roofs. Columns: ``size``, ``ctas``
    (``launch__grid_size``), ``waves``, ``occupancy_pct`` (achieved, ``sm__warps_active``), ``sm_pct``
    (``sm__throughput``), ``tensor_per_sm_cycle`` (tensor FLOPs per SM per cycle: the tensor-path op counter ×
    ``tensor_flops_per_op`` over elapsed SM cycles), ``tensor_pipe_pct`` (that over ``tensor_peak_per_sm_cycle``,
    the dense fp16 peak per SM-cycle; NaN without it), ``ncu_tensor_pct`` (ncu's
    ``sm__ops_path_tensor_src_fp16.sum.pct_of_peak_sustained_elapsed`` when recorded: a share of a peak twice the
    dense rate, shown apart), ``clock_ghz``, ``kernel_us`` (``gpu__time_duration``), and from the timed ``sweep``
    rows (the recorder's ceilings sweep, CUDA events, calls back to back), when given: ``per_call_us`` (one event
    pair around many calls when recorded as ``batched_ms``, else the median of an event pair around each call),
    ``timing`` (which of the two), ``paced_by`` and ``host_gap_us`` (:func:`host_gap`; NaN for a call the kernel
    paces, where the small difference is the two runs' clocks and caches, not the host), ``cpu_issue_us`` (the
    host's own time to issue one call, timed on the CPU without waiting for the GPU; NaN when not recorded) and
    ``single_call_us`` (the median of an event pair around each call)."""
    w = ncu.wide(df)
    ops = next((n for n in ncu.TENSOR_OPS_NAMES if n in w.columns), None)
    if ops is None:
        raise ValueError(f"the ncu frame has no tensor-path op counter {ncu.TENSOR_OPS_NAMES}; expected ncu_matmul.csv")
    w["tensor_flops"] = w[ops].fillna(0.0) * tensor_flops_per_op
    w["size"] = [RunConfig.parse(c).fields()["M"] for c in w["config"]]
    w["per_sm_cycle"] = per_sm_cycle(w, w["tensor_flops"])
    timed = {r["M"]: r for r in sweep or () if r.get("median_ms")}
    rows = []
    for size, g in w.groupby("size", sort=True):
        t = g["gpu__time_duration.sum"]
        weight = lambda col, g=g, t=t: float((g[col] * t).sum() / t.sum())  # noqa: E731 (a matmul may run several kernels)
        row = {"size": int(size), "ctas": int(g[GRID].max()), "waves": float(g["launch__waves_per_multiprocessor"].max()),
               "occupancy_pct": weight(ncu.OCCUPANCY[0]), "sm_pct": weight(ncu.SOL[0]),
               "tensor_per_sm_cycle": weight("per_sm_cycle"), "clock_ghz": weight(ncu.CLOCK[0]) / 1e9,
               "kernel_us": float(t.sum()) / 1e3}
        row["tensor_pipe_pct"] = (100 * row["tensor_per_sm_cycle"] / tensor_peak_per_sm_cycle
                                  if tensor_peak_per_sm_cycle else math.nan)
        # ncu's own share, when recorded, is of a peak twice the dense fp16 rate (measured on the H100: 46.8 % at
        # 8192³, where the FLOPs per SM-cycle are 94 % of the dense peak; we think its peak counts 2:4 sparsity),
        # so it is shown apart, never as the pipe's busy share
        row["ncu_tensor_pct"] = (weight(ncu.TENSOR_PCT[0]) if ncu.TENSOR_PCT[0] in g.columns
                                 and g[ncu.TENSOR_PCT[0]].notna().all() else math.nan)
        if size in timed:
            r = timed[size]
            batched = r.get("batched_ms")
            row["per_call_us"] = 1e3 * (batched if batched else r["median_ms"])
            row["timing"] = "one event pair around the calls" if batched else "event pair around each call"
            gap = host_gap(row["per_call_us"] * 1e-6, row["kernel_us"] * 1e-6)
            row["paced_by"] = gap["paced_by"]  # a kernel-paced call's small difference is clocks and caches, not the host
            row["host_gap_us"] = gap["gap_s"] * 1e6 if gap["paced_by"] == "host" else math.nan
            row["cpu_issue_us"] = 1e3 * r["cpu_issue_ms"] if r.get("cpu_issue_ms") else math.nan
            row["single_call_us"] = 1e3 * r["median_ms"]
        rows.append(row)
    return pd.DataFrame(rows)
