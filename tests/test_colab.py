"""The Colab path (issue 43): every lab begins with the one optional setup cell, carries its "Open in Colab" link,
the README lists the same links, the setup cell does nothing where the package imports, and the quiz self-checks
turn on Colab's widget manager or fall back to text with the check cell as the way to answer."""
from __future__ import annotations

import html
import json
import re
import sys
import types

import pytest
from conftest import ROOT

from infralens_lab import colab
from infralens_lab.quiz import check, question_text, self_check
from infralens_lab.quiz import widgets as widgets_mod

LABS = sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))
sys.path.insert(0, str(ROOT / "tools"))
import setup_cell  # noqa: E402  (tools/ is not a package: imported by path, after it is put on sys.path)


def _nb(path):
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_every_lab_begins_with_the_setup_cell_and_links_to_colab(path):
    nb = _nb(path)
    want = colab.setup_cells()
    first = nb["cells"][:2]
    assert [c["cell_type"] for c in first] == ["markdown", "code"], f"{path.name}: the setup cells are not first"
    for got, made in zip(first, want, strict=True):
        assert "".join(got["source"]) == made["source"], f"{path.name}: run `python tools/setup_cell.py`"
        assert got["metadata"]["tags"] == [colab.SETUP_TAG]
    assert sum(colab.SETUP_TAG in c["metadata"].get("tags", []) for c in nb["cells"]) == 2, "exactly one setup cell"
    code = nb["cells"][1]
    assert code["outputs"] == [] and code["execution_count"] == 1, "executed with the lab, printing nothing"
    assert nb["metadata"]["infralens"]["colab"] == colab.colab_url(path.name)
    assert setup_cell.with_setup(nb, path.name) == nb  # the tool has nothing left to do


def test_the_tool_inserts_once_and_rewrites_a_changed_cell(monkeypatch):
    nb = _nb(LABS[0])
    bare = dict(nb, cells=nb["cells"][2:], metadata={k: v for k, v in nb["metadata"].items()})
    bare["metadata"]["infralens"] = {k: v for k, v in nb["metadata"]["infralens"].items() if k != "colab"}
    once = setup_cell.with_setup(bare, LABS[0].name)
    assert setup_cell.with_setup(once, LABS[0].name) == once and len(once["cells"]) == len(bare["cells"]) + 2
    monkeypatch.setattr(colab, "REPOSITORY", "someone/else")
    moved = setup_cell.with_setup(nb, LABS[0].name)
    assert "github.com/someone/else@main" in "".join(moved["cells"][1]["source"])
    assert moved["metadata"]["infralens"]["colab"].endswith("/github/someone/else/blob/main/labs/" + LABS[0].name)
    assert moved["cells"][1]["execution_count"] == nb["cells"][1]["execution_count"]  # the run it had is kept
    assert len(moved["cells"]) == len(nb["cells"])


def test_the_readme_lists_every_lab_by_the_url_the_package_builds():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Run it on Colab", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\]\((https://colab\.research\.google\.com/[^)]+)\)", section)
    assert links == [colab.colab_url(p.name) for p in LABS]


def test_colab_url_refuses_what_is_not_a_lab_file_name():
    with pytest.raises(ValueError, match=r"lab 'labs/00_start_here.ipynb'; expected a notebook file name"):
        colab.colab_url("labs/00_start_here.ipynb")
    with pytest.raises(ValueError, match="expected a notebook file name"):
        colab.colab_url("00_start_here")


