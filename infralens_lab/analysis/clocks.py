"""The SM clock a kernel ran at under Nsight Compute, to print beside every rate and ceiling read from ncu.

The recorder runs ncu with ``--clock-control none``: ncu does not lock the clocks, so each launch runs at
whatever clock the GPU's own policy gives it (boost, power and thermal limits), and a "% of peak" is a share
of the peak *at that clock*. ``sm__cycles_elapsed.avg.per_second`` (:data:`infralens_lab.parse.ncu.CLOCK`,
unit Hz: SM cycles elapsed per second of the kernel's duration, averaged over the SMs) is that clock, per
launch. A rate measured at 1.55 GHz and one at 1.98 GHz differ by 28% for that reason alone.
"""
from __future__ import annotations

import pandas as pd

from ..parse import ncu as N

CLOCK_METRIC = N.CLOCK[0]


def kernel_clock_ghz(ncu_df: pd.DataFrame, by: str | list[str] = "kernel") -> pd.Series:
    """Mean SM clock (GHz) per kernel (or per ``by`` columns, e.g. ``["config", "kernel"]``) over its launches
    in the tidy ncu frame of :func:`infralens_lab.parse.ncu.parse_raw_csv`. ValueError naming the metric when
    the frame has no clock rows (a CSV recorded without :data:`~infralens_lab.parse.ncu.CLOCK`)."""
    if not hasattr(ncu_df, "columns") or not {"metric", "value"} <= set(ncu_df.columns):
        raise TypeError(f"kernel_clock_ghz: got {type(ncu_df).__name__}; expected the tidy ncu frame "
                        "(config, kernel, launch, metric, unit, value) of parse.ncu.parse_raw_csv")
    rows = ncu_df[ncu_df["metric"] == CLOCK_METRIC]
    if rows.empty:
        raise ValueError(f"no {CLOCK_METRIC} in this ncu data (metrics seen: {ncu_df['metric'].nunique()}); "
                         "expected a CSV recorded with parse.ncu.CLOCK among its metrics")
    return (rows.groupby(by, sort=False)["value"].mean() / 1e9).rename("clock_ghz")


def has_clock(ncu_df: pd.DataFrame) -> bool:
    """True when the tidy ncu frame holds the SM clock of its launches."""
    return bool((ncu_df["metric"] == CLOCK_METRIC).any())


__all__ = ["CLOCK_METRIC", "has_clock", "kernel_clock_ghz"]
