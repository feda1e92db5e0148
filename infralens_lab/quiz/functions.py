"""Function exercises (issue 38): the learner hands in a function, not a number.

``check("lab01.ex1", idle_share)`` runs the learner's function on every case of the bank's ``cases`` provider and
holds each result to the bank's ``reference`` function on the same case. The cases are the lab's own evidence
**and held-out evidence**: the other GPU's recording and perturbed copies of the lab's traces or tables (idle gaps
stretched, a kernel made longer, rows shuffled, a window cut mid-interval). A typed constant cannot be right on all
of them, and the feedback names the first case that failed (:func:`infralens_lab.quiz.check.judge_function`).

* :class:`Case`: one named input (``args``, ``kwargs``), marked ``held_out`` when the lab does not show it.
* :func:`cases`: the provider's cases, validated, built once per process (the kernel's and the grader's alike).
* :func:`reference_values`: ``[(case, right value)]``, the reference function on copies of each case's inputs.
* :func:`outputs`: what the learner's function gives on each case: a number, None, or a sentence for anything
  else (``returned 'abc' (a str, not a number)``, ``raised ZeroDivisionError: division by zero``): an exception
  in the learner's code is caught here and named with its one-line message, never a traceback.
* :func:`function_record`: the record ``check`` publishes (``{"question", "value": {"cases": {name: value}}}``),
  which the grader reads from the run (``RUN=1``); with ``RUN=0`` no code runs and the exercise is not checked.
"""
from __future__ import annotations

import copy
import functools
import importlib
import math
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InfraLensError
from .bank import Question

MAX_CASES = 64        # a record holds at most this many cases
MAX_NAME = 200        # characters of a case's name
MAX_SAY = 300         # characters of what a function gave when it is not a number


class FunctionCaseError(InfraLensError, ValueError):
    """A function exercise's ``cases`` or ``reference`` cannot be loaded or is malformed; the message says what was
    seen and what was expected."""


@dataclass(frozen=True)
class Case:
    """One input a function exercise is checked on: ``name`` (how feedback names it, e.g. ``'bubble trace, H200
    recording (held out)'``), the positional ``args`` and keyword ``kwargs`` the function is called with,
    ``held_out`` (True when the lab does not show this case) and ``spread`` (the evidence's own half-width in the
    answer's unit: the case's tolerance is at least that)."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    held_out: bool = False
    spread: float = 0.0

    def call(self, fn: Callable) -> Any:
        """``fn`` on deep copies of this case's inputs, so that a function that edits its inputs in place cannot
        change the next call's."""
        return fn(*copy.deepcopy(self.args), **copy.deepcopy(self.kwargs))


def load(spec: str, what: str) -> Callable:
    """The function named ``'infralens_lab.module:function'``; FunctionCaseError when it does not load."""
    mod_name, _, fn_name = str(spec).partition(":")
    if not mod_name.startswith("infralens_lab.") or not fn_name.isidentifier():
        raise FunctionCaseError(f"{what} {spec!r}: expected 'infralens_lab.module:function'")
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as exc:
        raise FunctionCaseError(f"{what} {spec!r} cannot be loaded: {exc}") from None
    if not callable(fn):
        raise FunctionCaseError(f"{what} {spec!r} is a {type(fn).__name__}, expected a function")
    return fn


@functools.cache
def cases(spec: str) -> tuple[Case, ...] | None:
    """The cases ``spec``'s provider returns (called once per process, with no arguments), validated: a list of
    :class:`Case` with distinct names, at least two of them, at most :data:`MAX_CASES`. None when the provider
    finds no evidence (no recording in this checkout)."""
    got = load(spec, "cases provider")()
    if got is None:
        return None
    if not isinstance(got, (list, tuple)) or not all(isinstance(c, Case) for c in got):
        seen = type(got).__name__ if not isinstance(got, (list, tuple)) else \
            f"a list holding {sorted({type(c).__name__ for c in got})}"
        raise FunctionCaseError(f"cases provider {spec!r} returned {seen}; expected a list of quiz.functions.Case")
    names = [c.name for c in got]
    bad = [n for n in names if not isinstance(n, str) or not n.strip() or len(n) > MAX_NAME]
    dups = sorted({n for n in names if names.count(n) > 1})
    if bad or dups or not 2 <= len(got) <= MAX_CASES:
        raise FunctionCaseError(f"cases provider {spec!r} returned {len(got)} cases (names {names[:8]}); expected "
                                f"2 to {MAX_CASES} cases with distinct, non-empty names of at most {MAX_NAME} characters")
    return tuple(got)


