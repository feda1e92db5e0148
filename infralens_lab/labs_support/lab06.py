"""Lab 06 glue: run the DDP measurement (two gloo processes on a CPU, NCCL on two GPUs), say whether a
recorded NCCL set exists, and turn each rank's dict into the tables and the timeline figure the notebook shows.
The arithmetic lives in :mod:`infralens_lab.analysis.distributed`; the measurement in
:mod:`infralens_lab.measure.distributed`.
"""
from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass

import pandas as pd

from .. import evidence
from ..analysis import distributed as A
from ..analysis import ledger
from ..measure import distributed as D
from ..parse.trace import Trace, load_trace
from ..workloads import ddp as W
from ..measure.torch_trace import quiet_profiler_chatter

from ..units import MiB
RECORDED = "ddp_rank0"
PRACTICE = ("mystery", "reference")
GLOO_NOTE = ("gloo on CPU tensors: the all-reduce is memory copies and TCP on loopback between two processes that "
             "share this machine's cores, not NCCL kernels over NVLink. What still holds: DDP's hooks, buckets and "
             "call counts are the same code; the timeline shows when each bucket was handed over and how long the "
             "exchange took. What does not transfer: the times, the bandwidth, and 'overlapped = free' (here compute "
             "and communication compete for the same two cores).")


@contextlib.contextmanager
def quiet():
    """lab03's ``quiet_profiler_chatter`` for spawned ranks (they inherit file descriptor 2), also dropping the
    blank line two ranks' interleaved USDT lines can leave behind."""
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        with quiet_profiler_chatter():
            yield
    if buf.getvalue().strip():
        print(buf.getvalue().strip(), file=sys.stderr)


@dataclass
class Run:
    """One launch: each rank's dict (``ranks``), the backend, and a live Evidence for captions."""

    ranks: list
    backend: str
    ev: evidence.Evidence

    def config(self, label: str, rank: int = 0) -> dict:
        for c in self.ranks[rank]["configs"]:
            if c["label"] == label:
                return c
        raise KeyError(f"no config {label!r}; expected one of {[c['label'] for c in self.ranks[rank]['configs']]}")

    def traces(self, label: str) -> list[Trace]:
        """The per-rank traces of config ``label`` (or ``'no_sync'``/``'plain'``), parsed by torch_trace."""
        if label in ("no_sync", "plain"):
            return [load_trace(r["no_sync"][label]["trace"]) for r in self.ranks]
        return [load_trace(self.config(label, r)["trace"]) for r in range(len(self.ranks))]


def recorded_status() -> str:
    """Whether a recorded NCCL run for this lab exists in the reference set, and what to do if not."""
    try:
        store = evidence.reference()
        store.load(RECORDED)
        return f"Recorded NCCL run: present ({store.gpu})."
    except (evidence.EvidenceError, KeyError, FileNotFoundError, OSError) as exc:
        return ("Recorded NCCL run: MISSING. The two-GPU machine was not available when this lab was built, so "
                "no NCCL trace of this lab exists yet; everything below is the live gloo run plus formulas. "
                "`python -m infralens_lab record --only distributed` on a machine with 2 GPUs adds it "
                f"({type(exc).__name__}).")


def live(world: int = 2, timeout_s: float = 120.0) -> Run:
    """Run the lab's measurement now on the lab's small model (``D.CPU_SPEC``, so every question's premise holds):
    NCCL on ``world`` GPUs when there are that many, else ``world`` gloo processes on the CPU. The GPU-sized
    run is the recorder's (:func:`recorded_run`)."""
    backend, spec = ("nccl" if W.gpu_count() >= world else "gloo"), D.CPU_SPEC
    with quiet():  # the ranks inherit this process's stderr; Kineto's USDT lines vary per run
        ranks = D.run(spec, world=world, backend=backend, timeout_s=timeout_s)
    summary = {"world": world, "backend": backend, "configs": [c["label"] for c in ranks[0]["configs"]]}
    ev = evidence.live("ddp_live", summary, command=f"labs/06: lab06.live() -> measure.distributed.run "
                                                     f"({world} ranks, {backend})")
    return Run(ranks, backend, ev)


