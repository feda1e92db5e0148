"""SM clocks: what clock each profiled kernel ran at, whether ncu locked it, and what a clock does to a peak.

Nsight Compute records, per launch, ``sm__cycles_elapsed.avg.per_second`` (:data:`infralens_lab.parse.ncu.CLOCK`):
the SM cycles that elapsed during the kernel divided by its duration, i.e. the SM clock it ran at (Hz). The
recorder profiles with ``--clock-control none``, so each kernel runs at the clock the GPU's own boost and power
policy chose (ncu says so in its output: "Running with unmodified GPU clocks"); without that flag ncu would lock
the clocks to the base clock (Nsight Compute's Kernel Profiling Guide, "Clock Control"). The device's highest SM
clock is in the raw CSV as ``device__attribute_clock_rate`` (kHz).

Why it matters, in two rules this module computes:

* a peak quoted in FLOP/s (a datasheet's, or a ceiling timed on the GPU) holds at one clock; at another clock the
  same hardware does ``peak × clock / peak_clock`` (:func:`at_clock`): per-cycle work is what the units fix;
* Nsight Compute's ``pct_of_peak_sustained_elapsed`` metrics divide by the peak *per elapsed cycle*, so they do
  not move with the clock; a rate divided by a fixed FLOP/s peak does (:func:`rate_share_at_clock`).

Pure functions of parsed ncu frames and numbers; SI units (Hz, FLOP/s).
"""
from __future__ import annotations

import math
import re

import pandas as pd

from ..parse import ncu

CLOCK = ncu.CLOCK[0]  # sm__cycles_elapsed.avg.per_second, Hz
CLOCK_METRIC = CLOCK
DEFAULT_CLOCK_CONTROL = "base"  # what ncu does without --clock-control: clocks locked to base
MAX_CLOCK = "device__attribute_clock_rate"  # the device's highest SM clock, kHz (CUDA's clockRate attribute)
UNLOCKED_WARNING = "Running with unmodified GPU clocks"  # ncu's own line under --clock-control none


def _number(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name}={v!r}; expected a positive finite number")
    return float(v)


def kernel_clocks(df: pd.DataFrame) -> pd.DataFrame:
    """Per launch of a tidy ncu frame (:func:`infralens_lab.parse.ncu.parse_raw_csv`): ``config``, ``kernel``,
    ``launch``, ``clock_hz`` and ``clock_ghz`` (``sm__cycles_elapsed.avg.per_second``). ValueError naming the
    metric when the frame lacks it (profile with ``--metrics sm__cycles_elapsed.avg.per_second``)."""
    if not isinstance(df, pd.DataFrame) or "metric" not in df.columns:
        raise TypeError(f"kernel_clocks: got {type(df).__name__}; expected the DataFrame of parse_raw_csv")
    rows = df[df["metric"] == CLOCK]
    if rows.empty:
        raise ValueError(f"the ncu frame has no {CLOCK} rows; profile with --metrics {CLOCK} "
                         f"(the recorder's ncu steps collect it)")
    units = set(rows["unit"].str.lower())
    if not units <= {"hz", "cycle/second"}:
        raise ValueError(f"{CLOCK} in unit(s) {sorted(units)}; expected 'hz' (cycles per second)")
    out = rows[["config", "kernel", "launch", "value"]].rename(columns={"value": "clock_hz"}).reset_index(drop=True)
    out["clock_ghz"] = out["clock_hz"] / 1e9
    return out


def kernel_clock_ghz(df: pd.DataFrame) -> pd.DataFrame:
    """The SM clock per profiled kernel: one row per ``(config, kernel)`` of the tidy frame, in the frame's order,
    ``clock_ghz`` = the median of its launches' ``sm__cycles_elapsed.avg.per_second`` / 1e9. ValueError naming the
    metric when the CSV did not record it, TypeError for something that is not such a frame."""
    if not isinstance(df, pd.DataFrame) or not {"config", "kernel", "metric", "value"} <= set(df.columns):
        raise TypeError(f"kernel_clock_ghz: got {type(df).__name__}; expected the tidy frame of "
                        f"parse.ncu.parse_raw_csv (config, kernel, launch, metric, unit, value)")
    per = kernel_clocks(df).groupby(["config", "kernel"], sort=False)["clock_ghz"].median()
    return per.reset_index()


