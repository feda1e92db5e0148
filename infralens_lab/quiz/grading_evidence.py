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




# ---------------------------------------------------------------- lab 05
def _lab05_copies():
    from infralens_lab.labs_support import lab05

    st = lab05.store()
    trs = lab05.copy_traces(st) if st is not None else None
    return lab05, (lab05.copy_table(trs) if trs is not None else None)


def lab05_copies():
    """Lab 05: the copies-and-compute table of the recorded copy traces (hidden_fraction per mode)."""
    _, copies = _lab05_copies()
    return copies


def lab05_amdahl_pinned():
    """Lab 05: the pinned step's exposed-copy share and its Amdahl bound (recorded copy traces)."""
    lab05, copies = _lab05_copies()
    return lab05.amdahl_evidence(copies)


@functools.lru_cache(maxsize=1)
def lab05_live_pipeline():
    """Lab 05: the live two-stage pipeline table, depth 1 and 2 (sleeping stand-in stages of 20 and 30 ms,
    as in the notebook). A live timing, but of sleeps: the depth-2 overlap score lands near 1 on any
    machine, well inside the question's tolerance (0.1); about 0.5 s."""
    from infralens_lab.labs_support import lab05

    return lab05.pipeline_table(lab05.live_pipeline())


@functools.lru_cache(maxsize=1)
def lab05_compile_counts():
    """Lab 05: graph counts of the live torch.compile study on this CPU (counts only, stable on any machine;
    compiling takes tens of seconds, hence cached for the grading run)."""
    from infralens_lab.labs_support import lab05

    return lab05.compile_counts(lab05.live_compile())


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


# ---------------------------------------------------------------- lab 07
@functools.lru_cache(maxsize=1)
def lab07_live_ops():
    """Lab 07: the live ResNet-50 forward's aten ops on this machine (two profiled forwards, batch and size of
    the notebook). Self times vary run to run; the question asks only which op ranks first, which is the
    backend convolution by a wide margin."""
    from infralens_lab.labs_support import lab07
    from infralens_lab.measure.torch_trace import profile
    from infralens_lab.workloads.resnet import inference_step

    step = inference_step(batch=lab07.CPU_BATCH, size=lab07.CPU_SIZE, memory_format="channels_first")
    with lab07.quiet_stderr():
        tr = profile(step, wait=0, warmup=1, active=2)
    return tr.ops()


def _lab07_recorded():
    from infralens_lab.labs_support import lab07

    st = lab07.store()
    return lab07, st, (lab07.recorded_resnet(st) if st is not None else None)


def lab07_families_first():
    """Lab 07: GPU time by kernel family of the recorded channels_first ResNet-50 trace."""
    from infralens_lab.measure.top_ops import kernel_families

    _, _, recorded = _lab07_recorded()
    return kernel_families(recorded["channels_first"][0]) if recorded is not None else None


def lab07_change_by_family():
    """Lab 07: per kernel family, the change in GPU time between the recorded memory formats."""
    lab07, _, recorded = _lab07_recorded()
    return lab07.change_by_family(lab07.format_compare(recorded)) if recorded is not None else None


def lab07_smallest_k():
    """Lab 07: the smallest k with at most 1% false alarms in the recorded A/A ratios (tolerance 5%)."""
    lab07, st, _ = _lab07_recorded()
    gev = lab07.recorded_gates(st) if st is not None else None
    aa = gev.values.get("aa_ratios") if gev is not None else None
    ktab = lab07.k_table(aa, tolerance=0.05) if aa else None
    k = lab07.smallest_k(ktab) if ktab is not None else None
    return {"smallest_k": k} if k is not None else None