def test_the_setup_cell_is_a_no_op_where_the_package_imports():
    """Run through IPython's own transform (the `%pip` line becomes a magic call): nothing is installed or
    printed, because the package is found."""
    transformer = pytest.importorskip("IPython.core.inputtransformer2", reason="needs IPython (the test stack)")
    code = transformer.TransformerManager().transform_cell(colab.setup_source())
    assert "get_ipython().run_line_magic('pip', 'install -q \"infralens_lab @ git+https://github.com/" in code
    calls = []
    exec(code, {"get_ipython": lambda: types.SimpleNamespace(run_line_magic=lambda *a: calls.append(a))})
    assert calls == []
    exec(code.replace('"infralens_lab"', '"infralens_lab_absent_for_this_test"'),
         {"get_ipython": lambda: types.SimpleNamespace(run_line_magic=lambda *a: calls.append(a))})
    assert calls == [("pip", f'install -q "{colab.install_spec()}"')]


def test_hosted_services_are_named_from_their_variables(monkeypatch):
    for var in ("COLAB_RELEASE_TAG", "COLAB_GPU", "KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert colab.hosted() is None
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    assert colab.hosted() == "Kaggle"
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20260101-060000_RC00")
    assert colab.hosted() == "Google Colab"


# ------------------------------------------------------------------ self-checks where widgets differ or cannot show
@pytest.fixture
def in_ipython(monkeypatch):
    """A running IPython stood in for: ``get_ipython()`` answers, and what ``display`` shows is kept."""
    ipython = pytest.importorskip("IPython")
    import IPython.display

    shown = []
    monkeypatch.setattr(ipython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append(obj))
    monkeypatch.delenv(widgets_mod.WIDGETS_ENV, raising=False)
    for name in ("google", "google.colab", "google.colab.output"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    return shown


def _fake_colab(monkeypatch, enable):
    google, colab_mod, output = (types.ModuleType(n) for n in ("google", "google.colab", "google.colab.output"))
    output.enable_custom_widget_manager = enable
    google.colab, colab_mod.output = colab_mod, output
    for mod in (google, colab_mod, output):
        monkeypatch.setitem(sys.modules, mod.__name__, mod)


def _text_fallback(shown, qid, why):
    (bundle,) = shown
    assert widgets_mod.WIDGET_VIEW not in bundle
    assert bundle["text/plain"].startswith(question_text(qid)) and why in bundle["text/plain"]
    assert f'check("{qid}", ANSWER_Q1) gives the feedback' in bundle["text/plain"]
    assert "A recorded set" in bundle["text/html"] and html.escape(why) in bundle["text/html"]


def test_without_ipywidgets_the_self_check_is_text_and_the_check_answers(in_ipython, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # `import ipywidgets` raises ImportError
    assert self_check("lab00.q1") is None
    _text_fallback(in_ipython, "lab00.q1", "ipywidgets is not installed")
    check("lab00.q1", "C")
    assert "✓ lab00.q1: right" in capsys.readouterr().out


def test_a_front_end_without_widgets_is_chosen_by_the_variable(in_ipython, monkeypatch):
    monkeypatch.setenv(widgets_mod.WIDGETS_ENV, "0")
    self_check("lab00.q1")
    _text_fallback(in_ipython, "lab00.q1", "INFRALENS_WIDGETS=0")


def test_in_colab_the_custom_widget_manager_is_turned_on(in_ipython, monkeypatch):
    pytest.importorskip("ipywidgets")
    calls = []
    _fake_colab(monkeypatch, lambda: calls.append("enabled"))
    self_check("lab00.q1")
    self_check("lab00.q1")
    first, second = in_ipython
    assert calls == ["enabled"] and widgets_mod.WIDGET_VIEW in first and widgets_mod.WIDGET_VIEW in second  # once


def test_in_colab_a_manager_that_will_not_start_leaves_the_text(in_ipython, monkeypatch):
    pytest.importorskip("ipywidgets")

    def refuse():
        raise AttributeError("module 'google.colab.output' has no attribute 'enable_custom_widget_manager'")

    _fake_colab(monkeypatch, refuse)
    self_check("lab00.q1")
    _text_fallback(in_ipython, "lab00.q1", "Colab's custom widget manager could not be enabled (AttributeError")
    assert widgets_mod.restore_self_checks(LABS[0]) == 0  # no widgets rebuilt where none can show
