"""A timeline figure of a torch.profiler trace: ranges on top, GPU streams below, idle gaps shaded.

:func:`timeline` draws one row per ``record_function`` range name (CPU side: ``data``,
``forward``...), then one row per CUDA stream with its kernels and copies, on a time axis in
milliseconds from the first event. GPU idle gaps (from :meth:`Trace.idle_gaps`) are shaded
across the whole figure and labelled with their dominant cause, so a pipeline bubble reads at
a glance. Returns the matplotlib Figure; needs no IPython.
"""
from __future__ import annotations

from collections.abc import Sequence

RANGE_COLORS = {"data": "#e45756", "forward": "#4c78a8", "backward": "#72b7b2", "optimizer": "#54a24b",
                "log": "#b279a2"}
GPU_COLORS = {"kernel": "#4c78a8", "gpu_memcpy": "#f58518", "gpu_memset": "#9d755d"}
GAP_COLOR = "#ff9da6"


def timeline(trace, ranges: Sequence[str] | None = None, min_gap_us: float = 50.0, window_ms: tuple | None = None,
             title: str = "", label_gaps: int = 12, ax=None):
    """Figure of ``trace`` (a :class:`~infralens_lab.parse.trace.Trace`).

    ``ranges``: range names to draw, top to bottom (default: all but ``ProfilerStep#N``, in order of
    first appearance). ``window_ms``: ``(start, end)`` to zoom. ``label_gaps``: label at most this
    many of the longest gaps (only those at least 1% of the time span wide, never overlapping). ``ax``: draw into an existing Axes.
    """
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here
    from matplotlib.patches import Patch  # heavy: matplotlib, only here

    ev = trace.events
    rng = ev[(ev["cat"] == "user_annotation") & ~ev["name"].str.startswith("ProfilerStep")]
    if ranges is None:
        ranges = list(dict.fromkeys(rng.sort_values("start_us")["name"]))
    gpu = trace.gpu_events()
    streams = sorted(gpu["stream"].dropna().unique().tolist()) if len(gpu) else []
    rows = [f"range: {r}" for r in ranges] + [f"GPU stream {int(s)}" for s in streams]
    if ax is None:
        fig, ax = plt.subplots(figsize=(11, 0.55 * max(len(rows), 2) + 1.4))
    else:
        fig = ax.figure
    y = {name: len(rows) - 1 - i for i, name in enumerate(rows)}
    for r in ranges:
        sub = rng[rng["name"] == r]
        ax.broken_barh(list(zip(sub["start_us"] / 1e3, sub["dur"] / 1e3, strict=True)), (y[f"range: {r}"] - 0.4, 0.8),
                       facecolors=RANGE_COLORS.get(r, "#bab0ac"))
    for s in streams:
        sub = gpu[gpu["stream"] == s]
        for cat, color in GPU_COLORS.items():
            c = sub[sub["cat"] == cat]
            if len(c):
                ax.broken_barh(list(zip(c["start_us"] / 1e3, c["dur_us"] / 1e3, strict=True)),
                               (y[f"GPU stream {int(s)}"] - 0.4, 0.8), facecolors=color)
    gaps = trace.idle_gaps(min_gap_us) if len(gpu) else None
    if gaps is not None and len(gaps):
        lo_ms, hi_ms = window_ms or (0.0, float(ev["end_us"].max()) / 1e3)
        span = max(hi_ms - lo_ms, 1e-9)
        placed: list[float] = []
        for _, g in gaps.sort_values("gap_us", ascending=False).iterrows():
            a, b = g["start_us"] / 1e3, g["end_us"] / 1e3
            ax.axvspan(a, b, color=GAP_COLOR, alpha=0.35, lw=0)
            mid = (a + b) / 2
            # label only gaps wide enough to see, largest first, never two labels on top of each other
            if (len(placed) < label_gaps and b - a >= 0.01 * span and lo_ms <= mid <= hi_ms
                    and all(abs(mid - m) > 0.08 * span for m in placed)):
                placed.append(mid)
                ax.text(mid, len(rows) - 0.45, f"idle {g['gap_us'] / 1e3:.2f} ms\n{g['cause']}",
                        ha="center", va="bottom", fontsize=7, color="#9e0142")
    ax.set_yticks([y[r] for r in rows], rows)
    ax.set_ylim(-0.7, len(rows) + 0.6)
    ax.set_xlabel("time (ms from first event)")
    if window_ms is not None:
        ax.set_xlim(*window_ms)
    handles = [Patch(color=c, label=k.replace("gpu_", "")) for k, c in GPU_COLORS.items()]
    if gaps is not None and len(gaps):
        handles.append(Patch(color=GAP_COLOR, alpha=0.35, label=f"GPU idle > {min_gap_us:g} µs"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14 - 0.3 / max(len(rows), 2)),
              fontsize=7, ncol=len(handles), frameon=False)
    if not len(gpu):
        ax.text(0.5, 0.02, "CPU-only trace: no GPU rows", transform=ax.transAxes, ha="center", fontsize=8)
    ax.set_title(title or "torch.profiler timeline")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
