"""Glue for lab 01 (the Nsight workflow): the step the notebook profiles live, the recorded traces and records
it loads, the ncu commands and counters of the hot kernel (live on a GPU, else recorded). Plumbing only: the
rules and sentences live in :mod:`infralens_lab.analysis.bottleneck` and :mod:`infralens_lab.analysis.variants`,
the lesson's arithmetic in the notebook. A loader whose record is absent prints what is missing and returns
``None``, so cells never crash. Times: ``_us`` microseconds, ``_ms`` milliseconds."""
from __future__ import annotations

import shlex
from typing import NamedTuple

import pandas as pd

from .. import evidence
from ..analysis import joins
from ..analysis.hardware import matmul_rate_table
from ..analysis.variants import RECORD as VARIANTS_RECORD
from ..device import facts, is_gpu
from ..measure import ncu as NR
from ..measure import nsys
from ..measure.timing import time_fn
from ..measure.torch_trace import profile, quiet_profiler_chatter  # noqa: F401  (re-exported: the lab uses them)
from ..parse import ncu as parse_ncu
from ..parse.ncu import demangled_regex
from ..parse.trace import load_trace
from ..workloads.pipeline import VERSIONS, make_step
from ..workloads.tiny_gpt import GPTConfig
from . import copy_ceiling, counters_fallback, store  # noqa: F401  (re-exported: notebooks call lab01.store, lab01.copy_ceiling)

# On a CPU the traced step only has to show ranges and ops, so it is tiny (well under a second).
CPU_CONFIG = GPTConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=64, ffn=128, vocab=256, block_size=32)
CPU_BATCH = 2
TRAIN_STEP_FILE = "ncu_train_step.csv"
TARGET = ["--kernel", "train_step", "--warmup", "2", "--iters", "1"]
HOT_METRICS = parse_ncu.TIME + parse_ncu.SOL + parse_ncu.DRAM + parse_ncu.OCCUPANCY + parse_ncu.STALLS + parse_ncu.CLOCK
kernel_regex = parse_ncu.short_name_regex  # ncu matches the leading identifier of torch.profiler's kernel name


def live_step(version: str = "bubble"):
    """The pipeline's step to profile now: GPU sizes on a GPU, a tiny TinyGPT on a CPU (ranges and ops, no kernels)."""
    if version not in VERSIONS:
        raise ValueError(f"version {version!r}; expected one of {VERSIONS}")
    return make_step(version) if is_gpu() else make_step(version, config=CPU_CONFIG, batch=CPU_BATCH)


def time_step(version: str = "fixed", warmup: int = 3, repeats: int = 20):
    """``time_fn`` over whole pipeline steps (CUDA events); in interpreter mode it declines, and says why."""
    return time_fn(live_step(version) if is_gpu() else (lambda: None), warmup=warmup, repeats=repeats)


def recorded_traces(st) -> dict | None:
    """``{'bubble': (Trace, Evidence), 'fixed': (Trace, Evidence)}``, or None with a note."""
    missing = [f"trace_{v}" for v in VERSIONS if st is None or f"trace_{v}" not in st.names()]
    if missing:
        print(f"Recorded traces: {missing} not in the recorded set yet; they are written on a GPU by "
              f"`python -m infralens_lab record --only traces`.")
        return None
    return {v: (load_trace(ev), ev) for v, ev in ((v, st.load(f"trace_{v}")) for v in VERSIONS)}


def compare(traces: dict) -> pd.DataFrame:
    """Before/after table of the pipeline versions (:func:`infralens_lab.analysis.joins.trace_comparison`)."""
    return joins.trace_comparison({v: tr for v, (tr, _) in traces.items()})


def commands(hot_kernel: str) -> dict:
    """The nsys command over the fixed step, then ncu on the hot kernel only (speed of light first, then the full
    set), matched by its demangled name (``--kernel-name-base demangled``: a template instantiation exactly)."""
    rx = demangled_regex(hot_kernel)

    def ncu(*what):
        cmd = NR.ncu_command(TARGET, rx, sections=["SpeedOfLight"], launch_count=1, python="python")
        i = cmd.index("--kernel-name")
        cmd[i:i] = ["--kernel-name-base", "demangled"]
        j = cmd.index("--section")
        cmd[j:j + 2] = list(what)
        return shlex.join(cmd)

    return {
        "nsys (timeline)": nsys.command_line([*TARGET[:2], "--warmup", "2", "--iters", "3"], output="train_step"),
        "ncu (speed of light of the hot kernel)": ncu("--section", "SpeedOfLight"),
        # every section: ~40 replay passes, so only on the one kernel
        "ncu (everything, once the SOL says where to look)": ncu("--set", "full"),
    }


