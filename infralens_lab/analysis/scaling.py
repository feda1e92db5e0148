"""Data-parallel scaling on paper: collective bandwidth conventions, the weak-scaling identity, and a
multi-node MODEL of a ring all-reduce.

Bandwidth follows nccl-tests (``doc/PERFORMANCE.md``): **algbw** = bytes / time; for an all-reduce over n
ranks **busbw** = algbw · 2(n−1)/n, the rate each rank's link carries in a ring, comparable with the link's
peak at any n. GB/s = 1e9 B/s; times in seconds unless a name says ``_ms``.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..units import MiB

# link peaks per GPU and direction: NVLink 4 on H100/H200 SXM is 900 GB/s bidirectional (NVIDIA H200
# datasheet: 18 links x 25 GB/s each way); one 400 Gb/s NDR InfiniBand NIC per GPU is 50 GB/s.
NVLINK4_GBS = 450.0
IB_NDR_GBS = 50.0
LINK_PEAKS_GBS = {"nccl": ("NVLink 4 (H100/H200 SXM), per direction", NVLINK4_GBS)}
# GPUs (device names as torch prints them) whose NCCL all-reduces cross NVLink 4: the SXM H100 and the H200. Any other
# GPU's link (PCIe, an NVLink bridge, NVLink 3 or 5) is not in this table, so it gets no peak rather than Hopper's.
_NVLINK4_GPUS = r"h200|h100(?!.*pcie)"


def link_peak(backend: str, gpu_name: str | None) -> tuple[str, float | None]:
    """``(label, GB/s per direction)`` of the link a run's all-reduces cross: NVLink 4 for NCCL on an H100 SXM or
    H200 (:data:`LINK_PEAKS_GBS`), ``('', None)`` for gloo and for a GPU whose link this table does not know (its
    name, when known, is in the label). ``gpu_name`` None (bare rank dicts, no provenance) keeps the table's
    NCCL entry, labelled as assumed."""
    label, gbs = LINK_PEAKS_GBS.get(backend, ("", None))
    if gbs is None:
        return "", None
    if gpu_name is None:
        return f"{label} (assumed: the run names no GPU)", gbs
    if re.search(_NVLINK4_GPUS, gpu_name.lower()):
        return label, gbs
    return f"no link peak on file for {gpu_name}", None


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s: the buffer's size over the collective's time."""
    if seconds <= 0:
        raise ValueError(f"seconds={seconds}; expected > 0")
    return nbytes / seconds / 1e9


def busbw(algbw_gbs: float, n: int) -> float:
    """Bus bandwidth of an all-reduce (nccl-tests): ``algbw · 2(n−1)/n`` GB/s."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}; expected a whole number of ranks >= 1")
    return algbw_gbs * 2 * (n - 1) / n


# how a benchmark row was timed (its ``timing`` field; rows recorded before the field existed were host-timed: the
# measurement then timed every call on the host, between barriers)
TIMINGS = {"cuda_events": "CUDA events on the stream the all-reduces are issued from, many calls per event pair "
                          "(as nccl-tests)",
           "host": "host-timed: the host clock around one call and a synchronize, between barriers"}


def bench_table(bench: list[dict], n: int) -> pd.DataFrame:
    """One row per benchmarked all-reduce (``bytes``, ``seconds`` from the measurement): ``MiB``, ``ms``,
    ``algbw_GBps``, ``busbw_GBps`` over ``n`` ranks, and ``timing``: how the row was timed (:data:`TIMINGS`)."""
    rows = []
    for b in bench:
        a = algbw(b["bytes"], b["seconds"])
        timing = b.get("timing", "host")
        if timing not in TIMINGS:
            raise ValueError(f"benchmark row timing={timing!r}; expected one of {sorted(TIMINGS)}")
        rows.append({"bytes": int(b["bytes"]), "seconds": float(b["seconds"]), "MiB": b["bytes"] / MiB,
                     "ms": 1e3 * b["seconds"], "algbw_GBps": a, "busbw_GBps": busbw(a, n), "timing": timing})
    out = pd.DataFrame(rows)
    out.attrs["ranks"] = n
    return out


def largest_busbw(bench: pd.DataFrame, n: int | None = None) -> float:
    """busbw (GB/s) of the largest all-reduce in a table with ``bytes`` and ``seconds`` columns, on ``n``
    ranks (default ``bench.attrs['ranks']``): the number a link's peak is held against."""
    n = bench.attrs.get("ranks") if n is None else n
    if n is None or not {"bytes", "seconds"} <= set(bench.columns) or bench.empty:
        raise ValueError(f"largest_busbw needs rows with 'bytes' and 'seconds' and a rank count; got columns "
                         f"{list(bench.columns)}, ranks={n!r}")
    row = bench.loc[bench["bytes"].idxmax()]
    return busbw(algbw(float(row["bytes"]), float(row["seconds"])), int(n))


