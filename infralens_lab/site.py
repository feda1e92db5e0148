"""Offline HTML edition of the labs: ``python -m infralens_lab site --out site``.

Reads the committed ``labs/NN_*.ipynb`` (with their outputs, never re-executed) and writes
one self-contained HTML page per lab plus ``index.html``: figures stay embedded as PNG data
URIs, tables as pandas HTML, provenance ("Evidence: ...") lines as printed. Pages use
nbconvert's ``lab`` template with its CSS inlined and every remote script dropped (no
require.js, MathJax, mermaid or widget manager from a CDN), so the site reads from
``file://`` with no network. Widgets cannot run offline: a quiz self-check becomes its
question text plus a collapsed ``<details>`` explanation from the quiz bank; any other widget
shows its plain-text fallback. Cells that only call ``card(...)`` show their rendered card, not
their source; emoji are dropped (no emoji font everywhere); each page has an "On this page"
table of contents and a link to download its notebook (copied to ``notebooks/``).
"""
from __future__ import annotations

import argparse
import ast
import copy
import html
import math
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import site_assets
from .quick_nbformat import skip_iri_grammar
from .quiz import question
from .quiz.cells import TAG_ANSWER, TAG_EXERCISE, TAG_LOOK, TAG_SOLUTION, _qid, _tags
from .quiz.widgets import SELF_CHECK_CALL

skip_iri_grammar()  # nbformat and nbconvert, imported lazily below, then build no IRI grammar (quick_nbformat)

LAB_GLOB = "[0-9][0-9]_*.ipynb"
NOTEBOOKS_DIR = "notebooks"  # under the site folder: the committed notebooks, for "Download this notebook"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# A reference that makes the browser fetch from the network: remote scripts, styles, frames,
# images and CSS imports/urls ("//host" counts too: from file:// it means the network).
_REMOTE = r"""["']?\s*(?:https?:)?//"""
_REMOTE_RES = [
    re.compile(r"<script\b[^>]*\bsrc\s*=\s*" + _REMOTE, re.I),
    re.compile(r"<link\b[^>]*\bhref\s*=\s*" + _REMOTE, re.I),
    re.compile(r"<(?:img|iframe|embed|source|video|audio)\b[^>]*\bsrc\s*=\s*" + _REMOTE, re.I),
    re.compile(r"@import\s+(?:url\(\s*)?" + _REMOTE, re.I),
    re.compile(r"url\(\s*" + _REMOTE, re.I),
]
_STRIP_RES = [re.compile(r"<script\b[^>]*\bsrc\s*=\s*" + _REMOTE + r"[^>]*>\s*</script>", re.I),
              re.compile(r"<link\b[^>]*\bhref\s*=\s*" + _REMOTE + r"[^>]*>", re.I)]

# nbconvert's lab page, minus everything it would fetch from a CDN, plus our navigation.
_TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block extra_css -%}<style type="text/css">{{ resources.infralens_css }}</style>{%- endblock extra_css -%}
{%- block body_header -%}{{ super() }}{{ resources.infralens_top }}{%- endblock body_header -%}
{%- block body_footer -%}{{ resources.infralens_nav }}{{ resources.infralens_footer }}{{ resources.infralens_scripts }}{{ super() }}{%- endblock body_footer -%}
{% block codecell %}
{%- if '@@SOLUTION@@' in cell.metadata.get('tags', []) -%}
<details class="infralens-solution"><summary>Worked solution: write your own first, then open</summary>
{{ super() }}
</details>
{%- elif '@@LOOK@@' in cell.metadata.get('tags', []) -%}
<details class="infralens-look"><summary>Answer first, then look: this output answers the question above</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{%- endblock codecell %}
{% block input %}
<div class="jp-CodeMirrorEditor jp-Editor jp-InputArea-editor" data-type="inline">
     <div class="cm-editor cm-s-jupyter">
{{ cell.source | highlight_code(metadata=cell.metadata) }}
     </div>