class HotCounters(NamedTuple):  # the hot kernel's ncu launches, caption, the GPU that ran them, measured now or not
    sel: pd.DataFrame
    caption: str
    gpu: str
    live: bool


def hot_kernel_ncu(st, hot_kernel: str, live: bool | None = None) -> HotCounters | None:
    """The hot kernel's counters (:class:`HotCounters`): live on a GPU (``live`` None or True), else the recorded CSV."""
    rx, text, cap = kernel_regex(hot_kernel), None, None
    if (is_gpu() if live is None else live) and NR.ncu_binary():
        try:
            text = NR.run_ncu(TARGET, rx, metrics=HOT_METRICS, launch_count=1)
            cap = evidence.live("ncu_hot_kernel", {"csv": text}, NR.command_line(
                TARGET, rx, metrics=HOT_METRICS, launch_count=1)).caption()
        except parse_ncu.NcuError as exc:  # one line, then the recorded counters
            print(counters_fallback(exc, st))
    live = text is not None
    if not live and (st is None or TRAIN_STEP_FILE not in st.files()):
        print(f"Hot-kernel counters: no {TRAIN_STEP_FILE} recorded and no ncu here; `record --only traces,ncu_train_step`.")
        return None
    text, cap = (text, cap) if live else (st.text(TRAIN_STEP_FILE), st.provenance.caption() + f" · file {TRAIN_STEP_FILE}")
    df = parse_ncu.parse_raw_csv(text)
    sel = df[df["kernel"].str.contains(rx, regex=True)]
    if sel.empty:
        print(f"Hot-kernel counters: no launch of {hot_kernel!r} in the ncu data (the recording profiled "
              f"{sorted(set(df['kernel']))[:4]}); re-record with `record --only traces,ncu_train_step`.")
        return None
    return HotCounters(sel, cap, facts().name if live else st.gpu, live)


def matmul_ceilings(st) -> tuple[pd.DataFrame, str] | None:
    """The recorded 8192³ matmul rates with the physics check's columns (``hardware.matmul_rate_table``)."""
    if st is None or "ceilings" not in st.names():
        print("Matmul ceilings: no `ceilings` record yet.")
        return None
    ev, dev = st.load("ceilings"), st.load("device").values if "device" in st.names() else None
    return matmul_rate_table(ev.values, dev), ev.caption()


def variants(st):
    """The ``pipeline_variants`` record, or None with a one-line note when the recorded set predates it."""
    if st is None or VARIANTS_RECORD not in st.names():
        print(f"One change at a time: the recorded set ({st.gpu if st is not None else 'none'}) has no "
              f"`{VARIANTS_RECORD}` record yet; `python -m infralens_lab record --only variants` writes it on a GPU.")
        return None
    return st.load(VARIANTS_RECORD)


def recorded_timings(st) -> tuple[pd.DataFrame, str] | None:
    """Median, p10, p90 of recorded timings: the fp16 matmul sweep (``ceilings``) and synced training steps
    (``step_times``, with the first step and the back-to-back time per step)."""
    if st is None or "ceilings" not in st.names():
        print("Recorded timings: no `ceilings` record yet.")
        return None
    rows = [{"what": f"fp16 matmul {r['M']}³", "n": r.get("n"), "median_ms": r["median_ms"], "p10_ms": r["p10_ms"],
             "p90_ms": r["p90_ms"]} for r in st.load("ceilings").values.get("sweep", [])]
    files = ["ceilings.json"] + (["step_times.json"] if "step_times" in st.names() else [])
    if "step_times" in st.names():
        for v, d in st.load("step_times").values.items():
            sync = d["per_step_sync_ms"]
            rows.append({"what": f"training step ({v}), synced", "n": len(sync[10:]), "median_ms": d["median_ms"],
                         "p10_ms": d["p10_ms"], "p90_ms": d["p90_ms"], "first_ms": sync[0],
                         "back_to_back_ms": d["throughput_ms_per_step"]})
    return pd.DataFrame(rows), st.provenance.caption() + " · files " + ", ".join(files)
