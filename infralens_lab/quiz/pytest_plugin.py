"""pytest plugin: grade submitted notebooks; the grader decides every score in its own process.

Loaded through the ``pytest11`` entry point ``infralens_quiz``; it does nothing unless grade mode is on
(``--infralens-grade`` or ``INFRALENS_GRADE=1``), apart from making nbval ignore the answer record
``check`` publishes in a cell's outputs (grading data, not what the cell shows). In grade mode

* before anything runs: the score paths are checked, the grader's own files are checked against
  ``quiz/manifest.json`` (refused when changed), and every submitted ``.ipynb`` is read into memory;
* each notebook gets one item per question of its lab's bank (``path::grade::lab00.q1``), judged by
  :mod:`.grader` from those bytes, and, with ``--infralens-run`` (``make grade``'s ``RUN=1``), one item per
  code cell (``path::Cell 3``) showing whether it ran: the notebook is executed by :mod:`.isolation` in a
  child process, in its own session, in a scratch copy, within ``--infralens-timeout`` seconds, and every
  process it left is killed before the next one starts;
* at the end, once no process of any notebook is left, the rows are written once, atomically:
  ``--infralens-score-csv``, ``--infralens-score-junit`` and the class report (``--infralens-report``,
  by default ``class_report.html`` beside the CSV). Duplicate submissions are flagged there.
"""
from __future__ import annotations

import compileall
import contextlib
import hashlib
import json
import os
import re
import time
from pathlib import Path

import pytest

from ..errors import InfraLensError
from ..evidence import data_root
from ..quick_nbformat import skip_iri_grammar
from . import world
from .bank import BANKS_ENV, BankError, banks_dirs, load_bank
from .check import GRADE_ENV
from .functions import reference_values
from .grader import (
    MAX_NOTEBOOK_BYTES,
    EvidenceUnavailable,
    NotebookError,
    expected_for_grading,
    fingerprint,
    grade_notebook,
    read_notebook,
    unreadable_rows,
)
from .isolation import RunOutcome, kill_descendants, run_notebook
from .manifest import PACKAGE_DIR, ManifestError, Snapshot, put_back, verify
from .report import write_report, write_student_pages
from .scores import (  # the plugin's summary and CSV (tests use these names)
    add_flag,
    clip_row,
    flag_duplicates,
    flag_second_notebooks,
    move_into_place,
    summary_lines,
    write_csv,
    write_junit,
)
from .submissions import FolderState, read_only, read_regular, scan

SCORE_ENV = "INFRALENS_SCORE_FILE"  # where a graded run writes its scores
ON, OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")
# a check in a notebook cell: check("lab01.q2", ...), quiz.check(...), lab01.check_on("lab01.q3", ...)
CHECK_RE = re.compile(r"""(?<![\w.])(?:\w+\.)*check(?:_on)?\(\s*["'](lab\d{2}\.[a-z0-9_]+)["']""")
COLUMNS = ("notebook", "lab", "question", "status", "points", "max_points", "feedback", "answer", "flags")
ANSWER_MIME = "application/vnd.infralens.answer+json"  # quiz.check.ANSWER_MIME (a test holds them equal)
DEFAULT_TIMEOUT_S = 120
REPORT_NAME = "class_report.html"
FEEDBACK_NAME = "feedback"        # one page per student, in this folder beside the class report


