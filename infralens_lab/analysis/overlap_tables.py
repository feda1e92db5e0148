"""Tables of copies, pipelines, launches, compilation and each fix's bound, from recorded values and traces.

Every number comes through :mod:`infralens_lab.analysis.overlap` (overlap, engines, launches, compiled
regions, :func:`~infralens_lab.analysis.overlap.overlap_bound`) or the series' step rules
(:func:`~infralens_lab.analysis.joins.idle_budget`: one steady period per step). Lab 05 shows these tables and
the grader (``quiz/keys/lab05.py``) computes its keys from the same functions. Traces are
:class:`~infralens_lab.parse.trace.Trace` objects; times ``_ms`` milliseconds, ``_us`` microseconds.
"""
from __future__ import annotations

import pandas as pd

from . import overlap
from .joins import idle_budget

BOUND_SLACK = 1.05  # a measured speedup within 5% above its bound is run-to-run noise, not a broken premise


def copy_table(traces: dict, copy_bytes: float) -> pd.DataFrame:
    """One row per copy mode (``{mode: Trace}``): ``period_ms`` (one steady period, :func:`idle_budget`), the
    host-to-device copy time per step and its rate (``copy_bytes`` per step over it, GB/s), the kernel time per
    step, the share of copy time hidden under kernels (:func:`~infralens_lab.analysis.overlap.copy_overlap`),
    the exposed copy time per step, and the busy shares of the period by engine
    (:func:`~infralens_lab.analysis.overlap.engine_busy`): copy engine, SMs, either."""
    rows = []
    for mode, tr in traces.items():
        c, e = overlap.copy_overlap(tr), overlap.engine_busy(tr)
        n = c["steps"]
        rows.append({"mode": mode, "period_ms": idle_budget(tr)["period_ms"], "copy_ms": c["copy_us"] / n / 1e3,
                     "copy_gb_per_s": copy_bytes / (c["copy_us"] / n * 1e-6) / 1e9 if c["copy_us"] else None,
                     "kernel_ms": e["kernel_us"] / 1e3, "hidden_fraction": c["fraction"],
                     "exposed_copy_ms": c["exposed_us"] / n / 1e3, "copy_engine_pct": e["copy_pct"],
                     "sm_pct": e["kernel_pct"], "busy_pct": e["any_pct"]})
    return pd.DataFrame(rows)


def memcpy_call_share(tr) -> float:
    """CPU time inside the host-to-device copy calls (``cudaMemcpyAsync``) over the GPU's time copying, both
    summed over the profiled steps: about 1 or more when the CPU stays in the call for the whole copy (a
    pageable copy, staged by the CPU through a pinned buffer), near 0 when the call only queues it (pinned)."""
    ev = tr.events
    st = tr.steps()
    calls = ev[ev["name"].str.startswith(("cudaMemcpy", "cuMemcpy")) & ev["cat"].isin(overlap.RUNTIME_CATS)]
    inside = calls[(calls["start_us"] >= st["cpu_start_us"].min()) & (calls["start_us"] < st["cpu_end_us"].max())]
    c = overlap.copy_overlap(tr)
    if not c["copy_us"]:
        raise ValueError("no host-to-device copies launched by the profiled steps")
    return float(inside["dur"].sum()) / c["copy_us"]


def pipeline_table(traces: dict) -> pd.DataFrame:
    """One row per depth (``{depth: Trace}``): :func:`~infralens_lab.analysis.overlap.pipeline_metrics` on the
    ``stage0``/``stage1`` ranges, in milliseconds."""
    rows = []
    for d, tr in traces.items():
        m = overlap.pipeline_metrics(overlap.range_intervals(tr, "stage0"), overlap.range_intervals(tr, "stage1"))
        rows.append({"depth": d, "stage0_ms": m["stage0_us"] / 1e3, "stage1_ms": m["stage1_us"] / 1e3,
                     "period_ms": m["period_us"] / 1e3, "sum_ms": m["serial_us"] / 1e3,
                     "max_ms": m["overlapped_us"] / 1e3, "overlap_score": m["overlap_score"], "verdict": m["verdict"]})
    return pd.DataFrame(rows)


