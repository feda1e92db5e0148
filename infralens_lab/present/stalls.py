"""Figures for "why does this kernel behave this way": stall mixes and the copy family's bytes.

:func:`stall_mix` turns a long stall table (what
:func:`infralens_lab.parse.ncu.stall_breakdown` returns: one row per launch and ``reason``
with ``samples``) into one row per label (a config, a kernel, a stride) and one column per
reason, each a share of that label's sampled warp states; the smaller reasons are folded into
``other``. :func:`stall_bars` draws that mix as stacked horizontal bars, one per label, so the
stride family or naive-vs-tiled attention can be compared at a glance. :func:`copy_family_figure`
draws the sector model's predictions against the measured sectors per request, DRAM bytes read
per useful byte and useful bandwidth across the strides (the table
:func:`infralens_lab.present.tables.copy_family` builds). Nothing here reads files or measures:
pass numbers that came from evidence. Every function returns a matplotlib Figure or a
DataFrame and needs no IPython.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

# Stall reasons get fixed colours so the same reason looks the same in every figure of a lab.
REASON_COLORS = {
    "long_scoreboard": "#d62728", "short_scoreboard": "#ff9896", "barrier": "#9467bd", "lg_throttle": "#ff7f0e",
    "mio_throttle": "#ffbb78", "math_pipe_throttle": "#2ca02c", "tex_throttle": "#98df8a", "wait": "#1f77b4",
    "not_selected": "#aec7e8", "selected": "#17becf", "no_instruction": "#8c564b", "dispatch_stall": "#c49c94",
    "drain": "#e377c2", "membar": "#f7b6d2", "branch_resolving": "#bcbd22", "sleeping": "#dbdb8d",
    "misc": "#7f7f7f", "imc_miss": "#c7c7c7", "gmma": "#393b79", "other": "#d9d9d9",
}
_FONT = 9


def _need_columns(df, cols: Sequence[str], what: str) -> None:
    if not hasattr(df, "columns"):
        raise TypeError(f"{what}: got {type(df).__name__}; expected a pandas DataFrame")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: table lacks columns {missing}; it has {list(df.columns)}")


def stall_mix(breakdown, by: str = "config", top: int = 6, order: Sequence[str] | None = None):
    """Share of sampled warp states per reason, one row per ``by`` label (DataFrame, fractions 0..1).

    ``breakdown``: long table with columns ``by``, ``reason`` and ``samples`` (summed over
    launches of a label). The ``top`` reasons with the most samples over all labels keep their
    own column, largest first; the rest are summed into ``other``. ``order``: labels in the order
    wanted (default: first appearance). Rows sum to 1. A label with no samples raises ValueError.
    """
    _need_columns(breakdown, [by, "reason", "samples"], "stall_mix")
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"stall_mix: top={top!r}; expected an int >= 1")
    if len(breakdown) == 0:
        raise ValueError("stall_mix: the stall table is empty; expected rows of (label, reason, samples)")
    df = breakdown[[by, "reason", "samples"]].copy()
    df["samples"] = pd.to_numeric(df["samples"], errors="coerce").fillna(0.0)
    wide = df.pivot_table(index=by, columns="reason", values="samples", aggfunc="sum", sort=False).fillna(0.0)
    labels = list(dict.fromkeys(df[by])) if order is None else list(order)
    unknown = [lab for lab in labels if lab not in wide.index]
    if unknown:
        raise ValueError(f"stall_mix: labels {unknown} are not in the table; it has {list(wide.index)}")
    wide = wide.loc[labels]
    totals = wide.sum(axis=1)
    empty = [lab for lab, t in totals.items() if not t > 0]
    if empty:
        raise ValueError(f"stall_mix: labels {empty} have no stall samples; expected sampled counts > 0")
    overall = wide.sum(axis=0).sort_values(ascending=False, kind="stable")
    keep = list(overall.index[:top])
    out = wide[keep].div(totals, axis=0)
    rest = [c for c in wide.columns if c not in keep]
    if rest:
        out["other"] = wide[rest].sum(axis=1) / totals
    out.index.name = by
    out.columns.name = None
    return out


def stall_bars(breakdown, by: str = "config", top: int = 6, order: Sequence[str] | None = None,
               labels: dict | None = None, title: str = "Where warps spent their sampled cycles", ax=None):
    """Stacked horizontal bars of :func:`stall_mix`: one bar per label, one colour per reason.

    ``labels`` renames the bars (e.g. a long ncu config label -> ``stride 8``). Shares are in
    percent of that label's samples; a share of at least 8% is written on its segment.
    """
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here

    mix = stall_mix(breakdown, by=by, top=top, order=order)
    names = [str((labels or {}).get(lab, lab)) for lab in mix.index]
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 0.45 * len(mix) + 1.8))
    else:
        fig = ax.figure
    ys = list(range(len(mix)))[::-1]
    left = [0.0] * len(mix)
    for reason in mix.columns:
        vals = [100 * v for v in mix[reason]]
        ax.barh(ys, vals, left=left, color=REASON_COLORS.get(reason, "#bab0ac"), label=reason, height=0.7,
                edgecolor="white", linewidth=0.5)
        for y, lo, v in zip(ys, left, vals, strict=True):
            if v >= 8:
                ax.text(lo + v / 2, y, f"{v:.0f}%", ha="center", va="center", fontsize=_FONT - 1)
        left = [lo + v for lo, v in zip(left, vals, strict=True)]
    ax.set_yticks(ys, names, fontsize=_FONT)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of sampled warp states (%)", fontsize=_FONT)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18 if len(mix) > 3 else -0.3), ncol=min(4, len(mix.columns)),
              fontsize=_FONT - 1, frameon=False)
    ax.set_title(title, fontsize=_FONT + 1)
    fig.tight_layout()
    return fig


def copy_family_figure(table, title: str = "Strided copies: the sector model against the counters"):
    """Three panels over the stride: sectors per request, DRAM bytes read per useful byte, and
    useful bandwidth as a fraction of the coalesced copy's; predicted (hollow, dashed) vs
    measured (filled).

    ``table``: one row per stride with ``stride``, ``pred_sectors_per_req``, ``sectors_per_req``,
    ``pred_read_x``, ``read_x`` and, if the benchmark is there, ``pred_useful_fraction`` and
    ``useful_fraction`` (rows whose measured value is missing are left out of that panel).
    """
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here

    _need_columns(table, ["stride", "pred_sectors_per_req", "sectors_per_req", "pred_read_x", "read_x"],
                  "copy_family_figure")
    if len(table) == 0:
        raise ValueError("copy_family_figure: the table is empty; expected one row per stride")
    panels = [("pred_sectors_per_req", "sectors_per_req", "sectors per request", "L1: sectors per warp load"),
              ("pred_read_x", "read_x", "DRAM bytes read / useful byte", "DRAM: read amplification")]
    if "useful_fraction" in table.columns and table["useful_fraction"].notna().any():
        panels.append(("pred_useful_fraction", "useful_fraction", "useful bandwidth / coalesced",
                       "time: useful bandwidth"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.0 * len(panels), 3.4))
    is_coalesced = table["label"] == "coalesced" if "label" in table.columns else table["stride"] < 0
    for ax, (pred, meas, ylabel, head) in zip(axes, panels, strict=True):
        t = table[~is_coalesced].sort_values("stride")  # the strided family is the line
        ax.plot(t["stride"], t[pred], "o--", mfc="white", color="#7f7f7f", label="predicted (sector model)")
        m = t[t[meas].notna()]
        ax.plot(m["stride"], m[meas], "o-", color="#d62728", label="measured (strided)")
        c = table[is_coalesced & table[meas].notna()]
        if len(c):
            ax.plot(c["stride"], c[meas], "*", ms=12, color="#1f77b4", label="measured (coalesced copy)")
        ax.set_ylim(bottom=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(table["stride"])), [str(int(v)) for v in sorted(set(table["stride"]))])
        ax.set_xlabel("stride (elements)", fontsize=_FONT)
        ax.set_ylabel(ylabel, fontsize=_FONT)
        ax.set_title(head, fontsize=_FONT + 1)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=_FONT)
    axes[0].legend(fontsize=_FONT - 1, loc="lower right")
    fig.suptitle(title, fontsize=_FONT + 2)
    fig.tight_layout()
    return fig


def traffic_bars(table, label: str = "kernel", predicted: str = "pred_dram_mb", measured: str = "dram_mb",
                 title: str = "DRAM traffic per kernel: predicted vs measured", unit: str = "MB"):
    """Grouped bars (log scale) of predicted and measured DRAM bytes per kernel, e.g. the three naive
    attention kernels and the tiled one. Rows with no measured value show the prediction only."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here

    _need_columns(table, [label, predicted, measured], "traffic_bars")
    if len(table) == 0:
        raise ValueError("traffic_bars: the table is empty; expected one row per kernel")
    fig, ax = plt.subplots(figsize=(1.3 * len(table) + 3, 3.4))
    xs = list(range(len(table)))
    ax.bar([x - 0.2 for x in xs], table[predicted], width=0.4, color="#c7c7c7", edgecolor="#7f7f7f",
           label="predicted (traffic model)")
    ax.bar([x + 0.2 for x in xs], table[measured].fillna(0), width=0.4, color="#1f77b4", label="measured (ncu)")
    ax.set_yscale("log")
    ax.set_xticks(xs, [str(v) for v in table[label]], fontsize=_FONT)
    ax.set_ylabel(f"DRAM bytes read + written ({unit})", fontsize=_FONT)
    ax.set_title(title, fontsize=_FONT + 1)
    ax.legend(fontsize=_FONT - 1)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


__all__ = ["REASON_COLORS", "copy_family_figure", "stall_bars", "stall_mix", "traffic_bars"]
