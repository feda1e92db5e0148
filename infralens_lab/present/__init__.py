"""Show tables, figures and explanation cards, each with its provenance line.

Works in JupyterLab (rich display) and as a plain ``python3`` script on a machine with no
IPython (prints text, saves nothing). Labs call :func:`show` for every table and figure so
the provenance caption can never be forgotten.

Tables are drawn here, for every lab alike: cell text is HTML-escaped (C++ template
arguments stay text), numbers are written the way people read them (``8,566``, ``0.00615``,
``4.33 G``; exact integers in full with thousands separators), a unit carried by a column
name moves into its header (``time_us`` -> ``time (µs)``, the name stays on hover), long
kernel names are shortened with the full name on hover, text columns are left-aligned, a
one-row table is turned on its side, and a table wider than its cell scrolls inside its own
box instead of being cut off (:mod:`.tabular`). A figure's output carries alt text read from the
figure (:mod:`.figures`).
"""
from __future__ import annotations

from typing import Any

from ..notebook_guard import grade_mode
from .figures import figure_alt
from .tabular import (  # noqa: F401  (re-exported: the tabular helpers are present's API)
    KERNEL_NAME_MAX_CHARS,
    NAME_MAX_CHARS,
    SCROLL_CUE_CLASS,
    SCROLL_FADE_CLASS,
    TEXT_WRAP_EM,
    UNIT_SUFFIXES,
    WIDE_TABLE_PX,
    estimated_width_px,
    format_number,
    header_label,
    kernel_name_short,
    kernel_names_short,
    shorten_name,
    shorten_names,
    table_html,
    table_text,
)


def _ipython_display():
    try:
        from IPython import get_ipython  # optional: IPython, only here
        from IPython.display import Markdown, display  # optional: IPython, only here
    except ImportError:
        return None
    if get_ipython() is None:
        return None
    return display, Markdown


def _caption_text(caption: Any) -> str | None:
    if caption is None:
        return None
    if hasattr(caption, "caption"):
        return caption.caption()
    return str(caption)



# ---------------------------------------------------------------- show and card
def show(obj: Any, caption: Any = None, title: str | None = None, floatfmt: str | None = None,
         point: str | None = None) -> None:
    """Display ``obj`` (DataFrame, matplotlib Figure, or text) with a provenance caption.

    ``caption`` is an :class:`~infralens_lab.evidence.Evidence`, a Provenance, or a string
    (a formula source, for instance). It is required for tables and figures: pass the
    evidence the values came from. Tables are drawn by :func:`table_html`; ``floatfmt``
    (a ``str.format`` pattern) overrides its number format for floats. A figure's output carries
    alt text (:func:`figure_alt`: what it shows and its axes, read from the figure, then ``point``, the
    one thing to see in it) in its ``image/png`` metadata, which the offline edition uses.
    """
    cap = _caption_text(caption)
    ipy = _ipython_display()
    is_df = hasattr(obj, "to_string") and hasattr(obj, "columns")
    is_fig = hasattr(obj, "savefig")
    if (is_df or is_fig) and not cap:
        raise ValueError("show() needs a caption for a table or figure: pass the Evidence it came from "
                         "or a string naming the formula")
    if ipy is not None:
        display, Markdown = ipy
        if title:
            display(Markdown(f"**{title}**"))
        if is_df:
            display({"text/html": table_html(obj, floatfmt), "text/plain": table_text(obj, floatfmt)}, raw=True)
        elif is_fig:
            if grade_mode():  # `make grade` reads no figure: drawing one would only cost each notebook time
                display(Markdown("*(figure not drawn while grading)*"))
            else:
                display(obj, metadata={"image/png": {"alt": figure_alt(obj, title, point)}})
            import matplotlib.pyplot as plt  # heavy: matplotlib, only here

            plt.close(obj)
        else:
            display(Markdown(str(obj)))
        if cap:
            display(Markdown(f"<sub>{cap}</sub>"))
        return
    if title:
        print(f"== {title} ==")
    if is_df:
        print(table_text(obj, floatfmt))
    elif is_fig:
        print(f"[figure: {obj.axes[0].get_title() if obj.axes else 'untitled'}]")
        import matplotlib.pyplot as plt  # heavy: matplotlib, only here

        plt.close(obj)
    else:
        print(obj)
    if cap:
        print(cap)



CARD_KINDS = {"note": "Note", "notice": "Notice", "pitfall": "Pitfall", "interview": "Interview"}


def card(title: str, body: str, kind: str = "note") -> None:
    """An explanation card: a titled block of Markdown. ``kind`` (note, notice, pitfall or
    interview) says what the card is for; the title names it in words, no emoji (an emoji
    font is not installed everywhere)."""
    if kind not in CARD_KINDS:
        raise ValueError(f"card kind {kind!r} is not one of {sorted(CARD_KINDS)}; pick the one that fits")
    text = f"> **{title}**\n>\n" + "\n".join(f"> {line}" for line in body.strip().splitlines())
    ipy = _ipython_display()
    if ipy is not None:
        display, Markdown = ipy
        display(Markdown(text))
    else:
        print(f"[{kind}] {title}\n{body.strip()}")


__all__ = ["card", "estimated_width_px", "figure_alt", "format_number", "header_label", "kernel_name_short", "kernel_names_short",
           "shorten_name", "shorten_names",
           "show", "table_html", "table_text"]
