"""The offline edition's client side: its search index, one plain script and the styles they need.

``python -m infralens_lab site`` writes ``search_index.js`` (every section of every lab: its page,
anchor, numbered title and text, built by :func:`page_sections` from the rendered pages) and
``site.js`` (:data:`SCRIPT`) next to the pages. Pages load both with ``<script src>``, which works
from ``file://`` (``fetch`` of a JSON file does not), and nothing comes from a CDN. The script:

* **search**: a box in every page's sticky bar and on the index. A query matches a section holding
  every word of it; an underscore counts as a space on both sides, so "long scoreboard" finds
  ``long_scoreboard`` and "bucket_cap_mb" finds ``bucket_cap_mb``. Results name the lab and the
  section, show the words around the match, and link to the section. Enter opens the first one.
* **contents**: the "Contents" box in the sticky bar opens as a side panel on wide windows and as a
  drop-down on narrow ones (closing when a link is followed).
* **figures**: a figure drawn smaller than its pixels gets "click to enlarge"; a click shows it at
  full size in a scrollable overlay (Escape or a click closes it).
"""
from __future__ import annotations

import html
import json
import re

SEARCH_INDEX_FILE = "search_index.js"
SCRIPT_FILE = "site.js"
SECTION_TEXT_CHARS = 20_000  # a section's searchable text is cut here (a few huge outputs, not the prose)

_SECTION_RE = re.compile(r'<h([123])\b[^>]*\bid="([^"]+)"[^>]*>(.*?)</h\1>', re.S)
_DROP_RE = re.compile(r"<(style|script|svg|template)\b.*?</\1>", re.S | re.I)
_IMG_RE = re.compile(r"""<img\b[^>]*?\balt=(?:"([^"]*)"|'([^']*)')[^>]*>""", re.I)
_BLOCK_TAG_RE = re.compile(r"</?(?:p|div|li|ul|ol|tr|td|th|table|pre|h[1-6]|br|details|summary|section|nav|main)\b[^>]*>",
                           re.I)
_TAG_RE = re.compile(r"<[^>]+>")


def plain_text(fragment: str) -> str:
    """Readable text of an HTML fragment: scripts, styles and SVG dropped, images as their alt text, block
    tags as spaces, inline tags (spans of highlighted code) joined without one, whitespace collapsed."""
    s = _DROP_RE.sub(" ", fragment)
    s = _IMG_RE.sub(lambda m: f" {m.group(1) or m.group(2) or ''} ", s)
    s = _BLOCK_TAG_RE.sub(" ", s)
    s = _TAG_RE.sub("", s)
    return re.sub(r"\s+", " ", html.unescape(s)).strip()


def heading_text(inner: str) -> str:
    """A heading's text without nbconvert's anchor link."""
    inner = re.sub(r'<a\b[^>]*class="anchor-link"[^>]*>.*?</a>', "", inner, flags=re.S)
    return plain_text(inner)


def page_sections(body: str, page: str, lab_title: str) -> list[dict]:
    """One search entry per section of a rendered page (from each h1/h2/h3 to the next): ``p`` page file,
    ``a`` the heading's id, ``t`` its text (with its number), ``l`` the lab's title, ``x`` the section's text."""
    main = body.split("<main>", 1)[-1]
    heads = list(_SECTION_RE.finditer(main))
    out = []
    for k, m in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(main)
        text = plain_text(main[m.end():end])[:SECTION_TEXT_CHARS]
        out.append({"p": page, "a": m.group(2), "t": heading_text(m.group(3)), "l": lab_title, "x": text})
    return out


def search_index_js(entries: list[dict]) -> str:
    """``search_index.js``: the entries as a script that sets ``window.INFRALENS_SEARCH``."""
    return ("/* InfraLens Lab offline edition: search index, written by `python -m infralens_lab site`. */\n"
            "window.INFRALENS_SEARCH = " + json.dumps(entries, ensure_ascii=False, separators=(",", ":")) + ";\n")


def search_box(placeholder: str = "Search the labs") -> str:
    """The search field and its (empty) result list."""
    return ('<div class="infralens-search" role="search">'
            f'<input type="search" class="infralens-search-input" placeholder="{html.escape(placeholder)}" '
            'aria-label="Search the labs" autocomplete="off">'
            '<ol class="infralens-search-results" hidden></ol></div>')


def scripts() -> str:
    """The two script tags every page ends with (relative paths: they load from disk)."""
    return f'<script src="{SEARCH_INDEX_FILE}"></script><script src="{SCRIPT_FILE}"></script>'


