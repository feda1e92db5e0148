"""Instructor grading end to end: nbval in grade mode over submissions built from lab 00.

Two submissions are made from ``labs/00_start_here.ipynb`` with nbformat: one answers every
question right, one answers q1 wrong, leaves q2 unanswered and crashes in the cell that sets
q3's answer (so q3's check is never reached). ``pytest --nbval-lax --infralens-grade`` runs
both in a subprocess; the per-cell pass/fail pattern and the score CSV, JUnit XML and printed
summary are checked. The plugin's switch (no-op without grade mode, on with the option or
``INFRALENS_GRADE=1``) is checked in-process, as one subprocess costs seconds of imports.
"""
from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from infralens_lab.quiz import pytest_plugin as plugin
from infralens_lab.quiz import question
from infralens_lab.quiz.check import GRADE_ENV, SCORE_ENV

ROOT = Path(__file__).resolve().parents[1]
LAB00 = ROOT / "labs" / "00_start_here.ipynb"


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFRALENS_")}
    env.update(extra)
    return env


def _pytest(args, cwd, timeout=240, **env):
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-current-env",
           "--nbval-cell-timeout=120", *args]
    return subprocess.run(cmd, cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=timeout)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _cell_index(nb, startswith: str) -> int:
    """Index among code cells (nbval's 'Cell N') of the one cell starting with ``startswith``."""
    hits = [i for i, c in enumerate(_code_cells(nb)) if c.source.startswith(startswith)]
    assert len(hits) == 1, f"expected one code cell starting with {startswith!r} in lab 00, found {hits}"
    return hits[0]


