"""pytest plugin: grade notebooks with nbval and print a score summary.

Loaded through the ``pytest11`` entry point ``infralens_quiz``; it does nothing unless grade
mode is on (``--infralens-grade`` or ``INFRALENS_GRADE=1``). Then, in ``pytest_configure``,
it sets ``INFRALENS_GRADE=1`` and ``INFRALENS_SCORE_FILE`` in ``os.environ``; nbval's
notebook kernels are child processes and inherit both, so every ``check(...)`` in a kernel
raises on a wrong answer and appends one JSON line to the score file. After each notebook
cell the plugin reads the new lines and files them under that notebook. At the end it prints
points per notebook, lab and question; a question whose check cell never ran to its check
(a cell above crashed) counts 0 and is listed as ``not reached``. ``--infralens-score-csv``
and ``--infralens-score-junit`` write the same rows to files.

Run it without xdist (``-n``): the score file lives with the controlling process.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

GRADE_ENV = "INFRALENS_GRADE"   # same names as quiz.check; not imported so a plain pytest run
SCORE_ENV = "INFRALENS_SCORE_FILE"  # stays free of the package import unless grading
CHECK_RE = re.compile(r"""(?<![\w.])(?:\w+\.)*check\(\s*["'](lab\d{2}\.[a-z0-9_]+)["']""")
NOT_REACHED = "not reached"
COLUMNS = ("notebook", "lab", "question", "status", "points", "max_points", "feedback")


def pytest_addoption(parser):
    group = parser.getgroup("infralens", "InfraLens Lab grading")
    group.addoption("--infralens-grade", action="store_true", default=False,
                    help="grade mode: a wrong or unanswered quiz check fails its cell; print a score summary")
    group.addoption("--infralens-score-csv", default=None, metavar="PATH",
                    help="grade mode: also write the score rows as CSV")
    group.addoption("--infralens-score-junit", default=None, metavar="PATH",
                    help="grade mode: also write the score rows as JUnit XML (one testcase per question)")


def _env_grade() -> bool:
    return os.environ.get(GRADE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def pytest_configure(config):
    on = config.getoption("infralens_grade") or _env_grade()
    wants_files = config.getoption("infralens_score_csv") or config.getoption("infralens_score_junit")
    if wants_files and not on:
        raise pytest.UsageError("--infralens-score-csv/--infralens-score-junit need --infralens-grade "
                                "(or INFRALENS_GRADE=1)")
    if on:
        config.pluginmanager.register(GradeSession(config), "infralens-grade-session")


def notebook_of(item) -> str | None:
    """The notebook path (relative to rootdir where possible) of an nbval cell item, else None."""
    path = Path(str(getattr(item, "path", getattr(item, "fspath", ""))))
    if path.suffix != ".ipynb" or not hasattr(item, "cell"):
        return None
    try:
        return str(path.resolve().relative_to(Path(str(item.config.rootpath)).resolve()))
    except ValueError:
        return str(path)


def _max_points(qid: str) -> float:
    from .bank import BankError, question

    try:
        return question(qid).points
    except BankError:
        return 0


class GradeSession:
    """State of one grading run: expected questions per notebook and the records that came back."""

    def __init__(self, config):
        self.config = config
        self.tmp = tempfile.mkdtemp(prefix="infralens-grade-")
        self.score_file = Path(self.tmp) / "scores.jsonl"
        self.score_file.touch()
        self.saved_env = {k: os.environ.get(k) for k in (GRADE_ENV, SCORE_ENV)}
        os.environ[GRADE_ENV] = "1"
        os.environ[SCORE_ENV] = str(self.score_file)
        self.offset = 0
        self.expected: dict[str, list[str]] = {}
        self.records: dict[str, dict[str, dict]] = {}

    # ------------------------------------------------------------ hooks
    def pytest_collection_modifyitems(self, items):
        for item in items:
            nb = notebook_of(item)
            if nb is None:
                continue
            qids = self.expected.setdefault(nb, [])
            for qid in CHECK_RE.findall(str(item.cell.get("source", ""))):
                if qid not in qids:
                    qids.append(qid)

    def pytest_runtest_teardown(self, item, nextitem):
        self._drain(notebook_of(item) or item.nodeid)

    def pytest_terminal_summary(self, terminalreporter):
        self._drain(None)
        rows = self.rows()
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
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------ records
    def _drain(self, notebook: str | None) -> None:
        """File the score lines written since the last call under ``notebook``."""
        with open(self.score_file, encoding="utf-8") as f:
            f.seek(self.offset)
            text = f.read()
        complete = text[: text.rfind("\n") + 1]  # leave a half-written line for next time
        self.offset += len(complete.encode("utf-8"))
        for line in complete.splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            nb = notebook or "(unknown notebook)"
            self.records.setdefault(nb, {})[rec["qid"]] = rec  # a re-run check replaces the earlier one

    def rows(self) -> list[dict]:
        """One row per (notebook, question): expected questions in cell order, then any others seen."""
        out = []
        for nb in sorted(set(self.expected) | set(self.records)):
            recs = self.records.get(nb, {})
            qids = list(self.expected.get(nb, []))
            qids += [q for q in recs if q not in qids]
            for qid in qids:
                rec = recs.get(qid)
                if rec is None:
                    row = dict(notebook=nb, lab=qid.split(".")[0], question=qid, status=NOT_REACHED,
                               points=0, max_points=_max_points(qid),
                               feedback="the check did not run (a cell above it failed)")
                else:
                    row = dict(notebook=nb, lab=rec.get("lab", qid.split(".")[0]), question=qid,
                               status=rec["status"], points=rec["points"], max_points=rec["max_points"],
                               feedback="" if rec["status"] == "correct" else rec.get("message", ""))
                out.append(row)
        return out


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