def recorded_run() -> Run | None:
    """The recorder's NCCL run (records ``ddp_rank0``, ``ddp_rank1``) as a :class:`Run`, or None when the
    reference set has none (:func:`recorded_status` says why)."""
    try:
        store = evidence.reference()
        evs = [store.load(f"ddp_rank{r}") for r in range(2)]
    except (evidence.EvidenceError, KeyError, FileNotFoundError, OSError):
        return None
    return Run([e.values for e in evs], evs[0].values.get("backend", "nccl"), evs[0])


# ---------------------------------------------------------------- timeline
PHASES = (("forward", "#4c72b0"), ("backward compute", "#55a868"), ("all-reduce", "#c44e52"), ("optimizer", "#8172b2"))


def phase_intervals(tr: Trace, step: int) -> dict[str, list[tuple[float, float]]]:
    """Absolute-clock intervals (µs) of one profiled step of one rank: forward (DDP's forward range),
    backward compute, all-reduce, optimizer (``Optimizer.step`` range). On a GPU trace forward and optimizer
    are the CPU ranges that launched them, while backward compute and all-reduce are kernels on the device."""
    a, b = A.steps(tr)[step]
    ev = tr.events

    def rng(prefix):
        s = ev[(ev["cat"] == "user_annotation") & ev["name"].str.startswith(prefix)]
        s = s[(s["start_us"] >= a) & (s["start_us"] < b)]
        return list(zip(s["start_us"], s["end_us"]))

    comm = A.comm_events(tr)
    comm = comm[(comm["start_us"] >= a) & (comm["start_us"] < b)]
    out = {"forward": rng("DistributedDataParallel.forward"),
           "backward compute": [iv for iv in A.compute_intervals(tr, "backward") if a <= iv[0] < b],
           "all-reduce": list(zip(comm["start_us"], comm["end_us"])), "optimizer": rng("Optimizer.step")}
    return {k: [(x + tr.t0, y + tr.t0) for x, y in v] for k, v in out.items()}


def timeline_figure(traces: list[Trace], step: int = 1, title: str = ""):
    """One row per rank and phase for one step, all ranks on the host clock both profilers used (ms from the
    earliest rank's step start)."""
    import matplotlib.pyplot as plt

    per = [phase_intervals(t, step) for t in traces]
    t0 = min(v[0][0] for p in per for v in p.values() if v)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 1.3 * len(traces)))
    for r, p in enumerate(per):
        for k, (name, color) in enumerate(PHASES):
            y = r * (len(PHASES) + 1) + k
            ax.broken_barh([((s - t0) / 1e3, (e - s) / 1e3) for s, e in p[name]], (y, 0.8), facecolors=color,
                           edgecolors="white", linewidth=0.5, label=name if r == 0 else None)
    ax.set_yticks([r * (len(PHASES) + 1) + 1.5 for r in range(len(traces))], [f"rank {r}" for r in range(len(traces))])
    ax.invert_yaxis()
    ax.set_xlabel("ms on the shared host clock (0 = first rank's step start)")
    ax.set_title(title or f"One DDP step per rank (profiled step {step})")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), fontsize=9, ncol=4, frameon=False)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- tables
def hidden_by_rank(traces: list[Trace]) -> pd.DataFrame:
    """Per rank, over all profiled steps: all-reduce time, the part under backward compute (ms), its fraction."""
    t = A.overlap_table(traces)
    g = t.assign(hidden_us=t["comm_us"] * t["hidden_fraction"].fillna(0)).groupby("rank")[["comm_us", "hidden_us"]].sum()
    g["hidden_fraction"] = g["hidden_us"] / g["comm_us"]
    return g.reset_index().assign(comm_ms=lambda d: d["comm_us"] / 1e3, hidden_ms=lambda d: d["hidden_us"] / 1e3)[
        ["rank", "comm_ms", "hidden_ms", "hidden_fraction"]]


