"""The grader's parts (issue 28): exercise values read from check's records, the published record, nbval's
view of it, the manifest, the score files, the class report, process isolation, and bad grading inputs.
The end-to-end runs are in tests/test_grading_hostile.py and tests/test_grading.py."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import make_grade_command, question_sections_of

from infralens_lab.quiz import answers, grader, manifest, report, scores
from infralens_lab.quiz import bank as bank_mod
from infralens_lab.quiz import functions as fx
from infralens_lab.quiz import pytest_plugin as plugin
from infralens_lab.quiz.check import ANSWER_MIME, answer_record, check
from infralens_lab.quiz.isolation import RunOutcome

nbformat = pytest.importorskip("nbformat", reason="needs the Jupyter test stack (make test installs it)")
import hostile_class  # noqa: E402  (after the nbformat importorskip: it builds notebooks)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def ex_bank(tmp_path, monkeypatch):
    """Lab 00's bank plus the exercise lab00.ex9 (masked lanes computed by code), via $INFRALENS_QUIZ_BANKS."""
    d = tmp_path / "banks"
    d.mkdir()
    (d / "lab00.json").write_text(json.dumps(hostile_class._bank()))
    monkeypatch.setenv(bank_mod.BANKS_ENV, str(d))
    return d


LANES = 891.0  # lab 00's masked lanes (the grader computes it: asserted in test_exercise_right_from_saved_record)


def _nb_file(tmp_path, outputs=None, source=hostile_class.EX_CODE):
    nb = nbformat.v4.new_notebook(metadata={"infralens": {"lab": "lab00"}})
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.v4.new_output("display_data", data={ANSWER_MIME: o, "text/plain": ""})
                    for o in (outputs or [])]
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), cell]
    p = tmp_path / "00_start_here.ipynb"
    nbformat.write(nb, p)
    return p


def _ex_row(path, run=None):
    return next(r for r in grader.grade_notebook(path, "x", run=run) if r.question == hostile_class.EX)


# ---------------------------------------------------------------- exercises
def test_exercise_right_from_saved_record(ex_bank, tmp_path):
    assert grader.expected_for_grading(bank_mod.question(hostile_class.EX)) == LANES
    row = _ex_row(_nb_file(tmp_path, [answer_record(hostile_class.EX, LANES)]))
    assert (row.status, row.points, row.answer) == ("correct", 1, "891")


@pytest.mark.parametrize("payload, status, why", [
    ({"question": hostile_class.EX, "value": LANES + 1}, "wrong", "too high"),
    ({"question": "lab00.q3", "value": LANES}, "unanswered", "no value for lab00.ex9 was recorded"),
    ({"question": hostile_class.EX, "value": [LANES]}, "invalid", "is a list"),
    ({"question": hostile_class.EX, "value": True}, "invalid", "is a bool"),
    ({"question": hostile_class.EX, "value": {"v": 1}}, "invalid", "is an object"),
    ({"question": hostile_class.EX, "value": LANES, "points": 1}, "invalid", "exactly 'question' and 'value'"),
    ({"question": hostile_class.EX, "value": "x" * 1001}, "invalid", "over 1000 characters"),
    ({"question": hostile_class.EX, "value": None}, "unanswered", "not answered"),
    (json.dumps({"question": hostile_class.EX, "value": LANES}), "correct", ""),  # a front end that stored it as text
])
def test_exercise_record_is_parsed_strictly(ex_bank, tmp_path, payload, status, why):
    row = _ex_row(_nb_file(tmp_path, [payload]))
    assert row.status == status and why in row.feedback


def test_exercise_without_output_says_to_run_the_cell(ex_bank, tmp_path):
    row = _ex_row(_nb_file(tmp_path))
    assert row.status == "unanswered" and "run the cell" in row.feedback and "code cell 1" in row.feedback


def test_exercise_written_as_a_literal_is_read_as_one(ex_bank, tmp_path):
    row = _ex_row(_nb_file(tmp_path, [answer_record(hostile_class.EX, 5.0)], source=f"ANSWER_EX9 = {int(LANES)}"))
    assert row.status == "correct"  # the literal, not the (stale) record


def test_exercise_in_a_run_reads_the_executed_cell_else_the_saved_one(ex_bank, tmp_path):
    path = _nb_file(tmp_path, [answer_record(hostile_class.EX, 1.0)])            # the saved output is wrong
    ran = RunOutcome("ok", cells={0: {"state": "ok"}, 1: {"state": "ok"}},
                     records={1: [answer_record(hostile_class.EX, LANES)]})
    assert _ex_row(path, ran).status == "correct"                         # the run's value wins
    died = RunOutcome("kernel died", "the kernel died in code cell 0", cells={})
    row = _ex_row(path, died)
    assert row.status == "wrong" and "saved in the file" in row.feedback and "did not reach" in row.feedback
    assert "kernel died" in row.flags and "scored from the answers written in the file" in row.feedback
    failed = RunOutcome("ok", cells={1: {"state": "error", "error": "NameError: name 'n' is not defined"}})
    row = _ex_row(path, failed)
    assert row.status == "unanswered" and "NameError" in row.feedback


@pytest.mark.parametrize("answer, value", [
    (None, None), (..., None), ("  ", None), ("B", "B"), (3, 3.0), (2.5, 2.5), (True, "True"),
    (float("nan"), "nan"), (float("inf"), "inf"), ([1, 2], "[1, 2]"),
])
def test_answer_record_holds_what_the_judge_saw(answer, value):
    assert answer_record("lab00.q3", answer) == {"question": "lab00.q3", "value": value}


