"""Alt text for figures, read from the matplotlib figure itself (:func:`figure_alt`); ``present.show``
stores it in the figure output's ``image/png`` metadata, where the offline edition finds it."""
from __future__ import annotations

# ---------------------------------------------------------------- figures: alt text
ALT_MAX_SERIES = 6  # legend entries named in alt text before "and N more"


def _axes_kind(ax) -> str:
    if getattr(ax, "containers", None):
        return "bar chart"
    if ax.images:
        return "image"
    if ax.collections and not ax.lines:
        return "scatter plot"
    return "line chart" if ax.lines else "chart"


def _axis_text(ax, which: str) -> str:
    label = (ax.get_xlabel() if which == "x" else ax.get_ylabel()).strip()
    scale = ax.get_xscale() if which == "x" else ax.get_yscale()
    return f"{label or 'unlabelled'}{' (log scale)' if scale == 'log' else ''}"


def figure_alt(fig, title: str | None = None, point: str | None = None) -> str:
    """Alt text for a matplotlib figure, read from the figure itself: its title, per panel the kind of
    chart, its title, what is plotted against what (log scales said) and its series (legend), then
    ``point``, the one thing the figure shows (a sentence from the lab). ``title`` (``show``'s) leads."""
    parts = [t for t in (title, fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else "") if t]
    panels = [ax for ax in fig.axes if ax.get_visible() and (ax.has_data() or ax.get_title())]
    if len(panels) > 1:
        parts.append(f"{len(panels)} panels")
    for ax in panels[:4]:
        name = f' "{ax.get_title().strip()}"' if ax.get_title().strip() else ""
        desc = f"{_axes_kind(ax).capitalize()}{name}: {_axis_text(ax, 'y')} against {_axis_text(ax, 'x')}"
        labels = [lb for lb in ax.get_legend_handles_labels()[1] if lb and not lb.startswith("_")]
        if labels:
            more = f" and {len(labels) - ALT_MAX_SERIES} more" if len(labels) > ALT_MAX_SERIES else ""
            desc += f"; series: {', '.join(labels[:ALT_MAX_SERIES])}{more}"
        parts.append(desc)
    if point:
        parts.append(point.strip().rstrip("."))
    return ". ".join(p.rstrip(".") for p in parts) + "." if parts else "A figure."
