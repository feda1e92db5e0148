"""Glue for lab 01 (the Nsight workflow): the step the notebook profiles live, the recorded bubble/fixed
traces and their before/after table, the idle time by cause, the hot kernel, the commands to profile it
and its counters, the recorded matmul ceilings per precision, the recorded spreads, and the bottleneck
statement written from those numbers (trace tables: :mod:`infralens_lab.present.trace_tables`).

Traces go through :class:`infralens_lab.parse.trace.Trace` whether they were taken now or
recorded on a GPU; counters through :mod:`infralens_lab.measure.ncu`. A loader whose record is
absent prints what is missing and returns ``None``, so cells never crash. Times: ``_us``
microseconds, ``_ms`` milliseconds.
"""
from __future__ import annotations

import shlex

import pandas as pd

from .. import evidence
from . import check_on, store  # noqa: F401  (re-exported: notebooks call lab01.check_on and lab01.store)
from ..device import is_gpu
from ..parse import ncu as N
from ..measure import ncu as NR
from ..measure import nsys
from ..analysis import joins, stalls
from ..analysis.variants import (FP32_GEMM, RECORD as VARIANTS_RECORD, one_change_notes, one_change_table,  # noqa: F401
                                 precision_notes as _precision_notes, precision_table)
from ..analysis.joins import idle_budget  # noqa: F401  (re-exported: the lab shows it)
from ..analysis.roofline import sol_verdict
from ..parse.ncu import demangled_regex  # noqa: F401  (re-exported: the lab shows it)
from ..parse.trace import Trace, idle_by_cause, load_trace, step_gpu_work  # noqa: F401
from ..measure.torch_trace import profile, quiet_profiler_chatter  # noqa: F401  (re-exported: the lab uses them)
from ..workloads.pipeline import VARIANTS, VERSIONS, make_step, make_variant
from ..workloads.tiny_gpt import GPTConfig
from ..measure.timing import time_fn, time_steps
from ..present import shorten_names
from ..present.trace_tables import gap_view, hot_kernel_name, hot_kernels, ops_by_count, ranges_view  # noqa: F401
from ..analysis.stalls import explain

# On a CPU the traced step only has to show ranges and ops, so it is tiny (well under a second).
CPU_CONFIG = GPTConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=64, ffn=128, vocab=256, block_size=32)
CPU_BATCH = 2
TRAIN_STEP_FILE = "ncu_train_step.csv"
TARGET = ["--kernel", "train_step", "--warmup", "2", "--iters", "1"]


# ---------------------------------------------------------------- live
def live_step(version: str = "bubble"):
    """The pipeline's training step to profile now (a callable): the GPU sizes on a GPU, a tiny TinyGPT on
    the CPU in interpreter mode, where a trace holds ranges and CPU ops but no kernels."""
    if version not in VERSIONS:
        raise ValueError(f"version {version!r}; expected one of {VERSIONS}")
    return make_step(version) if is_gpu() else make_step(version, config=CPU_CONFIG, batch=CPU_BATCH)


def precision_notes(table: pd.DataFrame, busy_floor_pct: float = 80.0) -> list[str]:
    """``variants.precision_notes`` with each top kernel's name shortened as the table shows it."""
    return _precision_notes(table.assign(top_kernel=shorten_names(table["top_kernel"].tolist())), busy_floor_pct)


def live_evidence(tr: Trace, version: str):
    """The provenance of a trace the notebook took now with torch.profiler (wait=1, warmup=1, active=3)."""
    return evidence.live(f"trace_{version}_live", {"summary": tr.summary()},
                         f"torch.profiler over lab01.live_step({version!r}), schedule(wait=1, warmup=1, active=3)")


def time_step(version: str = "fixed", warmup: int = 3, repeats: int = 20):
    """:func:`infralens_lab.measure.timing.time_fn` over whole pipeline steps (CUDA events on a GPU;
    in interpreter mode it declines to time, and says why)."""
    return time_fn(live_step(version), warmup=warmup, repeats=repeats)


# ---------------------------------------------------------------- recorded traces
def recorded_traces(st) -> dict | None:
    """``{'bubble': (Trace, Evidence), 'fixed': (Trace, Evidence)}`` from the recorded set, or None with a note."""
    if st is None:
        return None
    names = st.names()
    missing = [f"trace_{v}" for v in VERSIONS if f"trace_{v}" not in names]
    if missing:
        print(f"Recorded traces: {missing} not in the recorded set yet; they are written on a GPU by "
              f"`python -m infralens_lab record --only traces`.")
        return None
    evs = {v: st.load(f"trace_{v}") for v in VERSIONS}
    return {v: (load_trace(ev), ev) for v, ev in evs.items()}