def test_answer_record_of_numpy_and_torch_scalars():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    assert answer_record("q", np.float32(0.5))["value"] == 0.5
    assert answer_record("q", torch.tensor(3))["value"] == 3.0
    assert answer_record("q", torch.tensor([1.0, 2.0]))["value"].startswith("tensor(")


def test_check_publishes_nothing_outside_a_kernel(capsys, monkeypatch):
    monkeypatch.delenv("INFRALENS_GRADE", raising=False)
    check("lab00.q1", "A")
    assert ANSWER_MIME not in capsys.readouterr().out


def test_record_parser_rejects_non_finite_and_huge():
    assert answers.parse_record({"question": "q", "value": math.inf}, "q")[0] is False
    assert answers.parse_record({"question": "q", "value": 2 ** 2000}, "q")[0] is False
    assert answers.parse_record({"question": "q", "value": 7}, "q") == (True, 7.0, "")


# ---------------------------------------------------------------- nbval never compares the record
def test_plugin_constants_match_the_package():
    from infralens_lab.quiz import runner

    assert plugin.ANSWER_MIME == runner.ANSWER_MIME == ANSWER_MIME and plugin.COLUMNS == grader.COLUMNS == scores.COLUMNS
    # the runner (a script importing nothing of the package) keeps its own copy of the IRI-grammar skip
    import inspect

    from infralens_lab import quick_nbformat
    body = [inspect.getsource(f).split('"""')[-1].strip() for f in (runner.skip_iri_grammar, quick_nbformat.skip_iri_grammar)]
    assert body[0] == body[1] == 'sys.modules.setdefault("rfc3987_syntax", None)', body


def test_runner_script_imports_nothing_of_the_package():
    """The runner runs as a script (``python -P runner.py``), so each notebook's run skips importing the quiz
    package (pandas, the banks): about a second of CPU per notebook on a 2-core machine."""
    code = ("import runpy, sys; sys.argv = ['runner.py', '--help']\ntry:\n    runpy.run_path(sys.argv_path, run_name='__main__')\n"
            "except SystemExit:\n    pass\nprint(sorted(m for m in sys.modules if m.startswith('infralens_lab') or m == 'pandas'))")
    from infralens_lab.quiz import isolation

    proc = subprocess.run([sys.executable, "-P", "-c", code.replace("sys.argv_path", repr(str(isolation.RUNNER)))],
                          capture_output=True, text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout[-500:]


def test_the_runner_writes_the_kernels_connection_file_in_the_graders_private_folder(tmp_path):
    """The kernel's connection file (its ports and message key) goes beside RESULTS, in the folder the grader removes
    after each run (even a killed runner's), not one file per graded notebook left in /tmp."""
    from infralens_lab.quiz import isolation

    nb_path, results = tmp_path / "notebook" / "submission.ipynb", tmp_path / "private" / "results.jsonl"
    nb_path.parent.mkdir()
    results.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 6 * 7")]), nb_path)
    proc = subprocess.run([sys.executable, "-P", str(isolation.RUNNER), str(nb_path), str(results)], cwd=nb_path.parent,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line)["event"] for line in results.read_text().splitlines()]
    assert events[0] == "start" and events[-1] == "end", events
    info = json.loads((results.parent / "kernel-connection.json").read_text())
    assert info["key"] and info["kernel_name"] == ":infralens-grader-env"


def test_an_answer_cells_import_costs_no_pandas():
    """``from infralens_lab.quiz import check`` (every answer cell, every graded notebook's kernel) imports no pandas
    and no numpy (``quiz.derive`` imports them, and the analysis modules, in the derivations that read tables):
    about 0.3-0.5 s of a 2-core machine per kernel. A derivation still works, and brings pandas in then."""
    code = ("import sys\nfrom infralens_lab.quiz import check\n"
            "print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))\n"
            "from infralens_lab.quiz import derive\n"
            "assert derive.derive('value', [{'a': 1.5, 'b': 'x'}, {'a': 2.5, 'b': 'y'}], column='a', where={'b': 'y'}) == 2.5\n"
            "assert derive.derive('dominant_stall', [{'reason': 'selected', 'share': 0.9}, {'reason': 'long_scoreboard', "
            "'share': 0.1}]) == 'long_scoreboard'\n"
            "print('pandas' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[]", "True"], proc.stdout[-500:]


def test_nbval_compares_outputs_without_answer_records():
    seen = []

    class IPyNbCell:  # stands in for nbval's item (the plugin matches the class name)
        def compare_outputs(self, test, ref, skip_compare=None):
            seen.append((test, ref))
            return True

    item = IPyNbCell()
    plugin.pytest_collection_modifyitems(None, None, [item])
    rec = {"output_type": "display_data", "data": {ANSWER_MIME: {"question": "q", "value": 1.0}, "text/plain": ""}}
    text = {"output_type": "stream", "name": "stdout", "text": "ok"}
    assert item.compare_outputs([text, rec], [text])
    assert seen == [([text], [text])]


