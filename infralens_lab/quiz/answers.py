"""The final answers of a submitted notebook, read from the file as Python would read its cells.

Nothing here runs a cell. For every ``ANSWER_*`` variable the reader finds the last binding in cell
order (within a cell, in source order) and says what it is:

* a **literal**: a string, an int, a float, a signed number, ``None`` or ``...``; also arithmetic on
  written-out numbers (``98560 - 98437``, an 891-term ``1 + 1 + ...``), evaluated here without
  recursion and within bounds, because a number worked out by hand is still a number written out;
* **code**: anything else (a name, a call, a loop, ``if``/``try``, a function, ``+=``, an import alias).
  For a question that is code means ``invalid``; for an exercise (``lab01.ex1``) the grader reads the
  value that ``check`` recorded in the output of the cell holding that binding (:func:`recorded_values`).

Names are read as Python reads them: NFKC-folded (``ＡＮＳＷＥＲ_Q1`` is ``ANSWER_Q1``). IPython syntax
is understood: line magics and ``!cmd`` are turned into Python by IPython's own transformer, and a cell
magic that runs its body as Python in the notebook's namespace (``%%time``, ``%%capture``, ``%%prun``)
is read through to its body; any other cell magic (``%%bash``, ``%%timeit``, ...) sets no variable and
is noted. A cell that Python cannot compile (a syntax error, an expression too deep for its parser) sets
nothing, as in the kernel, and is noted.
"""  # noqa: RUF002 (a fullwidth ANSWER_Q1 is the example NFKC folds)
from __future__ import annotations

import ast
import json
import math
import operator
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from ..errors import InfraLensError
from .check import ANSWER_MIME
from .functions import parse_cases

PREFIX = "ANSWER_"
PY_CELL_MAGICS = ("time", "capture", "prun")   # run their body as Python in the user namespace
MAX_BITS = 1000          # arithmetic on ints stays below float's range (2**1024), so judging can float() it
MAX_TEXT = 1000          # a recorded string answer longer than this is refused
_LINE_TIME = re.compile(r"^%time[ \t]+(?=\S)", re.M)


@dataclass(frozen=True)
class Answer:
    """The final value of one answer variable as read from the file: a literal, or why it is not one."""

    value: Any = None
    literal: bool = True
    cell: int | None = None     # index among code cells (nbval's "Cell N") of the final assignment
    source: str = ""            # the code that set it, when it is not a literal
    how: str = "literal"        # literal | arithmetic | code; for an exercise set by code (grader.exercise_answer):
    #                             recorded (the value check recorded), unrecorded or bad record


def nfkc(text: str) -> str:
    """``text`` NFKC-normalised: how Python reads identifiers (``ＡＮＳＷＥＲ_Q1`` -> ``ANSWER_Q1``)."""  # noqa: RUF002 (fullwidth letters: the example)
    return unicodedata.normalize("NFKC", text)


def cell_text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def python_source(src: str) -> tuple[str | None, str]:
    """``(python, note)``: a cell's source as plain Python, or None and why it runs no Python of its own."""
    lines = src.lstrip("\n").splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        magic = (lines[0].lstrip()[2:].split() or [""])[0]
        if magic not in PY_CELL_MAGICS:
            return None, (f"is a %%{magic} cell, whose body is not run as Python in the notebook's namespace, so "
                          "its ANSWER_ lines set nothing")
        src = "\n".join(lines[1:])
    src = _LINE_TIME.sub("", src)   # `%time ANSWER_Q1 = 3` runs the statement in the namespace
    try:
        from IPython.core.inputtransformer2 import TransformerManager  # optional: IPython, only here
    except ImportError:  # without IPython, magics stay and such a cell is noted as not Python
        return src, ""
    try:
        return TransformerManager().transform_cell(src), ""
    except Exception:  # IPython gives up on odd input; parse it as it is
        return src, ""


# ---------------------------------------------------------------- literals and arithmetic
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


class _TooBig(InfraLensError, ValueError):
    pass


def _bits(x) -> int:
    return abs(x).bit_length() if isinstance(x, int) else 0


def _apply(op: type, a, b):
    if op is ast.Pow and isinstance(a, int) and isinstance(b, int) and b > 0 and _bits(a) * b > MAX_BITS:
        raise _TooBig(f"a power with more than {MAX_BITS} bits")
    if op is ast.Mult and _bits(a) + _bits(b) > MAX_BITS + 1:
        raise _TooBig(f"a product with more than {MAX_BITS} bits")
    try:
        v = _BINOPS[op](a, b)
    except ZeroDivisionError:
        raise _TooBig("a division by zero") from None
    except OverflowError:
        raise _TooBig("a result too large for a float") from None
    if isinstance(v, complex) or (isinstance(v, float) and not math.isfinite(v)) or _bits(v) > MAX_BITS:
        raise _TooBig("a result that is not a finite real number of at most "
                      f"{MAX_BITS} bits")
    return v


