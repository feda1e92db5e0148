"""Tables as every lab shows them: escaped text, readable numbers, units in headers, long kernel
names shortened between their tokens with the full name on hover, a box of their own that scrolls
sideways when the table is wider than its cell, its cut edge fading out, and a line saying so when it
is likely to (see :mod:`infralens_lab.present`, which re-exports everything here)."""
from __future__ import annotations

import html
import math
import numbers
import re
from typing import Any

import pandas as pd

# A column name's unit suffix -> the unit shown in its header (longest suffixes first).
UNIT_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("_FLOP_per_B", "FLOP/B"), ("_FLOP_per_byte", "FLOP/B"), ("_TFLOP_s", "TFLOP/s"), ("_TB_s", "TB/s"),
    ("_GB_s", "GB/s"), ("_gb_per_s", "GB/s"), ("_tb_per_s", "TB/s"), ("_TFLOPs", "TFLOP/s"), ("_TBps", "TB/s"), ("_tbps", "TB/s"), ("_gbps", "GB/s"), ("_GBps", "GB/s"),
    ("_MiB", "MiB"), ("_GiB", "GiB"), ("_mb", "MB"), ("_MB", "MB"), ("_gb", "GB"), ("_GB", "GB"),
    ("_us", "µs"), ("_ms", "ms"), ("_ns", "ns"), ("_pct", "%"), ("_ghz", "GHz"),
)
# Text longer than this in a name-like cell (few spaces: a kernel or op name) is shortened.
NAME_MAX_CHARS = 48
# Free text (sentences) wraps at about this width instead of widening the table.
TEXT_WRAP_EM = 28
_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"))

_TABLE_CSS = (
    "<style>"
    ".infralens-table{overflow-x:auto;max-width:100%;margin:4px 0 2px 0}"
    ".infralens-table table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:0}"
    ".infralens-table th,.infralens-table td{padding:3px 10px;border-bottom:1px solid "
    "var(--jp-border-color2,#e0e0e0);vertical-align:top}"
    ".infralens-table thead th{border-bottom:1px solid var(--jp-border-color1,#bdbdbd);font-weight:600}"
    ".infralens-table td.num{text-align:right;white-space:nowrap}"
    ".infralens-table .txt{text-align:left}"
    f".infralens-table td.long{{min-width:14em;max-width:{TEXT_WRAP_EM}em;white-space:normal}}"
    ".infralens-table tbody th{text-align:left;font-weight:600;white-space:nowrap}"
    ".infralens-table abbr{text-decoration:underline dotted;cursor:help}"
    "</style>"
)



# ---------------------------------------------------------------- numbers and text
def format_number(v: Any) -> str:
    """A number as people read it: integers exactly, with thousands separators
    (``33,554,432``); other values to about three significant digits, never in ``e``
    notation below a million (``8,567``, ``12.3``, ``0.00615``), trailing zeros kept where
    they are digits of a value that is not exactly that short (``3.00`` for 3.004, ``3.6`` for 3.6); a million and up with an SI
    prefix (``4.33 G``); whole floats below 10¹² (counts) exactly; NaN as ``—``. Non-numbers are returned as ``str(v)``."""
    if v is None:
        return "—"
    if isinstance(v, bool) or not isinstance(v, numbers.Number):
        return str(v)
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}"
    x = float(v)
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    a = abs(x)
    if x == round(x) and a < 1e12:  # a whole count (bytes, instructions): exact
        return f"{round(x):,}"
    if a >= 1e6:
        for scale, prefix in _SI:
            if a >= scale:
                return f"{x / scale:.3g} {prefix}" if a < scale * 1000 or prefix == "P" else f"{x / scale:,.0f} {prefix}"
    if x == round(x):
        return f"{round(x):,}"
    if a >= 100:
        return f"{x:,.0f}"
    if a < 1e-6:
        return f"{x:.2e}"
    decimals = 2 - math.floor(math.log10(a))
    s = f"{x:.{decimals}f}"
    if "." in s:
        short = s.rstrip("0").rstrip(".")
        if float(short) == x:  # the zeros say nothing (3.6, 0.5): drop them
            return short
    return s  # 3.004 -> "3.00": the zeros are measured digits, and "3" would read as a count


