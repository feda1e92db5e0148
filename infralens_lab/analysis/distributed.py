"""Data-parallel arithmetic on per-rank traces: all-reduce vs backward overlap, clock alignment,
bucket plans, bus bandwidth, Amdahl's bound and a multi-node bandwidth MODEL.

Every function takes :class:`~infralens_lab.parse.trace.Trace` objects (one per rank,
parsed by that module) or plain numbers; nothing here launches or measures. Times are
microseconds (``_us``) unless a name says ``_ms`` or ``_s``; bytes are bytes (MiB = 2**20 B,
GB/s = 1e9 B/s).

What counts as communication and as compute:

- GPU traces (NCCL): a kernel whose name contains ``nccl`` is communication, every other kernel
  is computation (Holistic Trace Analysis's rule, ``hta/utils/utils.py:get_kernel_type``;
  memcpy/memset are neither). Backward compute = compute kernels launched from inside an
  ``autograd::engine::evaluate_function`` op.
- CPU traces (gloo): the ``gloo:all_reduce`` ranges on gloo's worker threads are communication;
  backward compute = the ``autograd::engine::evaluate_function`` ops, minus the time they spend
  inside ``c10d::`` calls (handing a bucket to gloo, or waiting on it). Two CPU processes share
  the same cores, so "overlapped" on a CPU means "at the same time", not "for free".

The overlap fraction is ``|comm ∩ compute| / |comm|`` over merged intervals: HTA's
``get_comm_comp_overlap`` definition (``hta/analyzers/communication_analysis.py``), which uses
all compute kernels; :func:`overlap_table` gives it beside the stricter backward-only number.
"""
from __future__ import annotations

import math

import pandas as pd

from ..parse.trace import Trace
from .intervals import hidden as _hidden
from .intervals import length as _length
from .intervals import subtract as _subtract
from .intervals import union as _union

from ..units import MiB
FIRST_BUCKET_BYTES = MiB  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES: DDP's first bucket is capped at 1 MiB
BACKWARD_PREFIX = "autograd::engine::evaluate_function"
COMM_KERNEL_KEY = "nccl"
GLOO_COMM = ("gloo:all_reduce", "gloo:allreduce")


# ---------------------------------------------------------------- intervals from one rank's trace
def comm_events(trace: Trace) -> pd.DataFrame:
    """The all-reduce intervals of one rank: ``name, tid, ts_us`` (absolute clock), ``start_us``,
    ``end_us``, ``dur_us`` (relative to the trace's first event), in start order. NCCL kernels on
    a GPU trace, else gloo's ``gloo:all_reduce`` ranges."""
    ev = trace.events
    if trace.has_gpu:
        sel = ev[(ev["cat"] == "kernel") & ev["name"].str.lower().str.contains(COMM_KERNEL_KEY)]
    else:
        sel = ev[(ev["cat"] == "user_annotation") & ev["name"].isin(GLOO_COMM)]
    out = sel[["name", "tid", "ts", "start_us", "end_us", "dur"]].rename(columns={"ts": "ts_us", "dur": "dur_us"})
    return out.sort_values("start_us").reset_index(drop=True)


def _backward_gpu_rows(trace: Trace) -> list[int]:
    ev = trace.events
    rows = []
    for g, rt in trace.launcher.items():
        if ev.at[g, "cat"] != "kernel" or COMM_KERNEL_KEY in ev.at[g, "name"].lower():
            continue
        if any(str(ev.at[i, "name"]).startswith(BACKWARD_PREFIX) for i in trace.enclosing.get(rt, [])):
            rows.append(g)
    return rows


def compute_intervals(trace: Trace, phase: str = "backward") -> list[tuple[float, float]]:
    """Merged compute intervals (µs, trace-relative) of one rank. ``phase='backward'``: backward
    only (see module doc); ``'all'``: every non-communication kernel on a GPU trace (HTA's
    set), or every op on the non-gloo threads of a CPU trace, ``c10d::`` calls cut out."""
    if phase not in ("backward", "all"):
        raise ValueError(f"phase={phase!r}; expected 'backward' or 'all'")
    ev = trace.events
    if trace.has_gpu:
        if phase == "backward":
            k = ev.loc[_backward_gpu_rows(trace)]
        else:
            k = ev[(ev["cat"] == "kernel") & ~ev["name"].str.lower().str.contains(COMM_KERNEL_KEY)]
        return _union(list(zip(k["start_us"], k["end_us"])))
    comm_tids = set(comm_events(trace)["tid"])
    ops = ev[(ev["cat"] == "cpu_op") & ~ev["tid"].isin(comm_tids)]
    c10d = ops[ops["name"].str.startswith("c10d::")]
    if phase == "backward":
        ops = ops[ops["name"].str.startswith(BACKWARD_PREFIX)]
    else:
        ops = ops[~ops["name"].str.startswith("c10d::")]
    return _subtract(_union(list(zip(ops["start_us"], ops["end_us"]))),
                     _union(list(zip(c10d["start_us"], c10d["end_us"]))))


