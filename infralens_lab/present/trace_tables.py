"""Tables of a torch.profiler trace for the timeline lab (lab 01): the ``record_function`` ranges per step
with the GPU work they launched, the most frequent aten ops, the longest GPU idle gaps, the hottest kernels.
Shaping only: the numbers come from :class:`infralens_lab.parse.trace.Trace`. Times: ``_ms``
milliseconds per step unless the column says otherwise.
"""
from __future__ import annotations

import pandas as pd

from ..parse.trace import Trace


def ranges_view(tr: Trace, with_times: bool | None = None) -> pd.DataFrame:
    """The record_function ranges of a trace (step ranges left out), in order of first appearance, with the
    GPU operations (kernels, copies, memsets) launched inside them per step.

    ``with_times`` (default: only for traces with GPU events) adds CPU and device milliseconds per
    step; a CPU-only trace's timings are interpreter-speed noise, so by default it shows counts only.
    """
    ev = tr.events
    rng = ev[(ev["cat"] == "user_annotation") & ~ev["name"].str.startswith("ProfilerStep")]
    order = list(dict.fromkeys(rng.sort_values("start_us")["name"]))
    t = tr.ranges().set_index("name").loc[order].reset_index()
    steps = max(1, tr.summary()["steps"])
    out = pd.DataFrame({"range": t["name"], "per_step": t["count"] / steps, "gpu_ops_launched": t["launches"] / steps})
    if with_times if with_times is not None else tr.has_gpu:
        out["cpu_ms_per_step"] = t["cpu_total_us"] / steps / 1e3
        out["gpu_ms_per_step"] = t["device_us"] / steps / 1e3
    return out


def ops_by_count(tr: Trace, top: int = 8) -> pd.DataFrame:
    """The most frequent aten ops (name, calls per step): a view with no timings, stable on a CPU."""
    ops = tr.ops()
    ops = ops[ops["name"].str.startswith("aten::")]
    steps = max(1, tr.summary()["steps"])
    out = pd.DataFrame({"op": ops["name"], "calls_per_step": ops["count"] / steps})
    return out.sort_values(["calls_per_step", "op"], ascending=[False, True]).head(top).reset_index(drop=True)


def gap_view(tr: Trace, top: int = 8) -> pd.DataFrame:
    """The ``top`` longest GPU idle gaps: when (ms), how long, the dominant cause, ranges and ops on the CPU."""
    g = tr.idle_gaps()
    if g.empty:
        return pd.DataFrame(columns=["start_ms", "gap_ms", "cause", "cpu_ranges", "cpu_ops"])
    g = g.nlargest(top, "gap_us").sort_values("start_us")
    return pd.DataFrame({"start_ms": g["start_us"] / 1e3, "gap_ms": g["gap_us"] / 1e3, "cause": g["cause"],
                         "cpu_ranges": g["ranges"], "cpu_ops": g["ops"]}).reset_index(drop=True)


def hot_kernels(tr: Trace, top: int = 5) -> pd.DataFrame:
    """Kernels by total GPU time that the profiled steps launched (the series' attribution rule,
    :meth:`~infralens_lab.parse.trace.Trace.gpu_step`): full name (the table shortens it for display), launches,
    total ms and share of that kernel time. Work a CPU running ahead left queued before the profiled steps is
    left out, so launches divide evenly by the steps when every step runs the same kernels."""
    k = tr.kernels()
    if k.empty:
        return k
    out = pd.DataFrame({"kernel": list(k["name"]),
                        "launches": k["count"], "total_ms": k["total_us"] / 1e3, "pct_of_kernel_time": k["pct"]})
    return out.head(top)


def hot_kernel_name(tr: Trace) -> str | None:
    """Full name of the kernel with the most GPU time in ``tr`` (None for a CPU-only trace)."""
    k = tr.kernels()
    return None if k.empty else str(k["name"].iloc[0])


__all__ = ["gap_view", "hot_kernel_name", "hot_kernels", "ops_by_count", "ranges_view"]
