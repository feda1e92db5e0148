"""pytest plugin: grade submitted notebooks; nbval executes them, the grader decides the score.

Loaded through the ``pytest11`` entry point ``infralens_quiz``; it does nothing unless grade
mode is on (``--infralens-grade`` or ``INFRALENS_GRADE=1``). Then every collected ``.ipynb``
gets, next to nbval's cell items, one item per question of its lab's bank
(``path::grade::lab00.q1``): it passes for a right answer and fails with the feedback
otherwise, so JUnit and ``-k`` work per question. Those items are judged in this process by
:mod:`infralens_lab.quiz.grader` from the file itself (the bank's question list, each answer's
final literal, evidence rebuilt here), never from what the notebook's kernel prints or writes.
nbval still runs every cell (``INFRALENS_GRADE=1`` reaches the kernels, so a wrong check cell
fails there too): that shows the instructor whether a notebook runs, and decides nothing.

A file that is not a readable notebook is not handed to nbval (which would stop the whole
run at collection); it gets rows saying why. At the end the plugin prints points per
notebook, lab and question; ``--infralens-score-csv`` and ``--infralens-score-junit`` write
the same rows, from this process only. Both paths are checked at start-up.
"""
from __future__ import annotations

import csv
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

GRADE_ENV = "INFRALENS_GRADE"   # same names as quiz.check; not imported so a plain pytest run
SCORE_ENV = "INFRALENS_SCORE_FILE"  # stays free of the package import unless grading
# a check in a notebook cell: check("lab01.q2", ...), quiz.check(...), lab01.check_on("lab01.q3", ...)
CHECK_RE = re.compile(r"""(?<![\w.])(?:\w+\.)*check(?:_on)?\(\s*["'](lab\d{2}\.[a-z0-9_]+)["']""")
COLUMNS = ("notebook", "lab", "question", "status", "points", "max_points", "feedback")


def pytest_addoption(parser):
    group = parser.getgroup("infralens", "InfraLens Lab grading")
    group.addoption("--infralens-grade", action="store_true", default=False,
                    help="grade mode: one item per bank question per notebook, judged by the grader; "
                         "print a score summary")
    group.addoption("--infralens-score-csv", default=None, metavar="PATH",
                    help="grade mode: also write the score rows as CSV")
    group.addoption("--infralens-score-junit", default=None, metavar="PATH",
                    help="grade mode: also write the score rows as JUnit XML (one testcase per question)")