def launch_table(values: dict, traces: dict) -> pd.DataFrame:
    """The launch-bound step per variant: CPU issue time and step time (the ``launch_overhead`` record's
    ``rows``), and from the traces (``{variant: Trace}``) launch calls, GPU events and GPU busy time per step,
    and the GPU busy share of the step."""
    t = pd.DataFrame(values["rows"])
    per = {}
    for v, tr in traces.items():
        s = overlap.launches_per_step(tr)
        per[v] = {"launch_calls": s["launch_calls"].mean(), "gpu_events": s["gpu_events"].mean(),
                  "gpu_busy_ms": s["gpu_busy_us"].mean() / 1e3}
    t = t.join(pd.DataFrame.from_dict(per, orient="index"), on="variant")
    t["gpu_busy_pct"] = 100 * t["gpu_busy_ms"] / t["step_ms"]
    return t


def issue_split(tr) -> dict:
    """Where the CPU's time per launched op goes in a profiled eager step (µs per op, profiler on):
    ``launch_us`` (in the driver's launch call), ``dispatch_us`` (in the aten op around it, outside the launch
    call: argument checks, dtype and device dispatch, allocation), ``python_us`` (between ops: the Python
    loop and the profiler's own bookkeeping), ``total_us`` their sum, over ``ops`` ops per step
    (:func:`~infralens_lab.analysis.overlap.launches_per_step`)."""
    s = overlap.launches_per_step(tr)
    ops = float(s["cpu_ops"].mean())
    if ops <= 0:
        raise ValueError("no top-level aten ops in the profiled steps; expected an eager step")
    launch, op, cpu = (float(s[c].mean()) for c in ("launch_cpu_us", "op_cpu_us", "cpu_us"))
    return {"ops": ops, "launch_us": launch / ops, "dispatch_us": (op - launch) / ops, "python_us": (cpu - op) / ops,
            "total_us": cpu / ops}


def compile_counts(values: dict, traces: dict | None = None) -> pd.DataFrame:
    """Counts only (stable on any machine), per variant of a ``compile_study`` record: graphs compiled,
    compiled graphs run per forward (the counting backend), ``explain``'s graph and break counts, and, from
    traces (``{variant: Trace}``) when given, the compiled regions per forward and how many distinct graphs
    they ran (:func:`~infralens_lab.analysis.overlap.compiled_regions`)."""
    t = pd.DataFrame(values["rows"])[["variant", "graphs_compiled", "graph_calls_per_forward"]]
    ex = {"compiled": values["explain_whole"], "compiled_breaks": values["explain_breaks"]}
    t["explain_graphs"] = [ex.get(v, {}).get("graphs", 0) for v in t["variant"]]
    t["explain_breaks"] = [ex.get(v, {}).get("graph_breaks", 0) for v in t["variant"]]
    if traces:
        regions = {v: overlap.compiled_regions(tr) for v, tr in traces.items()}
        t["regions_per_forward"] = [regions[v]["regions"].mean() if v in regions else None for v in t["variant"]]
        t["distinct_graphs_run"] = [regions[v]["distinct"].max() if v in regions else None for v in t["variant"]]
    return t


def compile_times(values: dict) -> pd.DataFrame:
    """First call against steady state per variant, in milliseconds, and the steady-state ratio to eager."""
    t = pd.DataFrame(values["rows"])[["variant", "first_ms", "median_ms", "p10_ms", "p90_ms"]]
    t["vs_eager"] = t["median_ms"] / float(t.loc[t["variant"] == "eager", "median_ms"].iloc[0])
    return t


def fusion_table(values: dict, traces: dict | None = None) -> pd.DataFrame:
    """The elementwise chain eager vs compiled (a ``fusion`` record's values): time, kernels per call (from
    ``{variant: Trace}`` when given), the byte model
    (:func:`~infralens_lab.analysis.overlap.elementwise_chain_traffic`) and the bandwidth it implies."""
    rows = []
    for r in values["rows"]:
        m = overlap.elementwise_chain_traffic(values["numel"], values["elem_bytes"], values["ops"],
                                        fused=r["variant"] == "compiled")
        t = (traces or {}).get(r["variant"])
        k = float(overlap.launches_per_step(t)["gpu_events"].mean()) if t is not None else float("nan")
        rows.append({"variant": r["variant"], "median_ms": r["median_ms"], "kernels_per_call": k,
                     "model_mb": m.bytes / 1e6, "implied_tb_per_s": m.bytes / (r["median_ms"] * 1e-3) / 1e12})
    return pd.DataFrame(rows)


PART_CHANGED = 0.05  # a part a bound holds fixed that runs over 5% shorter after the fix broke that premise


