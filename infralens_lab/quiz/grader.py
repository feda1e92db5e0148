"""Grading decided in the grader's own process, from the submitted file, never from the student's kernel.

For one submitted ``.ipynb`` (its bytes, read before any notebook ran) the grader

1. reads it with nbformat (a file that does not read costs only its owner: its rows say why);
2. takes the lab from the notebook's metadata (``metadata.infralens.lab``, else the ``Lab NN`` title) and
   flags a file name that names another lab (``01_*.ipynb`` holding lab 00); metadata naming a lab that has
   no bank (``lab99``) is flagged and the file is graded as its name says;
3. takes the question list from that lab's bank, not from the check cells in the file, so a deleted
   check cell still counts, at 0;
4. reads each answer's FINAL value statically (:mod:`.answers`): the last binding of ``ANSWER_QK`` in cell
   order. A literal (or arithmetic on written-out numbers) counts; an answer set by code is ``invalid``.
   An exercise (``lab01.ex1``) set by code is read from the value ``check`` recorded in the output of the
   cell holding that binding: in the executed scratch copy when the grader ran the notebook (``RUN=1``)
   and that cell ran, else in the submitted file;
5. judges it with the same rules as :func:`~infralens_lab.quiz.check.check`, and for a question whose
   answer is derived from evidence (every exercise is), computes the right answer here from the evidence
   the bank's ``evidence`` provider returns in this process. A function exercise (bank kind ``function``) is
   judged from what its function gave on each case in the grader's run (``RUN=1``), against the reference
   computed here; without a run it is ``not checked`` (:func:`function_row`).

Every error while grading one notebook (RecursionError, MemoryError, anything) stays in that notebook's
rows. Nothing a cell prints, patches or writes reaches these decisions. See docs/instructors.md.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import InfraLensError
from ..quick_nbformat import skip_iri_grammar
from .answers import Answer, cell_text, final_answers, nfkc, recorded_values, saved_payloads
from .bank import BankError, Question, answer_variable, is_exercise, labs, load_bank
from .check import _judge, expected_answer, judge_function
from .functions import reference_values
from .scores import CAPS, clip

skip_iri_grammar()  # nbformat, imported lazily below, then builds no IRI grammar (quick_nbformat)

COLUMNS = ("notebook", "lab", "question", "status", "points", "max_points", "feedback", "answer", "flags")
STATUSES = ("correct", "wrong", "unanswered", "invalid", "no evidence", "not checked", "unreadable", "unknown lab",
            "not graded")
NOT_RUN_FUNCTION = ("function exercise: not checked with RUN=0 (only final values are checked without running code)")
MAX_NOTEBOOK_BYTES = 256 * 1024 * 1024
_FILE_LAB = re.compile(r"^(\d{2})_")
_TITLE_LAB = re.compile(r"\bLab\s+(\d{2})\b")

__all__ = ["COLUMNS", "NOT_RUN_FUNCTION", "STATUSES", "Answer", "EvidenceUnavailable", "NotebookError", "Row", "expected_for_grading",
           "final_answers", "grade_notebook", "grader_evidence", "identify_lab", "judge_question", "read_notebook",
           "unreadable_rows"]


class NotebookError(InfraLensError, ValueError):
    """A submitted file is not a notebook the grader can read; the message says what was seen."""


@dataclass(frozen=True)
class Row:
    """One line of scores.csv: a (notebook, question) pair, what it earned, the answer read and flags."""

    notebook: str
    lab: str
    question: str
    status: str
    points: float
    max_points: float
    feedback: str
    answer: str = ""     # the value graded, as text ("" when none)
    flags: str = ""      # short tags for the instructor, "; "-separated (lab mismatch, timed out, ...)

    def as_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------- reading the file
def read_notebook(path: str | Path, data: bytes | None = None):
    """The notebook at ``path`` (or its bytes ``data``) as an nbformat v4 node; NotebookError otherwise."""
    import nbformat  # heavy: Jupyter, only here

    path = Path(path)
    try:
        if data is None:
            if path.stat().st_size > MAX_NOTEBOOK_BYTES:
                raise NotebookError(f"{path.name} is {path.stat().st_size:,} bytes, over the grader's "
                                    f"{MAX_NOTEBOOK_BYTES:,}; expected an .ipynb saved by Jupyter")
            data = path.read_bytes()
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except NotebookError:
        raise
    except Exception as exc:  # JSON errors, nbformat validation, unreadable bytes: all the file's fault
        raise NotebookError(f"{path.name} could not be read as a Jupyter notebook ({_where(exc)}); "
                            "expected an .ipynb saved by Jupyter") from None
    if not isinstance(getattr(nb, "cells", None), list):
        raise NotebookError(f"{path.name} has no list of cells; expected an .ipynb saved by Jupyter")
    return nb


def _where(exc: Exception) -> str:
    """What went wrong reading a file, without quoting the file (it may be /proc/self/environ behind a link)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text: byte {exc.start}"
    return f"{type(exc).__name__}: not the structure of a notebook"


