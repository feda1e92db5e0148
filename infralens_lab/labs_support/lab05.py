"""Glue for lab 05 (overlap, launch overhead, compilation): loading the recorded GPU records and traces, the
live CPU runs, and captions. The tables are :mod:`infralens_lab.analysis.overlap_tables`'s, the maths
:mod:`infralens_lab.analysis.overlap`'s; the notebook calls them in the open. A loader whose record is absent
prints what is missing and how to record it, and returns ``None``, so cells never crash.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from .. import evidence, present
from ..analysis import overlap_tables, stream_order
from ..analysis.overlap import launches_per_step
from ..analysis.overlap_tables import compile_time_lines  # noqa: F401  (re-exported for the notebook)
from ..device import is_gpu
from ..measure import overlap, stream_record
from ..measure.torch_trace import profile, quiet_profiler_chatter
from ..parse.trace import load_trace
from ..units import MiB
from ..workloads.overlap import COPY_BATCH_MIB, COPY_MODES, NeedsGpu, same_stream_prefetch, sleep_stages, small_ops_step
from ..workloads.pipeline import cpu_threads
from . import store  # noqa: F401  (re-exported for the notebook)

RECORD_HINT = "`python -m infralens_lab record --only overlap` on a GPU"
COPY_BYTES = COPY_BATCH_MIB * MiB  # what each copy step moves host to device


def explain_error(fn) -> object:
    """Call ``fn()``; if it needs a GPU this process lacks, print what, why and the fix instead of raising."""
    try:
        return fn()
    except NeedsGpu as exc:
        print(f"{exc.what}: not available here. {exc.why}\nFix: {exc.fix}.")
        return None


PERFETTO_DIR = Path("artifacts") / "perfetto"  # beside the notebook; git-ignored (.gitignore: artifacts/)


def export_for_perfetto(traces: dict, prefix: str = "lab05") -> dict:
    """``{key: Path}``: each Trace of ``{key: Trace}`` written to ``PERFETTO_DIR/<prefix>_<key>.json``, rows named."""
    PERFETTO_DIR.mkdir(parents=True, exist_ok=True)
    return {k: tr.export_chrome_trace(PERFETTO_DIR / f"{prefix}_{k}.json") for k, tr in traces.items()}


def recorded(st, name: str):
    """The recorded Evidence ``name``, or None with a note saying it is not recorded yet."""
    if st is None:
        return None
    if name not in st.names():
        print(f"Recorded `{name}`: not in the recorded set ({st.gpu}) yet; it is written by {RECORD_HINT}.")
        return None
    return st.load(name)


def recorded_traces(st, names: dict) -> dict | None:
    """``{key: (Trace, Evidence)}`` for trace records ``{key: name}``, or None (with a note) if one is absent."""
    evs = {k: recorded(st, n) for k, n in names.items()}
    return None if any(e is None for e in evs.values()) else {k: (load_trace(e), e) for k, e in evs.items()}


def copy_traces(st) -> dict | None:
    """``{mode: (Trace, Evidence)}`` for the recorded copy/compute traces, or None with a note."""
    return recorded_traces(st, {m: f"trace_copy_{m}" for m in COPY_MODES})


def fix_tables_by_gpu() -> dict[str, pd.DataFrame]:
    """``{gpu: fix table}`` of every recorded set holding the fix table's records, each from its own recording."""
    return overlap_tables.fix_tables_by_gpu(evidence.load_all_sets(), COPY_MODES, COPY_BYTES)


def h2d_table(ev) -> pd.DataFrame:
    """The recorded host-to-device bandwidth rows (:func:`~infralens_lab.analysis.overlap_tables.h2d_table`)."""
    return overlap_tables.h2d_table(ev.values["rows"], COPY_BATCH_MIB, RECORD_HINT)


def caption(*evs) -> str:
    """One caption for a table built from several records: the first's provenance and every name."""
    evs = [e for e in evs if e is not None]
    return evs[0].caption() + " · records " + ", ".join(e.name for e in evs) if evs else "no evidence"


