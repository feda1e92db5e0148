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

from ..parse import ncu as N
from . import roofline as rl

LIMITS = {"launch__occupancy_limit_registers": "registers", "launch__occupancy_limit_shared_mem": "shared memory",
          "launch__occupancy_limit_warps": "warps", "launch__occupancy_limit_blocks": "blocks",
          "launch__occupancy_limit_barriers": "barriers"}
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
    need = LAUNCH + N.SCHEDULER + N.SOL + N.OCCUPANCY + ["gpu__time_duration.sum"]
    missing = [m for m in need if m not in set(df["metric"])]
    if missing:
        raise ValueError(f"the ncu frame lacks {missing}; profile with --metrics {','.join(need)} "
                         "(the recorder's attention step collects them)")
    limits = [m for m in LIMITS if m in set(df["metric"])]
    w = N.wide(df, need + limits)
    rows = []
    for r in w.to_dict(orient="records"):
        waves, t = r["launch__waves_per_multiprocessor"], r["gpu__time_duration.sum"] * 1e-9
        lim = {LIMITS[m]: r[m] for m in limits if not math.isnan(r[m])}
        rows.append({
            "kernel": r["kernel"], "blocks": r["launch__grid_size"], "warps_per_block": r["launch__block_size"] / 32,
            "sms": r["launch__sm_count"],
            "blocks_per_sm": round(r["launch__grid_size"] / (waves * r["launch__sm_count"])) if waves else math.nan,
            "waves": waves, "limited_by": ", ".join(k for k, v in lim.items() if v == min(lim.values())) or None,
            "theoretical_pct": r[N.OCCUPANCY[1]], "achieved_pct": r[N.OCCUPANCY[0]],
            "issue_active_pct": r[N.SCHEDULER[0]], "eligible_warps": r[N.SCHEDULER[1]],
            "active_warps": r[N.SCHEDULER[2]], "time_us": t * 1e6, "below_one_wave": waves < 1,
            "under_launch_floor": None if launch_floor_s is None else t < launch_floor_s,
            "verdict": (verdicts or {}).get(r["kernel"]) or rl.sol_verdict(r[N.SOL[0]], r[N.SOL[1]], waves=waves,
                                                                         time_s=t, launch_floor_s=launch_floor_s),
        })
    return pd.DataFrame(rows)
