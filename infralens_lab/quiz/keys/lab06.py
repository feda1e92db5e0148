"""Lab 06's grading providers: the evidence each derived question of ``banks/lab06.json`` is marked against,
rebuilt in the grader's process with the same analysis functions the lab's cells call (never the lab's glue).

Counts (q3, q5) come from a live DDP run of the lab's measurement (gloo on a CPU, NCCL on GPUs: the same on
every run); the bucket plan (ex2) from the GPU-sized model's shapes; the exposed share and the straggler's wait
(ex3, ex4) from the recorded NCCL run, and busbw (ex1) from the recorded NCCL run with the most ranks (the held-out
4-rank set, where 2(n-1)/n = 1.5: an answer without the ring factor fails there), None (not marked) when the
checkout has none.
"""
from __future__ import annotations

import functools

from infralens_lab.analysis import ddp_run
from infralens_lab.analysis import distributed as analysis_distributed
from infralens_lab.measure import distributed as measure_distributed
from infralens_lab.parse.ranks import RankRun, recorded_run, widest_recorded_run
from infralens_lab.workloads import ddp

EX2_CAP_MB = 100  # exercise 2: the GPU-sized model's buckets at this cap


@functools.lru_cache(maxsize=1)
def _live() -> RankRun:
    """The lab's measurement, once per grading process (tens of seconds on a small CPU)."""
    backend = "nccl" if ddp.gpu_count() >= 2 else "gloo"
    return RankRun(measure_distributed.run(measure_distributed.spec_for(backend), world=2, backend=backend, timeout_s=300.0))


@functools.lru_cache(maxsize=1)
def _recorded() -> RankRun | None:
    return recorded_run()


def bucket_counts():
    """q3: all-reduce calls per step and DDP's buckets per config (``ddp_run.sweep_counts``)."""
    return ddp_run.sweep_counts(_live())


def no_sync_counts():
    """q5: all-reduce calls per optimizer step with and without no_sync (``ddp_run.no_sync_counts``)."""
    return ddp_run.no_sync_counts(_live())


def gpu_model_plan():
    """ex2: the GPU-sized MLP's gradients in ready order and the cap (``ddp_run.plan_inputs``)."""
    return ddp_run.plan_inputs(measure_distributed.GPU_MODEL, EX2_CAP_MB)


@functools.lru_cache(maxsize=1)
def _widest() -> RankRun | None:
    got = widest_recorded_run()
    return got[1] if got else None


def recorded_bench():
    """ex1: the all-reduce benchmark, bytes and seconds (``ddp_run.bench_inputs``), of the recorded NCCL run with
    the most ranks (``parse.ranks.widest_recorded_run``: the lab's held-out evidence); None without one."""
    rec = _widest()
    return ddp_run.bench_inputs(rec) if rec else None


def recorded_intervals():
    """ex3: the steady steps' intervals of every rank at the scaling config (``distributed.steady_step_intervals``)."""
    rec = _recorded()
    return analysis_distributed.steady_step_intervals(rec.traces(ddp_run.SCALING_CONFIG)) if rec else None


def recorded_straggler():
    """ex4: the straggler config's collectives on the shared clock (``ddp_run.straggler_starts``)."""
    rec = _recorded()
    return ddp_run.straggler_starts(rec) if rec else None
