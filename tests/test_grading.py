"""Instructor grading end to end, and the grader's pieces (issue 14).

One class folder of lab 00 submissions, made with nbformat from ``labs/00_start_here.ipynb``,
is graded once through ``make grade`` (the Makefile's own recipe and pytest command; alice hands in the whole lab,
run whole, the others its answer cells only, which the grader reads the same and runs in a second each): honest
right and wrong work, and every tampering trick the issue lists, plus a corrupt file and a
lab submitted under another lab's file name. Each must score exactly what its final answers
earn. The grader's static reading of answers and the plugin's switch are tested in-process.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import make_grade_command

from infralens_lab.quiz import grader, labs, load_bank, question
from infralens_lab.quiz import pytest_plugin as plugin
from infralens_lab.quiz.check import GRADE_ENV
from infralens_lab.quiz.keys import lab00 as lab00_key
from infralens_lab.quiz.keys import lab06 as lab06_key

nbformat = pytest.importorskip("nbformat", reason="needs the Jupyter test stack (make test installs it); plain python3 on a GPU machine lacks it")

ROOT = Path(__file__).resolve().parents[1]
LAB00 = ROOT / "labs" / "00_start_here.ipynb"
SCORE_ENV = plugin.SCORE_ENV


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFRALENS_")}
    env.update(extra)
    return env


def _lab00(slim: bool = False):
    """Lab 00 as handed out, outputs cleared; ``slim``: its answer cells only, after one that imports ``check`` (the
    grader reads the same answers from it, and its run, with ``RUN=1``, takes a second, not five: no torch, no
    kernels). The class's honest all-right student hands in the whole lab, run whole by the grader."""
    nb = nbformat.read(LAB00, as_version=4)
    if slim:
        nb.cells = [c for c in nb.cells if c.cell_type != "code" or "ANSWER_" in c.source]
        first = next(k for k, c in enumerate(nb.cells) if c.cell_type == "code")
        nb.cells.insert(first, nbformat.v4.new_code_cell("from infralens_lab.quiz import check"))
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def _slim():
    return _lab00(slim=True)


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _cell(nb, startswith: str):
    """The one code cell with a line starting with ``startswith`` (an answer cell holds the answer variable and
    its check, one line each: the cell protocol)."""
    hits = [c for c in _code(nb) if any(line.startswith(startswith) for line in c.source.splitlines())]
    assert len(hits) == 1, f"expected one code cell with a line starting {startswith!r} in lab 00, found {len(hits)}"
    return hits[0]


def _answers(nb, **answers):
    for var, src in answers.items():
        cell = _cell(nb, f"{var} = ")
        cell.source = re.sub(rf"^{var} = .*$", f"{var} = {src}".replace("\\", r"\\"), cell.source, flags=re.M)
    return nb


def _drop_check(nb, qid: str):
    """Delete the line that checks ``qid`` (its answer line stays)."""
    cell = _cell(nb, f'check("{qid}"')
    cell.source = "\n".join(line for line in cell.source.splitlines() if not line.startswith(f'check("{qid}"'))


def _after(nb, startswith: str, source: str):
    cell = _cell(nb, startswith)
    nb.cells.insert(nb.cells.index(cell) + 1, nbformat.v4.new_code_cell(source))
    return nb


RIGHT_Q1 = question("lab00.q1").answer
WRONG_Q1 = next(k for k in question("lab00.q1").options if k != RIGHT_Q1)
RIGHT_Q3 = int(grader.expected_for_grading(question("lab00.q3")))


