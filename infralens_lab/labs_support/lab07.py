"""Glue for lab 07 (regression gates): the live ResNet-50 trace on this machine, the recorded GPU traces
and their kernel lists per memory format, live noise and A/A ratios, the k-and-tolerance table, and the
regression table (counts live, times recorded).

Measuring lives in :mod:`infralens_lab.measure.gates` and :mod:`infralens_lab.measure.top_ops`, the
arithmetic in :mod:`infralens_lab.analysis.gates`; this module loads, calls and captions. A loader
whose record is absent prints what is missing and returns ``None``. Times: ``_us`` µs, ``_ms`` ms.
"""
from __future__ import annotations

import pandas as pd

from .. import evidence
from . import check_on, store  # noqa: F401  (re-exported for the notebook)
from ..measure.torch_trace import quiet_profiler_chatter as quiet_stderr
from ..analysis import gates as A
from ..measure import gates as G
from ..measure.timing import percentile, time_fn
from ..measure.top_ops import kernel_families
from ..parse.trace import Trace, load_trace
from ..measure.torch_trace import profile
from ..workloads.gated import REGRESSIONS, MLPStep
from ..workloads.resnet import MEMORY_FORMATS, inference_step

CPU_BATCH, CPU_SIZE = 1, 224  # one image at full size: ~40 ms a forward on a laptop core
KS = (1, 3, 5, 9, 15, 31)
RECORD = "gates_gpu"


# ---------------------------------------------------------------- part 1: top operators
def live_resnet(memory_format: str = "channels_first") -> tuple[Trace, evidence.Evidence]:
    """Profile ResNet-50 inference here (one warm-up forward, two recorded; CPU activity, plus CUDA on a
    GPU) at ``CPU_BATCH`` x 3 x ``CPU_SIZE``², fp32; returns ``(Trace, Evidence)``."""
    step = inference_step(CPU_BATCH, CPU_SIZE, memory_format)
    with quiet_stderr():
        tr = profile(step, wait=0, warmup=1, active=2)
    cmd = (f"torch_trace.profile(resnet.inference_step({CPU_BATCH}, {CPU_SIZE}, {memory_format!r}), "
           f"wait=0, warmup=1, active=2)")
    return tr, evidence.live(f"resnet_trace_{memory_format}_live", {"summary": tr.summary()}, cmd)


def op_calls(tr: Trace, top: int | None = 10) -> pd.DataFrame:
    """aten ops by calls per forward (no timings: the same on every run): ``op, calls_per_step``."""
    ops = tr.ops()
    ops = ops[ops["name"].str.startswith("aten::")]
    steps = max(1, tr.summary()["steps"])
    out = pd.DataFrame({"op": ops["name"], "calls_per_step": ops["count"] / steps})
    out = out.sort_values(["calls_per_step", "op"], ascending=[False, True])
    return (out.head(top) if top else out).reset_index(drop=True)


def recorded_resnet(st) -> dict | None:
    """``{memory_format: (Trace, Evidence)}`` from the recorded set, or None with a note."""
    if st is None:
        return None
    want = [f"resnet_trace_{f}" for f in MEMORY_FORMATS]
    missing = [n for n in want if n not in st.names()]
    if missing:
        print(f"Recorded ResNet-50 traces: {missing} not in the recorded set ({st.gpu}) yet; they are written on "
              f"a GPU by `python -m infralens_lab record --only gates`.")
        return None
    return {f: (load_trace(st.load(n)), st.load(n)) for f, n in zip(MEMORY_FORMATS, want)}


def top_kernels(tr: Trace, top: int = 5) -> pd.DataFrame:
    """Kernels by GPU time: name (cut at 90 characters), launches, total µs, share, and family."""
    from ..measure.top_ops import kernel_family

    k = tr.kernels(top=top)
    return pd.DataFrame({"kernel": [n if len(n) <= 90 else n[:87] + "..." for n in k["name"]],
                         "family": [kernel_family(n) for n in k["name"]], "launches": k["count"],
                         "total_us": k["total_us"], "pct": k["pct"]})


def format_compare(traces: dict) -> pd.DataFrame:
    """Kernel time and launches by family, one column pair per memory format (µs and launch counts of
    one forward), plus the forward's total kernel time."""
    parts = []
    for fmt, (tr, _) in traces.items():
        f = kernel_families(tr).set_index("family")[["launches", "total_us"]]
        parts.append(f.rename(columns={"launches": f"{fmt}_launches", "total_us": f"{fmt}_us"}))
    out = pd.concat(parts, axis=1).fillna(0)
    out.loc["all kernels"] = out.sum()
    return out.reset_index().rename(columns={"index": "family"})


