"""Figures for the memory ledger: predicted against measured bars, the steady state under the peak,
and how the ledger's shares move as models grow.

Inputs are the DataFrames of :mod:`infralens_lab.analysis.ledger` (``category, bytes, ...``),
:mod:`infralens_lab.measure.memory` (``category, bytes, how``) and
:func:`infralens_lab.analysis.ledger.scaling_table` (one row per model, one column of bytes per
category). Sizes are drawn in MiB (2**20 bytes) for a small model and GB (1e9 bytes) for the
scaling figure, and every axis says which. Colours are fixed per category so the same term
looks the same in every figure of a lab. Nothing here measures or predicts anything.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..units import GB, MiB

_FONT = 9
CATEGORY_COLORS = {
    "weights": "#1f77b4",
    "gradients": "#ff7f0e",
    "optimizer states": "#2ca02c",
    "activations": "#d62728",
    "temporary buffers": "#9467bd",
    "communication buckets": "#8c564b",
    "KV cache": "#e377c2",
}
PERSISTENT = ("weights", "optimizer states")  # alive between steps in every setup


def _check_ledger(name: str, df, need=("category", "bytes")):
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{name} is {type(df).__name__}; expected a DataFrame with columns {list(need)}")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(f"{name} lacks columns {missing}; has {list(df.columns)}")
    return df


def _color(cat: str) -> str:
    return CATEGORY_COLORS.get(cat, "0.6")


def ledger_bars(ledgers: Mapping[str, object], categories: Sequence[str] | None = None,
                title: str = "Memory ledger", unit: str = "MiB"):
    """Horizontal grouped bars: one group per category, one bar per ledger (e.g. ``{"predicted":
    pred, "measured": meas}``), sizes in ``unit`` (``'MiB'`` or ``'GB'``) with the value printed at
    each bar's end. ``categories`` picks and orders the rows (default: the categories of the first
    ledger, in its order, that any ledger has a non-zero value for)."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here

    if not isinstance(ledgers, Mapping) or not ledgers:
        raise ValueError(f"ledgers must be a non-empty mapping name -> DataFrame; got {type(ledgers).__name__}")
    scale = {"MiB": MiB, "GB": GB}.get(unit)
    if scale is None:
        raise ValueError(f"unit {unit!r}; expected 'MiB' or 'GB'")
    tables = {k: dict(zip(_check_ledger(f"ledgers[{k!r}]", v)["category"], v["bytes"], strict=True)) for k, v in ledgers.items()}
    if categories is None:
        first = list(next(iter(tables.values())))
        categories = [c for c in first if c != "total" and any(t.get(c, 0) for t in tables.values())]
    categories = list(categories)
    if not categories:
        raise ValueError("no category has a non-zero value in any ledger; nothing to draw")
    n = len(tables)
    height = 0.8 / n
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(categories) * max(n, 2) / 2 + 1.4), dpi=100)
    ys = np.arange(len(categories))[::-1]
    hatches = ("", "//", "..", "xx")
    vmax = max((t.get(c) or 0) for t in tables.values() for c in categories) / scale
    for i, (name, t) in enumerate(tables.items()):
        vals = [(t.get(c) or 0) / scale for c in categories]
        pos = ys + (n - 1 - 2 * i) * height / 2
        ax.barh(pos, vals, height=height * 0.95, color=[_color(c) for c in categories],
                hatch=hatches[i % len(hatches)], edgecolor="black", linewidth=0.4, label=name)
        for y, v, c in zip(pos, vals, categories, strict=True):
            txt = "—" if c not in t else f"{v:,.3g}"
            ax.text(v + vmax * 0.01, y, f"{txt}  ({name})", va="center", fontsize=_FONT - 1)
    ax.set_yticks(ys, categories, fontsize=_FONT)
    ax.set_xlabel(f"bytes ({unit}; 1 {unit} = {'2**20' if unit == 'MiB' else '1e9'} B)", fontsize=_FONT + 1)
    ax.set_xlim(0, vmax * 1.35)
    ax.tick_params(labelsize=_FONT)
    ax.set_title(title, fontsize=_FONT + 2)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black", hatch=hatches[i % len(hatches)])
               for i in range(n)]
    ax.legend(handles, list(tables), fontsize=_FONT, loc="lower right")
    ax.grid(True, axis="x", color="0.9")
    fig.tight_layout()
    return fig


