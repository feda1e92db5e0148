"""Data-parallel arithmetic on per-rank traces: which collective belongs to which step, all-reduce vs
compute overlap, each collective's wait apart from its transfer, and the invariants every table must keep.

Every function takes :class:`~infralens_lab.parse.trace.Trace` objects (one per rank, N ranks) or plain
numbers; nothing here launches or measures. Times are microseconds (``_us``); ``start_us``/``end_us`` are
relative to each trace's first event, ``ts_us`` is the absolute clock the profiler used (the host clock, the
same for every process of one machine; CUPTI converts each GPU's timer to it).

What counts as communication and as compute (the backend that made the trace decides, :func:`backend_of`):

- **NCCL (GPU traces)**: an all-reduce is an ``nccl…AllReduce…`` kernel; compute is every kernel without
  ``nccl`` in its name (Holistic Trace Analysis's rule, ``hta/utils/utils.py:get_kernel_type``). Backward
  compute = the compute kernels launched from inside an ``autograd::engine::evaluate_function`` op.
- **gloo (CPU traces)**: an all-reduce is a ``gloo:all_reduce`` range on one of gloo's worker threads;
  backward compute = the ``autograd::engine::evaluate_function`` ops, minus the time they spend inside
  ``c10d::`` calls. Two CPU processes share the machine's cores: "overlapped" means "at the same time".

**Which step a collective belongs to** is the series' attribution rule (``parse.trace.Trace.gpu_step``): the
profiled step whose CPU range holds the call that enqueued it, never the step its start time falls in. An
NCCL kernel goes by its launch call (``correlation`` id; a trace whose NCCL kernels carry no correlated launch
is paired like gloo's). A gloo range is paired with the ``c10d::allreduce_`` call that enqueued it: the k-th
call with the k-th range, both in start order (gloo's two worker threads take work from one queue in order; two
collectives started within microseconds of each other on a loaded machine can swap, which :func:`align`'s
causality check then reports). **A step's window** is its CPU range on a gloo trace; on a GPU trace it is the time from
the end of the previous step's GPU work to the end of this step's (the first step: from its first GPU work),
because the CPU runs ahead. Communication and compute are clipped to the window, so a part never exceeds its
whole: exposed <= comm <= step (:func:`invariant_violations` checks it, with calls per step = DDP's buckets).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..parse.trace import Trace, step_gpu_work
from .intervals import hidden as _hidden
from .intervals import length as _length
from .intervals import subtract as _subtract
from .intervals import union as _union

BACKWARD_PREFIX = "autograd::engine::evaluate_function"
GLOO_ALLREDUCE = ("gloo:all_reduce", "gloo:allreduce")
C10D_ALLREDUCE = ("c10d::allreduce_",)
# the causality check's margin: a gloo trace's ranges share one host clock (the recorder rounds to 1 ns);
# NCCL kernel times come from each GPU's own timer converted to the host clock, which we allow 5 µs of error
CAUSALITY_TOL_US = {"gloo": 0.01, "nccl": 5.0}
COMM_WORDS = {"gloo": "gloo's all-reduce ranges on its worker threads (memory copies and TCP on loopback)",
              "nccl": "NCCL all-reduce kernels on NCCL's own CUDA stream (over NVLink)"}
EPS_US = 1e-6


def backend_of(trace: Trace) -> str:
    """``'nccl'`` for a trace with GPU activity, ``'gloo'`` for a CPU-only one."""
    return "nccl" if trace.has_gpu else "gloo"


def _is_allreduce_kernel(names: pd.Series) -> pd.Series:
    low = names.str.lower()
    return low.str.contains("nccl", regex=False) & low.str.replace("_", "", regex=False).str.contains("allreduce")


def _cpu_step_of(trace: Trace, t_us: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """The profiled step whose CPU range (same process) holds each time, -1 for none."""
    st = trace.steps()
    if st.empty or not len(t_us):
        return np.full(len(t_us), -1, dtype=np.int64)
    k = np.searchsorted(st["cpu_start_us"].to_numpy(), t_us, side="right") - 1
    kk = np.maximum(k, 0)
    ok = (k >= 0) & (t_us < st["cpu_end_us"].to_numpy()[kk]) & (st["pid"].to_numpy()[kk] == pid)
    return np.where(ok, kk, -1)


def comm_events(trace: Trace) -> pd.DataFrame:
    """The all-reduces of one rank in start order: ``name, tid, ts_us`` (absolute start), ``start_us``,
    ``end_us``, ``dur_us``, ``enqueue_us`` (the CPU call that enqueued it), ``host_us`` (the CPU time of the
    ``c10d::allreduce_`` call that issued it: on NCCL the call enclosing the kernel's launch, on gloo the call
    paired with the range; NaN when there is none), ``step`` (the profiled step whose range holds that call; -1
    for none) and ``seq`` (its order within the step). See the module doc."""
    return trace.memo(("distributed.comm_events",), lambda: _comm_events(trace)).copy()


def _comm_events(trace: Trace) -> pd.DataFrame:
    ev = trace.events
    cols = ["name", "tid", "ts_us", "start_us", "end_us", "dur_us", "enqueue_us", "host_us", "step", "seq"]
    c = ev[(ev["cat"] == "cpu_op") & ev["name"].isin(C10D_ALLREDUCE)].sort_values("start_us")
    if trace.has_gpu:
        k = ev[ev["cat"] == "kernel"]
        k = k[_is_allreduce_kernel(k["name"])].sort_values("start_us")
        rt = [trace.launcher.get(i) for i in k.index]
        if len(k) and all(r is None for r in rt) and len(c):  # no launch correlated: pair with the c10d calls
            out = _paired(trace, k, c, "NCCL all-reduce kernels")
        else:
            enq = np.array([ev.at[r, "start_us"] if r is not None else np.nan for r in rt], dtype=float)
            c10d = set(c.index)
            host = [next((float(ev.at[o, "dur"]) for o in trace.enclosing.get(r, []) if o in c10d), np.nan)
                    if r is not None else np.nan for r in rt]
            out = k.assign(enqueue_us=enq, host_us=np.array(host, dtype=float),
                           step=trace.gpu_step().reindex(k.index).to_numpy())
    else:
        g = ev[(ev["cat"] == "user_annotation") & ev["name"].isin(GLOO_ALLREDUCE)].sort_values("start_us")
        out = _paired(trace, g, c, "gloo:all_reduce ranges")
    out = out.rename(columns={"ts": "ts_us", "dur": "dur_us"})
    out["step"] = out["step"].astype("int64")
    out["seq"] = out.groupby("step").cumcount()
    return out[cols].reset_index(drop=True)


def _paired(trace: Trace, work: pd.DataFrame, calls: pd.DataFrame, what: str) -> pd.DataFrame:
    """``work`` (collectives in start order) with the ``c10d::allreduce_`` call that enqueued each: the k-th call
    with the k-th collective after the first call (work enqueued before the profiler started has no call)."""
    if len(calls):
        work = work[work["start_us"] >= calls["start_us"].iloc[0]]
    if len(work) != len(calls):
        raise ValueError(f"{len(calls)} c10d::allreduce_ calls but {len(work)} {what} after the first call; expected "
                         f"one per call (a trace cut before its last collective ended?)")
    enq = calls["start_us"].to_numpy(dtype=float)
    return work.assign(enqueue_us=enq, host_us=calls["dur"].to_numpy(dtype=float),
                       step=_cpu_step_of(trace, enq, calls["pid"].to_numpy()))


def step_windows(trace: Trace) -> pd.DataFrame:
    """One row per profiled step: ``step``, ``start_us``, ``end_us``, ``step_us`` and ``basis`` (``'cpu range'``
    on a gloo trace; ``'gpu work'`` on a GPU trace: previous step's GPU work end → this step's, the first step
    from its first GPU work). A GPU step that launched nothing has NaN times."""
    return trace.memo(("distributed.step_windows",), lambda: _step_windows(trace)).copy()


def _step_windows(trace: Trace) -> pd.DataFrame:
    if not trace.has_steps:
        raise ValueError("trace has no ProfilerStep ranges; expected a trace taken with a profiler schedule")
    if not trace.has_gpu:
        st = trace.steps()
        out = pd.DataFrame({"step": st["step"], "start_us": st["cpu_start_us"], "end_us": st["cpu_end_us"]})
        return out.assign(step_us=out["end_us"] - out["start_us"], basis="cpu range")
    w = step_gpu_work(trace)
    end = w["gpu_end_us"].to_numpy(dtype=float)
    start = np.concatenate([[w["gpu_start_us"].iloc[0]], end[:-1]])
    out = pd.DataFrame({"step": np.arange(len(w)), "start_us": start, "end_us": end})
    return out.assign(step_us=out["end_us"] - out["start_us"], basis="gpu work")


def _backward_gpu_rows(trace: Trace) -> list[int]:
    """The rows of the non-NCCL kernels launched from inside a backward op (launcher order). Vectorized: the
    row-by-row ``.at`` reads it replaces took most of a recorded 4-rank set's analysis time."""
    ev = trace.events
    k = ev.loc[ev["cat"] == "kernel", "name"].astype(str)
    kernels = set(k.index[~k.str.lower().str.contains("nccl", regex=False).to_numpy()])
    ops = ev.loc[ev["cat"] != "kernel", "name"].astype(str)
    backward = set(ops.index[ops.str.startswith(BACKWARD_PREFIX).to_numpy()])
    return [g for g, rt in trace.launcher.items()
            if g in kernels and any(i in backward for i in trace.enclosing.get(rt, []))]


