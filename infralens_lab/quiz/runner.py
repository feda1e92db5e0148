"""The child that runs one submitted notebook for the grader: ``python -P .../quiz/runner.py NB RESULTS``.

Run as a script, not as ``-m infralens_lab.quiz.runner``: importing the quiz package (pandas, the banks) would cost
each notebook about a second of CPU before its kernel starts, so this file imports nothing of the package (its
one shared constant is held equal to ``quiz.check.ANSWER_MIME`` by a test) and ``-P`` keeps its own folder off
``sys.path``.

Started by :mod:`.isolation` in its own session and process group, in a scratch folder holding a copy of
the submission. It starts a fresh kernel (this environment's Python, whatever the notebook's metadata
names), executes the code cells in order, cell by cell (a failing cell does not stop the next, as with
nbval's lax mode), and appends one JSON line per event to RESULTS, flushed at once so that what it saw
survives if it is killed:

* ``{"event": "start", "runner": pid}`` then, per code cell, ``{"event": "cell", "cell": N, "state":
  "running"}`` and ``{"event": "cell", "cell": N, "state": "ok" | "error", "error": text, "records": [...]}``
  (``records``: the answer payloads ``check`` published in that cell's outputs, see ``quiz.answers``);
* ``{"event": "dead", "cell": N}`` when the kernel died in cell N; ``{"event": "end"}`` after the last cell.

The kernel is this process's child, not the grader's: a cell that signals ``os.getppid()`` reaches this
runner. The runner is a child subreaper (Linux): a process the kernel starts and abandons is re-parented here,
so it stays inside this run's process tree, apart from the runs of other notebooks graded at the same time. The kernel's stdout and stderr go to a log file, never to RESULTS. The grader decides nothing from
this file but whether cells ran and the values ``check`` recorded for exercises (forging one is answering
it: see docs/instructors.md).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import sys
from pathlib import Path

ANSWER_MIME = "application/vnd.infralens.answer+json"  # quiz.check.ANSWER_MIME (a test holds them equal)
PR_SET_CHILD_SUBREAPER = 36

MAX_RECORDS = 100        # answer payloads kept per cell
MAX_ERROR = 3000         # characters of a cell's error kept
KERNEL_NAME = ":infralens-grader-env"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux's ``prctl(PR_SET_CHILD_SUBREAPER)``): processes orphaned below it
    are re-parented to it, not to init. False where the platform has no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _spec_manager():
    """A kernel-spec manager whose KERNEL_NAME is this environment's Python (as nbval's current-env)."""
    import ipykernel.kernelspec  # heavy: Jupyter, only here
    from jupyter_client.kernelspec import KernelSpecManager  # heavy: Jupyter, only here

    class CurrentEnv(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            if kernel_name == KERNEL_NAME:
                return self.kernel_spec_class(resource_dir=ipykernel.kernelspec.RESOURCES,
                                              **ipykernel.kernelspec.get_kernel_dict())
            return super().get_kernel_spec(kernel_name)

    return CurrentEnv()


def _records(cell) -> list:
    out = []
    for o in cell.get("outputs", []):
        data = o.get("data") if isinstance(o, dict) else None
        if isinstance(data, dict) and ANSWER_MIME in data:
            out.append(data[ANSWER_MIME])
    return out[-MAX_RECORDS:]


def skip_iri_grammar() -> None:
    """``infralens_lab.quick_nbformat.skip_iri_grammar``, copied: this script imports nothing of the package (a test
    holds the two equal). Call before nbformat is first imported: no IRI grammar built for a format notebooks never
    use (about 4 s of a 2-core machine per notebook run)."""
    sys.modules.setdefault("rfc3987_syntax", None)


def run(nb_path: Path, results: Path, cell_timeout: float, log: Path) -> int:
    skip_iri_grammar()
    import nbformat  # heavy: Jupyter, only here
    from jupyter_client import AsyncKernelManager  # heavy: Jupyter, only here
    from nbclient import NotebookClient  # heavy: Jupyter, only here
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError  # heavy: Jupyter, only here

    with Path(results).open("a", encoding="utf-8", buffering=1) as out:
        def emit(**event):
            out.write(json.dumps(event) + "\n")
            out.flush()

        become_subreaper()
        emit(event="start", runner=os.getpid())
        nb = nbformat.read(str(nb_path), as_version=4)
        # the kernel's connection file (ports and its message key) beside RESULTS, in the grader's private folder that
        # is removed after the run, even when this runner is killed: not one file per notebook left in /tmp
        km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=_spec_manager(),
                                connection_file=str(Path(results).parent / "kernel-connection.json"))
        client = NotebookClient(nb, km=km, timeout=cell_timeout, allow_errors=False,
                                resources={"metadata": {"path": str(nb_path.parent)}})
        code = -1
        with Path(log).open("ab") as kernel_log, client.setup_kernel(stdout=kernel_log, stderr=kernel_log,
                                                                     stdin=None, cwd=str(nb_path.parent)):
            for index, cell in enumerate(nb.cells):
                if cell.get("cell_type") != "code":
                    continue
                code += 1
                emit(event="cell", cell=code, state="running")
                state, error = "ok", ""
                try:
                    client.execute_cell(cell, index)
                except DeadKernelError:
                    emit(event="dead", cell=code)
                    return 0
                except CellTimeoutError:
                    state, error = "error", f"the cell ran past {cell_timeout:g} s"
                except CellExecutionError as exc:
                    tb = _ANSI.sub("", str(exc))
                    state, error = "error", (f"{exc.ename}: {exc.evalue}\n" + tb[-MAX_ERROR:]).strip()
                emit(event="cell", cell=code, state=state, error=error[:MAX_ERROR + 500], records=_records(cell))
        emit(event="end")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -P infralens_lab/quiz/runner.py", description=__doc__.splitlines()[0])
    ap.add_argument("notebook", type=Path)
    ap.add_argument("results", type=Path)
    ap.add_argument("--cell-timeout", type=float, default=600.0)
    ap.add_argument("--log", type=Path, default=None)
    args = ap.parse_args(argv)
    return run(args.notebook, args.results, args.cell_timeout, args.log or args.results.with_suffix(".log"))


if __name__ == "__main__":
    sys.exit(main())
