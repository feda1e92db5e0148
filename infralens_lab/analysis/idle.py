"""Where a trace's GPU idle time goes, read from a :class:`~infralens_lab.parse.trace.Trace`: the tables
``python -m infralens_lab analyze PATH`` prints beside the steps (issue 40), each past what Holistic Trace
Analysis (HTA 0.5.0) computes.

* :func:`idle_accounting`: ALL idle time of the steady window (:meth:`Trace.steady_window`), the gaps over the
  threshold by CPU cause (:meth:`Trace.idle_gaps`) and the short gaps under it as their own row, so the rows
  plus the merged busy time make the window.
* :func:`stream_gaps` / :func:`stream_idle`: why each stream waited (host wait, other-stream wait, other);
  HTA's idle time breakdown with its rule written down and its quirks fixed (see :func:`stream_gaps`).
* :func:`launch_records` / :func:`launch_delay`: CPU launch call start to GPU start, and the call's own time,
  per kind of launch call (HTA's cuda_kernel_launch_stats, which leaves out ``cuLaunchKernel`` and graphs).
* :func:`short_kernels`: kernels under 10 µs, what they run and the launch overhead they carry.

Everything covers the work the profiled steps launched (the attribution rule, :meth:`Trace.gpu_step`).
Times are µs in ``_us`` columns and ms in ``_ms`` columns, from the trace's first event.
"""
from __future__ import annotations

import weakref

import numpy as np
import pandas as pd

from ..parse.trace import CAUSES, GRAPH_LAUNCH_CALLS, Trace, union
from ..stats import percentile

SHORT_ROW = "short gaps under {t:g} µs (back-to-back launches)"
SHORT_KERNEL_US = 10.0
STREAM_CATEGORIES = ("host wait", "other-stream wait", "other")
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Trace -> frames computed once (it does not change)


def _gpu(tr: Trace, scope: str = "steps") -> pd.DataFrame:
    """:meth:`Trace.gpu_events` in ``scope``, computed once per trace (the tables here read it several times)."""
    kept = _KEPT.setdefault(tr, {})
    if ("gpu", scope) not in kept:
        kept[("gpu", scope)] = tr.gpu_events(scope=scope)
    return kept[("gpu", scope)]


def window(tr: Trace) -> tuple[float, float, int]:
    """``(start_us, end_us, periods)``: the steady window (:meth:`Trace.steady_window`); with fewer than two
    profiled steps of GPU work, the work's first start to its last end as one period (what
    :meth:`Trace.summary` measures on). ValueError on a trace without GPU work."""
    sw = tr.steady_window()
    if sw is not None:
        return sw
    busy = tr.busy()
    if not busy:
        raise ValueError("no GPU work launched by the profiled steps; expected kernels, memcpys or memsets")
    return busy[0][0], busy[-1][1], 1


def window_split(tr: Trace, a: float, b: float, min_gap_us: float) -> tuple[float, np.ndarray, np.ndarray]:
    """The window ``[a, b]`` (µs) split by the merged busy time of the work the profiled steps launched
    (:meth:`Trace.busy`): ``(busy_us, inside, over)``, the busy time inside the window, each gap's part inside it
    (one per pair of consecutive busy intervals; 0 for a gap outside) and whether the gap, by its full length, is
    longer than ``min_gap_us`` (:meth:`Trace.idle_gaps`' rule). ``busy_us + inside.sum()`` is the window's length
    when its edges are ends of GPU work, as :meth:`Trace.steady_window`'s are."""
    busy = np.array(tr.busy()).reshape(-1, 2)
    busy_us = float((np.clip(busy[:, 1], a, b) - np.clip(busy[:, 0], a, b)).sum())
    g0, g1 = busy[:-1, 1], busy[1:, 0]
    return busy_us, np.clip(g1, a, b) - np.clip(g0, a, b), (g1 - g0) > min_gap_us


