"""Grading decided in the grader's own process, from the submitted file, never from the student's kernel.

For one submitted ``.ipynb`` the grader

1. reads the file with nbformat (a file that does not read costs only its owner: its rows say why);
2. takes the lab from the notebook's metadata (``metadata.infralens.lab``, else the ``Lab NN``
   title) and flags a file name that names another lab (``01_*.ipynb`` holding lab 00);
3. takes the question list from that lab's bank, not from the check cells in the file, so a
   deleted check cell still counts, at 0;
4. reads each answer's FINAL value statically: the last assignment to ``ANSWER_QK`` in the
   notebook's code cells, in cell order, parsed with :mod:`ast`. Only a plain literal counts
   (a string, an int, a float, a signed number; ``None`` / ``...`` / ``""`` mean unanswered);
   an answer set by code (an expression, a loop, a function, a ``try`` block) is ``invalid``,
   whatever it would evaluate to;
5. judges it with the same rules as :func:`~infralens_lab.quiz.check.check`, and for a question
   whose answer is derived from evidence, computes the right answer here from the evidence the
   bank's ``evidence`` provider returns in this process (recorded evidence on a CPU machine,
   live measurements on a GPU: the same rule the labs follow).

Nothing a cell prints, patches or writes reaches these decisions: execution (nbval) only shows
the instructor whether the notebook runs. See docs/instructors.md.
"""
from __future__ import annotations

import ast
import functools
import importlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .bank import BankError, Question, answer_variable, load_bank
from .check import _judge, expected_answer

COLUMNS = ("notebook", "lab", "question", "status", "points", "max_points", "feedback")
STATUSES = ("correct", "wrong", "unanswered", "invalid", "no evidence", "unreadable", "unknown lab")
_FILE_LAB = re.compile(r"^(\d{2})_")
_TITLE_LAB = re.compile(r"\bLab\s+(\d{2})\b")


class NotebookError(ValueError):
    """A submitted file is not a notebook the grader can read; the message says what was seen."""


@dataclass(frozen=True)
class Row:
    """One line of scores.csv: a (notebook, question) pair and what it earned."""

    notebook: str
    lab: str
    question: str
    status: str
    points: float
    max_points: float
    feedback: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Answer:
    """The final value of one answer variable as read from the file: a literal, or why it is not one."""

    value: Any = None
    literal: bool = True
    cell: int | None = None     # index among code cells (nbval's "Cell N") of the final assignment
    source: str = ""            # the code that set it, when it is not a literal


# ---------------------------------------------------------------- reading the file
def read_notebook(path: str | Path):
    """The notebook at ``path`` (nbformat v4 node); NotebookError naming the problem otherwise."""
    import nbformat

    path = Path(path)
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as exc:  # JSON errors, nbformat validation, unreadable bytes: all the file's fault
        raise NotebookError(f"{path.name} could not be read as a Jupyter notebook "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                            "expected an .ipynb saved by Jupyter") from None
    if not isinstance(getattr(nb, "cells", None), list):
        raise NotebookError(f"{path.name} has no list of cells; expected an .ipynb saved by Jupyter")
    return nb


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
    """``(lab, flag)``: the lab from the metadata (the file name when there is none), and a
    sentence when the two disagree (empty otherwise)."""
    meta, name = lab_from_metadata(nb), lab_from_file_name(path)
    if meta and name and meta != name:
        return meta, (f"lab mismatch: the file name {Path(path).name!r} says {name} but the notebook is "
                      f"{meta} (from its metadata); graded as {meta}.")
    return meta or name, ""


