"""Glue for lab 05 (overlap, launch overhead, compilation): the live CPU runs, the recorded GPU
records and traces turned into tables, and the Amdahl table.

Traces go through :class:`~infralens_lab.parse.trace.Trace`; overlap, periods, launch counts
and Amdahl bounds through :mod:`infralens_lab.analysis.overlap`. A loader whose record is absent prints
what is missing and how to record it, and returns ``None``, so cells never crash. Times: ``_ms``
milliseconds, ``_us`` microseconds.
"""
from __future__ import annotations

import pandas as pd

from .. import evidence
from ..analysis import overlap as A
from ..measure import overlap as M
from ..parse.trace import load_trace
from ..measure.torch_trace import profile
from ..workloads.overlap import COPY_MODES, NeedsGpu, small_ops_step, sleep_stages
from . import check_on, store  # noqa: F401  (re-exported for the notebook)
from ..parse.trace import step_gpu_work
from ..measure.torch_trace import quiet_profiler_chatter

RECORD_HINT = "`python -m infralens_lab record --only overlap` on a GPU"
STAGE_MS = (20.0, 30.0)  # the CPU pipeline's stand-in stage times
CPU_ITEMS = 8


def explain_error(fn) -> object:
    """Call ``fn()``; if it needs a GPU this process lacks, print what, why and the fix instead of
    raising, and return None."""
    try:
        return fn()
    except NeedsGpu as exc:
        print(f"{exc.what}: not available here. {exc.why}\nFix: {exc.fix}.")
        return None


def recorded(st, name: str):
    """The recorded Evidence ``name``, or None with a note saying it is not recorded yet."""
    if st is None:
        return None
    if name not in st.names():
        print(f"Recorded `{name}`: not in the recorded set ({st.gpu}) yet; it is written by {RECORD_HINT}.")
        return None
    return st.load(name)


def recorded_trace(st, name: str):
    """``(Trace, Evidence)`` for a recorded trace record, or None with a note."""
    ev = recorded(st, name)
    return None if ev is None else (load_trace(ev), ev)


# ---------------------------------------------------------------- copies
def h2d_table(ev) -> pd.DataFrame:
    """Recorded host-to-device bandwidth, pageable vs pinned."""
    return pd.DataFrame(ev.values["rows"])[["memory", "mib", "median_ms", "gb_per_s"]]


def copy_row(mode: str, tr) -> dict:
    """One mode's numbers from its trace: ``period_ms`` (spacing of step ends, lab 01's rule), copy time
    per step, the share of it hidden under kernels (:func:`analysis.overlap.copy_overlap`), the exposed
    copy time per step and the GPU busy share."""
    w = step_gpu_work(tr)
    n = len(w)
    c = A.copy_overlap(tr)
    s = tr.summary()
    return {"mode": mode, "period_ms": (w["gpu_end_us"].iloc[-1] - w["gpu_end_us"].iloc[0]) / (n - 1) / 1e3,
            "copy_ms_per_step": c["copy_us"] / n / 1e3, "hidden_fraction": c["fraction"],
            "exposed_copy_ms_per_step": c["exposed_us"] / n / 1e3, "gpu_busy_pct": 100 * (s.get("gpu_utilization") or 0)}


def copy_table(traces: dict) -> pd.DataFrame:
    """:func:`copy_row` for every recorded mode in ``traces`` (``{mode: (Trace, Evidence)}``)."""
    return pd.DataFrame([copy_row(m, tr) for m, (tr, _) in traces.items()])


def copy_traces(st) -> dict | None:
    """``{mode: (Trace, Evidence)}`` for the recorded copy/compute traces, or None with a note."""
    out = {m: recorded_trace(st, f"trace_copy_{m}") for m in COPY_MODES}
    return None if any(v is None for v in out.values()) else out