# ---------------------------------------------------------------- manifest
@pytest.fixture
def quiz_copy(tmp_path):
    """A copy of the package's quiz folder with its manifest, inside a fake checkout (pyproject.toml)."""
    (tmp_path / "pyproject.toml").write_text("")
    dest = tmp_path / "infralens_lab" / "quiz"
    shutil.copytree(manifest.QUIZ_DIR, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_committed_manifest_matches_the_grader_files():
    try:
        manifest.verify()
    except manifest.ManifestError as exc:
        pytest.fail(f"{exc}\n(after changing infralens_lab/quiz on purpose, run `{manifest.REGENERATE}` and commit the manifest)")


def test_manifest_names_a_changed_file_and_the_fix(quiz_copy):
    manifest.verify(quiz_copy)
    with (quiz_copy / "check.py").open("a") as f:
        f.write("\ndef _judge(q, answer, expected):\n    return 'correct', ''\n")
    with pytest.raises(manifest.ManifestError) as exc:
        manifest.verify(quiz_copy)
    msg = str(exc.value)
    assert "changed: infralens_lab/quiz/check.py" in msg and "git checkout -- infralens_lab/quiz/check.py" in msg
    assert manifest.REGENERATE in msg
    manifest.write(quiz_copy)  # a deliberate change, recorded
    manifest.verify(quiz_copy)


@pytest.mark.parametrize("damage, words", [
    (lambda d: (d / "manifest.json").unlink(), "manifest.json is missing"),
    (lambda d: (d / "manifest.json").write_text("{"), "not valid JSON"),
    (lambda d: (d / "manifest.json").write_text('{"schema": "x"}'), "schema 'x'"),
    (lambda d: (d / "evil.py").write_text("x = 1"), "not in the manifest: infralens_lab/quiz/evil.py"),
    (lambda d: (d / "banks" / "lab00.json").unlink(), "missing: infralens_lab/quiz/banks/lab00.json"),
    (lambda d: (d / "grade_root" / "pytest.ini").write_text("[pytest]\naddopts = -p evil\n"),
     "changed: infralens_lab/quiz/grade_root/pytest.ini"),
])
def test_manifest_problems_are_named(quiz_copy, damage, words):
    damage(quiz_copy)
    with pytest.raises(manifest.ManifestError, match=None) as exc:
        manifest.verify(quiz_copy)
    assert words in str(exc.value)


def test_snapshot_sees_a_changed_and_an_added_file(tmp_path):
    (tmp_path / "a.py").write_text("x = 1")
    snap = manifest.Snapshot([tmp_path])
    assert snap.changes() == []
    (tmp_path / "a.py").write_text("x = 2")
    (tmp_path / "b.json").write_text("{}")
    assert snap.changes() == [str(tmp_path / "a.py"), str(tmp_path / "b.json")]


def test_snapshot_puts_back_bytes_and_dates_and_removes_what_was_added(tmp_path):
    """What JOBS > 1 does before running again one at a time the notebooks that ran beside a change: the date
    goes back too, so that a .pyc compiled from the file before stays valid (else the next import rewrites it)."""
    import random

    body = f"x = {random.randrange(10**9)}\n".encode()
    (tmp_path / "a.py").write_bytes(body)
    os.utime(tmp_path / "a.py", ns=(1_600_000_000_000_000_000, 1_600_000_000_123_456_789))
    snap = manifest.Snapshot([tmp_path])
    (tmp_path / "a.py").write_text("def _judge(*a):\n    return 'correct', ''\n")
    (tmp_path / "planted.pyc").write_bytes(b"\0" * 16)
    assert snap.restore(snap.changes()) == [] and snap.changes() == []
    assert (tmp_path / "a.py").read_bytes() == body and not (tmp_path / "planted.pyc").exists()
    assert (tmp_path / "a.py").stat().st_mtime_ns == 1_600_000_000_123_456_789


# ---------------------------------------------------------------- score files
def _rows():
    base = dict(lab="lab00", max_points=1, feedback="", answer="", flags="")
    return [dict(base, notebook="a.ipynb", question="lab00.q1", status="correct", points=1, answer="C"),
            dict(base, notebook="a.ipynb", question="lab00.q3", status="wrong", points=0, answer="17"),
            dict(base, notebook="b.ipynb", question="lab00.q1", status="wrong", points=0, answer="<script>x</script>"),
            dict(base, notebook="b.ipynb", question="lab00.q3", status="wrong", points=0, answer="17",
                 flags="timed out"),
            dict(base, notebook="c.ipynb", question="lab00.q1", status="unanswered", points=0),
            dict(base, notebook="c.ipynb", question="lab00.q3", status="invalid", points=0)]


def test_score_files_are_written_atomically(tmp_path):
    path = tmp_path / "scores.csv"
    path.write_text("old")
    scores.write_csv(_rows(), path)
    scores.write_junit(_rows(), tmp_path / "scores.xml")
    assert path.read_text().splitlines()[0] == ",".join(scores.COLUMNS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.csv", "scores.xml"]  # no temporary left
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask  # readable as a file open() makes, not 0600


def test_duplicates_are_flagged_without_changing_scores():
    rows = _rows()
    groups = scores.flag_duplicates(rows, {"a.ipynb": "f1", "b.ipynb": "f1", "c.ipynb": None},
                               {"a.ipynb": "s1", "b.ipynb": "s2", "c.ipynb": "s3"})
    assert groups == [["a.ipynb", "b.ipynb"]]
    assert [r["flags"] for r in rows] == ["duplicate", "duplicate", "duplicate", "timed out; duplicate", "", ""]
    assert [r["points"] for r in rows] == [r["points"] for r in _rows()]


# ---------------------------------------------------------------- the class report
class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text, self.refs, self.rects = [], [], [], 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [v for k, v in attrs if k in ("src", "href")]
        self.rects += tag == "rect"

    def handle_data(self, data):
        self.text.append(data)


def test_report_structure_shares_wrong_answers_histogram_and_escaping():
    page_html = report.render(_rows(), {"a.ipynb": "alice", "b.ipynb": "bob", "c.ipynb": "carol"})
    page = _Page()
    page.feed(page_html)
    text = " ".join(page.text)
    assert page.refs == [] and "script" not in page.tags and "<script>x" not in page_html
    assert "&lt;script&gt;x&lt;/script&gt;" in page_html                    # a learner's answer, escaped
    assert "1/3 (33%)" in text and "0/3 (0%)" in text                       # share right per question
    assert "17 ×2" in " ".join(text.split())                                # the most common wrong answer
    assert question_sections_of("lab00")["lab00.q1"] in text                # lab00.q1's section in the lab
    assert page.rects == 3                                                  # lab00 max 2 points: bins 0, 1, 2
    assert all(w in text for w in ("alice", "bob", "carol", "timed out"))


def test_histogram_bins():
    svg = report.histogram_svg([0, 1, 1, 2, 4], 4, "t")
    assert svg.count("<rect") == 5 and ">2</text>" in svg
    assert report.histogram_svg([3.5, 40], 40, "t").count("<rect") == 10


# ---------------------------------------------------------------- isolation (in a child: it kills descendants)
_CHILD = textwrap.dedent("""
    import json, sys
    from infralens_lab.quiz import isolation as I
    import infralens_lab.quick_nbformat  # as the grader: nbformat's jsonschema then skips a grammar build
    import nbformat
    I.become_subreaper()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in json.loads(sys.argv[1])]
    o = I.run_notebook(nbformat.writes(nb).encode(), float(sys.argv[2]))
    print(json.dumps({"state": o.state, "detail": o.detail, "cells": o.cells, "left": I.descendants()}))
""")


HUNG_LIMIT_S = 7  # the runner starts a kernel and runs the first cell in ~1.5 s (3-4 s on a loaded 2-core machine)


@pytest.fixture(scope="module", autouse=True)
def hung_run(tmp_path_factory):
    """The hung notebook's child, started before this file's first test: it waits out HUNG_LIMIT_S asleep while the
    other tests run, and test_a_hung_notebook_times_out_and_leaves_nothing (the file's last) reads what it printed."""
    pid_file = tmp_path_factory.mktemp("hung") / "detached.pid"
    sources = ["import subprocess, sys\n"
               "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
               f"open({str(pid_file)!r}, 'w').write(str(p.pid))",
               "import time\ntime.sleep(600)"]
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(sources), str(HUNG_LIMIT_S)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    yield proc, pid_file
    try:  # when its test was not selected: the child ends by itself at the limit, having killed what the run left
        proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


# ---------------------------------------------------------------- bad inputs to make grade and the plugin
def _make(*args, env=None):
    return subprocess.run(make_grade_command(*args), cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in (env or os.environ).items() if k != "INFRALENS_GRADE"})


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_empty_submissions_folder_is_refused_clearly(tmp_path):
    (tmp_path / "subs").mkdir()
    proc = _make(f"SUBMISSIONS={tmp_path / 'subs'}", f"SCORES={tmp_path / 's.csv'}", "RUN=0")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "no .ipynb files found under" in out and "score rows written" not in out
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("args, words", [
    (["SUBMISSIONS=/no/such/folder"], "SUBMISSIONS=/no/such/folder does not exist"),
    (["SUBMISSIONS=.", "RUN=2"], "RUN=2; expected 1"),
    (["SUBMISSIONS=.", "JOBS=0"], "JOBS=0; expected a whole number of notebooks to run at once"),
    (["SUBMISSIONS=.", "JOBS=two"], "JOBS=two; expected a whole number"),
])
def test_bad_make_grade_arguments_are_named(args, words):
    proc = _make(*args)
    assert proc.returncode != 0 and words in proc.stdout + proc.stderr


@pytest.mark.parametrize("value", ["maybe", "2", "onn"])
def test_infralens_grade_that_is_neither_on_nor_off_is_refused(monkeypatch, value):
    monkeypatch.setenv(plugin.GRADE_ENV, value)
    with pytest.raises(pytest.UsageError, match=f"INFRALENS_GRADE='{value}' is neither on"):
        plugin.env_grade()


@pytest.mark.parametrize("value, on", [("1", True), ("TRUE", True), (" yes ", True), ("0", False), ("", False),
                                       ("off", False)])
def test_infralens_grade_on_and_off(monkeypatch, value, on):
    monkeypatch.setenv(plugin.GRADE_ENV, value)
    assert plugin.env_grade() is on


def test_quiz_banks_folder_that_is_not_there_is_named(monkeypatch, tmp_path):
    (tmp_path / "file.json").write_text("{}")
    for entry, words in ((tmp_path / "nope", "no such folder"), (tmp_path / "file.json", "a file"),
                         (tmp_path, "holds no labNN.json")):
        monkeypatch.setenv(bank_mod.BANKS_ENV, str(entry))
        with pytest.raises(bank_mod.BankError, match=words):
            bank_mod.load_bank("lab00")


def test_exercise_ids_are_accepted_by_the_bank():
    assert bank_mod.is_exercise("lab01.ex1") and not bank_mod.is_exercise("lab01.q1")
    assert bank_mod.answer_variable("lab01.ex1") == "ANSWER_EX1"
    q = bank_mod.question_from_plain(dict(hostile_class.EXERCISE, id="lab01.ex1"), "lab01")
    assert q.derive == "masked_lanes" and q.kind == "number"


class _Config:
    """What pytest_configure reads: options and a plugin manager that records what is registered."""

    def __init__(self, **options):
        self.options, self.registered = options, {}
        self.pluginmanager = self

    def getoption(self, name, default=None):
        return self.options.get(name, default)

    def register(self, obj, name):
        self.registered[name] = obj


def test_grade_session_hands_kernels_absolute_bank_folders(monkeypatch, tmp_path):
    """A relative $INFRALENS_QUIZ_BANKS would name another folder in a kernel's scratch folder."""
    d = tmp_path / "banks"
    d.mkdir()
    (d / "lab00.json").write_text(json.dumps(hostile_class._bank()))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(bank_mod.BANKS_ENV, "banks")
    monkeypatch.delenv(plugin.GRADE_ENV, raising=False)
    config = _Config(infralens_grade=True)
    plugin.pytest_configure(config)
    session = config.registered["infralens-grade-session"]
    try:
        assert os.environ[bank_mod.BANKS_ENV] == str(d.resolve())
    finally:
        session.pytest_unconfigure(config)
    assert os.environ[bank_mod.BANKS_ENV] == "banks"


def test_grade_mode_refuses_a_bank_folder_that_is_not_there(monkeypatch, tmp_path):
    monkeypatch.setenv(bank_mod.BANKS_ENV, str(tmp_path / "nope"))
    monkeypatch.delenv(plugin.GRADE_ENV, raising=False)
    with pytest.raises(pytest.UsageError, match=r"INFRALENS_QUIZ_BANKS=.*is not a folder"):
        plugin.pytest_configure(_Config(infralens_grade=True))


def test_grade_mode_refuses_nbval(monkeypatch):
    monkeypatch.delenv(plugin.GRADE_ENV, raising=False)
    with pytest.raises(pytest.UsageError, match="drop --nbval"):
        plugin.pytest_configure(_Config(infralens_grade=True, nbval_lax=True))


# ---------------------------------------------------------------- round 3 (issue 44): pure parts
from infralens_lab.quiz import submissions, world  # noqa: E402


def _lstat(tmp_path, make):
    p = tmp_path / "x.ipynb"
    make(p)
    return submissions.classify(p.name, p.lstat(), str(p.readlink()) if p.is_symlink() else None)


@pytest.mark.parametrize("make, kind, words", [
    (lambda p: p.write_text("{}"), "notebook", ""),
    (lambda p: p.symlink_to("/dev/zero"), "symlink", "a symbolic link;"),
    (lambda p: p.symlink_to(p.parent / "nowhere"), "symlink", "points nowhere (dangling)"),
    (lambda p: p.symlink_to("/etc/passwd"), "symlink", "links are not followed"),
    (lambda p: os.mkfifo(p), "special", "a FIFO (named pipe)"),
    (lambda p: p.mkdir(), "folder", ""),
], ids=["notebook", "dev-zero link", "dangling link", "passwd link", "fifo", "folder"])
def test_classify_never_follows_a_link(tmp_path, make, kind, words):
    got = _lstat(tmp_path, make)
    assert got[0] == kind and words in got[1], f"saw {got}, expected ({kind!r}, ...{words!r}...)"


def test_scan_lists_every_path_and_grades_only_notebooks(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "00_x.ipynb").write_text("{}")
    (tmp_path / "a" / "conftest.py").write_text("raise SystemExit")
    (tmp_path / "a" / "test_a.py").write_text("")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "00_x-checkpoint.ipynb").write_text("{}")
    (tmp_path / "b").symlink_to(tmp_path / "a")            # a linked folder is not entered
    got = {e.rel: (e.kind, e.reason) for e in submissions.scan(tmp_path)}
    assert got == {".ipynb_checkpoints": ("hidden", f"not graded: {submissions.HIDDEN_NOTE}"),
                   "a/00_x.ipynb": ("notebook", ""), "a/conftest.py": ("not a notebook", submissions.NOT_NOTEBOOK),
                   "a/test_a.py": ("not a notebook", submissions.NOT_NOTEBOOK),
                   "b": ("symlink", "not graded: a symbolic link; links are not followed (hand in the notebook "
                                    "file itself)")}


