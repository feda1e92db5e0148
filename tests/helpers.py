"""Shared test builders: the one fake Nsight Compute CSV writer the tests use, and the recorded set or a skip."""
from __future__ import annotations

import csv
import io
import sys

import pytest

from infralens_lab import evidence
from infralens_lab.parse import ncu

ID_COLUMNS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC"]


def ncu_block(label: str, launches: list[tuple[str, dict]], fmt: str = "{:,}", missing=0,
              units: dict | None = None, chatter: bool = True) -> str:
    """One recorded block as ncu ``--csv --page raw`` prints it, after the recorder's config and command
    lines (:func:`infralens_lab.parse.ncu.config_block`): ``==PROF==`` chatter, the header (id columns,
    then the metrics sorted), the units row (``ns`` for times unless ``units`` says otherwise) and one
    row per ``(kernel, {metric: value})`` launch, values written with ``fmt`` (thousands separators,
    as ncu does), a metric a launch lacks as ``missing``."""
    metrics = sorted({m for _, vals in launches for m in vals})
    unit = {m: "ns" for m in metrics if m.startswith("gpu__time")} | \
        {m: "hz" for m in metrics if m.endswith(".per_second")} | dict(units or {})  # as ncu prints them
    s = io.StringIO()
    w = csv.writer(s, quoting=csv.QUOTE_ALL, lineterminator="\n")
    if chatter:
        s.write("==PROF== Connected to process 4242 (/usr/bin/python3)\n")
    w.writerow(ID_COLUMNS + metrics)
    w.writerow([""] * len(ID_COLUMNS) + [unit.get(m, "") for m in metrics])
    for i, (kernel, vals) in enumerate(launches):
        w.writerow([str(i), "4242", "python3", "h", kernel, "1", "7", "(256, 1, 1)", "(1, 1, 1)", "0", "9.0"]
                   + [fmt.format(vals[m]) if m in vals else str(missing) for m in metrics])
    return ncu.config_block(label, f"ncu --csv --page raw --fake {label.split()[0]}", s.getvalue())


def make_grade_command(*args: str) -> list[str]:
    """The ``make grade`` command line every grading test runs: the Makefile's own recipe with this interpreter
    (``PY=``), the install stamp taken as up to date (``-o .venv/.installed``), then ``args`` (``SUBMISSIONS=``,
    ``SCORES=``, ``RUN=0``, ``PYTEST_ARGS=``...). The caller picks the folder it runs in."""
    return ["make", "--no-print-directory", "-o", ".venv/.installed", "grade", f"PY={sys.executable}", *args]


def _lab_notebook(lab: str) -> dict:
    """The committed notebook of ``lab`` ("lab04" or "04"), as JSON."""
    import json
    from pathlib import Path

    return json.loads(next((Path(__file__).resolve().parents[1] / "labs").glob(f"{lab[-2:]}_*.ipynb")).read_text())


def code_cells_of(lab: str) -> list[str]:
    """The source of every code cell of the committed notebook of ``lab`` ("lab04" or "04")."""
    return ["".join(c["source"]) for c in _lab_notebook(lab)["cells"] if c["cell_type"] == "code"]


def question_sections_of(lab: str) -> dict:
    """{question id: the heading of the lab section it sits in}, read from the committed notebook of ``lab``."""
    from infralens_lab.quiz.cells import question_sections

    return question_sections(_lab_notebook(lab))


def recorded_set(*names: str, files: tuple[str, ...] = ()):
    """The recorded reference set, or a skip when none is recorded yet or it lacks one of the JSON records
    ``names`` or the ``files``."""
    try:
        st = evidence.reference()
    except evidence.EvidenceError:
        pytest.skip("no recorded evidence under data/recorded yet")
    missing = [n for n in names if n not in st.names()] + [f for f in files if f not in st.files()]
    if missing:
        pytest.skip(f"the recorded set has no {missing} yet")
    return st