_REFERENCE: dict[tuple, list] = {}  # (id, reference, cases) -> [(case, right value)], held for the process


def reference_values(q: Question) -> list[tuple[Case, float]] | None:
    """``[(case, right value)]`` for function exercise ``q``: its ``reference`` on each of its ``cases``, in order
    (a :class:`~infralens_lab.quiz.check.Measured`-like spread is left to the judge, from ``case.spread``). None
    when the cases provider finds no evidence. FunctionCaseError when the reference does not give a number.

    Computed once per process and then held in memory: ``make grade`` computes every key before any notebook runs
    (``pytest_collection_finish``), so a run that moves or rewrites the recorded sets changes no key.
    ``reference_values.cache_clear()`` forgets them (tests)."""
    key = (q.id, q.reference, q.cases)
    if key not in _REFERENCE:
        got = _reference_values(q)
        if got is None:
            return None
        _REFERENCE[key] = got
    return list(_REFERENCE[key])


def _cache_clear() -> None:
    _REFERENCE.clear()
    cases.cache_clear()


reference_values.cache_clear = _cache_clear  # type: ignore[attr-defined]


def _reference_values(q: Question) -> list[tuple[Case, float]] | None:
    if q.kind != "function":
        raise FunctionCaseError(f"{q.id} is a {q.kind!r} question, not a 'function' exercise")
    got = cases(q.cases)
    if got is None:
        return None
    ref = load(q.reference, "reference function")
    out = []
    for c in got:
        v = as_number(c.call(ref))
        if not isinstance(v, float):
            raise FunctionCaseError(f"{q.id}: the reference {q.reference} gave {v!r} on case {c.name!r}; "
                                    "expected a finite number")
        out.append((c, v))
    return out


def as_number(value: Any) -> float | str | None:
    """What a function gave, as a record holds it: a finite float (numpy and 0-d torch scalars included), None
    (None or ``...``: nothing written yet) or a sentence saying what it was instead."""
    if value is None or value is Ellipsis:
        return None
    if isinstance(value, (bool, str)):
        return f"returned {value!r} (a {type(value).__name__}, not a number)"[:MAX_SAY]
    try:
        v = float(value)
    except Exception:  # whatever float() raises: a list, a tensor of many elements, an object
        return f"returned {_short(value)} (a {type(value).__name__}, not a number)"[:MAX_SAY]
    if not math.isfinite(v):
        return f"returned {v} (not a finite number)"
    return v


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a learner's object whose repr fails
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


def error_text(exc: BaseException) -> str:
    """``'raised ZeroDivisionError: division by zero'``: an exception's type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    msg = lines[0] if lines else ""
    return f"raised {type(exc).__name__}" + (f": {msg}" if msg else "")[:MAX_SAY - 40]


KEYS_DIR = Path(__file__).resolve().parent / "keys"  # every function defined here is a grader's key


def delegates(*fns: Callable) -> Callable:
    """Decorator for a reference that hands the whole step to another function (``fix_bound`` to
    ``overlap.step_bound``): a learner's function that calls one of ``fns`` is caught like one that calls the
    reference itself (:func:`key_codes`)."""
    for f in fns:
        if not hasattr(f, "__code__"):
            raise FunctionCaseError(f"delegates({f!r}): expected Python functions (a key is caught by its code object)")

    def mark(ref: Callable) -> Callable:
        ref.__grader_delegates__ = tuple(fns)
        return ref
    return mark


def key_codes(reference: Callable) -> frozenset:
    """The code objects a learner's function must not call: the reference's and those it :func:`delegates` to
    (functions defined under ``quiz/keys/`` are caught by their file)."""
    return frozenset(f.__code__ for f in (reference, *getattr(reference, "__grader_delegates__", ()))
                     if hasattr(f, "__code__"))


class KeyCalledError(InfraLensError):
    """Raised inside a learner's function, at the call, when it calls a grader's key (:func:`outputs`)."""


class _Watch:
    """A profile hook (``sys.setprofile``) that notes the first call of a grader's key while a learner's function
    runs and raises :class:`KeyCalledError` there; ``hit`` names the key even when the learner's code catches it."""

    def __init__(self, codes: frozenset):
        self.codes, self.hit = codes, None

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if event == "call" and (code in self.codes or Path(code.co_filename).parent == KEYS_DIR):
            self.hit = self.hit or f"{frame.f_globals.get('__name__', '?')}.{code.co_qualname}"
            raise KeyCalledError(f"{self.hit} is the grader's key")


