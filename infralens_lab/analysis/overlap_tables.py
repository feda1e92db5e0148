"""Tables of copies, pipelines, launches, compilation and each fix's bound, from recorded values and traces.

Every number comes through :mod:`infralens_lab.analysis.overlap` (overlap, engines, launches, compiled
regions, :func:`~infralens_lab.analysis.overlap.overlap_bound`) or the series' step rules
(:func:`~infralens_lab.analysis.joins.idle_budget`: one steady period per step). Lab 05 shows these tables and
the grader (``quiz/keys/lab05.py``) computes its keys from the same functions. Traces are
:class:`~infralens_lab.parse.trace.Trace` objects; times ``_ms`` milliseconds, ``_us`` microseconds.
"""
from __future__ import annotations

import pandas as pd

from ..parse.trace import load_trace
from ..stats import Spread, ratio_range, spread_of
from . import overlap
from .bounds import BOUND_SLACK, bound_check  # noqa: F401  (BOUND_SLACK re-exported: lab 05 prints it)
from .joins import idle_budget


def period_spread(tr) -> dict:
    """The spread of a profiled trace's steady periods (:func:`~infralens_lab.analysis.overlap.step_periods`), as
    table columns: ``period_p10_ms``, ``period_p90_ms``, ``periods`` (how many)."""
    s = spread_of(overlap.step_periods(tr))
    return {"period_p10_ms": s.p10, "period_p90_ms": s.p90, "periods": s.n}


def _spread(row, median: str = "period_ms") -> Spread | None:
    """The :class:`~infralens_lab.stats.Spread` of a table row with ``period_p10_ms``/``period_p90_ms`` (the row's
    ``median`` column as its middle: the window mean, equal to the median for two periods); None without them."""
    if "period_p10_ms" not in row.index or pd.isna(row["period_p10_ms"]):
        return None
    return Spread(float(row[median]), float(row["period_p10_ms"]), float(row["period_p90_ms"]), int(row["periods"]))


def _need(t: pd.DataFrame, cols: tuple, what: str) -> None:
    missing = [c for c in cols if c not in t.columns]
    if missing:
        raise ValueError(f"{what}: columns {list(t.columns)}; expected also {missing}")


def copy_table(traces: dict, copy_bytes: float) -> pd.DataFrame:
    """One row per copy mode (``{mode: Trace}``): ``period_ms`` (one steady period, :func:`idle_budget`), the
    host-to-device copy time per step and its rate (``copy_bytes`` per step over it, GB/s), the kernel time per
    step, the share of copy time hidden under kernels (:func:`~infralens_lab.analysis.overlap.copy_overlap`),
    the exposed copy time per step, and the busy shares of the period by engine
    (:func:`~infralens_lab.analysis.overlap.engine_busy`): copy engine, SMs, either; and the periods' spread
    (:func:`period_spread`)."""
    rows = []
    for mode, tr in traces.items():
        c, e = overlap.copy_overlap(tr), overlap.engine_busy(tr)
        n = c["steps"]
        rows.append({"mode": mode, "period_ms": idle_budget(tr)["period_ms"], "copy_ms": c["copy_us"] / n / 1e3,
                     "copy_gb_per_s": copy_bytes / (c["copy_us"] / n * 1e-6) / 1e9 if c["copy_us"] else None,
                     "kernel_ms": e["kernel_us"] / 1e3, "hidden_fraction": c["fraction"],
                     "exposed_copy_ms": c["exposed_us"] / n / 1e3, "copy_engine_pct": e["copy_pct"],
                     "sm_pct": e["kernel_pct"], "busy_pct": e["any_pct"], **period_spread(tr)})
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


