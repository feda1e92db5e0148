"""Running one submitted notebook away from the grader, and leaving nothing of it behind.

The grader (the ``make grade`` pytest process) is the parent of every run and, on Linux, a *child
subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): a process a notebook starts and abandons, detached with
``start_new_session=True`` or double-forked, is re-parented to the grader, not to init, so the grader can
find it. Per notebook, :func:`run_notebook`

1. writes the submission's bytes (read before anything ran) into a fresh scratch folder;
2. starts :mod:`.runner` there (as a script), in its own session and process group; the runner starts the kernel, so the
   kernel's parent is the runner and ``os.kill(os.getppid(), SIGKILL)`` in a cell kills the runner, never
   the grader. The runner is a child subreaper too, so what the kernel abandons is re-parented to the
   runner, inside this run's process tree, while the runner lives;
3. waits at most ``timeout`` seconds; then kills the runner's group, and
4. :func:`kill_descendants`: finds every process below the grader in ``/proc`` (detached ones included,
   since they were re-parented here) and SIGKILLs them until none is left, reaping each, sparing only the
   process trees of the runners of other notebooks still running (``make grade JOBS=N`` runs up to N at
   once, one thread each): a process outside every live runner's tree belongs to a run that is over.

What it does not stop: code running as your user can signal or rewrite anything your user can reach (it
can look the grader up in ``/proc``); only another user or a container isolates that (docs/instructors.md).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .runner import become_subreaper  # noqa: F401 - the grader and tests call it from here

RUNNER = Path(__file__).with_name("runner.py")   # run as a script: see its module doc
MAX_RESULTS_BYTES = 20 * 1024 * 1024
STATES = ("ok", "timed out", "kernel died", "runner killed", "runner failed", "not run", "not run: budget")
# runners of the notebooks running now (JOBS > 1): started and swept for leftovers under one lock, so that a sweep
# never sees a runner that is being started (a fork not yet registered) or kills a tree that is still running
_RUNNERS: set[int] = set()
_RUNNERS_LOCK = threading.Lock()


def _proc_table() -> dict[int, tuple[int, str]]:
    """``{pid: (ppid, state)}`` from ``/proc/*/stat`` (the name field may hold spaces and parentheses)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        rest = stat[stat.rfind(b")") + 2:].split()
        if len(rest) >= 2:
            table[int(entry.name)] = (int(rest[1]), rest[0].decode(errors="replace"))
    return table


def descendants(root: int | None = None, spare: frozenset[int] | set[int] = frozenset()) -> list[tuple[int, int, str]]:
    """Every process below ``root`` (default: this one) but the trees rooted at ``spare``: ``(pid, ppid,
    state)``, parents first."""
    root = os.getpid() if root is None else root
    table = _proc_table()
    children = defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    out, todo = [], [p for p in children.get(root, []) if p not in spare]
    while todo:
        pid = todo.pop(0)
        out.append((pid, *table[pid]))
        todo += [p for p in children.get(pid, []) if p not in spare]
    return out


def kill_descendants(rounds: int = 200, pause_s: float = 0.01, spare: frozenset[int] | set[int] = frozenset()) -> list[int]:
    """SIGKILL every descendant of this process but the trees rooted at ``spare`` (runners still running), and
    reap the ones re-parented here, until none is left.

    Returns the pids still there after ``rounds`` tries (empty when all are gone). Needs Linux's /proc.
    """
    if not Path("/proc").is_dir():
        return []
    me = os.getpid()
    left: list[int] = []
    for _ in range(rounds):
        procs = descendants(me, spare)
        if not procs:
            return []
        for pid, ppid, state in procs:
            if state != "Z":
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if ppid == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        left = [pid for pid, _, _ in procs]
        time.sleep(pause_s)
    return left


@dataclass
class RunOutcome:
    """What running one notebook gave: how it ended, each cell's state, and the answer payloads per cell."""

    state: str                                   # one of STATES
    detail: str = ""                             # a sentence for the rows when state is not "ok"
    cells: dict[int, dict] = field(default_factory=dict)     # code cell -> {"state", "error"}
    records: dict[int, list] = field(default_factory=dict)   # code cell -> answer payloads it published
    seconds: float = 0.0
    leftover: list[int] = field(default_factory=list)        # pids that would not die (never expected)
    started: float = 0.0                                     # wall clock (time.time()) at the runner's start
    ended: float = 0.0                                       # and once its leftovers were killed

    @property
    def finished_cells(self) -> set[int]:
        return {c for c, v in self.cells.items() if v.get("state") in ("ok", "error")}


def _read_events(path: Path) -> list[dict]:
    try:
        with Path(path).open("rb") as f:
            raw = f.read(MAX_RESULTS_BYTES)
    except OSError:
        return []
    events = []
    for line in raw.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            events.append(ev)
    return events


def _outcome(events: list[dict], returncode: int | None, timed_out: bool, timeout: float, log_tail: str,
             seconds: float) -> RunOutcome:
    cells: dict[int, dict] = {}
    records: dict[int, list] = {}
    running, dead, ended = None, None, False
    for ev in events:
        kind, cell = ev.get("event"), ev.get("cell")
        if kind == "cell" and isinstance(cell, int):
            if ev.get("state") == "running":
                running = cell
            elif ev.get("state") in ("ok", "error"):
                cells[cell] = {"state": ev["state"], "error": str(ev.get("error", ""))[:4000]}
                if isinstance(ev.get("records"), list):
                    records[cell] = ev["records"]
                running = None
        elif kind == "dead" and isinstance(cell, int):
            dead = cell
        elif kind == "end":
            ended = True
    where = f" in code cell {running}" if running is not None else ""
    if timed_out:
        return RunOutcome("timed out", f"the notebook ran past the {timeout:g} s limit{where} and was stopped",
                          cells, records, seconds)
    if dead is not None:
        return RunOutcome("kernel died", f"the kernel died in code cell {dead} (a cell ended its process, e.g. "
                          "os._exit, or it ran out of memory)", cells, records, seconds)
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        return RunOutcome("runner killed", f"the process running the notebook was killed by {name}{where} "
                          "(a cell signalled its parent process?)", cells, records, seconds)
    if returncode != 0 or not ended:
        tail = f": {log_tail}" if log_tail else ""
        return RunOutcome("runner failed", f"the notebook's runner stopped with status {returncode}{where}{tail}",
                          cells, records, seconds)
    return RunOutcome("ok", "", cells, records, seconds)


def run_notebook(data: bytes, timeout: float, env: dict | None = None, python: str | None = None) -> RunOutcome:
    """Run the notebook ``data`` (its file's bytes) as described in the module doc; kill what it leaves.

    ``timeout`` is the whole notebook's limit in seconds. The scratch folder is removed afterwards.
    """
    private = Path(tempfile.mkdtemp(prefix="infralens-grade-"))
    scratch = private / "notebook"
    scratch.mkdir()
    nb_path, results, log = scratch / "submission.ipynb", private / "results.jsonl", private / "runner.log"
    nb_path.write_bytes(data)
    cmd = [python or sys.executable, "-P", str(RUNNER), str(nb_path), str(results),
           "--cell-timeout", f"{timeout:g}", "--log", str(private / "kernel.log")]
    start, started = time.monotonic(), time.time()
    timed_out = False
    with Path(log).open("wb") as log_f:
        with _RUNNERS_LOCK:
            proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=log_f,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            _RUNNERS.add(proc.pid)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
        finally:
            with _RUNNERS_LOCK:
                _RUNNERS.discard(proc.pid)
    seconds = time.monotonic() - start
    with _RUNNERS_LOCK:  # the runner is gone: everything below this process outside a live runner's tree is ours
        leftover = kill_descendants(spare=frozenset(_RUNNERS))
    try:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
    except OSError:
        tail = []
    outcome = _outcome(_read_events(results), proc.returncode, timed_out, timeout, " ".join(tail)[-300:], seconds)
    outcome.leftover, outcome.started, outcome.ended = leftover, started, time.time()
    shutil.rmtree(private, ignore_errors=True)
    return outcome
