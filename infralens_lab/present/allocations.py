"""The allocation timeline figure: allocated bytes event by event through one training step.

Input: the DataFrame of :func:`infralens_lab.measure.memory_timeline.timeline` (one row per allocator
event, with ``step``, ``phase`` and ``allocated_bytes``). One line per precision, phases shaded, the
bytes held when logging began drawn as a dashed floor. MiB = 2**20 bytes. Nothing here measures.
"""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ..units import MiB

_FONT = 10
PHASE_COLORS = {"forward": "#dbe9f6", "backward": "#fde2cf", "optimizer": "#dff2dc"}


def timeline_figure(timelines: Mapping[str, object], title: str = "Allocated bytes through one training step"):
    """``timelines``: label (e.g. ``"fp32"``) -> timeline DataFrame. Returns a matplotlib Figure."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here

    if not timelines:
        raise ValueError("timeline_figure needs at least one timeline; got none")
    fig, axes = plt.subplots(len(timelines), 1, figsize=(9, 2.6 * len(timelines) + 0.6), dpi=100, squeeze=False)
    for ax, (label, df) in zip(axes[:, 0], timelines.items(), strict=True):
        if not isinstance(df, pd.DataFrame) or not {"phase", "allocated_bytes"} <= set(df.columns):
            raise ValueError(f"timeline {label!r} is not a timeline DataFrame (needs phase, allocated_bytes)")
        x = range(len(df))
        start = 0
        for phase, n in df.groupby((df["phase"] != df["phase"].shift()).cumsum())["phase"].agg(["first", "size"]).values:
            ax.axvspan(start - 0.5, start + n - 0.5, color=PHASE_COLORS.get(phase, "#eeeeee"), lw=0)
            ax.text(start + n / 2, 0.98, phase, transform=ax.get_xaxis_transform(), ha="center", va="top",
                    fontsize=_FONT)
            start += n
        ax.step(list(x), df["allocated_bytes"] / MiB, where="post", color="#1f3b73", lw=1.4)
        base = df.attrs.get("baseline_bytes")
        if base:
            ax.axhline(base / MiB, ls="--", color="#555555", lw=1)
            ax.text(len(df) - 1, base / MiB, "allocated before the step (weights, optimizer states, other blocks) ", va="top",
                    ha="right", fontsize=_FONT - 1, color="#555555")  # under the floor, clear of the curve
        ax.set_ylabel(f"{label}: allocated (MiB)", fontsize=_FONT)
        ax.tick_params(labelsize=_FONT - 1)
        ax.set_ylim(0, 1.2 * max(df["allocated_bytes"].max(), base or 0) / MiB)  # headroom for the phase names
    axes[-1, 0].set_xlabel("allocator event (alloc or free), in order", fontsize=_FONT)
    axes[0, 0].set_title(title, fontsize=_FONT + 2)
    fig.tight_layout()
    return fig