def test_read_regular_refuses_links_fifos_and_big_files(tmp_path):
    (tmp_path / "nb.ipynb").write_bytes(b"12345")
    (tmp_path / "link.ipynb").symlink_to(tmp_path / "nb.ipynb")
    os.mkfifo(tmp_path / "fifo.ipynb")                      # would block an open() without O_NONBLOCK
    assert submissions.read_regular(tmp_path / "nb.ipynb", 5) == b"12345"
    assert [submissions.read_regular(tmp_path / n, 5) for n in ("link.ipynb", "fifo.ipynb")] == [None, None]
    assert submissions.read_regular(tmp_path / "nb.ipynb", 4) is None


def test_folder_state_names_changes_and_puts_them_back(tmp_path):
    (tmp_path / "bob").mkdir()
    nb = tmp_path / "bob" / "00.ipynb"
    nb.write_bytes(b"original")
    state = submissions.FolderState(tmp_path)
    with submissions.read_only(state):
        assert not os.access(nb, os.W_OK) or os.geteuid() == 0, "the submission stayed writable during the run"
        nb.chmod(0o644)
        (tmp_path / "bob").chmod(0o755)
        nb.write_bytes(b"rewritten")
        tmp_path.chmod(0o755)
        (tmp_path / "conftest.py").write_text("x = 1")
    found = state.changes()
    assert found == [("bob/00.ipynb", "changed"), ("conftest.py", "added")], found
    assert state.restore(found) == []
    assert nb.read_bytes() == b"original" and not (tmp_path / "conftest.py").exists() and state.changes() == []