def literal_value(node: ast.AST) -> tuple[str, Any, str]:
    """``(how, value, why)`` for the right-hand side of an assignment.

    ``how`` is ``literal`` (str/int/float/None/..., or a signed number), ``arithmetic`` (numbers and
    ``+ - * / // % **``, evaluated iteratively: no recursion however deep), ``invalid`` (arithmetic that
    cannot be evaluated within bounds: ``why`` says which) or ``code`` (anything else).
    """
    if isinstance(node, ast.Constant) and _bits(node.value) > MAX_BITS:   # a 4,000-digit integer written out
        return "invalid", None, (f"an integer of {len(str(abs(node.value))):,} digits, over the grader's "
                                 f"{MAX_BITS}-bit limit (a float holds at most about 308 digits)")
    if isinstance(node, ast.Constant) and (node.value is None or node.value is Ellipsis
                                           or type(node.value) in (str, int, float)):
        return "literal", node.value, ""
    stack: list[tuple[ast.AST, bool]] = [(node, False)]
    values: list[Any] = []
    while stack:
        n, visited = stack.pop()
        if isinstance(n, ast.Constant):
            if type(n.value) not in (int, float):
                return "code", None, ""
            if _bits(n.value) > MAX_BITS:
                return "invalid", None, (f"an integer of {len(str(abs(n.value))):,} digits, over the grader's "
                                         f"{MAX_BITS}-bit limit")
            values.append(n.value)
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            if visited:
                values.append(-values.pop() if isinstance(n.op, ast.USub) else values.pop())
            else:
                stack += [(n, True), (n.operand, False)]
        elif isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            if visited:
                b, a = values.pop(), values.pop()
                try:
                    values.append(_apply(type(n.op), a, b))
                except _TooBig as exc:
                    return "invalid", None, str(exc)
            else:
                stack += [(n, True), (n.right, False), (n.left, False)]
        else:
            return "code", None, ""
    simple = isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)
    return ("literal" if simple else "arithmetic"), values[0], ""


# ---------------------------------------------------------------- bindings
def _segment(lines: list[str], node: ast.AST, limit: int = 120) -> str:
    """The source text of ``node`` (no ``ast.unparse``: it recurses on deep expressions), cut to ``limit``."""
    start, end = getattr(node, "lineno", 0), getattr(node, "end_lineno", None) or getattr(node, "lineno", 0)
    if not start or start > len(lines):
        return "?"
    chunk = lines[start - 1:end]
    if len(chunk) == 1:
        chunk = [chunk[0][node.col_offset:node.end_col_offset]]
    else:
        chunk = [chunk[0][node.col_offset:], *chunk[1:-1], chunk[-1][:node.end_col_offset]]
    text = " ".join(ln.strip() for ln in chunk)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _statement_of(tree: ast.Module, lines: list[str], node: ast.AST) -> str:
    line = getattr(node, "lineno", None)
    for s in tree.body:
        if line is not None and s.lineno <= line <= (s.end_lineno or s.lineno):
            return _segment(lines, s)
    return "?"


def bindings(tree: ast.Module, src: str) -> list[tuple[tuple[int, int], str, str, Any, str]]:
    """Every binding of an ``ANSWER_*`` name in a cell, in source order: ``(pos, name, how, value, text)``.

    A plain top-level ``ANSWER_QK = <value>`` is read by :func:`literal_value`; any other binding (inside a
    loop, ``if``, ``try``, function or class, an augmented or tuple assignment, a ``for`` target, an import
    alias, ``del``) is ``code``, because its final value is only known by running it.
    """
    lines = src.splitlines()
    top = {id(s) for s in tree.body}
    out = []
    for node in ast.walk(tree):  # ast.walk is iterative: deep trees are fine
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and id(node) in top:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            simple = len(targets) == 1 and isinstance(targets[0], ast.Name) and node.value is not None
            if simple and targets[0].id.startswith(PREFIX):
                how, value, why = literal_value(node.value)
                text = why if how == "invalid" else _segment(lines, node)
                out.append(((node.lineno, node.col_offset), targets[0].id, how, value, text))
                continue
        names = []
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names = [node.id]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.alias):
            names = [nfkc(node.asname or node.name).split(".")[0]]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names = list(node.names)
        for name in names:
            if name.startswith(PREFIX):
                pos = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
                out.append((pos, name, "code", None, _statement_of(tree, lines, node)))
    # a top-level simple assignment is walked again as its target Name: keep the first (assignment) entry
    seen, uniq = set(), []
    for item in sorted(out, key=lambda t: (t[0], t[2] == "code")):
        key = (item[0], item[1])
        if key not in seen:
            seen.add(key)
            uniq.append(item)
    return uniq


