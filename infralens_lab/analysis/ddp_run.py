"""The tables of one DDP measurement (:class:`~infralens_lab.parse.ranks.RankRun`: every rank's dict, live or
recorded), and the invariants the recorder holds it to before writing it.

Every table is built from the per-rank traces with :mod:`.distributed` (the attribution rule, clipped
windows), the bucket rule of :mod:`.buckets`, and the formulas of :mod:`.scaling`; nothing here measures.
Times in ms unless a column says otherwise; fractions are of all-reduce time or of step time as named.
"""
from __future__ import annotations

import pandas as pd

from ..parse.ranks import RankRun
from ..parse.trace import SYNC_NAMES, Trace
from ..stats import ratio_range, spread_of
from ..units import MiB, decimals_to_show
from . import distributed, ledger
from .bounds import BOUND_SLACK, bound_check
from .buckets import bucket_plan
from .hardware import PEAKS
from .scaling import bench_table, fit_alpha_beta, largest_busbw, link_peak, scaling, weak_scaling_bound

PRACTICE = ("mystery", "reference")
SCALING_CONFIG = "cap 25 MiB"  # the config the scaling table, its f and exercise 3 are measured on


def table(run: RankRun, label: str) -> pd.DataFrame:
    """:func:`.distributed.overlap_table` of config ``label`` (kept on the run: parsing is the slow part)."""
    key = ("table", label)
    if key not in run._traces:
        run._traces[key] = distributed.overlap_table(run.traces(label))
    return run._traces[key]


def steady(t: pd.DataFrame) -> pd.DataFrame:
    """The steady rows of an overlap table (profiled steps after the first), or all rows when only one step."""
    s = t[t["steady"]]
    return s if len(s) else t


def calls_per_step(t: pd.DataFrame) -> int:
    """All-reduce calls per profiled step: the one value every rank and step shows (ValueError if they differ)."""
    calls = sorted(set(t["allreduce_calls"]))
    if len(calls) != 1:
        raise ValueError(f"all-reduce calls per step differ across ranks and steps: {calls}; expected one number")
    return int(calls[0])


def sweep_counts(run: RankRun, labels=None) -> pd.DataFrame:
    """The sweep's counts (the same on every run): cap, all-reduce calls per step, DDP's buckets and their
    bytes, parameter tensors and gradient storages (one per tensor; one per bucket with bucket views)."""
    rows = []
    for c in run.ranks[0]["configs"]:
        if labels is None or c["label"] in labels:
            rows.append({"config": c["label"], "calls_per_step": calls_per_step(table(run, c["label"])),
                         "buckets": len(c["bucket_bytes"]), "bucket_MiB": sum(c["bucket_bytes"]) / MiB,
                         "param_tensors": c["param_tensors"], "grad_storages": c["grad_storages"]})
    return pd.DataFrame(rows)


def _weighted(t: pd.DataFrame, col: str) -> float | None:
    w = t["comm_us"].sum()
    return float((t["comm_us"] * t[col].fillna(0)).sum() / w) if w > 0 else None


def sweep_times(run: RankRun, labels=None) -> pd.DataFrame:
    """The sweep's times (they move run to run), per config over every rank and steady profiled step: ``step_ms``
    (profiled steps), ``comm_ms``, ``exposed_ms``, ``wait_ms`` per step; hidden fractions (under backward, HTA's
    under any compute, DDP's own reducer timers); ``timed_step_ms`` (unprofiled, timed separately)."""
    rows = []
    for c in run.ranks[0]["configs"]:
        if labels is not None and c["label"] not in labels:
            continue
        t, tm = steady(table(run, c["label"])), c["ddp_timers_ns"]
        rows.append({"config": c["label"], "step_ms": t["step_us"].mean() / 1e3, "comm_ms": t["comm_us"].mean() / 1e3,
                     "exposed_ms": t["exposed_us"].mean() / 1e3, "wait_ms": t["wait_us"].mean() / 1e3,
                     "hidden_under_backward": _weighted(t, "hidden_fraction"), "hta_overlap": _weighted(t, "hta_overlap"),
                     "ddp_reducer_overlap": tm.get("avg_backward_compute_comm_overlap_time", 0) / tm["avg_backward_comm_time"]
                     if tm.get("avg_backward_comm_time") else None, "timed_step_ms": 1e3 * c["step_s"]})
    return pd.DataFrame(rows)