def pytest_addoption(parser):
    group = parser.getgroup("infralens", "InfraLens Lab grading")
    group.addoption("--infralens-grade", action="store_true", default=False,
                    help="grade mode: one item per bank question per notebook, judged by the grader; "
                         "print a score summary")
    group.addoption("--infralens-submissions", default=None, metavar="FOLDER",
                    help="grade mode: the folder of submitted notebooks (make grade's SUBMISSIONS). The plugin walks "
                         "it itself, links not followed: pytest is pointed at the grader's own folder, so no "
                         "conftest.py or test file in it is ever imported")
    group.addoption("--infralens-run", action="store_true", default=False,
                    help="grade mode: also execute each notebook, isolated (own process, session and scratch "
                         "copy, a timeout; whatever it leaves running is killed)")
    group.addoption("--infralens-timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                    help=f"grade mode, --infralens-run: seconds one notebook may run (default {DEFAULT_TIMEOUT_S})")
    group.addoption("--infralens-jobs", type=int, default=None, metavar="N",
                    help="grade mode, --infralens-run: notebooks run at once, each isolated as alone (default: the "
                         "number of CPU cores this process may use, or 1 if unknown)")
    group.addoption("--infralens-budget", type=float, default=None, metavar="SECONDS",
                    help="grade mode, --infralens-run: seconds all runs together may take; a notebook whose turn "
                         "comes after that is not run ('not run: budget') and is scored from its file")
    group.addoption("--infralens-score-csv", default=None, metavar="PATH",
                    help="grade mode: also write the score rows as CSV")
    group.addoption("--infralens-score-junit", default=None, metavar="PATH",
                    help="grade mode: also write the score rows as JUnit XML (one testcase per question)")
    group.addoption("--infralens-report", default=None, metavar="PATH",
                    help=f"grade mode: the class report (default: {REPORT_NAME} beside the score CSV)")


def env_grade() -> bool:
    """``$INFRALENS_GRADE`` read strictly: on, off (or unset), else a UsageError naming the value."""
    raw = os.environ.get(GRADE_ENV, "")
    value = raw.strip().lower()
    if value in ON or value in OFF:
        return value in ON
    raise pytest.UsageError(f"{GRADE_ENV}={raw!r} is neither on ({', '.join(ON)}) nor off "
                            f"({', '.join(v for v in OFF if v)}, or unset); set it to one of those")


def output_problem(path: str | os.PathLike) -> str:
    """Why the grader cannot own an output file at ``path`` ("" when it can): something there that is not a
    plain file (a folder, a FIFO, a link), a missing folder, or a folder it cannot write to. Never opens
    ``path`` (opening a FIFO would block)."""
    import stat

    p = Path(path)
    try:
        st = p.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return exc.strerror or str(exc)
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = ("a folder" if stat.S_ISDIR(st.st_mode) else "a symbolic link" if stat.S_ISLNK(st.st_mode)
                else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "not a regular file")
        return f"it is {what}, not a plain file"
    parent = p.parent
    if not parent.is_dir():
        return f"its folder {str(parent)!r} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"its folder {str(parent)!r} is not writable"
    return ""


def check_writable(path: str | os.PathLike, option: str) -> None:
    """UsageError (before any notebook runs) when the grader cannot write its output at ``path``."""
    why = output_problem(path)
    if why:
        raise pytest.UsageError(
            f"{option} {str(path)!r}: cannot write the score file there ({why}); expected a plain file path in a "
            "folder you can write to (with make grade: SCORES=path/scores.csv)")


def default_jobs() -> int:
    """Notebooks to run at once by default: the CPU cores this process may use, or 1 if unknown; 1 on a GPU
    machine, where notebooks that time kernels live would share the GPU and time each other (JOBS=N overrides)."""
    from ..device import mode

    if mode() == "gpu":
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def run_limit(timeout: float, budget: float | None, spent: float) -> float | None:
    """Seconds the next notebook may run: its own ``timeout``, cut to what is left of the class's ``budget``
    after ``spent`` seconds of runs; None when nothing is left (the notebook is not run)."""
    if budget is None:
        return timeout
    left = budget - spent
    return min(timeout, left) if left > 0 else None


def report_path(config) -> str | None:
    explicit, csv_path = config.getoption("infralens_report", None), config.getoption("infralens_score_csv")
    return explicit or (str(Path(csv_path).with_name(REPORT_NAME)) if csv_path else None)


def pytest_configure(config):
    on = config.getoption("infralens_grade") or env_grade()
    csv_path, junit_path = config.getoption("infralens_score_csv"), config.getoption("infralens_score_junit")
    if (csv_path or junit_path or config.getoption("infralens_run", False)) and not on:
        raise pytest.UsageError("--infralens-score-csv/--infralens-score-junit/--infralens-run need "
                                "--infralens-grade (or INFRALENS_GRADE=1)")
    if not on:
        return
    skip_iri_grammar()   # before the grader first reads a notebook (nbformat)
    if config.getoption("nbval", False) or config.getoption("nbval_lax", False):
        raise pytest.UsageError("grade mode executes the notebooks itself, each isolated in its own process "
                                "(--infralens-run, make grade's RUN=1): drop --nbval/--nbval-lax")
    for path, option in ((csv_path, "--infralens-score-csv"), (junit_path, "--infralens-score-junit"),
                         (report_path(config), "--infralens-report")):
        if path:
            check_writable(path, option)
    subs = config.getoption("infralens_submissions", None)
    if subs is not None and (Path(subs).is_symlink() or not Path(subs).is_dir()):
        raise pytest.UsageError(f"--infralens-submissions {subs!r}: not a folder (a link is not followed); expected "
                                "the folder of submitted notebooks (with make grade: SUBMISSIONS=path/)")
    refusals = []
    try:
        verify()
        banks_dirs()
    except (ManifestError, BankError) as exc:
        refusals.append(str(exc))
    found = world.problems(Path(subs) if subs else None, Path.cwd())
    if found:
        refusals.append("refusing to grade: the grader's process could load code it does not own: "
                        + "; ".join(found) + ".")
    if refusals:
        raise pytest.UsageError("\n".join(refusals))
    config.pluginmanager.register(GradeSession(config), "infralens-grade-session")


# ---------------------------------------------------------------- nbval (any run)
def _without_answer_records(outputs):
    return [o for o in outputs if not (isinstance(o, dict) and isinstance(o.get("data"), dict)
                                       and ANSWER_MIME in o["data"])]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """nbval compares a cell's outputs without the answer record ``check`` publishes (grading data, not
    what a cell shows), so notebooks committed before or after checks recorded values both compare."""
    for item in items:
        compare = getattr(item, "compare_outputs", None)
        if type(item).__name__ == "IPyNbCell" and callable(compare):
            item.compare_outputs = (lambda cmp: lambda test, ref, skip_compare=None: cmp(
                _without_answer_records(test), _without_answer_records(ref), skip_compare))(compare)


def notebook_name(config, path: Path) -> str:
    """How rows name a submitted path: relative to the submissions folder where possible."""
    subs = config.getoption("infralens_submissions", None)
    try:
        return Path(path).relative_to(Path(subs)).as_posix() if subs else str(path)
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- items
class GradeFailure(InfraLensError):
    """A question that did not earn its points, or a cell that did not run."""


class GradeItem(pytest.Item):
    """One (notebook, question): its row is decided by the grader (after the notebook ran, with RUN=1)."""

    def __init__(self, *, qid: str, **kw):
        super().__init__(**kw)
        self.qid = qid
        self.row: dict = {}

    def runtest(self):
        self.row = self.parent.row(self.qid)
        self.session.config.pluginmanager.get_plugin("infralens-grade-session").record(self.row)
        if self.row["status"] != "correct":
            raise GradeFailure(f"{self.row['status']}: {self.row['feedback']}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GradeFailure):
            r = self.row
            return f"{r['notebook']} {r['question'] or '(notebook)'}: {r['points']:g}/{r['max_points']:g}, {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.parent.name_}::grade::{self.qid or 'notebook'}"  # path: the grader's folder


class CellItem(pytest.Item):
    """One code cell of an executed notebook: passes when it ran without an error (nbval's lax mode)."""

    def __init__(self, *, cell: int, **kw):
        super().__init__(**kw)
        self.cell = cell

    def runtest(self):
        outcome = self.parent.outcome()
        got = outcome.cells.get(self.cell)
        if got is None:
            raise GradeFailure(f"not run: {outcome.detail or 'the run ended before this cell'}")
        if got["state"] != "ok":
            raise GradeFailure(got["error"] or "the cell raised an error")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GradeFailure):
            return f"{self.parent.name_} code cell {self.cell}: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.parent.name_}::Cell {self.cell}"


class Submissions(pytest.Directory):
    """The submissions folder, walked by the grader (links not followed): one :class:`GradeFile` per notebook;
    every other path becomes a row saying why it is not graded. Every node's ``path`` is the grader's own
    folder, never a submitted path, so pytest looks for no conftest.py among the submissions."""

    def collect(self):
        plugin = self.config.pluginmanager.get_plugin("infralens-grade-session")
        folder = Path(plugin.submissions)
        if plugin.run:
            plugin.folder_state = FolderState(folder)   # before anything runs: compared after each run
        for entry in scan(folder):
            if not entry.graded:
                plugin.listed.append(dict(notebook=entry.rel, lab="", question="", status="not graded", points=0,
                                          max_points=0, feedback=entry.reason, answer="", flags="not graded"))
                continue
            yield GradeFile.from_parent(self, path=self.path, nodeid=f"{entry.rel}::grade", sub_path=entry.path)


class GradeFile(pytest.File):
    """One submitted notebook: its bytes (read at collection, before any notebook runs) and its rows."""

    def __init__(self, *, sub_path: Path, **kw):
        super().__init__(**kw)
        self.sub_path = Path(sub_path)

    def collect(self):
        plugin = self.config.pluginmanager.get_plugin("infralens-grade-session")
        self.plugin, self.name_ = plugin, notebook_name(self.config, self.sub_path)
        self._outcome, self._rows, self.changed, self.planted, self.victim = None, None, [], [], ""
        self.data = read_regular(self.sub_path, MAX_NOTEBOOK_BYTES)   # no link followed, no FIFO waited on
        self.sha = hashlib.sha256(self.data).hexdigest() if self.data is not None else None
        try:
            nb = read_notebook(self.sub_path, self.data) if self.data is not None else None
        except NotebookError:
            nb = None
        try:
            self.fingerprint = fingerprint(nb) if nb is not None else None
        except Exception:  # a notebook the grader cannot fingerprint is just not compared
            self.fingerprint = None
        self.readable = nb is not None
        static = self._grade(None)
        self.lab = static[0].lab if static else ""
        plugin.files.append(self)
        if plugin.run and self.readable:
            for k in range(sum(1 for c in nb.cells if c.get("cell_type") == "code")):
                yield CellItem.from_parent(self, name=f"Cell {k}", cell=k)
        for row in static:
            yield GradeItem.from_parent(self, name=row.question or "notebook", qid=row.question)

    def outcome(self):
        if self._outcome is None:
            self._outcome = self.plugin.execute(self)
        return self._outcome

    def _grade(self, run):
        if self.data is None:
            return unreadable_rows(self.sub_path, self.name_, f"{self.sub_path.name!r} could not be read as a regular "
                                   f"file of at most {MAX_NOTEBOOK_BYTES:,} bytes; expected an .ipynb saved by Jupyter")
        return grade_notebook(self.sub_path, self.name_, data=self.data, run=run)

    def row(self, qid: str) -> dict:
        if self._rows is None:
            run = self.outcome() if (self.plugin.run and self.readable) else None
            rows = [r.as_dict() for r in self._grade(run)]
            if self.planted:
                for r in rows:
                    add_flag(r, "changed submissions", "While it ran, the submissions folder changed: "
                             f"{', '.join(self.planted[:5])}. Every notebook is graded from the copy taken before "
                             "any ran, and the grader put the folder back as it was.")
            if self.changed:
                for r in rows:
                    add_flag(r, "changed grader files", "While it ran, the grader's own files changed: "
                             f"{', '.join(self.changed[:5])}. Its score is unaffected (the grader's code and "
                             "answer keys were loaded before any notebook ran).")
            self._rows = {r["question"]: r for r in rows}
        return self._rows[qid]

    def flag_victim(self, culprit: str) -> None:
        """This notebook's file was changed by ``culprit``'s run: say so in its rows (graded from the copy)."""
        self.victim = culprit


class GradeSession:
    """State of one grading run: the submissions, the runs, and the rows the grade items decided."""

    def __init__(self, config):
        self.config = config
        self.saved_env = {k: os.environ.get(k) for k in (GRADE_ENV, SCORE_ENV)}
        os.environ[GRADE_ENV] = "1"       # checks in the kernels print and fail cells, as learners see them
        os.environ.pop(SCORE_ENV, None)   # and the kernels get no score file: only this process writes one
        self.saved_env[BANKS_ENV] = os.environ.get(BANKS_ENV)
        extra = [str(d.resolve()) for d in banks_dirs()[:-1]]   # kernels run elsewhere: absolute paths
        if extra:
            os.environ[BANKS_ENV] = os.pathsep.join(extra)
        self.run = bool(config.getoption("infralens_run", False))
        self.timeout = float(config.getoption("infralens_timeout", DEFAULT_TIMEOUT_S))
        if self.run and not self.timeout > 0:
            raise pytest.UsageError(f"--infralens-timeout {self.timeout:g}: expected a positive number of seconds")
        self.budget = config.getoption("infralens_budget", None)
        if self.budget is not None and not self.budget > 0:
            raise pytest.UsageError(f"--infralens-budget {self.budget:g}: expected a positive number of seconds")
        jobs = config.getoption("infralens_jobs", None)
        self.jobs = 1 if not self.run else default_jobs() if jobs is None else jobs
        if self.run and self.jobs < 1:
            raise pytest.UsageError(f"--infralens-jobs {self.jobs}: expected a whole number of notebooks at least 1 "
                                    "(with make grade: JOBS=N)")
        self.started = None      # time.monotonic() when the first run began: BUDGET counts wall time from there
        self.outcomes = None     # GradeFile -> RunOutcome, once every notebook has run
        self.submissions = config.getoption("infralens_submissions", None)
        self.files: list[GradeFile] = []
        self.rows: list[dict] = []
        self.listed: list[dict] = []     # rows of paths that are not graded (not a notebook, a link, ...)
        self.folder_state = None
        self.collected = False
        self.messages: list[str] = []
        self.stopped = ""   # why no notebook runs any more (the grader's files changed during a run)
        self.snapshot = None
        if self.run:
            self._prepare_runs()

    def _prepare_runs(self) -> None:
        from . import isolation, runner  # noqa: F401 - loaded (and compiled) before any notebook runs

        if not isolation.become_subreaper():
            self.messages.append("note: not Linux, so the grader cannot adopt processes a notebook detaches; "
                                 "only each run's process group is killed. Grade untrusted work in a container.")
        compileall.compile_dir(str(PACKAGE_DIR), quiet=2)  # every .pyc exists now: a new or changed one is not ours
        try:
            data = [data_root()]
        except Exception:  # no recorded data in this install: nothing there to watch
            data = []
        self.snapshot = Snapshot([PACKAGE_DIR, *banks_dirs(), *data])
        self.world_bytes: dict = {}
        self.world0 = self.world = world.state(Path(self.submissions) if self.submissions else None, Path.cwd(),
                                               keep=self.world_bytes)

    # ------------------------------------------------------------ hooks
    @pytest.hookimpl(tryfirst=True)
    def pytest_collect_directory(self, path, parent):
        """The one folder pytest is given (make grade: the grader's own) stands for the submissions folder."""
        if not self.submissions:
            raise pytest.UsageError("grade mode grades the folder named by --infralens-submissions (make grade "
                                    "passes SUBMISSIONS= there); pytest's own path arguments are not graded, since "
                                    "pytest would import a conftest.py or test file found beside the notebooks")
        if self.collected:
            return Empty.from_parent(parent, path=path)
        self.collected = True
        return Submissions.from_parent(parent, path=path)

    def pytest_collect_file(self, file_path, parent):
        return None

    def pytest_collection_finish(self, session):
        if not self.files:
            where = self.submissions
            raise pytest.UsageError(f"no .ipynb files found under {where}: expected a folder of submitted "
                                    "notebooks (one sub-folder per learner works well); no scores written")
        for lab in sorted({f.lab for f in self.files if f.lab}):
            try:
                bank = load_bank(lab)
            except BankError:
                continue
            for q in bank.values():  # every answer key is computed before any notebook runs
                with contextlib.suppress(EvidenceUnavailable):
                    expected_for_grading(q)
                if q.kind == "function":  # a function's right values on its cases, held in memory from now on
                    with contextlib.suppress(Exception):  # a failure is said in the question's own row
                        reference_values(q)

    def execute(self, gf: GradeFile):
        """``gf``'s run: every notebook is run (JOBS at a time) the first time one is asked for."""
        if self.outcomes is None:
            self.outcomes = {}
            self._run_all([f for f in self.files if f.readable])
        return self.outcomes[gf]

    def _limit(self) -> float | None:
        if self.started is None:
            self.started = time.monotonic()
        return run_limit(self.timeout, self.budget, time.monotonic() - self.started)

    def _run_all(self, order: list[GradeFile]) -> None:
        """Run ``order``'s notebooks; rows and flags come out as with JOBS=1 (one at a time, in order). Up to
        JOBS run at once, and after each the grader looks for changes (the submissions, its own files, what it
        loads). A change found while several ran cannot be pinned on one: the grader lets the others finish, puts
        everything back, and runs those notebooks again one at a time, in order, checking after each."""
        i = 0
        while i < len(order):
            if self.stopped:
                self.outcomes[order[i]] = RunOutcome("not run", self.stopped)
                i += 1
            elif self.jobs == 1:
                self.outcomes[order[i]] = self._run_checked(order[i])
                i += 1
            else:
                i, suspects = self._run_side_by_side(order, i)
                for gf in suspects:
                    self.outcomes[gf] = (RunOutcome("not run", self.stopped) if self.stopped
                                         else self._run_checked(gf))
                if suspects and not any(gf.planted or gf.changed for gf in suspects):
                    self._unpinned()
        stop = next((k for k, f in enumerate(order) if f.changed), None)
        for gf in order[stop + 1:] if stop is not None else []:  # after the one that changed the grader's files
            if self.outcomes[gf].state != "not run":
                self.outcomes[gf] = RunOutcome("not run", self.stopped)

    def _isolated(self, gf: GradeFile, limit: float | None) -> RunOutcome:
        if limit is None:
            return RunOutcome("not run: budget", f"not run: the class's time budget of {self.budget:g} s was spent "
                              "before this notebook's turn")
        return run_notebook(gf.data, limit, env=dict(os.environ))

    def _found(self) -> tuple[list, list, list, dict]:
        """What changed since the last clean look: (the submissions, the grader's files, what the grader loads
        (``quiz.world``), the world's state now)."""
        now = world.state(Path(self.submissions), Path.cwd())
        own = self.snapshot.changes() if self.snapshot is not None else []
        return self.folder_state.changes(), own, world.changes(self.world, now), now

    def _run_checked(self, gf: GradeFile) -> RunOutcome:
        """Run ``gf`` alone, then name what its run changed (as JOBS=1 does for every notebook)."""
        with read_only(self.folder_state):
            outcome = self._isolated(gf, self._limit())
        self._leftover(gf, outcome)
        self._put_back(gf)
        _, own, loads, self.world = self._found()
        changed = own + loads
        if changed:
            gf.changed = changed
            self.stopped = (f"not run: {gf.name_}'s run changed the grader's own files, so no notebook runs after "
                            "it; exercises are read from the saved outputs")
            self.messages.append(f"WARNING: while {gf.name_} ran, these files changed: {', '.join(changed[:10])}. "
                                 "Scores are unaffected (computed with what was loaded before any notebook ran), "
                                 "but restore them (git checkout -- <file>) before grading again: make grade "
                                 "will refuse until then.")
        return outcome

    def _run_side_by_side(self, order: list[GradeFile], i: int) -> tuple[int, list[GradeFile]]:
        """Run ``order[i:]`` JOBS at a time until done or until a change is found; returns where to go on and the
        notebooks to run again one at a time (those running since the last clean look, in order)."""
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        active, window, found = {}, set(), False
        with ThreadPoolExecutor(max_workers=self.jobs) as pool, read_only(self.folder_state):
            while active or (i < len(order) and not found):
                while not found and len(active) < self.jobs and i < len(order):
                    gf, i = order[i], i + 1
                    active[pool.submit(self._isolated, gf, self._limit())] = gf
                    window.add(gf)
                done, _ = wait(active, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: order.index(active[f])):
                    gf, outcome = active.pop(fut), fut.result()
                    self._leftover(gf, outcome)
                    if found:
                        continue
                    subs, own, loads, now = self._found()
                    if subs or own or loads:
                        found = True
                        continue
                    self.outcomes[gf], self.world = outcome, now
                    window = set(active.values())
        if not found:
            return i, []
        suspects = sorted(window, key=order.index)
        subs, own, loads, _ = self._found()   # all of it, made before or after the first look found something
        failed = self.folder_state.restore(subs) + self.snapshot.restore(own) + put_back(self.world_bytes, loads)
        self.world = world.state(Path(self.submissions), Path.cwd())
        self.unpinned = (suspects, [f"{rel} ({how})" for rel, how in subs], own + loads)
        self.messages.append(f"note: while {', '.join(f.name_ for f in suspects)} ran side by side, "
                             f"{', '.join(([f'{r} ({h})' for r, h in subs] + own + loads)[:10])} changed; the grader "
                             + ("could not put back all: " + "; ".join(failed) if failed else "put it back")
                             + " and ran them again one at a time, to tell which did it")
        return i, suspects

    def _unpinned(self) -> None:
        """Run again alone, none of the suspects changed anything: flag them all (the instructor judges)."""
        suspects, subs, grader = self.unpinned
        for gf in suspects:
            gf.planted, gf.changed = list(subs), list(grader)
        if grader:
            self.stopped = (f"not run: the grader's own files changed while {', '.join(f.name_ for f in suspects)} "
                            "ran side by side, so no notebook runs after them; exercises are read from the saved outputs")
        self.messages.append(f"WARNING: run again one at a time, none of {', '.join(f.name_ for f in suspects)} "
                             "changed anything: all are flagged (run them with JOBS=1 to see which does it)")

    def _leftover(self, gf: GradeFile, outcome: RunOutcome) -> None:
        if outcome.leftover:
            self.messages.append(f"ERROR: processes {outcome.leftover} left by {gf.name_} would not die")

    def _put_back(self, gf: GradeFile) -> None:
        """Compare the submissions folder with the state taken before any run; name what ``gf``'s run changed,
        flag the notebooks whose files it changed, and put everything back."""
        found = self.folder_state.changes()
        if not found:
            return
        failed = self.folder_state.restore(found)
        gf.planted = [f"{rel} ({what})" for rel, what in found]
        by_name = {f.name_: f for f in self.files}
        for rel, _ in found:
            if rel in by_name and by_name[rel] is not gf:
                by_name[rel].flag_victim(gf.name_)
        self.messages.append(f"WARNING: while {gf.name_} ran, the submissions folder changed: "
                             f"{', '.join(gf.planted[:10])}. Every notebook was graded from the copy taken before "
                             "any ran; " + ("; ".join(failed) if failed else "the grader put the folder back as it was."))

    def record(self, row: dict) -> None:
        self.rows.append(clip_row(row))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session):
        if self.run:
            left = kill_descendants()
            if left:
                self.messages.append(f"ERROR: processes {left} started by the notebooks would not die; "
                                     "no score file written")
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
                return
        if not self.rows and not self.listed:
            return
        seen = {r["notebook"] for r in self.rows}
        files = [f for f in self.files if f.name_ in seen]
        flag_duplicates(self.rows, {f.name_: f.fingerprint for f in files}, {f.name_: f.sha for f in files})
        students = {f.name_: student_of(f.name_) for f in files}
        flag_second_notebooks(self.rows, students)
        for f in files:
            for r in (r for r in self.rows if f.victim and r["notebook"] == f.name_):
                add_flag(r, "changed during grading", f"{f.victim}'s run changed this file; it was graded from the "
                         "copy taken before any notebook ran, and put back.")
        self.rows = [clip_row(r) for r in self.listed] + self.rows
        students.update({r["notebook"]: student_of(r["notebook"]) for r in self.listed})
        submitted = {}
        for f in files:
            if f.readable and f.lab and f.lab not in submitted:
                with contextlib.suppress(ValueError):
                    submitted[f.lab] = json.loads(f.data)
        report = report_path(self.config)
        if report:
            pages = Path(report).with_name(FEEDBACK_NAME)
            try:
                write_student_pages(self.rows, pages, students)
                self.messages.append(f"per-student feedback pages written to {pages}/")
            except OSError as exc:
                self.messages.append(f"ERROR: feedback pages could not be written to {pages}: {exc}")
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        outputs = ((self.config.getoption("infralens_score_csv"), write_csv, "score rows"),
                   (self.config.getoption("infralens_score_junit"), write_junit, "score JUnit XML"),
                   (report_path(self.config), lambda rows, p: write_report(rows, p, students, submitted), "class report"))
        for path, write, what in outputs:
            if path:
                try:
                    moved = move_into_place(lambda p, w=write: w(self.rows, p), path)
                    if moved:
                        self.messages.append(f"WARNING: {path} had become {moved[1]} while notebooks ran; it was "
                                             f"moved aside to {moved[0]}")
                    self.messages.append(f"{what} written to {path}")
                except OSError as exc:
                    self.messages.append(f"ERROR: {what} could not be written to {path}: {exc}")
                    session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.write_sep("=", "InfraLens grade summary")
        for line in [*summary_lines(self.rows), *self.messages]:
            tr.write_line(line)

    def pytest_unconfigure(self, config):
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def student_of(name: str) -> str:
    """Who handed a notebook in, from its name relative to the submissions folder: its first folder, else the
    file's name."""
    parts = Path(name).parts
    return parts[0] if len(parts) > 1 else Path(name).stem


class Empty(pytest.Directory):
    """Any other folder pytest offers in grade mode: nothing in it is collected."""

    def collect(self):
        return []