def _per_step(t: pd.DataFrame) -> dict:
    return {"calls_per_step": t["allreduce_calls"].median(), "comm_ms": t["comm_us"].mean() / 1e3,
            "hidden_under_backward": (t["comm_us"] * t["hidden_fraction"].fillna(0)).sum() / t["comm_us"].sum(),
            "hta_overlap": (t["comm_us"] * t["hta_overlap"].fillna(0)).sum() / t["comm_us"].sum(),
            "exposed_ms": t["exposed_us"].mean() / 1e3, "profiled_step_ms": t["step_us"].mean() / 1e3}


def sweep_counts(run: Run, labels=None) -> pd.DataFrame:
    """Deterministic columns of the bucket sweep: cap, all-reduce calls per step, buckets and their bytes,
    gradient storages (16 = each grad its own tensor; = buckets when grads are views into them)."""
    rows = []
    for c in run.ranks[0]["configs"]:
        if labels is not None and c["label"] not in labels:
            continue
        t = A.overlap_table(run.traces(c["label"]))
        rows.append({"config": c["label"], "calls_per_step": int(t["allreduce_calls"].median()),
                     "buckets": len(c["bucket_bytes"]), "bucket_MiB": sum(c["bucket_bytes"]) / MiB,
                     "param_tensors": c["param_tensors"], "grad_storages": c["grad_storages"]})
    return pd.DataFrame(rows)


def sweep_times(run: Run, labels=None) -> pd.DataFrame:
    """Timed columns of the sweep (vary run to run): wall step, all-reduce per step, hidden fractions, DDP's own timers."""
    rows = []
    for c in run.ranks[0]["configs"]:
        if labels is not None and c["label"] not in labels:
            continue
        d = _per_step(A.overlap_table(run.traces(c["label"])))
        tm = c["ddp_timers_ns"]
        ddp_hidden = tm.get("avg_backward_compute_comm_overlap_time", 0) / tm["avg_backward_comm_time"] \
            if tm.get("avg_backward_comm_time") else None
        rows.append({"config": c["label"], "step_ms": 1e3 * c["step_s"], "comm_ms": d["comm_ms"],
                     "hidden_under_backward": d["hidden_under_backward"], "hta_overlap": d["hta_overlap"],
                     "ddp_reducer_overlap": ddp_hidden, "exposed_ms": d["exposed_ms"]})
    return pd.DataFrame(rows)


def bucket_prediction(run: Run) -> pd.DataFrame:
    """Buckets per cap: measured (DDP's rebuilt buckets), predicted by whole-tensor packing
    (``analysis.distributed.bucket_plan``) and by the memory ledger's bytes-only count; and the ledger's
    bucket term (bytes) next to the measured bucket bytes."""
    rows = []
    for c in run.ranks[0]["configs"]:
        if c["label"] in PRACTICE:
            continue
        m = W.MLPConfig(**c["model"])
        grads = [4 * n for n in reversed(m.param_sizes())]  # fp32, ready in reverse registration order
        cap = round(c["bucket_cap_mb"] * MiB)
        term, _ = ledger.bucket_term(ledger.Training(batch=1, seq=1, precision="fp32", dp=len(run.ranks),
                                                  bucket_mb=c["bucket_cap_mb"], grad_as_bucket_view=c["bucket_view"]),
                                  m.params)
        rows.append({"config": c["label"], "measured_buckets": len(c["bucket_bytes"]),
                     "whole_tensor_plan": len(A.bucket_plan(grads, cap, first_cap_bytes=cap)),
                     "ledger_count": A.ledger_bucket_count(sum(grads), c["bucket_cap_mb"]),
                     "ledger_bucket_MiB": term / MiB,
                     "measured_copy_MiB": 0.0 if c["grad_storages"] < c["param_tensors"] else sum(c["bucket_bytes"]) / MiB})
    return pd.DataFrame(rows)