def final_answers(nb) -> tuple[dict[str, Answer], list[str]]:
    """The final value of every ``ANSWER_*`` variable in ``nb`` and notes on cells that set nothing.

    Cells are read in order; within a cell, statements in source order; the last binding wins.
    """
    answers: dict[str, Answer] = {}
    notes = []
    code_index = -1
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        code_index += 1
        raw = cell_text(cell)
        if PREFIX not in nfkc(raw):
            continue
        src, why = python_source(raw)
        if src is None:
            notes.append(f"code cell {code_index} {why}.")
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError as exc:
            notes.append(f"code cell {code_index} is not valid Python ({exc.msg}, line {exc.lineno}), so its "
                         "answers were not read")
            continue
        except (RecursionError, MemoryError, ValueError) as exc:
            notes.append(f"code cell {code_index} cannot be compiled by Python ({type(exc).__name__}: an expression "
                         "too deep for its parser), so, as in the kernel, it sets no answer")
            continue
        for _, name, how, value, text in bindings(tree, src):
            answers[name] = Answer(value=value if how in ("literal", "arithmetic") else None,
                                   literal=how in ("literal", "arithmetic"), cell=code_index,
                                   source="" if how in ("literal", "arithmetic") else text,
                                   how="code" if how == "invalid" else how)
    return answers, notes


# ---------------------------------------------------------------- values recorded by check
def parse_record(data: Any, qid: str) -> tuple[bool, Any, str]:
    """``(ok, value, why)`` for one ``application/vnd.infralens.answer+json`` payload meant for ``qid``.

    Strict: an object with exactly ``question`` (== ``qid``) and ``value``; the value a finite number
    (returned as float), a string of at most :data:`MAX_TEXT` characters, null, or a function exercise's
    ``{"cases": {case name: value}}`` (:func:`infralens_lab.quiz.functions.parse_cases`). Anything else is refused.
    """
    if not isinstance(data, dict) or set(data) != {"question", "value"}:
        return False, None, "the recorded value is not an object of exactly 'question' and 'value'"
    if data["question"] != qid:
        return False, None, f"the record is for {data['question']!r}, not {qid!r}"
    v = data["value"]
    if v is None:
        return True, None, ""
    if isinstance(v, dict):  # a function exercise's record: what the function gave on each case
        ok, got, why = parse_cases(v)
        return (True, {"cases": got}, "") if ok else (False, None, why)
    if isinstance(v, str):
        return (True, v, "") if len(v) <= MAX_TEXT else (False, None, f"the recorded string is over {MAX_TEXT} characters")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and _bits(v) <= MAX_BITS and math.isfinite(v):
        return True, float(v), ""
    kind = "an object" if isinstance(v, dict) else "a list" if isinstance(v, list) else f"a {type(v).__name__}"
    return False, None, f"the recorded value is {kind}, expected a finite number, a string or null"


def recorded_values(outputs_by_cell: dict[int, list], cell: int | None, qid: str) -> tuple[str, Any, str]:
    """``(state, value, why)``: what ``check`` recorded for ``qid`` in the outputs of code cell ``cell``.

    ``outputs_by_cell`` maps a code-cell index to that cell's answer payloads (in output order). The last
    payload for ``qid`` counts. ``state`` is ``ok``, ``none`` (the cell recorded nothing for ``qid``) or
    ``bad`` (the last payload does not parse; ``why`` says how).
    """
    payloads = []
    for p in outputs_by_cell.get(cell, []):
        if isinstance(p, str) and len(p) <= 4 * MAX_TEXT:
            try:
                p = json.loads(p)
            except ValueError:
                continue
        if isinstance(p, dict) and p.get("question") == qid:
            payloads.append(p)
    if not payloads:
        return "none", None, ""
    ok, value, why = parse_record(payloads[-1], qid)
    return ("ok", value, "") if ok else ("bad", None, why)


def saved_payloads(nb) -> dict[int, list]:
    """The answer payloads in each code cell's saved outputs: ``{code index: [payload, ...]}``."""
    out: dict[int, list] = {}
    code_index = -1
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        code_index += 1
        for o in cell.get("outputs", []) or []:
            data = o.get("data") if isinstance(o, dict) else None
            if isinstance(data, dict) and ANSWER_MIME in data:
                out.setdefault(code_index, []).append(data[ANSWER_MIME])
    return out