def h2d_table(rows: list[dict], batch_mib: float, record_hint: str) -> pd.DataFrame:
    """The recorded host-to-device bandwidth rows (``overlap_h2d``'s ``rows``); a recording made before the recorder
    timed written pages and two sizes has neither column, and says so in ``attrs['note']`` (``record_hint``: the
    command that records them)."""
    t = pd.DataFrame(rows)
    cols = [c for c in ("memory", "written", "mib", "median_ms", "gb_per_s", "cpu_ms") if c in t.columns]
    t = t[cols]
    if "written" not in t.columns:
        t.attrs["note"] = (f"This recording timed one source per memory type: a {t['mib'].iloc[0]:g} MiB buffer from "
                           "torch.empty that nothing had written. The recorder now also times written pages and the copy "
                           f"step's {batch_mib:g} MiB ({record_hint} writes them).")
    return t


def pipeline_table(traces: dict) -> pd.DataFrame:
    """One row per depth (``{depth: Trace}``): :func:`~infralens_lab.analysis.overlap.pipeline_metrics` on the
    ``stage0``/``stage1`` ranges, in milliseconds."""
    rows = []
    for d, tr in traces.items():
        m = overlap.pipeline_metrics(overlap.range_intervals(tr, "stage0"), overlap.range_intervals(tr, "stage1"))
        rows.append({"depth": d, "stage0_ms": m["stage0_us"] / 1e3, "stage1_ms": m["stage1_us"] / 1e3,
                     "period_ms": m["period_us"] / 1e3, "sum_ms": m["serial_us"] / 1e3,
                     "max_ms": m["overlapped_us"] / 1e3, "overlap_score": m["overlap_score"], "overlap_score_spread": m["overlap_score_spread"],
                     "verdict": m["verdict"]})
    return pd.DataFrame(rows)


def launch_table(values: dict, traces: dict) -> pd.DataFrame:
    """The launch-bound step per variant: CPU issue time and step time without the profiler (the
    ``launch_overhead`` record's ``rows``: ``cpu_issue_ms``, ``step_ms``), and from the traces
    (``{variant: Trace}``, profiled) launch calls, GPU events, GPU busy time and the CPU's time per step
    (``cpu_ms``: the step's range), the steady period (``period_ms``, :func:`idle_budget`, with
    :func:`period_spread`), and the GPU busy share of that period (``gpu_busy_pct``: both from the trace)."""
    t = pd.DataFrame(values["rows"])
    per = {}
    for v, tr in traces.items():
        s = overlap.launches_per_step(tr)
        per[v] = {"launch_calls": s["launch_calls"].mean(), "gpu_events": s["gpu_events"].mean(),
                  "gpu_busy_ms": s["gpu_busy_us"].mean() / 1e3, "cpu_ms": s["cpu_us"].mean() / 1e3,
                  "period_ms": idle_budget(tr)["period_ms"], **period_spread(tr)}
    t = t.join(pd.DataFrame.from_dict(per, orient="index"), on="variant")
    t["gpu_busy_pct"] = 100 * t["gpu_busy_ms"] / t["period_ms"]  # one basis: busy and period from the same trace
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


def compile_time_lines(vals: dict) -> list[str]:
    """The live CPU timings of :func:`compile_times`' record as sentences in seconds of wall time (this machine's,
    not a GPU's)."""
    return [f"{r['variant']}: first call {r['first_ms'] / 1e3:.3f} s wall, then {r['median_ms'] / 1e3:.6f} s wall "
            f"per forward (median)" for r in vals["rows"]]


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


def _untraced(before: Spread | float, after: Spread | float) -> dict:
    """The unprofiled speedup of the same two configs (``untraced``, with ``untraced_low``/``untraced_high`` from
    :func:`~infralens_lab.stats.ratio_range` when both carry a spread)."""
    if isinstance(before, Spread) and isinstance(after, Spread):
        lo, mid, hi = ratio_range(before, after)
        return {"untraced": mid, "untraced_low": lo, "untraced_high": hi,
                "untraced_steady": before.steady() and after.steady()}
    b, a = (x.median if isinstance(x, Spread) else float(x) for x in (before, after))
    return {"untraced": b / a, "untraced_low": None, "untraced_high": None, "untraced_steady": None}


