"""Figures of a data-parallel run: one step per rank on the shared clock, and the all-reduce bus bandwidth
against the link's peak. Drawing only: the intervals come from :mod:`infralens_lab.analysis.distributed`."""
from __future__ import annotations

import pandas as pd

from ..analysis import distributed

PHASES = (("forward", "#4c72b0"), ("backward compute", "#55a868"), ("all-reduce", "#c44e52"), ("optimizer", "#8172b2"))


def timeline_figure(traces: list, step: int = 1, title: str = ""):
    """One row per rank and phase of profiled step ``step``, every rank on the clock the profilers share
    (ms from the earliest rank's first interval)."""
    import matplotlib.pyplot as plt  # lazy: matplotlib only when a figure is drawn

    per = [distributed.phase_intervals(t, step) for t in traces]
    t0 = min(v[0][0] for p in per for v in p.values() if v)
    fig, ax = plt.subplots(figsize=(10, 1.3 + 1.3 * len(traces)))
    for r, p in enumerate(per):
        for k, (name, color) in enumerate(PHASES):
            y = r * (len(PHASES) + 1) + k
            ax.broken_barh([((s - t0) / 1e3, (e - s) / 1e3) for s, e in p[name]], (y, 0.8), facecolors=color,
                           edgecolors="white", linewidth=0.5, label=name if r == 0 else None)
    ax.set_yticks([r * (len(PHASES) + 1) + 1.5 for r in range(len(traces))], [f"rank {r}" for r in range(len(traces))])
    ax.invert_yaxis()
    ax.set_xlabel("ms on the shared clock (0 = earliest rank's first interval)")
    ax.set_title(title or f"One DDP step per rank (profiled step {step})")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize=9, ncol=4, frameon=False)
    fig.tight_layout()
    return fig


def busbw_figure(bench: pd.DataFrame, peak_gbs: float | None = None, peak_label: str = "", title: str = ""):
    """busbw (GB/s) against all-reduce size (MiB, log scale), with the link's peak as a line when there is one."""
    import matplotlib.pyplot as plt  # lazy: matplotlib only when a figure is drawn

    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.plot(bench["MiB"], bench["busbw_GBps"], marker="o", label="measured busbw")
    if peak_gbs:
        ax.axhline(peak_gbs, color="#c44e52", linestyle="--", label=f"{peak_label} {peak_gbs:g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("all-reduce size (MiB)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "All-reduce bus bandwidth by size")
    ax.legend(fontsize=9, frameon=False)
    fig.tight_layout()
    return fig