def overlap(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> dict:
    """How much communication time ran while compute ran: ``comm_us`` (merged), ``hidden_us``
    (comm ∩ compute), ``exposed_us`` (comm with no compute under it) and ``hidden_fraction`` =
    hidden/comm (None when there is no communication)."""
    comm_us, hid = _hidden(comm, compute)
    exposed = comm_us - hid
    return {"comm_us": comm_us, "hidden_us": comm_us - exposed, "exposed_us": exposed,
            "hidden_fraction": (comm_us - exposed) / comm_us if comm_us > 0 else None}


def steps(trace: Trace) -> list[tuple[float, float]]:
    """The ``ProfilerStep#N`` windows of one rank (µs, trace-relative), in order."""
    ev = trace.events
    s = ev[(ev["cat"] == "user_annotation") & ev["name"].str.startswith("ProfilerStep")].sort_values("start_us")
    return list(zip(s["start_us"], s["end_us"]))


def _clip(iv, lo, hi):
    return [(max(a, lo), min(b, hi)) for a, b in iv if b > lo and a < hi]


def overlap_table(traces: list[Trace]) -> pd.DataFrame:
    """One row per (rank, profiled step): ``step_us``, ``allreduce_calls`` (started in the step),
    ``comm_us``, ``backward_us``, ``hidden_fraction`` (comm under backward compute),
    ``exposed_us`` (comm under no compute at all) and ``hta_overlap`` (comm under any compute:
    HTA's definition, computed here over the same intervals)."""
    rows = []
    for rank, tr in enumerate(traces):
        comm = comm_events(tr)
        bwd, allc = compute_intervals(tr, "backward"), compute_intervals(tr, "all")
        for i, (a, b) in enumerate(steps(tr)):
            mine = comm[(comm["start_us"] >= a) & (comm["start_us"] < b)]
            ci = list(zip(mine["start_us"], mine["end_us"]))
            o_b, o_all = overlap(ci, bwd), overlap(ci, allc)
            rows.append({"rank": rank, "step": i, "step_us": b - a, "allreduce_calls": len(mine),
                         "comm_us": o_b["comm_us"], "backward_us": _length(_clip(bwd, a, b)),
                         "hidden_fraction": o_b["hidden_fraction"], "exposed_us": o_all["exposed_us"],
                         "hta_overlap": o_all["hidden_fraction"]})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- aligning ranks
def align(traces: list[Trace]) -> pd.DataFrame:
    """Match the k-th all-reduce of every rank (DDP issues buckets in the same order everywhere)
    and check the clocks: one row per collective with each rank's absolute start/end (µs on the
    host clock the profiler used), ``end_spread_us`` (latest end − earliest end) and
    ``causality_gap_us`` = latest start − earliest end: a collective cannot finish on a rank
    before every rank has entered it, so a positive gap means the clocks disagree by at least
    that much. ``attrs['offset_us']``: median end difference of rank r vs rank 0 (an estimate of
    clock offset plus completion skew); ``attrs['violations']``: collectives with a positive gap."""
    if len(traces) < 2:
        raise ValueError(f"align needs per-rank traces of at least 2 ranks; got {len(traces)}")
    comms = [comm_events(t) for t in traces]
    counts = [len(c) for c in comms]
    if len(set(counts)) != 1:
        raise ValueError(f"ranks recorded different numbers of all-reduces {counts}; expected equal counts "
                         f"(profile the same steps on every rank)")
    rows = []
    for k in range(counts[0]):
        r = {"collective": k}
        for rank, c in enumerate(comms):
            r[f"start_r{rank}"] = float(c.at[k, "ts_us"])
            r[f"end_r{rank}"] = float(c.at[k, "ts_us"] + c.at[k, "dur_us"])
        starts = [r[f"start_r{i}"] for i in range(len(comms))]
        ends = [r[f"end_r{i}"] for i in range(len(comms))]
        r["end_spread_us"] = max(ends) - min(ends)
        r["causality_gap_us"] = max(starts) - min(ends)
        rows.append(r)
    df = pd.DataFrame(rows)
    df.attrs["offset_us"] = {rank: float((df[f"end_r{rank}"] - df["end_r0"]).median()) if len(df) else None
                             for rank in range(1, len(comms))}
    df.attrs["violations"] = int((df["causality_gap_us"] > 0).sum()) if len(df) else 0
    return df


# ---------------------------------------------------------------- buckets
def bucket_plan(grad_bytes_ready_order: list[int], cap_bytes: int, first_cap_bytes: int = FIRST_BUCKET_BYTES) -> list[int]:
    """Bytes per bucket as DDP packs gradients: tensors in the order their gradients become
    ready (reverse of registration for a plain stack), whole tensors only, a bucket closes once
    it holds at least its cap (the first bucket's cap is ``first_cap_bytes``, 1 MiB in torch).
    Mirrors ``torch.distributed``'s ``_compute_bucket_assignment_by_size`` for one dtype."""
    if cap_bytes <= 0:
        raise ValueError(f"cap_bytes={cap_bytes}; expected a positive number of bytes")
    buckets, cur, cap = [], 0, min(first_cap_bytes, cap_bytes)
    for b in grad_bytes_ready_order:
        cur += b
        if cur >= cap:
            buckets.append(cur)
            cur, cap = 0, cap_bytes
    if cur:
        buckets.append(cur)
    return buckets


def ledger_bucket_count(grad_bytes: int, bucket_mb: float) -> int:
    """The memory ledger's count of DDP buckets, ``1 + ceil(max(0, g − 1 MiB) / cap)``: bytes only,
    as if a tensor could be split across buckets (``analysis.ledger``'s bucket term)."""
    cap = round(bucket_mb * MiB)
    return 1 + math.ceil(max(0, grad_bytes - MiB) / cap)


# ---------------------------------------------------------------- bandwidth and scaling
def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s: the buffer's size over the all-reduce time."""
    if seconds <= 0:
        raise ValueError(f"seconds={seconds}; expected > 0")
    return nbytes / seconds / 1e9


def busbw(algbw_gbs: float, n: int) -> float:
    """Bus bandwidth (nccl-tests convention for all-reduce): ``algbw · 2(n−1)/n``, the rate each
    rank's link carries in a ring all-reduce, comparable to the link's peak for any n."""
    if n < 1:
        raise ValueError(f"n={n}; expected >= 1 ranks")
    return algbw_gbs * 2 * (n - 1) / n


def scaling(t1_step_s: float, tn_step_s: float, n: int) -> dict:
    """Weak scaling (each rank keeps its batch): ``speedup`` = n·t1/tn in samples per second,
    ``efficiency`` = speedup / n."""
    s = n * t1_step_s / tn_step_s
    return {"speedup": s, "efficiency": s / n}


def amdahl_bound(exposed_fraction: float, n: int) -> float:
    """Upper bound on the data-parallel speedup when a fraction ``exposed_fraction`` of the
    n-rank step is communication nothing hides: at most n·(1 − f) of n."""
    if not 0 <= exposed_fraction <= 1:
        raise ValueError(f"exposed_fraction={exposed_fraction}; expected a fraction in [0, 1]")
    return n * (1 - exposed_fraction)


def ring_allreduce_s(nbytes: float, n: int, busbw_gbs: float, latency_s: float = 0.0) -> float:
    """Time of a ring all-reduce of ``nbytes`` over n ranks whose slowest link sustains
    ``busbw_gbs``: ``2(n−1)/n · bytes / busbw + 2(n−1) · latency`` (seconds)."""
    return 2 * (n - 1) / n * nbytes / (busbw_gbs * 1e9) + 2 * (n - 1) * latency_s


# link peaks the MODEL starts from (per GPU, per direction): NVLink 4 on H100/H200 SXM is 900 GB/s
# bidirectional (NVIDIA H200 datasheet); one 400 Gb/s NDR InfiniBand NIC per GPU is 50 GB/s.
NVLINK4_GBS = 450.0
IB_NDR_GBS = 50.0


def multinode_model(compute_s: float, grad_bytes: float, hidden_fraction: float, gpus=(1, 2, 8, 64),
                    gpus_per_node: int = 8, intra_link_gbs: float = NVLINK4_GBS, inter_link_gbs: float = IB_NDR_GBS,
                    achievable: float = 0.8, latency_s: float = 10e-6) -> pd.DataFrame:
    """A MODEL, not a measurement: predicted step time at each GPU count. The ring all-reduce of
    ``grad_bytes`` (:func:`ring_allreduce_s`) runs at ``achievable`` × the NVLink peak inside one
    node and at ``achievable`` × the NIC peak once the ring spans nodes (its slowest link); a
    fraction ``hidden_fraction`` of it hides under ``compute_s`` (seconds of compute per step,
    the same on every GPU: weak scaling). Returns ``gpus, link, busbw_gbs, comm_s, step_s,
    efficiency`` with ``attrs['label']`` saying it is a model."""
    if not 0 <= hidden_fraction <= 1 or not 0 < achievable <= 1:
        raise ValueError(f"hidden_fraction={hidden_fraction}, achievable={achievable}; expected fractions in [0, 1]")
    rows = []
    for n in gpus:
        link, peak = ("NVLink (one node)", intra_link_gbs) if n <= gpus_per_node else ("network (across nodes)",
                                                                                       inter_link_gbs)
        bw = achievable * peak
        comm = ring_allreduce_s(grad_bytes, n, bw, latency_s) if n > 1 else 0.0
        step = compute_s + (1 - hidden_fraction) * comm
        rows.append({"gpus": n, "link": link if n > 1 else "none", "busbw_gbs": bw if n > 1 else None,
                     "comm_ms": 1e3 * comm, "step_ms": 1e3 * step, "efficiency": compute_s / step})
    df = pd.DataFrame(rows)
    df.attrs["label"] = (f"MODEL (formula, not measured): ring all-reduce at {achievable:g} x link peak "
                         f"(NVLink {intra_link_gbs:g} GB/s, NIC {inter_link_gbs:g} GB/s per direction), "
                         f"{gpus_per_node} GPUs per node, {hidden_fraction:.0%} of it hidden")
    return df