def fix_row(fix: str, before: float, after: float, hidden: float, floors, what: str, parts: dict | None = None,
            spreads: tuple | None = None, untraced: tuple | None = None, basis: str = "profiled") -> dict:
    """One fix, one change, on one basis: ``before`` and ``after`` are the step's periods in the same kind of run
    as the share of ``before`` the fix attacks (``hidden``) and the ``floors`` (``basis``: which kind of run).
    Its bound (:func:`~infralens_lab.analysis.overlap.overlap_bound`: Amdahl's ``1 / (1 - f)``, the overlap floor
    ``before / max(floors)``, which binds), the measured speedup ``before / after`` with its range ``low``-``high``
    (:func:`~infralens_lab.stats.ratio_range` of ``spreads`` = (before, after) :class:`~infralens_lab.stats.Spread`,
    when given), and the verdict of :func:`~infralens_lab.analysis.bounds.bound_check` (``verdict``, ``limit`` =
    bound x :data:`BOUND_SLACK`). The bound assumes the parts that still run keep their durations; ``parts``
    (``{name: (before_ms, after_ms)}``) measures them on both sides, and ``part``, ``part_before_ms``,
    ``part_after_ms`` name the one that ran more than :data:`PART_CHANGED` shorter (:func:`shrunk_part`; None: every
    part kept its duration), whatever the verdict. ``untraced`` = (before, after) unprofiled times of the same two
    configs (ms, or :class:`~infralens_lab.stats.Spread`), when recorded: their speedup (``untraced``, range,
    ``untraced_steady``) and the profiler's overhead on each config, ``overhead_before``/``overhead_after``
    (profiled period / unprofiled time), shown beside the profiled numbers and never compared with the bound."""
    b = overlap.overlap_bound(before, hidden, floors)
    got = before / after
    lo = hi = got
    if spreads is not None and all(x is not None for x in spreads):
        lo, _, hi = ratio_range(*spreads)
    check = bound_check(got, b["bound"], lo, hi)
    why = shrunk_part(parts)
    row = {"fix": fix, "removes": what, "basis": basis, "before_ms": float(before), "after_ms": float(after),
           "f": hidden / before, "amdahl": b["amdahl"],
           "floor": b["overlap_floor"], "binds": b["binds"], "bound": b["bound"], "measured": got,
           "low": check.low, "high": check.high, "limit": check.limit, "verdict": check.verdict,
           **(why or {"part": None, "part_before_ms": None, "part_after_ms": None}),
           "untraced": None, "untraced_low": None, "untraced_high": None, "untraced_steady": None,
           "overhead_before": None, "overhead_after": None}
    if untraced is not None:
        ub, ua = (x.median if isinstance(x, Spread) else float(x) for x in untraced)
        row |= _untraced(*untraced) | {"overhead_before": before / ub, "overhead_after": after / ua}
    return row


def _check(row):
    return bound_check(row["measured"], row["bound"], row["low"], row["high"])


def _has_part(row) -> bool:
    """True when :func:`shrunk_part` named a part (a table read back holds NaN where a row holds None)."""
    v = row.get("part")
    return v is not None and not (isinstance(v, float) and pd.isna(v))


def _part_clause(row) -> str:
    b, a = row["part_before_ms"], row["part_after_ms"]
    return (f"{row['part']} ran {100 * (1 - a / b):.0f}% shorter after the fix ({b:.3f} ms before, {a:.3f} ms after; "
            f"over the {100 * PART_CHANGED:.0f}% the rule allows a part the bound keeps at its duration)")