def lab_from_file_name(path: str | Path) -> str | None:
    """``'lab01'`` for ``01_nsight_workflow.ipynb``; None when the name has no ``NN_`` prefix."""
    m = _FILE_LAB.match(Path(path).name)
    return f"lab{m.group(1)}" if m else None


def lab_from_metadata(nb) -> str | None:
    """The lab a notebook says it is: ``metadata.infralens.lab``, else ``Lab NN`` in its title."""
    meta = nb.metadata.get("infralens", {}) if isinstance(nb.metadata, dict) else {}
    lab = meta.get("lab") if isinstance(meta, dict) else None
    if isinstance(lab, str) and re.fullmatch(r"lab\d{2}", lab):
        return lab
    title = meta.get("title") if isinstance(meta, dict) else None
    m = _TITLE_LAB.search(title) if isinstance(title, str) else None
    return f"lab{m.group(1)}" if m else None


def identify_lab(nb, path: str | Path) -> tuple[str | None, str]:
    """``(lab, flag)``: the lab from the metadata (the file name when there is none, or when the metadata
    names a lab that has no bank), and a sentence when the two disagree (empty otherwise)."""
    meta, name = lab_from_metadata(nb), lab_from_file_name(path)
    if meta and name and meta != name:
        known = labs()
        if meta not in known and name in known:
            return name, (f"unknown lab in metadata: the notebook's metadata says {meta}, which has no question "
                          f"bank; graded as {name}, from the file name {Path(path).name!r}.")
        return meta, (f"lab mismatch: the file name {Path(path).name!r} says {name} but the notebook is "
                      f"{meta} (from its metadata); graded as {meta}.")
    return meta or name, ""