def outputs(fn: Callable, case_list: tuple[Case, ...] | list[Case],
            keys: frozenset = frozenset()) -> dict[str, float | str | None]:
    """``{case name: what fn gave}`` for every case, in order (see :func:`as_number`); an exception raised by
    ``fn`` becomes :func:`error_text`, so one failing case does not stop the others.

    ``fn`` runs under a profile hook (``sys.setprofile``, and ``threading.setprofile`` for threads it starts) that
    refuses a call of a grader's key: a code object in ``keys`` (:func:`key_codes`) or any function defined under
    ``quiz/keys/``. Such a case gives ``"called the grader's key ...: write the step yourself"``, whatever the
    function returned; so does a function that removes the hook. This stops a function that hands the step to
    the grader's own code, not one that forges the answer record (see docs/instructors.md)."""
    out: dict[str, float | str | None] = {}
    for c in case_list:
        args, kwargs = copy.deepcopy(c.args), copy.deepcopy(c.kwargs)  # outside the hook: the grader's own copying
        watch, before = _Watch(keys), sys.getprofile()
        threading.setprofile(watch)
        sys.setprofile(watch)
        try:
            got = as_number(fn(*args, **kwargs))
        except Exception as exc:  # the learner's code: any exception is reported with the case, not raised
            got = error_text(exc)
        finally:
            removed = sys.getprofile() is not watch
            sys.setprofile(before)
            threading.setprofile(None)
        if watch.hit:
            got = f"called the grader's key {watch.hit}: write the step yourself"[:MAX_SAY]
        elif removed:
            got = "removed the profile hook the check runs it under (sys.setprofile): not checked"
        out[c.name] = got
    return out


def function_record(qid: str, got: dict[str, float | str | None]) -> dict:
    """The answer record ``check`` publishes for a function: ``{"question": qid, "value": {"cases": got}}``."""
    return {"question": qid, "value": {"cases": dict(got)}}


def parse_cases(value: Any) -> tuple[bool, dict | None, str]:
    """``(ok, cases, why)`` for the ``value`` of a function record: an object of exactly ``cases``, mapping 1 to
    :data:`MAX_CASES` names (strings of at most :data:`MAX_NAME` characters) to a finite number, null or a string of
    at most :data:`MAX_SAY` characters. Anything else is refused with the reason."""
    if not isinstance(value, dict) or set(value) != {"cases"} or not isinstance(value["cases"], dict):
        return False, None, "the recorded value is an object but not {'cases': {case name: value}}"
    got = value["cases"]
    if not 1 <= len(got) <= MAX_CASES:
        return False, None, f"the record holds {len(got)} cases, expected 1 to {MAX_CASES}"
    for k, v in got.items():
        if not isinstance(k, str) or len(k) > MAX_NAME:
            return False, None, f"a case name is not a string of at most {MAX_NAME} characters"
        ok = v is None or (isinstance(v, str) and len(v) <= MAX_SAY) or (
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
        if not ok:
            return False, None, (f"case {k[:60]!r} holds a {type(v).__name__}; expected a finite number, null or a "
                                 f"string of at most {MAX_SAY} characters")
    return True, {k: (float(v) if isinstance(v, (int, float)) else v) for k, v in got.items()}, ""