def compare(traces: dict) -> pd.DataFrame:
    """Before/after table of the pipeline versions (:func:`infralens_lab.analysis.joins.trace_comparison`)."""
    return joins.trace_comparison({v: tr for v, (tr, _) in traces.items()})


def range_notes(tr: Trace, version: str) -> list[str]:
    """Sentences comparing each phase's CPU time with the GPU time of the kernels it launched,
    computed from :func:`ranges_view` (a CPU-only trace gets one sentence saying there is no GPU side)."""
    if not tr.has_gpu:
        return [f"{version}: CPU-only trace, so there is no GPU time to hold the ranges against."]
    r = ranges_view(tr, with_times=True)
    out = []
    for row in r.itertuples(index=False):
        if row.range not in ("data", "forward", "backward", "optimizer", "log"):
            continue
        if row.gpu_ms_per_step > 2 * row.cpu_ms_per_step:
            out.append(f"{version}: '{row.range}' takes {row.cpu_ms_per_step:.1f} ms of CPU time per step but launches "
                       f"{row.gpu_ms_per_step:.1f} ms of GPU work: the CPU only queues it and runs ahead.")
        elif row.cpu_ms_per_step > 2 * row.gpu_ms_per_step and row.cpu_ms_per_step >= 0.1:
            out.append(f"{version}: '{row.range}' holds the CPU for {row.cpu_ms_per_step:.1f} ms per step for "
                       f"{row.gpu_ms_per_step:.1f} ms of GPU work: the CPU waits (or works) here while the GPU "
                       f"gets little new from it.")
    return out or [f"{version}: every phase's CPU time is within a factor 2 of the GPU work it launched."]


# ---------------------------------------------------------------- layer 2: the hot kernel
# ncu matches the short function name: the leading identifier of torch.profiler's kernel name, escaped
kernel_regex = N.short_name_regex


def commands(hot_kernel: str) -> dict:
    """The command lines a learner runs on their own GPU: nsys over the fixed step, then ncu on the
    hot kernel only (speed of light first, then the full set). Kernels are matched by their demangled
    name (``--kernel-name-base demangled``), so a template instantiation is matched exactly."""
    rx = demangled_regex(hot_kernel)

    def ncu(*what):
        cmd = NR.ncu_command(TARGET, rx, sections=["SpeedOfLight"], launch_count=1, python="python")
        i = cmd.index("--kernel-name")
        cmd[i:i] = ["--kernel-name-base", "demangled"]
        j = cmd.index("--section")
        cmd[j:j + 2] = list(what)
        return shlex.join(cmd)

    return {
        "nsys (timeline)": nsys.command_line(TARGET[:2] + ["--warmup", "2", "--iters", "3"], output="train_step"),
        "ncu (speed of light of the hot kernel)": ncu("--section", "SpeedOfLight"),
        # every section: ~40 replay passes, so only on the one kernel
        "ncu (everything, once the SOL says where to look)": ncu("--set", "full"),
    }


def hot_kernel_counters(st, hot_kernel: str):
    """Speed of light (and DRAM, occupancy, dominant stall) of the hot kernel: live with ncu on a GPU,
    else from the recorded ``ncu_train_step.csv``; ``(row dict, caption)`` or None with a note."""
    rx = kernel_regex(hot_kernel)
    text, cap = None, None
    if is_gpu() and NR.ncu_binary():
        metrics = N.TIME + N.SOL + N.DRAM + N.OCCUPANCY + N.STALLS
        try:
            text = NR.run_ncu(TARGET, rx, metrics=metrics, launch_count=1)
            cap = evidence.live("ncu_hot_kernel", {"csv": text}, NR.command_line(TARGET, rx, metrics=metrics,
                                                                               launch_count=1)).caption()
        except N.NcuError as exc:
            print(f"Live ncu failed: {exc.message}\nfix: {exc.fix}")
    if text is None:
        if st is None or TRAIN_STEP_FILE not in st.files():
            print(f"Hot-kernel counters: {TRAIN_STEP_FILE} is not in the recorded set yet (and ncu cannot run "
                  f"here), so this step shows the commands only. Run them on a GPU, or record with "
                  f"`python -m infralens_lab record` once the recorder has a train-step ncu step.")
            return None
        text, cap = st.text(TRAIN_STEP_FILE), st.provenance.caption() + f" · file {TRAIN_STEP_FILE}"
    df = N.parse_raw_csv(text)
    sel = df[df["kernel"].str.contains(rx, regex=True)]
    if sel.empty:
        print(f"Hot-kernel counters: no launch of {hot_kernel!r} in the ncu data; kernels there: "
              f"{sorted(set(df['kernel']))[:8]}")
        return None
    sol = N.speed_of_light(sel).mean(numeric_only=True)
    row = {"kernel": hot_kernel, "time_us": sol["time_ns"] / 1e3, "sm_pct": sol["sm_pct"], "memory_pct": sol["memory_pct"]}
    d = N.dram_bytes(sel).mean(numeric_only=True)
    row["dram_tbps"] = (d["read_bytes"] + d["write_bytes"]) / (sol["time_ns"] * 1e-9) / 1e12
    row["achieved_occupancy_pct"] = N.occupancy(sel)["achieved_pct"].mean()
    if N.has_stalls(sel):
        row["dominant_stall"] = stalls.dominant(N.stall_breakdown(sel))
    return row, cap


