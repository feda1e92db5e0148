"""The offline HTML edition: built from fixture notebooks of known content and from the real
labs/, checked for pages, embedded figures, provenance lines, static quiz fallbacks, links,
and no network references. Opened in headless Chromium by tests/test_browser.py."""
from __future__ import annotations

import html
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import FIXTURE_EVIDENCE, FIXTURE_QUESTION, ROOT

from infralens_lab import site as site_mod
from infralens_lab import site_assets

nbformat = pytest.importorskip("nbformat", reason="needs the Jupyter test stack (make test installs it); plain python3 on a GPU machine lacks it")
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output  # noqa: E402  (after the importorskip above)

REAL_LABS = sorted((ROOT / "labs").glob(site_mod.LAB_GLOB))
needs_real_labs = pytest.mark.skipif(not REAL_LABS, reason="no labs/NN_*.ipynb committed yet")


# ---------------------------------------------------------------- helpers
class _Text(HTMLParser):
    """Visible text of a page (style and script bodies left out)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("style", "script")

    def handle_endtag(self, tag):
        self._skip -= tag in ("style", "script") and self._skip > 0

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def _norm(text: str) -> str:
    """Whitespace collapsed, markdown code/emphasis marks dropped (they become tags in HTML)."""
    return re.sub(r"\s+", " ", re.sub(r"[`*]", "", text)).strip()


def page_text(page: str) -> str:
    p = _Text()
    p.feed(page)
    return _norm(" ".join(p.parts))


def _shown(out) -> str:
    """The text an output shows in HTML: its richest text form (as nbconvert picks it)."""
    if out.output_type == "stream":
        return "".join(out.text)
    data = out.get("data", {})
    if site_mod.WIDGET_MIME in data:
        return ""
    for mime in ("text/html", "text/markdown", "text/plain"):
        if mime in data:
            v = data[mime]
            return "".join(v) if isinstance(v, list) else str(v)
    return ""


def evidence_lines(nb) -> list[str]:
    """Every 'Evidence: ...' provenance line the notebook's outputs show, normalised."""
    lines = []
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            for line in _shown(out).splitlines():
                if "Evidence: " in line:
                    text = re.sub(r"<[^>]+>", "", line[line.index("Evidence: "):])
                    lines.append(_norm(html.unescape(text)))
    return lines


def pngs(nb) -> list[str]:
    """Base64 payloads of every PNG figure in the notebook's outputs."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            v = out.get("data", {}).get("image/png")
            if v:
                found.append(re.sub(r"\s+", "", "".join(v) if isinstance(v, list) else v))
    return found


def widget_outputs(nb) -> int:
    return sum(site_mod.WIDGET_MIME in out.get("data", {})
               for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", []))


def check_page(nb, page: str, name: str) -> None:
    """What every lab page must hold: all figures as <img>, all provenance lines, no widget
    views left, nothing fetched from the network."""
    imgs = [re.sub(r"\s+", "", m) for m in re.findall(r'<img[^>]*src="data:image/png;base64,([^"]+)"', page)]
    for i, payload in enumerate(pngs(nb)):
        assert payload in imgs, f"{name}: figure {i} of the notebook is not an <img> in the page"
    text = page_text(page)
    for line in evidence_lines(nb):
        assert line in text, f"{name}: provenance line {line[:90]!r} missing from the page"
    assert site_mod.WIDGET_MIME not in page, f"{name}: a widget view was left for a manager that cannot load"
    assert site_mod.remote_refs(page) == [], f"{name}: page needs the network"
    srcs = re.findall(r'<script[^>]+src="([^"]*)"', page)
    assert srcs == [site_assets.SEARCH_INDEX_FILE, site_assets.SCRIPT_FILE], f"{name}: scripts {srcs}"
    imgs_alt = [a or b for a, b in re.findall(r"""<img\b[^>]*\balt=(?:"([^"]*)"|'([^']*)')""", page)]
    assert len(imgs_alt) == len(re.findall(r"<img\b", page)) and all(a.strip() for a in imgs_alt), \
        f"{name}: an image without alt text"
    assert "No description has been provided" not in page