@pytest.mark.parametrize("text, shown", [
    ("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"), ("@SUM(1)", "'@SUM(1)"), ("+1+2", "'+1+2"),
    ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"), ("\tx", "'\\tx"), ("\rx", "'\\rx"), ("-3.5", "-3.5"),
    ("a\x1b[2Jb", "a\\x1b[2Jb"), ("\u202ethgir_h", "\\u202ethgir_h"), ("plain", "plain"),
])
def test_csv_cells_are_text_and_show_controls_escaped(text, shown):
    assert scores.safe_cell(text) == shown


def test_csv_bytes_quote_formulas_and_cap_long_cells():
    row = dict(notebook="=1+2+cmd|\" calc\"!A0.ipynb", lab="lab00", question="lab00.q1", status="wrong", points=0,
               max_points=1, feedback="=x " + "y" * 5000, answer="@" + "z" * 5000, flags="")
    text = scores.csv_bytes([scores.clip_row(row)]).decode()
    cells = next(iter(__import__("csv").DictReader(text.splitlines())))
    assert cells["notebook"].startswith("'=") and cells["answer"].startswith("'@") and cells["feedback"].startswith("'=")
    assert cells["answer"].endswith("[5,001 characters, cut]") and len(cells["answer"]) < 300, cells["answer"][-60:]