SCRIPT = r"""/* InfraLens Lab offline edition: search, contents and figure zoom. Plain JavaScript, no network. */
(function () {
  "use strict";
  var WIDE = "(min-width: 1400px)";
  function norm(s) { return s.toLowerCase().replace(/_/g, " "); }
  function normQuery(s) { return norm(s).replace(/\s+/g, " ").trim(); }
  function esc(s) {
    return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  var entries = (window.INFRALENS_SEARCH || []).map(function (e) {
    return {e: e, t: norm(e.t), x: norm(e.x)};
  });

  function find(q) {
    var nq = normQuery(q);
    if (nq.length < 2) { return []; }
    var terms = nq.split(" ");
    var hits = [];
    entries.forEach(function (p) {
      var hay = p.t + " " + p.x;
      for (var i = 0; i < terms.length; i++) { if (hay.indexOf(terms[i]) < 0) { return; } }
      var score = (p.t.indexOf(nq) >= 0 ? 100 : 0) + (p.x.indexOf(nq) >= 0 ? 20 : 0);
      terms.forEach(function (t) { if (p.t.indexOf(t) >= 0) { score += 5; } });
      hits.push({p: p, score: score, nq: nq, terms: terms});
    });
    hits.sort(function (a, b) { return b.score - a.score; });
    return hits.slice(0, 25);
  }

  function snippet(h) {
    var x = h.p.x, raw = h.p.e.x;
    var at = x.indexOf(h.nq), len = h.nq.length;
    if (at < 0) { at = x.indexOf(h.terms[0]); len = h.terms[0].length; }
    if (at < 0) { return esc(raw.slice(0, 140)) + (raw.length > 140 ? " …" : ""); }
    var from = Math.max(0, at - 60), to = Math.min(raw.length, at + len + 80);
    return (from > 0 ? "… " : "") + esc(raw.slice(from, at)) + "<mark>" + esc(raw.slice(at, at + len)) +
      "</mark>" + esc(raw.slice(at + len, to)) + (to < raw.length ? " …" : "");
  }

  function wire(box) {
    var input = box.querySelector(".infralens-search-input");
    var list = box.querySelector(".infralens-search-results");
    function render() {
      var q = input.value, hits = find(q);
      if (normQuery(q).length < 2) { list.hidden = true; list.innerHTML = ""; return; }
      list.innerHTML = hits.length ? hits.map(function (h) {
        var e = h.p.e;
        return '<li><a href="' + esc(e.p) + "#" + esc(e.a) + '"><span class="where">' + esc(e.l) +
          " &rsaquo; " + esc(e.t) + '</span><span class="snippet">' + snippet(h) + "</span></a></li>";
      }).join("") : '<li class="none">Nothing found for “' + esc(q) + "”.</li>";
      list.hidden = false;
    }
    input.addEventListener("input", render);
    input.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter") {
        var first = list.querySelector("a");
        if (first) { window.location.href = first.getAttribute("href"); }
      } else if (ev.key === "Escape") { input.value = ""; render(); }
    });
    list.addEventListener("click", function (ev) { if (ev.target.closest("a")) { list.hidden = true; } });
  }
  Array.prototype.forEach.call(document.querySelectorAll(".infralens-search"), wire);

  var toc = document.querySelector(".infralens-toc");
  if (toc) {
    var fit = function () { if (window.matchMedia(WIDE).matches) { toc.open = true; } };
    fit();
    window.addEventListener("resize", fit);
    toc.addEventListener("click", function (ev) {
      if (ev.target.closest("a") && !window.matchMedia(WIDE).matches) { toc.open = false; }
    });
  }

  function zoom(img) {
    var layer = document.createElement("div");
    layer.className = "infralens-zoom";
    layer.setAttribute("role", "dialog");
    layer.setAttribute("aria-label", "Figure at full size");
    layer.innerHTML = '<p class="hint">Full size. Click or press Escape to close.</p>';
    var big = document.createElement("img");
    big.src = img.src;
    big.alt = img.alt;
    layer.appendChild(big);
    function close() { layer.remove(); document.removeEventListener("keydown", onKey); }
    function onKey(ev) { if (ev.key === "Escape") { close(); } }
    layer.addEventListener("click", close);
    document.addEventListener("keydown", onKey);
    document.body.appendChild(layer);
  }
  Array.prototype.forEach.call(document.querySelectorAll(".jp-RenderedImage img"), function (img) {
    var hint = document.createElement("div");
    hint.className = "infralens-zoom-hint";
    hint.textContent = "Figure drawn smaller than its pixels: click it to enlarge.";
    img.insertAdjacentElement("afterend", hint);
    function mark() {
      var small = img.naturalWidth > img.clientWidth * 1.1;
      img.classList.toggle("zoomable", small);
      hint.hidden = !small;
    }
    if (img.complete) { mark(); } else { img.addEventListener("load", mark); }
    window.addEventListener("resize", mark);
    img.addEventListener("click", function () { if (img.classList.contains("zoomable")) { zoom(img); } });
  });
})();
"""

