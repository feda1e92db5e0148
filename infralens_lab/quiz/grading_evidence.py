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


def _lab02_tables():
    from infralens_lab import evidence
    from infralens_lab.labs_support import lab02

    try:
        ref = evidence.reference()
    except evidence.EvidenceError:
        return None, None
    _, ceil = lab02.ceilings_from(ref)
    if ceil is None:
        return None, None
    attn = lab02.load_counters(ref, "ncu_attention.csv")
    mm = lab02.load_counters(ref, "ncu_matmul.csv")
    check_tc = lab02.tensor_op_check(mm) if mm is not None else None
    kt = lab02.kernel_table([attn, mm], ceil, lab02.tensor_flops_per_op(check_tc))
    return ceil, kt


def lab02_ceilings():
    """Lab 02: measured ceilings against the datasheet (recorded)."""
    ceil, _ = _lab02_tables()
    return ceil.versus_datasheet() if ceil is not None else None


def lab02_kernels_on_roof():
    """Lab 02: the kernel table rows that have a fraction of the roof."""
    _, kt = _lab02_tables()
    return kt[kt["fraction_of_roof"].notna()] if kt is not None and len(kt) else None


def lab02_kernels():
    """Lab 02: the whole kernel table."""
    _, kt = _lab02_tables()
    return kt if kt is not None and len(kt) else None


def lab02_attention_flop_split():
    """Lab 02: CUDA-core vs tensor-core FLOPs per recorded attention kernel, from the raw counters."""
    from infralens_lab import evidence
    from infralens_lab.labs_support import lab02

    try:
        ref = evidence.reference()
    except evidence.EvidenceError:
        return None
    attn = lab02.load_counters(ref, "ncu_attention.csv")
    mm = lab02.load_counters(ref, "ncu_matmul.csv")
    if attn is None or mm is None:
        return None
    return lab02.flop_split(attn, lab02.tensor_flops_per_op(lab02.tensor_op_check(mm)))


@functools.lru_cache(maxsize=1)
def _lab03_step():
    from infralens_lab.labs_support import lab03

    return lab03, lab03.measure_live_step()


def lab03_ledger():
    """Lab 03: the measured ledger of TinyGPT's step (live, as in the notebook)."""
    lab03, meas = _lab03_step()
    return lab03.ledger_rows(meas)


def lab03_moments():
    """Lab 03: live bytes by moment of the same measured step."""
    lab03, meas = _lab03_step()
    return lab03.moments_table(meas)


def lab03_scaling():
    """Lab 03: the ledger's scaling table (a formula)."""
    from infralens_lab.labs_support import lab03

    return lab03.scaling()




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