def reducer_spans(run: RankRun) -> pd.DataFrame:
    """DDP's reducer timer spans per config and rank, beside that rank's steady profiled step (ms). ``comm_ms`` and
    ``compute_ms`` are running averages (``avg_backward_comm_time``, ``avg_backward_compute_time``) over the
    iterations DDP samples: the first ten, then every hundredth (torch's ``Logger::set_runtime_stats_and_log``),
    its first iterations included. ``longer_than_step``: an average span longer than the whole steady step, which
    no steady iteration can have, so that average includes iterations that were not steady ones."""
    rows = []
    for rank, r in enumerate(run.ranks):
        for c in r["configs"]:
            tm = c.get("ddp_timers_ns") or {}
            if not tm.get("avg_backward_comm_time"):
                continue
            t = steady(table(run, c["label"]))
            step = float(t.loc[t["rank"] == rank, "step_us"].mean()) / 1e3
            comm, compute = tm["avg_backward_comm_time"] / 1e6, tm.get("avg_backward_compute_time", 0) / 1e6
            rows.append({"config": c["label"], "rank": rank, "comm_ms": comm, "compute_ms": compute, "step_ms": step,
                         "longer_than_step": max(comm, compute) > step})
    return pd.DataFrame(rows, columns=["config", "rank", "comm_ms", "compute_ms", "step_ms", "longer_than_step"])


def ready_order_bytes(c: dict) -> list[int]:
    """The config's gradient sizes (bytes) in the order DDP saw them become ready (its logging data);
    reverse registration order when the run did not record it."""
    sizes, order = c["param_bytes"], c.get("grad_ready_order") or []
    return [sizes[i] for i in order] if sorted(order) == list(range(len(sizes))) else sizes[::-1]