def shrunk_part(parts: dict | None) -> dict | None:
    """Of the parts a bound holds at their duration before the fix (``{name: (before_ms, after_ms)}``, the parts
    that still run), the one that ran shortest after the fix relative to before, when by more than
    :data:`PART_CHANGED`: ``{part, part_before_ms, part_after_ms}``; None when every part kept its duration."""
    if not parts:
        return None
    for name, (b, a) in parts.items():
        if not b > 0 or not a >= 0:
            raise ValueError(f"part {name!r}: {b!r} ms before, {a!r} ms after; expected a positive time before")
    name, (b, a) = min(parts.items(), key=lambda kv: kv[1][1] / kv[1][0])
    return None if a >= b * (1 - PART_CHANGED) else {"part": name, "part_before_ms": b, "part_after_ms": a}


def fix_row(fix: str, before: float, after: float, hidden: float, floors, what: str, parts: dict | None = None) -> dict:
    """One fix, one change: the share of the ``before`` step it attacks (``hidden``, same unit), its bound
    (:func:`~infralens_lab.analysis.overlap.overlap_bound`: Amdahl's ``1 / (1 - f)``, the overlap floor
    ``before / max(floors)``, which binds), and the measured speedup ``before / after``; ``within_bound`` is
    False when the measurement beats the bound by more than :data:`BOUND_SLACK`. The bound assumes the parts that
    still run keep their durations; ``parts`` (``{name: (before_ms, after_ms)}``) measures them on both sides,
    and for a beaten bound ``part``, ``part_before_ms``, ``part_after_ms`` name the one that shrank
    (:func:`shrunk_part`; None: no part shrank, and the cause is not established)."""
    b = overlap.overlap_bound(before, hidden, floors)
    got = before / after
    within = bool(got <= b["bound"] * BOUND_SLACK)
    why = None if within else shrunk_part(parts)
    return {"fix": fix, "removes": what, "f": hidden / before, "amdahl": b["amdahl"], "floor": b["overlap_floor"],
            "binds": b["binds"], "bound": b["bound"], "measured": got, "within_bound": within,
            **(why or {"part": None, "part_before_ms": None, "part_after_ms": None})}


def bound_sentence(row) -> str:
    """What one :func:`fix_row` says, in words: the bound held, or it was beaten and which premise failed."""
    head = f"{row['fix']}: measured {row['measured']:.2f}x against a bound of {row['bound']:.2f}x"
    if row["within_bound"]:
        return f"{head} ({row['binds']} binds): the bound holds"
    if row["part"] is not None:
        b, a = row["part_before_ms"], row["part_after_ms"]
        return (f"{head}: BEATEN, so the bound does not hold for this pair of runs. It assumed that what still runs "
                f"keeps its duration, and {row['part']} did not: {b:.3f} ms before the fix, {a:.3f} ms after "
                f"({100 * (1 - a / b):.0f}% shorter; the rule flags a part over {100 * PART_CHANGED:.0f}% shorter)")
    return (f"{head}: BEATEN, and no part the bound holds fixed ran more than {100 * PART_CHANGED:.0f}% shorter: "
            "the attacked share was measured wrongly or something else changed; the cause is not established")


def breaks_idle_ms(breaks: dict, whole: dict) -> tuple[float, float]:
    """``(period_ms, extra_idle_ms)`` of a forward with graph breaks against the same model compiled whole, from
    the two traces' :func:`~infralens_lab.analysis.joins.idle_budget` (``breaks``, ``whole``): the idle time per
    forward the breaks add, what removing them can save (the whole graph still idles between its kernels)."""
    idle = (breaks["period_ms"] - breaks["busy_ms"]) - (whole["period_ms"] - whole["busy_ms"])
    return breaks["period_ms"], max(0.0, idle)