def _class_folder(subs: Path, scores: Path) -> None:
    """Write the class folder: one sub-folder per student."""
    def put(who, nb, name="00_start_here.ipynb"):
        (subs / who).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, subs / who / name)

    right = dict(ANSWER_Q1=repr(RIGHT_Q1), ANSWER_Q2='"Live"', ANSWER_Q3=str(RIGHT_Q3))
    put("alice", _answers(_lab00(), **right))                                      # honest, all right, whole
    put("bob", _answers(_slim(), ANSWER_Q1=repr(WRONG_Q1), ANSWER_Q2="None",         # honest: wrong, blank,
                        ANSWER_Q3="-(-n // intro.BLOCK_SIZE) * intro.BLOCK_SIZE - n"))  # and computed by code
    carol = _answers(_slim(), ANSWER_Q1=repr(RIGHT_Q1), ANSWER_Q2='"recorded"', ANSWER_Q3=str(RIGHT_Q3))
    _drop_check(carol, "lab00.q2")                                                  # deletes a check
    put("carol", carol)
    dave = _answers(_slim(), ANSWER_Q1=repr(RIGHT_Q1))
    for qid in load_bank("lab00"):                                                  # all checks gone
        _drop_check(dave, qid)
    put("dave", dave)
    erin = _answers(_slim(), ANSWER_Q1=repr(WRONG_Q1))                              # writes the score files
    forged = [{"qid": f"lab00.q{i}", "lab": "lab00", "status": "correct", "points": 1, "max_points": 1,
               "message": "forged"} for i in (1, 2, 3)]
    _after(erin, 'check("lab00.q1"', (
        "import json, os\n"
        f"for path in [os.environ.get({SCORE_ENV!r}) or 'forged.jsonl', {str(scores)!r}]:\n"
        "    with open(path, 'a') as f:\n"
        f"        f.write('\\n'.join(json.dumps(r) for r in {forged!r}) + '\\n')\n"
        f"        f.write('erin/00_start_here.ipynb,lab00,lab00.q1,correct,100,1,forged\\n')\n"))
    put("erin", erin)
    frank = _answers(_slim(), ANSWER_Q1=repr(WRONG_Q1))                             # patches the judge
    _after(frank, "ANSWER_Q1 = ", (
        "import sys\n"
        "import infralens_lab.quiz.check as c\n"
        "c._judge = lambda q, answer, expected: ('correct', '')\n"
        "for name in list(sys.modules):\n"
        "    if name.startswith('infralens_lab.quiz'):\n"
        "        m = sys.modules[name]\n"
        "        for attr in ('judge', '_judge', 'judge_question', 'grade_notebook'):\n"
        "            if hasattr(m, attr):\n"
        "                setattr(m, attr, lambda *a, **k: ('correct', 1, ''))\n"))
    put("frank", frank)
    grace = _answers(_slim(), ANSWER_Q1=repr(WRONG_Q1))                             # tries every option
    _cell(grace, 'check("lab00.q1"').source = (
        "for ANSWER_Q1 in 'ABCD':\n"
        "    try:\n"
        "        check('lab00.q1', ANSWER_Q1)\n"
        "        break\n"
        "    except AssertionError:\n"
        "        pass\n")
    put("grace", grace)
    (subs / "heidi").mkdir()
    (subs / "heidi" / "00_start_here.ipynb").write_text(LAB00.read_text()[:2000])   # a truncated upload
    put("ivan", _answers(_slim(), **right), name="01_nsight_workflow.ipynb")        # lab 00 under lab 01's name
    put("judy", _lab01_functions(), name="01_nsight_workflow.ipynb")                # lab 01's function exercises


JUDY_CELLS = [  # lab 01's two function exercises: one right, one a function that returns the lab's own value
    "import numpy as np\nfrom infralens_lab.quiz import check",
    "def idle_share(busy, start, end):\n"
    "    inside = (np.clip(busy[:, 1], start, end) - np.clip(busy[:, 0], start, end)).sum()\n"
    "    return 1 - inside / (end - start)\n\n\nANSWER_EX1 = idle_share\ncheck('lab01.ex1', ANSWER_EX1)",
    "def fix_bound(period_ms, gpu_ms, cpu_ms, fraction, speedup):\n    return 1.63  # the lab's value, typed in\n\n\n"
    "ANSWER_EX4 = fix_bound\ncheck('lab01.ex4', ANSWER_EX4)"]


def _lab01_functions():
    nb = nbformat.v4.new_notebook(metadata={"infralens": {"lab": "lab01"}})
    nb.cells = [nbformat.v4.new_code_cell(s) for s in JUDY_CELLS]
    return nb