def fit_alpha_beta(bench: pd.DataFrame, n: int | None = None) -> dict:
    """Least-squares fit of the all-reduce time curve ``t = alpha + bytes · 2(n−1)/n / beta`` (nccl-tests' bus
    convention, so ``beta`` is a bus bandwidth comparable with busbw) to a table with ``bytes`` and ``seconds``
    (``n`` default ``bench.attrs['ranks']``), each row weighted by 1/t, so that a 10 µs call counts as much as a
    10 ms one (the sizes span five decades). Returns ``alpha_s`` (s per call), ``beta_gbs`` (GB/s), ``points``,
    ``residuals`` (relative, (measured − fit)/measured, one per row in size order), ``max_residual`` and
    ``rms_residual``, and ``timing`` (the rows' method, ``'mixed'`` when they differ). A fit whose alpha or beta
    comes out negative raises: the curve is then not ``alpha + bytes/beta`` (host timing noise at small sizes)."""
    n = bench.attrs.get("ranks") if n is None else n
    if n is None or not {"bytes", "seconds"} <= set(bench.columns):
        raise ValueError(f"fit_alpha_beta needs 'bytes' and 'seconds' columns and a rank count; got columns "
                         f"{list(bench.columns)}, ranks={n!r}")
    t = bench.sort_values("bytes")
    if t["bytes"].nunique() < 3:
        raise ValueError(f"fit_alpha_beta needs at least 3 distinct sizes; got {t['bytes'].nunique()} "
                         f"({list(t['bytes'])} B)")
    if (t["seconds"] <= 0).any():
        raise ValueError(f"fit_alpha_beta: times {list(t['seconds'])} s; expected every time > 0")
    x = t["bytes"].to_numpy(float) * 2 * (n - 1) / n if n > 1 else t["bytes"].to_numpy(float)
    y = t["seconds"].to_numpy(float)
    a = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    if alpha < 0 or inv_beta <= 0:
        raise ValueError(f"fit_alpha_beta: alpha = {alpha * 1e6:.1f} µs, 1/beta = {inv_beta:.3g} s/B on sizes "
                         f"{list(t['bytes'])} B; expected alpha >= 0 and beta > 0 (the curve is not alpha + bytes/beta)")
    res = (y - (alpha + x * inv_beta)) / y
    timings = set(t["timing"]) if "timing" in t.columns else {"host"}
    return {"alpha_s": float(alpha), "beta_gbs": float(1 / inv_beta / 1e9), "ranks": int(n), "points": len(t),
            "bytes": [int(b) for b in t["bytes"]], "residuals": [float(r) for r in res],
            "max_residual": float(np.abs(res).max()), "rms_residual": float(np.sqrt((res ** 2).mean())),
            "timing": timings.pop() if len(timings) == 1 else "mixed"}


def fit_sentence(fit: dict) -> str:
    """The fit in one line: alpha, beta, its residuals and the timing method of the rows it read."""
    def size(b):
        return f"{b / MiB:g} MiB" if b >= MiB else f"{b / 1024:g} KiB"

    return (f"t = alpha + bytes x 2(n-1)/n / beta over {fit['points']} sizes ({size(fit['bytes'][0])} to "
            f"{size(fit['bytes'][-1])}, n = {fit['ranks']}): alpha = {1e6 * fit['alpha_s']:.1f} µs, beta = "
            f"{fit['beta_gbs']:.1f} GB/s (bus); residuals {fit['rms_residual']:.0%} rms, {fit['max_residual']:.0%} at "
            f"most; rows timed: {TIMINGS.get(fit['timing'], fit['timing'])}.")


def scaling(t1_step_s: float, tn_step_s: float, n: int) -> dict:
    """Weak scaling (each rank keeps its batch): ``speedup`` = n·t1/tn in samples per second,
    ``efficiency`` = speedup / n."""
    s = n * t1_step_s / tn_step_s
    return {"speedup": s, "efficiency": s / n}


def weak_scaling_bound(exposed_fraction: float, n: int) -> float:
    """``n·(1 − f)``: the weak-scaling identity, not Amdahl's law. With ``f`` the share of the n-rank step
    during which communication runs under no compute (measured on the same steps as the step time), the
    speedup n·t1/tn equals n·(1 − f) exactly when everything else in the DDP step takes as long as one rank's
    step alone (t1 = tn − exposed). It is an upper bound when that rest takes at least as long as one rank
    alone (DDP adds gradient copies and competes for the GPU or the cores; it never removes compute); a
    measured speedup above it means f or the step times came from different steps, or the one-rank baseline
    ran slower than the DDP ranks' compute."""
    if not 0 <= exposed_fraction <= 1:
        raise ValueError(f"exposed_fraction={exposed_fraction}; expected a fraction in [0, 1]")
    return n * (1 - exposed_fraction)


def ring_allreduce_s(nbytes: float, n: int, busbw_gbs: float, latency_s: float = 0.0) -> float:
    """Time of a ring all-reduce of ``nbytes`` over n ranks whose slowest link sustains ``busbw_gbs``:
    ``2(n−1)/n · bytes / busbw + 2(n−1) · latency`` (seconds)."""
    return 2 * (n - 1) / n * nbytes / (busbw_gbs * 1e9) + 2 * (n - 1) * latency_s


