"""Checking answers: feedback for learners, assertions for graders.

``check(qid, answer, evidence=None)`` marks one answer. Outside grade mode it prints one
deterministic block of feedback (right + explanation; why wrong + hint; or "not answered
yet") and never raises for anything a learner typed. An answer cell whose last run stopped before
its assignment (a SyntaxError; see :mod:`infralens_lab.notebook_guard`) leaves an older value in
its variable: that value is not judged, and the check says so (unanswered). In grade mode (``INFRALENS_GRADE=1``,
set by ``pytest --infralens-grade``) a wrong or unanswered answer raises ``AssertionError``
carrying the feedback, so nbval fails that cell. A check decides no grade and writes no
score: the grader (:mod:`.grader`) reads the answers from the submitted file and judges them
in its own process. Mistakes of the notebook
itself (unknown question id, a derived question checked without evidence) raise
``ValueError`` in both modes.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .. import notebook_guard
from ..notebook_guard import GRADE_ENV, grade_mode  # noqa: F401 (the quiz's names for them)
from .bank import Question, answer_variable, normalise_word, question
from .derive import derive
from .functions import Case, function_record, key_codes, load, outputs, reference_values

STATUSES = ("correct", "wrong", "unanswered")
# The value a check judged, published as a display output of its cell: how the grader reads an exercise's
# answer computed by code (quiz.answers.recorded_values). The empty text/plain keeps every front end quiet.
ANSWER_MIME = "application/vnd.infralens.answer+json"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check; ``status`` is correct, wrong or unanswered."""

    qid: str
    status: str
    points: float
    max_points: float
    message: str

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def answered(self) -> bool:
        return self.status != "unanswered"

    def _ipython_display_(self):
        """Show nothing when a check is a cell's last line: the feedback was already printed."""


def is_unanswered(answer: Any) -> bool:
    """None, ``...`` and empty or blank strings count as not answered."""
    return answer is None or answer is Ellipsis or (isinstance(answer, str) and answer.strip() == "")


def _fmt_points(p: float) -> str:
    return f"{p:g}"


def _as_number(answer: Any) -> float | None:
    if isinstance(answer, bool):
        return None
    if isinstance(answer, str):
        answer = answer.strip()
        if "," in answer:  # thousands separators only ("1,024"); "0,5" is refused, not read as 5
            if not re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d*)?", answer):
                return None
            answer = answer.replace(",", "")
    try:
        v = float(answer)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class Measured(float):
    """A derived number with its evidence's own spread (``spread``: a half-width in the answer's unit), which a
    check takes as its tolerance when wider than the bank's floor: a guess inside the evidence's noise is as right
    as the measurement, one outside it is not."""

    spread: float = 0.0

    def __new__(cls, value: float, spread: float = 0.0):
        out = super().__new__(cls, value)
        out.spread = abs(float(spread))
        return out


def expected_answer(q: Question, evidence: Any = None) -> Any:
    """The right answer: stored, or derived from ``evidence`` for a ``derive`` question. A number question whose
    ``derive_args`` hold ``"spread": {value args}`` gets a :class:`Measured` carrying that column as its spread."""
    if q.kind == "function":
        raise ValueError(f"{q.id} is a function exercise: its right answers are its reference function's on each case "
                         "(quiz.functions.reference_values), not one value")
    if q.derive is None:
        return q.answer
    if evidence is None:
        raise ValueError(f"{q.id} is checked against the evidence shown in the notebook: call "
                         f"check({q.id!r}, answer, evidence=<the Evidence or DataFrame above>)")
    args = dict(q.derive_args)
    spread_args = args.pop("spread", None)
    got = derive(q.derive, evidence, **args)
    if q.kind == "number":
        v = _as_number(got)
        if v is None:
            raise ValueError(f"{q.id}: derivation {q.derive!r} gave {got!r}, expected a number")
        if spread_args is not None:
            s = _as_number(derive("spread", evidence, **spread_args))
            if s is None:
                raise ValueError(f"{q.id}: the spread {spread_args!r} is not a number in the evidence")
            return Measured(v, s)
        return v
    if q.kind == "text":
        word = normalise_word(got)
        if word not in q.vocabulary:
            raise ValueError(f"{q.id}: derivation {q.derive!r} gave {got!r}, which is not in the "
                             f"vocabulary {list(q.vocabulary)}")
        return (word,)
    if got not in q.options:
        raise ValueError(f"{q.id}: derivation {q.derive!r} gave {got!r}, not one of the options {sorted(q.options)}")
    return got