EXPECTED = {  # (student, question): (status, points)
    ("alice", "lab00.q1"): ("correct", 1), ("alice", "lab00.q2"): ("correct", 1), ("alice", "lab00.q3"): ("correct", 1),
    ("bob", "lab00.q1"): ("wrong", 0), ("bob", "lab00.q2"): ("unanswered", 0), ("bob", "lab00.q3"): ("invalid", 0),
    ("carol", "lab00.q1"): ("correct", 1), ("carol", "lab00.q2"): ("wrong", 0), ("carol", "lab00.q3"): ("correct", 1),
    ("dave", "lab00.q1"): ("correct", 1), ("dave", "lab00.q2"): ("unanswered", 0), ("dave", "lab00.q3"): ("unanswered", 0),
    ("erin", "lab00.q1"): ("wrong", 0), ("erin", "lab00.q2"): ("unanswered", 0), ("erin", "lab00.q3"): ("unanswered", 0),
    ("frank", "lab00.q1"): ("wrong", 0), ("frank", "lab00.q2"): ("unanswered", 0), ("frank", "lab00.q3"): ("unanswered", 0),
    ("grace", "lab00.q1"): ("invalid", 0), ("grace", "lab00.q2"): ("unanswered", 0), ("grace", "lab00.q3"): ("unanswered", 0),
    ("heidi", "lab00.q1"): ("unreadable", 0), ("heidi", "lab00.q2"): ("unreadable", 0),
    ("heidi", "lab00.q3"): ("unreadable", 0),
    ("ivan", "lab00.q1"): ("correct", 1), ("ivan", "lab00.q2"): ("correct", 1), ("ivan", "lab00.q3"): ("correct", 1),
    # the exercise: nobody wrote code for it (its `...` reads as unanswered); the truncated upload reads as nothing
    **{(who, "lab00.ex1"): ("unanswered", 0) for who in ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "ivan")},
    ("heidi", "lab00.ex1"): ("unreadable", 0),
    # lab 01's function exercises, run by the grader (RUN=1): the right function scores, the one that returns the lab's
    # own value is wrong on a held-out case; every other question of lab 01 is unanswered
    **{("judy", qid): ("unanswered", 0) for qid in load_bank("lab01")},
    ("judy", "lab01.ex1"): ("correct", question("lab01.ex1").points), ("judy", "lab01.ex4"): ("wrong", 0),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """``make grade`` once over the class folder (the Makefile's recipe, this interpreter)."""
    tmp = tmp_path_factory.mktemp("grading")
    subs, scores, junit, cells = tmp / "class", tmp / "scores.csv", tmp / "scores.xml", tmp / "cells.xml"
    _class_folder(subs, scores)
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    args = f"--infralens-score-junit={junit} --junitxml={cells}"
    cmd = make_grade_command(f"SUBMISSIONS={subs}", f"SCORES={scores}", f"PYTEST_ARGS={args}")
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    rows = list(csv.DictReader(scores.open())) if scores.exists() else []
    return dict(proc=proc, rows=rows, junit=junit, cells=cells, subs=subs)


def _who(row) -> str:
    return Path(row["notebook"]).parts[-2]