</div>
{%- endblock input %}
{% block data_png scoped %}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}" alt="{{ (output | get_metadata('alt', 'image/png')) | escape_html }}">
</div>
{%- endblock data_png %}
""".replace("@@SOLUTION@@", TAG_SOLUTION).replace("@@LOOK@@", TAG_LOOK)

_CSS = """
.infralens-nav { display: flex; gap: 1.5em; align-items: baseline; flex-wrap: wrap;
  font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px; padding: 10px 0;
  border-bottom: 1px solid #ddd; margin-bottom: 12px; }
.infralens-nav + .infralens-footer { margin-top: 0; }
.infralens-nav a { text-decoration: none; color: #1565c0; }
.infralens-nav .home { font-weight: 600; }
.infralens-nav .spacer { flex: 1; }
.infralens-footer { font-family: var(--jp-ui-font-family, sans-serif); font-size: 12px; color: #666;
  padding: 8px 0 24px 0; }
.infralens-static-widget { border: 1px solid #c5cae9; border-left: 4px solid #3f51b5; border-radius: 4px;
  padding: 8px 12px; background: #f5f6fc; font-family: var(--jp-ui-font-family, sans-serif); }
.infralens-static-widget .label { font-size: 12px; color: #555; margin: 0 0 4px 0; }
.infralens-static-widget .prompt { font-weight: 600; margin: 4px 0; white-space: pre-wrap; }
.infralens-static-widget ul.options { list-style: none; padding-left: 0.5em; margin: 4px 0 6px 0; }
.infralens-static-widget details { margin-top: 6px; }
.infralens-static-widget summary { cursor: pointer; color: #3f51b5; }
.infralens-solution, .infralens-look, .infralens-key { margin: 6px 0; border-left: 4px solid #9e9e9e; padding-left: 8px; }
.infralens-key { border-left-color: #3f51b5; font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px; }
.infralens-key p { margin: 4px 0; }
.infralens-solution > summary, .infralens-look > summary, .infralens-key > summary { cursor: pointer; color: #555; font-family: var(--jp-ui-font-family, sans-serif);
  font-size: 13px; padding: 4px 0; }
main { max-width: 1100px; margin: 0 auto; }
/* nbconvert's lab CSS breaks output text anywhere (word-break: break-all), splitting "GPU" and
   "point" mid-word; wrap at spaces and break only a token longer than the whole line. */
.jp-OutputArea-output pre { word-break: normal; overflow-wrap: anywhere; }
/* a markdown (or pandas) table wider than the page scrolls inside itself, its visible right edge fading
   out so that a cut table shows that it goes on (present.show's tables carry the same fade) */
.jp-RenderedMarkdown table, .jp-RenderedHTMLCommon table.dataframe { display: block; overflow-x: auto;
  max-width: 100%; box-sizing: border-box; padding-right: 28px;
  -webkit-mask-image: linear-gradient(to right, #000 calc(100% - 28px), transparent);
  mask-image: linear-gradient(to right, #000 calc(100% - 28px), transparent); }
/* a figure wider than a narrow window shrinks with it instead of widening the page */
.jp-OutputArea-output img { max-width: 100%; height: auto; }
.infralens-nav .download::before, .infralens-bar .download::before { content: ""; display: inline-block; width: 0.9em; height: 0.9em;
  margin-right: 0.3em; vertical-align: -0.1em; background: no-repeat center/contain
  url("data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Cpath d='M8 1v9M4 6l4 4 4-4M2 14h12' stroke='%231565c0' stroke-width='2' fill='none'/%3E%3C/svg%3E"); }
"""

_CSS += site_assets.CSS

_INDEX = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>InfraLens Lab: offline edition</title>
<style type="text/css">
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #212121;
  max-width: 860px; margin: 40px auto; padding: 0 20px; line-height: 1.5; }}
h1 {{ margin-bottom: 0.2em; }} .lede {{ color: #555; margin-top: 0; }}
ol.labs {{ list-style: none; padding: 0; }}
ol.labs li {{ border: 1px solid #e0e0e0; border-radius: 6px; padding: 12px 16px; margin: 10px 0; }}
ol.labs a {{ font-size: 1.15em; font-weight: 600; color: #1565c0; text-decoration: none; }}
ol.labs .num {{ color: #888; font-variant-numeric: tabular-nums; margin-right: 0.5em; }}
ol.labs .teaches {{ margin: 4px 0 0 0; color: #333; }}
ol.labs .meta {{ margin: 4px 0 0 0; color: #555; font-size: 0.9em; }}
.note {{ font-size: 0.9em; color: #666; border-top: 1px solid #eee; padding-top: 10px; }}
.infralens-search {{ max-width: none; margin: 16px 0; }}
{css}
</style></head>
<body>
<h1>InfraLens Lab</h1>
<p class="lede">GPU performance engineering from evidence: the offline edition.</p>
{search}
<ol class="labs">
{items}
</ol>
<p class="note">Built from the committed notebooks without running them: every figure, table and
"Evidence:" provenance line is what the notebook showed when it was last run and committed.
Self-checks are interactive only in JupyterLab (<code>make lab</code>); here each one shows its
question and a collapsed explanation. The time per lab is an estimate from its length: its prose at
{wpm} words a minute, {code} minute per code cell, {q} minutes per question and {ex} per exercise.</p>
{scripts}
</body></html>
"""


@dataclass(frozen=True)
class LabPage:
    """One lab: its notebook, the HTML file name it becomes, what the index says about it, about how
    long it takes (:func:`estimate_minutes`) and what it needs (:func:`needs_line`)."""

    notebook: Path
    html_name: str
    title: str
    teaches: str
    minutes: int = 0
    needs: str = ""

    @property
    def number(self) -> int | None:
        """The lab's number from its file name (``05_overlap.ipynb`` -> 5), None without one."""
        head = self.notebook.stem.split("_", 1)[0]
        return int(head) if head.isdigit() else None


@dataclass
class Site:
    """What :func:`build_site` wrote: ``index`` and one page per lab (paths), plus notes
    (problems worth telling the author, such as a lab committed without outputs)."""

    index: Path
    pages: list[Path]
    labs: list[LabPage]
    notes: list[str] = field(default_factory=list)


def find_labs(labs_dir: str | Path) -> list[Path]:
    """The lab notebooks ``NN_*.ipynb`` in ``labs_dir``, in lab order; ValueError if none."""
    d = Path(labs_dir)
    if not d.is_dir():
        raise ValueError(f"labs folder {str(d)!r} does not exist; expected a folder holding NN_*.ipynb notebooks")
    found = sorted(d.glob(LAB_GLOB))
    if not found:
        have = sorted(p.name for p in d.iterdir())[:10]
        raise ValueError(f"no lab notebooks matching {LAB_GLOB!r} in {str(d)!r} (it holds {have}); "
                         "expected e.g. 00_start_here.ipynb")
    return found


def lab_info(nb, notebook: Path) -> LabPage:
    """Title and one-sentence summary from ``metadata.infralens`` ({"title", "teaches"}); without
    it the title is the first markdown heading (else the file name) and the summary is empty. Also
    the time estimate and the GPU line (``metadata.infralens.gpu``/``gpus``, see :func:`needs_line`)."""
    meta = nb.metadata.get("infralens", {}) if hasattr(nb, "metadata") else {}
    if not isinstance(meta, dict):
        raise TypeError(f"{notebook}: metadata.infralens is {type(meta).__name__}, expected an object "
                        'like {"title": ..., "teaches": ...}')
    title = str(meta.get("title") or "").strip()
    if not title:
        for cell in nb.cells:
            m = _HEADING_RE.search(cell.source) if cell.cell_type == "markdown" else None
            if m:
                title = m.group(1).strip()
                break
    title = title or notebook.stem.replace("_", " ")
    return LabPage(notebook=notebook, html_name=notebook.stem + ".html", title=title,
                   teaches=str(meta.get("teaches") or "").strip(), minutes=estimate_minutes(nb),
                   needs=needs_line(meta, notebook))


# How long a lab takes, estimated from what it holds (a formula, stated on the index page):
READ_WORDS_PER_MIN = 200   # prose read with care (technical reading runs 150-250 words a minute)
MIN_PER_CODE_CELL = 0.5    # run it, read its output
MIN_PER_QUESTION = 2       # an answer cell: think, answer, read the feedback
MIN_PER_EXERCISE = 6       # an exercise cell: write the step, check it, read the worked solution
ROUND_TO_MIN = 5


def estimate_minutes(nb) -> int:
    """About how many minutes ``nb`` takes a learner: its markdown words at READ_WORDS_PER_MIN, plus
    MIN_PER_CODE_CELL per code cell, MIN_PER_QUESTION per answer cell (tagged ``answer`` or calling
    ``check(``) and MIN_PER_EXERCISE per cell tagged ``exercise``; rounded up to ROUND_TO_MIN."""
    words = sum(len(re.findall(r"\w+", c.source)) for c in nb.cells if c.cell_type == "markdown")
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    tags = [set(c.get("metadata", {}).get("tags", [])) for c in code]
    exercises = sum(TAG_EXERCISE in t for t in tags)
    questions = sum((TAG_ANSWER in t or "check(" in c.source) and TAG_EXERCISE not in t
                    for c, t in zip(code, tags, strict=True))
    minutes = (words / READ_WORDS_PER_MIN + MIN_PER_CODE_CELL * len(code) + MIN_PER_QUESTION * questions
               + MIN_PER_EXERCISE * exercises)
    return max(ROUND_TO_MIN, int(math.ceil(minutes / ROUND_TO_MIN) * ROUND_TO_MIN))


GPU_NEEDS = ("optional", "required", "none")


def needs_line(meta: dict, notebook: Path | str = "") -> str:
    """What a lab needs, from ``metadata.infralens.gpu`` (``optional``, the default: it runs on a CPU from
    recorded evidence and measures live on a GPU; ``required``; ``none``) and ``gpus`` (how many GPUs its
    live runs need, default 1). Raises ValueError naming the value seen and the values allowed."""
    gpu = meta.get("gpu", "optional")
    gpus = meta.get("gpus", 1)
    if gpu not in GPU_NEEDS:
        raise ValueError(f"{notebook}: metadata.infralens.gpu is {gpu!r}; expected one of {list(GPU_NEEDS)}")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ValueError(f"{notebook}: metadata.infralens.gpus is {gpus!r}; expected a whole number of GPUs, 1 or more")
    some = "an NVIDIA GPU" if gpus == 1 else f"{gpus} NVIDIA GPUs"
    if gpu == "none":
        return "No GPU used."
    if gpu == "required":
        return f"Needs {some}."
    return (f"No GPU needed: on a CPU it runs the kernels in Triton's interpreter and shows recorded GPU evidence; "
            f"with {some} it also measures live.")


def _quiz_fallback(qid: str | None, plain: str) -> str:
    """Static HTML for a self-check widget: the question (from the quiz bank when it knows
    ``qid``, else the widget's plain-text output) and a collapsed explanation."""
    q = None
    if qid:
        try:
            q = question(qid)
        except (ValueError, KeyError, OSError):  # BankError is a ValueError
            q = None
    parts = ['<div class="infralens-static-widget infralens-selfcheck-static">']
    if q is not None:
        parts.append(f'<p class="label">Self-check {html.escape(qid)} (interactive in JupyterLab)</p>')
        unit = f" ({html.escape(q.unit)})" if getattr(q, "unit", "") else ""
        parts.append(f'<p class="prompt">{html.escape(q.prompt)}{unit}</p>')
        if q.options:
            parts.append('<ul class="options">' + "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>"
                                                          for k, v in q.options.items()) + "</ul>")
        elif getattr(q, "vocabulary", ()):  # a text question: the allowed words are its options
            parts.append(f'<p class="vocabulary">Answer with one of: {html.escape(", ".join(q.words))}</p>')
        parts.append(f"<details><summary>Show the explanation</summary><p>{html.escape(q.explanation)}</p>"
                     "</details>")
    else:
        label = f"Self-check {html.escape(qid)}" if qid else "Interactive widget"
        parts.append(f'<p class="label">{label} (interactive only in JupyterLab)</p>')
        parts.append(f'<p class="prompt">{html.escape(plain)}</p>')
    parts.append("</div>")
    return "".join(parts)


def static_widgets(nb) -> int:
    """Replace every widget-view output in ``nb`` (in place) with static HTML; returns how many.
    Also drops ``metadata.widgets`` so no page tries to load a widget manager."""
    n = 0
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        qids = SELF_CHECK_CALL.findall(cell.source)
        k = 0
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_MIME not in data:
                continue
            qid = qids[k] if k < len(qids) else None
            k += 1
            plain = data.get("text/plain", "")
            plain = "".join(plain) if isinstance(plain, list) else str(plain)
            out["data"] = {"text/html": _quiz_fallback(qid, plain), "text/plain": plain}
            out.get("metadata", {}).pop(WIDGET_MIME, None)
            n += 1
    return n


_CARD_CALL = re.compile(r"^\s*(?:present\.)?card\(")
# Emoji (and the variation selector after one): no emoji font is installed on many machines,
# so they would show as empty boxes. Older committed outputs carry them in explanation cards.
_EMOJI_RE = re.compile("[\U0001F300-\U0001FAFF\u2600-\u27BF\u2B50\u2B55]\uFE0F?[ \u00A0]?")
_TOC_HEADING_RE = re.compile(r'<h([23])\b[^>]*\bid="([^"]+)"[^>]*>(.*?)</h\1>', re.S)


def is_card_cell(source: str) -> bool:
    """True if a code cell only calls ``card(...)``/``present.card(...)``: its output (the
    rendered card) is the content, so the offline edition shows that and hides the source."""
    if not _CARD_CALL.match(source):
        return False
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return bool(tree.body) and all(
        isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
        and ((isinstance(st.value.func, ast.Name) and st.value.func.id == "card")
             or (isinstance(st.value.func, ast.Attribute) and st.value.func.attr == "card"))
        for st in tree.body)


def strip_emoji(text: str) -> str:
    """``text`` without emoji characters (see ``_EMOJI_RE``)."""
    return _EMOJI_RE.sub("", text)


def _prepare(nb) -> None:
    """In place: hide the source of card cells, drop emoji from markdown and text outputs, and give
    every figure without alt text (one not drawn by ``present.show``) a fallback naming its section."""
    heading = ""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = strip_emoji(cell.source)
            found = _HEADING_RE.findall(cell.source)
            heading = re.sub(r"[*_`]", "", found[-1]).strip() if found else heading
            continue
        if cell.cell_type != "code":
            continue
        if is_card_cell(cell.source):
            cell.metadata.setdefault("transient", {})["remove_source"] = True
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = strip_emoji("".join(out["text"]) if isinstance(out["text"], list) else out["text"])
            for mime in ("text/markdown", "text/html", "text/plain"):
                v = out.get("data", {}).get(mime)
                if v is not None:
                    out["data"][mime] = strip_emoji("".join(v) if isinstance(v, list) else v)
            if "image/png" in out.get("data", {}):
                md = out.setdefault("metadata", {}).setdefault("image/png", {})
                if not str(md.get("alt") or "").strip():
                    md["alt"] = (f"A figure of the section “{heading}” (no description was stored with it)."
                                 if heading else "A figure (no description was stored with it).")


def section_numbers(body: str, lab_number: int | None) -> tuple[str, list[tuple[int, str, str, str]]]:
    """``body`` with every h2 and h3 numbered in order, without gaps (lab 5: ``5.1``, ``5.1.1``, ``5.2``;
    a lab without a number: ``1``, ``1.1``), and the list of ``(level, number, anchor, text)`` for the contents."""
    sections: list[tuple[int, str, str, str]] = []
    h2 = h3 = 0
    prefix = f"{lab_number}." if lab_number is not None else ""

    def number(m: re.Match) -> str:
        nonlocal h2, h3
        level, anchor, inner = m.group(1), m.group(2), m.group(3)
        text = site_assets.heading_text(inner)
        if not text:
            return m.group(0)
        if level == "2":
            h2, h3 = h2 + 1, 0
            num = f"{prefix}{h2}"
        else:
            h3 += 1
            num = f"{prefix}{h2}.{h3}" if h2 else f"{prefix}0.{h3}"
        sections.append((int(level), num, anchor, text))
        start = m.group(0).index(">") + 1
        return m.group(0)[:start] + f'<span class="secnum">{num}</span> ' + m.group(0)[start:]

    return _TOC_HEADING_RE.sub(number, body), sections


def table_of_contents(sections: list[tuple[int, str, str, str]]) -> str:
    """The "On this page" box: every numbered section (:func:`section_numbers`), subsections indented.
    It sits in the page's sticky bar: a side panel on a wide window, a drop-down on a narrow one."""
    if not sections:
        return ""
    items = "".join(f'<li class="{"sub" if level == 3 else "sec"}"><a href="#{anchor}"><span class="secnum">'
                    f"{html.escape(num)}</span>{html.escape(text)}</a></li>" for level, num, anchor, text in sections)
    return (f'<details class="infralens-toc"><summary>On this page</summary><div class="panel">'
            f"<ul>{items}</ul></div></details>")


def remote_refs(page: str) -> list[str]:
    """Snippets of ``page`` that would fetch from the network (remote script, style, image,
    CSS import or url); an offline page has none."""
    hits = []
    for rx in _REMOTE_RES:
        hits += [page[m.start():m.start() + 120] for m in rx.finditer(page)]
    return hits


def _nav(labs: list[LabPage], i: int) -> str:
    """The plain navigation at the foot of a page: all labs, previous, download, next."""
    prev = (f'<a class="prev" href="{html.escape(labs[i - 1].html_name)}">&larr; {html.escape(labs[i - 1].title)}</a>'
            if i > 0 else "")
    nxt = (f'<a class="next" href="{html.escape(labs[i + 1].html_name)}">{html.escape(labs[i + 1].title)} &rarr;</a>'
           if i + 1 < len(labs) else "")
    return (f'<nav class="infralens-nav"><a class="home" href="index.html">InfraLens Lab: all labs</a>'
            f'{prev}{_download(labs[i])}<span class="spacer"></span>{nxt}</nav>')


def _download(lab: LabPage) -> str:
    return (f'<a class="download" href="{NOTEBOOKS_DIR}/{html.escape(lab.notebook.name)}" '
            f'download="{html.escape(lab.notebook.name)}">Download this notebook</a>')


def _top_bar(labs: list[LabPage], i: int, toc: str) -> str:
    """The sticky bar at the top of a lab page: all labs, search, contents, previous and next."""
    prev = (f'<a class="prev" href="{html.escape(labs[i - 1].html_name)}" title="{html.escape(labs[i - 1].title)}">'
            "&larr; previous lab</a>" if i > 0 else "")
    nxt = (f'<a class="next" href="{html.escape(labs[i + 1].html_name)}" title="{html.escape(labs[i + 1].title)}">'
           "next lab &rarr;</a>" if i + 1 < len(labs) else "")
    return (f'<nav class="infralens-bar"><a class="home" href="index.html">InfraLens Lab</a>'
            f"{site_assets.search_box()}{toc}{prev}{nxt}{_download(labs[i])}</nav>")


def lab_meta(lab: LabPage) -> str:
    """The line under the bar: about how long the lab takes and what it needs."""
    return (f'<p class="infralens-labmeta">About {lab.minutes} minutes (estimated from its length, questions and '
            f"exercises). {html.escape(lab.needs)}</p>")


_IMG_NO_ALT = re.compile(r"<img(?![^>]*\balt=)")
_FOCUSABLE = re.compile(r'<div class="(jp-Cell-inputWrapper|[^"]*\bjp-OutputArea-output\b[^"]*)"')
NO_ALT = "No description has been provided for this image"


def accessible(page: str) -> str:
    """What nbconvert's HTMLExporter does to a page after its template, without re-parsing the whole page with
    BeautifulSoup (a third of the site's build time): an ``alt`` on every image without one, and input and output
    areas focusable (``tabindex="0"``)."""
    page = _IMG_NO_ALT.sub(f'<img alt="{NO_ALT}"', page)
    return _FOCUSABLE.sub(lambda m: f'<div class="{m.group(1)}" tabindex="0"', page)


def _exporter():
    from jinja2 import DictLoader  # heavy: jinja2, only here
    from nbconvert import HTMLExporter  # heavy: Jupyter, only here
    from nbconvert.exporters.templateexporter import TemplateExporter  # heavy: Jupyter, only here

    class SiteExporter(HTMLExporter):
        """HTMLExporter with its page-wide BeautifulSoup pass replaced by :func:`accessible`. The template's
        code input is highlighted by Pygments, which escapes the source, and not run through bleach again."""

        def from_notebook_node(self, nb, resources=None, **kw):
            from nbconvert.filters.highlight import Highlight2HTML  # heavy: Jupyter, only here
            from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter  # heavy: Jupyter, only here

            langinfo = nb.metadata.get("language_info", {})
            lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
            resources = self._init_resources(resources)
            self.register_filter("highlight_code", self.filters.get(
                "highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)))
            self.register_filter("filter_data_type", WidgetsDataTypeFilter(
                notebook_metadata=self._nb_metadata, parent=self, resources=resources))
            body, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
            return accessible(body), resources

    return SiteExporter(template_name="lab", template_file="infralens_site.html.j2", embed_images=True,
                        extra_loaders=[DictLoader({"infralens_site.html.j2": _TEMPLATE})], theme="light")


KEY_CLASS = "infralens-key"


def answer_key_html(qid: str) -> str:
    """The folded answer key of question ``qid``: the bank's answer (the option and its text, the number with its
    tolerance, the accepted words; for a derived question, where it comes from) and the explanation."""
    q = question(qid)
    if q.kind == "function":
        what = ("A function, checked on this lab's evidence and on held-out evidence (the other GPU's recording, "
                "perturbed copies): the grader runs the reference function on the same cases (the worked solution "
                "is folded above).")
    elif q.derive is not None:
        what = ("Worked out from the evidence this page shows: the grader derives it again from the same evidence "
                "(its worked solution, where it has one, is folded above).")
    elif q.kind == "choice":
        what = f"<b>{html.escape(str(q.answer))}.</b> {html.escape(q.options.get(q.answer, ''))}"
    elif q.kind == "number":
        tol = ", ".join(f"{k} {v:g}" for k, v in q.tolerance.items())
        what = f"<b>{q.answer:g}</b>{' ' + html.escape(q.unit) if q.unit else ''} (accepted within {html.escape(tol)})"
    else:
        what = "<b>" + html.escape(" or ".join(q.answer if isinstance(q.answer, (list, tuple)) else [q.answer])) + "</b>"
    return (f'<details class="{KEY_CLASS}"><summary>Answer key ({html.escape(qid)}): open once you have answered</summary>'
            f'<p class="answer">Answer: {what}</p><p class="explanation">{html.escape(q.explanation)}</p></details>')


def add_answer_key(nb) -> int:
    """In place: after every answer and exercise cell, a raw HTML cell holding its folded answer key
    (:func:`answer_key_html`); returns how many. A question the bank does not know gets none."""
    cells, n = [], 0
    for cell in nb.cells:
        cells.append(cell)
        qid = _qid(cell)
        if cell.cell_type == "code" and qid and _tags(cell) & {TAG_ANSWER, TAG_EXERCISE}:
            try:
                key = answer_key_html(qid)
            except (ValueError, KeyError, OSError):  # BankError is a ValueError
                continue
            cells.append(_html_cell(key))
            n += 1
    nb.cells = cells
    return n


def _html_cell(text: str):
    """A markdown cell holding one HTML block (no blank line inside, so the markdown renderer passes it whole;
    a raw cell's <details> would be escaped by nbconvert's cleaning)."""
    import nbformat  # heavy: Jupyter, only here

    return nbformat.v4.new_markdown_cell(text.replace("\n\n", "\n"))


def render_lab(nb, labs: list[LabPage], i: int, exporter=None, key: bool = True) -> str:
    """The HTML page of lab ``labs[i]`` from its notebook ``nb`` (not modified; not executed); with ``key``, each
    question is followed by its folded answer key (:func:`add_answer_key`)."""
    nb = copy.deepcopy(nb)
    static_widgets(nb)
    _prepare(nb)
    if key:
        add_answer_key(nb)
    nb.metadata["title"] = labs[i].title
    exporter = exporter or _exporter()
    footer = ('<p class="infralens-footer">Offline edition of <code>'
              f'{html.escape(labs[i].notebook.name)}</code>: outputs as committed, not re-run. '
              "Run it yourself with <code>make lab</code>.</p>")
    marker = "<!--infralens-top-->"
    resources = {"metadata": {"name": labs[i].title, "path": str(labs[i].notebook.parent)},
                 "infralens_css": _CSS, "infralens_top": marker, "infralens_nav": _nav(labs, i),
                 "infralens_footer": footer, "infralens_scripts": site_assets.scripts()}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    for rx in _STRIP_RES:  # belt and braces: the template emits none of these
        body = rx.sub("", body)
    body, sections = section_numbers(body, labs[i].number)
    body = body.replace(marker, _top_bar(labs, i, table_of_contents(sections)) + lab_meta(labs[i]), 1)
    # links between labs point at their pages, not at the notebooks
    # (except the download link, which is meant to fetch the notebook itself)
    return re.sub(r'href="(?![a-zA-Z][a-zA-Z0-9+.-]*:)(?!' + NOTEBOOKS_DIR + r'/)([^"#?]*?)\.ipynb(#[^"]*)?"',
                  r'href="\1.html\2"', body)


def render_index(labs: list[LabPage]) -> str:
    """The ``index.html`` listing every lab with its title, what it teaches, how long it takes and what it needs."""
    items = []
    for lab in labs:
        num = lab.notebook.stem.split("_", 1)[0]
        teaches = f'<p class="teaches">{html.escape(lab.teaches)}</p>' if lab.teaches else ""
        items.append(f'<li><span class="num">{html.escape(num)}</span>'
                     f'<a href="{html.escape(lab.html_name)}">{html.escape(lab.title)}</a>{teaches}'
                     f'<p class="meta">About {lab.minutes} minutes. {html.escape(lab.needs)}</p></li>')
    return _INDEX.format(items="\n".join(items), search=site_assets.search_box(), scripts=site_assets.scripts(),
                         css=site_assets.CSS, wpm=READ_WORDS_PER_MIN, code=MIN_PER_CODE_CELL, q=MIN_PER_QUESTION,
                         ex=MIN_PER_EXERCISE)


def build_site(labs_dir: str | Path = "labs", out_dir: str | Path = "site", key: bool = True) -> Site:
    """Write ``out_dir/index.html``, one page per ``labs_dir/NN_*.ipynb`` from the committed notebooks
    (never executed), the search index and the script (:mod:`.site_assets`). With ``key`` (the default) each
    question carries its folded answer key; ``key=False`` is the instructor's copy without it (``make site KEY=0``).
    Returns the :class:`Site`; ValueError if there are no labs."""
    import nbformat  # heavy: Jupyter, only here

    notebooks = find_labs(labs_dir)
    out = Path(out_dir)
    try:
        (out / NOTEBOOKS_DIR).mkdir(parents=True, exist_ok=True)
        probe = out / ".infralens-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"cannot write the site to {str(out)!r}: {exc.strerror or exc}; expected a folder this "
                         "user can create and write. Fix: pass --out with a writable folder, e.g. --out site") from exc
    nbs = [nbformat.read(p, as_version=4) for p in notebooks]
    labs = [lab_info(nb, p) for nb, p in zip(nbs, notebooks, strict=True)]
    site = Site(index=out / "index.html", pages=[], labs=labs)
    exporter = _exporter()
    entries: list[dict] = []
    for i, nb in enumerate(nbs):
        code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
        if code and not any(c.get("outputs") for c in code):
            site.notes.append(f"{labs[i].notebook.name}: no outputs; run it and commit it with outputs "
                              "so the offline edition shows its figures and tables")
        page = render_lab(nb, labs, i, exporter, key=key)
        for ref in remote_refs(page):
            site.notes.append(f"{labs[i].html_name}: needs the network: {ref[:80]!r}")
        path = out / labs[i].html_name
        path.write_text(page, encoding="utf-8")
        shutil.copyfile(labs[i].notebook, out / NOTEBOOKS_DIR / labs[i].notebook.name)
        site.pages.append(path)
        entries += site_assets.page_sections(page, labs[i].html_name, labs[i].title)
    (out / site_assets.SEARCH_INDEX_FILE).write_text(site_assets.search_index_js(entries), encoding="utf-8")
    (out / site_assets.SCRIPT_FILE).write_text(site_assets.SCRIPT, encoding="utf-8")
    site.index.write_text(render_index(labs), encoding="utf-8")
    return site


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infralens_lab site",
                                 description="Build the offline HTML edition from the committed notebooks.")
    ap.add_argument("--labs", default="labs", help="folder with NN_*.ipynb (default: labs)")
    ap.add_argument("--out", default="site", help="output folder (default: site)")
    ap.add_argument("--no-key", action="store_true",
                    help="leave out the folded answer key under each question (make site KEY=0)")
    args = ap.parse_args(argv)
    try:
        site = build_site(args.labs, args.out, key=not args.no_key)
    except ValueError as exc:
        print(f"site: {exc}", file=sys.stderr)
        return 2
    for note in site.notes:
        print(f"site: note: {note}", file=sys.stderr)
    print(f"site: wrote {len(site.pages)} lab pages and {site.index} "
          f"(open file://{site.index.resolve()} in a browser; no network needed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
