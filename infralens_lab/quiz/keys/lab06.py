"""Lab 06's grading providers: the evidence each derived question of ``banks/lab06.json`` is marked against,
rebuilt in the grader's process with the same analysis functions the lab's cells call (never the lab's glue).

Counts (q3, q5) come from a live DDP run of the lab's model, cap and accumulation (gloo on a CPU, NCCL on GPUs: the
same on every run), the lab's measurement cut to the config and ``no_sync`` run they read
(``measure.distributed.counts_spec``); the bucket plan (ex2) from the GPU-sized model's shapes; the straggler's wait (ex4) from the recorded
NCCL run, None (not marked) when the checkout has none. Exercises 1 and 3 are function exercises (issue 38): their
cases are the lab's recorded NCCL run, every other recorded NCCL set (held out: the 2-GPU H200 set and the 4-GPU one,
where 2(n-1)/n = 1.5, so busbw without the ring factor fails there) and perturbed copies of the lab's own evidence.
"""
from __future__ import annotations

import copy
import functools

import numpy as np

from infralens_lab.analysis import ddp_run
from infralens_lab.analysis import distributed as analysis_distributed
from infralens_lab.analysis.intervals import union
from infralens_lab.measure import distributed as measure_distributed
from infralens_lab.parse.ranks import RankRun, recorded_runs
from infralens_lab.workloads import ddp

EX2_CAP_MB = 100  # exercise 2: the GPU-sized model's buckets at this cap


@functools.lru_cache(maxsize=1)
def _live() -> RankRun:
    """The lab's measurement cut to what the count questions read, once per grading process (seconds on a small CPU)."""
    backend = "nccl" if ddp.gpu_count() >= 2 else "gloo"
    return RankRun(measure_distributed.run(measure_distributed.counts_spec(backend), world=2, backend=backend,
                                           timeout_s=300.0))


@functools.lru_cache(maxsize=1)
def _runs() -> tuple:
    """``((set name, RankRun), ...)``: every recorded NCCL set, the lab's own first (``parse.ranks.recorded_runs``:
    the default reference's order, the set ``recorded_run`` finds), loaded once per grading process."""
    return tuple(recorded_runs())


def _recorded() -> RankRun | None:
    runs = _runs()
    return runs[0][1] if runs else None


def bucket_counts():
    """q3: all-reduce calls per step and DDP's buckets per config (``ddp_run.sweep_counts``)."""
    return ddp_run.sweep_counts(_live())


def no_sync_counts():
    """q5: all-reduce calls per optimizer step with and without no_sync (``ddp_run.no_sync_counts``)."""
    return ddp_run.no_sync_counts(_live())


def gpu_model_plan():
    """ex2: the GPU-sized MLP's gradients in ready order and the cap (``ddp_run.plan_inputs``)."""
    return ddp_run.plan_inputs(measure_distributed.GPU_MODEL, EX2_CAP_MB)


def recorded_straggler():
    """ex4: the straggler config's collectives on the shared clock (``ddp_run.straggler_starts``)."""
    rec = _recorded()
    return ddp_run.straggler_starts(rec) if rec else None


# ---------------------------------------------------------------- function exercises (issue 38)
def _sets() -> list[tuple[str, RankRun, bool]]:
    """``[(set name, run, held_out)]``: the lab's own recorded NCCL run first, then every other recorded one."""
    return [(name, run, i > 0) for i, (name, run) in enumerate(_runs())]