@pytest.fixture(scope="module")
def quiz_bank(tmp_path_factory, monkeypatch_module):
    """A sealed bank for the fixture's question lab99.q1, found through $INFRALENS_QUIZ_BANKS."""
    from infralens_lab.quiz import bank

    d = tmp_path_factory.mktemp("banks")
    plain = {"lab": "lab99", "questions": [{
        "id": "lab99.q1", "kind": "choice", "prompt": FIXTURE_QUESTION, "options": {"A": "2", "B": "3"},
        "answer": "B", "feedback": {"A": "2 is smaller."}, "hint": "Count.",
        "explanation": "Three is one more than two, so 3 is larger."}]}
    (d / "lab99.json").write_text(json.dumps(bank.encode_bank(plain)))
    monkeypatch_module.setenv(bank.BANKS_ENV, str(d))
    return plain["questions"][0]


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def fixture_site(fixture_labs, quiz_bank, tmp_path_factory):
    out = tmp_path_factory.mktemp("fixture_site")
    return site_mod.build_site(fixture_labs, out)


# ---------------------------------------------------------------- fixture notebooks
def test_fixture_site_pages_figures_provenance(fixture_labs, fixture_site):
    nbs = sorted(fixture_labs.glob("*.ipynb"))
    assert [p.name for p in fixture_site.pages] == [p.stem + ".html" for p in nbs]
    for nb_path, page_path in zip(nbs, fixture_site.pages, strict=True):
        nb = nbformat.read(nb_path, as_version=4)
        check_page(nb, page_path.read_text(), page_path.name)
    nb0 = nbformat.read(nbs[0], as_version=4)
    assert len(pngs(nb0)) == 1 and evidence_lines(nb0) == [_norm(FIXTURE_EVIDENCE)]  # the check saw them
    page0 = fixture_site.pages[0].read_text()
    assert '<table border="1" class="dataframe">' in page0 and "copy_strided" in page0  # pandas table
    assert fixture_site.notes == []


def test_index_lists_labs_with_metadata_and_heading_fallback(fixture_site):
    index = fixture_site.index.read_text()
    text = page_text(index)
    assert "Fixture lab: evidence on the page" in text  # metadata.infralens.title
    assert "That figures, tables, provenance and self-checks survive export." in text
    assert "Plain fixture heading" in text  # no metadata: the first heading
    assert [lab.title for lab in fixture_site.labs] == ["Fixture lab: evidence on the page", "Plain fixture heading"]
    assert re.findall(r'href="([^"]+)"', index) == ["00_fixture.html", "01_fixture_plain.html"]
    assert site_mod.remote_refs(index) == []


def test_navigation_between_pages(fixture_site):
    first, second = (p.read_text() for p in fixture_site.pages)
    assert 'href="index.html"' in first and 'class="next" href="01_fixture_plain.html"' in first
    assert 'class="prev"' not in first
    assert 'class="prev" href="00_fixture.html"' in second and 'class="next"' not in second
    # the markdown link to the other notebook now points at its page
    assert "01_fixture_plain.ipynb" not in first.split("<main>", 1)[1]


def test_self_check_becomes_question_and_collapsed_explanation(fixture_site, quiz_bank):
    page = fixture_site.pages[0].read_text()
    static = re.search(r'<div class="infralens-static-widget[^"]*">(.*?)</div>', page, re.S)
    assert static, "the self-check widget has no static fallback"
    block = static.group(1)
    assert html.escape(FIXTURE_QUESTION) in block and "lab99.q1" in block
    details = re.search(r"<details>(.*?)</details>", block, re.S)
    assert details and html.escape(quiz_bank["explanation"]) in details.group(1)
    assert "<details open" not in block  # collapsed until the reader opens it


def test_unknown_question_falls_back_to_widget_text(fixture_labs, tmp_path):
    nb = nbformat.read(fixture_labs / "00_fixture.ipynb", as_version=4)
    n_widgets = widget_outputs(nb)
    for cell in nb.cells:
        cell.source = cell.source.replace('self_check("lab99.q1")', 'self_check("lab98.nope")')
    assert site_mod.static_widgets(nb) == n_widgets == 1
    out = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "text/html" in o.get("data", {})][-1]
    assert "lab98.nope" in out.data["text/html"] and html.escape(FIXTURE_QUESTION) in out.data["text/html"]
    assert "<details>" not in out.data["text/html"]  # no explanation known: none invented
    assert "widgets" not in nb.metadata


