"""Quiz checks for the labs: answers in variables, feedback for learners, grade mode for nbval.

A graded answer is a plain variable; the next cell checks it::

    ANSWER_Q1 = None   # e.g. "B"
    check("lab01.q1", ANSWER_Q1)
    check("lab04.q3", ANSWER_Q3, evidence=stalls_ev)   # right answer derived from the evidence

Outside grade mode ``check`` prints feedback and never raises for a learner's answer; with
``INFRALENS_GRADE=1`` (``pytest --infralens-grade``) a wrong or unanswered check raises
``AssertionError``. ``self_check(qid)`` is an optional widget. Banks live in
``quiz/banks/<lab>.json``; see docs/instructors.md for adding questions.
"""
from __future__ import annotations

from .bank import BankError, Question, all_questions, answer_variable, labs, load_bank, normalise_word, question
from .check import CheckResult, check, grade_mode, judge
from .derive import DerivationError, derivations, register_derivation
from .widgets import question_text, self_check

__all__ = ["BankError", "CheckResult", "answer_variable", "DerivationError", "Question", "all_questions", "check",
           "derivations", "grade_mode", "judge", "labs", "load_bank", "normalise_word", "question",
           "question_text", "register_derivation", "self_check"]