def bucket_table(run: RankRun) -> pd.DataFrame:
    """Per config: DDP's buckets (count and MiB each, from its Reducer), the one bucket rule's plan on the same
    gradients in the same ready order (:func:`.buckets.bucket_plan`), and the memory ledger's bucket bytes
    (``ledger.bucket_term``) beside the bytes DDP copies (0 when grads are views into the buckets)."""
    rows = []
    for c in run.ranks[0]["configs"]:
        plan = bucket_plan(ready_order_bytes(c), c["bucket_cap_mb"])
        term, _ = ledger.bucket_term(ledger.Training(batch=1, seq=1, precision="fp32", dp=run.world,
                                                     bucket_mb=c["bucket_cap_mb"], grad_as_bucket_view=c["bucket_view"]),
                                     sum(c["param_bytes"]) // 4)
        rows.append({"config": c["label"], "ddp_buckets": len(c["bucket_bytes"]), "rule_buckets": len(plan),
                     "ddp_MiB": ", ".join(f"{b / MiB:.2f}" for b in c["bucket_bytes"]),
                     "rule_MiB": ", ".join(f"{b / MiB:.2f}" for b in plan), "ledger_copy_MiB": term / MiB,
                     "measured_copy_MiB": 0.0 if c["grad_storages"] < c["param_tensors"] else sum(c["bucket_bytes"]) / MiB})
    return pd.DataFrame(rows)


def no_sync_counts(run: RankRun) -> pd.DataFrame:
    """All-reduce calls in one optimizer step of ``accum`` micro-batches, with and without ``no_sync``."""
    accum = run.ranks[0]["no_sync"]["accum"]
    return pd.DataFrame([{"accumulation": name, "micro_batches": accum,
                          "allreduce_calls_per_optimizer_step": calls_per_step(table(run, name))}
                         for name in ("plain", "no_sync")])


def bench(run: RankRun) -> pd.DataFrame:
    """Rank 0's all-reduce benchmark with algbw and busbw (:func:`.scaling.bench_table`)."""
    return bench_table(run.ranks[0]["bench"], run.world)


def scaling_table(run: RankRun, label: str = SCALING_CONFIG) -> pd.DataFrame:
    """One rank alone vs the DDP run of ``label`` (each rank keeps its batch). ``profiled``: the DDP step time
    (mean) and f (exposed share, Σ exposed / Σ step) from the same steady profiled steps of every rank, so the
    weak-scaling bound n·(1−f) applies, against the one-rank run's median profiled step, and ``ddp_overhead_ms``:
    the DDP step less its exposed all-reduce, less one rank alone (compute DDP adds, which the bound does not
    charge), and ``speedup_low``/``speedup_high``: the speedup's range from the profiled steps' spreads
    (:func:`~infralens_lab.stats.ratio_range`, one rank's steps over the DDP ranks' steady steps); ``timed``: the
    unprofiled medians, beside it for reference (their f is not measured)."""
    n, t = run.world, steady(table(run, label))
    singles = distributed.step_windows(run.traces("single")[0])["step_us"] / 1e3
    t1 = float(singles.median())
    tn, f = float(t["step_us"].mean()) / 1e3, float(t["exposed_us"].sum() / t["step_us"].sum())
    lo, _, hi = (n * x for x in ratio_range(spread_of(list(singles)), spread_of(list(t["step_us"] / 1e3))))  # weak: n t1/tn
    rows = []
    for basis, one, many, frac in (("profiled", t1, tn, f),
                                   ("timed", 1e3 * run.ranks[0]["single"]["step_s"], 1e3 * run.config(label)["step_s"], None)):
        s = scaling(one, many, n)
        rows.append({"basis": basis, "ranks": n, "one_rank_step_ms": one, "ddp_step_ms": many, "speedup": s["speedup"],
                     "speedup_low": lo if frac is not None else None, "speedup_high": hi if frac is not None else None,
                     "efficiency": s["efficiency"], "exposed_fraction": frac,
                     "weak_scaling_bound": weak_scaling_bound(frac, n) if frac is not None else None,
                     "ddp_overhead_ms": many * (1 - frac) - one if frac is not None else None})
    return pd.DataFrame(rows)


def scaling_sentence(s) -> str:
    """The profiled row of the scaling table against its bound (:func:`~infralens_lab.analysis.bounds.bound_check`,
    with the speedup's range), f printed with the decimals that make the printed ``n x (1 - f)`` the bound printed
    (:func:`~infralens_lab.units.decimals_to_show`), and the rule that says what the verdict means."""
    n, f, bound = int(s["ranks"]), s["exposed_fraction"], s["weak_scaling_bound"]
    lo, hi = s.get("speedup_low"), s.get("speedup_high")
    c = bound_check(s["speedup"], bound, None if lo is None or pd.isna(lo) else lo,
                    None if hi is None or pd.isna(hi) else hi)
    bd = c.decimals()
    fd = decimals_to_show(lambda d: round(n * (1 - round(f, d)), bd) == round(bound, bd))
    head = (f"Profiled steps: n(1 - f) = {n} x (1 - {f:.{fd}f}) = {bound:.{bd}f}x; {c.numbers()}: ")
    if c.verdict == "BEATEN":
        return head + (f"ABOVE the bound by more than {100 * (c.slack - 1):.0f} %: the one-rank baseline ran slower than "
                       "the ranks' own compute (a busy machine), so this run cannot say how much the exposed "
                       "communication cost.")
    if c.verdict == "undecided":
        return head + ("undecided: the speedup's range straddles the bound's tolerance, so these steps cannot tell "
                       "whether the bound holds.")
    return head + (f"within the bound. It charges only the exposed all-reduce; the DDP "
                   f"step less it is {s['one_rank_step_ms'] + s['ddp_overhead_ms']:.1f} ms against one rank alone's "
                   f"{s['one_rank_step_ms']:.1f} ms: {s['ddp_overhead_ms']:+.1f} ms the bound does not see.")


def scaling_by_set(runs: list) -> list[str]:
    """The scaling verdict of every recorded NCCL set (``runs``: ``[(set name, RankRun)]``), one GPU per line, each
    from its own recording (:func:`scaling_sentence` on its profiled row), and, when two sets give different
    verdicts, a line saying so."""
    if len(runs) < 2:
        return [f"NCCL sets recorded: {', '.join(n for n, _ in runs) or 'none'}; no second GPU to compare this verdict with "
                "yet (another set's line appears here when one is committed)."]
    out, verdicts = [], {}
    for name, run in runs:
        p = scaling_table(run).set_index("basis").loc["profiled"]
        verdicts[name] = bound_check(p["speedup"], p["weak_scaling_bound"], p["speedup_low"], p["speedup_high"]).verdict
        out.append(f"{name}: {scaling_sentence(p)}")
    if len(set(verdicts.values())) > 1:
        out.append("The verdicts FLIP between these sets (" + ", ".join(f"{n} {v}" for n, v in verdicts.items()) +
                   "): compare each line's speedup and its n(1 - f) above, each from its own GPUs' steps.")
    return out


def model_inputs(rec: RankRun | None, m) -> dict:
    """Inputs of :func:`.scaling.multinode_model`: measured on the recorded NCCL run ``rec`` when there is one, for
    the model that run measured (one GPU's step, its backward, the hidden fraction and the buckets at
    :data:`SCALING_CONFIG`, DDP's overhead from :func:`scaling_table`, and alpha and beta fitted on its benchmark,
    :func:`.scaling.fit_alpha_beta`; a benchmark the fit refuses gives the busbw at the largest size and no alpha,
    said in ``alpha_source``), else formulas for the MLP ``m`` (``workloads.ddp.MLPConfig``): 6·Ψ·batch FLOPs at
    an assumed 40 % of the H200's fp32 peak, backward 2/3 of it, half hidden, no overhead, one call."""
    if rec is None:
        out = {"params": m.params, "grad_bytes": 4 * m.params}
        compute = 6 * m.params * m.batch / (0.4 * PEAKS["H200"].fp32)
        return out | {"compute_s": compute, "backward_s": compute * 2 / 3, "hidden_fraction": 0.5,
                      "intra_busbw_gbs": None, "ddp_overhead_s": 0.0, "calls": 1, "alpha_s": None, "alpha_source": "",
                      "fit": None, "source": "assumed: 40% of H200 fp32 peak, backward 2/3, half hidden"}
    c = rec.config(SCALING_CONFIG)
    t = steady(table(rec, SCALING_CONFIG))
    row = scaling_table(rec).iloc[0]  # the profiled row: f and both steps from the same steps
    single = row["one_rank_step_ms"] / 1e3
    try:
        fit = fit_alpha_beta(bench(rec))
        busbw, alpha = fit["beta_gbs"], fit["alpha_s"]
        said = (f"fitted on the benchmark at n = {fit['ranks']}, "
                + ("CUDA-event-timed" if fit["timing"] == "cuda_events" else f"{fit['timing']}-timed: it holds the "
                   "host's launch and synchronize per call") + f"; residuals up to {fit['max_residual']:.0%}")
    except ValueError as exc:
        fit, busbw, alpha, said = None, largest_busbw(bench(rec)), None, f"no fit ({exc})"
    return {"params": sum(c["param_bytes"]) // 4, "grad_bytes": sum(c["param_bytes"]), "compute_s": single,
            "backward_s": min(single, t["backward_us"].mean() / 1e6),
            "hidden_fraction": float(t["hidden_us"].sum() / t["comm_us"].sum()), "intra_busbw_gbs": busbw,
            "ddp_overhead_s": max(0.0, row["ddp_overhead_ms"] / 1e3), "calls": len(c["bucket_bytes"]),
            "alpha_s": alpha, "alpha_source": said, "fit": fit,
            "source": f"measured on the recorded NCCL run ({rec.world} ranks, {SCALING_CONFIG}, "
                      f"{len(c['bucket_bytes'])} buckets)"}


def model_kwargs(mi: dict) -> dict:
    """:func:`model_inputs` as keyword arguments of :func:`.scaling.multinode_model`."""
    return {"compute_s": mi["compute_s"], "backward_s": mi["backward_s"], "grad_bytes": mi["grad_bytes"],
            "hidden_fraction": mi["hidden_fraction"], "intra_busbw_gbs": mi["intra_busbw_gbs"],
            "ddp_overhead_s": mi["ddp_overhead_s"], "calls": mi["calls"], "alpha_s": mi["alpha_s"],
            "alpha_source": mi["alpha_source"],
            "busbw_source": "fitted beta" if mi.get("fit") else ("measured, largest size" if mi["intra_busbw_gbs"]
                                                                 else "")}


# ---------------------------------------------------------------- what a collective cost: wait, transfer, host
DDP_FORWARD = "DistributedDataParallel.forward"  # the range DDP's forward runs in (its runtime-stats timers sync there)


def split_table(run: RankRun, label: str) -> pd.DataFrame:
    """Per rank, per steady profiled step of config ``label``: collectives, and what they cost split into the
    host's launch cost, waiting for a peer and transfer (ms; :func:`.distributed.split_per_step` of
    :func:`.distributed.collective_split`). Kept on the run."""
    key = ("split", label)
    if key not in run._traces:
        run._traces[key] = distributed.split_per_step(distributed.collective_split(run.traces(label)))
    return run._traces[key]


def practice_split(run: RankRun) -> pd.DataFrame:
    """:func:`split_table` of the practice project's two runs (``mystery``, ``reference``), one row per config and
    rank, with the config's timed (unprofiled) step time (ms)."""
    parts = [split_table(run, label).assign(config=label, timed_step_ms=1e3 * run.config(label)["step_s"])
             for label in PRACTICE]
    out = pd.concat(parts, ignore_index=True)
    return out[["config", "rank", "calls", "host_ms", "wait_ms", "transfer_ms", "cost_ms", "per_call_transfer_us",
                "timed_step_ms"]]


def host_syncs(trace: Trace) -> pd.DataFrame:
    """The calls that make the host wait (:data:`~infralens_lab.parse.trace.SYNC_NAMES`, and any ``…Synchronize``
    runtime call) per profiled step of one rank: ``step``, ``name``, ``calls``, ``in_ddp_forward`` (how many sit
    inside DDP's forward range, where its runtime-stats timers read their CUDA events on the iterations DDP
    samples: the first ten, then every hundredth)."""
    ev = trace.events
    sync = ev[ev["name"].isin(SYNC_NAMES) | ev["name"].str.contains("Synchronize", regex=False)]
    st = trace.steps()
    fwd = ev[ev["name"].str.startswith(DDP_FORWARD)]
    rows = []
    for _, e in sync.iterrows():
        t = float(e["start_us"])
        k = st[(st["cpu_start_us"] <= t) & (t < st["cpu_end_us"])]
        if k.empty:
            continue
        inside = bool(((fwd["start_us"] <= t) & (t < fwd["end_us"]) & (fwd["tid"] == e["tid"])).any())
        rows.append({"step": int(k["step"].iloc[0]), "name": e["name"], "in_ddp_forward": int(inside)})
    df = pd.DataFrame(rows, columns=["step", "name", "in_ddp_forward"])
    return (df.groupby(["step", "name"]).agg(calls=("in_ddp_forward", "size"), in_ddp_forward=("in_ddp_forward", "sum"))
            .reset_index())


def sync_sentence(run: RankRun, label: str, rank: int = 0) -> str:
    """Rank ``rank``'s host syncs per profiled step of ``label`` (:func:`host_syncs`), in one line."""
    h = host_syncs(run.traces(label)[rank])
    steps = len(run.traces(label)[rank].steps())
    if h.empty:
        return f"host syncs: none in {steps} profiled steps"
    per = h.groupby("name").agg(calls=("calls", "sum"), fwd=("in_ddp_forward", "sum"))
    said = ", ".join(f"{r.calls / steps:g} {n}" + (f" ({r.fwd / steps:g} inside {DDP_FORWARD})" if r.fwd else "")
                     for n, r in per.iterrows())
    return f"host syncs per profiled step: {said}"


def practice_sentence(run: RankRun) -> str:
    """The practice project's diagnosis from its numbers: where the mystery run's collectives spend their cost
    against the reference (:func:`practice_split`: waiting for a peer, transfer, the host's ``c10d::allreduce_``),
    who waits for whom (:func:`.distributed.stragglers`), and the timed step's change beside the host's."""
    t = practice_split(run)
    m, r = (t[t["config"] == c].set_index("rank") for c in PRACTICE)
    waiter = int(m["wait_ms"].idxmax())
    late = int(distributed.stragglers(distributed.align(run.traces("mystery")))["rank"].iloc[0])
    stream = m["wait_ms"] + m["transfer_ms"]
    d_timed = m["timed_step_ms"].iloc[0] - r["timed_step_ms"].iloc[0]
    host = (f"the host's c10d::allreduce_ calls take {m['host_ms'].min():.2f}-{m['host_ms'].max():.2f} ms of CPU per "
            f"step over {int(m['calls'].iloc[0])} calls against {r['host_ms'].min():.2f}-{r['host_ms'].max():.2f} ms over "
            f"{int(r['calls'].iloc[0])}")
    head = (f"Per steady profiled step, mystery against reference: transfer {m['transfer_ms'].mean():.2f} ms a rank "
            f"({m['per_call_transfer_us'].mean():.1f} µs a call) against {r['transfer_ms'].mean():.2f}; waiting for a "
            f"peer: rank {waiter} waits {m.loc[waiter, 'wait_ms']:.2f} of its {stream[waiter]:.2f} ms of all-reduce, "
            f"for rank {late}, which arrives last; {host}. Timed step: {m['timed_step_ms'].iloc[0]:.1f} against "
            f"{r['timed_step_ms'].iloc[0]:.1f} ms ({d_timed:+.2f} ms). ")
    if m["wait_ms"].mean() >= m["transfer_ms"].mean():
        return head + (f"So the all-reduce time is mostly waiting, not moving bytes: rank {waiter}'s collectives sit on "
                       f"the stream until rank {late} launches its own. The cost the extra calls carry is host-bound: "
                       f"{m['host_ms'].mean() - r['host_ms'].mean():+.2f} ms of CPU a rank per step in c10d::allreduce_ "
                       f"(of the timed step's {d_timed:+.2f} ms), which a larger bucket_cap_mb removes with the calls.")
    return head + (f"So the all-reduce time is mostly transfer: {m['transfer_ms'].mean():.2f} ms against "
                   f"{r['transfer_ms'].mean():.2f} for the same bytes in {int(m['calls'].iloc[0])} calls instead of "
                   f"{int(r['calls'].iloc[0])} (sums of each call's time: calls that run at once count twice); fewer, "
                   "larger buckets (a larger bucket_cap_mb) remove the calls.")


def launch_delays(run: RankRun, labels=None) -> pd.DataFrame:
    """How long after its launch call each collective started (``start_us - enqueue_us`` of
    :func:`.distributed.comm_events`, every rank, the profiled steps), per config: ``collectives``, ``median_ms``,
    ``p90_ms``, ``max_ms``. On NCCL the kernel waits on its stream for the gradient bucket it reduces (an event
    from the compute stream) before it starts; on gloo the range waits for a worker thread."""
    rows = []
    for label in run.labels() if labels is None else labels:
        d = pd.concat([(c["start_us"] - c["enqueue_us"])[c["step"] >= 0]
                       for c in (distributed.comm_events(t) for t in run.traces(label))]) / 1e3
        rows.append({"config": label, "collectives": len(d), "median_ms": float(d.median()),
                     "p90_ms": float(d.quantile(0.9)), "max_ms": float(d.max())})
    return pd.DataFrame(rows)


def reducer_sentence(t, spans=None) -> str:
    """DDP's reducer timers against the trace's intervals, row by row of the sweep's times (no adjective of size);
    with ``spans`` (:func:`reducer_spans`), also each of those configs whose reducer average spans more
    than a whole steady step, which says the two numbers describe different iterations."""
    parts = [f"{r.config}: trace {r.hidden_under_backward:.2f}, reducer {r.ddp_reducer_overlap:.2f}"
             for r in t.itertuples() if r.hidden_under_backward is not None and r.ddp_reducer_overlap is not None]
    higher = sum(r.ddp_reducer_overlap > r.hidden_under_backward for r in t.itertuples()
                 if r.hidden_under_backward is not None and r.ddp_reducer_overlap is not None)
    out = f"Hidden fraction, trace vs DDP's reducer timers: {'; '.join(parts)}. The reducer reads higher in {higher} of {len(parts)}."
    if spans is not None and len(spans):
        long = spans[spans["longer_than_step"] & spans["config"].isin(set(t["config"]))]
        for config, g in long.groupby("config", sort=False):
            said = [f"rank {r.rank}'s average {'communication' if r.comm_ms >= r.compute_ms else 'backward compute'} "
                    f"span is {max(r.comm_ms, r.compute_ms):.1f} ms against a steady step of {r.step_ms:.1f} ms"
                    for r in g.itertuples()]
            out += (f" {config}: {'; '.join(said)}. No steady iteration spans more than its step, so these averages "
                    f"include iterations that were not steady (DDP averages the iterations it samples: the first ten, "
                    f"then every hundredth), which the trace's steady steps leave out.")
    return out


# ---------------------------------------------------------------- n ranks side by side
def ring_table(runs: list) -> pd.DataFrame:
    """The largest all-reduce of each run's benchmark (``runs``: ``[(name, RankRun)]``), one row per run: ``ranks``
    n, ``ring_factor`` 2(n-1)/n (the bytes each rank sends and receives per byte of buffer in a ring all-reduce),
    ``MiB``, ``ms``, ``algbw_GBps``, ``busbw_GBps`` (algbw x the factor) and ``busbw_of_link`` (busbw over the
    link's per-direction peak, None on gloo)."""
    rows = []
    for name, run in runs:
        b = bench(run)
        big = b.loc[b["bytes"].idxmax()]
        peak = link_peak(run.backend, run_gpu(run))[1]
        rows.append({"set": name, "ranks": run.world, "ring_factor": 2 * (run.world - 1) / run.world,
                     "MiB": big["MiB"], "ms": big["ms"], "algbw_GBps": big["algbw_GBps"], "busbw_GBps": big["busbw_GBps"],
                     "busbw_of_link": big["busbw_GBps"] / peak if peak else None})
    return pd.DataFrame(rows)


def straggler_table(runs: list, label: str = "straggler") -> pd.DataFrame:
    """The planted straggler of each run (``runs``: ``[(name, RankRun)]``), one row per run: ``ranks``, ``sleep_ms``
    (how long the last rank stops before each forward), ``found`` (the rank :func:`.distributed.stragglers` names)
    and ``caused_ms_per_step`` (its median caused wait per step), ``others_wait_ms`` (the mean over the other
    ranks of their collectives' waiting per step, :func:`split_table`), ``straggler_wait_ms`` (its own),
    ``step_ms`` and ``calm_step_ms`` (the steady profiled step with it and at :data:`SCALING_CONFIG`, which has no
    straggler)."""
    rows = []
    for name, run in runs:
        st = distributed.stragglers(distributed.align(run.traces(label)))
        sp = split_table(run, label).set_index("rank")
        late = run.world - 1
        rows.append({"set": name, "ranks": run.world, "sleep_ms": float(run.config(label).get("straggle_ms") or 0.0),
                     "found": int(st["rank"].iloc[0]), "caused_ms_per_step": float(st["caused_ms_per_step"].iloc[0]),
                     "others_wait_ms": float(sp.drop(index=late)["wait_ms"].mean()),
                     "straggler_wait_ms": float(sp.loc[late, "wait_ms"]),
                     "step_ms": float(steady(table(run, label))["step_us"].mean()) / 1e3,
                     "calm_step_ms": float(steady(table(run, SCALING_CONFIG))["step_us"].mean()) / 1e3})
    return pd.DataFrame(rows)


def launch_delay_sentence(d, name: str) -> str:
    """How long collectives started after their launch calls (:func:`launch_delays`), in one line."""
    calm = d[d["config"] == SCALING_CONFIG].iloc[0]
    late = d[d["config"] == "straggler"].iloc[0]
    return (f"{name}: at {calm.config} an all-reduce starts a median {calm.median_ms:.1f} ms after its launch call "
            f"(p90 {calm.p90_ms:.1f}, max {calm.max_ms:.1f} ms over {calm.collectives} collectives); in the straggler "
            f"run up to {late.max_ms:.1f} ms.")


def ring_sentence(t) -> str:
    """What the ring factor does, from :func:`ring_table` (n = 2 beside the widest run)."""
    two, wide = t[t["ranks"] == 2], t.loc[t["ranks"].idxmax()]
    if two.empty or wide["ranks"] == 2:
        return "Only one rank count recorded: the ring factor cannot be seen changing here."
    a = two.iloc[-1]
    link = (f" ({wide.busbw_of_link:.2f} of the link against {a.busbw_of_link:.2f})"
            if wide.busbw_of_link is not None and a.busbw_of_link is not None else "")
    return (f"At n = 2, 2(n-1)/n = 1: busbw = algbw ({a.busbw_GBps:.1f} GB/s on {a.set}), so an answer without the "
            f"factor passes there. At n = {int(wide.ranks)} it is {wide.ring_factor:g}: each rank sends and receives "
            f"{wide.ring_factor:g} bytes per byte of the buffer, so algbw falls to {wide.algbw_GBps:.1f} GB/s while "
            f"busbw, what the link carries, is {wide.busbw_GBps:.1f}{link} on {wide.set}.")


def straggler_sentence(t) -> str:
    """The planted straggler at every rank count, from :func:`straggler_table`."""
    parts = [f"{r.set}: rank {r.found} found ({r.ranks - 1} rank{'s wait' if r.ranks > 2 else ' waits'} for it, "
             f"{r.others_wait_ms:.1f} ms of waiting per step{' each' if r.ranks > 2 else ''}, the straggler "
             f"{r.straggler_wait_ms:.1f}); step {r.calm_step_ms:.1f} -> {r.step_ms:.1f} ms" for r in t.itertuples()]
    return (f"The same {t['sleep_ms'].iloc[0]:g} ms sleep on the last rank: " + "; ".join(parts) + ". The step grows by "
            f"{(t['step_ms'] - t['calm_step_ms']).min():.1f}-{(t['step_ms'] - t['calm_step_ms']).max():.1f} ms at every "
            "n: one late rank sets every rank's step, and at n = 4 three ranks pay it instead of one. The waiting "
            "exceeds the sleep because it also counts the straggler's own backward between its buckets.")


# ---------------------------------------------------------------- the evidence the lab's exercises work on
def bench_inputs(run: RankRun) -> pd.DataFrame:
    """Rank 0's all-reduce benchmark as measured, ``bytes`` and ``seconds`` only (``attrs['ranks']``: n)."""
    t = bench(run)[["bytes", "seconds"]].copy()
    t.attrs["ranks"] = run.world
    return t


def plan_inputs(model, bucket_cap_mb: float | None) -> dict:
    """The bucket-plan exercise's evidence for an MLP (``workloads.ddp.MLPConfig``): its fp32 gradient sizes in
    ready order (a Linear's bias is ready before its weight, the last layer first: DDP's own order, tested) and
    the cap, as :func:`.buckets.bucket_count`'s arguments."""
    return {"grad_bytes_ready_order": [4 * n for n in reversed(model.param_sizes())], "bucket_cap_mb": bucket_cap_mb}


def straggler_starts(run: RankRun, label: str = "straggler") -> pd.DataFrame:
    """Every collective of the straggler config on every rank, on the shared clock: ``step, seq, rank, start_us,
    end_us`` (:func:`.distributed.align` without its wait and transfer columns: the exercise computes them)."""
    return distributed.align(run.traces(label))[["step", "seq", "rank", "start_us", "end_us"]].copy()


def run_violations(ranks: list[dict] | RankRun) -> list[str]:
    """Every broken invariant of a run, as sentences (empty when all hold; the recorder refuses to write
    otherwise): per config, :func:`.distributed.invariant_violations` (exposed <= comm <= step, calls = DDP's
    buckets, kernels per step a whole number); ``no_sync`` calls = buckets (and ``accum`` × buckets without it);
    the profiled speedup of every ``cap …`` config <= its weak-scaling bound × :data:`BOUND_SLACK`. The clocks'
    causality check (:func:`.distributed.align`) is shown by the lab, not gated: its tolerance on GPU timers is
    an estimate."""
    run = ranks if isinstance(ranks, RankRun) else RankRun(ranks)
    out = []
    for c in run.ranks[0]["configs"]:
        try:
            out += [f"{c['label']}: {v}" for v in distributed.invariant_violations(table(run, c["label"]), len(c["bucket_bytes"]))]
        except ValueError as exc:
            out.append(f"{c['label']}: {exc}")
    first = run.ranks[0]["configs"][0]
    for name, k in (("no_sync", 1), ("plain", run.ranks[0]["no_sync"]["accum"])):
        try:
            out += [f"{name}: {v}" for v in distributed.invariant_violations(table(run, name), k * len(first["bucket_bytes"]))]
        except ValueError as exc:
            out.append(f"{name}: {exc}")
    if "trace" in run.ranks[0].get("single", {}):
        for label in [x for x in run.labels() if x.startswith("cap ") and "view" not in x]:
            s = scaling_table(run, label).iloc[0]
            if bound_check(s["speedup"], s["weak_scaling_bound"]).verdict == "BEATEN":  # the medians: the gate
                out.append(f"{label}: speedup {s['speedup']:.2f} above its weak-scaling bound "
                           f"{s['weak_scaling_bound']:.2f} x {BOUND_SLACK}")
    return out


def run_gpu(run: RankRun) -> str | None:
    """The GPU a run was measured on, from its evidence's provenance (None for bare rank dicts)."""
    prov = getattr(getattr(run, "ev", None), "provenance", None)
    return getattr(prov, "gpu", None) or None
