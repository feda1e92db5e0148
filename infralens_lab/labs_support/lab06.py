"""Lab 06 glue: run the DDP measurement (gloo ranks on a CPU, NCCL on GPUs), find the recorded NCCL set, and
say things in the words of the backend that produced the evidence. Tables: :mod:`infralens_lab.analysis.ddp_run`;
the measurement: :mod:`infralens_lab.measure.distributed`; figures: :mod:`infralens_lab.present.distributed`.
"""
from __future__ import annotations

import contextlib
import functools
import io
import sys

from .. import evidence
from ..analysis import ddp_run
from ..analysis.ddp_run import (  # noqa: F401  (the notebook prints them)
    launch_delay_sentence,
    reducer_sentence,
    ring_sentence,
    scaling_sentence,
    straggler_sentence,
)
from ..analysis.scaling import link_peak as _link_peak
from ..measure import distributed
from ..measure.torch_trace import quiet_profiler_chatter
from ..parse import ranks
from ..parse.ranks import RankRun
from ..units import KiB, MiB
from ..workloads import ddp

WORDS = {
    "gloo": {"comm": "gloo's all-reduce ranges on its worker threads", "where": "two processes sharing this CPU's cores",
             "note": "gloo on CPU tensors: each all-reduce is memory copies and TCP on loopback between processes that "
                     "share this machine's cores, not NCCL kernels over NVLink. What holds on GPUs too: DDP's hooks, "
                     "its buckets and its call counts (the same code). What does not transfer: the times, the bandwidth, "
                     "and 'overlapped = free' (compute and communication compete for the same cores)."},
    "nccl": {"comm": "NCCL all-reduce kernels on NCCL's own stream", "where": "GPUs joined by NVLink",
             "note": "NCCL on GPUs: each all-reduce is an NCCL kernel on its own CUDA stream, moving gradients over "
                     "NVLink while the compute stream runs backward. Its stream first waits for the compute stream to "
                     "reach the point of the launch (ProcessGroupNCCL makes it wait on an event of the compute stream) "
                     "and for the collectives before it, so the kernel starts well after its rank's launch call "
                     "(measured below); once started it spins until every rank has joined, so its time holds the wait "
                     "for the latest rank."},
}


@contextlib.contextmanager
def quiet():
    """The profiler's native chatter silenced for spawned ranks (they inherit file descriptor 2)."""
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf), quiet_profiler_chatter():
        yield
    if buf.getvalue().strip():
        print(buf.getvalue().strip(), file=sys.stderr)


def live(world: int = 2, timeout_s: float = 300.0) -> RankRun:
    """Measure now: NCCL on ``world`` GPUs (the GPU-sized model) when there are that many, else ``world`` gloo
    processes on the CPU (the small model): :func:`~infralens_lab.measure.distributed.spec_for`."""
    backend = "nccl" if ddp.gpu_count() >= world else "gloo"
    with quiet():
        ranks = distributed.run(distributed.spec_for(backend), world=world, backend=backend, timeout_s=timeout_s)
    ev = evidence.live("ddp_live", {"world": world, "backend": backend},
                       command=f"labs/06: lab06.live() -> measure.distributed.run ({world} ranks, {backend})")
    return RankRun(ranks, ev)


def recorded_run() -> RankRun | None:
    """The recorder's NCCL run (``ddp_meta``, ``ddp_rank0`` …) from the first recorded set that has it (the
    default reference first), or None."""
    try:
        return ranks.recorded_run()
    except (evidence.EvidenceError, KeyError, OSError):
        return None


def recorded_status(rec: RankRun | None) -> str:
    if rec is not None:
        return f"Recorded NCCL run: present, {rec.world} ranks ({rec.ev.caption()})."
    return ("Recorded NCCL run: not in this checkout yet. Everything below is this machine's live run plus formulas; "
            "`python -m infralens_lab record --out data/recorded/2x-<gpu> --only device,distributed` on a machine "
            "with 2 or more GPUs adds it, and the cells marked 'recorded' then show it.")