def no_sync_counts(run: Run) -> pd.DataFrame:
    """All-reduce calls per optimizer step of ``accum`` micro-batches, with and without ``no_sync``."""
    accum = run.ranks[0]["no_sync"]["accum"]
    rows = []
    for name in ("plain", "no_sync"):
        t = A.overlap_table(run.traces(name))
        rows.append({"accumulation": name, "micro_batches": accum,
                     "allreduce_calls_per_optimizer_step": int(t["allreduce_calls"].median())})
    return pd.DataFrame(rows)


def bench_table(run: Run) -> pd.DataFrame:
    """The plain all-reduce benchmark of rank 0: size, time, algorithm and bus bandwidth (GB/s)."""
    n = len(run.ranks)
    rows = [{"MiB": b["bytes"] / MiB, "ms": 1e3 * b["seconds"], "algbw_GBs": A.algbw(b["bytes"], b["seconds"]),
             "busbw_GBs": A.busbw(A.algbw(b["bytes"], b["seconds"]), n)} for b in run.ranks[0]["bench"]]
    return pd.DataFrame(rows)


def scaling_table(run: Run, label: str = "cap 25 MiB") -> pd.DataFrame:
    """One rank alone vs ``world`` ranks with DDP (same per-rank batch): step times, speedup, efficiency,
    the exposed-communication fraction of the profiled DDP step and the Amdahl bound it implies."""
    n = len(run.ranks)
    t1, tn = run.ranks[0]["single"]["step_s"], run.config(label)["step_s"]
    t = A.overlap_table(run.traces(label))
    f = float((t["exposed_us"] / t["step_us"]).mean())
    s = A.scaling(t1, tn, n)
    return pd.DataFrame([{"ranks": n, "one_rank_step_ms": 1e3 * t1, "ddp_step_ms": 1e3 * tn,
                          "speedup": s["speedup"], "efficiency": s["efficiency"], "exposed_fraction": f,
                          "amdahl_bound": A.amdahl_bound(f, n)}])


def practice_times(run: Run) -> pd.DataFrame:
    """The practice project's two runs, step time only (what a user would report)."""
    return pd.DataFrame([{"run": lab, "step_ms": 1e3 * run.config(lab)["step_s"]} for lab in ("reference", "mystery")])


def model_inputs() -> dict:
    """Inputs of the multi-node MODEL for the GPU-sized MLP, from formulas: fp32 gradient bytes = 4·Ψ and
    compute = 6·Ψ·batch FLOPs at 40 % of the H200's fp32 datasheet peak (an assumption, shown)."""
    from ..analysis.hardware import PEAKS

    m = D.GPU_MODEL
    flops = 6 * m.params * m.batch
    return {"params": m.params, "grad_bytes": 4 * m.params, "flops": flops,
            "compute_s": flops / (0.4 * PEAKS["H200"].fp32), "assumption": "40% of H200 fp32 peak"}


def sweep_sentence(run: Run) -> str:
    """The bucket sweep in one sentence from this run's numbers (the worked reading of the timed table)."""
    t = sweep_times(run, [c["label"] for c in run.ranks[0]["configs"] if c["label"].startswith("cap")
                          and "view" not in c["label"]])
    hid = ", ".join(f"{r.config} {r.hidden_under_backward:.0%}" for r in t.itertuples())
    best = t.loc[t["step_ms"].idxmin(), "config"]
    return (f"This run: all-reduce time hidden under backward = {hid}. Fastest step: {best} "
            f"({t['step_ms'].min():.1f} ms vs {t['step_ms'].max():.1f} ms for the slowest).")