def bound_sentence(row) -> str:
    """What one :func:`fix_row` says, in words, from its numbers: the verdict of
    :func:`~infralens_lab.analysis.bounds.bound_check` with the tolerance it used, and whether a part the bound
    holds fixed ran over :data:`PART_CHANGED` shorter (then the pair of runs does not test the bound, whichever way
    the verdict went). "the bound holds" only when both the verdict and every part agree."""
    c = _check(row)
    head = f"{row['fix']}: {c.numbers()}"
    part = _has_part(row)
    if c.verdict == "holds":
        if not part:
            return f"{head}, {row['binds']} binds: the bound holds"
        return f"{head}: within the bound's tolerance, but this pair of runs does not test it: " + _part_clause(row)
    if c.verdict == "undecided":
        out = (f"{head}: undecided: the measured range straddles {c.limit:.{c.decimals()}f}x, above which the bound is "
               "beaten, so these runs cannot tell")
        return out + ("; and its premise failed anyway: " + _part_clause(row) if part else "")
    if part:
        return (f"{head}: BEATEN, so the bound does not hold for this pair of runs. It assumed that what still runs "
                f"keeps its duration, and it did not: " + _part_clause(row))
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
    """One row per fix whose evidence is given (:func:`fix_row`), every row on one basis: the profiled traces give
    the attacked share, the floors and both periods. A side stream and a second buffer for the pinned step (hides
    its exposed copy; floors: its copy and its kernels), a second pipeline buffer (hides all but the slower stage;
    floors: the two stages), a CUDA graph (removes the eager step's GPU idle time; floors: the graphed step's GPU
    busy time and its CPU time per step, both profiled), and removing the graph breaks (the idle time the breaks
    add over the whole graph's own, :func:`breaks_idle_ms`, as a share of the broken forward; floor: its GPU busy
    time). Where the tables carry their periods' spread (:func:`period_spread`), or ``compile_traces``
    (``{'whole': Trace, 'breaks': Trace}``) are given, the measured speedup carries its range. The unprofiled
    times of the same configs (the launch record's ``step_ms``, the compile record's medians with p10-p90), when
    given, stand beside as ``untraced`` with the profiler's overhead."""
    rows = []
    if copies is not None:
        _need(copies, ("mode", "period_ms", "exposed_copy_ms", "copy_ms", "kernel_ms"), "fix_table: copies")
        p, d = copies.set_index("mode").loc["pinned"], copies.set_index("mode").loc["double_buffered"]
        rows.append(fix_row("side stream + 2nd buffer", p["period_ms"], d["period_ms"], p["exposed_copy_ms"],
                            (p["copy_ms"], p["kernel_ms"]), "exposed copy",
                            {"the copy": (p["copy_ms"], d["copy_ms"]), "the kernels": (p["kernel_ms"], d["kernel_ms"])},
                            spreads=(_spread(p), _spread(d))))
    if pipe is not None:
        d1, d2 = pipe.set_index("depth").loc[1], pipe.set_index("depth").loc[2]
        rows.append(fix_row("second pipeline buffer", d1["period_ms"], d2["period_ms"],
                            d1["period_ms"] - max(d1["stage0_ms"], d1["stage1_ms"]), (d1["stage0_ms"], d1["stage1_ms"]),
                            "all but the slower stage",
                            {"stage 0": (d1["stage0_ms"], d2["stage0_ms"]), "stage 1": (d1["stage1_ms"], d2["stage1_ms"])}))
    if launches is not None:
        _need(launches, ("variant", "period_ms", "gpu_busy_ms", "cpu_ms", "step_ms"), "fix_table: launches")
        e, g = launches.set_index("variant").loc["eager"], launches.set_index("variant").loc["graph"]
        rows.append(fix_row("CUDA graph", e["period_ms"], g["period_ms"], e["period_ms"] - e["gpu_busy_ms"],
                            (g["gpu_busy_ms"], g["cpu_ms"]), "GPU idle time",
                            {"the GPU busy time": (e["gpu_busy_ms"], g["gpu_busy_ms"])},
                            spreads=(_spread(e), _spread(g)), untraced=(e["step_ms"], g["step_ms"])))
    if comp is not None and compile_traces is not None:
        t = comp.set_index("variant")
        b, w = idle_budget(compile_traces["breaks"]), idle_budget(compile_traces["whole"])  # each trace read once
        period, extra = breaks_idle_ms(b, w)
        sb, sw = (Spread(x["period_ms"], *(lambda s: (s.p10, s.p90, s.n))(spread_of(overlap.step_periods(tr))))
                  for x, tr in ((b, compile_traces["breaks"]), (w, compile_traces["whole"])))

        def timed(v):
            r = t.loc[v]
            # the record keeps no sample count: n = 0 says unknown (only p10, median and p90 are used)
            return Spread(r["median_ms"], r["p10_ms"], r["p90_ms"], 0) if "p10_ms" in t.columns else r["median_ms"]

        rows.append(fix_row("remove graph breaks", period, w["period_ms"], extra, (b["busy_ms"],),
                            "idle the breaks add", {"the GPU busy time": (b["busy_ms"], w["busy_ms"])},
                            spreads=(sb, sw), untraced=(timed("compiled_breaks"), timed("compiled"))))
    return pd.DataFrame(rows)