def judge(q: Question, answer: Any, evidence: Any = None) -> tuple[str, str]:
    """Pure marking: ``(status, feedback)`` for ``answer`` to ``q``. Raises only for notebook mistakes."""
    return _judge(q, answer, expected_answer(q, evidence))


def tolerance(q: Question, expected: float) -> float:
    """How far a number answer may sit from ``expected``: the bank's ``abs`` / ``rel`` (a floor: the precision the
    lab prints), or the evidence's own spread when the answer is a :class:`Measured` and its spread is wider."""
    floor = max(q.tolerance.get("abs", 0.0), q.tolerance.get("rel", 0.0) * abs(expected))
    return max(floor, getattr(expected, "spread", 0.0))


_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
_TIME_NAMES = {1.0: "s", 1e-3: "ms", 1e-6: "µs", 1e-9: "ns"}
_POWERS = {100.0: "100", 1e3: "10³ (1000)", 1e6: "10⁶"}
SLIP_REL = 0.02  # a rescaled answer within the tolerance or 2% of the key is the slip (the learner's own rounding)


def _is_percent(unit: str) -> bool:
    return "%" in unit or "percent" in unit.lower()


def _is_fraction(q: Question) -> bool:
    u = q.unit.lower()
    return "0..1" in u or "fraction" in u or "share" in u or "(0 to 1)" in q.prompt


def slip(q: Question, v: float, expected: float, tol: float) -> str | None:
    """The usual slip that turns ``v`` into the right answer, said plainly, or None: off by 10³ or 10⁶ (s, ms,
    µs: which unit ``v`` reads as), or by 100 (a fraction where a percent is asked, or the reverse)."""
    if not expected or not v or (v > 0) != (expected > 0):
        return None
    near = max(tol, SLIP_REL * abs(expected))
    for factor in (100.0, 1e3, 1e6):
        for k in (factor, 1 / factor):
            if abs(v / k - expected) > near:
                continue
            bigger = k > 1
            if factor == 100.0:
                if _is_percent(q.unit) and not bigger:
                    return (f"{v:g} looks like a fraction (0 to 1), 100 times too small: the question asks for a "
                            "percent, so multiply by 100.")
                if _is_fraction(q) and bigger:
                    return (f"{v:g} looks like a percent, 100 times too large: the question asks for a fraction "
                            "between 0 and 1, so divide by 100.")
                return (f"{v:g} is off by a factor of 100 {'too large' if bigger else 'too small'}: a fraction "
                        "written as a percent, or the reverse?")
            scale = _TIME_UNITS.get(q.unit.strip())
            if scale is not None:
                used = _TIME_NAMES.get(round(scale / k, 12))
                if used:
                    return (f"{v:g} reads as {used}, {_POWERS[factor]} times {'too large' if bigger else 'too small'}: "
                            f"the question asks for {q.unit}, so {'divide' if bigger else 'multiply'} by {factor:g}.")
            return (f"{v:g} is off by a factor of {_POWERS[factor]} {'too large' if bigger else 'too small'}: a unit "
                    f"slip{f' (the question asks for {q.unit})' if q.unit else ''}?")
    return None


