"""Quiz checks for the labs: questions shown, answers in variables, feedback, and a grader.

Every question is shown by a ``self_check(qid)`` cell; the answer is a plain variable and the
next cell gives feedback::

    self_check("lab01.q1")
    ANSWER_Q1 = None   # e.g. "B"
    check("lab01.q1", ANSWER_Q1)
    check("lab04.q3", ANSWER_Q3, evidence=stalls_ev)   # right answer derived from the evidence

``check`` prints feedback and never raises for a learner's answer; with ``INFRALENS_GRADE=1``
(``pytest --infralens-grade``) a wrong or unanswered check also fails its cell. Neither decides
a grade: :mod:`.grader` reads each answer's final literal from the submitted file and judges it
in the grader's process (see docs/instructors.md). Banks live in ``quiz/banks/<lab>.json``.
"""
from __future__ import annotations

from .. import notebook_guard as _notebook_guard
from .bank import BankError, Question, all_questions, answer_variable, labs, load_bank, normalise_word, question
from .check import CheckResult, check, grade_mode, judge
from .derive import DerivationError, derivations, register_derivation
from .widgets import question_text, restore_self_checks, self_check

# The guard (ground floor) never imports the quiz: the quiz hands it the hook that rebuilds a reopened notebook's
# saved self-checks. In a notebook, the set-up cell's import also installs the guard (a plain `jupyter lab` has
# no kernel extension): one line of guidance for a NameError, and answer cells that did not run are not judged.
# Nothing outside IPython.
_notebook_guard.register_restore_hook(restore_self_checks)
_notebook_guard.install()


def load_ipython_extension(shell) -> None:
    """``--ext=infralens_lab.quiz``: the guard's kernel-start work (:func:`infralens_lab.notebook_guard.
    load_ipython_extension`) with the quiz's restore hook already registered, so a reopened notebook's saved
    self-checks are live before any cell runs."""
    _notebook_guard.load_ipython_extension(shell)


__all__ = ["BankError", "CheckResult", "DerivationError", "Question", "all_questions", "answer_variable", "check",
           "derivations", "grade_mode", "judge", "labs", "load_bank", "load_ipython_extension", "normalise_word",
           "question", "question_text", "register_derivation", "self_check"]
