"""Show tables, figures and explanation cards, each with its provenance line.

Works in JupyterLab (rich display) and as a plain ``python3`` script on a machine with no
IPython (prints text, saves nothing). Labs call :func:`show` for every table and figure so
the provenance caption can never be forgotten.
"""
from __future__ import annotations

from typing import Any


def _ipython_display():
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
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


def show(obj: Any, caption: Any = None, title: str | None = None, floatfmt: str = "{:,.3g}") -> None:
    """Display ``obj`` (DataFrame, matplotlib Figure, or text) with a provenance caption.

    ``caption`` is an :class:`~infralens_lab.evidence.Evidence`, a Provenance, or a string
    (a formula source, for instance). It is required for tables and figures: pass the
    evidence the values came from.
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
            display(obj.style.format(_formatter(floatfmt), na_rep="—").hide(axis="index")
                    if obj.index.name is None and _plain_index(obj) else obj)
        elif is_fig:
            display(obj)
            import matplotlib.pyplot as plt

            plt.close(obj)
        else:
            display(Markdown(str(obj)))
        if cap:
            display(Markdown(f"<sub>{cap}</sub>"))
        return
    if title:
        print(f"== {title} ==")
    if is_df:
        print(obj.to_string(index=not _plain_index(obj), float_format=_formatter(floatfmt)))
    elif is_fig:
        print(f"[figure: {obj.axes[0].get_title() if obj.axes else 'untitled'}]")
        import matplotlib.pyplot as plt

        plt.close(obj)
    else:
        print(obj)
    if cap:
        print(cap)


def _plain_index(df) -> bool:
    import pandas as pd

    return isinstance(df.index, pd.RangeIndex)


def _formatter(fmt: str):
    def f(v):
        if isinstance(v, float):
            return fmt.format(v)
        return v if isinstance(v, str) else str(v)

    return f


def card(title: str, body: str, kind: str = "note") -> None:
    """An explanation card: a titled block of Markdown (``kind`` is note, notice, pitfall or interview)."""
    icon = {"note": "📝", "notice": "👀", "pitfall": "⚠️", "interview": "🎤"}.get(kind, "📝")
    text = f"> {icon} **{title}**\n>\n" + "\n".join(f"> {line}" for line in body.strip().splitlines())
    ipy = _ipython_display()
    if ipy is not None:
        display, Markdown = ipy
        display(Markdown(text))
    else:
        print(f"[{kind}] {title}\n{body.strip()}")


__all__ = ["card", "show"]
