"""Lab 05's grading evidence: the recorded copy, launch and compile tables, and the live CPU pipeline, built in
the grader's process by the same functions the notebook's cells call (:mod:`infralens_lab.analysis.overlap_tables`).
A provider returns None when the recorded set lacks what it needs."""
from __future__ import annotations

from ... import evidence
from ...analysis import overlap_tables
from ...measure import overlap
from ...measure.torch_trace import quiet_profiler_chatter
from ...parse.trace import load_trace
from ...units import MiB
from ...workloads.overlap import COPY_BATCH_MIB, COPY_MODES, sleep_stages


def _traces(names: dict) -> dict | None:
    """``{key: Trace}`` for recorded trace records ``{key: name}`` of the reference set, or None if one is absent."""
    try:
        st = evidence.reference()
    except evidence.EvidenceError:
        return None
    if any(n not in st.names() for n in names.values()):
        return None
    return {k: load_trace(st.load(n)) for k, n in names.items()}


def copies():
    """The copy/compute table of the recorded traces (lab05.ex1, lab05.ex3)."""
    trs = _traces({m: f"trace_copy_{m}" for m in COPY_MODES})
    return None if trs is None else overlap_tables.copy_table(trs, COPY_BATCH_MIB * MiB)


def launches():
    """The launch-bound step's table, eager and CUDA graph (lab05.ex2)."""
    trs = _traces({v: f"trace_launch_{v}" for v in ("eager", "graph")})
    if trs is None:
        return None
    return overlap_tables.launch_table(evidence.reference().load("launch_overhead").values, trs)


def fixes():
    """The fix table's side-stream row, from the copy table (lab05.q7: Amdahl's 1 / (1 - f))."""
    c = copies()
    return None if c is None else overlap_tables.fix_table(copies=c)


def live_pipeline():
    """The two-stage pipeline run now on this CPU with the notebook's stand-in stages (lab05.q3)."""
    with quiet_profiler_chatter():
        trs = {d: overlap.pipeline_trace(d, sleep_stages(*overlap.CPU_STAGE_MS), items=overlap.CPU_ITEMS) for d in (1, 2)}
    return overlap_tables.pipeline_table(trs)