# ---------------------------------------------------------------- pipeline
def live_pipeline(items: int = CPU_ITEMS, stage_ms: tuple = STAGE_MS) -> dict:
    """The two-stage pipeline on this CPU with sleeping stand-in stages, depth 1 and 2:
    ``{depth: Trace}`` (see :func:`infralens_lab.measure.overlap.pipeline_trace`)."""
    with quiet_profiler_chatter():
        return {d: M.pipeline_trace(d, sleep_stages(*stage_ms), items=items) for d in (1, 2)}


def pipeline_table(traces: dict) -> pd.DataFrame:
    """One row per depth: :func:`analysis.overlap.pipeline_metrics` on the ``stage0``/``stage1`` ranges,
    in milliseconds. ``traces``: ``{depth: Trace}``."""
    rows = []
    for d, tr in traces.items():
        m = A.pipeline_metrics(A.range_intervals(tr, "stage0"), A.range_intervals(tr, "stage1"))
        rows.append({"depth": d, "stage0_ms": m["stage0_us"] / 1e3, "stage1_ms": m["stage1_us"] / 1e3,
                     "period_ms": m["period_us"] / 1e3, "sum_ms": m["serial_us"] / 1e3,
                     "max_ms": m["overlapped_us"] / 1e3, "overlap_score": m["overlap_score"],
                     "verdict": m["verdict"]})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- launches
def live_dispatches(ops: int = 40) -> pd.DataFrame:
    """torch.profiler on this CPU over :func:`small_ops_step`: per step, the aten ops dispatched (on a
    GPU each would be a kernel launch) and the launch calls (none on a CPU). Counts only: CPU timings
    here say nothing about a GPU."""
    import torch

    x = torch.randn(1024)
    with quiet_profiler_chatter():
        tr = profile(lambda: small_ops_step(x, ops), wait=1, warmup=1, active=2)
    return A.launches_per_step(tr)[["step", "cpu_ops", "launch_calls", "gpu_events"]]


def launch_table(ev, traces: dict) -> pd.DataFrame:
    """Recorded launch-bound step per variant: CPU issue time and step time (``launch_overhead``), and,
    from the traces, launch calls, GPU events and GPU busy time per step, and the GPU busy share."""
    t = pd.DataFrame(ev.values["rows"])
    per = {}
    for v, (tr, _) in traces.items():
        s = A.launches_per_step(tr)
        per[v] = {"launch_calls_per_step": s["launch_calls"].mean(), "gpu_events_per_step": s["gpu_events"].mean(),
                  "gpu_busy_ms_per_step": s["gpu_busy_us"].mean() / 1e3}
    t = t.join(pd.DataFrame.from_dict(per, orient="index"), on="variant")
    t["gpu_busy_pct"] = 100 * t["gpu_busy_ms_per_step"] / t["step_ms"]
    return t


# ---------------------------------------------------------------- compile
def live_compile(width: int | None = None, blocks: int | None = None, batch: int | None = None) -> dict:
    """:func:`infralens_lab.measure.overlap.compile_study` on this CPU with the CPU sizes (Inductor,
    compiling in this process: one compile thread, no worker pool to start on a small machine; and
    one torch thread while it runs, so the generated kernels do not use OpenMP, whose thread team
    waiting on a busy shared CPU turned ~0.1 ms forwards into ~90 ms ones in our runs).
    Inductor's on-disk cache is left as it is: a later run may find this run's kernels there and show
    a shorter first call; what the lab prints from it (counts; times as seconds of wall time) does not
    depend on that."""
    import torch._inductor.config as inductor_config

    cfg = dict(M.BLOCKNET_CPU)
    cfg.update({k: v for k, v in (("width", width), ("blocks", blocks), ("batch", batch)) if v is not None})
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with inductor_config.patch(compile_threads=1):
            return M.compile_study("cpu", repeats=20, **cfg)
    finally:
        torch.set_num_threads(threads)