def fix_table(copies: pd.DataFrame | None = None, pipe: pd.DataFrame | None = None,
              launches: pd.DataFrame | None = None, comp: pd.DataFrame | None = None, compile_traces=None) -> pd.DataFrame:
    """One row per fix whose evidence is given (:func:`fix_row`): a side stream and a second buffer for the
    pinned step (hides its exposed copy; floors: its copy and its kernels), a second pipeline buffer (hides all
    but the slower stage; floors: the two stages), a CUDA graph (removes the eager step's GPU idle time;
    floors: the graphed step's GPU busy time and its CPU issue time), and removing the graph breaks (the idle
    time the breaks add over the whole graph's own, :func:`breaks_idle_ms`, as a share of the broken forward;
    floor: its GPU busy time). ``compile_traces``: ``{'whole': Trace, 'breaks': Trace}``."""
    rows = []
    if copies is not None:
        p, d = copies.set_index("mode").loc["pinned"], copies.set_index("mode").loc["double_buffered"]
        after = d["period_ms"]
        rows.append(fix_row("side stream + 2nd buffer", p["period_ms"], after, p["exposed_copy_ms"],
                            (p["copy_ms"], p["kernel_ms"]), "exposed copy",
                            {"the copy": (p["copy_ms"], d["copy_ms"]), "the kernels": (p["kernel_ms"], d["kernel_ms"])}))
    if pipe is not None:
        d1, d2 = pipe.set_index("depth").loc[1], pipe.set_index("depth").loc[2]
        rows.append(fix_row("second pipeline buffer", d1["period_ms"], d2["period_ms"],
                            d1["period_ms"] - max(d1["stage0_ms"], d1["stage1_ms"]), (d1["stage0_ms"], d1["stage1_ms"]),
                            "all but the slower stage",
                            {"stage 0": (d1["stage0_ms"], d2["stage0_ms"]), "stage 1": (d1["stage1_ms"], d2["stage1_ms"])}))
    if launches is not None:
        e, g = launches.set_index("variant").loc["eager"], launches.set_index("variant").loc["graph"]
        rows.append(fix_row("CUDA graph", e["step_ms"], g["step_ms"], e["step_ms"] - e["gpu_busy_ms"],
                            (g["gpu_busy_ms"], g["cpu_issue_ms"]), "GPU idle time",
                            {"the GPU busy time": (e["gpu_busy_ms"], g["gpu_busy_ms"])}))
    if comp is not None and compile_traces is not None:
        t = comp.set_index("variant")
        b, w = idle_budget(compile_traces["breaks"]), idle_budget(compile_traces["whole"])  # each trace read once
        period, extra = breaks_idle_ms(b, w)
        before = t.loc["compiled_breaks", "median_ms"]
        rows.append(fix_row("remove graph breaks", before, t.loc["compiled", "median_ms"], before * extra / period,
                            (b["busy_ms"],), "idle the breaks add", {"the GPU busy time": (b["busy_ms"], w["busy_ms"])}))
    return pd.DataFrame(rows)


RATE_AGREEMENT = 0.25  # two copy rates within 25% of each other tell the same story (copy timings of one size vary ~10%)


def pageable_rates(copies: pd.DataFrame, h2d_rows: list[dict], batch_mib: float) -> dict:
    """The pageable copy's rate in the copy step's trace against the bandwidth record's pageable rows:
    ``trace_gb_per_s``, ``table_gb_per_s`` (the record's largest pageable copy of a never-written source, as
    the record's first table shows), ``written_gb_per_s`` and ``written_cpu_ms``, ``written_ms`` (a written
    source of the step's size, copied again and again: its rate, and the host's and the GPU's time for one copy;
    None when the record predates it), ``written_matches_trace`` (within :data:`RATE_AGREEMENT`, None without
    it); ``written_large_mib``, ``written_large_gb_per_s``, ``written_large_matches_trace``: the same for the
    largest written source above the step's size (None without one). ``size_explains_gap``: True when the
    step-size written copy misses the trace's rate and the larger written copy matches it (the rate then
    follows how much host memory the copies read, not written vs unwritten pages alone), None without both."""
    trace = float(copies.set_index("mode").loc["pageable", "copy_gb_per_s"])
    page = [r for r in h2d_rows if r["memory"] == "pageable"]
    fresh = [r for r in page if not r.get("written", False)]
    table = max(fresh or page, key=lambda r: r["mib"])["gb_per_s"]
    written = [r for r in page if r.get("written")]
    at = [r for r in written if r["mib"] == batch_mib]
    big = [r for r in written if r["mib"] > batch_mib]
    w = at[0] if at else None
    wl = max(big, key=lambda r: r["mib"]) if big else None

    def agrees(r):
        return None if r is None else abs(r["gb_per_s"] / trace - 1) <= RATE_AGREEMENT

    return {"trace_gb_per_s": trace, "table_gb_per_s": table,
            "written_gb_per_s": None if w is None else w["gb_per_s"], "written_matches_trace": agrees(w),
            "written_cpu_ms": None if w is None else w.get("cpu_ms"), "written_ms": None if w is None else w.get("median_ms"),
            "written_large_mib": None if wl is None else wl["mib"],
            "written_large_gb_per_s": None if wl is None else wl["gb_per_s"], "written_large_matches_trace": agrees(wl),
            "size_explains_gap": None if w is None or wl is None else (not agrees(w)) and agrees(wl)}
