"""Evidence the grader marks derived questions against, rebuilt in the grader's own process.

A bank question with ``"derive"`` names one of these functions in its ``"evidence"`` field
(``"infralens_lab.quiz.grading_evidence:lab01_idle_by_cause"``). Each one repeats, step for
step, what its lab's notebook does to build the table the question is about, so the grader
computes the right answer from the same evidence the notebook shows on the same machine:
the recorded reference set on a CPU machine, live measurements where the lab measures live
(lab 03's TinyGPT step runs live on any machine; lab 02's ceilings are recorded). A function
returns None when the evidence is not there (no recording); the row then says so.

This module belongs to the grader (an app, like ``record`` and ``site``), above the labs:
it imports ``labs_support`` lazily, inside each function, so ``quiz``'s own modules never do.
Labs rewritten in round 2 keep their providers in :mod:`infralens_lab.quiz.keys` (issue 30: built from the
evidence store and ``analysis`` alone, no ``labs_support`` import); the other labs follow, then this module goes.
"""
from __future__ import annotations

import functools






# ---------------------------------------------------------------- lab 06
@functools.lru_cache(maxsize=1)
def _lab06_run():
    from infralens_lab.labs_support import lab06

    return lab06, lab06.live()


def lab06_bucket_counts():
    """Lab 06: buckets and all-reduce calls per step per bucket cap, from a live DDP run (two gloo ranks on a
    CPU, NCCL on two GPUs) of the notebook's model. Counts only: the same on every run; the run (20-60 s
    on a small CPU) is made once per grading process."""
    lab06, run = _lab06_run()
    return lab06.sweep_counts(run)


def lab06_no_sync_counts():
    """Lab 06: all-reduce calls per optimizer step with and without no_sync (counts, same live run)."""
    lab06, run = _lab06_run()
    return lab06.no_sync_counts(run)