def forward_times(ev) -> pd.DataFrame:
    """Recorded ResNet-50 forward time per memory format: batch, dtype, median and p10/p90 (ms)."""
    return pd.DataFrame([{"memory_format": f, "batch": r["batch"], "dtype": r["dtype"], "median_ms": r["median_ms"],
                          "p10_ms": r["p10_ms"], "p90_ms": r["p90_ms"]} for f, r in ev.values.get("resnet", {}).items()])


# ---------------------------------------------------------------- part 2: noise here
def live_noise(runs: int = 40, steps: int = 5) -> pd.DataFrame:
    """Wall-clock times here of the intended MLP step (``steps`` steps per run) and ratios of two identical
    steps timed back to back (an A/A run): ``run, a_ms, b_ms, ratio`` (``ratio = a / b``)."""
    a, b = MLPStep(None, device="cpu", batch=8, seq=64, width=128), MLPStep(None, device="cpu", batch=8, seq=64,
                                                                           width=128)

    def block(s):
        return lambda: [s() for _ in range(steps)]

    rows = []
    for i in range(runs):
        ta = time_fn(block(a), warmup=1 if i == 0 else 0, repeats=1, clock="cpu").median_ms
        tb = time_fn(block(b), warmup=0, repeats=1, clock="cpu").median_ms
        rows.append({"run": i, "a_ms": ta, "b_ms": tb, "ratio": ta / tb})
    return pd.DataFrame(rows)