CSS = """
.infralens-bar { position: sticky; top: 0; z-index: 30; background: #fff; display: flex; gap: 1em;
  align-items: center; flex-wrap: wrap; font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px;
  padding: 8px 0; border-bottom: 1px solid #ddd; margin-bottom: 10px; }
.infralens-bar a { text-decoration: none; color: #1565c0; }
.infralens-bar .home { font-weight: 600; }
.infralens-search { position: relative; flex: 1 1 16em; max-width: 28em; }
.infralens-search-input { width: 100%; box-sizing: border-box; padding: 5px 8px; font-size: 14px;
  border: 1px solid #bbb; border-radius: 4px; }
.infralens-search-results { position: absolute; left: 0; right: 0; top: 100%; z-index: 40; list-style: none;
  margin: 2px 0 0 0; padding: 0; background: #fff; border: 1px solid #ccc; border-radius: 4px;
  box-shadow: 0 4px 14px rgba(0,0,0,.15); max-height: 70vh; overflow-y: auto; min-width: min(34em, 90vw); }
.infralens-search-results li { border-bottom: 1px solid #eee; }
.infralens-search-results li.none { padding: 8px 10px; color: #666; }
.infralens-search-results a { display: block; padding: 6px 10px; color: #212121; text-decoration: none; }
.infralens-search-results a:hover, .infralens-search-results a:focus { background: #e3f2fd; }
.infralens-search-results .where { display: block; font-weight: 600; color: #1565c0; }
.infralens-search-results .snippet { display: block; font-size: 13px; color: #444; overflow-wrap: anywhere; }
.infralens-search-results mark { background: #fff59d; padding: 0; }
.infralens-toc { font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px; position: relative; }
.infralens-toc > summary { cursor: pointer; font-weight: 600; color: #1565c0; }
.infralens-toc > .panel { position: absolute; right: 0; top: 1.8em; z-index: 40; background: #fafafa;
  border: 1px solid #ddd; border-radius: 6px; padding: 6px 14px; width: min(24em, 86vw); max-height: 70vh;
  overflow-y: auto; box-shadow: 0 4px 14px rgba(0,0,0,.12); }
.infralens-toc ul { list-style: none; margin: 4px 0; padding: 0; }
.infralens-toc li { margin: 3px 0; }
.infralens-toc li.sub { margin-left: 1.6em; font-size: 13px; }
.infralens-toc a { text-decoration: none; color: #1565c0; }
.infralens-toc .secnum, h2 .secnum, h3 .secnum { color: #777; font-variant-numeric: tabular-nums; margin-right: 0.4em; }
@media (min-width: 1400px) {
  body { padding-right: 300px; }
  .infralens-toc > summary { display: none; }
  .infralens-toc > .panel { position: fixed; top: 12px; right: 16px; width: 270px; max-height: calc(100vh - 24px);
    box-shadow: none; }
}
h1, h2, h3 { scroll-margin-top: 64px; }
.infralens-labmeta { font-family: var(--jp-ui-font-family, sans-serif); font-size: 14px; color: #444;
  background: #f5f5f5; border-radius: 4px; padding: 6px 10px; margin: 0 0 10px 0; }
.jp-RenderedImage img.zoomable { cursor: zoom-in; }
.infralens-zoom-hint { font-family: var(--jp-ui-font-family, sans-serif); font-size: 12px; color: #666; }
.infralens-zoom { position: fixed; inset: 0; z-index: 100; background: rgba(0,0,0,.85); overflow: auto;
  cursor: zoom-out; padding: 12px; box-sizing: border-box; }
.infralens-zoom img { max-width: none; background: #fff; display: block; margin: 0 auto; }
.infralens-zoom .hint { color: #eee; font-family: sans-serif; font-size: 13px; margin: 0 0 8px 0; text-align: center; }
.infralens-scroll-cue { font-family: var(--jp-ui-font-family, sans-serif); }
"""