def _python_source(src: str) -> str:
    """A cell's source with IPython syntax (``%magic``, ``!cmd``) turned into plain Python."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # without IPython, magics stay and such a cell is skipped as not Python
        return src
    try:
        return TransformerManager().transform_cell(src)
    except Exception:
        return src


def _literal(node: ast.AST) -> tuple[bool, Any]:
    """``(True, value)`` for a plain str/int/float literal (or None/...), else ``(False, None)``."""
    if isinstance(node, ast.Constant) and (node.value is None or node.value is Ellipsis
                                           or type(node.value) in (str, int, float)):
        return True, node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float)):
        v = node.operand.value
        return True, -v if isinstance(node.op, ast.USub) else v
    return False, None


def _bindings(tree: ast.Module):
    """Every binding of an ``ANSWER_*`` name in a cell, in source order: ``(pos, name, Answer-ish)``.

    A plain top-level ``ANSWER_QK = <literal>`` is a literal; any other binding (inside a loop,
    ``if``, ``try``, function or class, an augmented or tuple assignment, a ``for`` target, an
    import alias, ``del``) is recorded as code, because its final value is only known by running it.
    """
    top = {id(s) for s in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and id(node) in top:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            simple = len(targets) == 1 and isinstance(targets[0], ast.Name) and node.value is not None
            if simple and targets[0].id.startswith("ANSWER_"):
                ok, value = _literal(node.value)
                out.append(((node.lineno, node.col_offset), targets[0].id, ok, value, ast.unparse(node)))
                continue
        names = []
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names = [node.id]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.alias):
            names = [(node.asname or node.name).split(".")[0]]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names = list(node.names)
        for name in names:
            if name.startswith("ANSWER_"):
                pos = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
                out.append((pos, name, False, None, _statement_of(tree, node)))
    # a top-level simple assignment is walked again as its target Name: keep the first (literal) entry
    seen, uniq = set(), []
    for item in sorted(out, key=lambda t: (t[0], not t[2])):
        key = (item[0], item[1])
        if key in seen:
            continue
        seen.add(key)
        uniq.append(item)
    return uniq


def _statement_of(tree: ast.Module, node: ast.AST) -> str:
    line = getattr(node, "lineno", None)
    for s in tree.body:
        if line is not None and s.lineno <= line <= (s.end_lineno or s.lineno):
            text = ast.unparse(s)
            return text if len(text) <= 120 else text[:117] + "..."
    return "?"


def final_answers(nb) -> tuple[dict[str, Answer], list[str]]:
    """The final value of every ``ANSWER_*`` variable in ``nb`` and notes on cells that are not Python.

    Cells are read in order; within a cell, statements in source order; the last binding wins.
    """
    answers: dict[str, Answer] = {}
    notes = []
    code_index = -1
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        code_index += 1
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        if "ANSWER_" not in src:
            continue
        try:
            tree = ast.parse(_python_source(src))
        except SyntaxError as exc:
            notes.append(f"code cell {code_index} is not valid Python ({exc.msg}, line {exc.lineno}), so its "
                         "answers were not read")
            continue
        for _, name, ok, value, text in _bindings(tree):
            answers[name] = Answer(value=value if ok else None, literal=ok, cell=code_index,
                                   source="" if ok else text)
    return answers, notes


# ---------------------------------------------------------------- evidence for derived questions
class EvidenceUnavailable(RuntimeError):
    """The grader could not get the evidence a derived question is marked against."""


@functools.lru_cache(maxsize=None)
def grader_evidence(spec: str) -> Any:
    """Call the bank's evidence provider ``'package.module:function'`` once per grading process.

    Only providers inside ``infralens_lab`` are called. The result is cached: every notebook of
    a class folder is marked against the same evidence.
    """
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
def judge_question(q: Question, answer: Answer | None) -> tuple[str, float, str]:
    """``(status, points, feedback)`` for one question given the answer read from the file."""
    var = answer_variable(q.id)
    if answer is None:
        return "unanswered", 0, f"no {var} = ... cell in the notebook"
    if not answer.literal:
        return "invalid", 0, (f"{var} is set by code ({answer.source}), not written out as a value; the grader "
                              f"reads only plain values, e.g. {var} = \"B\" or {var} = 42")
    try:
        expected = expected_for_grading(q)
    except EvidenceUnavailable as exc:
        return "no evidence", 0, f"not marked: {exc}"
    status, text = _judge(q, answer.value, expected)
    if status == "correct":
        return status, q.points, ""
    return status, 0, text


def grade_notebook(path: str | Path, name: str | None = None) -> list[Row]:
    """Every row of scores.csv for one submitted notebook (``name`` is how the row names it)."""
    path = Path(path)
    name = name or str(path)
    try:
        nb = read_notebook(path)
    except NotebookError as exc:
        lab = lab_from_file_name(path)
        return _rows_for_all(name, lab, "unreadable", str(exc))
    lab, flag = identify_lab(nb, path)
    if lab is None:
        return [Row(name, "", "", "unknown lab", 0, 0,
                    "cannot tell which lab this is: no metadata.infralens.lab, no 'Lab NN' title and no NN_ "
                    "prefix in the file name")]
    try:
        bank = load_bank(lab)
    except BankError as exc:
        return [Row(name, lab, "", "unknown lab", 0, 0, f"{flag} {exc}".strip())]
    answers, notes = final_answers(nb)
    rows = []
    for q in bank.values():
        status, points, feedback = judge_question(q, answers.get(answer_variable(q.id)))
        extra = [flag] if flag else []
        if status != "correct":
            extra += notes
        rows.append(Row(name, lab, q.id, status, points, q.points, " ".join([feedback, *extra]).strip()))
    return rows


def _rows_for_all(name: str, lab: str | None, status: str, why: str) -> list[Row]:
    try:
        bank = load_bank(lab) if lab else {}
    except BankError:
        bank = {}
    if not bank:
        return [Row(name, lab or "", "", status, 0, 0, why)]
    return [Row(name, lab, q.id, status, 0, q.points, why) for q in bank.values()]