def idle_accounting(tr: Trace, min_gap_us: float = 50.0) -> pd.DataFrame:
    """All GPU idle time (no kernel, memcpy or memset on any stream) inside :func:`window`: one row per CPU cause
    of the gaps over ``min_gap_us`` (:meth:`Trace.idle_gaps`, each moment charged to the first matching cause)
    and one row, :data:`SHORT_ROW`, for the gaps at or under it (back-to-back launches, which
    :func:`~infralens_lab.analysis.joins.idle_budget` calls ``idle_under``). Columns: ``cause``, ``gaps`` (gaps
    whose dominant cause it is; for the short row, the short gaps), ``idle_ms`` (in the window), ``ms_per_step``
    (over its periods) and ``share_of_idle`` (of all idle time in the window: the shares sum to 1). Rows plus
    ``attrs['busy_us']`` (merged busy time) make ``attrs['window_us']``. A gap straddling a window edge counts
    by its full length against the threshold and by its part inside the window (its causes scaled to it);
    the window's edges are ends of GPU work, so no committed trace has one."""
    a, b, n = window(tr)
    busy_us, inside, over = window_split(tr, a, b, min_gap_us)
    short = ~over  # the gaps Trace.idle_gaps leaves out
    gaps = tr.idle_gaps(min_gap_us)
    rows = []
    if len(gaps):
        gs, ge = gaps["start_us"].to_numpy(float), gaps["end_us"].to_numpy(float)
        part = np.clip(ge, a, b) - np.clip(gs, a, b)
        scale = np.where(ge > gs, part / np.where(ge > gs, ge - gs, 1.0), 0.0)
        for c in CAUSES:
            rows.append({"cause": c, "gaps": int(((gaps["cause"] == c).to_numpy() & (part > 0)).sum()),
                         "idle_us": float((gaps[f"{c}_us"].to_numpy(float) * scale).sum())})
    else:
        rows += [{"cause": c, "gaps": 0, "idle_us": 0.0} for c in CAUSES]
    rows.append({"cause": SHORT_ROW.format(t=min_gap_us), "gaps": int((short & (inside > 0)).sum()),
                 "idle_us": float(inside[short].sum())})
    out = pd.DataFrame(rows)
    total = float(out["idle_us"].sum())
    out = out.sort_values(["idle_us", "cause"], ascending=[False, True]).reset_index(drop=True)
    out = pd.DataFrame({"cause": out["cause"], "gaps": out["gaps"], "idle_ms": out["idle_us"] / 1e3,
                        "ms_per_step": out["idle_us"] / n / 1e3,
                        "share_of_idle": out["idle_us"] / total if total > 0 else 0.0})
    out.attrs.update({"window_us": b - a, "busy_us": busy_us, "periods": n, "min_gap_us": float(min_gap_us)})
    return out


def launch_records(tr: Trace, scope: str = "steps") -> pd.DataFrame:
    """One row per GPU event (kernel, memcpy, memset) in ``scope`` whose launch call the trace holds
    (:attr:`Trace.launcher`), in start order: ``name, cat, stream, start_us, end_us, dur_us``, the call's
    ``call`` (its name: ``cudaLaunchKernel``, ``cuLaunchKernel``, ``cudaGraphLaunch``, ``cudaMemcpyAsync``...),
    ``call_row`` (its event row: one graph launch call launches many kernels), ``call_start_us``,
    ``call_dur_us`` and ``delay_us`` = GPU start - call start (for a graph, each kernel's delay from the one
    graph launch call). GPU events whose call is missing (warm-up leftovers) are left out."""
    kept = _KEPT.setdefault(tr, {})
    if ("launch", scope) in kept:
        return kept[("launch", scope)].copy()
    g = _gpu(tr, scope)
    ev = tr.events
    call_row = pd.Series(tr.launcher, dtype="int64").reindex(g.index)
    g = g[call_row.notna().to_numpy()]
    rows = call_row.dropna().astype("int64").to_numpy()
    calls = ev.loc[rows]
    out = pd.DataFrame({"name": g["name"].to_numpy(), "cat": g["cat"].to_numpy(),
                        "stream": g["stream"].to_numpy(), "start_us": g["start_us"].to_numpy(float),
                        "end_us": g["end_us"].to_numpy(float), "dur_us": g["dur_us"].to_numpy(float),
                        "call": calls["name"].to_numpy(), "call_row": rows,
                        "call_start_us": calls["start_us"].to_numpy(float),
                        "call_dur_us": calls["dur"].to_numpy(float)})
    out["delay_us"] = out["start_us"] - out["call_start_us"]
    kept[("launch", scope)] = out
    return out.copy()