def bench_cases():
    """Exercise 1's cases, each ``(bench,)``: an all-reduce benchmark table (``bytes``, ``seconds``; ``attrs['ranks']``
    n, :func:`~infralens_lab.analysis.ddp_run.bench_inputs`). The lab's recorded NCCL run, every other recorded set
    (held out: the 4-GPU set's ring factor is 1.5) and perturbed copies of the lab's table: the same table on 4 and on
    8 ranks (a busbw without 2(n-1)/n fails there), its rows in shuffled order (the last row is not the largest),
    and its largest all-reduce 4x slower (its busbw is then not the table's highest: the largest is asked for).
    None without a recording."""
    sets = _sets()
    if not sets:
        return None
    from ..functions import Case

    own_name, own_run, _ = sets[0]
    own = ddp_run.bench_inputs(own_run)
    out = [Case(f"all-reduce benchmark, {name} ({'held out' if held else 'this lab'})", (ddp_run.bench_inputs(run),),
                held_out=held) for name, run, held in sets]
    for n in (4, 8):
        t = own.copy()
        t.attrs["ranks"] = n
        out.append(Case(f"{own_name}'s table read as {n} ranks (perturbed, held out)", (t,), held_out=True))
    shuffled = own.iloc[np.random.default_rng(38).permutation(len(own))].reset_index(drop=True)
    shuffled.attrs["ranks"] = own.attrs["ranks"]
    out.append(Case(f"{own_name}'s table with its rows shuffled (perturbed, held out)", (shuffled,), held_out=True))
    slow = own.copy()
    slow.attrs["ranks"] = own.attrs["ranks"]
    slow.loc[slow["bytes"].idxmax(), "seconds"] *= 4
    out.append(Case(f"{own_name}'s table with its largest all-reduce 4x slower (perturbed, held out)", (slow,),
                    held_out=True))
    return out


def _intervals(run: RankRun) -> list[list[dict]]:
    return analysis_distributed.steady_step_intervals(run.traces(ddp_run.SCALING_CONFIG))


def _each_step(iv: list[list[dict]], edit) -> list[list[dict]]:
    """A deep copy of ``iv`` with ``edit(step)`` applied to every step (in place on the copy)."""
    out = copy.deepcopy(iv)
    for rank in out:
        for s in rank:
            edit(s)
    return out


def _overlapping(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Each interval as two kernels that overlap in its middle fifth (two streams): the same time covered."""
    return [p for a, b in pairs for p in ((a, a + 0.6 * (b - a)), (a + 0.4 * (b - a), b))]


def exposed_cases():
    """Exercise 3's cases, each ``(iv,)``: per rank, the steady steps' intervals (``window``, ``comm``, ``compute``,
    ..., :func:`~infralens_lab.analysis.distributed.steady_step_intervals` at the scaling config). The lab's recorded
    NCCL run, every other recorded set (held out) and perturbed copies of the lab's: every all-reduce under compute
    (the share is 0), the compute removed (it is comm / step), the intervals shuffled in each step, the compute split
    into overlapping kernels (a subtraction kernel by kernel counts their overlap twice), and one step made twice as
    long with nothing in its tail (a mean of per-step shares is not the share of the summed time). None without a
    recording."""
    sets = _sets()
    if not sets:
        return None
    from ..functions import Case

    own_name, own_run, _ = sets[0]
    own = _intervals(own_run)
    out = [Case(f"steady steps, {name} ({'held out' if held else 'this lab'})", (_intervals(run),), held_out=held)
           for name, run, held in sets]
    rng = np.random.default_rng(38)

    def hidden(s):
        s["compute"] = union(s["compute"] + s["comm"])

    def no_compute(s):
        s["compute"], s["backward"] = [], []

    def shuffle(s):
        for k in ("comm", "compute", "backward"):
            s[k] = [s[k][i] for i in rng.permutation(len(s[k]))]

    def overlapping(s):
        s["compute"] = _overlapping(s["compute"])

    longer = copy.deepcopy(own)
    a, b = longer[0][0]["window"]
    longer[0][0]["window"] = (a, b + (b - a))
    for what, edit in (("every all-reduce under compute", hidden), ("no compute at all", no_compute),
                       ("intervals shuffled in each step", shuffle), ("compute as overlapping kernels", overlapping)):
        out.append(Case(f"{own_name}'s steps, {what} (perturbed, held out)", (_each_step(own, edit),), held_out=True))
    out.append(Case(f"{own_name}'s steps, rank 0's first step twice as long, idle tail (perturbed, held out)",
                    (longer,), held_out=True))
    return out