def compute_intervals(trace: Trace, phase: str = "backward") -> list[tuple[float, float]]:
    """Merged compute intervals (µs, trace-relative) of one rank. ``phase='backward'``: backward only (see
    module doc); ``'all'``: every non-NCCL kernel on a GPU trace (HTA's set), or every op on the non-gloo
    threads of a CPU trace, ``c10d::`` calls cut out."""
    if phase not in ("backward", "all"):
        raise ValueError(f"phase={phase!r}; expected 'backward' or 'all'")
    return list(trace.memo(("distributed.compute_intervals", phase), lambda: _compute_intervals(trace, phase)))


def _compute_intervals(trace: Trace, phase: str) -> list[tuple[float, float]]:
    ev = trace.events
    if trace.has_gpu:
        if phase == "backward":
            k = ev.loc[_backward_gpu_rows(trace)]
        else:
            k = ev[ev["cat"] == "kernel"]
            k = k[~k["name"].str.lower().str.contains("nccl", regex=False)]
        return _union(zip(k["start_us"], k["end_us"], strict=True))
    gloo_tids = set(ev.loc[ev["name"].str.startswith("gloo:"), "tid"])
    ops = ev[(ev["cat"] == "cpu_op") & ~ev["tid"].isin(gloo_tids)]
    c10d = ops[ops["name"].str.startswith("c10d::")]
    ops = ops[ops["name"].str.startswith(BACKWARD_PREFIX)] if phase == "backward" else ops[~ops["name"].str.startswith("c10d::")]
    return _subtract(_union(zip(ops["start_us"], ops["end_us"], strict=True)), _union(zip(c10d["start_us"], c10d["end_us"], strict=True)))


