"""Shared pytest fixtures.

Site and browser fixtures (issue 8): ``fixture_labs`` builds a small labs folder in a temp dir
whose content is known (a heading, an ``Evidence:`` line, a matplotlib figure, a pandas table
and a self-check widget following the quiz conventions), executed for real with nbclient, so
the site and browser tests can assert exact content without depending on what labs/ holds.
``chromium`` is the path of Debian's Chromium, or a skip with the reason.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from infralens_lab.quick_nbformat import skip_iri_grammar

skip_iri_grammar()  # pyproject's addopts loads it first already; kept for a run given other options (-c, -o addopts=)

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# Flags for a headless Chromium that touches no network of its own and needs no GPU or sandbox.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-default-apps"]

FIXTURE_EVIDENCE = "Evidence: recorded · Fixture GPU · torch 0.0 · `python -m infralens_lab record`"
FIXTURE_QUESTION = "Fixture question: which number is larger, 2 or 3?"
FIXTURE_RIGHT = "Right: 3 is larger than 2."
FIXTURE_WRONG = "Not quite: pick the larger number."

_SELF_CHECK_SRC = f'''\
import ipywidgets as widgets

class _SelfCheck(widgets.VBox):
    """Stands in for infralens_lab.quiz.self_check: same CSS class, Check button, Output area."""
    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs)
        data["text/plain"] = {FIXTURE_QUESTION!r}
        return data

def self_check(qid):
    radio = widgets.RadioButtons(options=["2", "3"], value=None)
    out = widgets.Output()
    button = widgets.Button(description="Check")
    def on_click(_):
        with out:
            out.clear_output()
            print({FIXTURE_RIGHT!r} if radio.value == "3" else {FIXTURE_WRONG!r})
    button.on_click(on_click)
    box = _SelfCheck([widgets.HTML("<b>" + {FIXTURE_QUESTION!r} + "</b>"), radio, button, out])
    box.add_class("infralens-selfcheck")
    return box

self_check("lab99.q1")
'''

_FIGURE_SRC = '''\
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 2.5))
ax.plot([1, 2, 4, 8], [1, 3, 9, 27], marker="o")
ax.set_xlabel("stride (elements)")
ax.set_ylabel("sectors per request")
ax.set_title("fixture figure")
plt.show()
'''

_TABLE_SRC = '''\
import pandas as pd
pd.DataFrame({"kernel": ["copy_coalesced", "copy_strided"], "bytes": [4096, 32768]})
'''


def build_fixture_labs(dest: Path) -> Path:
    """Write and execute ``00_fixture.ipynb`` (full content, ``infralens`` metadata) and write
    ``01_fixture_plain.ipynb`` (no metadata: the title must come from its first heading) into
    ``dest``; returns ``dest``."""
    import nbformat
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    dest.mkdir(parents=True, exist_ok=True)
    kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb = new_notebook(metadata={
        "kernelspec": kernelspec,
        "infralens": {"title": "Fixture lab: evidence on the page",
                      "teaches": "That figures, tables, provenance and self-checks survive export."},
    })
    nb.cells = [
        new_markdown_cell("# Fixture lab\n\nA notebook with known content. See "
                          "[the plain fixture](01_fixture_plain.ipynb)."),
        new_code_cell(f"print({FIXTURE_EVIDENCE!r})"),
        new_code_cell(_FIGURE_SRC),
        new_code_cell(_TABLE_SRC),
        new_markdown_cell("## Self-check"),
        new_code_cell(_SELF_CHECK_SRC),
    ]
    env_grade = os.environ.pop("INFRALENS_GRADE", None)
    try:
        NotebookClient(nb, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(dest)}}).execute()
    finally:
        if env_grade is not None:
            os.environ["INFRALENS_GRADE"] = env_grade
    nbformat.write(nb, dest / "00_fixture.ipynb")

    plain = new_notebook(metadata={"kernelspec": kernelspec})
    plain.cells = [
        new_markdown_cell("Some words before the heading.\n\n## Plain fixture heading\n\nBody text."),
        new_code_cell("print('Evidence: live · CPU · fixture')", execution_count=1, outputs=[
            new_output("stream", name="stdout", text="Evidence: live · CPU · fixture\n")]),
    ]
    nbformat.write(plain, dest / "01_fixture_plain.ipynb")
    return dest


# Test files that share a session fixture, run on one pytest-xdist worker so that it is built once (see below).
SAME_WORKER = {"tests/test_site.py": "site", "tests/test_browser.py": "site",  # real_site
               # the recorded NCCL runs, parsed once per process (parse.ranks._PARSED) for all five files
               **dict.fromkeys(("tests/test_lab06_support.py", "tests/test_distributed_split.py",
                                "tests/test_distributed_traces.py", "tests/test_distributed_cost.py",
                                "tests/test_functions_lab06.py"), "ddp")}
# The longest files (or SAME_WORKER groups) of `make test`, longest first, as measured on 2 cores (issue 41:
# seconds of a 2-worker `make test` at 05e725b, in parentheses): handed out before the rest, so that no worker starts a
# long one last while the other has nothing left (xdist's own order is "most tests first", which puts these near the end).
LONG_FIRST = ("site",                                 # test_browser + test_site (~118)
              "tests/test_grading.py",                # a make grade run, slim notebooks, live keys (~44)
              "ddp", "tests/test_grading_hostile.py",  # the five DDP files (~42); three make grade runs (~41)
              "labs/06_distributed_ddp.ipynb", "tests/test_arch_compile.py",  # (~40, ~31)
              "tests/test_distributed_launch.py", "tests/test_attn_ws_experiment.py",  # (~22, ~21)
              "tests/test_memory.py", "tests/test_distributed_torchrun.py",  # (~20 each)
              "tests/test_grading_parallel.py", "labs/05_overlap_launch.ipynb",  # (~14, ~13)
              "labs/07_regression_gates.ipynb", "tests/test_packaging.py")  # (12-34: its timing cells vary; ~12)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``make test`` (``-n auto --dist loadfile``): each test file runs whole on one worker (a notebook's nbval
    cells share its kernel; a module fixture is built once), the files of :data:`SAME_WORKER` share one, and
    the files of :data:`LONG_FIRST` are handed out first.
    (xdist's ``--dist loadgroup`` with ``xdist_group`` marks cannot put two files together here: it renames the
    test ids, which pytest 9 ignores.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SAME_WORKER.get(path, path)

        def schedule(self) -> None:
            first = self.collection is None
            super().schedule()  # the first time: queues every file, gives each worker one (the ones with most tests)
            if first:
                for scope in reversed(LONG_FIRST):
                    if scope in self.workqueue:
                        self.workqueue.move_to_end(scope, last=False)

    return FileScheduling(config, log)


@pytest.fixture(scope="session")
def real_site(tmp_path_factory):
    """The offline edition of the committed labs (``site.build_site``), built once per session (per xdist
    worker: the files using it are in :data:`SAME_WORKER`); skips while no lab is committed."""
    from infralens_lab import site as site_mod

    if not sorted((ROOT / "labs").glob(site_mod.LAB_GLOB)):
        pytest.skip("no labs/NN_*.ipynb committed yet")
    return site_mod.build_site(ROOT / "labs", tmp_path_factory.mktemp("real_site"))


@pytest.fixture(scope="session")
def fixture_labs(tmp_path_factory) -> Path:
    """A labs folder with two fixture notebooks of known content (see :func:`build_fixture_labs`)."""
    return build_fixture_labs(tmp_path_factory.mktemp("fixture_labs"))


@pytest.fixture(scope="session")
def real_labs() -> list[Path]:
    """The committed lab notebooks (``labs/NN_*.ipynb``); empty while none exist."""
    return sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of Debian's Chromium; skips (with how to get it) where it is not installed."""
    for c in CHROMIUM_CANDIDATES:
        if os.access(c, os.X_OK):
            return c
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    pytest.skip("Chromium is not installed (tried /usr/bin/chromium); run `bash tools/browser_deps.sh` "
                "as root to install Debian's chromium")


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """``artifacts/`` in the repo (gitignored): screenshots the browser tests leave for people."""
    d = ROOT / "artifacts"
    d.mkdir(exist_ok=True)
    return d
