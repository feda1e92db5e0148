"""The Gluon kernel's ping-pong schedule as a picture (lab 04's Hopper section): one row per partition, one bar per
segment of :func:`infralens_lab.analysis.pingpong.timeline`, coloured by the unit it occupies."""
from __future__ import annotations

COLOURS = {"tensor cores": "#d62728", "CUDA cores": "#1f77b4", "TMA": "#7f7f7f"}
_FONT = 10


def schedule_figure(segments, title: str = "attn_fwd_gluon (pingpong): who holds the tensor cores when"):
    """A Gantt chart of ``segments`` (columns partition, unit, what, start, end; time in turns): rows top to bottom
    in the order the partitions first appear, each bar labelled with what it does."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here
    from matplotlib.patches import Patch

    need = {"partition", "unit", "what", "start", "end"}
    if not need <= set(getattr(segments, "columns", [])) or len(segments) == 0:
        raise ValueError(f"schedule_figure: segments has columns {list(getattr(segments, 'columns', []))} and "
                         f"{len(segments) if hasattr(segments, '__len__') else 0} rows, expected the columns "
                         f"{sorted(need)} and at least one row (analysis.pingpong.timeline)")
    unknown = sorted(set(segments["unit"]) - set(COLOURS))
    if unknown:
        raise ValueError(f"schedule_figure: units {unknown}, expected some of {list(COLOURS)}")
    parts = list(dict.fromkeys(segments["partition"]))
    fig, ax = plt.subplots(figsize=(10.5, 0.9 + 0.75 * len(parts)))
    for y, part in enumerate(reversed(parts)):
        for r in segments[segments["partition"] == part].itertuples():
            ax.barh(y, r.end - r.start, left=r.start, height=0.6, color=COLOURS[r.unit], alpha=0.85,
                    edgecolor="white")
            ax.text((r.start + r.end) / 2, y, r.what, ha="center", va="center", fontsize=_FONT - 2, color="white")
    ax.set_yticks(range(len(parts)), list(reversed(parts)), fontsize=_FONT)
    lo, hi = int(segments["start"].min()), int(segments["end"].max())
    ax.set_xticks(range(lo, hi + 1))
    ax.set_xlabel("time, in turns (one turn: one warpgroup's two GEMMs); a schematic from the partition layout, "
                  "not a measured trace", fontsize=_FONT - 1)
    ax.tick_params(labelsize=_FONT - 1)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=[Patch(color=c, label=u) for u, c in COLOURS.items() if u in set(segments["unit"])],
              fontsize=_FONT - 1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title, fontsize=_FONT + 1)
    fig.tight_layout()
    return fig