def _env_grade() -> bool:
    return os.environ.get(GRADE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def check_writable(path: str | os.PathLike, option: str) -> None:
    """UsageError (before any notebook runs) when the score file at ``path`` cannot be written."""
    p = Path(path)
    existed = p.exists()
    try:
        if p.is_dir():
            raise IsADirectoryError(21, "is a folder")
        with open(p, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise pytest.UsageError(
            f"{option} {str(path)!r}: cannot write the score file there ({exc.strerror or exc}); "
            f"expected a file path in a folder you can write to (with make grade: SCORES=path/scores.csv)") from None
    if not existed:
        p.unlink()


def pytest_configure(config):
    on = config.getoption("infralens_grade") or _env_grade()
    csv_path, junit_path = config.getoption("infralens_score_csv"), config.getoption("infralens_score_junit")
    if (csv_path or junit_path) and not on:
        raise pytest.UsageError("--infralens-score-csv/--infralens-score-junit need --infralens-grade "
                                "(or INFRALENS_GRADE=1)")
    if on:
        for path, option in ((csv_path, "--infralens-score-csv"), (junit_path, "--infralens-score-junit")):
            if path:
                check_writable(path, option)
        config.pluginmanager.register(GradeSession(config), "infralens-grade-session")


def notebook_name(config, path: Path) -> str:
    """How rows name a notebook: its path relative to pytest's rootdir where possible."""
    try:
        return str(Path(path).resolve().relative_to(Path(str(config.rootpath)).resolve()))
    except ValueError:
        return str(path)


class GradeFailure(Exception):
    """A question that did not earn its points (wrong, unanswered, invalid, ...)."""


class GradeItem(pytest.Item):
    """One (notebook, question): its row was decided by the grader when the notebook was collected."""

    def __init__(self, *, row: dict, **kw):
        super().__init__(**kw)
        self.row = row

    def runtest(self):
        self.session.config.pluginmanager.get_plugin("infralens-grade-session").record(self.row)
        if self.row["status"] != "correct":
            raise GradeFailure(f"{self.row['status']}: {self.row['feedback']}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GradeFailure):
            r = self.row
            return f"{r['notebook']} {r['question'] or '(notebook)'}: {r['points']:g}/{r['max_points']:g}, {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.row['notebook']}::grade::{self.row['question'] or 'notebook'}"


class GradeFile(pytest.File):
    """The grader's view of one submitted notebook: one item per row of its score."""

    def collect(self):
        from .grader import grade_notebook

        name = notebook_name(self.config, self.path)
        for row in grade_notebook(self.path, name):
            yield GradeItem.from_parent(self, name=row.question or "notebook", row=row.as_dict())


class GradeSession:
    """State of one grading run: the rows the grade items decided, in run order."""

    def __init__(self, config):
        self.config = config
        self.saved_env = {k: os.environ.get(k) for k in (GRADE_ENV, SCORE_ENV)}
        os.environ[GRADE_ENV] = "1"       # checks in the kernels print and fail cells, as learners see them
        os.environ.pop(SCORE_ENV, None)   # and the kernels get no score file: only this process writes one
        self.rows: list[dict] = []

    # ------------------------------------------------------------ hooks
    @pytest.hookimpl(wrapper=True)
    def pytest_collect_file(self, file_path, parent):
        result = yield
        if file_path.suffix != ".ipynb":
            return result
        from .grader import NotebookError, read_notebook

        result = list(result or [])
        try:
            read_notebook(file_path)
        except NotebookError:  # nbval would fail collection and stop every notebook; the rows say why
            result = [c for c in result if Path(str(getattr(c, "path", ""))) != Path(file_path)]
        nodeid = notebook_name(self.config, file_path) + "::grade"
        result.append(GradeFile.from_parent(parent, path=file_path, nodeid=nodeid))
        return result

    def record(self, row: dict) -> None:
        self.rows.append(row)

    def pytest_terminal_summary(self, terminalreporter):
        rows = self.rows
        tr = terminalreporter
        tr.write_sep("=", "InfraLens grade summary")
        for line in summary_lines(rows):
            tr.write_line(line)
        csv_path = self.config.getoption("infralens_score_csv")
        if csv_path:
            write_csv(rows, csv_path)
            tr.write_line(f"score rows written to {csv_path}")
        junit_path = self.config.getoption("infralens_score_junit")
        if junit_path:
            write_junit(rows, junit_path)
            tr.write_line(f"score JUnit XML written to {junit_path}")

    def pytest_unconfigure(self, config):
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---------------------------------------------------------------- output
def _p(x: float) -> str:
    return f"{x:g}"


def summary_lines(rows: list[dict]) -> list[str]:
    """Human summary: per notebook, per lab, per question, then the total over all notebooks."""
    if not rows:
        return ["no quiz checks found in the collected notebooks"]
    lines = []
    notebooks = list(dict.fromkeys(r["notebook"] for r in rows))
    for nb in notebooks:
        nb_rows = [r for r in rows if r["notebook"] == nb]
        lines.append(nb)
        for lab in dict.fromkeys(r["lab"] for r in nb_rows):
            lab_rows = [r for r in nb_rows if r["lab"] == lab]
            lines.append(f"  {lab}: {_p(sum(r['points'] for r in lab_rows))}/{_p(sum(r['max_points'] for r in lab_rows))} points")
            for r in lab_rows:
                lines.append(f"    {r['question']:<12} {r['status']:<12} {_p(r['points'])}/{_p(r['max_points'])}")
        lines.append(f"  total: {_p(sum(r['points'] for r in nb_rows))}/{_p(sum(r['max_points'] for r in nb_rows))}")
    lines.append(f"all notebooks: {_p(sum(r['points'] for r in rows))}/{_p(sum(r['max_points'] for r in rows))} "
                 f"points over {len(notebooks)} notebook(s)")
    return lines


def write_csv(rows: list[dict], path: str | os.PathLike) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in COLUMNS})


def write_junit(rows: list[dict], path: str | os.PathLike) -> None:
    failed = [r for r in rows if r["status"] != "correct"]
    suite = ET.Element("testsuite", name="infralens-grade", tests=str(len(rows)), failures=str(len(failed)),
                       errors="0", skipped="0")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="points", value=_p(sum(r["points"] for r in rows)))
    ET.SubElement(props, "property", name="max_points", value=_p(sum(r["max_points"] for r in rows)))
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=r["notebook"], name=r["question"], time="0")
        cp = ET.SubElement(case, "properties")
        ET.SubElement(cp, "property", name="points", value=_p(r["points"]))
        ET.SubElement(cp, "property", name="max_points", value=_p(r["max_points"]))
        if r["status"] != "correct":
            fail = ET.SubElement(case, "failure", message=r["status"], type=r["status"].replace(" ", "_"))
            fail.text = r["feedback"]
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