def peak_figure(stacks: Mapping[str, Mapping[str, float]], peak: Mapping[str, float] | None = None,
                title: str = "Steady state and peak", unit: str = "MiB"):
    """Stacked vertical bars, one per moment of a step (e.g. ``{"between steps": {...},
    "end of forward": {...}}``, each a mapping category -> bytes), with an optional horizontal
    marker per bar at ``peak[name]`` bytes (the highest live bytes measured). Shows that the
    memory a job needs is its peak, not what it holds at rest."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here

    scale = {"MiB": MiB, "GB": GB}.get(unit)
    if scale is None:
        raise ValueError(f"unit {unit!r}; expected 'MiB' or 'GB'")
    if not isinstance(stacks, Mapping) or not stacks:
        raise ValueError("stacks must be a non-empty mapping moment -> {category: bytes}")
    for name, st in stacks.items():
        if not isinstance(st, Mapping):
            raise TypeError(f"stacks[{name!r}] is {type(st).__name__}; expected a mapping category -> bytes")
        bad = {c: v for c, v in st.items() if not (isinstance(v, (int, float)) and v >= 0)}
        if bad:
            raise ValueError(f"stacks[{name!r}] has negative or non-numeric bytes {bad}")
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    cats = list(dict.fromkeys(c for st in stacks.values() for c in st))
    names = list(stacks)
    bottoms = [0.0] * len(names)
    for c in cats:
        vals = [stacks[n].get(c, 0) / scale for n in names]
        ax.bar(names, vals, bottom=bottoms, color=_color(c), edgecolor="black", linewidth=0.4, label=c, width=0.6)
        for i, (b, v) in enumerate(zip(bottoms, vals, strict=True)):
            if v > 0.06 * max(sum(stacks[n].values()) / scale for n in names):
                ax.text(i, b + v / 2, f"{c}\n{v:,.3g}", ha="center", va="center", fontsize=_FONT - 1, color="white")
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    top = max(bottoms)
    for i in range(len(names)):
        ax.text(i, bottoms[i] + top * 0.01, f"{bottoms[i]:,.3g} {unit}", ha="center", va="bottom", fontsize=_FONT)
    if peak:
        for i, n in enumerate(names):
            if n in peak:
                v = peak[n] / scale
                ax.plot([i - 0.4, i + 0.4], [v, v], color="black", lw=2, ls="--")
                ax.text(i, v + top * 0.01, f"peak {v:,.3g} {unit}", ha="center", va="bottom", fontsize=_FONT,
                        fontweight="bold")
                top = max(top, v)
    ax.set_ylim(0, top * 1.15)
    ax.set_ylabel(f"live bytes ({unit})", fontsize=_FONT + 1)
    ax.set_title(title, fontsize=_FONT + 2)
    ax.tick_params(labelsize=_FONT)
    ax.legend(fontsize=_FONT - 1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


DOMINANT_LABEL = "dominant term (outlined)"


def scaling_figure(table, categories: Sequence[str] | None = None, facet: str | None = "zero_stage",
                   label: str = "model", title: str = "Which term dominates as models grow",
                   shares: bool = True):
    """Stacked bars per model from :func:`~infralens_lab.analysis.ledger.scaling_table` (or any
    table with a ``label`` column and one bytes column per category): shares of the total in %
    (``shares=True``) or GB per rank, one panel per value of ``facet`` (e.g. ZeRO stage; None
    for one panel). The dominant category of each bar is outlined in bold."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here

    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"table is {type(table).__name__}; expected the DataFrame of ledger.scaling_table")
    if label not in table.columns:
        raise ValueError(f"table lacks the label column {label!r}; has {list(table.columns)}")
    if categories is None:
        categories = [c for c in CATEGORY_COLORS if c in table.columns and table[c].fillna(0).sum() > 0]
    missing = [c for c in categories if c not in table.columns]
    if missing:
        raise ValueError(f"table lacks category columns {missing}; has {list(table.columns)}")
    if facet is not None and facet not in table.columns:
        raise ValueError(f"table lacks the facet column {facet!r}; has {list(table.columns)}")
    panels = [(None, table)] if facet is None else list(table.groupby(facet, sort=True))
    ncol = min(len(panels), 2)
    nrow = -(-len(panels) // ncol)
    # about 940 px wide at dpi 100: a JupyterLab output at 1280 px with the file browser open is
    # ~830 px, so the 10 pt tick labels still show at ~9 pt
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.8 * ncol + 1.8, 4.4 * nrow), dpi=100, squeeze=False,
                             sharey=shares)
    flat = list(axes.flat)
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    for ax, (key, sub) in zip(flat, panels, strict=False):  # the grid's spare axes were hidden above
        vals = sub[list(categories)].fillna(0).to_numpy(dtype=float)
        tot = vals.sum(axis=1, keepdims=True)
        data = 100 * vals / np.where(tot > 0, tot, 1) if shares else vals / GB
        x = np.arange(len(sub))
        bottom = np.zeros(len(sub))
        starts = np.zeros_like(data)
        for j, c in enumerate(categories):
            ax.bar(x, data[:, j], bottom=bottom, color=_color(c), edgecolor="black", linewidth=0.3, label=c)
            starts[:, j] = bottom
            bottom += data[:, j]
        # the dominant term of each bar gets a thick outline (no text to crowd narrow bars)
        dom = np.argmax(vals, axis=1)
        rows = np.arange(len(sub))
        ax.bar(x, data[rows, dom], bottom=starts[rows, dom], fill=False, edgecolor="black", linewidth=2.2,
               label=DOMINANT_LABEL, gid="dominant")
        ax.set_xticks(x, list(sub[label]), rotation=35, ha="right", rotation_mode="anchor", fontsize=_FONT + 1)
        ax.set_ylim(0, (105 if shares else bottom.max() * 1.1))
        ax.set_title(title if key is None else f"{facet} = {key}", fontsize=_FONT + 1)
        ax.tick_params(axis="y", labelsize=_FONT)
        ax.grid(True, axis="y", color="0.9")
    for row in axes:
        row[0].set_ylabel("share of bytes per rank (%)" if shares else "bytes per rank (GB, 1e9 B)",
                          fontsize=_FONT + 1)
    axes[0][-1].legend(fontsize=_FONT, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if facet is not None:
        fig.suptitle(title, fontsize=_FONT + 2)
    fig.tight_layout()
    return fig


__all__ = ["CATEGORY_COLORS", "DOMINANT_LABEL", "GB", "PERSISTENT", "MiB", "ledger_bars", "peak_figure", "scaling_figure"]