def test_report_shows_a_bidi_folder_escaped():
    page = report.render([dict(notebook="\u202ethgir_h/00.ipynb", lab="lab00", question="lab00.q1", status="correct",
                               points=1, max_points=1, feedback="", answer="\x1b[31mC", flags="")])
    assert "\u202e" not in page and "\x1b" not in page and "\\u202ethgir_h" in page


def test_a_4000_digit_integer_answer_is_refused_with_a_reason(tmp_path):
    p = _nb_file(tmp_path, source="ANSWER_Q3 = " + "7" * 4000)
    row = next(r for r in grader.grade_notebook(p, "x") if r.question == "lab00.q3")
    assert (row.status, row.flags) == ("invalid", "") and "4,000 digits" in row.feedback, row


def test_fingerprint_ignores_comments_but_not_code():
    def nb(src):
        n = nbformat.v4.new_notebook()
        n.cells = [nbformat.v4.new_code_cell(src)]
        return n
    base = grader.fingerprint(nb("ANSWER_Q1 = 'C'\ncheck('lab00.q1', ANSWER_Q1)"))
    assert grader.fingerprint(nb("# mine\nANSWER_Q1 = 'C'  # honest\n\ncheck('lab00.q1', ANSWER_Q1)")) == base
    assert grader.fingerprint(nb("ANSWER_Q1 = 'B'\ncheck('lab00.q1', ANSWER_Q1)")) != base


def test_second_notebook_of_a_lab_is_flagged_and_not_counted():
    rows = [dict(notebook=nb, lab="lab00", question="lab00.q1", status="correct", points=1, max_points=1,
                 feedback="", answer="C", flags="") for nb in ("rex/00_b.ipynb", "rex/00_a.ipynb", "sue/00_a.ipynb")]
    dropped = scores.flag_second_notebooks(rows, {r["notebook"]: r["notebook"].split("/")[0] for r in rows})
    assert dropped == ["rex/00_b.ipynb"]
    assert [(r["points"], r["flags"]) for r in rows] == [(0, "second notebook of a lab"), (1, ""), (1, "")]


@pytest.mark.parametrize("make, words", [
    (lambda p: p.mkdir(), "it is a folder"),
    (lambda p: os.mkfifo(p), "a FIFO"),
    (lambda p: p.symlink_to("/dev/null"), "a symbolic link"),
    (lambda p: None, ""),
], ids=["folder", "fifo", "link", "nothing there"])
def test_score_path_must_be_a_plain_file(tmp_path, make, words):
    p = tmp_path / "scores.csv"
    make(p)
    got = plugin.output_problem(p)
    assert (words in got) if words else got == "", f"saw {got!r}, expected {words!r}"
    assert "does not exist" in plugin.output_problem(tmp_path / "no" / "scores.csv")


def test_a_folder_planted_at_the_score_path_is_moved_aside(tmp_path):
    p = tmp_path / "scores.csv"
    p.mkdir()
    moved = scores.move_into_place(lambda q: scores.write_csv([], q), p)
    assert moved == (f"{p}.moved-aside-1", "a folder") and p.is_file() and Path(moved[0]).is_dir()