def _judge(q: Question, answer: Any, expected: Any) -> tuple[str, str]:
    if is_unanswered(answer):
        return "unanswered", f"{q.id}: not answered yet."
    if q.kind == "choice":
        key = answer.strip().upper() if isinstance(answer, str) else answer
        if isinstance(key, str) and key not in q.options:
            low = {k.lower(): k for k in q.options}
            key = low.get(key.lower(), key)
        if not isinstance(key, str):
            why = f"{answer!r} is of type {type(answer).__name__}; answer with an option key as a string, e.g. {next(iter(q.options))!r}."
        elif key not in q.options:
            why = f"{answer!r} is not one of the options {', '.join(q.options)}."
        elif key == expected:
            return "correct", ""
        else:
            why = q.feedback.get(key, f"{key} is not the best answer.")
    elif q.kind == "number":
        v = _as_number(answer)
        unit = f" {q.unit}" if q.unit else ""
        if v is None:
            dot = " with a dot for decimals" if isinstance(answer, str) and "," in answer else ""
            why = f"{answer!r} is not a number; answer with a number{dot}{f' (unit: {q.unit})' if q.unit else ''}."
        else:
            tol = tolerance(q, expected)
            if abs(v - expected) <= tol:
                return "correct", ""
            side = "high" if v > expected else "low"
            why = slip(q, v, expected, tol) or q.feedback.get(side, f"{v:g}{unit} is too {side}.")
    else:
        word = normalise_word(answer) if isinstance(answer, str) else None
        if word is None:
            why = f"{answer!r} is of type {type(answer).__name__}; answer with one of the words: {', '.join(q.vocabulary)}."
        elif word not in q.vocabulary:
            why = f"{answer!r} is not one of the allowed words: {', '.join(q.vocabulary)}."
        elif word in expected:
            return "correct", ""
        else:
            why = q.feedback.get(word, f"{word} is not it.")
    return "wrong", f"{q.id}: not right. {why}"


# ---------------------------------------------------------------- function exercises
def _say(v: float | None, unit: str = "") -> str:
    return "None" if v is None else f"{v:.4g}{' ' + unit if unit else ''}"


def judge_function(q: Question, got: dict[str, float | str | None],
                   expected: list[tuple[Case, float]]) -> tuple[str, str]:
    """``(status, feedback)`` for what a learner's function gave on each case (``got``: case name -> number,
    None or a sentence, :func:`infralens_lab.quiz.functions.outputs`) against the reference's (``expected``).

    Unanswered when it gave None on every case (the scaffold's ``...``). Otherwise the first case, in order, whose
    value is not a number or lies outside the tolerance (the bank's floor, or the case's own spread when wider)
    is named with what the function gave, the right value and, for a number, the slip that explains it
    (:func:`slip`: µs for ms, a fraction for a percent) or the bank's low/high feedback. The right value of a
    held-out case is shown too: a constant cannot match every case, so showing it gives no answer away."""
    if expected and all(got.get(c.name) is None for c, _ in expected):
        first = expected[0][0].name
        return "unanswered", (f"{q.id}: not answered yet: your function returned None on {first!r} (the body is "
                              "still `...`?); make it return a number.")
    unit = f" {q.unit}" if q.unit else ""
    for i, (c, want) in enumerate(expected):
        where = f"on {c.name!r} (case {i + 1} of {len(expected)})"
        if c.name not in got:
            return "wrong", (f"{q.id}: not right {where}: no value was recorded for this case (the cases your check "
                             "ran were not these: was the recorded set changed?).")
        v = got[c.name]
        if v is None:
            return "wrong", f"{q.id}: not right {where}: your function returned None; return a number{unit}."
        if isinstance(v, str):
            fix = "" if v.startswith("raised") else f"; return a number{unit}"
            return "wrong", f"{q.id}: not right {where}: your function {v}{fix}."
        tol = tolerance(q, Measured(want, c.spread))
        if abs(v - want) <= tol:
            continue
        side = "high" if v > want else "low"
        why = slip(q, v, want, tol) or q.feedback.get(side, f"{v:g}{unit} is too {side}.")
        return "wrong", (f"{q.id}: not right {where}: your function gave {_say(v, q.unit)}, expected "
                         f"{want:.4g} ± {tol:.2g}{unit}. {why}")
    return "correct", ""


def _function_check(q: Question, answer: Any) -> tuple[str, str, dict]:
    """``(status, text, record)`` of a function exercise checked in the kernel: a non-callable answer (a typed
    constant) is wrong and says that a function is expected; a function is run on every case."""
    var = answer_variable(q.id)
    if is_unanswered(answer):
        return "unanswered", f"{q.id}: not answered yet.", answer_record(q.id, answer)
    if not callable(answer):
        shown = f"{answer:g}" if isinstance(answer, float) else repr(answer)[:80]
        return "wrong", (f"{q.id}: not right. {var} is {shown}, a value; this exercise asks for a function "
                         f"({var} = your_function, the function itself, not its result): the check runs it on the "
                         "lab's evidence and on held-out evidence."), answer_record(q.id, answer)
    expected = reference_values(q)
    if expected is None:
        raise ValueError(f"{q.id}: its cases provider {q.cases} found no evidence (no recording in this checkout?)")
    got = outputs(answer, [c for c, _ in expected], key_codes(load(q.reference, "reference function")))
    status, text = judge_function(q, got, expected)
    if status == "correct":
        first = expected[0][0]
        held = sum(c.held_out for c, _ in expected)
        text = (f"right on all {len(expected)} cases ({held} held out); on {first.name!r} it gives "
                f"{_say(got[first.name], q.unit)}")
    return status, text, function_record(q.id, got)