def test_built_from_committed_outputs_without_executing(tmp_path):
    labs = tmp_path / "labs"
    labs.mkdir()
    nb = new_notebook(metadata={"infralens": {"title": "Stored", "teaches": "Nothing runs."}})
    nb.cells = [new_markdown_cell("# Stored"),
                new_code_cell("raise RuntimeError('this cell was executed')", execution_count=1,
                              outputs=[new_output("stream", name="stdout", text="stored output 12345\n")])]
    path = labs / "07_stored.ipynb"
    nbformat.write(nb, path)
    before = path.read_bytes()
    built = site_mod.build_site(labs, tmp_path / "site")
    page = built.pages[0].read_text()
    assert "stored output 12345" in page and "RuntimeError: this cell" not in page
    assert path.read_bytes() == before  # the committed notebook is left as it was


def test_lab_without_outputs_gets_a_note(tmp_path):
    labs = tmp_path / "labs"
    labs.mkdir()
    nb = new_notebook(cells=[new_markdown_cell("# Bare"), new_code_cell("x = 1")])
    nbformat.write(nb, labs / "00_bare.ipynb")
    built = site_mod.build_site(labs, tmp_path / "site")
    assert len(built.notes) == 1 and "00_bare.ipynb: no outputs" in built.notes[0]


def test_remote_refs_detects_network_fetches_only():
    bad = ['<script src="https://cdn.example.com/require.js"></script>',
           "<link rel=stylesheet href='//fonts.example.com/x.css'>",
           '<style>@import url("https://x.example/y.css");</style>',
           '<div style="background: url(http://x.example/a.png)"></div>',
           '<img src="https://x.example/a.png">']
    for snippet in bad:
        assert site_mod.remote_refs(snippet), snippet
    good = ('<a href="https://docs.nvidia.com/nsight-compute/">docs</a><script>var x = 1;</script>'
            '<img src="data:image/png;base64,iVBORw0KGgo="><svg xmlns="http://www.w3.org/2000/svg"></svg>'
            '<style>.a { background: url(data:image/svg+xml;base64,PHN2Zz4=) }</style>')
    assert site_mod.remote_refs(good) == []


def test_bad_input_is_refused_clearly(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"does not exist; expected a folder holding NN_\*\.ipynb"):
        site_mod.find_labs(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"no lab notebooks matching .* \(it holds \['notes.txt'\]\)"):
        site_mod.find_labs(tmp_path)
    assert site_mod.main(["--labs", str(tmp_path), "--out", str(tmp_path / "site")]) == 2
    assert "no lab notebooks matching" in capsys.readouterr().err
    nb = new_notebook(metadata={"infralens": "A title"})
    with pytest.raises(TypeError, match=r"metadata.infralens is str, expected an object"):
        site_mod.lab_info(nb, Path("00_x.ipynb"))


def test_cli_writes_the_site(fixture_labs, tmp_path, capsys):
    from infralens_lab.__main__ import main

    assert main(["site", "--labs", str(fixture_labs), "--out", str(tmp_path / "out")]) == 0
    assert "wrote 2 lab pages" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["00_fixture.html", "01_fixture_plain.html",
                                                                  "index.html", "notebooks", "search_index.js",
                                                                  "site.js"]
    assert sorted(p.name for p in (tmp_path / "out" / "notebooks").iterdir()) == ["00_fixture.ipynb",
                                                                                 "01_fixture_plain.ipynb"]


