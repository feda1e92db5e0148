"""The roofline figure: log-log FLOP/s against FLOP/byte, roofs labelled with their values, kernels labelled.

:func:`roofline_figure` draws what :mod:`infralens_lab.analysis.roofline` computes. Roofs are
:class:`Roof` objects: a *memory* roof is a bandwidth in byte/s (a line of slope one, ``rate =
intensity * bandwidth``), a *compute* roof is a rate in FLOP/s (a horizontal line). A roof is
either ``measured`` (drawn solid, e.g. the copy bandwidth or a matmul rate timed on the GPU)
or a vendor ``peak`` (drawn dashed, from :data:`infralens_lab.analysis.hardware.PEAKS`), and
its label carries its value, so a printed figure still says what the lines are. Kernels are a
DataFrame of points (``label``, ``intensity`` in FLOP/byte, ``flops_per_s`` in FLOP/s, optional
``group`` for colour and marker, optional ``predicted_intensity`` drawn as a hollow marker
joined to the measured one). Labels are placed greedily so that they do not overlap each
other. Nothing here measures or reads files: pass numbers that came from evidence.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

KINDS = ("memory", "compute")
STYLES = ("measured", "peak")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")
_FONT = 9  # points; stays legible when an A4 page holds the figure at full width


@dataclass(frozen=True)
class Roof:
    """One ceiling. ``value`` is byte/s for a memory roof, FLOP/s for a compute roof.

    ``style`` is ``'measured'`` (timed on a GPU, drawn solid) or ``'peak'`` (datasheet, dashed).
    """

    label: str
    value: float
    kind: str
    style: str = "measured"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Roof kind {self.kind!r}; expected one of {KINDS}")
        if self.style not in STYLES:
            raise ValueError(f"Roof style {self.style!r}; expected one of {STYLES}")
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)) or not self.value > 0 \
                or not math.isfinite(self.value):
            raise ValueError(f"Roof {self.label!r} value={self.value!r}; expected a positive finite number "
                             f"({'byte/s' if self.kind == 'memory' else 'FLOP/s'})")

    @property
    def text(self) -> str:
        """Label with the value and unit, e.g. ``'HBM copy · 3.21 TB/s (measured)'``."""
        unit = "B/s" if self.kind == "memory" else "FLOP/s"
        return f"{self.label} · {si(self.value, unit)} ({self.style})"


def si(value: float, unit: str) -> str:
    """``value`` with an SI prefix and three significant digits: ``si(3.21e12, 'B/s') == '3.21 TB/s'``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"si() got {value!r}; expected a finite number")
    for exp, p in ((15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if abs(value) >= 10 ** exp:
            return f"{value / 10 ** exp:.3g} {p}{unit}"
    return f"{value:.3g} {unit}"


def ridge_points(roofs: Sequence[Roof]) -> list[tuple[str, str, float]]:
    """(memory label, compute label, ridge intensity in FLOP/byte) for every pair of roofs."""
    mem = [r for r in roofs if r.kind == "memory"]
    comp = [r for r in roofs if r.kind == "compute"]
    return [(m.label, c.label, c.value / m.value) for m in mem for c in comp]


_DTYPE_LABEL = {"fp32": "fp32 matmul (CUDA cores)", "tf32": "tf32 matmul (tensor)",
                "fp16": "fp16 matmul (tensor)", "bf16": "bf16 matmul (tensor)"}


def roofs_from(ceilings=None, peaks=None, dtypes: Sequence[str] = ("fp32", "tf32", "fp16")) -> list[Roof]:
    """Roofs from measured :class:`~infralens_lab.analysis.hardware.Ceilings` and/or datasheet
    :class:`~infralens_lab.analysis.hardware.Peaks`: one memory roof (copy bandwidth / DRAM peak)
    and one compute roof per dtype in ``dtypes`` that each of them has. Either may be None."""
    if ceilings is None and peaks is None:
        raise ValueError("roofs_from() needs measured ceilings, datasheet peaks, or both; got neither")
    bad = [d for d in dtypes if d not in _DTYPE_LABEL]
    if bad:
        raise ValueError(f"dtypes {bad} not understood; expected some of {list(_DTYPE_LABEL)}")
    roofs = []
    if ceilings is not None:
        roofs.append(Roof("DRAM (copy)", float(ceilings.copy_bw), "memory", "measured"))
        roofs += [Roof(_DTYPE_LABEL[d], float(getattr(ceilings, d)), "compute", "measured")
                  for d in dtypes if getattr(ceilings, d, None)]
    if peaks is not None:
        roofs.append(Roof(f"{peaks.memory_kind} datasheet", float(peaks.bandwidth), "memory", "peak"))
        roofs += [Roof(_DTYPE_LABEL[d].split(" (")[0] + " datasheet", float(getattr(peaks, d)), "compute", "peak")
                  for d in dtypes if getattr(peaks, d, None)]
    return roofs


_REQUIRED = ("label", "intensity", "flops_per_s")


def _check_points(points):
    if points is None:
        return pd.DataFrame(columns=list(_REQUIRED))
    if not isinstance(points, pd.DataFrame):
        raise TypeError(f"points is {type(points).__name__}; expected a pandas DataFrame with columns {_REQUIRED}")
    missing = [c for c in _REQUIRED if c not in points.columns]
    if missing:
        raise ValueError(f"points lacks columns {missing}; has {list(points.columns)}, expected at least {_REQUIRED}")
    for col in ("intensity", "flops_per_s") + (("predicted_intensity",) if "predicted_intensity" in points else ()):
        vals = pd.to_numeric(points[col], errors="coerce")
        wrong = ~(vals > 0)
        if col == "predicted_intensity":  # a kernel without a prediction is allowed; a non-positive one is not
            wrong &= ~vals.isna()
        bad = points.loc[wrong, "label"]
        if len(bad):
            raise ValueError(f"points[{col!r}] must be > 0 on a log-log chart; rows {list(bad)} have "
                             f"{list(points.loc[bad.index, col])}")
    return points


def _check_roofs(roofs) -> list[Roof]:
    roofs = list(roofs)
    for r in roofs:
        if not isinstance(r, Roof):
            raise TypeError(f"roofs holds a {type(r).__name__}; expected Roof objects")
    if not any(r.kind == "memory" for r in roofs) or not any(r.kind == "compute" for r in roofs):
        raise ValueError(f"a roofline needs at least one memory and one compute roof; got "
                         f"{[(r.label, r.kind) for r in roofs]}")
    return roofs


def _limits(roofs: list[Roof], points, xlim, ylim):
    mem_lo = min(r.value for r in roofs if r.kind == "memory")
    comp = [r.value for r in roofs if r.kind == "compute"]
    xs = list(points["intensity"]) + ([v for v in points["predicted_intensity"] if v == v]
                                      if "predicted_intensity" in points else [])
    xs += [c / mem_lo for c in comp]
    ys = list(points["flops_per_s"]) + comp
    if xlim is None:
        xlim = (10 ** (math.log10(min(xs)) - 0.6), 10 ** (math.log10(max(xs)) + 0.5))
    if ylim is None:
        ylim = (10 ** (math.log10(min(ys)) - 0.6), 10 ** (math.log10(max(ys)) + 0.35))
    return xlim, ylim


class _Placer:
    """Greedy label placement with real text extents: for each label try a ring of offsets and keep
    the first whose rendered box stays inside the axes and overlaps no marker, no earlier label,
    no text already on the axes (roof labels, legend) and no line drawn so far (roofs, the ridge,
    predicted-to-measured connectors); if none is free, the least-overlapping one."""

    LINE_STEP_PX = 2.0  # lines are sampled every 2 px; each sample inside a label box costs
    LINE_COST = 40.0    # as much as 40 px² of box overlap, so a label never sits on a roof

    OFFSETS = ((6, 6), (6, -14), (-6, 6), (-6, -14), (10, 18), (10, -26), (-10, 18), (-10, -26), (14, 0),
               (-14, 0), (4, 30), (4, -38), (-4, 30), (-4, -38), (24, 10), (-24, 10), (24, -20), (-24, -20))

    def __init__(self, ax, fig, xs=(), ys=()):
        from matplotlib.transforms import Bbox  # heavy: matplotlib, only here

        self.ax, self.fig = ax, fig
        self.renderer = fig.canvas.get_renderer()
        self.frame = ax.get_window_extent(self.renderer)
        self.boxes = []
        r = 4.0 * fig.dpi / 72.0  # markers: about 8 points across, in pixels
        for x, y in zip(xs, ys, strict=True):
            px, py = ax.transData.transform((x, y))
            self.boxes.append(Bbox.from_extents(px - r, py - r, px + r, py + r))
        for t in ax.texts:  # roof labels placed before the points
            self.boxes.append(t.get_window_extent(self.renderer))
        leg = ax.get_legend()
        if leg is not None:
            self.boxes.append(leg.get_window_extent(self.renderer))
        samples = []
        for line in ax.lines:
            xy = ax.transData.transform(np.asarray(line.get_xydata(), dtype=float))
            for (x0, y0), (x1, y1) in itertools.pairwise(xy):
                if not np.isfinite([x0, y0, x1, y1]).all():
                    continue
                n = max(2, int(np.hypot(x1 - x0, y1 - y0) / self.LINE_STEP_PX))
                t = np.linspace(0.0, 1.0, n)
                samples.append(np.column_stack([x0 + t * (x1 - x0), y0 + t * (y1 - y0)]))
        self.line_px = np.concatenate(samples) if samples else np.empty((0, 2))

    def _cost(self, bb, own) -> float:
        if not (bb.x0 >= self.frame.x0 and bb.x1 <= self.frame.x1 and bb.y0 >= self.frame.y0 and bb.y1 <= self.frame.y1):
            return float("inf")
        area = 0.0
        for b in self.boxes:
            if b is own:
                continue
            w = min(bb.x1, b.x1) - max(bb.x0, b.x0)
            h = min(bb.y1, b.y1) - max(bb.y0, b.y0)
            if w > 0 and h > 0:
                area += w * h
        if len(self.line_px):
            inside = ((self.line_px[:, 0] >= bb.x0) & (self.line_px[:, 0] <= bb.x1)
                      & (self.line_px[:, 1] >= bb.y0) & (self.line_px[:, 1] <= bb.y1))
            area += self.LINE_COST * float(inside.sum())
        return area

    def place(self, x, y, text, color, own_index: int | None = None):
        own = self.boxes[own_index] if own_index is not None else None
        best, best_cost = None, float("inf")
        for off in self.OFFSETS:
            ann = self.ax.annotate(text, (x, y), xytext=off, textcoords="offset points", fontsize=_FONT - 1,
                                   color=color, ha="left" if off[0] >= 0 else "right", va="bottom",
                                   arrowprops=dict(arrowstyle="-", color=color, lw=0.5, alpha=0.6))
            cost = self._cost(ann.get_window_extent(self.renderer), own)
            if cost < best_cost:
                if best is not None:
                    best.remove()
                best, best_cost = ann, cost
            else:
                ann.remove()
            if cost == 0:
                break
        if best is None:  # nothing fits inside the axes: keep the first offset anyway
            best = self.ax.annotate(text, (x, y), xytext=self.OFFSETS[0], textcoords="offset points",
                                    fontsize=_FONT - 1, color=color, va="bottom",
                                    arrowprops=dict(arrowstyle="-", color=color, lw=0.5, alpha=0.6))
        self.boxes.append(best.get_window_extent(self.renderer))


def roofline_figure(points=None, roofs: Iterable[Roof] = (), title: str = "Roofline",
                    xlim: tuple[float, float] | None = None, ylim: tuple[float, float] | None = None,
                    label_points: bool = True, figsize: tuple[float, float] = (10, 6.5),
                    xlabel: str = "arithmetic intensity (FLOP / byte of DRAM traffic)"):
    """A log-log roofline: attainable FLOP/s against arithmetic intensity (FLOP/byte).

    ``points``: DataFrame with ``label``, ``intensity`` (FLOP/byte), ``flops_per_s`` (FLOP/s),
    optional ``group`` (one colour and marker per group) and ``predicted_intensity`` (FLOP/byte,
    drawn hollow at the same height and joined to the measured point; ``series``, points with the
    same value joined by a thin line, for a hierarchical L1/L2/DRAM view; ``label`` may be empty
    to leave a point unlabelled). ``roofs``: :class:`Roof`
    objects, at least one memory and one compute. Each memory roof is drawn up to the highest
    compute roof and each compute roof from its ridge with the fastest memory roof, both
    labelled with their values; the ridge of the fastest pair is marked. ``xlabel`` names the bytes
    the intensities count (DRAM by default). Returns the Figure.
    """
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here

    points = _check_points(points)
    roofs = _check_roofs(roofs)
    xlim, ylim = _limits(roofs, points, xlim, ylim)
    fig, ax = plt.subplots(figsize=figsize, dpi=100)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    xs = np.geomspace(xlim[0], xlim[1], 256)
    top = max(r.value for r in roofs if r.kind == "compute")
    fastest_mem = max(r.value for r in roofs if r.kind == "memory")
    mem_roofs = sorted((r for r in roofs if r.kind == "memory"), key=lambda r: -r.value)
    comp_roofs = sorted((r for r in roofs if r.kind == "compute"), key=lambda r: -r.value)
    ax.set_xlabel(xlabel, fontsize=_FONT + 1)
    ax.set_ylabel("achieved rate (FLOP/s)", fontsize=_FONT + 1)
    ax.set_title(title, fontsize=_FONT + 2)
    ax.tick_params(labelsize=_FONT)
    ax.grid(True, which="major", color="0.9", lw=0.6)
    fig.tight_layout(rect=(0, 0, 0.80, 1))  # right margin holds the compute-roof labels
    angle = _slope_angle(ax)
    for i, r in enumerate(mem_roofs):
        color = "black" if r.style == "measured" else "0.4"
        keep = xs * r.value <= top * 1.0001
        ax.plot(xs[keep], xs[keep] * r.value, "-" if r.style == "measured" else "--", color=color, lw=1.5)
        # label along the slope, where it is farthest from any kernel; the fastest roof above its line,
        # the next below it, so that two close roofs do not share a label spot
        above = i % 2 == 0
        x_lab = _quiet_spot(points, max(xlim[0], ylim[0] * 1.3 / r.value), top / r.value / 4.0, r.value, i)
        ax.annotate(r.text, (x_lab, x_lab * r.value), xytext=(0, 4 if above else -4), textcoords="offset points",
                    rotation=angle, rotation_mode="anchor", fontsize=_FONT, color=color,
                    va="bottom" if above else "top", ha="left")
    for r in comp_roofs:
        x0 = r.value / fastest_mem
        ax.plot([x0, xlim[1]], [r.value, r.value], "-" if r.style == "measured" else "--",
                color="black" if r.style == "measured" else "0.4", lw=1.4)
    _margin_labels(ax, fig, comp_roofs)
    # the ridge marked is the measured one where both kinds of measured roof exist
    measured = [r for r in roofs if r.style == "measured"]
    basis = measured if {r.kind for r in measured} == set(KINDS) else roofs
    ridge_x = max(r.value for r in basis if r.kind == "compute") / max(r.value for r in basis if r.kind == "memory")
    ax.axvline(ridge_x, color="0.7", lw=0.8, ls=":")
    ax.annotate(f"ridge {ridge_x:.3g} FLOP/B" + (" (measured)" if basis is measured else ""), (ridge_x, ylim[0]), xytext=(3, 3), textcoords="offset points",
                fontsize=_FONT - 1, color="0.35")
    _draw_points(ax, fig, points, label_points)
    return fig


def _quiet_spot(points, lo: float, hi: float, bw: float, rank: int) -> float:
    """An intensity in [lo, hi] (log-spaced candidates) for a memory-roof label: the one farthest, in
    decades, from every kernel point, so the label does not sit on top of a kernel near the roof."""
    if not hi > lo:
        return lo
    cands = np.geomspace(lo, hi, 16)
    if points is None or not len(points):
        return float(cands[min(rank * 3, len(cands) - 1)])
    px = np.log10(points["intensity"].to_numpy(dtype=float))
    py = np.log10(points["flops_per_s"].to_numpy(dtype=float))
    best, best_d = float(cands[0]), -1.0
    for c in cands:
        # the label covers about 1.2 decades of the line from its anchor: distance of every point to
        # that segment, in decades (projection clipped to the segment's ends)
        x0, t = np.log10(c), np.clip(((px - np.log10(c)) + (py - np.log10(c) - np.log10(bw))) / 2.0, 0.0, 1.2)
        d = float(np.min(np.hypot(px - (x0 + t), py - (x0 + t + np.log10(bw)))))
        if d > best_d + 1e-9:
            best, best_d = float(c), d
    return best


def _slope_angle(ax) -> float:
    """On-screen angle (degrees) of a slope-one line in log-log axes with the current limits."""
    p0 = ax.transData.transform((1.0, 1.0))
    p1 = ax.transData.transform((10.0, 10.0))
    return float(np.degrees(np.arctan2(p1[1] - p0[1], p1[0] - p0[0])))


def _margin_labels(ax, fig, comp_roofs: list[Roof]) -> None:
    """Compute-roof labels in the right margin at their heights, nudged apart to stay readable."""
    min_gap = 2.9 * _FONT  # points between label centres: two lines each
    ys = [ax.transData.transform((1.0, r.value))[1] * 72.0 / fig.dpi for r in comp_roofs]  # descending
    placed: list[float] = []
    for y in ys:
        placed.append(min(y, placed[-1] - min_gap) if placed else y)
    for r, y, y_pt in zip(comp_roofs, ys, placed, strict=True):
        ax.annotate(f"{r.label}\n{si(r.value, 'FLOP/s')} {r.style}", (1.0, r.value),
                    xycoords=("axes fraction", "data"), xytext=(6, y_pt - y), textcoords="offset points",
                    fontsize=_FONT, va="center", ha="left", annotation_clip=False,
                    color="black" if r.style == "measured" else "0.4")


def _draw_points(ax, fig, points, label_points: bool) -> None:
    if not len(points):
        return
    if "series" in points:  # the same kernel seen at several levels (L1, L2, DRAM): join its points
        for _, rows in points.groupby("series", sort=False):
            if len(rows) > 1:
                rows = rows.sort_values("intensity")
                ax.plot(rows["intensity"], rows["flops_per_s"], "-", color="0.6", lw=0.8, zorder=1)
    groups = list(dict.fromkeys(points["group"])) if "group" in points else [None]
    styles = {g: (_COLORS[i % len(_COLORS)], _MARKERS[i % len(_MARKERS)]) for i, g in enumerate(groups)}
    for g in groups:
        rows = points if g is None else points[points["group"] == g]
        color, marker = styles[g]
        ax.scatter(rows["intensity"], rows["flops_per_s"], s=46, color=color, marker=marker, zorder=3,
                   edgecolor="black", linewidth=0.5, label=None if g is None else str(g))
        if "predicted_intensity" in rows:
            for _, row in rows.iterrows():
                pi = row["predicted_intensity"]
                if pi == pi and pi is not None:
                    ax.scatter([pi], [row["flops_per_s"]], s=46, facecolor="none", edgecolor=color,
                               marker=marker, zorder=2)
                    ax.plot([pi, row["intensity"]], [row["flops_per_s"]] * 2, ":", color=color, lw=0.9)
    if groups != [None]:
        ax.legend(fontsize=_FONT, loc="upper left", framealpha=0.9)  # above the memory roof: always empty
    if not label_points:
        return
    placer = _Placer(ax, fig, points["intensity"], points["flops_per_s"])
    for i, (_, row) in enumerate(points.iterrows()):
        if str(row["label"]).strip():
            g = row["group"] if "group" in points else None
            placer.place(row["intensity"], row["flops_per_s"], str(row["label"]), styles[g][0], own_index=i)


def bandwidth_figure(rows, roofs: Iterable[Roof] = (), title: str = "Copies: bandwidth against the memory roof"):
    """Horizontal bars for kernels that do no FLOPs (copies), which a log-log roofline cannot place:
    per row of ``rows`` (DataFrame with ``label``, ``dram_TBps`` and optionally ``useful_TBps``, in
    TB/s = 1e12 byte/s) the DRAM bandwidth reached and the useful part of it, with every memory
    roof in ``roofs`` drawn as a vertical line labelled with its value."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only here

    if not isinstance(rows, pd.DataFrame):
        raise TypeError(f"rows is {type(rows).__name__}; expected a DataFrame with label and dram_TBps")
    missing = [c for c in ("label", "dram_TBps") if c not in rows.columns]
    if missing:
        raise ValueError(f"rows lacks columns {missing}; has {list(rows.columns)}")
    mem = [r for r in roofs if isinstance(r, Roof) and r.kind == "memory"]
    if len(mem) != len(list(roofs)):
        raise TypeError("roofs must be memory Roof objects (a copy has no compute roof)")
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.8), dpi=100)
    ys = np.arange(len(rows))[::-1]
    has_useful = "useful_TBps" in rows.columns
    h = 0.38 if has_useful else 0.7
    ax.barh(ys + (h / 2 if has_useful else 0), rows["dram_TBps"], height=h, color="#1f77b4", edgecolor="black",
            linewidth=0.4, label="DRAM bytes moved / time")
    if has_useful:
        ax.barh(ys - h / 2, rows["useful_TBps"], height=h, color="#2ca02c", edgecolor="black", linewidth=0.4,
                label="useful bytes / time")
    top = max([float(rows["dram_TBps"].max())] + [r.value / 1e12 for r in mem])
    for y, (_, r) in zip(ys, rows.iterrows(), strict=True):
        ax.text(r["dram_TBps"] + top * 0.01, y + (h / 2 if has_useful else 0), f"{r['dram_TBps']:.3g}",
                va="center", fontsize=_FONT - 1)
        if has_useful:
            ax.text(r["useful_TBps"] + top * 0.01, y - h / 2, f"{r['useful_TBps']:.3g}", va="center",
                    fontsize=_FONT - 1)
    for r in sorted(mem, key=lambda r: r.value):  # roofs go in the legend: text on the bars would hide values
        ax.axvline(r.value / 1e12, color="black" if r.style == "measured" else "0.4",
                   ls="-" if r.style == "measured" else "--", lw=1.2, label=r.text)
    ax.set_yticks(ys, list(rows["label"]), fontsize=_FONT)
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel("bandwidth (TB/s, 1e12 byte/s)", fontsize=_FONT + 1)
    ax.set_title(title, fontsize=_FONT + 2)
    ax.tick_params(labelsize=_FONT)
    ax.legend(fontsize=_FONT - 1, loc="upper left", bbox_to_anchor=(0.0, -0.12), ncol=2, frameon=False)
    ax.grid(True, axis="x", color="0.9")
    fig.tight_layout()
    return fig


__all__ = ["KINDS", "STYLES", "Roof", "bandwidth_figure", "ridge_points", "roofline_figure", "roofs_from", "si"]