def compile_counts(vals: dict) -> pd.DataFrame:
    """Counts only (stable on any machine): graphs compiled, compiled graphs run per forward, and
    ``explain``'s graph and break counts, per variant."""
    t = pd.DataFrame(vals["rows"])[["variant", "graphs_compiled", "graph_calls_per_forward"]]
    ex = {"compiled": vals["explain_whole"], "compiled_breaks": vals["explain_breaks"]}
    t["explain_graphs"] = [ex.get(v, {}).get("graphs", 0) for v in t["variant"]]
    t["explain_breaks"] = [ex.get(v, {}).get("graph_breaks", 0) for v in t["variant"]]
    return t


def compile_times(vals: dict) -> pd.DataFrame:
    """First call against steady state per variant, in milliseconds, and the steady-state ratio to eager."""
    t = pd.DataFrame(vals["rows"])[["variant", "first_ms", "median_ms", "p10_ms", "p90_ms"]]
    t["vs_eager"] = t["median_ms"] / float(t.loc[t["variant"] == "eager", "median_ms"].iloc[0])
    return t


def compile_time_lines(vals: dict) -> list[str]:
    """The live CPU timings as sentences in seconds of wall time (this machine's, not a GPU's)."""
    return [f"{r['variant']}: first call {r['first_ms'] / 1e3:.3f} s wall, then {r['median_ms'] / 1e3:.6f} s wall "
            f"per forward (median)" for r in vals["rows"]]


def fusion_table(ev, traces: dict | None = None) -> pd.DataFrame:
    """Recorded eager vs compiled elementwise chain: time, kernels per call (from the ``trace_fusion_*``
    traces in ``traces``, ``{variant: (Trace, Evidence)}``, when given), the byte model
    (:func:`analysis.overlap.elementwise_chain_traffic`) and the bandwidth it implies."""
    v = ev.values
    rows = []
    for r in v["rows"]:
        tr = A.elementwise_chain_traffic(v["numel"], v["elem_bytes"], v["ops"], fused=r["variant"] == "compiled")
        t = (traces or {}).get(r["variant"])
        k = float(A.launches_per_step(t[0])["gpu_events"].mean()) if t is not None else float("nan")
        rows.append({"variant": r["variant"], "median_ms": r["median_ms"], "kernels_per_call": k,
                     "model_bytes_mb": tr.bytes / 1e6, "implied_tb_per_s": tr.bytes / (r["median_ms"] * 1e-3) / 1e12})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- Amdahl
BOUND_SLACK = 1.05  # a measured speedup within 5% above its bound is run-to-run noise, not a broken premise


def amdahl_row(fix: str, before_ms: float, after_ms: float, fraction: float, what: str) -> dict:
    """A fix's best possible speedup from the share of time it attacks (``fraction`` of ``before_ms``,
    removed entirely) beside the measured speedup ``before_ms / after_ms``, and whether the measurement
    respects the bound (above it means something besides the attacked time changed)."""
    bound, got = A.amdahl(fraction), before_ms / after_ms
    return {"fix": fix, "attacked_share": fraction, "what_it_removes": what, "amdahl_bound": bound,
            "measured_speedup": got, "within_bound": bool(got <= bound * BOUND_SLACK)}


def idle_share(tr) -> float:
    """Share of a trace's mean step (CPU time of the ``ProfilerStep`` range) when the GPU ran none of
    the step's work: ``1 - gpu_busy / cpu``, from :func:`analysis.overlap.launches_per_step`."""
    s = A.launches_per_step(tr)
    return max(0.0, 1.0 - float(s["gpu_busy_us"].mean() / s["cpu_us"].mean()))