def stream_gaps(tr: Trace, scope: str = "steps") -> pd.DataFrame:
    """Every idle gap between consecutive GPU events on one stream, classified by why that stream waited.

    The rule: on each stream (events in ``scope`` sorted by start), the gap from the previous event's end
    ``e`` to the next event's start ``s`` (``s > e``; overlapping events leave none) is

    * ``host wait`` when the CPU call that launched the next event started at or after ``e``: the stream had
      nothing queued, the GPU waited on the host;
    * ``other-stream wait`` when the next event was launched before ``e`` and an event on another stream of
      the trace ended inside ``(e, s]``: it waited on work elsewhere (an event wait, a collective on NCCL's
      stream, a copy on a side stream);
    * ``other`` otherwise: launched in time, nothing ended elsewhere: the GPU's own latency between
      back-to-back work, or a wait the trace does not show. A next event whose launch call is not in the
      trace is ``other`` too.

    HTA's ``get_idle_time_breakdown`` uses the same host-wait test (its ``ts_runtime > prev_end_ts``, which
    differs only at equality) over the GPU events from the first profiled step on (on the committed traces,
    the work the profiled steps launched: ``scope='steps'``; ``'all'`` adds the warm-up leftovers HTA crops);
    it calls ``kernel wait`` a non-host gap shorter than ``consecutive_kernel_delay`` (documented as 30 ns,
    but compared with µs timestamps, so 30 µs) and ``other`` the rest, whatever ran elsewhere: a gap where a
    stream waited 2 ms on an all-reduce is ``other`` there, ``other-stream wait`` here. So HTA's host wait
    equals ours, and its kernel wait plus other equals our other-stream wait plus other (tested on the H100
    bubble/fixed pair). Columns: ``stream, start_us, end_us, gap_us, call_start_us`` (NaN when unknown),
    ``category``."""
    g = _gpu(tr, scope)
    g = g[g["stream"].notna()]
    call = pd.Series(tr.launcher, dtype="int64").reindex(g.index)
    call_start = np.full(len(g), np.nan)
    ok = call.notna().to_numpy()
    call_start[ok] = tr.events.loc[call[ok].astype("int64").to_numpy(), "start_us"].to_numpy(float)
    g = g.assign(call_start_us=call_start).sort_values(["stream", "start_us"], kind="stable")
    parts = []
    for stream, s in g.groupby("stream", sort=True):
        if len(s) < 2:
            continue
        e_prev = np.maximum.accumulate(s["end_us"].to_numpy(float))[:-1]  # a long event may outlast the next
        start = s["start_us"].to_numpy(float)[1:]
        keep = start > e_prev
        if not keep.any():
            continue
        e_prev, start = e_prev[keep], start[keep]
        launch = s["call_start_us"].to_numpy(float)[1:][keep]
        others = np.sort(g.loc[g["stream"] != stream, "end_us"].to_numpy(float))
        ended = np.searchsorted(others, start, side="right") > np.searchsorted(others, e_prev, side="right")
        host = launch >= e_prev  # NaN compares False: unknown launches are never host wait
        cat = np.where(host, STREAM_CATEGORIES[0], np.where(ended, STREAM_CATEGORIES[1], STREAM_CATEGORIES[2]))
        parts.append(pd.DataFrame({"stream": stream, "start_us": e_prev, "end_us": start, "gap_us": start - e_prev,
                                   "call_start_us": launch, "category": cat}))
    cols = ["stream", "start_us", "end_us", "gap_us", "call_start_us", "category"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def _stream_kind(names: pd.Series, cats: pd.Series) -> str:
    if names.str.startswith("nccl").any():
        return "nccl"
    if (cats == "kernel").any():
        return "compute"
    return "copy" if (cats == "gpu_memcpy").any() else "memset"


def stream_idle(tr: Trace) -> pd.DataFrame:
    """Per stream, its idle time inside :func:`window` by why it waited (:func:`stream_gaps`' rule, each gap
    clipped to the window): ``stream``, ``kind`` (``nccl`` when it runs ``nccl*`` kernels such as
    ``ncclDevKernel_*``, else ``compute``, ``copy`` or ``memset``), ``events`` (in the window), ``busy_ms``
    (merged time of its events in the window), ``idle_ms`` (the gaps between its consecutive events, in the
    window), ``host_wait_ms``, ``other_stream_wait_ms``, ``other_ms`` (they sum to ``idle_ms``),
    ``host_wait_share`` (of ``idle_ms``). ``busy_ms + idle_ms`` is the window when the stream has work at
    both of its ends, less otherwise (before its first event and after its last it is not waiting)."""
    a, b, _ = window(tr)
    g = _gpu(tr)
    g = g[g["stream"].notna()]
    gaps = stream_gaps(tr)
    gaps = gaps.assign(in_us=np.clip(gaps["end_us"].to_numpy(float), a, b)
                       - np.clip(gaps["start_us"].to_numpy(float), a, b))
    rows = []
    for stream, s in g.groupby("stream", sort=True):
        runs = union(s["start_us"], s["end_us"])
        busy = float((np.clip(runs[:, 1], a, b) - np.clip(runs[:, 0], a, b)).sum())
        mine = gaps[gaps["stream"] == stream]
        by = {c: float(mine.loc[mine["category"] == c, "in_us"].sum()) for c in STREAM_CATEGORIES}
        idle = sum(by.values())
        rows.append({"stream": int(stream) if float(stream).is_integer() else stream,
                     "kind": _stream_kind(s["name"], s["cat"]),
                     "events": int(((s["end_us"] > a) & (s["start_us"] < b)).sum()), "busy_ms": busy / 1e3,
                     "idle_ms": idle / 1e3, "host_wait_ms": by["host wait"] / 1e3,
                     "other_stream_wait_ms": by["other-stream wait"] / 1e3, "other_ms": by["other"] / 1e3,
                     "host_wait_share": by["host wait"] / idle if idle > 0 else 0.0})
    cols = ["stream", "kind", "events", "busy_ms", "idle_ms", "host_wait_ms", "other_stream_wait_ms", "other_ms",
            "host_wait_share"]
    return pd.DataFrame(rows, columns=cols)


def _dist(x: np.ndarray, prefix: str) -> dict:
    if not len(x):
        return {f"{prefix}_median_us": np.nan, f"{prefix}_p90_us": np.nan, f"{prefix}_max_us": np.nan}
    xs = x.tolist()
    return {f"{prefix}_median_us": percentile(xs, 50), f"{prefix}_p90_us": percentile(xs, 90),
            f"{prefix}_max_us": float(np.max(x))}


def launch_delay(tr: Trace) -> pd.DataFrame:
    """Launch delay and launch call time of the work the profiled steps launched (:func:`launch_records`),
    one row for all launches then one per kind of launch call, most GPU events first: ``call``,
    ``gpu_events``, ``calls`` (distinct calls: a ``cudaGraphLaunch`` launches many kernels, each kernel's delay
    counted from that one call), ``delay_median_us``, ``delay_p90_us``, ``delay_max_us`` (GPU start - the
    call's start: the call's own time, the queue ahead of the work and the GPU's latency), ``call_median_us``,
    ``call_p90_us``, ``call_max_us`` (the call's duration on the CPU, once per call). HTA's
    cuda_kernel_launch_stats measures from the call's end, clipped at 0, and only for cudaLaunchKernel,
    cudaLaunchKernelExC, cudaMemcpyAsync and cudaMemsetAsync. Empty when no launch call was recorded."""
    r = launch_records(tr)
    cols = ["call", "gpu_events", "calls", "delay_median_us", "delay_p90_us", "delay_max_us", "call_median_us",
            "call_p90_us", "call_max_us"]
    if r.empty:
        return pd.DataFrame(columns=cols)
    groups = [("all launch calls", r)] + [(name, sub) for name, sub in sorted(
        r.groupby("call"), key=lambda kv: (-len(kv[1]), kv[0]))]
    rows = []
    for name, sub in groups:
        once = sub.drop_duplicates("call_row")
        rows.append({"call": name + (" (per kernel, from the graph launch)" if name in GRAPH_LAUNCH_CALLS else ""),
                     "gpu_events": len(sub), "calls": len(once), **_dist(sub["delay_us"].to_numpy(float), "delay"),
                     **_dist(once["call_dur_us"].to_numpy(float), "call")})
    return pd.DataFrame(rows, columns=cols)


def short_kernels(tr: Trace, under_us: float = SHORT_KERNEL_US, top: int = 5) -> pd.DataFrame:
    """Kernels the profiled steps launched that ran under ``under_us`` (10 µs; sub-µs ones included) and what
    they cost: a first row ``kernel`` = ``all kernels under 10 µs``, then the ``top`` most frequent short kernels
    by name. Columns: ``kernel``, ``count``, ``share_of_kernels`` (of all kernels, by count), ``per_step``
    (count over the profiled steps that launched kernels), ``total_ms`` (their GPU time),
    ``share_of_kernel_time``, ``launch_calls`` (distinct calls that launched them: one graph launch counts once),
    ``call_median_us`` (median duration of those calls), ``launch_overhead_ms`` (= ``launch_calls`` ×
    ``call_median_us``: CPU time spent launching them). ``attrs['kernels']`` is the number of kernels. HTA's
    short-kernel view flags a kernel whose GPU time is below its launch call's CPU time; this counts by a fixed
    threshold and prices the launches. Empty (no rows) when no kernel is that short."""
    k = _gpu(tr)
    k = k[k["cat"] == "kernel"]
    r = launch_records(tr)
    r = r[(r["cat"] == "kernel") & (r["dur_us"] < under_us)]
    short = k[k["dur_us"] < under_us]
    n_k, t_k = len(k), float(k["dur_us"].sum())
    steps = max(1, int(k.loc[k["step"] >= 0, "step"].nunique())) if n_k else 1
    cols = ["kernel", "count", "share_of_kernels", "per_step", "total_ms", "share_of_kernel_time", "launch_calls",
            "call_median_us", "launch_overhead_ms"]

    def row(label: str, ks: pd.DataFrame, rs: pd.DataFrame) -> dict:
        once = rs.drop_duplicates("call_row")
        med = percentile(once["call_dur_us"].tolist(), 50) if len(once) else np.nan
        return {"kernel": label, "count": len(ks), "share_of_kernels": len(ks) / n_k, "per_step": len(ks) / steps,
                "total_ms": float(ks["dur_us"].sum()) / 1e3,
                "share_of_kernel_time": float(ks["dur_us"].sum()) / t_k if t_k > 0 else 0.0,
                "launch_calls": len(once), "call_median_us": med,
                "launch_overhead_ms": len(once) * med / 1e3 if len(once) else 0.0}

    if short.empty:
        out = pd.DataFrame(columns=cols)
    else:
        counts = short.groupby("name").size().reset_index(name="n").sort_values(["n", "name"], ascending=[False, True])
        rows = [row(f"all kernels under {under_us:g} µs", short, r)]
        rows += [row(name, short[short["name"] == name], r[r["name"] == name]) for name in counts["name"].head(top)]
        out = pd.DataFrame(rows, columns=cols)
    out.attrs["kernels"] = n_k
    return out


__all__ = ["SHORT_KERNEL_US", "SHORT_ROW", "STREAM_CATEGORIES", "idle_accounting", "launch_delay", "launch_records",
           "short_kernels", "stream_gaps", "stream_idle", "window", "window_split"]