def multinode_model(compute_s: float, backward_s: float, grad_bytes: float, hidden_fraction: float,
                    intra_busbw_gbs: float | None = None, gpus=(1, 2, 8, 64), gpus_per_node: int = 8,
                    inter_link_gbs: float = IB_NDR_GBS, achievable: float = 0.8, latency_s: float = 10e-6,
                    busbw_source: str = "", ddp_overhead_s: float = 0.0, calls: int = 1,
                    alpha_s: float | None = None, alpha_source: str = "") -> pd.DataFrame:
    """A MODEL, not a measurement: predicted step time at each GPU count (weak scaling: every GPU keeps its
    batch and its ``compute_s``). The ring all-reduce of ``grad_bytes`` (:func:`ring_allreduce_s`) runs at
    ``intra_busbw_gbs`` inside one node (the MEASURED bus bandwidth when given, else ``achievable`` × the
    NVLink peak) and at ``achievable`` × the NIC peak once the ring spans nodes (its slowest link, never above
    the in-node rate). At most ``hidden_fraction`` of it hides, and never more than ``backward_s`` (the
    backward compute it can hide under): hidden = min(fraction · comm, backward), step = compute + comm −
    hidden, so a step is never shorter than its compute nor than its communication. ``ddp_overhead_s`` is the
    compute a DDP rank does that one GPU alone does not (copying gradients into buckets and back, NCCL kernels
    taking SMs and memory bandwidth from the compute): added to every step with n >= 2 (measured at 2 GPUs by
    the caller, assumed the same at every size). ``calls``: all-reduces per step (DDP's buckets). Each call pays
    either ``alpha_s`` (a per-call latency fitted on a benchmark, :func:`fit_alpha_beta`, charged the same at every
    n: one rank count cannot say how it grows) or, without it, ``latency_s`` per ring step, 2(n−1) steps (assumed).
    Either is printed on the label (``alpha_source`` says where alpha came from). Returns ``gpus, link, busbw_GBps, comm_ms, hidden_ms,
    step_ms, efficiency`` with ``attrs['label']`` saying it is a model."""
    if not 0 <= hidden_fraction <= 1 or not 0 < achievable <= 1:
        raise ValueError(f"hidden_fraction={hidden_fraction}, achievable={achievable}; expected fractions in [0, 1]")
    if not 0 <= backward_s <= compute_s:
        raise ValueError(f"backward_s={backward_s} with compute_s={compute_s}; expected 0 <= backward <= compute")
    if not ddp_overhead_s >= 0:
        raise ValueError(f"ddp_overhead_s={ddp_overhead_s}; expected seconds >= 0")
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1 or not latency_s >= 0 or \
            (alpha_s is not None and not alpha_s >= 0):
        raise ValueError(f"calls={calls!r}, latency_s={latency_s!r}, alpha_s={alpha_s!r}; expected a whole number of "
                         f"all-reduces >= 1 and latencies >= 0 s")
    intra = intra_busbw_gbs if intra_busbw_gbs is not None else achievable * NVLINK4_GBS
    inter = min(achievable * inter_link_gbs, intra)
    rows = []
    for n in gpus:
        link, bw = ("NVLink (one node)", intra) if n <= gpus_per_node else ("network (across nodes)", inter)
        lat = alpha_s if alpha_s is not None else 2 * (n - 1) * latency_s
        comm = ring_allreduce_s(grad_bytes, n, bw, 0.0) + calls * lat if n > 1 else 0.0
        hid = min(hidden_fraction * comm, backward_s)
        step = compute_s + (ddp_overhead_s if n > 1 else 0.0) + comm - hid
        rows.append({"gpus": n, "link": link if n > 1 else "none", "busbw_GBps": bw if n > 1 else None,
                     "comm_ms": 1e3 * comm, "hidden_ms": 1e3 * hid, "step_ms": 1e3 * step,
                     "efficiency": compute_s / step})
    df = pd.DataFrame(rows)
    src = busbw_source or (f"{achievable:g} x NVLink {NVLINK4_GBS:g} GB/s (assumed)" if intra_busbw_gbs is None
                           else "measured")
    df.attrs["label"] = (f"MODEL (formula, not measured): ring all-reduce at {intra:.0f} GB/s in a node ({src}), "
                         f"{inter:.0f} GB/s across nodes ({achievable:g} x a {inter_link_gbs:g} GB/s NIC, assumed), "
                         f"{gpus_per_node} GPUs per node, {calls} all-reduce(s) per step, "
                         + (f"alpha = {1e6 * alpha_s:.1f} µs a call at every n ({alpha_source or 'given'})"
                            if alpha_s is not None else f"alpha = 2(n-1) x {1e6 * latency_s:g} µs a call (assumed)")
                         + f", up to {hidden_fraction:.0%} hidden but never more than "
                         f"the backward ({1e3 * backward_s:.1f} ms)"
                         + (f"; a DDP rank computes {1e3 * ddp_overhead_s:.1f} ms longer than one GPU alone (bucket "
                            f"copies, NCCL kernels sharing the GPU), the same at every size" if ddp_overhead_s else
                            "; DDP's own compute overhead not modelled"))
    return df