def amdahl_table(copies: pd.DataFrame | None, pipe: pd.DataFrame | None, launches: pd.DataFrame | None,
                 comp: pd.DataFrame | None, breaks_trace=None) -> pd.DataFrame | None:
    """One row per fix whose evidence is present (recorded GPU tables), each one change: a side stream
    and second buffer for the pinned step (attacks its exposed copy time), a second pipeline buffer
    (everything off the slower stage), a CUDA graph (GPU idle time in the eager step), removing the
    graph breaks (GPU idle time in the broken forward's trace, ``breaks_trace``)."""
    rows = []
    if copies is not None:
        c = copies.set_index("mode")
        b, a = c.loc["pinned"], c.loc["double_buffered"]
        rows.append(amdahl_row("side stream + 2nd buffer", b["period_ms"], a["period_ms"],
                               min(1.0, b["exposed_copy_ms_per_step"] / b["period_ms"]), "exposed copy time"))
    if pipe is not None:
        p = pipe.set_index("depth")
        d1, d2 = p.loc[1], p.loc[2]
        rows.append(amdahl_row("second pipeline buffer", d1["period_ms"], d2["period_ms"],
                               max(0.0, 1 - max(d1["stage0_ms"], d1["stage1_ms"]) / d1["period_ms"]),
                               "time off the slower stage"))
    if launches is not None:
        e = launches.set_index("variant")
        b, a = e.loc["eager"], e.loc["graph"]
        rows.append(amdahl_row("CUDA graph", b["step_ms"], a["step_ms"],
                               max(0.0, 1 - b["gpu_busy_ms_per_step"] / b["step_ms"]), "GPU idle time"))
    if comp is not None and breaks_trace is not None:
        t = comp.set_index("variant")
        rows.append(amdahl_row("remove graph breaks", t.loc["compiled_breaks", "median_ms"], t.loc["compiled", "median_ms"],
                               idle_share(breaks_trace), "GPU idle time"))
    return pd.DataFrame(rows) if rows else None


def caption(*evs) -> str:
    """One caption for a table built from several records: the first's provenance and every name."""
    evs = [e for e in evs if e is not None]
    return evs[0].caption() + " · records " + ", ".join(e.name for e in evs) if evs else "no evidence"


def live_caption(what: str, command: str):
    """A live Evidence caption for a CPU measurement made now."""
    return evidence.live(what, {}, command)


def ask(qid: str, ev=None) -> None:
    """The visible question before an answer cell: the self-check widget (with ``ev`` for questions
    checked against evidence), or the question printed when that evidence is not at hand (yet: it may
    be computed by the cells that follow, or be a recording that is missing, which the check says)."""
    from ..quiz import question, question_text, self_check

    if question(qid).derive is not None and ev is None:
        print(question_text(qid))
        return
    self_check(qid, evidence=ev)


def amdahl_evidence(copies: pd.DataFrame | None) -> dict | None:
    """What question lab05.q7 is checked against: the pinned step's exposed-copy share ``f`` and the
    Amdahl bound ``1 / (1 - f)`` (None without the recorded copy traces)."""
    if copies is None:
        return None
    b = copies.set_index("mode").loc["pinned"]
    f = min(1.0, float(b["exposed_copy_ms_per_step"] / b["period_ms"]))
    return {"f": f, "bound": A.amdahl(f)}


def live_copies():
    """On a GPU: the copy/compute table measured now (``(table, Evidence)``); elsewhere None, saying why."""
    from ..device import is_gpu

    if not is_gpu():
        print("Live copy/compute traces: no GPU here, so the recorded ones below stand in.")
        return None
    with quiet_profiler_chatter():
        trs = M.copy_traces()
    t = copy_table({m: (tr, None) for m, tr in trs.items()})
    return t, evidence.live("copy_compute_live", {"rows": t.to_dict(orient="records")}, "measure.overlap.copy_traces()")


def live_launches():
    """On a GPU: the launch-bound step measured now, eager against CUDA graph (``(table, Evidence)``);
    elsewhere None, saying why."""
    from ..device import is_gpu

    if not is_gpu():
        print("Live launch study: no GPU here, so the recorded one below stands in.")
        return None
    with quiet_profiler_chatter():
        vals, trs = M.launch_study(compile_too=False)
    ev = evidence.live("launch_overhead_live", vals, "measure.overlap.launch_study(compile_too=False)")
    return launch_table(ev, {v: (tr, None) for v, tr in trs.items()}), ev