def noise_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Median, p10, p90 and spread (p90 - p10) / median of the absolute times and of the A/A ratios."""
    rows = []
    for what, col in (("absolute time a (ms)", "a_ms"), ("ratio a / b", "ratio")):
        x = list(df[col])
        rows.append({"what": what, "median": percentile(x, 50), "p10": percentile(x, 10), "p90": percentile(x, 90),
                     "spread_pct": 100 * A.spread(x)})
    return pd.DataFrame(rows)


def k_table(ratios, tolerance: float = 0.05, slowdown: float = 0.10, ks=KS) -> pd.DataFrame:
    """For each k: the p10-p90 band of the median of k ratios (bootstrapped from ``ratios``), how often an
    unchanged candidate fails at ``tolerance`` and how often a ``slowdown`` is caught (percent)."""
    rows = []
    for k in ks:
        lo, med, hi = A.median_band(ratios, k)
        rows.append({"k": k, "median_p10": lo, "median_p90": hi, "band_pct": 100 * (hi - lo) / med,
                     "false_alarm_pct": 100 * A.false_alarm_rate(ratios, k, tolerance),
                     f"catches_{round(100 * slowdown)}pct_slower_pct": 100 * A.detection_rate(ratios, k, tolerance,
                                                                                            slowdown)})
    return pd.DataFrame(rows)


def smallest_k(table: pd.DataFrame, max_false_alarm_pct: float = 1.0) -> int | None:
    """The smallest k in a :func:`k_table` whose false-alarm rate is at most ``max_false_alarm_pct``."""
    ok = table[table["false_alarm_pct"] <= max_false_alarm_pct]
    return None if ok.empty else int(ok["k"].min())


def recorded_gates(st) -> evidence.Evidence | None:
    """The ``gates_gpu`` record, or None with a note."""
    if st is None:
        return None
    if RECORD not in st.names():
        print(f"Recorded gate evidence: `{RECORD}` is not in the recorded set ({st.gpu}) yet; it is written on a "
              f"GPU by `python -m infralens_lab record --only gates`.")
        return None
    return st.load(RECORD)


# ---------------------------------------------------------------- part 3: regressions
def regression_counts_live() -> pd.DataFrame:
    """Counts here for the intended MLP step and each regression: aten ops, syncs, peak bytes per step
    (:func:`measure.gates.count_step`) and graph breaks of its compiled chain (``graph_breaks``)."""
    rows = []
    for reg in (None,) + REGRESSIONS:
        s = MLPStep(reg)
        with quiet_stderr():
            c = G.count_step(s)
        rows.append({"regression": reg or "intended", "aten_ops_per_step": c.aten_ops_per_step,
                     "syncs_per_step": c.syncs_per_step, "graph_breaks": G.graph_breaks(s.chain, *s.chain_args()).breaks,
                     "peak_bytes": c.peak_bytes})
    return pd.DataFrame(rows)


def caught(table: pd.DataFrame, slack: float = 0.05) -> pd.DataFrame:
    """Which count gate catches each regression: a gate set at the intended step's value catches a
    count above it (bytes: more than ``slack`` above). ``True``/``False`` per gate, and the list."""
    base = table.set_index("regression").loc["intended"]
    rows = []
    for r in table.itertuples(index=False):
        if r.regression == "intended":
            continue
        row = {"regression": r.regression}
        for m in ("aten_ops_per_step", "syncs_per_step", "graph_breaks", "peak_bytes"):
            limit = base[m] * (1 + slack) if m == "peak_bytes" else base[m]
            row[m] = bool(getattr(r, m) > limit)
        row["caught_by"] = ", ".join(m for m in ("aten_ops_per_step", "syncs_per_step", "graph_breaks", "peak_bytes")
                                     if row[m]) or "none"
        rows.append(row)
    return pd.DataFrame(rows)


def regression_times(ev, tolerance: float | None = None) -> pd.DataFrame | None:
    """Recorded on the GPU, per regression and mode: CUDA launches and syncs per step, and the median of
    the k wall-clock ratios ``t_intended / t_regressed`` with its p10-p90. ``caught_by_time``: the median
    is below ``1 - tolerance``; the tolerance defaults to the recorded A/A spread."""
    if ev is None or "regressions" not in ev.values:
        return None
    v = ev.values
    tol = tolerance if tolerance is not None else A.spread(v["aa_ratios"])
    rows = []
    for r in v["regressions"]:
        if r["regression"] == "intended":
            continue
        x = r["ratio_samples"]
        med = percentile(x, 50)
        rows.append({"regression": r["regression"], "mode": "compiled" if r["compiled"] else "eager",
                     "launches_per_step": r.get("launches_per_step"), "cuda_syncs_per_step": r.get("cuda_syncs_per_step"),
                     "ratio_median": med, "ratio_p10": percentile(x, 10), "ratio_p90": percentile(x, 90),
                     "caught_by_time": bool(med < 1 - tol)})
    out = pd.DataFrame(rows)
    out.attrs["tolerance"] = tol
    return out


def gpu_counts(ev) -> pd.DataFrame | None:
    """Recorded GPU counts of the intended step and each regression, eager and compiled."""
    if ev is None:
        return None
    cols = ["regression", "compiled", "launches_per_step", "cuda_syncs_per_step", "graph_breaks", "aten_ops_per_step"]
    return pd.DataFrame([{c: r.get(c) for c in cols} for r in ev.values.get("regressions", [])])


def matmul_kernels(ev) -> pd.DataFrame | None:
    """The GEMM kernels of the eager intended step and of the fp32_matmul regression (recorded): the
    name says which math the matmul ran in."""
    if ev is None:
        return None
    from ..measure.top_ops import kernel_family

    rows = []
    for r in ev.values.get("regressions", []):
        if r["compiled"] or r["regression"] not in ("intended", "fp32_matmul"):
            continue
        for k in r.get("kernels", []):
            if kernel_family(k["name"]) in ("gemm", "convolution"):
                rows.append({"step": r["regression"], "kernel": k["name"][:90], "per_step": k["per_step"],
                             "us_per_step": k["total_us"]})
    return pd.DataFrame(rows)


def ratio_gate_table(ev, thresholds: dict) -> pd.DataFrame | None:
    """Per ratio gate: the recorded samples' median (what the gate is held to) and spread, the bench's ratio
    of the same pair and how far the two procedures are apart (``procedure_gap_pct``), the file's tolerance
    and k, and the k that :func:`analysis.gates.runs_needed` asks for at that tolerance."""
    if ev is None:
        return None
    bench = G.reference_ratios()
    rows = []
    for name, rule in thresholds["ratios"].items():
        x = ev.values.get("ratio_gates", {}).get(name)
        if not x:
            continue
        s, med = A.spread(x), percentile(x, 50)
        b = bench.get(name)
        rows.append({"ratio": name, "gate_reference": med, "bench_ratio": b,
                     "procedure_gap_pct": 100 * (med / b - 1) if b else None, "n": len(x),
                     "spread_pct": 100 * s, "tolerance_pct": 100 * rule["tolerance"], "k": rule["k"],
                     "k_needed": A.runs_needed(s, rule["tolerance"])})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- quiz evidence
def change_by_family(cmp: pd.DataFrame) -> pd.DataFrame:
    """Per family, the absolute change of GPU time between the two memory formats (``abs_change_us``);
    the evidence lab07.q5 is checked against, built after the learner's answer."""
    t = cmp[cmp["family"] != "all kernels"]
    return pd.DataFrame({"family": t["family"], "abs_change_us": (t["channels_first_us"] - t["channels_last_us"]).abs()})


def check_derived(qid: str, answer, ev):
    """:func:`check_on`, but a derived answer outside the question's vocabulary (a trace from another
    torch build can rank an op the bank does not list) prints why instead of stopping the notebook."""
    try:
        return check_on(qid, answer, ev)
    except ValueError as exc:
        print(f"{qid}: cannot be marked against this evidence: {exc}")
        return None


def show_question(qid: str, ev) -> None:
    """``self_check(qid, evidence=ev)``; with no evidence (a recording not there yet) the question's text
    is printed all the same, so it stays visible, with a note that it cannot be checked here."""
    from ..quiz import self_check
    from ..quiz.widgets import question_text

    if ev is None:
        print(question_text(qid))
        print("(The evidence this question is checked against is not here yet, so it cannot be checked now.)")
        return None
    return self_check(qid, evidence=ev)