def test_unwritable_out_folder_is_refused_clearly(fixture_labs, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match=r"cannot write the site to .*a_file/site.*expected a folder .* Fix: pass --out"):
        site_mod.build_site(fixture_labs, blocker / "site")
    assert site_mod.main(["--labs", str(fixture_labs), "--out", str(blocker / "site")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("site: cannot write the site to") and "Traceback" not in err


def test_unwritable_out_folder_from_the_command_line(fixture_labs, tmp_path):
    import subprocess
    import sys

    (tmp_path / "f").write_text("x")
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "infralens_lab", "site", "--labs", str(fixture_labs),
                        "--out", str(tmp_path / "f" / "out")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "Fix: pass --out" in r.stderr
    # nbformat was imported without the IRI grammar jsonschema would build for it (quick_nbformat: the import of
    # rfc3987_syntax is tried and refused at once, where building the grammar takes about 4 s)
    us = {ln.rsplit("|", 1)[-1].strip(): int(ln.split("|")[1]) for ln in r.stderr.splitlines()
          if ln.startswith("import time:") and ln.count("|") == 2 and ln.split("|")[1].strip().isdigit()}
    assert "nbformat" in us and us.get("rfc3987_syntax", 0) < 50_000, {k: us.get(k) for k in ("nbformat", "rfc3987_syntax")}


def _card_lab(tmp_path) -> Path:
    labs = tmp_path / "labs"
    labs.mkdir()
    card_src = 'present.card("What to notice", """\n- the first point\n""")'
    nb = new_notebook(metadata={"infralens": {"title": "Cards", "teaches": "Cards."}})
    nb.cells = [
        new_markdown_cell("# Cards\n\n## First section\n\ntext\n\n### A subsection\n\n## Second section"),
        new_code_cell(card_src, execution_count=1, outputs=[new_output(
            "display_data", data={"text/markdown": "> \U0001F440 **What to notice**\n>\n> - the first point",
                                  "text/plain": "<IPython.core.display.Markdown object>"})]),
        new_code_cell("x = 1\npresent.card('t', 'b')", execution_count=2, outputs=[]),
        new_code_cell("print('supercalifragilistic GPU words (1 point)')", execution_count=3, outputs=[
            new_output("stream", name="stdout", text="supercalifragilistic GPU words (1 point)\n")]),
    ]
    nbformat.write(nb, labs / "00_cards.ipynb")
    return labs


def test_card_cells_show_their_card_not_their_source(tmp_path):
    built = site_mod.build_site(_card_lab(tmp_path), tmp_path / "site")
    page = built.pages[0].read_text()
    text = page_text(page)
    assert "What to notice" in text and "the first point" in text
    assert "present.card(&quot;What to notice" not in page and 'present.card("What to notice' not in text
    assert "x = 1" in text  # a cell that does more than show a card keeps its source
    assert site_mod.is_card_cell('card("a", """b""")\npresent.card("c", "d", "pitfall")')
    assert not site_mod.is_card_cell("card(")  # not Python: shown as written
    assert not site_mod.is_card_cell("cards = 3")


def test_no_emoji_and_options_numbered_once(tmp_path, fixture_site):
    page = site_mod.build_site(_card_lab(tmp_path), tmp_path / "site").pages[0].read_text()
    assert not re.search("[\U0001F300-\U0001FAFF\u2600-\u27BF]", page_text(page))
    fixture = fixture_site.pages[0].read_text()
    block = re.search(r'<div class="infralens-static-widget[^"]*">(.*?)</div>', fixture, re.S).group(1)
    assert '<ul class="options">' in block and "<ol>" not in block


def test_toc_download_link_and_no_mid_word_breaks(tmp_path):
    built = site_mod.build_site(_card_lab(tmp_path), tmp_path / "site")
    page = built.pages[0].read_text()
    bar = re.search(r'<nav class="infralens-bar">(.*?)</nav>', page, re.S)
    assert bar, "no sticky bar"
    toc = re.search(r'<details class="infralens-toc"><summary>On this page</summary><div class="panel"><ul>(.*?)</ul>',
                    bar.group(1), re.S)
    assert toc, "no table of contents in the sticky bar"
    links = re.findall(r'<li class="(sec|sub)"><a href="#([^"]+)"><span class="secnum">([^<]+)</span>([^<]+)</a>',
                       toc.group(1))
    assert [(cls, num, text) for cls, _, num, text in links] == [
        ("sec", "0.1", "First section"), ("sub", "0.1.1", "A subsection"), ("sec", "0.2", "Second section")]
    for _, anchor, num, _ in links:
        assert re.search(f'id="{re.escape(anchor)}"[^>]*><span class="secnum">{re.escape(num)}</span>', page)
    assert ".infralens-bar { position: sticky; top: 0;" in page
    dl = re.search(r'<a class="download" [^>]*>', page)
    assert dl and 'href="notebooks/00_cards.ipynb"' in dl.group(0) and 'download="00_cards.ipynb"' in dl.group(0)
    assert (tmp_path / "site" / "notebooks" / "00_cards.ipynb").read_bytes() == \
        (tmp_path / "labs" / "00_cards.ipynb").read_bytes()
    assert ".jp-OutputArea-output pre { word-break: normal; overflow-wrap: anywhere; }" in page


def test_sections_are_numbered_without_gaps():
    body = ('<main><h1 id="t">Title</h1><h2 id="a">A</h2><h3 id="a1">A one</h3><h3 id="a2">A two</h3>'
            '<h2 id="b">B<a class="anchor-link" href="#b">¶</a></h2><h2 id="c">C</h2><h3 id="c1">C one</h3></main>')
    numbered, sections = site_mod.section_numbers(body, 5)
    assert [(lvl, num, text) for lvl, num, _, text in sections] == [
        (2, "5.1", "A"), (3, "5.1.1", "A one"), (3, "5.1.2", "A two"), (2, "5.2", "B"), (2, "5.3", "C"),
        (3, "5.3.1", "C one")]
    assert '<h2 id="b"><span class="secnum">5.2</span> B<a class="anchor-link"' in numbered
    assert site_mod.section_numbers(body, None)[1][0][1] == "1"


def _search(entries, query):
    """The offline search's rule (site.js), in Python: an entry matches when its title and text hold every
    word of the query, with underscores read as spaces on both sides."""
    words = re.sub(r"\s+", " ", query.lower().replace("_", " ")).strip().split(" ")
    return [e for e in entries if all(w in (e["t"] + " " + e["x"]).lower().replace("_", " ") for w in words)]


def _index_entries(site_dir: Path) -> list[dict]:
    js = (site_dir / site_assets.SEARCH_INDEX_FILE).read_text()
    return json.loads(re.search(r"window\.INFRALENS_SEARCH = (.*);\s*$", js, re.S).group(1))


def test_search_index_covers_every_section(tmp_path):
    built = site_mod.build_site(_card_lab(tmp_path), tmp_path / "site")
    entries = _index_entries(tmp_path / "site")
    assert [e["t"] for e in entries] == ["Cards", "0.1 First section", "0.1.1 A subsection", "0.2 Second section"]
    assert {e["p"] for e in entries} == {built.pages[0].name}
    page = built.pages[0].read_text()
    for e in entries:
        assert f'id="{e["a"]}"' in page
    assert (tmp_path / "site" / site_assets.SCRIPT_FILE).read_text() == site_assets.SCRIPT
    assert 'class="infralens-search-input"' in built.index.read_text()
    assert site_assets.plain_text('<p>a<span class="n">bucket_cap_mb</span><span>=</span>1</p><style>x{}</style>'
                                  '<img alt="a roofline" src="x">') == "abucket_cap_mb=1 a roofline"


def test_figures_get_alt_text_from_their_metadata_or_their_section(tmp_path):
    labs = tmp_path / "labs"
    labs.mkdir()
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    nb = new_notebook(metadata={"infralens": {"title": "Figures", "teaches": "Alt text."}})
    nb.cells = [new_markdown_cell("# Figures\n\n## The roofline"),
                new_code_cell("show(fig)", execution_count=1, outputs=[
                    new_output("display_data", data={"image/png": png},
                               metadata={"image/png": {"alt": "Line chart: TFLOP/s against intensity."}})]),
                new_code_cell("plt.show()", execution_count=2, outputs=[
                    new_output("display_data", data={"image/png": png})])]
    nbformat.write(nb, labs / "00_figs.ipynb")
    page = site_mod.build_site(labs, tmp_path / "site").pages[0].read_text()
    alts = [a or b for a, b in re.findall(r"""<img\b[^>]*\balt=(?:"([^"]*)"|'([^']*)')""", page)]
    assert alts == ["Line chart: TFLOP/s against intensity.",
                    "A figure of the section “The roofline” (no description was stored with it)."]


def test_each_lab_says_how_long_it_takes_and_what_it_needs(tmp_path):
    nb = new_notebook(metadata={"infralens": {"title": "T", "teaches": "x", "gpu": "optional", "gpus": 2}})
    words = " ".join(["word"] * 2000)  # 10 minutes of reading
    nb.cells = [new_markdown_cell(words)] + [new_code_cell("x = 1") for _ in range(10)] + [
        new_code_cell('check("lab00.q1", ANSWER_Q1)', metadata={"tags": ["answer"]}),
        new_code_cell("ANSWER_EX1 = ...", metadata={"tags": ["exercise"]})]
    minutes = (2000 / site_mod.READ_WORDS_PER_MIN + 10 * site_mod.MIN_PER_CODE_CELL
               + 2 * site_mod.MIN_PER_CODE_CELL + site_mod.MIN_PER_QUESTION + site_mod.MIN_PER_EXERCISE)
    assert site_mod.estimate_minutes(nb) == -(-minutes // site_mod.ROUND_TO_MIN) * site_mod.ROUND_TO_MIN
    lab = site_mod.lab_info(nb, Path("05_x.ipynb"))
    assert lab.number == 5 and "with 2 NVIDIA GPUs it also measures live" in lab.needs
    assert site_mod.needs_line({"gpu": "required"}) == "Needs an NVIDIA GPU."
    with pytest.raises(ValueError, match=r"gpu is 'maybe'; expected one of"):
        site_mod.needs_line({"gpu": "maybe"})
    with pytest.raises(ValueError, match=r"gpus is 0"):
        site_mod.needs_line({"gpus": 0})
    built = site_mod.build_site(_card_lab(tmp_path), tmp_path / "site")
    page = built.pages[0].read_text()
    assert re.search(r'<p class="infralens-labmeta">About \d+ minutes .*No GPU needed', page)
    assert re.search(r'<p class="meta">About \d+ minutes\. No GPU needed', built.index.read_text())


# ---------------------------------------------------------------- the real labs
# real_site: tests/conftest.py (one build per session, shared with tests/test_browser.py)


@needs_real_labs
def test_real_labs_site(real_site):
    assert [p.name for p in real_site.pages] == [p.stem + ".html" for p in REAL_LABS]
    index = page_text(real_site.index.read_text())
    for lab, nb_path, page_path in zip(real_site.labs, REAL_LABS, real_site.pages, strict=True):
        nb = nbformat.read(nb_path, as_version=4)
        assert lab.title and _norm(lab.title) in index
        assert lab.teaches, f"{nb_path.name}: metadata.infralens.teaches is missing"
        check_page(nb, page_path.read_text(), page_path.name)
    assert real_site.notes == [], real_site.notes


@needs_real_labs
def test_real_labs_search_finds_what_a_learner_looks_for(real_site):
    entries = _index_entries(real_site.index.parent)
    for query, lab in (("long scoreboard", "04_"), ("bucket_cap_mb", "06_")):
        hits = _search(entries, query)
        assert any(h["p"].startswith(lab) for h in hits), f"search for {query!r} finds no section of lab {lab}"


@needs_real_labs
def test_real_labs_figures_carry_alt_text_from_the_figure():
    """Every figure a lab shows went through present.show, which stores alt text read from the figure."""
    for nb_path in REAL_LABS:
        nb = nbformat.read(nb_path, as_version=4)
        for cell in nb.cells:
            for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
                if "image/png" in out.get("data", {}):
                    alt = out.get("metadata", {}).get("image/png", {}).get("alt", "")
                    assert " against " in alt, f"{nb_path.name}: a figure without alt text from present.show: {alt!r}"


@needs_real_labs
def test_real_labs_have_provenance_and_static_self_checks(real_site):
    for nb_path, page_path in zip(REAL_LABS, real_site.pages, strict=True):
        nb = nbformat.read(nb_path, as_version=4)
        page = page_path.read_text()
        assert evidence_lines(nb), f"{nb_path.name}: no 'Evidence: ' provenance line in its outputs"
        assert page.count('class="infralens-static-widget') == widget_outputs(nb)


# The offline edition in Chromium (1280 and 800 px, same checks as JupyterLab): tests/test_browser.py


@needs_real_labs
def test_real_labs_fold_their_worked_solutions(real_site):
    """Offline, as in JupyterLab, a worked solution stays shut until the reader opens it: every cell tagged
    `solution` (source and output) sits inside a closed <details>, and nothing else does."""
    for nb_path, page_path in zip(REAL_LABS, real_site.pages, strict=True):
        nb = nbformat.read(nb_path, as_version=4)
        solutions = [c for c in nb.cells if c.cell_type == "code" and "solution" in c.metadata.get("tags", [])]
        page = page_path.read_text()
        folds = re.findall(r'<details class="infralens-solution">(.*?)</details>', page, re.S)
        assert len(folds) == len(solutions), f"{page_path.name}: {len(folds)} folds for {len(solutions)} solutions"
        assert '<details class="infralens-solution" open' not in page
        for cell, fold in zip(solutions, folds, strict=True):
            first = next(ln for ln in cell.source.splitlines() if ln.strip())
            assert _squash(first) in _squash(page_text(fold)), f"{page_path.name}: no fold holds {first!r}"


def _squash(text: str) -> str:
    """Text without any whitespace: highlighted code comes back from the page one token per tag."""
    return re.sub(r"\s+", "", _norm(text))


@needs_real_labs
def test_real_labs_fold_an_answer_key_under_each_question(real_site):
    """The offline edition is its own answer key: under each answer and exercise cell, a closed <details> holds the
    bank's answer and explanation; a predict-then-look cell's output is folded too (issue 38)."""
    from infralens_lab.quiz import question

    for nb_path, page_path in zip(REAL_LABS, real_site.pages, strict=True):
        nb = nbformat.read(nb_path, as_version=4)
        qids = [c.metadata["infralens"]["question"] for c in nb.cells if c.cell_type == "code"
                and {"answer", "exercise"} & set(c.metadata.get("tags", [])) and "question" in c.metadata.get("infralens", {})]
        page = page_path.read_text()
        keys = re.findall(r'<details class="infralens-key"><summary>Answer key \(([^)]+)\)(.*?)</details>', page, re.S)
        assert [k for k, _ in keys] == qids, f"{page_path.name}: keys for {[k for k, _ in keys]}, questions {qids}"
        assert '<details class="infralens-key" open' not in page
        for qid, body in keys:
            q = question(qid)
            assert q.explanation in html.unescape(body), f"{page_path.name}: {qid}'s key lacks its explanation"
            if q.derive is None and q.kind == "choice":
                assert f"<b>{q.answer}.</b> {q.options[q.answer]}" in html.unescape(body)
            # the key comes after its question's prompt on the page
            assert page.index(f"Answer key ({qid})") > page.index(f"<code>{qid}</code>")
        looks = [c for c in nb.cells if c.cell_type == "code" and "look" in c.metadata.get("tags", [])]
        assert page.count('<details class="infralens-look">') == len(looks), page_path.name


@needs_real_labs
def test_site_key_0_leaves_the_answer_key_out(tmp_path, capsys):
    labs = tmp_path / "labs"
    labs.mkdir()
    shutil.copy(ROOT / "labs" / "01_nsight_workflow.ipynb", labs)
    assert site_mod.main(["--labs", str(labs), "--out", str(tmp_path / "nokey"), "--no-key"]) == 0
    page = (tmp_path / "nokey" / "01_nsight_workflow.html").read_text()
    assert '<details class="infralens-key"' not in page and "Answer key (" not in page
    assert '<details class="infralens-solution">' in page  # the worked solutions stay (folded)
    assert "--no-key" in (ROOT / "Makefile").read_text() and "KEY ?= 1" in (ROOT / "Makefile").read_text()


def test_code_is_escaped_and_pages_stay_accessible_without_the_soup_pass(tmp_path):
    """The site's exporter skips nbconvert's page-wide BeautifulSoup pass and bleach on highlighted code
    (site.accessible does the pass's two edits): markup written in a code cell still shows as text, never as
    markup, every image has an alt and input and output areas stay focusable."""
    import base64

    labs = tmp_path / "labs"
    labs.mkdir()
    png = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                                         "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()
    nb = new_notebook(metadata={"infralens": {"title": "Escapes", "teaches": "Escapes."}})
    nb.cells = [new_markdown_cell("# Escapes"),
                new_code_cell('s = "<script>alert(1)</script><img src=x onerror=alert(2)>"', execution_count=1,
                              outputs=[new_output("display_data", data={"image/png": png, "text/plain": "fig"})])]
    nbformat.write(nb, labs / "00_escapes.ipynb")
    page = site_mod.build_site(labs, tmp_path / "site").pages[0].read_text()
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "alert(1)" in page_text(page) and "onerror=alert(2)" in page_text(page)
    assert re.findall(r"<img(?![^>]*\balt=)", page) == [] and page.count("<img") >= 1
    assert 'jp-Cell-inputWrapper" tabindex="0"' in page and re.search(r'jp-OutputArea-output[^"]*" tabindex="0"', page)
    assert site_mod.accessible('<img src="a"><img alt="b" src="c">') == \
        f'<img alt="{site_mod.NO_ALT}" src="a"><img alt="b" src="c">'
