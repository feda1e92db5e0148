"""Lab 02's grading evidence, rebuilt in the grader's process from the recorded reference set with the same
analysis functions the notebook's cells call (:func:`infralens_lab.analysis.counters.store_kernel_table`,
:func:`~infralens_lab.analysis.counters.flop_split`, :class:`~infralens_lab.analysis.hardware.Ceilings`). Each
returns None when the recording is not there; the grader's row then says so. Bank questions name these as
``"evidence": "infralens_lab.quiz.keys.lab02:<function>"``.
"""
from __future__ import annotations

from ... import evidence
from ...analysis import counters
from ...analysis.hardware import Ceilings
from ...parse.ncu import parse_raw_csv


def ceilings():
    """Measured ceilings against the datasheet (q3: the fp16 ridge)."""
    st = evidence.reference_holding("ceilings.json")
    return Ceilings.from_evidence(st.load("ceilings")).versus_datasheet() if st is not None else None


def kernels():
    """The kernel table of the recorded set: intensity, attainable rate and the deciding unit (ex1, ex2, ex3)."""
    st = evidence.reference_holding("ncu_attention.csv", "ncu_matmul.csv", "ceilings.json")
    return counters.store_kernel_table(st) if st is not None else None


def attention_flop_split():
    """CUDA-core vs tensor-core FLOPs per recorded attention kernel, from the raw counters (q8)."""
    st = evidence.reference_holding("ncu_attention.csv", "ncu_matmul.csv")
    if st is None:
        return None
    factor = counters.tensor_flops_per_op(counters.tensor_op_check(parse_raw_csv(st.text("ncu_matmul.csv"))))
    return counters.flop_split(parse_raw_csv(st.text("ncu_attention.csv")), factor)
