"""Per-lab glue: the setups, tables and figure inputs one notebook needs, so its cells stay thin."""
from __future__ import annotations

from .. import evidence
from ..quiz import check


def check_on(qid: str, answer, ev):
    """``quiz.check(qid, answer, evidence=ev)``, or a note instead when the evidence is not there."""
    if ev is None:
        print(f"{qid}: this question is checked against recorded evidence, which is missing here; "
              f"it cannot be marked until the recording exists.")
        return None
    return check(qid, answer, evidence=ev)


def store():
    """The recorded reference set, or None (after printing why) when there is none."""
    try:
        return evidence.reference()
    except evidence.EvidenceError as exc:
        print(f"No recorded evidence: {exc}")
        return None