# ---------------------------------------------------------------- precision
def matmul_ceilings(st) -> tuple[pd.DataFrame, str] | None:
    """The recorded 8192³ matmul rate per precision (``ceilings``: median of CUDA-event timings) as
    ``dtype, rate_TFLOPs``, with its caption; None with a note if not recorded."""
    if st is None or "ceilings" not in st.names():
        print("Matmul ceilings: no `ceilings` record yet.")
        return None
    ev = st.load("ceilings")
    rows = [{"dtype": r["dtype"], "shape": f"{r['M']}x{r['N']}x{r['K']}", "rate_TFLOPs": r["flops_per_s"] / 1e12}
            for r in ev.values["matmul"]]
    return pd.DataFrame(rows), ev.caption()


# ---------------------------------------------------------------- one change at a time
def variants(st):
    """The ``pipeline_variants`` record (each pipeline variant timed and profiled on the GPU), or None with
    a one-line note when the recorded set predates it."""
    if st is None or VARIANTS_RECORD not in st.names():
        print(f"One change at a time: the recorded set ({st.gpu if st is not None else 'none'}) has no "
              f"`{VARIANTS_RECORD}` record yet; `python -m infralens_lab record --only variants` writes it on a GPU.")
        return None
    return st.load(VARIANTS_RECORD)


