"""The SM clock each profiled kernel ran at, and whether Nsight Compute locked it.

A rate (TB/s, TFLOP/s) is work per *second*; the hardware does its work per *cycle*. Nsight Compute records the
SM clock of every launch as ``sm__cycles_elapsed.avg.per_second`` (cycles per second, unit ``hz``), so a lab can
print the clock beside every rate it reads from the same CSV. Whether the clock was free to move is a flag of
the ncu command: ``--clock-control base`` (ncu's default) locks the clocks to the base clock, ``none`` leaves
them to the GPU's own policy (boost, power and thermal limits), which is how the recorder runs, as in the
timed benchmarks. :func:`kernel_clock_ghz` reads the clocks; :func:`clock_control` reads the flag.
"""
from __future__ import annotations

import re

import pandas as pd

from ..parse.ncu import CLOCK

CLOCK_METRIC = CLOCK[0]  # sm__cycles_elapsed.avg.per_second, in Hz
DEFAULT_CLOCK_CONTROL = "base"  # what ncu does without --clock-control: clocks locked to base


def kernel_clock_ghz(ncu_df: pd.DataFrame) -> pd.DataFrame:
    """The SM clock per profiled kernel: one row per ``(config, kernel)`` of the tidy frame of
    :func:`infralens_lab.parse.ncu.parse_raw_csv`, column ``clock_ghz`` = ``sm__cycles_elapsed.avg.per_second``
    / 1e9, averaged over that kernel's launches. Rows keep the frame's order. Raises ValueError naming the metric
    when the CSV did not record it, and TypeError for something that is not such a frame."""
    cols = list(getattr(ncu_df, "columns", []))
    if not {"config", "kernel", "metric", "value"} <= set(cols):
        raise TypeError(f"kernel_clock_ghz: got {type(ncu_df).__name__} with columns {cols}; expected the tidy "
                        f"frame of parse.ncu.parse_raw_csv (config, kernel, launch, metric, unit, value)")
    sub = ncu_df[ncu_df["metric"] == CLOCK_METRIC]
    if sub.empty:
        raise ValueError(f"kernel_clock_ghz: the CSV has no {CLOCK_METRIC!r} (the SM clock); profile with that "
                         f"metric (parse.ncu.CLOCK) to read the clock each kernel ran at")
    out = sub.groupby(["config", "kernel"], sort=False)["value"].mean().div(1e9).rename("clock_ghz")
    return out.reset_index()


def has_clock(ncu_df: pd.DataFrame) -> bool:
    """True when the tidy ncu frame holds the SM clock of its launches (a CSV recorded with parse.ncu.CLOCK)."""
    return bool((ncu_df["metric"] == CLOCK_METRIC).any())


def clock_control(command: str | None) -> str | None:
    """The ``--clock-control`` setting of an ncu command line (``'none'``, ``'base'``, ``'reset'``), ncu's
    default ``'base'`` when the command has no such flag, and None when there is no command to read."""
    if not command:
        return None
    if not isinstance(command, str):
        raise TypeError(f"clock_control: command is {type(command).__name__}; expected the ncu command line as a str")
    m = re.search(r"--clock-control(?:=|\s+)(\S+)", command)
    return m.group(1) if m else DEFAULT_CLOCK_CONTROL