def fix_tables_by_gpu(stores, copy_modes, copy_bytes: float) -> dict[str, pd.DataFrame]:
    """``{gpu: fix_table}`` for every recorded set in ``stores`` that holds the records it reads (the copy traces of
    ``copy_modes``, pipeline, launch and compile traces, ``launch_overhead``, ``compile_study``), each from its own
    recording: the same calls lab 05's cells make on the reference set."""
    names = {**{m: f"trace_copy_{m}" for m in copy_modes}, **{d: f"trace_pipeline_d{d}" for d in (1, 2)},
             **{v: f"trace_launch_{v}" for v in ("eager", "graph")}, **{k: f"trace_compile_{k}" for k in ("whole", "breaks")}}
    out = {}
    for st in stores:
        if not {"launch_overhead", "compile_study", *names.values()} <= set(st.names()):
            continue
        t = {k: load_trace(st.load(n)) for k, n in names.items()}  # each trace read once
        key = st.gpu if st.gpu not in out else f"{st.gpu} ({st.folder.name})"  # two sets of one GPU stay apart
        out[key] = fix_table(copy_table({m: t[m] for m in copy_modes}, copy_bytes), pipeline_table({d: t[d] for d in (1, 2)}),
                                launch_table(st.load("launch_overhead").values, {v: t[v] for v in ("eager", "graph")}),
                                compile_times(st.load("compile_study").values), {k: t[k] for k in ("whole", "breaks")})
    return out


def basis_lines(tables: dict) -> list[str]:
    """For every fix whose unprofiled times are recorded (``untraced``), per GPU from its own recording: the
    one-basis verdict (profiled periods, the runs its f comes from), the unprofiled speedup with its range and the
    profiler's overhead on each config, and what comparing that speedup with the profiled bound (two bases) would
    have said; and, when two bases give different verdicts on the GPUs where one basis gives the same, that the
    flip follows the profiler's overhead, not the GPU; last, the fixes whose configs were timed only under the
    profiler (their overhead is not measured)."""
    out, profiled_only = [], []
    for fix in pd.unique(pd.concat([t["fix"] for t in tables.values()])):
        rows = {g: t.set_index("fix").loc[fix] for g, t in tables.items() if fix in set(t["fix"])}
        rows = {g: r for g, r in rows.items() if r["untraced"] is not None and not pd.isna(r["untraced"])}
        if not rows:
            profiled_only.append(fix)
        mixed = {}
        for g, r in rows.items():
            lo, hi = r["untraced_low"], r["untraced_high"]
            ranged = lo is not None and not pd.isna(lo)
            two = bound_check(r["untraced"], r["bound"], *((lo, hi) if ranged else ()))
            mixed[g] = bound_check(r["untraced"], r["bound"]).verdict
            noisy = (" (an input's p10-p90 spans more than 10% of its median: no verdict is drawn from it)"
                     if r["untraced_steady"] is not None and not pd.isna(r["untraced_steady"])
                     and not bool(r["untraced_steady"]) else "")
            out.append(f"{g}, {fix}: one basis, the profiled periods its f comes from ({r['before_ms']:.3f} -> "
                       f"{r['after_ms']:.3f} ms): {r['verdict']}. Unprofiled, the same configs ran {two.measured:.2f}x"
                       + (f" (range {two.low:.2f}-{two.high:.2f}x)" if ranged else "") + noisy +
                       f"; profiled period over unprofiled time (the profiler's overhead): {r['overhead_before']:.2f}x "
                       f"before the fix, {r['overhead_after']:.2f}x after it. Against the bound from the traces ({r['bound']:.2f}x), that "
                       f"unprofiled median would read {mixed[g]}: two bases, so it is not the verdict")
        one = {tables[g].set_index("fix").loc[fix, "verdict"] for g in rows}
        if len(set(mixed.values())) > 1 and len(one) == 1:
            said = ", ".join(f"{g} {v}" for g, v in mixed.items())
            over = ", ".join(f"{g} {r['overhead_after'] / r['overhead_before']:.2f}x" for g, r in rows.items())
            out.append(f"{fix}: on two bases the verdict flips between GPUs ({said}); on one basis it does not. The "
                       f"flip follows how unevenly the profiler's overhead fell on the two configs (after over before: {over}), "
                       "not the GPU")
    if profiled_only:
        out.append(f"{', '.join(profiled_only)}: these recordings time the configs only under the profiler, so the "
                   "profiler's overhead on them is not measured; their verdicts hold for profiled runs")
    return out


