"""What a CUDA graph refused, shown as one line per case with the raw error folded away.

:func:`show_refusals` draws :func:`infralens_lab.analysis.overlap.graph_refusals`: each line says what
was done and why capture or replay refuses it; the raw error text sits in a collapsed ``<details>``
under its line (JupyterLab and the offline edition), and is left out of the plain-text form (it is
``GraphRefusal.raw`` for whoever wants it).
"""
from __future__ import annotations

import html
from typing import Any

from . import _caption_text, _ipython_display


def refusals_html(refusals) -> str:
    """An HTML list: one line per refusal, its raw error in a collapsed "raw error" box."""
    items = "".join(
        f'<li style="margin:2px 0">{html.escape(r.line)}<details style="margin:2px 0 4px 0">'
        f'<summary style="cursor:pointer;color:var(--jp-content-link-color,#1565c0)">raw error</summary>'
        f'<pre style="white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0">{html.escape(r.raw)}</pre>'
        f"</details></li>" for r in refusals)
    return f'<ul class="infralens-refusals" style="margin:4px 0;padding-left:1.2em">{items}</ul>'


def refusals_text(refusals) -> str:
    """The lines alone, one per refusal (``- `` bullets)."""
    return "\n".join(f"- {r.line}" for r in refusals)


def show_refusals(refusals, caption: Any) -> None:
    """Display ``refusals`` (HTML with the raw errors folded, plain text without them) and the caption of
    the evidence they came from (required)."""
    cap = _caption_text(caption)
    if not cap:
        raise ValueError("show_refusals() needs a caption: pass the graph_limits Evidence the refusals came from")
    ipy = _ipython_display()
    if ipy is None:
        print(refusals_text(refusals))
        print(cap)
        return
    display, Markdown = ipy
    display({"text/html": refusals_html(refusals), "text/plain": refusals_text(refusals)}, raw=True)
    display(Markdown(f"<sub>{cap}</sub>"))