def header_label(name: Any) -> str:
    """Display text of a column name: a unit suffix becomes a unit in parentheses and
    underscores become spaces (``dram_tbps`` -> ``dram (TB/s)``); other names are kept."""
    s = str(name)
    for suffix, unit in UNIT_SUFFIXES:
        if s.endswith(suffix) and len(s) > len(suffix):
            return f"{s[: -len(suffix)].replace('_', ' ')} ({unit})"
    return s


_NAME_SEPS = frozenset("_:<>,()[] .")
_NAMESPACES = re.compile(r"\b(?:[A-Za-z_]\w*::)+")
_CUT_MARK = re.compile(r"(?:\.\.\.|…)$")


def _head(text: str, budget: int) -> str:
    """The longest start of ``text`` within ``budget`` characters that ends between two tokens of a name."""
    if len(text) <= budget:
        return text
    cut = max((i for i in range(1, budget + 1) if text[i - 1] in _NAME_SEPS or text[i] in _NAME_SEPS), default=0)
    return text[:cut if cut >= budget // 2 else budget].rstrip(" ,_:(<")


def _tail(text: str, budget: int) -> str:
    """The longest end of ``text`` within ``budget`` characters that starts between two tokens of a name."""
    if len(text) <= budget:
        return text
    first = len(text) - budget
    start = min((i for i in range(first, len(text)) if text[i - 1] in _NAME_SEPS or text[i] in _NAME_SEPS),
                default=len(text))
    return text[start if len(text) - start >= budget // 2 else first:].lstrip(" ,_:")


def shorten_name(text: str, limit: int = NAME_MAX_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters by an ellipsis in the middle, keeping the start and
    the end (where kernel names say what they are), and cutting only between the tokens of a name
    (``_``, ``::``, ``<``, ``,``...), never inside one. First a C++ ``void`` return type, a trailing
    argument list and namespace qualifiers (``at::native::``) go. A name already cut by whoever
    recorded it (ending in ``...``) keeps its start only, without its cut last token. Unchanged if short
    enough."""
    if len(text) <= limit:
        return text
    text = re.sub(r"^void\s+", "", text)
    text = re.sub(r"\((?:[^()]|\([^()]*\))*\)$", "", text) or text
    if len(text) > limit:
        text = _NAMESPACES.sub("", text) or text
    if _CUT_MARK.search(text):  # cut before us: its end is gone, and so is the end of its last token
        body = _CUT_MARK.sub("", text)
        body = body[:max((i for i, ch in enumerate(body) if ch in _NAME_SEPS), default=len(body))]
        return _head(body, limit - 1) + "…"
    if len(text) <= limit:
        return text
    head = _head(text, (limit * 3) // 5)
    return head + "…" + _tail(text, limit - len(head) - 1)


KERNEL_NAME_MAX_CHARS = 96  # kernel_names_short never widens a column past this, however alike the names
_ANON = re.compile(r"\(anonymous namespace\)::")


def _drop_arguments(text: str) -> str:
    """``text`` without a trailing, balanced ``(...)`` argument list (nested parentheses included)."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text[:i].rstrip() or text
    return text


def kernel_name_short(text: str, limit: int = NAME_MAX_CHARS) -> str:
    """A kernel or op name cut to at most ``limit`` characters, spaces or not: :func:`shorten_name`'s cut after
    dropping a ``void`` return type, the argument list and namespace qualifiers, ``(anonymous namespace)::``
    included, so that C++ template names with spaces (``float const*``), which :func:`shorten_name` leaves
    alone as prose, are cut too. What ``python -m infralens_lab analyze`` prints; the notebooks keep
    :func:`shorten_names`. Unchanged if short enough."""
    if not isinstance(text, str) or len(text) <= limit:
        return text
    t = _drop_arguments(re.sub(r"^void\s+", "", text))
    t = _NAMESPACES.sub("", _ANON.sub("", t)) or t
    return shorten_name(t, limit)


def kernel_names_short(values, limit: int = NAME_MAX_CHARS) -> list:
    """``values`` (one column) with every string :func:`kernel_name_short`-ened at one cut for the column, from
    ``limit`` up to :data:`KERNEL_NAME_MAX_CHARS`, so that names that differ stay different; names still
    alike at the widest cut end in ``#`` and the first 4 hex digits of their full name's SHA-1."""
    import hashlib  # lazy: only here

    names = {v for v in values if isinstance(v, str)}
    cut = _distinct_cut(names, kernel_name_short, limit, KERNEL_NAME_MAX_CHARS)
    short = {n: kernel_name_short(n, cut) for n in names}
    alike: dict[str, list[str]] = {}
    for n, s in short.items():
        alike.setdefault(s, []).append(n)
    for group in (g for g in alike.values() if len(g) > 1):
        for n in group:
            short[n] = kernel_name_short(n, cut - 6) + "#" + hashlib.sha1(n.encode()).hexdigest()[:4]
    return [short[v] if isinstance(v, str) else v for v in values]


HEADER_LINE_CHARS = 12  # a header wraps onto lines of about this many characters


def _header_html(name: Any) -> str:
    """Escaped header text, wrapped between words onto short lines (``<br>``) so that a long
    column name does not make its column wider than its numbers; a word longer than a line
    (``pred_sectors_per_req``) may also break after its underscores (``<wbr>``), when space is short."""
    lines: list[str] = []
    for word in header_label(name).split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= HEADER_LINE_CHARS:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(html.escape(line).replace("_", "_<wbr>") if len(line) > HEADER_LINE_CHARS
                       else html.escape(line) for line in lines)


def _is_name_like(text: str) -> bool:
    """A kernel or op name, not prose: at most two spaces once a C++ signature's ", " are set aside."""
    return text.replace(", ", ",").count(" ") <= 2


# Inline styles as well as the <style> block: JupyterLab's sanitizer may drop <style> in an
# untrusted notebook, and its own table CSS centres tables and right-aligns every cell.
_STYLE = {"num": "text-align:right;white-space:nowrap", "txt": "text-align:left",
          "txt long": f"text-align:left;white-space:normal;min-width:14em;max-width:{TEXT_WRAP_EM}em"}
_BOX_STYLE = "overflow-x:auto;max-width:100%;display:flex;align-items:stretch"
# A table estimated wider than this (px, at ~7.5 px a character of a 14 px font, 20 px padding a cell) also says
# in words that it may scroll: the offline edition's page is about this wide in an 800 px window, and an
# overlay scrollbar (macOS, touch) shows nothing until one scrolls. (Every table's cut edge fades out.)
WIDE_TABLE_PX = 720
_CHAR_PX, _CELL_PAD_PX = 7.5, 20
SCROLL_CUE_CLASS = "infralens-scroll-cue"
_CUE_STYLE = "font-size:12px;color:var(--jp-ui-font-color2,#616161);margin:2px 0 0 0;text-align:right"
_TABLE_STYLE = "margin:0 28px 0 0;table-layout:auto;flex:0 0 auto"
# The right edge of a table that scrolls fades out: a strip stuck to the box's visible right edge, drawn in the
# page's background colour, so it shows only over content that runs on past the edge (over the table's own
# 28 px right margin, when it fits, there is nothing to fade). Visible with or without a scrollbar.
SCROLL_FADE_CLASS = "infralens-scroll-fade"
_FADE = (f'<div class="{SCROLL_FADE_CLASS}" aria-hidden="true" style="position:sticky;right:0;flex:0 0 28px;'
         "margin-left:-28px;pointer-events:none;background:linear-gradient(to right,rgba(255,255,255,0),"
         'var(--jp-layout-color0,#fff) 75%)"></div>')


def _td(cls: str, inner: str) -> str:
    return f'<td class="{cls}" style="{_STYLE[cls]}">{inner}</td>'


def _whole_column(values) -> bool:
    """True if every number in ``values`` is a whole count below 10¹⁵ (bytes, FLOPs, samples):
    such a column is written exactly, all in one format, rather than partly with SI prefixes."""
    nums = [float(v) for v in values if isinstance(v, numbers.Number) and not isinstance(v, bool)
            and not math.isnan(float(v))]
    return bool(nums) and all(math.isfinite(x) and x.is_integer() and abs(x) < 1e15 for x in nums)


def _is_long_name(v: Any) -> bool:
    return isinstance(v, str) and len(v) > NAME_MAX_CHARS and _is_name_like(v)


def _name_limit(values) -> int:
    """The shortest cut, from NAME_MAX_CHARS up, at which a column's long names that differ still differ
    once shortened (two cuBLAS kernels can share their first and last twenty characters)."""
    names = {v for v in values if _is_long_name(v)}
    return _distinct_cut(names, shorten_name, NAME_MAX_CHARS, max(map(len, names), default=0))


def _distinct_cut(names: set[str], cut, start: int, stop: int) -> int:
    """The shortest length, from ``start`` up in steps of 8 and at most ``stop`` (once reached), at which
    ``cut(name, length)`` keeps the ``names`` that differ different."""
    limit = start
    while limit < stop and len({cut(n, limit) for n in names}) < len(names):
        limit = min(limit + 8, stop)
    return limit


def shorten_names(values) -> list:
    """``values`` (one column) with every long name shortened as the tables show it: one cut for the whole
    column (:func:`_name_limit`), so names that differ stay different; other values unchanged."""
    limit = _name_limit(values)
    return [shorten_name(v, limit) if _is_long_name(v) else v for v in values]


def _cell_html(v: Any, floatfmt: str | None, whole: bool = False, limit: int = NAME_MAX_CHARS) -> tuple[str, str]:
    """(css class, escaped inner HTML) of one table cell; ``whole``: its column holds counts; ``limit``:
    the length a long name is shortened to (:func:`_name_limit`)."""
    if isinstance(v, numbers.Number) and not isinstance(v, bool):
        if floatfmt and isinstance(v, float) and not math.isnan(v):
            return "num", html.escape(floatfmt.format(v))
        if whole and not math.isnan(float(v)):
            return "num", f"{round(float(v)):,}"
        return "num", html.escape(format_number(v))
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "num", "—"
    s = str(v)
    try:  # pandas NA / NaT
        if not isinstance(v, (list, tuple, dict)) and pd.isna(v):
            return "num", "—"
    except (TypeError, ValueError):
        pass
    if _is_long_name(s):
        return "txt", f'<abbr title="{html.escape(s)}">{html.escape(shorten_name(s, limit))}</abbr>'
    cls = "txt long" if len(s) > TEXT_WRAP_EM * 2 else "txt"
    return cls, html.escape(s)


def _flat_columns(df):
    """``df`` with its index as leading columns when the index says something (it has a name, or holds
    labels), dropped when it is only the row positions a sort or a filter left behind (unnamed integers),
    and MultiIndex columns joined with " / "."""
    if not _plain_index(df):
        named = any(n is not None for n in df.index.names)
        if not named and pd.api.types.is_integer_dtype(df.index.dtype):
            df = df.reset_index(drop=True)
        else:
            df = df.reset_index()
            if not named:  # labels without a name: a first column with an empty header, not "index"
                df = df.rename(columns={df.columns[0]: ""})
    if isinstance(df.columns, pd.MultiIndex):
        df = df.copy()
        df.columns = [" / ".join(str(x) for x in c if str(x)) for c in df.columns]
    return df


def table_html(df, floatfmt: str | None = None) -> str:
    """The HTML of DataFrame ``df`` as :func:`show` draws it (see the module docstring):
    escaped text, readable numbers, units in headers, one-row tables transposed, inside a
    horizontally scrolling box. ``floatfmt`` (e.g. ``"{:.2f}"``) overrides the float format."""
    df = _flat_columns(df)
    cols = list(df.columns)
    parts = [_TABLE_CSS, f'<div class="infralens-table" style="{_BOX_STYLE}"><table style="{_TABLE_STYLE}">']
    if len(df) == 1 and len(cols) > 1:
        row = df.iloc[0]
        parts.append("<tbody>")
        for c in cols:
            cls, inner = _cell_html(row[c], floatfmt)
            parts.append(f'<tr><th title="{html.escape(str(c))}" style="text-align:left">'
                         f'{html.escape(header_label(c))}</th>{_td(cls, inner)}</tr>')
        parts.append("</tbody>")
    else:
        whole = [_whole_column(df[c].tolist()) for c in cols] if len(set(cols)) == len(cols) else [False] * len(cols)
        limits = [_name_limit(df.iloc[:, j].tolist()) for j in range(len(cols))]  # by position, as table_text
        rows = [[_cell_html(v, floatfmt, whole[j], limits[j]) for j, v in enumerate(r)]
                for r in df.itertuples(index=False, name=None)]
        numeric = [bool(rows) and all(r[j][0] == "num" for r in rows) for j in range(len(cols))]
        parts.append("<thead><tr>")
        for j, c in enumerate(cols):
            align, side = ("num", "right") if numeric[j] else ("txt", "left")
            parts.append(f'<th class="{align}" title="{html.escape(str(c))}" '
                         f'style="text-align:{side};vertical-align:bottom">{_header_html(c)}</th>')
        parts.append("</tr></thead><tbody>")
        for r in rows:
            parts.append("<tr>" + "".join(_td(cls, inner) for cls, inner in r) + "</tr>")
        parts.append("</tbody>")
        if estimated_width_px(cols, rows) > WIDE_TABLE_PX:
            parts.insert(1, f'<div class="{SCROLL_CUE_CLASS}" style="{_CUE_STYLE}">{len(cols)} columns: if some are '
                            "hidden, scroll the table sideways &rarr;</div>")
    parts.append(f"</table>{_FADE}</div>")
    return "".join(parts)


def estimated_width_px(cols, rows) -> float:
    """About how wide a table is drawn (px): per column its widest header line or cell text (long text
    counted at its wrap width), at ``_CHAR_PX`` a character plus ``_CELL_PAD_PX`` of padding."""
    total = 0.0
    for j, c in enumerate(cols):
        head = max((len(piece) for line in _header_html(c).split("<br>") for piece in line.split("<wbr>")),
                   default=0)
        body = max((TEXT_WRAP_EM * 2 if "long" in cls else len(html.unescape(re.sub(r"<[^>]+>", "", inner)))
                    for cls, inner in (r[j] for r in rows)), default=0)
        total += max(head, body) * _CHAR_PX + _CELL_PAD_PX
    return total


def table_text(df, floatfmt: str | None = None, shorten: bool = True) -> str:
    """Plain-text rendering of ``df`` with the same number format, headers and shortened names
    as the HTML (which keeps a long name whole on hover; :func:`shorten_name`). ``shorten=False``
    leaves text as it is (names the caller shortened already, e.g. by :func:`kernel_names_short`)."""
    df = _flat_columns(df)
    fmt = (lambda v: floatfmt.format(v)) if floatfmt else format_number

    def number(v) -> bool:
        return isinstance(v, numbers.Number) and not isinstance(v, bool)

    shown = {}
    for j in range(df.shape[1]):
        col = [v if number(v) else "—" if v is None else str(v) for v in df.iloc[:, j].tolist()]
        shown[j] = [fmt(v) if number(v) else v for v in (shorten_names(col) if shorten else col)]
    shown = type(df)(shown, index=df.index)
    shown.columns = [header_label(c) for c in df.columns]
    if len(shown) == 1 and len(shown.columns) > 1:
        width = max(len(str(c)) for c in shown.columns)
        return "\n".join(f"{c!s:<{width}}  {shown.iloc[0][c]}" for c in shown.columns)
    return shown.to_string(index=False)



def _plain_index(df) -> bool:
    return isinstance(df.index, pd.RangeIndex)