def exercise_run(run: RankRun, rec: RankRun | None) -> tuple[RankRun, str]:
    """The run exercises 1, 3 and 4 work on, and why: the recorded NCCL run when the checkout has one (the grader
    marks against it), else this live run (checked here; the grader needs the recording)."""
    if rec is not None:
        return rec, f"Evidence: the recorded NCCL run ({rec.world} ranks)."
    return run, (f"Evidence: this live {run.backend} run (no NCCL recording in this checkout: your answer is checked "
                 "here against your own run; the grader marks it once the recording exists).")


def gradient_summary(c: dict) -> str:
    """The config's gradients in the order DDP saw them become ready, in one line."""
    g = ddp_run.ready_order_bytes(c)
    kinds = ", ".join(f"{n} of {b / KiB:g} KiB" if b < MiB else f"{n} of {b / MiB:g} MiB"
                      for b, n in sorted({b: g.count(b) for b in g}.items()))
    return (f"{len(g)} gradient tensors ({kinds}), {sum(g) / MiB:.2f} MiB in all; ready order: "
            + ", ".join(f"{b / KiB:g}" for b in g[:4]) + f", ... KiB ({len(g)} in all).")


def bucket_sentence(b) -> str:
    """Where the bucket rule and DDP's Reducer agree, from the bucket table."""
    same = int((b["ddp_buckets"] == b["rule_buckets"]).sum())
    sizes = int((b["ddp_MiB"] == b["rule_MiB"]).sum())
    return (f"The rule gives DDP's bucket count in {same} of {len(b)} setups and its bucket sizes in {sizes} of "
            f"{len(b)}. The copy the ledger predicts equals the bytes DDP copies in "
            f"{int(((b['ledger_copy_MiB'] - b['measured_copy_MiB']).abs() < 1e-9).sum())} of {len(b)}.")


def sweep_sentence(t) -> str:
    hid = ", ".join(f"{r.config} {r.hidden_under_backward:.0%}" for r in t.itertuples())
    best = t.loc[t["step_ms"].idxmin(), "config"]
    return (f"This run: all-reduce time hidden under backward = {hid}. Fastest profiled step: {best} "
            f"({t['step_ms'].min():.1f} ms; slowest {t['step_ms'].max():.1f} ms).")


@functools.lru_cache(maxsize=1)
def nccl_runs() -> tuple:
    """``((set name, RankRun), ...)``: every committed NCCL set (``parse.ranks.recorded_runs``), loaded once per
    kernel (the n = 2 and n = 4 tables, the practice diagnosis and the scaling verdicts all read them)."""
    return tuple(ranks.recorded_runs())


def scaling_by_set() -> list[str]:
    """:func:`~infralens_lab.analysis.ddp_run.scaling_by_set` over every committed NCCL set."""
    return ddp_run.scaling_by_set(list(nccl_runs()))


def held_out_run(xrun: RankRun) -> tuple[RankRun, str]:
    """Exercise 1's held-out evidence: the recorded NCCL run with the most ranks (``parse.ranks.widest_recorded_run``,
    what the grader marks against), else ``xrun`` itself (no recording in this checkout), and a line saying which."""
    got = ranks.widest_recorded_run()
    if got is None:
        return xrun, f"Held-out evidence: none recorded; your function is checked on this run ({xrun.world} ranks)."
    name, run = got
    return run, f"Held-out evidence: the recorded NCCL run {name} ({run.world} ranks): your function is graded there."


def link_peak(run: RankRun) -> tuple[float | None, str]:
    """``(GB/s, label)`` of the link the run's all-reduces cross (:func:`~infralens_lab.analysis.scaling.link_peak`,
    by the run's GPU); ``(None, '')`` for gloo on loopback, ``(None, why)`` for a GPU whose link is not on file."""
    label, gbs = _link_peak(run.backend, ddp_run.run_gpu(run))
    return gbs, label


def model_inputs(rec: RankRun | None) -> dict:
    """The multi-node MODEL's inputs (the recording's own model, else this lab's GPU-sized MLP): ``ddp_run.model_inputs``."""
    return ddp_run.model_inputs(rec, distributed.GPU_MODEL)