def verdicts_by_gpu(tables: dict) -> pd.DataFrame:
    """The fix tables of several recorded sets (``{gpu: fix_table}``, each from its own recording) side by side:
    one row per fix, per GPU its ``verdict`` and its ``binds``, and ``flips`` (True when the verdicts differ) and
    ``binds_flips`` (the floor that binds differs)."""
    if len(tables) < 1:
        raise ValueError("verdicts_by_gpu: no fix tables; expected {gpu: fix_table} for one or more recorded sets")
    out = pd.DataFrame({"fix": pd.unique(pd.concat([t["fix"] for t in tables.values()]))}).set_index("fix")
    for gpu, t in tables.items():
        t = t.set_index("fix")
        out[f"{gpu} verdict"] = t["verdict"]
        out[f"{gpu} binds"] = t["binds"]
    v = out[[c for c in out.columns if c.endswith(" verdict")]]
    k = out[[c for c in out.columns if c.endswith(" binds")]]
    out["flips"] = v.nunique(axis=1, dropna=False) > 1
    out["binds_flips"] = k.nunique(axis=1, dropna=False) > 1
    return out.reset_index()


def flip_lines(tables: dict) -> list[str]:
    """One sentence per fix of :func:`verdicts_by_gpu`, one GPU per clause, each from its own recording: the
    verdict on each GPU with its numbers (:func:`bound_sentence`'s), and for a fix whose verdict or binding floor
    differs, why, from the numbers: which of the two sides of the comparison moved between the GPUs, the bound
    (its share f, or its floor) or the measured speedup."""
    by = verdicts_by_gpu(tables)
    out = []
    for r in by.itertuples(index=False):
        rows = {g: t.set_index("fix").loc[r.fix] for g, t in tables.items() if r.fix in set(t["fix"])}
        each = "; ".join(f"{g}: {_check(x).numbers()}, {x['verdict']} ({x['binds']} binds"
                         + (f"; premise failed: {x['part']} {100 * (1 - x['part_after_ms'] / x['part_before_ms']):.0f}% "
                            "shorter after the fix)" if _has_part(x) else ")") for g, x in rows.items())
        if not (r.flips or r.binds_flips):
            out.append(f"{r.fix}: the same verdict on every GPU ({each})")
            continue
        (g1, x1), (g2, x2) = list(rows.items())[:2]
        what = "verdicts" if r.flips else "binding floors"
        if r.flips:
            why = (f"the bound moved {100 * (x2['bound'] / x1['bound'] - 1):+.0f}% from {g1} to {g2} (f {x1['f']:.3f} -> "
                   f"{x2['f']:.3f}) and the measured speedup {100 * (x2['measured'] / x1['measured'] - 1):+.0f}%")
        else:
            why = (f"Amdahl's 1 / (1 - f) went {x1['amdahl']:.2f}x -> {x2['amdahl']:.2f}x (f {x1['f']:.3f} -> {x2['f']:.3f}) "
                   f"and the overlap floor {x1['floor']:.2f}x -> {x2['floor']:.2f}x from {g1} to {g2}: the lower one binds")
        out.append(f"{r.fix}: the {what} FLIP between GPUs ({each}): {why}")
    return out


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