def overlap(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> dict:
    """How much communication ran while compute ran: ``comm_us`` (merged), ``hidden_us`` (comm ∩ compute),
    ``exposed_us`` (comm with no compute under it), ``hidden_fraction`` = hidden/comm (None without comm)."""
    comm_us, hid = _hidden(comm, compute)
    return {"comm_us": comm_us, "hidden_us": hid, "exposed_us": comm_us - hid,
            "hidden_fraction": hid / comm_us if comm_us > 0 else None}


def clip(iv, lo: float, hi: float) -> list[tuple[float, float]]:
    """The parts of intervals ``iv`` inside ``[lo, hi]``."""
    return [(max(a, lo), min(b, hi)) for a, b in iv if b > lo and a < hi]


def step_intervals(trace: Trace) -> list[dict]:
    """Per profiled step of one rank, the intervals the overlap table is made of (µs, trace-relative):
    ``step``, ``window`` (start, end), ``comm`` (this step's all-reduces, clipped to the window, as recorded:
    possibly overlapping), ``backward`` and ``compute`` (merged, clipped), ``calls``."""
    comm, win = comm_events(trace), step_windows(trace)
    bwd, allc = compute_intervals(trace, "backward"), compute_intervals(trace, "all")
    out = []
    for w in win.itertuples(index=False):
        if not np.isfinite(w.step_us):
            continue
        mine = comm[comm["step"] == w.step]
        out.append({"step": int(w.step), "window": (float(w.start_us), float(w.end_us)),
                    "comm": clip(list(zip(mine["start_us"], mine["end_us"], strict=True)), w.start_us, w.end_us),
                    "backward": clip(bwd, w.start_us, w.end_us), "compute": clip(allc, w.start_us, w.end_us),
                    "calls": len(mine)})
    return out


def overlap_table(traces: list[Trace]) -> pd.DataFrame:
    """One row per (rank, profiled step) of N ranks' traces: ``step_us`` (see :func:`step_windows`),
    ``allreduce_calls`` (enqueued by the step), ``comm_us``, ``backward_us``, ``hidden_us`` and
    ``hidden_fraction`` (comm under backward compute), ``exposed_us`` (comm under no compute at all),
    ``exposed_fraction`` (exposed / step), ``hta_overlap`` (comm under any compute: HTA's definition on the
    same intervals), ``wait_us`` (the time this rank's collectives of the step spent waiting for the latest
    rank, :func:`step_waits`; NaN for one rank), ``kernels`` (GPU work launched by the step; NaN on CPU),
    ``basis``, and ``steady`` (False for the first profiled step: on a GPU trace its window is not a whole
    period, on any trace it holds the profiler's start; scaling tables use the steady steps only)."""
    if not traces:
        raise ValueError("overlap_table needs at least one rank's trace; got none")
    waits = step_waits(align(traces)) if len(traces) >= 2 else None
    rows = []
    for rank, tr in enumerate(traces):
        kernels = step_gpu_work(tr)["kernels"] if tr.has_gpu else None
        basis = "gpu work" if tr.has_gpu else "cpu range"
        for s in step_intervals(tr):
            a, b = s["window"]
            o_b, o_all = overlap(s["comm"], s["backward"]), overlap(s["comm"], s["compute"])
            rows.append({"rank": rank, "step": s["step"], "step_us": b - a, "allreduce_calls": s["calls"],
                         "comm_us": o_b["comm_us"], "backward_us": _length(s["backward"]),
                         "hidden_us": o_b["hidden_us"], "hidden_fraction": o_b["hidden_fraction"],
                         "exposed_us": o_all["exposed_us"], "exposed_fraction": o_all["exposed_us"] / (b - a),
                         "hta_overlap": o_all["hidden_fraction"],
                         "wait_us": float(waits.get((rank, s["step"]), 0.0)) if waits is not None else np.nan,
                         "kernels": int(kernels.iloc[s["step"]]) if kernels is not None else np.nan, "basis": basis,
                         "steady": s["step"] > 0})
    return pd.DataFrame(rows)


def steady_step_intervals(traces: list[Trace]) -> list[list[dict]]:
    """:func:`step_intervals` of every rank, steady steps only (after the first profiled step; all when one)."""
    out = []
    for t in traces:
        iv = step_intervals(t)
        out.append([s for s in iv if s["step"] > 0] or iv)
    return out


def exposed_share(intervals: list[list[dict]] | list[dict]) -> float:
    """The exposed-communication share of the profiled steps: Σ exposed / Σ step over every rank and step,
    from :func:`step_intervals` (one list per rank, or one flat list); exposed = comm time with no compute."""
    flat = [s for r in intervals for s in (r if isinstance(r, list) else [r])]
    if not flat:
        raise ValueError("exposed_share needs the step intervals of at least one step; got none")
    exposed = sum(overlap(s["comm"], s["compute"])["exposed_us"] for s in flat)
    return exposed / sum(s["window"][1] - s["window"][0] for s in flat)


# ---------------------------------------------------------------- ranks side by side
def align(traces: list[Trace], tolerance_us: float | None = None) -> pd.DataFrame:
    """Each collective on every rank, paired per (profiled step, order within the step): one row per
    (step, seq, rank) with ``start_us``/``end_us`` on the shared clock (µs from the earliest collective start of
    any rank, ``attrs['t0_us']`` on the absolute clock), ``wait_us`` = the latest rank's start −
    this rank's start (time spent waiting for the others), ``transfer_us`` = this rank's end − the latest
    start (the exchange itself, once everyone is in), and ``causality_gap_us`` = latest start − earliest
    end: a collective cannot finish anywhere before every rank entered it, so a gap above ``tolerance_us``
    (default :data:`CAUSALITY_TOL_US` of the backend) means the clocks disagree. ``attrs``: ``tolerance_us``,
    ``violations`` (collectives whose gap exceeds it), ``offset_us`` (median end of rank r − rank 0)."""
    if len(traces) < 2:
        raise ValueError(f"align needs per-rank traces of at least 2 ranks; got {len(traces)}")
    tol = CAUSALITY_TOL_US[backend_of(traces[0])] if tolerance_us is None else float(tolerance_us)
    comms = [comm_events(t) for t in traces]
    per_step = [c[c["step"] >= 0].groupby("step").size().to_dict() for c in comms]
    if any(p != per_step[0] for p in per_step):
        raise ValueError(f"ranks enqueued different all-reduces per profiled step {per_step}; expected the same "
                         f"sequence on every rank (profile the same steps on every rank)")
    keyed = [c[c["step"] >= 0].set_index(["step", "seq"]) for c in comms]
    t0 = min((float(k["ts_us"].min()) for k in keyed if len(k)), default=0.0)
    idx, n = keyed[0].index, len(traces)
    # (collective, rank) arrays, collectives in rank 0's order: one row per collective and rank, rank fastest
    start = np.stack([k["ts_us"].reindex(idx).to_numpy(dtype=float) for k in keyed], axis=1) - t0
    end = start + np.stack([k["dur_us"].reindex(idx).to_numpy(dtype=float) for k in keyed], axis=1)
    latest = start.max(axis=1, keepdims=True)  # (collectives, 1); n >= 2, so defined with no collective too
    gap = latest[:, 0] - end.min(axis=1)
    df = pd.DataFrame({"step": np.repeat(idx.get_level_values("step").to_numpy(dtype=np.int64), n),
                       "seq": np.repeat(idx.get_level_values("seq").to_numpy(dtype=np.int64), n),
                       "rank": np.tile(np.arange(n), len(idx)), "start_us": start.ravel(), "end_us": end.ravel(),
                       "wait_us": (latest - start).ravel(), "transfer_us": np.maximum(0.0, end - latest).ravel(),
                       "causality_gap_us": np.repeat(gap, n)})
    gaps = df.drop_duplicates(["step", "seq"])["causality_gap_us"]
    ends = df.pivot_table(index=["step", "seq"], columns="rank", values="end_us")
    df.attrs.update(tolerance_us=tol, t0_us=t0, violations=int((gaps > tol).sum()),
                    offset_us={r: float((ends[r] - ends[0]).median()) for r in range(1, len(traces))} if len(df) else {})
    return df


SPLIT_PARTS = ("host_us", "wait_us", "transfer_us")  # the parts of a collective's cost, summing to cost_us


def collective_split(traces: list[Trace]) -> pd.DataFrame:
    """What each collective cost each rank, in three parts that sum to the whole (µs), one row per (step, seq,
    rank) of the profiled steps: ``host_us``, the CPU time of the ``c10d::allreduce_`` call that issued it
    (the host's launch cost: bucket bookkeeping, the NCCL or gloo enqueue); ``wait_us``, its time on the
    communication stream (NCCL) or gloo thread before the last rank entered it, waiting for a peer
    (:func:`align`'s wait, clipped to the collective's duration); ``transfer_us``, the rest of its duration, the
    exchange once every rank is in; ``cost_us`` = host + wait + transfer (``dur_us`` = wait + transfer). No part
    is negative. Clip, not clock: where the clocks put the last rank's start after this rank's end (the causality
    gap :func:`align` reports), the whole duration counts as waiting. Raises ValueError for a collective with no
    ``c10d::allreduce_`` call found (a trace without CPU ops)."""
    al = align(traces)
    comms = [comm_events(t).set_index(["step", "seq"]) for t in traces]
    dur, host = np.full(len(al), np.nan), np.full(len(al), np.nan)
    for r, c in enumerate(comms):  # each rank's own collectives, looked up by (step, seq)
        mine = (al["rank"] == r).to_numpy()
        at = pd.MultiIndex.from_arrays([al.loc[mine, "step"], al.loc[mine, "seq"]])
        dur[mine] = c["dur_us"].reindex(at).to_numpy(dtype=float)
        host[mine] = c["host_us"].reindex(at).to_numpy(dtype=float)
    if np.isnan(host).any():
        bad = al.loc[np.isnan(host), ["rank", "step", "seq"]].iloc[0]
        raise ValueError(f"rank {bad['rank']} step {bad['step']} collective #{bad['seq']}: no c10d::allreduce_ call "
                         f"found for it ({int(np.isnan(host).sum())} such); expected one CPU call per collective "
                         "(a trace profiled without CPU ops?)")
    latest = al.groupby(["step", "seq"])["start_us"].transform("max").to_numpy()
    wait = np.clip(latest - al["start_us"].to_numpy(), 0.0, dur)
    out = al[["step", "seq", "rank"]].assign(host_us=host, wait_us=wait, transfer_us=dur - wait, dur_us=dur)
    return out.assign(cost_us=out["host_us"] + out["wait_us"] + out["transfer_us"])


def split_per_step(split: pd.DataFrame) -> pd.DataFrame:
    """:func:`collective_split` summed per rank and profiled step, then averaged over the steady steps (step >= 1;
    all when there is one): one row per rank, ``calls`` (collectives per step), ``host_ms``, ``wait_ms``,
    ``transfer_ms``, ``cost_ms`` (their sum) and ``per_call_transfer_us``. Sums of the collectives' own parts:
    collectives that run at the same time count twice (on gloo's two threads), so this is cost, not wall time."""
    steady = split[split["step"] > 0] if (split["step"] > 0).any() else split
    per = steady.groupby(["rank", "step"]).agg(calls=("seq", "size"), host_us=("host_us", "sum"),
                                                wait_us=("wait_us", "sum"), transfer_us=("transfer_us", "sum"),
                                                cost_us=("cost_us", "sum")).groupby("rank").mean()
    out = pd.DataFrame({"rank": per.index.astype(int), "calls": per["calls"].round().astype(int).to_numpy()})
    for c in ("host", "wait", "transfer", "cost"):
        out[f"{c}_ms"] = per[f"{c}_us"].to_numpy() / 1e3
    out["per_call_transfer_us"] = per["transfer_us"].to_numpy() / per["calls"].to_numpy()
    return out.reset_index(drop=True)


def step_waits(al: pd.DataFrame) -> pd.Series:
    """Per (rank, step): how long the rank had a collective waiting for a peer, the union of the intervals
    ``[start, start + wait]`` of its collectives in the step (µs; collectives run concurrently on gloo's two
    worker threads, so waits are merged, not added)."""
    return al.groupby(["rank", "step"]).apply(
        lambda g: _length(_union(zip(g["start_us"], g["start_us"] + g["wait_us"], strict=True))), include_groups=False)


def blocked_per_step(al: pd.DataFrame, rank: int) -> float:
    """Mean over the steady profiled steps (step >= 1; all when there is one) of :func:`step_waits` of
    ``rank`` (µs), from :func:`align`: how long per step this rank had a collective waiting for a peer. It is not
    the straggler's delay: once the first collective has waited for the late rank, each later one waits again
    while that rank's backward produces its next bucket, so a planted 10 ms straggler reads 15-16 ms here
    (the recorded NCCL sets). The straggler's delay itself is :func:`wait_at` ``(seq=0)`` (about 11 ms there).
    Named ``wait_per_step`` until issue 39 (docs/trace_definitions.md)."""
    w = step_waits(al)
    if rank not in w.index.get_level_values("rank"):
        raise ValueError(f"no collectives of rank {rank}; ranks present: {sorted(al['rank'].unique())}")
    mine = w.loc[rank]
    steady = mine[mine.index > 0] if (mine.index > 0).any() else mine
    return float(steady.mean())


def stragglers(al: pd.DataFrame) -> pd.DataFrame:
    """Who the others wait for, from :func:`align`: one row per rank, the likeliest straggler first. At each
    collective the rank that started last holds everyone up by ``[second-latest start, latest start]`` (the
    wait no other rank shares the blame for; with two ranks, the other's whole wait). Columns: ``rank``,
    ``collectives`` (per rank), ``last_at`` (how many it started last), ``last_share``, ``caused_ms_per_step``
    (the median over the steady profiled steps, step >= 1 or all when there is one, of the union of the waits it
    caused in the step), ``worst_seq`` (the collective of each step, by order, where its median caused wait is
    largest; -1 when it caused none) and ``worst_seq_ms`` (that median)."""
    need = {"step", "seq", "rank", "start_us"}
    if not need <= set(al.columns):
        raise ValueError(f"stragglers needs align()'s columns {sorted(need)}; got {sorted(al.columns)}")
    ranks = sorted(al["rank"].unique())
    steps = sorted(al["step"].unique())
    steady = [s for s in steps if s > 0] or steps
    caused = []  # (rank, step, seq, from_us, to_us)
    for (step, seq), g in al.groupby(["step", "seq"]):
        g = g.sort_values(["start_us", "rank"])
        last = g.iloc[-1]
        second = float(g["start_us"].iloc[-2]) if len(g) > 1 else float(last["start_us"])
        caused.append((int(last["rank"]), step, seq, second, float(last["start_us"])))
    c = pd.DataFrame(caused, columns=["rank", "step", "seq", "from_us", "to_us"])
    rows = []
    for r in ranks:
        mine = c[c["rank"] == r]
        per_step = [_length(_union(zip(m["from_us"], m["to_us"], strict=True))) for s in steady
                    for m in [mine[mine["step"] == s]]]
        by_seq = {q: float(np.median([float((g.loc[g["step"] == s, "to_us"] - g.loc[g["step"] == s, "from_us"]).sum())
                                      for s in steady])) for q, g in mine.groupby("seq")}
        worst = max(by_seq, key=lambda q: (by_seq[q], -q), default=-1)
        rows.append({"rank": int(r), "collectives": int((al["rank"] == r).sum()), "last_at": len(mine),
                     "last_share": len(mine) / max(1, int((al["rank"] == r).sum())),
                     "caused_ms_per_step": float(np.median(per_step)) / 1e3 if per_step else 0.0,
                     "worst_seq": int(worst) if by_seq.get(worst, 0.0) > 0 else -1,
                     "worst_seq_ms": by_seq.get(worst, 0.0) / 1e3})
    return pd.DataFrame(rows).sort_values(["caused_ms_per_step", "last_at", "rank"], ascending=[False, False, True]
                                          ).reset_index(drop=True)


def wait_at(al: pd.DataFrame, rank: int, seq: int = 0) -> float:
    """How long ``rank`` waited at the ``seq``-th collective of each steady profiled step (step >= 1; all when
    there is one), on average (µs): the latest rank's start − this rank's start, from ``start_us`` of
    :func:`align` (its other columns are not needed)."""
    mine = al[al["seq"] == seq]
    if mine.empty or rank not in set(mine["rank"]):
        raise ValueError(f"no collective #{seq} of rank {rank}; ranks {sorted(set(al['rank']))}, "
                         f"collectives per step {sorted(set(al['seq']))}")
    latest = mine.groupby("step")["start_us"].max()
    waits = latest - mine[mine["rank"] == rank].set_index("step")["start_us"]
    steady = waits[waits.index > 0] if (waits.index > 0).any() else waits
    return float(steady.mean())


# ---------------------------------------------------------------- invariants
def invariant_violations(table: pd.DataFrame, buckets: int | None = None) -> list[str]:
    """What breaks the rules every overlap table must keep, as sentences (empty when all hold): exposed <=
    comm <= step on every rank and step; all-reduce calls per step = ``buckets`` (DDP's bucket count) when
    given; kernels per step the same whole number in every profiled step of a rank (GPU traces)."""
    out = []
    for r in table.itertuples(index=False):
        if not (r.exposed_us <= r.comm_us + EPS_US and r.comm_us <= r.step_us + EPS_US):
            out.append(f"rank {r.rank} step {r.step}: exposed {r.exposed_us:.1f} µs, comm {r.comm_us:.1f} µs, step "
                       f"{r.step_us:.1f} µs; expected exposed <= comm <= step")
        if buckets is not None and r.allreduce_calls != buckets:
            out.append(f"rank {r.rank} step {r.step}: {r.allreduce_calls} all-reduce calls; expected {buckets} "
                       f"(DDP's buckets)")
    k = table.dropna(subset=["kernels"])
    for rank, g in k.groupby("rank"):
        if g["kernels"].nunique() != 1:
            out.append(f"rank {rank}: kernels per step {sorted(g['kernels'].astype(int))}; expected the same whole "
                       f"number in every profiled step")
    return out


# ---------------------------------------------------------------- one step's phases (the timeline)
def _gpu_launched_in(trace: Trace, prefix: str, step: int) -> list[tuple[float, float]]:
    """GPU intervals of the compute kernels of ``step`` whose launch call sits inside a range named ``prefix…``."""
    ev = trace.events
    rng = ev[(ev["cat"] == "user_annotation") & ev["name"].str.startswith(prefix)]
    g = trace.gpu_events("all")
    g = g[(g["step"] == step) & (g["cat"] == "kernel") & ~g["name"].str.lower().str.contains("nccl", regex=False)]
    out = []
    for i, row in g.iterrows():
        t = ev.at[trace.launcher[i], "start_us"] if i in trace.launcher else np.nan
        if ((rng["start_us"] <= t) & (t < rng["end_us"])).any():
            out.append((row["start_us"], row["end_us"]))
    return _union(out)


def phase_intervals(trace: Trace, step: int) -> dict[str, list[tuple[float, float]]]:
    """Absolute-clock intervals (µs) of one profiled step of one rank, for a timeline: ``forward`` (DDP's
    forward), ``backward compute``, ``all-reduce`` (this step's, clipped), ``optimizer``. On a GPU trace all
    four are GPU work (forward and optimizer: kernels launched inside those CPU ranges)."""
    s = next((x for x in step_intervals(trace) if x["step"] == step), None)
    if s is None:
        raise ValueError(f"no profiled step {step}; the trace has {len(trace.steps())}")
    a, b = s["window"]
    if trace.has_gpu:
        fwd, opt = (_gpu_launched_in(trace, p, step) for p in ("DistributedDataParallel.forward", "Optimizer.step"))
    else:
        ev = trace.events
        rng = ev[ev["cat"] == "user_annotation"]

        def ranges(prefix):
            r = rng[rng["name"].str.startswith(prefix)]
            return clip(list(zip(r["start_us"], r["end_us"], strict=True)), a, b)
        fwd, opt = ranges("DistributedDataParallel.forward"), ranges("Optimizer.step")
    out = {"forward": fwd, "backward compute": s["backward"], "all-reduce": _union(s["comm"]), "optimizer": opt}
    return {k: [(x + trace.t0, y + trace.t0) for x, y in v] for k, v in out.items()}


if __name__ == "__main__":
    from ..workloads.ddp import NO_CLI  # lazy: only for the message of `python -m` on this module

    raise SystemExit(NO_CLI.format(module="infralens_lab.analysis.distributed"))