def test_world_names_unowned_pth_unknown_plugins_and_conftests(tmp_path, monkeypatch):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "ok.pth").write_text("/somewhere\n")
    (site_dir / "evil.pth").write_text("import os; os.system('x')\n")
    owned = {site_dir / "ok.pth": world._record_hash(site_dir / "ok.pth")}
    assert world.unexpected_pth([site_dir], owned) == [site_dir / "evil.pth"]
    (site_dir / "ok.pth").write_text("/elsewhere\n")                      # owned, but not with this content
    assert world.unexpected_pth([site_dir], owned) == [site_dir / "evil.pth", site_dir / "ok.pth"]

    class EP:
        def __init__(self, name):
            self.name, self.value, self.dist = name, f"{name}.plugin", None
    assert world.unexpected_plugins([EP("nbval"), EP("sneaky")]) == ["sneaky = sneaky.plugin (?)"]
    monkeypatch.setenv(world.PLUGINS_ENV, "sneaky")
    assert world.unexpected_plugins([EP("sneaky")]) == []
    (tmp_path / "a" / "subs").mkdir(parents=True)
    (tmp_path / "a" / "subs" / "conftest.py").write_text("")               # inside: listed, not a refusal
    (tmp_path / "conftest.py").write_text("")
    assert world.conftests(tmp_path / "a" / "subs") == [tmp_path / "conftest.py"]


def test_owned_pth_files_read_from_the_record_lines_alone_match_the_full_reading(tmp_path):
    """``owned_files(suffix=".pth")`` (what the grader's start-up checks) parses only the RECORD lines that hold
    ".pth": the same entries as the full reading filtered, for a quoted name, a name that only holds ".pth" and
    entries without a hash or with another hash."""
    from importlib import metadata

    info = tmp_path / "site" / "x-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "RECORD").write_text("x/__init__.py,sha256=aaa,10\nx.pth,sha256=bbb,20\n\"odd, name.pth\",sha256=ccc,5\n"
                                 "x/not.pth.py,sha256=ddd,1\nnohash.pth,,\nmd5.pth,md5=eee,3\n"
                                 "x-1.0.dist-info/RECORD,,\n")
    dist = metadata.PathDistribution(info)
    fast = world.owned_files([dist], suffix=".pth")
    assert fast == {k: v for k, v in world.owned_files([dist]).items() if k.name.endswith(".pth")}
    assert fast == {tmp_path / "site" / "x.pth": "sha256=bbb", tmp_path / "site" / "odd, name.pth": "sha256=ccc"}