def _message(q: Question, status: str, text: str, evidence_answer: Any, stale: bool = False) -> str:
    pts = f"{_fmt_points(q.points)} point{'s' if q.points != 1 else ''}"
    if status == "correct" and q.kind == "function":
        return f"✓ {q.id}: {text}, {pts}. {q.explanation}"
    if status == "correct":
        derived = ""
        if q.derive is not None:
            shown = evidence_answer[0] if isinstance(evidence_answer, tuple) else evidence_answer
            derived = f" (from your evidence: {shown:g}{' ' + q.unit if q.unit else ''})" \
                if isinstance(shown, float) else f" (from your evidence: {shown})"
        return f"✓ {q.id}: right{derived}, {pts}. {q.explanation}"
    if status == "unanswered":
        if stale:
            return f"· {text} Fix the answer cell and run it again ({pts})."
        return f"· {text} Set the answer variable and run this cell again ({pts})."
    return f"✗ {text}\n  Hint: {q.hint}"


def answer_record(qid: str, answer: Any) -> dict:
    """``{"question": qid, "value": v}``: the judged answer as JSON. ``v`` is None when unanswered, the
    string itself, a float for a finite number (numpy and 0-d torch scalars included), else the answer's
    ``repr`` (cut to 200 characters), which the grader judges as the string it is."""
    if is_unanswered(answer):
        value = None
    elif isinstance(answer, str):
        value = answer
    else:
        try:
            value = None if isinstance(answer, bool) else float(answer)
        except Exception:  # whatever float() raises (a list, a tensor of many elements)
            value = None
        if value is None or not math.isfinite(value):
            value = repr(answer)[:200]
    return {"question": qid, "value": value}


def _publish(record: dict) -> None:
    """Show ``record`` as a display output of the running cell (in a Jupyter kernel only)."""
    try:
        from IPython import get_ipython  # optional: IPython, only here
        from IPython.display import publish_display_data  # optional: IPython, only here
    except ImportError:  # plain python3 (a GPU machine's script run): there is no cell output to write
        return
    shell = get_ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        publish_display_data({ANSWER_MIME: record, "text/plain": ""})


def _not_run_message(q: Question) -> str | None:
    """Feedback when the answer cell's last run stopped before assigning the answer (a SyntaxError, an
    exception above the assignment): the variable holds an older value, which is not judged."""
    why = notebook_guard.answer_not_run(answer_variable(q.id))
    if why is None:
        return None
    return f"{q.id}: {why.sentence()}; that old value is not checked."


def check(qid: str, answer: Any, evidence: Any = None) -> CheckResult:
    """Mark ``answer`` to question ``qid`` and print feedback; see the module docstring for grade mode.

    ``evidence`` (an Evidence, DataFrame or rows) is required for questions whose answer is
    derived from the notebook's evidence; a number answer is right within the question's
    tolerance (``|answer - expected| <= max(abs, rel * |expected|)``). For a function exercise (bank kind
    ``function``) ``answer`` is the learner's function itself: it is run on the lab's cases and held-out ones
    (:mod:`.functions`), each held to the reference within the tolerance, and ``evidence`` is not used.
    """
    q = question(qid)
    stale = _not_run_message(q)
    if q.kind == "function":  # the answer is a function, run on the lab's cases and held-out ones
        expected = None
        status, text, record = ("unanswered", stale, answer_record(qid, None)) if stale else _function_check(q, answer)
    else:
        expected = expected_answer(q, evidence)
        status, text = ("unanswered", stale) if stale else _judge(q, answer, expected)
        record = answer_record(qid, answer)
    result = CheckResult(qid, status, q.points if status == "correct" else 0, q.points,
                         _message(q, status, text, expected, stale=bool(stale)))
    print(result.message)
    _publish(record)
    if grade_mode() and status != "correct":
        raise AssertionError(result.message)
    return result