def _code_only(text: str) -> str:
    """A cell's code without its comments, blank lines and layout (its syntax tree where it parses), so that
    answer cells copied with comments added still compare equal."""
    try:
        return ast.dump(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # magics, odd input, deep expressions
        lines = (ln.split("#", 1)[0].rstrip() for ln in text.splitlines())
        return "\n".join(ln for ln in lines if ln.strip())


def fingerprint(nb) -> str | None:
    """A hash of the notebook's answer cells (code cells that set an ``ANSWER_*``), or None when none is
    answered: two submissions with the same fingerprint handed in the same answer cells."""
    cells = [_code_only(nfkc(cell_text(c))) for c in nb.cells
             if c.get("cell_type") == "code" and "ANSWER_" in nfkc(cell_text(c))]
    answers, _ = final_answers(nb)
    if not any(a.how != "literal" or a.value not in (None, Ellipsis, "") for a in answers.values()):
        return None
    return hashlib.sha256("\n\x00\n".join(cells).encode()).hexdigest()


# ---------------------------------------------------------------- evidence for derived questions
class EvidenceUnavailable(InfraLensError, RuntimeError):
    """The grader could not get the evidence a derived question is marked against."""


def _build_evidence(spec: str) -> Any:
    mod_name, _, fn_name = spec.partition(":")
    if not mod_name.startswith("infralens_lab.") or not fn_name:
        raise EvidenceUnavailable(f"evidence provider {spec!r} must look like 'infralens_lab.module:function'")
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as exc:
        raise EvidenceUnavailable(f"evidence provider {spec!r} cannot be loaded: {exc}") from None
    try:
        ev = fn()
    except Exception as exc:  # any failure to build the evidence is reported in the row, not raised
        raise EvidenceUnavailable(f"evidence provider {spec!r} failed: {type(exc).__name__}: {exc}") from None
    if ev is None:
        raise EvidenceUnavailable(f"evidence provider {spec!r} found no evidence (no recording in this checkout?)")
    return ev


@functools.cache
def _evidence_or_error(spec: str) -> tuple[bool, Any]:
    try:
        return True, _build_evidence(spec)
    except EvidenceUnavailable as exc:
        return False, str(exc)


def grader_evidence(spec: str) -> Any:
    """Call the bank's evidence provider ``'package.module:function'`` once per grading process.

    Only providers inside ``infralens_lab`` are called. The result, or the failure, is cached: every
    notebook of a class folder is marked against the same evidence, built before any notebook runs.
    """
    ok, value = _evidence_or_error(spec)
    if not ok:
        raise EvidenceUnavailable(value)
    return value


grader_evidence.cache_clear = _evidence_or_error.cache_clear  # type: ignore[attr-defined]


def expected_for_grading(q: Question) -> Any:
    """The right answer to ``q`` computed in this process: stored, or derived from the grader's evidence."""
    if q.derive is None:
        return q.answer
    if not q.evidence:
        raise EvidenceUnavailable(f"{q.id} is derived from evidence but its bank names no 'evidence' provider")
    ev = grader_evidence(q.evidence)
    try:
        return expected_answer(q, ev)
    except Exception as exc:
        raise EvidenceUnavailable(f"{q.id}: the evidence from {q.evidence!r} does not give an answer: {exc}") from None


# ---------------------------------------------------------------- judging
def exercise_answer(q: Question, answer: Answer, saved: dict[int, list], run=None) -> Answer:
    """The value an exercise set by code is graded on: what ``check`` recorded in the output of the cell
    holding the final binding, in the run (when it reached that cell), else in the submitted file."""
    var, cell = answer_variable(q.id), answer.cell
    ran = run is not None and cell in run.finished_cells
    state, value, why = recorded_values(run.records if ran else saved, cell, q.id)
    if state == "ok" and isinstance(value, dict):  # a function exercise's record, for a question that wants a value
        state, why = "bad", "it holds what a function gave on cases, but this exercise asks for a value"
    where = (f"when the grader ran code cell {cell}" if ran else
             f"in the output saved in the file for code cell {cell}"
             + (" (the grader's run did not reach that cell)" if run is not None else ""))
    if state == "ok":
        return Answer(value=value, literal=True, cell=cell, how="recorded", source=where)
    if state == "bad":
        return Answer(literal=False, cell=cell, how="bad record",
                      source=f"{var} is computed by code, and the value recorded {where} is refused: {why}")
    error = run.cells.get(cell, {}).get("error", "").splitlines()[:1] if ran else []
    stopped = f"; the cell stopped with {error[0]}" if error else ""
    return Answer(literal=False, cell=cell, how="unrecorded",
                  source=(f"{var} is computed by code ({answer.source}) and no value for {q.id} was recorded "
                          f"{where}{stopped}: run the cell (its check(...) records the value) and save the notebook"))


def judge_question(q: Question, answer: Answer | None) -> tuple[str, float, str]:
    """``(status, points, feedback)`` for one question given the answer read from the file."""
    var = answer_variable(q.id)
    if answer is None:
        return "unanswered", 0, f"no {var} = ... cell in the notebook"
    if answer.how == "unrecorded":
        return "unanswered", 0, answer.source
    if answer.how == "bad record":
        return "invalid", 0, answer.source
    if not answer.literal:
        return "invalid", 0, (f"{var} is set by code ({answer.source}), not written out as a value; the grader "
                              f"reads only plain values, e.g. {var} = \"B\" or {var} = 42")
    try:
        expected = expected_for_grading(q)
    except EvidenceUnavailable as exc:
        return "no evidence", 0, f"not marked: {exc}"
    status, text = _judge(q, answer.value, expected)
    note = f" (value recorded {answer.source})" if answer.how == "recorded" and status != "correct" else ""
    return status, (q.points if status == "correct" else 0), (text + note if status != "correct" else "")


def function_row(q: Question, answer: Answer | None, run=None) -> tuple[str, float, str, Answer | None]:
    """``(status, points, feedback, answer shown)`` for a function exercise (bank kind ``function``).

    Its answer is a function, which only running the notebook can evaluate: with ``RUN=1`` the grader reads what
    ``check`` recorded in its run (what the function gave on each case) and judges it against the reference,
    computed here on the same cases (:func:`infralens_lab.quiz.check.judge_function`). Without a run that reached
    the cell (``RUN=0``, a run that died first) the row is ``not checked`` and scores 0 of its points
    (:data:`NOT_RUN_FUNCTION`); a literal written out (a typed constant) is wrong in either case: a value, not a
    function. The record saved in the submitted file is not read: no code ran to make it."""
    var = answer_variable(q.id)
    if answer is None:
        return "unanswered", 0, f"no {var} = ... cell in the notebook", None
    if answer.literal:
        if answer.value is None or answer.value is Ellipsis or (isinstance(answer.value, str) and not answer.value.strip()):
            return "unanswered", 0, f"{q.id}: not answered yet.", answer
        return "wrong", 0, (f"{q.id}: not right. {var} is a value written out; this exercise asks for a function "
                            f"({var} = your_function), run on the lab's evidence and on held-out evidence."), answer
    cell = answer.cell
    if run is None:
        return "not checked", 0, NOT_RUN_FUNCTION, None
    if cell not in run.finished_cells:
        return "not checked", 0, (f"function exercise: not checked: the grader's run did not reach code cell {cell} "
                                  "(only final values are checked without running code)"), None
    state, value, why = recorded_values(run.records, cell, q.id)
    if state == "bad":
        return "invalid", 0, f"{var}: the value recorded when the grader ran code cell {cell} is refused: {why}", None
    error = run.cells.get(cell, {}).get("error", "").splitlines()[:1]
    if state == "none" or value is None:
        stopped = f"; the cell stopped with {error[0]}" if error else ""
        return "unanswered", 0, (f"{q.id}: no function was checked when the grader ran code cell {cell}{stopped}: "
                                 f"set {var} = your_function and keep check({q.id!r}, {var}) in the cell"), None
    if not isinstance(value, dict):
        shown = Answer(value=value, cell=cell, how="recorded")
        return "wrong", 0, (f"{q.id}: not right. {var} was {value!r}, a value; this exercise asks for a function "
                            f"({var} = your_function), run on the lab's evidence and on held-out evidence."), shown
    try:
        expected = reference_values(q)
    except Exception as exc:  # FunctionCaseError or any failure of the cases or the reference stays in this row
        return "no evidence", 0, f"not marked: {q.id}: {type(exc).__name__}: {exc}", None
    if expected is None:
        return "no evidence", 0, f"not marked: {q.id}: its cases provider {q.cases} found no evidence", None
    status, text = judge_function(q, value["cases"], expected)
    shown = Answer(value=f"a function, run on {len(expected)} cases", cell=cell, how="recorded")
    return status, (q.points if status == "correct" else 0), text, shown


def _shown(answer: Answer | None) -> str:
    if answer is None or not answer.literal or answer.value is None or answer.value is Ellipsis:
        return ""
    return f"{answer.value:g}" if isinstance(answer.value, float) else clip(str(answer.value), CAPS["answer"])


def grade_notebook(path: str | Path, name: str | None = None, *, data: bytes | None = None, run=None) -> list[Row]:
    """Every row of scores.csv for one submitted notebook (``name`` is how the row names it).

    ``data``: the file's bytes as read before anything ran (read from ``path`` when None). ``run``: the
    :class:`~.isolation.RunOutcome` of executing it (RUN=1), or None. Never raises: a failure of the
    grader on this notebook becomes its rows.
    """
    path = Path(path)
    name = name or str(path)
    try:
        return _grade(path, name, data, run)
    except Exception as exc:  # RecursionError, MemoryError, anything: it stays in this notebook's rows
        why = (f"the grader could not grade this notebook ({type(exc).__name__}: {str(exc)[:200]}); "
               "its other rows are lost, no one else's are")
        return _rows_for_all(name, lab_from_file_name(path), "unreadable", why, "grader error")


def _grade(path: Path, name: str, data: bytes | None, run) -> list[Row]:
    try:
        nb = read_notebook(path, data)
    except NotebookError as exc:
        return _rows_for_all(name, lab_from_file_name(path), "unreadable", str(exc), "unreadable")
    lab, flag = identify_lab(nb, path)
    flags = [flag.split(":", 1)[0]] if flag else []
    if lab is None:
        return [Row(name, "", "", "unknown lab", 0, 0,
                    "cannot tell which lab this is: no metadata.infralens.lab, no 'Lab NN' title and no NN_ "
                    "prefix in the file name", flags="unknown lab")]
    try:
        bank = load_bank(lab)
    except BankError as exc:
        return [Row(name, lab, "", "unknown lab", 0, 0, f"{flag} {exc}".strip(), flags="; ".join([*flags, "unknown lab"]))]
    answers, notes = final_answers(nb)
    saved = saved_payloads(nb)
    run_note = ""
    if run is not None and run.state != "ok":
        flags.append(run.state)
        run_note = f"Run: {run.detail}; scored from the answers written in the file."
    rows = []
    for q in bank.values():
        answer = answers.get(answer_variable(q.id))
        if q.kind == "function":
            status, points, feedback, answer = function_row(q, answer, run)
        else:
            if answer is not None and is_exercise(q.id) and not answer.literal:
                answer = exercise_answer(q, answer, saved, run)
            status, points, feedback = judge_question(q, answer)
        extra = [flag] if flag else []
        if status != "correct":
            extra += notes
        if run_note:
            extra.append(run_note)
        rows.append(Row(name, lab, q.id, status, points, q.points, " ".join([feedback, *extra]).strip(),
                        answer=_shown(answer), flags="; ".join(flags)))
    return rows


def unreadable_rows(path: str | Path, name: str, why: str) -> list[Row]:
    """The rows of a submitted path that cannot be read as a notebook: one per question of the lab its file
    name names (one row when none), status ``unreadable``, feedback ``why``."""
    return _rows_for_all(name, lab_from_file_name(path), "unreadable", why, "unreadable")


def _rows_for_all(name: str, lab: str | None, status: str, why: str, flag: str) -> list[Row]:
    try:
        bank = load_bank(lab) if lab else {}
    except BankError:
        bank = {}
    if not bank:
        return [Row(name, lab or "", "", status, 0, 0, why, flags=flag)]
    return [Row(name, lab, q.id, status, 0, q.points, why, flags=flag) for q in bank.values()]
