"""Lab 07's grading evidence: the recorded ResNet-50 traces and gate record of the reference set, and the live
regression counts (deterministic on one build), built by the same functions the notebook's cells call. A provider
returns None when the recorded set lacks what it needs."""
from __future__ import annotations

from ... import evidence
from ...analysis import formats
from ...analysis import gates as analysis_gates
from ...measure import gates as measure_gates
from ...measure import top_ops
from ...measure.torch_trace import quiet_profiler_chatter
from ...parse.trace import load_trace

FORMATS = ("channels_first", "channels_last")


def _store():
    return evidence.reference_holding()


def _resnet() -> tuple[dict, dict] | None:
    st = _store()
    if st is None or any(f"resnet_trace_{f}" not in st.names() for f in FORMATS) or "gates_gpu" not in st.names():
        return None
    return {f: load_trace(st.load(f"resnet_trace_{f}")) for f in FORMATS}, st.load("gates_gpu").values


def op_times_first():
    """aten ops of the recorded channels_first forward, with self and inclusive CPU time (lab07.ex1)."""
    got = _resnet()
    return None if got is None else top_ops.op_times(got[0]["channels_first"])


def layout_saving():
    """The share of the kernel time channels_last saves that the layout transforms account for, each kernel sum
    with its spread over the recorded forwards (lab07.q5; :func:`analysis.formats.family_saving` of
    :func:`measure.top_ops.kernel_sums`, as ``labs_support.lab07.layout_saving`` builds it)."""
    got = _resnet()
    if got is None:
        return None
    trs, vals = got
    fams, samples = top_ops.kernel_sums(trs, vals)
    return formats.family_saving(fams, samples=samples)


def aa_k_table():
    """The k table of the recorded A/A ratios at the lab's tolerance (lab07.ex2)."""
    st = _store()
    if st is None or "gates_gpu" not in st.names():
        return None
    aa = st.load("gates_gpu").values.get("aa_ratios")
    return analysis_gates.k_table(aa, analysis_gates.LAB_TOLERANCE) if aa else None


def aa_process_quotients():
    """Ratio spread over a's spread in each recorded A/A process, and their median (lab07.q6)."""
    st = _store()
    procs = st.load("gates_gpu").values.get("aa_processes") if st is not None and "gates_gpu" in st.names() else None
    return analysis_gates.process_quotients(procs) if procs else None


def regression_counts():
    """Counts per step of the intended MLP step and each regression, on this machine (lab07.ex3)."""
    with quiet_profiler_chatter():
        return measure_gates.regression_counts()