def test_make_grade_succeeds_and_reports(graded):
    proc = graded["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # make: pytest's 1 is a result
    assert "InfraLens grade summary" in proc.stdout and "scores written to" in proc.stdout


def test_every_student_scores_exactly_what_their_final_answers_earn(graded):
    got = {(_who(r), r["question"]): (r["status"], float(r["points"])) for r in graded["rows"]}
    assert got == EXPECTED, graded["proc"].stdout[-3000:]
    assert all(float(r["max_points"]) == question(r["question"]).points for r in graded["rows"])
    assert list(graded["rows"][0]) == list(plugin.COLUMNS)


def test_forged_score_lines_do_not_survive(graded):
    rows = graded["rows"]
    assert len(rows) == len(EXPECTED) and not any("forged" in r["feedback"] for r in rows)
    assert sum(float(r["points"]) for r in rows if _who(r) == "erin") == 0


def test_rows_say_why(graded):
    by = {(_who(r), r["question"]): r["feedback"] for r in graded["rows"]}
    assert question("lab00.q1").feedback[WRONG_Q1] in by[("bob", "lab00.q1")]
    assert "ANSWER_Q3 is set by code" in by[("bob", "lab00.q3")]
    assert "ANSWER_Q1 is set by code" in by[("grace", "lab00.q1")]
    assert "could not be read as a Jupyter notebook" in by[("heidi", "lab00.q1")]
    assert all("lab mismatch" in by[("ivan", f"lab00.q{i}")] and "says lab01" in by[("ivan", f"lab00.q{i}")]
               for i in (1, 2, 3))
    # a function exercise: judged on what the function gave in the grader's run, the failed case named
    # (1.63 is the H100 recording's bound, so it fails on the other GPU's: held out on a CPU, the lab's own on an H200)
    assert re.search(r"not right on 'TF32 fix, H\d+ recording \((held out|this lab)\)'", by[("judy", "lab01.ex4")])
    assert "your function gave 1.63" in by[("judy", "lab01.ex4")]


def test_one_pytest_item_per_question_and_nbval_still_runs(graded):
    cases = list(ET.parse(graded["cells"]).getroot().iter("testcase"))
    grade_items = [c for c in cases if re.fullmatch(r"lab\d{2}\.(q|ex)\d+", c.get("name", ""))]
    assert len(grade_items) == len(EXPECTED)
    cell_items = [c for c in cases if re.fullmatch(r"Cell \d+", c.get("name", ""))]
    ran = {who for c in cell_items for who in ("alice", "ivan", "heidi") if f"{who}." in c.get("classname", "")}
    assert ran == {"alice", "ivan"}  # executed, and the corrupt file was not handed to nbval
    suite = ET.parse(graded["junit"]).getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props == {"points": f"{sum(p for _, p in EXPECTED.values()):g}",
                     "max_points": f"{sum(question(q).points for _, q in EXPECTED):g}"}


# ---------------------------------------------------------------- static reading, in-process
def _nb(*sources, metadata=None):
    nb = nbformat.v4.new_notebook(metadata={"infralens": {"lab": "lab00"}} if metadata is None else metadata)
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


@pytest.mark.parametrize("sources, want", [
    (['ANSWER_Q1 = "B"'], ("B", True)),
    (['ANSWER_Q1 = "B"', 'ANSWER_Q1 = "C"  # changed my mind'], ("C", True)),
    (["ANSWER_Q1 = -3.5"], (-3.5, True)),
    (["ANSWER_Q1: int = 7"], (7, True)),
    (["ANSWER_Q1 = None"], (None, True)),
    (['ANSWER_Q1 = "B"', "ANSWER_Q1 = answer_key()"], (None, False)),
    (['ANSWER_Q1 = "B"', 'if True:\n    ANSWER_Q1 = "C"'], (None, False)),
    (['ANSWER_Q1 = "B"', 'try:\n    ANSWER_Q1 = "C"\nexcept Exception:\n    pass'], (None, False)),
    (['ANSWER_Q1 = "B"', "for ANSWER_Q1 in 'ABCD':\n    pass"], (None, False)),
    (['ANSWER_Q1 = "B"', "ANSWER_Q1 += 'x'"], (None, False)),
    (['ANSWER_Q1 = "B"', "ANSWER_Q1, x = 'C', 1"], (None, False)),
    (['ANSWER_Q1 = "B"', "def ANSWER_Q1():\n    pass"], (None, False)),
    (['ANSWER_Q1 = "B"', "from os import sep as ANSWER_Q1"], (None, False)),
    (["ANSWER_Q1 = True"], (None, False)),
    (['ANSWER_Q1 = f"{1}"'], (None, False)),
    (['x = 1\nANSWER_Q1 = "A"\nANSWER_Q1 = "D"'], ("D", True)),
    (['%time x = 1\nANSWER_Q1 = "A"'], ("A", True)),  # IPython syntax is understood
    (['%%time\nANSWER_Q1 = "B"'], ("B", True)),        # a cell magic that runs its body in the namespace
    (['%%capture out\nANSWER_Q1 = "B"'], ("B", True)),
    (['%time ANSWER_Q1 = "B"'], ("B", True)),
    (['\uff21\uff2e\uff33\uff37\uff25\uff32_Q1 = "B"'], ("B", True)),  # fullwidth: Python reads ANSWER_Q1
    (["ANSWER_Q1 = 98560 - 98437"], (123, True)),       # arithmetic on written-out numbers is a value
    (["ANSWER_Q1 = " + " + ".join(["1"] * 891)], (891, True)),  # too deep for ast.unparse, not for the grader
    (["ANSWER_Q1 = 2 ** 0.5 * (3 - 1) / 4"], (2 ** 0.5 * 2 / 4, True)),
    (["ANSWER_Q1 = -(7 // 2) % 5"], (-(7 // 2) % 5, True)),
    (["ANSWER_Q1 = True + 1"], (None, False)),
    (["ANSWER_Q1 = 1 + " + " + ".join(["1"] * 890) + " + n"], (None, False)),  # deep, and code
])
def test_final_answer_is_the_last_literal_assignment(sources, want):
    answers, notes = grader.final_answers(_nb(*sources))
    a = answers["ANSWER_Q1"]
    assert (a.value, a.literal) == want and notes == []


@pytest.mark.parametrize("src, why", [("ANSWER_Q1 = 1 / 0", "division by zero"),
                                      ("ANSWER_Q1 = 9 ** 9 ** 9", "more than 1000 bits"),
                                      ("ANSWER_Q1 = (-8) ** 0.5", "not a finite real number"),
                                      ("ANSWER_Q1 = 1e308 * 10.0", "not a finite real number")])
def test_arithmetic_that_cannot_be_evaluated_is_invalid_with_the_reason(src, why):
    (a,), _ = grader.final_answers(_nb(src))[0].values(), None
    assert not a.literal and why in a.source
    status, points, feedback = grader.judge_question(question("lab00.q3"), a)
    assert (status, points) == ("invalid", 0) and why in feedback


@pytest.mark.parametrize("magic", ["bash", "timeit", "writefile x.py", "html"])
def test_a_cell_magic_that_does_not_run_python_in_the_namespace_sets_nothing(magic):
    answers, notes = grader.final_answers(_nb('ANSWER_Q1 = "B"', f'%%{magic}\nANSWER_Q1 = "C"'))
    assert answers["ANSWER_Q1"].value == "B" and len(notes) == 1 and f"%%{magic.split()[0]} cell" in notes[0]


def test_a_cell_python_cannot_compile_sets_nothing_as_in_the_kernel():
    """5000 terms: Python's own parser gives up (RecursionError), so the kernel never sets the variable."""
    deep = "ANSWER_Q1 = " + " + ".join(["1"] * 5000)
    answers, notes = grader.final_answers(_nb('ANSWER_Q1 = "B"', deep))
    assert answers["ANSWER_Q1"].value == "B" and "cannot be compiled by Python" in notes[0]


@pytest.mark.parametrize("boom", [RecursionError("maximum recursion depth exceeded"), MemoryError()])
def test_an_error_while_grading_one_notebook_stays_in_its_rows(tmp_path, monkeypatch, boom):
    good, bad = tmp_path / "good" / "00_start_here.ipynb", tmp_path / "bad" / "00_start_here.ipynb"
    for p in (good, bad):
        p.parent.mkdir()
        nbformat.write(_nb(f"ANSWER_Q1 = {RIGHT_Q1!r}"), p)
    real = grader.final_answers

    def flaky(nb):
        if any("poison" in c.source for c in nb.cells):
            raise boom
        return real(nb)

    nbformat.write(_nb(f"ANSWER_Q1 = {RIGHT_Q1!r}", "# poison"), bad)
    monkeypatch.setattr(grader, "final_answers", flaky)
    rows = grader.grade_notebook(bad, "bad") + grader.grade_notebook(good, "good")
    assert {(r.notebook, r.status) for r in rows} == {("bad", "unreadable"), ("good", "correct"), ("good", "unanswered")}
    assert all(type(boom).__name__ in r.feedback and r.flags == "grader error" for r in rows if r.notebook == "bad")


def test_a_cell_that_is_not_python_is_noted_not_fatal():
    answers, notes = grader.final_answers(_nb('ANSWER_Q1 = "B"', "ANSWER_Q2 = (", 'ANSWER_Q3 = 4'))
    assert answers["ANSWER_Q1"].value == "B" and "ANSWER_Q2" not in answers and answers["ANSWER_Q3"].value == 4
    assert len(notes) == 1 and "code cell 1 is not valid Python" in notes[0]


def test_grade_notebook_questions_come_from_the_bank(tmp_path):
    p = tmp_path / "00_start_here.ipynb"
    nbformat.write(_nb(f"ANSWER_Q1 = {RIGHT_Q1!r}"), p)  # no check cells at all, no q2/q3 cells
    rows = grader.grade_notebook(p, "x.ipynb")
    assert [(r.question, r.status, r.points) for r in rows] == [
        ("lab00.q1", "correct", 1), ("lab00.q2", "unanswered", 0), ("lab00.ex1", "unanswered", 0),
        ("lab00.q3", "unanswered", 0)]
    assert "no ANSWER_Q2 = ... cell" in rows[1].feedback


@pytest.mark.parametrize("metadata, name, lab, flagged", [
    ({"infralens": {"lab": "lab00"}}, "00_a.ipynb", "lab00", False),
    ({"infralens": {"title": "Lab 00 — Start here"}}, "00_a.ipynb", "lab00", False),
    ({"infralens": {"lab": "lab00"}}, "03_a.ipynb", "lab00", True),
    ({}, "01_a.ipynb", "lab01", False),
    ({}, "homework.ipynb", None, False),
    ({"infralens": {"lab": "lab99"}}, "00_a.ipynb", "lab00", True),   # metadata names a lab with no bank
])
def test_lab_identity_from_metadata_then_file_name(metadata, name, lab, flagged):
    got, flag = grader.identify_lab(_nb(metadata=metadata), Path(name))
    assert got == lab and bool(flag) == flagged


def test_metadata_naming_a_lab_without_a_bank_is_flagged_and_graded_by_file_name(tmp_path):
    p = tmp_path / "00_start_here.ipynb"
    nbformat.write(_nb(f"ANSWER_Q1 = {RIGHT_Q1!r}", metadata={"infralens": {"lab": "lab99"}}), p)
    rows = grader.grade_notebook(p, "x.ipynb")
    assert [r.question for r in rows] == list(load_bank("lab00")) and rows[0].status == "correct"
    assert all(r.flags == "unknown lab in metadata" and "says lab99" in r.feedback for r in rows)


def test_notebook_of_unknown_lab_gets_a_row(tmp_path):
    p = tmp_path / "homework.ipynb"
    nbformat.write(_nb('ANSWER_Q1 = "B"', metadata={}), p)
    (row,) = grader.grade_notebook(p, "homework.ipynb")
    assert row.status == "unknown lab" and "cannot tell which lab" in row.feedback
    nbformat.write(_nb('ANSWER_Q1 = "B"', metadata={"infralens": {"lab": "lab97"}}), p)
    (row,) = grader.grade_notebook(p, "homework.ipynb")
    assert row.status == "unknown lab" and "lab97" in row.feedback


def test_lab00_launch_length_matches_the_grader():
    """The grader rebuilds lab 00's vector_add evidence with LAB00_N: it must be the notebook's `n`."""
    src = _cell(_lab00(), "import torch").source
    m = re.search(r"^n = ([\d_]+)", src, re.M)
    assert m and int(m.group(1).replace("_", "")) == lab00_key.N


@pytest.mark.parametrize("q", [q for lab in labs() for q in load_bank(lab).values() if q.derive],
                         ids=lambda q: q.id)
def test_every_derived_question_can_be_marked_by_the_grader(q):
    assert q.evidence, f"{q.id}: a derived question needs 'evidence': 'infralens_lab.module:function' in its bank"
    try:
        grader.expected_for_grading(q)
    except grader.EvidenceUnavailable as exc:
        if "found no evidence" in str(exc):
            pytest.skip(str(exc))  # no recording in this checkout: the row would say 'no evidence'
        raise


def test_lab06_count_keys_are_the_bucket_rule_on_the_labs_model():
    """The grader measures lab 06's counts on a run cut to what they read (``counts_spec``: the lab's model, its first
    cap and its accumulation); the keys it derives there are what the lab's bucket rule gives for that model and cap
    (the rule is tested against torch's own assignment in test_distributed_buckets). Reuses the derived test's run
    (``keys.lab06._live`` is cached per process)."""
    from infralens_lab.analysis import buckets, ddp_run
    from infralens_lab.measure import distributed as measure_distributed

    full, cut = measure_distributed.spec_for("gloo"), measure_distributed.counts_spec("gloo")
    assert cut.configs == full.configs[:1] and cut.configs[0].label == "cap 1 MiB" and cut.accum == full.accum
    gpu_full, gpu_cut = measure_distributed.spec_for("nccl"), measure_distributed.counts_spec("nccl")
    assert gpu_cut.configs == gpu_full.configs[:1] and gpu_cut.accum == gpu_full.accum
    cfg = cut.configs[0]
    want = buckets.bucket_count(**ddp_run.plan_inputs(cfg.model, cfg.bucket_cap_mb))
    assert want > 1, "a cap that gives one bucket would not tell the rule's answer from a guess"
    assert grader.expected_for_grading(question("lab06.q3")) == want
    assert grader.expected_for_grading(question("lab06.q5")) == want  # with no_sync: the last micro-batch only
    counts = ddp_run.no_sync_counts(lab06_key._live()).set_index("accumulation")
    assert counts.loc["plain", "allreduce_calls_per_optimizer_step"] == cut.accum * want


def test_missing_evidence_is_a_row_not_a_crash(monkeypatch):
    q = question("lab00.q3")
    monkeypatch.setattr(lab00_key, "vector_add", lambda: None)
    grader.grader_evidence.cache_clear()
    try:
        status, points, feedback = grader.judge_question(q, grader.Answer(value=5))
    finally:
        grader.grader_evidence.cache_clear()
    assert (status, points) == ("no evidence", 0) and "found no evidence" in feedback


# ---------------------------------------------------------------- the plugin's switch
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

    def getoption(self, name, default=None):
        return self.options.get(name, default)


def test_plugin_is_a_no_op_without_grade_mode(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)
    config = _StubConfig()
    plugin.pytest_configure(config)
    assert config.pluginmanager.registered == {} and GRADE_ENV not in os.environ


@pytest.mark.parametrize("how", ["option", "env"])
def test_grade_mode_gives_kernels_no_score_file_and_unconfigure_restores(monkeypatch, how):
    monkeypatch.setenv(SCORE_ENV, "/tmp/left-over.jsonl")
    if how == "env":
        monkeypatch.setenv(GRADE_ENV, "1")
        config = _StubConfig()
    else:
        monkeypatch.delenv(GRADE_ENV, raising=False)
        config = _StubConfig(infralens_grade=True)
    plugin.pytest_configure(config)
    session = config.pluginmanager.registered["infralens-grade-session"]
    assert os.environ[GRADE_ENV] == "1" and SCORE_ENV not in os.environ
    session.pytest_unconfigure(config)
    assert os.environ[SCORE_ENV] == "/tmp/left-over.jsonl"
    assert (GRADE_ENV in os.environ) == (how == "env")


def test_score_files_without_grade_mode_are_a_usage_error(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)
    with pytest.raises(pytest.UsageError, match="need --infralens-grade"):
        plugin.pytest_configure(_StubConfig(infralens_score_csv="x.csv"))


@pytest.mark.parametrize("where", ["missing folder", "a folder", "read-only folder"])
def test_unwritable_score_file_is_refused_before_grading(monkeypatch, tmp_path, where):
    monkeypatch.delenv(GRADE_ENV, raising=False)
    if where == "missing folder":
        path = tmp_path / "no" / "scores.csv"
    elif where == "a folder":
        path = tmp_path
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        path = ro / "scores.csv"
    with pytest.raises(pytest.UsageError, match=r"cannot write the score file there .*SCORES="):
        plugin.pytest_configure(_StubConfig(infralens_grade=True, infralens_score_csv=str(path)))
    assert not (tmp_path / "no").exists()


def test_writable_score_path_is_left_as_it_was(tmp_path, monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)
    plugin.check_writable(tmp_path / "new.csv", "--infralens-score-csv")
    assert not (tmp_path / "new.csv").exists()


def test_summary_lines_add_up_per_lab_and_notebook():
    rows = [dict(notebook="a.ipynb", lab="lab00", question="lab00.q1", status="correct", points=2, max_points=2),
            dict(notebook="a.ipynb", lab="lab01", question="lab01.q1", status="wrong", points=0, max_points=1.5),
            dict(notebook="b.ipynb", lab="lab00", question="lab00.q1", status="unreadable", points=0, max_points=2)]
    lines = plugin.summary_lines(rows)
    assert lines == ["a.ipynb", "  lab00: 2/2 points", "    lab00.q1     correct      2/2",
                     "  lab01: 0/1.5 points", "    lab01.q1     wrong        0/1.5", "  total: 2/3.5",
                     "b.ipynb", "  lab00: 0/2 points", "    lab00.q1     unreadable   0/2", "  total: 0/2",
                     "all notebooks: 2/5.5 points over 2 notebook(s)"]
    assert plugin.summary_lines([]) == ["no quiz checks found in the collected notebooks"]


def test_rows_are_json_serialisable():
    row = grader.Row("a.ipynb", "lab00", "lab00.q1", "correct", 1, 1, "")
    assert json.loads(json.dumps(row.as_dict()))["status"] == "correct"


def test_make_grade_run0_scores_without_executing_anything(tmp_path):
    """RUN=0: the same scores from the files alone; no submitted cell runs (nothing to sandbox)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    marker = tmp_path / "executed"
    nb = _after(_answers(_lab00(), ANSWER_Q1=repr(RIGHT_Q1)), "ANSWER_Q1 = ",
                f"open({str(marker)!r}, 'w').write('student code ran')")
    (tmp_path / "class" / "zoe").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "class" / "zoe" / "00_start_here.ipynb")
    nbformat.write(_lab01_functions(), tmp_path / "class" / "zoe" / "01_nsight_workflow.ipynb")
    scores = tmp_path / "scores.csv"
    proc = subprocess.run(make_grade_command("RUN=0", f"SUBMISSIONS={tmp_path / 'class'}", f"SCORES={scores}"),
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = list(csv.DictReader(scores.open()))
    assert [(r["question"], r["status"]) for r in rows if r["lab"] == "lab00"] == [
        ("lab00.q1", "correct"), ("lab00.q2", "unanswered"), ("lab00.ex1", "unanswered"), ("lab00.q3", "unanswered")]
    assert not marker.exists()
    # a function exercise cannot be evaluated without running code: the row says so, 0 of its points
    fn = {r["question"]: (r["status"], float(r["points"]), r["feedback"]) for r in rows if r["lab"] == "lab01"}
    for qid in ("lab01.ex1", "lab01.ex4"):
        assert fn[qid][:2] == ("not checked", 0) and grader.NOT_RUN_FUNCTION in fn[qid][2]


@pytest.mark.parametrize("text", ["", "[]", '{"nbformat": 4, "nbformat_minor": 5}',
                                  '{"cells": "x", "nbformat": 4, "nbformat_minor": 5, "metadata": {}}'],
                         ids=["empty", "a list", "no cells", "cells not a list"])
def test_files_that_are_not_notebooks_get_unreadable_rows(tmp_path, text):
    p = tmp_path / "01_nsight_workflow.ipynb"
    p.write_text(text)
    rows = grader.grade_notebook(p, "x.ipynb")
    assert [r.question for r in rows] == list(load_bank("lab01"))  # the lab from the file name
    assert all(r.status == "unreadable" and r.points == 0 and "could not be read" in r.feedback for r in rows)