def live_caption(what: str, command: str):
    """A live Evidence caption for a CPU measurement made now."""
    return evidence.live(what, {}, command)


# ---------------------------------------------------------------- live runs on this machine
def live_pipeline() -> dict:
    """The two-stage pipeline on this CPU with sleeping stand-in stages, depth 1 and 2: ``{depth: Trace}``."""
    with quiet_profiler_chatter():
        return {d: overlap.pipeline_trace(d, sleep_stages(*overlap.CPU_STAGE_MS), items=overlap.CPU_ITEMS) for d in (1, 2)}


def live_dispatches(ops: int = 40):
    """torch.profiler on this CPU over :func:`small_ops_step`: per step, the aten ops dispatched (on a GPU each
    would be a kernel launch) and the launch calls (none on a CPU). Counts only."""
    x = torch.randn(1024)
    with quiet_profiler_chatter():
        tr = profile(lambda: small_ops_step(x, ops), wait=1, warmup=1, active=2)
    return launches_per_step(tr)[["step", "cpu_ops", "launch_calls", "gpu_events"]]


def live_compile() -> dict:
    """:func:`~infralens_lab.measure.overlap.compile_study` on this CPU at the CPU sizes: Inductor compiling in
    this process with one compile thread and one torch thread (on a small shared CPU, OpenMP's thread team
    waiting on busy cores turned ~0.1 ms forwards into ~90 ms ones in our runs). Inductor's on-disk cache is left
    alone: a later run may show a shorter first call; the counts the lab grades do not depend on it."""
    import torch._inductor.config as inductor_config  # heavy: torch, only here

    with cpu_threads(1), inductor_config.patch(compile_threads=1):
        return overlap.compile_study("cpu", repeats=20, **overlap.BLOCKNET_CPU)


def live_copies():
    """On a GPU: the copy/compute table measured now (``(table, Evidence)``); elsewhere None, saying why."""
    if not is_gpu():
        print("Live copy/compute traces: no GPU here, so the recorded ones below stand in.")
        return None
    with quiet_profiler_chatter():
        t = overlap_tables.copy_table(overlap.copy_traces(), COPY_BYTES)
    return t, evidence.live("copy_compute_live", {"rows": t.to_dict(orient="records")}, "measure.overlap.copy_traces()")


def live_launches():
    """On a GPU: the launch-bound step, eager against CUDA graph, measured now (``(table, Evidence)``); else None."""
    if not is_gpu():
        print("Live launch study: no GPU here, so the recorded one below stands in.")
        return None
    with quiet_profiler_chatter():
        vals, trs = overlap.launch_study(compile_too=False)
    ev = evidence.live("launch_overhead_live", vals, "measure.overlap.launch_study(compile_too=False)")
    return overlap_tables.launch_table(vals, trs), ev


def edit_and_measure(prefetch, copies: pd.DataFrame, copy_trs: dict) -> None:
    """Lab 05's edit, ``prefetch(step, i)`` in the double-buffered step beside the one as given: replayed on this CPU
    (a race or wrong data is named), then profiled and timed on a GPU, or modelled from the recorded ``copies``."""
    fns = {"as given (same stream)": same_stream_prefetch, "your prefetch": prefetch}
    replays = {n: stream_record.replay_prefetch(f) for n, f in fns.items()}
    live = None
    if is_gpu() and stream_order.safe(replays["your prefetch"]):
        with quiet_profiler_chatter():
            live = {n: stream_record.live_prefetch(f) for n, f in fns.items()}
    table, reading = stream_order.edit_view(copies, replays, copy_trs["pinned"][1].provenance.gpu, live, COPY_BYTES)
    present.show(table.dropna(axis=1, how="all"), caption=caption(*[e for _, e in copy_trs.values()]),
                 title="Your prefetch beside the one as given and the recorded steps")
    print(reading)
