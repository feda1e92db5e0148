"""Lab 01's grading keys: the recorded traces and records the notebook's questions are about, rebuilt in the
grader's process with the same functions the notebook's cells call (``analysis``, ``parse``). Each returns None
when the recorded set lacks the record (the grader's row then says so)."""
from __future__ import annotations

from ... import evidence
from ...analysis import variants
from ...analysis.hardware import matmul_rate_table
from ...analysis.joins import trace_comparison
from ...parse.trace import idle_by_cause, load_trace


def _store():
    return evidence.reference_holding()


def _trace(version: str):
    st = _store()
    return load_trace(st.load(f"trace_{version}")) if st is not None and f"trace_{version}" in st.names() else None


def bubble_trace():
    """The recorded bubble trace (exercises 1 and 2: idle share and period from its events)."""
    return _trace("bubble")


def fixed_trace():
    """The recorded fixed trace (exercise 3: the hot kernel's share of kernel time)."""
    return _trace("fixed")


def idle_causes():
    """GPU idle time by CPU cause in the recorded bubble trace."""
    tr = _trace("bubble")
    return idle_by_cause(tr) if tr is not None else None


def bubble_row():
    """The bubble step alone (its period and GPU busy share), as the notebook shows it before the fix."""
    tr = _trace("bubble")
    return trace_comparison({"bubble": tr}) if tr is not None else None


def before_after():
    """The before/after table of the recorded bubble and fixed traces."""
    b, f = _trace("bubble"), _trace("fixed")
    return trace_comparison({"bubble": b, "fixed": f}) if b is not None and f is not None else None


def matmul_ceilings():
    """The recorded matmul rate per precision (``dtype, rate_TFLOPs``), with the physics check's columns: the table
    lab 01 shows (``labs_support.lab01.matmul_ceilings``)."""
    st = _store()
    if st is None or "ceilings" not in st.names():
        return None
    return matmul_rate_table(st.load("ceilings").values, st.load("device").values if "device" in st.names() else None)


def _variants():
    st = _store()
    return st.load(variants.RECORD).values if st is not None and variants.RECORD in st.names() else None


def one_change():
    """The one-change table of the recorded pipeline variants."""
    v = _variants()
    return variants.one_change_table(v) if v is not None else None


def tf32_fix():
    """The inputs of the TF32 fix's bound (exercise 4), on the untraced basis of the speed-up it bounds
    (:func:`infralens_lab.analysis.variants.untraced_fix`): the fixed step back to back without the profiler, its
    GPU busy time, its CPU floor (profiled CPU time over the profiler's measured factor), its fp32-GEMM share of
    kernel time, and the recorded TF32 / fp32 ceiling ratio. None when the record cannot give an untraced floor."""
    v, rates = _variants(), matmul_ceilings()
    if v is None or rates is None:
        return None
    try:
        return variants.untraced_fix(v, rates.set_index("dtype")["rate_TFLOPs"].to_dict(), "fixed+tf32").inputs
    except variants.UntracedFloorMissing:
        return None
