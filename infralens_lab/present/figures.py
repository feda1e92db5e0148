"""Alt text for figures, read from the matplotlib figure itself (:func:`figure_alt`); ``present.show``
stores it in the figure output's ``image/png`` metadata, where the offline edition finds it."""
from __future__ import annotations

ALT_MAX_SERIES = 6  # legend entries (or categories) named in alt text before "and N more"


def _axes_kind(ax) -> str:
    if getattr(ax, "containers", None):
        return "bar chart"
    if ax.images:
        return "image"
    if ax.lines:
        return "line chart"
    kinds = {type(c).__name__ for c in ax.collections}
    if kinds and kinds <= {"PathCollection"}:
        return "scatter plot"
    return "bar chart" if kinds else "chart"  # broken_barh (timelines), fill_between: bars and bands


def _some(names: list[str]) -> str:
    more = f" and {len(names) - ALT_MAX_SERIES} more" if len(names) > ALT_MAX_SERIES else ""
    return ", ".join(names[:ALT_MAX_SERIES]) + more


def _categories(axis) -> list[str]:
    """The tick labels of an axis that holds categories (text), without drawing the figure; [] for numbers."""
    try:
        labels = axis.get_major_formatter().format_ticks(axis.get_majorticklocs())
    except (AttributeError, TypeError, ValueError):
        return []
    labels = [str(t).strip() for t in labels if str(t).strip()]

    def number(t: str) -> bool:
        try:
            float(t.replace("−", "-").replace(",", ""))
            return True
        except ValueError:
            return False

    return labels if labels and not all(number(t) for t in labels) else []


def _axis_text(ax, which: str) -> str:
    axis = ax.xaxis if which == "x" else ax.yaxis
    label = axis.get_label_text().strip()
    if not label:
        cats = _categories(axis)
        label = f"the categories {_some(cats)}" if cats else "unlabelled"
    return f"{label}{' (log scale)' if axis.get_scale() == 'log' else ''}"


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
            desc += f"; series: {_some(labels)}"
        parts.append(desc)
    if point:
        parts.append(point.strip().rstrip("."))
    return ". ".join(p.rstrip(".") for p in parts) + "." if parts else "A figure."