def live_variants(names, steps: int = 20):
    """On a GPU: ``(table, Evidence)`` of each variant's wall-clock step now (``step_ms``: ``steps`` back to back
    after ``steps`` synced ones, :func:`time_steps`), at the pipeline's GPU sizes; in interpreter mode None."""
    if not is_gpu():
        print("Live: interpreter mode, so this cell shows the recording only (a CPU has no GPU queue to starve).")
        return None
    rows = [{"variant": n, "changed": VARIANTS[n].changed,
             "step_ms": time_steps(make_variant(n), steps, steps, skip=steps // 2)["throughput_ms_per_step"]}
            for n in names]
    return pd.DataFrame(rows), evidence.live("variants_live", rows, f"lab01.live_variants({list(names)}, {steps})")


# ---------------------------------------------------------------- spread
def recorded_spread(st) -> tuple[pd.DataFrame, str] | None:
    """Median and p10/p90 of recorded timings: the fp16 matmul size sweep (``ceilings``) and, if
    recorded, whole training steps (``step_times``). ``spread_pct = (p90 - p10) / median``."""
    if st is None or "ceilings" not in st.names():
        print("Recorded spread: no `ceilings` record yet.")
        return None
    ev = st.load("ceilings")
    rows = []
    for r in ev.values.get("sweep", []):
        rows.append({"what": f"fp16 matmul {r['M']}³", "n": r.get("n"), "median_ms": r["median_ms"],
                     "p10_ms": r["p10_ms"], "p90_ms": r["p90_ms"]})
    files = ["ceilings.json"]
    if "step_times" in st.names():
        files.append("step_times.json")
        for v, d in st.load("step_times").values.items():
            rows.append({"what": f"training step ({v}), per-step sync", "n": len(d.get("per_step_sync_ms", [])[10:]),
                         "median_ms": d["median_ms"], "p10_ms": d["p10_ms"], "p90_ms": d["p90_ms"]})
    out = pd.DataFrame(rows)
    out["spread_pct"] = 100 * (out["p90_ms"] - out["p10_ms"]) / out["median_ms"]
    return out, st.provenance.caption() + " · files " + ", ".join(files)


def step_times(st) -> tuple[pd.DataFrame, str] | None:
    """Per-step synchronised times (warm-up first) and back-to-back throughput per version, from the
    ``step_times`` record; None with a note if it is not recorded yet."""
    if st is None or "step_times" not in st.names():
        print("Step times: the recorded set has no `step_times` record yet (warm-up curve and "
              "attribution-vs-throughput numbers); the trace-based table above stands in for it.")
        return None
    ev = st.load("step_times")
    rows = []
    for v, d in ev.values.items():
        sync = d["per_step_sync_ms"]
        rows.append({"version": v, "first_step_ms": sync[0], "steady_median_ms": d["median_ms"],
                     "p10_ms": d["p10_ms"], "p90_ms": d["p90_ms"], "synced_mean_ms": sum(sync[10:]) / len(sync[10:]),
                     "back_to_back_ms": d["throughput_ms_per_step"]})
    return pd.DataFrame(rows), ev.caption()


def step_time_notes(table: pd.DataFrame) -> list[str]:
    """Sentences from :func:`step_times`'s table: warm-up, spread, and what a per-step sync costs."""
    out = []
    for r in table.itertuples(index=False):
        out.append(f"{r.version}: first step {r.first_step_ms:.1f} ms, steady median {r.steady_median_ms:.1f} ms "
                   f"(p10-p90 {r.p10_ms:.1f}-{r.p90_ms:.1f}); timed with a sync after every step the mean is "
                   f"{r.synced_mean_ms:.1f} ms, run back to back {r.back_to_back_ms:.1f} ms per step "
                   f"({100 * (r.synced_mean_ms / r.back_to_back_ms - 1):+.0f}% for the synced timing).")
    return out


# ---------------------------------------------------------------- the statement
def _meaning(reason: str) -> str:
    try:
        return explain(reason).meaning
    except ValueError:
        return "no explanation on file"


def bottleneck_statement(cmp: pd.DataFrame, causes: pd.DataFrame, hot: pd.DataFrame | None = None,
                         counters: dict | None = None, precision: dict | None = None) -> str:
    """The bottleneck statement, every number taken from the tables passed in. ``precision``, if given:
    ``{"fp32_share": fraction of kernel time in fp32 GEMMs, "ratio": TF32 ceiling / fp32 ceiling}``."""
    b = cmp.set_index("version").loc["bubble"]
    f = cmp.set_index("version").loc["fixed"]
    top, bound, r = causes.iloc[0], 100 / b["gpu_util_pct"], b["period_ms"] / f["period_ms"]
    lines = [
        f"Where time goes: in the bubble step the GPU is busy {b['gpu_util_pct']:.0f}% of each "
        f"{b['period_ms']:.1f} ms step; {b['idle_ms_per_step']:.1f} ms per step sit in idle gaps over 50 µs, "
        f"{100 * top['share']:.0f}% of that idle time while the CPU was in '{top['cause']}' work. Removing all "
        f"idle time could make the step at most {bound:.2f}x faster (Amdahl).",
        f"The fixed version (three edits at once: batches prepared ahead in pinned memory, non-blocking copies, "
        f"no per-step .item()) takes {f['period_ms']:.1f} ms per step: {r:.2f}x, {100 * (r - 1):.0f}% more steps "
        f"per second, {100 * (r - 1) / (bound - 1):.0f}% of the possible gain, with the GPU busy "
        f"{f['gpu_util_pct']:.0f}% of the time. Which edit bought what is the one-change table's question.",
    ]
    if hot is not None and len(hot):
        h = hot.iloc[0]
        lines.append(f"What is left is GPU work: the hottest kernel ({h['kernel']}) takes {h['pct_of_kernel_time']:.0f}% "
                     f"of kernel time, so it is the one to hand to Nsight Compute.")
    if precision:
        s, k = precision["fp32_share"], precision["ratio"]
        lines.append(f"fp32 GEMMs on the CUDA cores take {100 * s:.0f}% of kernel time; at the recorded ceilings "
                     f"TF32 is {k:.1f}x fp32, which bounds the GPU-bound step at {1 / ((1 - s) + s / k):.1f}x: "
                     f"the next lever, still to be measured.")
    if counters:
        c = counters
        lines.append(f"Why it takes that long: its speed of light ({c['memory_pct']:.0f}% of peak memory throughput, "
                     f"{c['sm_pct']:.0f}% of SM throughput) reads {sol_verdict(c['sm_pct'], c['memory_pct'])}"
                     + (f"; besides issuing, its sampled warps are most often in '{c['dominant_stall']}' "
                        f"({_meaning(c['dominant_stall'])})." if c.get("dominant_stall") else "."))
    return "\n".join(lines)