def has_clock(df: pd.DataFrame) -> bool:
    """True when the tidy ncu frame holds the SM clock of its launches (a CSV recorded with parse.ncu.CLOCK)."""
    return bool((df["metric"] == CLOCK).any())


def clock_range_ghz(frames) -> tuple[float, float]:
    """(lowest, highest) SM clock in GHz over every launch of the given tidy ncu frames (None entries skipped)."""
    got = pd.concat([kernel_clocks(f)["clock_ghz"] for f in frames if f is not None])
    return float(got.min()), float(got.max())


def max_clock_hz(text: str) -> float | None:
    """The device's highest SM clock (Hz) from a raw ncu CSV text (``device__attribute_clock_rate``, kHz), or
    None when the CSV does not carry it."""
    df = ncu.parse_raw_csv(text, device_attributes=True)
    v = df.loc[df["metric"] == MAX_CLOCK, "value"].dropna()
    return float(v.iloc[0]) * 1e3 if len(v) else None


def clock_control(source: str | None) -> str | None:
    """How ncu treated the clocks, from either an ncu command line or a recorded CSV's text: the ``--clock-control``
    value (``'none'``: the GPU's own clocks; ``'base'``: locked to base), ``'base'`` when a command does not set it
    (ncu's default), ``'none'`` for a CSV without recorded commands that carries ncu's "Running with unmodified GPU
    clocks" line, None when there is nothing to read. ValueError when a file's commands disagree or nothing tells."""
    if source is None or source == "":
        return None
    if not isinstance(source, str):
        raise TypeError(f"clock_control: got {type(source).__name__}; expected an ncu command line or a CSV's text")
    one_line = "\n" not in source.strip() and "==INFRALENS==" not in source and UNLOCKED_WARNING not in source
    if one_line and source.split()[0].rsplit("/", 1)[-1] == "ncu":  # a command line
        m = re.search(r"--clock-control(?:=|\s+)(\S+)", source)
        return m.group(1) if m else DEFAULT_CLOCK_CONTROL
    cmds = [b["command"] for b in ncu.read_blocks(source) if b["command"]]
    found = {m.group(1) if (m := re.search(r"--clock-control[ =](\S+)", c)) else DEFAULT_CLOCK_CONTROL for c in cmds}
    if not found and UNLOCKED_WARNING in source:
        found = {"none"}
    if len(found) != 1:
        raise ValueError(f"clock control of the recorded ncu runs: {sorted(found) or 'not recorded'}; expected one "
                         "value from the files' ==INFRALENS== command lines, or an ncu command line")
    return found.pop()


def at_clock(rate: float, clock_hz: float, rate_clock_hz: float) -> float:
    """A rate (FLOP/s, byte/s of an SM-clocked unit) that holds at ``rate_clock_hz``, rescaled to ``clock_hz``:
    ``rate × clock_hz / rate_clock_hz`` (the units do a fixed amount of work per cycle)."""
    return _number("rate", rate) * _number("clock_hz", clock_hz) / _number("rate_clock_hz", rate_clock_hz)


def rate_share_at_clock(share: float, clock_hz: float, peak_clock_hz: float) -> float:
    """The most a kernel running at ``clock_hz`` can show as a share of a peak quoted at ``peak_clock_hz``
    when it fills every cycle ``share`` (1 = fully): ``share × clock_hz / peak_clock_hz``. Nsight Compute's
    ``pct_of_peak_sustained_elapsed`` is the per-cycle share itself and does not move with the clock."""
    return float(share) * _number("clock_hz", clock_hz) / _number("peak_clock_hz", peak_clock_hz)


def per_cycle(rate: float, clock_hz: float, units: int = 1) -> float:
    """Work per cycle (per unit, e.g. per SM when ``units`` is the SM count): ``rate / (clock_hz × units)``."""
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise ValueError(f"units={units!r}; expected a positive int (e.g. the SM count)")
    return _number("rate", rate) / (_number("clock_hz", clock_hz) * units)


def clock_of_peak(peak: float, work_per_cycle: float, units: int = 1) -> float:
    """The clock (Hz) at which ``units`` units doing ``work_per_cycle`` each reach ``peak`` per second: where a
    datasheet's FLOP/s were quoted, given the per-cycle work measured for the same units."""
    return _number("peak", peak) / (_number("work_per_cycle", work_per_cycle) * units)