def _submission(dest: Path, answers: dict[str, str]) -> tuple[Path, dict[str, int]]:
    """Lab 00 with the answer cells replaced; returns its path and the nbval 'Cell N' index of key cells."""
    nb = nbformat.read(LAB00, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    where = {}
    for var, src in answers.items():
        i = _cell_index(nb, f"{var} = ")
        _code_cells(nb)[i].source = f"{var} = {src}"
        where[var] = i
    for q in ("q1", "q2", "q3"):
        where[f"check_{q}"] = _cell_index(nb, f'check("lab00.{q}"')
        where[f"self_{q}"] = _cell_index(nb, f'self_check("lab00.{q}"')
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return dest, where


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Run the grading command once over a right and a wrong submission."""
    tmp = tmp_path_factory.mktemp("grading")
    subs = tmp / "submissions"
    right_answer = repr(question("lab00.q1").answer)
    right, right_cells = _submission(subs / "alice" / "00_start_here.ipynb", {
        "ANSWER_Q1": right_answer,
        "ANSWER_Q2": '"Live"',  # read off the caption; normalised like any text answer
        "ANSWER_Q3": "-(-n // intro.BLOCK_SIZE) * intro.BLOCK_SIZE - n  # the learner works it out",
    })
    wrong_q1 = next(k for k in question("lab00.q1").options if k != question("lab00.q1").answer)
    wrong, wrong_cells = _submission(subs / "bob" / "00_start_here.ipynb", {
        "ANSWER_Q1": repr(wrong_q1),
        "ANSWER_Q2": "None",
        "ANSWER_Q3": "1 / 0  # crashes, so q3's check is never reached",
    })
    csv_path, junit_path, report = tmp / "scores.csv", tmp / "scores.xml", tmp / "cells.xml"
    proc = _pytest(["--nbval-lax", "--infralens-grade", f"--infralens-score-csv={csv_path}",
                    f"--infralens-score-junit={junit_path}", f"--junitxml={report}", "submissions"], cwd=tmp)
    return dict(proc=proc, csv=csv_path, junit=junit_path, report=report, wrong_q1=wrong_q1,
                right_cells=right_cells, wrong_cells=wrong_cells,
                n_code=sum(c.cell_type == "code" for c in nbformat.read(LAB00, 4).cells))


def _cells_by_notebook(report: Path) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        m = re.search(r"Cell (\d+)$", case.get("name", ""))
        if not m:
            continue
        who = "alice" if "alice" in case.get("classname", "") else "bob"
        failed = case.find("failure") is not None or case.find("error") is not None
        out.setdefault(who, {})[int(m.group(1))] = "failed" if failed else "passed"
    return out


def test_right_submission_passes_every_cell(graded):
    cells = _cells_by_notebook(graded["report"])
    assert len(cells["alice"]) == graded["n_code"], graded["proc"].stdout[-3000:]
    assert set(cells["alice"].values()) == {"passed"}, graded["proc"].stdout[-3000:]


def test_wrong_submission_fails_exactly_the_check_and_crash_cells(graded):
    cells = _cells_by_notebook(graded["report"])["bob"]
    w = graded["wrong_cells"]
    failing = {w["check_q1"], w["check_q2"], w["ANSWER_Q3"], w["check_q3"]}
    assert {i for i, s in cells.items() if s == "failed"} == failing, graded["proc"].stdout[-3000:]
    for q in ("q1", "q2", "q3"):
        assert cells[w[f"self_{q}"]] == "passed"  # self-checks never fail, even in grade mode
    assert graded["proc"].returncode == 1


def test_failure_output_carries_the_feedback(graded):
    out = graded["proc"].stdout
    assert question("lab00.q1").feedback[graded["wrong_q1"]] in out
    assert "lab00.q2: not answered yet" in out
    assert "ZeroDivisionError" in out


def test_score_csv_adds_up(graded):
    rows = list(csv.DictReader(graded["csv"].open()))
    got = {(r["notebook"], r["question"]): (r["status"], float(r["points"]), float(r["max_points"])) for r in rows}
    assert got == {
        ("submissions/alice/00_start_here.ipynb", "lab00.q1"): ("correct", 1, 1),
        ("submissions/alice/00_start_here.ipynb", "lab00.q2"): ("correct", 1, 1),
        ("submissions/alice/00_start_here.ipynb", "lab00.q3"): ("correct", 1, 1),
        ("submissions/bob/00_start_here.ipynb", "lab00.q1"): ("wrong", 0, 1),
        ("submissions/bob/00_start_here.ipynb", "lab00.q2"): ("unanswered", 0, 1),
        ("submissions/bob/00_start_here.ipynb", "lab00.q3"): ("not reached", 0, 1),
    }
    assert [r["question"] for r in rows] == ["lab00.q1", "lab00.q2", "lab00.q3"] * 2  # cell order
    bob_q1 = next(r for r in rows if r["notebook"].startswith("submissions/bob") and r["question"] == "lab00.q1")
    assert question("lab00.q1").feedback[graded["wrong_q1"]] in bob_q1["feedback"]


def test_printed_summary_and_junit_agree_with_csv(graded):
    out = graded["proc"].stdout
    assert "InfraLens grade summary" in out
    assert re.search(r"submissions/alice/00_start_here.ipynb\n  lab00: 3/3 points\n", out)
    assert re.search(r"    lab00.q3\s+not reached\s+0/1\n", out)
    assert "all notebooks: 3/6 points over 2 notebook(s)" in out
    root = ET.parse(graded["junit"]).getroot()
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("6", "3")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props == {"points": "3", "max_points": "6"}
    statuses = sorted(f.get("message") for f in root.iter("failure"))
    assert statuses == ["not reached", "unanswered", "wrong"]


class _StubPluginManager:
    def __init__(self):
        self.registered = {}

    def register(self, plugin, name):
        self.registered[name] = plugin


class _StubConfig:
    """Just what ``pytest_configure`` reads: options and the plugin manager."""

    def __init__(self, **options):
        self.options = {"infralens_grade": False, "infralens_score_csv": None, "infralens_score_junit": None,
                        **options}
        self.pluginmanager = _StubPluginManager()

    def getoption(self, name):
        return self.options[name]


def test_plugin_is_a_no_op_without_grade_mode(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)
    monkeypatch.delenv(SCORE_ENV, raising=False)
    config = _StubConfig()
    plugin.pytest_configure(config)
    assert config.pluginmanager.registered == {}
    assert GRADE_ENV not in os.environ and SCORE_ENV not in os.environ


@pytest.mark.parametrize("how", ["option", "env"])
def test_grade_option_or_env_turns_grading_on_and_unconfigure_restores(monkeypatch, how):
    monkeypatch.delenv(SCORE_ENV, raising=False)
    if how == "env":
        monkeypatch.setenv(GRADE_ENV, "1")
        config = _StubConfig()
    else:
        monkeypatch.delenv(GRADE_ENV, raising=False)
        config = _StubConfig(infralens_grade=True)
    plugin.pytest_configure(config)
    session = config.pluginmanager.registered["infralens-grade-session"]
    assert os.environ[GRADE_ENV] == "1" and Path(os.environ[SCORE_ENV]).is_file()
    tmp = session.tmp
    session.pytest_unconfigure(config)
    assert not Path(tmp).exists() and SCORE_ENV not in os.environ
    assert (GRADE_ENV in os.environ) == (how == "env")


def test_score_files_without_grade_mode_are_a_usage_error(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)
    with pytest.raises(pytest.UsageError, match="need --infralens-grade"):
        plugin.pytest_configure(_StubConfig(infralens_score_csv="x.csv"))


def test_summary_lines_add_up_per_lab_and_notebook():
    rows = [dict(notebook="a.ipynb", lab="lab00", question="lab00.q1", status="correct", points=2, max_points=2),
            dict(notebook="a.ipynb", lab="lab01", question="lab01.q1", status="wrong", points=0, max_points=1.5),
            dict(notebook="b.ipynb", lab="lab00", question="lab00.q1", status="not reached", points=0, max_points=2)]
    lines = plugin.summary_lines(rows)
    assert lines == ["a.ipynb", "  lab00: 2/2 points", "    lab00.q1     correct      2/2",
                     "  lab01: 0/1.5 points", "    lab01.q1     wrong        0/1.5", "  total: 2/3.5",
                     "b.ipynb", "  lab00: 0/2 points", "    lab00.q1     not reached  0/2", "  total: 0/2",
                     "all notebooks: 2/5.5 points over 2 notebook(s)"]
    assert plugin.summary_lines([]) == ["no quiz checks found in the collected notebooks"]
