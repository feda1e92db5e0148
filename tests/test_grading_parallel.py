"""A class graded in parallel (issue 44): ``make grade JOBS=2`` gives the rows of ``JOBS=1``, and its runs overlap.

Four light lab 00 notebooks (answer cells only, built with tests/hostile_class.py): one that hangs, one right, one
wrong, one that kills its parent process. Each notebook's first code cell writes the wall-clock time it started
into a stamp folder outside the submissions, so the test sees which runs overlapped. Graded once with ``JOBS=2`` and
once with ``JOBS=1`` (the two runs at the same time, each on its own copy of the folder): the score files are the
same, row for row; with ``JOBS=2`` the others ran while the hung one waited for its ``TIMEOUT``. The hostile class
(tests/test_grading_hostile.py) is graded with ``JOBS=2`` too.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import make_grade_command

nbformat = pytest.importorskip("nbformat", reason="needs the Jupyter test stack (make test installs it)")
import hostile_class  # noqa: E402  (after the nbformat importorskip: it builds notebooks)

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 6   # the hung notebook's whole cost per run; the others start a kernel and run a few cells in 1-2 s


def _stamped(nb, stamps: Path, who: str):
    """``nb`` with a first code cell that writes the time it ran to ``stamps/who``."""
    cell = nbformat.v4.new_code_cell(f"import time\nopen({str(stamps / who)!r}, 'w').write(repr(time.time()))")
    first = next(k for k, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first, cell)
    return nb


def _class(subs: Path, stamps: Path) -> None:
    right = hostile_class.right_answers()
    wrong_q1 = "'A'" if right["ANSWER_Q1"] != "'A'" else "'B'"
    notebooks = {
        "amy": hostile_class.after(hostile_class.template(slim=True), "ANSWER_Q1", "import time\ntime.sleep(600)"),
        "bob": hostile_class.answer(hostile_class.template(slim=True), "ANSWER_Q1", wrong_q1),
        "cid": hostile_class.template(slim=True),
        "eve": hostile_class.after(hostile_class.template(slim=True), "ANSWER_Q1",
                                   "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
    }
    for var, src in right.items():
        hostile_class.answer(notebooks["cid"], var, src)
    hostile_class.answer(notebooks["eve"], "ANSWER_Q1", right["ANSWER_Q1"])
    for who, nb in notebooks.items():
        (subs / who).mkdir(parents=True)
        nbformat.write(_stamped(nb, stamps, who), subs / who / "00_start_here.ipynb")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded with ``JOBS=2`` and with ``JOBS=1``, the two ``make grade`` runs at the same time (each waits
    out the hung notebook's TIMEOUT_S: side by side, the pair takes one wait, not two), each on its own copy of the
    folder (rows name notebooks relative to it: the same names) stamping into its own folder."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    tmp = tmp_path_factory.mktemp("parallel")
    banks = tmp / "banks"
    banks.mkdir()
    (banks / "lab00.json").write_text(__import__("json").dumps(hostile_class._bank()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFRALENS_")}
    env.update(PYTHONPATH=str(ROOT), INFRALENS_QUIZ_BANKS=str(banks))
    out, procs = {}, {}
    for jobs in (2, 1):
        subs, stamps, scores = tmp / f"class{jobs}", tmp / f"stamps{jobs}", tmp / f"scores{jobs}.csv"
        stamps.mkdir()
        _class(subs, stamps)
        cmd = make_grade_command(f"SUBMISSIONS={subs}", f"SCORES={scores}", f"TIMEOUT={TIMEOUT_S}", f"JOBS={jobs}")
        procs[jobs] = (subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True), time.monotonic(), stamps, scores)
    for jobs, (proc, start, stamps, scores) in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        out[jobs] = dict(proc=done, seconds=time.monotonic() - start, stamps=stamps,
                         rows=list(csv.DictReader(scores.open())) if scores.exists() else [])
    return out


def test_jobs_2_gives_the_rows_of_jobs_1(graded):
    for jobs in (2, 1):
        proc = graded[jobs]["proc"]
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    two, one = graded[2]["rows"], graded[1]["rows"]
    assert len(two) == 4 * 5 and two == one, [(a, b) for a, b in zip(two, one, strict=False) if a != b][:3]
    by = {(Path(r["notebook"]).parts[0], r["question"]): r for r in two}
    assert by[("amy", "lab00.q1")]["flags"] == "timed out" and f"{TIMEOUT_S} s limit" in by[("amy", "lab00.q1")]["feedback"]
    assert by[("eve", "lab00.q1")]["flags"] == "runner killed" and by[("eve", "lab00.q1")]["status"] == "correct"
    assert [by[("cid", q)]["status"] for q in ("lab00.q1", "lab00.q2", "lab00.q3")] == ["correct"] * 3
    assert by[("bob", "lab00.q1")]["status"] == "wrong" and by[("bob", "lab00.q1")]["flags"] == ""


def test_jobs_2_ran_the_others_while_the_hung_one_waited(graded):
    def started(jobs):
        return {p.name: float(p.read_text()) for p in graded[jobs]["stamps"].iterdir()}

    two, one = started(2), started(1)
    assert set(two) == set(one) == {"amy", "bob", "cid", "eve"}, (two, one)
    # amy hangs until her TIMEOUT_S (counted from her runner's start, a kernel start before her first cell): with
    # JOBS=2 bob starts beside her and cid after bob, while she waits; with JOBS=1, bob after her limit
    assert abs(two["bob"] - two["amy"]) < TIMEOUT_S / 2 and two["amy"] < two["cid"] < two["amy"] + TIMEOUT_S, two
    assert one["amy"] + TIMEOUT_S / 2 < one["bob"] < one["cid"] < one["eve"], one