def test_grade_mode_refuses_a_planted_conftest_with_its_name_and_the_fix(monkeypatch, tmp_path):
    (tmp_path / "conftest.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(plugin.GRADE_ENV, raising=False)
    with pytest.raises(pytest.UsageError, match=rf"{tmp_path / 'conftest.py'}: a conftest.py .*delete it"):
        plugin.pytest_configure(_Config(infralens_grade=True))


@pytest.mark.parametrize("timeout, budget, spent, limit", [
    (120, None, 1e9, 120), (120, 600, 0, 120), (120, 600, 550, 50), (120, 600, 600, None), (120, 600, 700, None),
])
def test_class_budget_cuts_the_last_run_and_skips_the_rest(timeout, budget, spent, limit):
    assert plugin.run_limit(timeout, budget, spent) == limit


def test_student_pages_one_per_student_escaped_and_replaced(tmp_path):
    rows = [dict(r, notebook=f"{who}/00.ipynb") for who, r in (("alice", _rows()[0]), ("e\u202evil<b>", _rows()[2]))]
    students = {r["notebook"]: r["notebook"].split("/")[0] for r in rows}
    (tmp_path / "feedback").mkdir()
    (tmp_path / "feedback" / "stale.html").write_text("old")
    pages = report.write_student_pages(rows, tmp_path / "feedback", students)
    assert [p.name for p in pages] == sorted(["alice.html", report.page_name("e\u202evil<b>")])
    assert all(p.parent == tmp_path / "feedback" for p in pages) and not (tmp_path / "feedback" / "stale.html").exists()
    evil = (tmp_path / "feedback" / report.page_name("e\u202evil<b>")).read_text()
    assert "<script>x" not in evil and "\u202e" not in evil and "&lt;script&gt;" in evil
    alice = (tmp_path / "feedback" / "alice.html").read_text()
    assert "right (1/1)" in alice and question_sections_of("lab00")["lab00.q1"] in alice
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feedback"]   # no temporary folder left


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_grade_refuses_a_conftest_in_the_grader_folder_before_pytest_starts(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').write('x')\n")
    proc = _make(f"SUBMISSIONS={tmp_path}", f"GRADE_ROOT={root}", "RUN=0")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "holds conftest.py pytest.ini" in out and "delete all but pytest.ini" in out, out
    assert not (tmp_path / "imported").exists()


def test_keys_come_from_the_graders_memory_not_from_files_a_run_can_change(tmp_path, monkeypatch):
    """make grade computes every key before any notebook runs (pytest_collection_finish), from evidence it then
    holds in its own memory: a recorded set moved away afterwards (as a RUN=1 notebook's code could do) changes no
    key. Without that memory the same call finds no evidence, so this test can fail."""
    from infralens_lab.evidence import DATA_ROOT_ENV, data_root
    from infralens_lab.quiz import question

    data = tmp_path / "recorded"
    shutil.copytree(data_root(), data)
    monkeypatch.setenv(DATA_ROOT_ENV, str(data))
    q = question("lab04.ex2")   # DRAM bytes per useful byte of the stride-16 copy, from the recorded ncu run
    fn = question("lab04.ex3")  # a function exercise: its reference on the cases built from the recorded sets
    grader.grader_evidence.cache_clear()
    fx.reference_values.cache_clear()
    try:
        key, right = grader.expected_for_grading(q), fx.reference_values(fn)
        data.rename(tmp_path / "moved")
        assert grader.expected_for_grading(q) == key
        assert [v for _, v in fx.reference_values(fn)] == [v for _, v in right]
        grader.grader_evidence.cache_clear()
        fx.reference_values.cache_clear()
        with pytest.raises(grader.EvidenceUnavailable):
            grader.expected_for_grading(q)
        assert fx.reference_values(fn) is None  # without the memory, the same call finds no recording
    finally:
        grader.grader_evidence.cache_clear()
        fx.reference_values.cache_clear()


class _FakeFile:
    """What GradeSession's run loop needs of a GradeFile."""

    def __init__(self, who):
        self.name_, self.data = f"{who}/00_start_here.ipynb", who.encode()
        self.planted, self.changed, self.victim = [], [], ""

    def flag_victim(self, culprit):
        self.victim = culprit


def _session(tmp_path, jobs, files):
    """A GradeSession with its run state set up by hand over ``tmp_path/subs`` (no pytest config, no kernels)."""
    from infralens_lab.quiz import world
    from infralens_lab.quiz.submissions import FolderState

    subs = tmp_path / "subs"
    for f in files:
        (subs / f.name_).parent.mkdir(parents=True)
        (subs / f.name_).write_text(f"{f.data.decode()}\n")
    s = plugin.GradeSession.__new__(plugin.GradeSession)
    s.jobs, s.timeout, s.budget, s.started, s.outcomes, s.stopped, s.messages = jobs, 30.0, None, None, {}, "", []
    s.submissions, s.files, s.folder_state = str(subs), files, FolderState(subs)
    s.snapshot, s.world_bytes = manifest.Snapshot([]), {}
    s.world = world.state(subs, Path.cwd())
    return s, subs


@pytest.mark.parametrize("plants_again", [True, False])
def test_a_change_found_while_two_ran_is_pinned_by_running_them_again_alone(tmp_path, monkeypatch, plants_again):
    """JOBS=2 (issue 44): b rewrites c's file while a runs beside it; the grader cannot tell which did it, puts the
    file back and runs a and b again one at a time: b is flagged, c is the victim, a is clean, as with JOBS=1. A
    notebook that does it only once (not again when run alone) leaves both flagged."""
    import threading
    import time as _time

    files = [_FakeFile(n) for n in ("a", "b", "c", "d")]
    s, subs = _session(tmp_path, 2, files)
    runs, lock = [], threading.Lock()

    def fake_run(data, limit, env=None):
        who = data.decode()
        with lock:
            runs.append(who)
            first = runs.count(who) == 1
        if who == "b" and (first or plants_again):   # at once, while a runs beside it
            victim = subs / "c" / "00_start_here.ipynb"
            victim.chmod(0o644)
            victim.write_text("all right now\n")
        _time.sleep(0.3)
        return RunOutcome("ok", seconds=0.3)

    monkeypatch.setattr(plugin, "run_notebook", fake_run)
    s._run_all(files)
    assert (subs / "c" / "00_start_here.ipynb").read_text() == "c\n"
    assert set(s.outcomes) == set(files) and all(o.state == "ok" for o in s.outcomes.values())
    assert sorted(runs[:2]) == ["a", "b"] and runs[2:4] == ["a", "b"] and runs.count("c") == 1, runs  # again, alone
    a, b, c, _ = files
    if plants_again:
        assert b.planted == ["c/00_start_here.ipynb (changed)"] and a.planted == [] and c.victim == b.name_
    else:
        assert a.planted == b.planted == ["c/00_start_here.ipynb (changed)"] and c.victim == ""
        assert any("all are flagged" in m for m in s.messages), s.messages


def test_a_large_group_of_duplicates_names_three_and_counts_the_rest():
    """60 copies of one file: each row names three of the others and counts the rest, not 59 paths a row."""
    names = [f"s{i:02d}/04.ipynb" for i in range(60)]
    rows = [{"notebook": n, "feedback": "", "flags": ""} for n in names]
    scores.flag_duplicates(rows, {n: None for n in names}, {n: "same" for n in names})
    first = rows[0]["feedback"]
    assert "s01/04.ipynb, s02/04.ipynb, s03/04.ipynb and 56 more" in first and "s04/04.ipynb" not in first
    assert all(r["flags"] == "duplicate" for r in rows) and len(first) < 200


# the hung notebook's child (hung_run) ran beside every test above: last, so that its wait is spent there
def test_a_hung_notebook_times_out_and_leaves_nothing(hung_run):
    """A cell that never returns, beside a detached process: stopped at the limit, nothing left running
    (the detached process killed before its write is tests/test_grading_hostile.py's attack 4). The detached
    process writes its pid: it was started before the limit (the run got that far) and is gone after."""
    import psutil

    proc, pid_file = hung_run
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-2000:]
    got = json.loads(stdout.strip().splitlines()[-1])
    assert got["state"] == "timed out" and f"ran past the {HUNG_LIMIT_S} s limit" in got["detail"] and got["left"] == []
    assert pid_file.exists(), "the run was stopped before its first cell started the detached process"
    assert not psutil.pid_exists(int(pid_file.read_text())), "the detached process outlived the run"
