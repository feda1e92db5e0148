"""Lab 04's grading evidence, rebuilt in the grader's process from the recorded reference set with the same
analysis functions the notebook's cells call (:func:`infralens_lab.analysis.copies.family`,
:func:`infralens_lab.analysis.attention.profile` and what follows them). Each returns None when the recording
is not there; the grader's row then says so. Bank questions name these as ``"evidence":
"infralens_lab.quiz.keys.lab04:<function>"``.
"""
from __future__ import annotations

from ... import evidence
from ...analysis import attention as attn
from ...analysis import copies as copy_info

COPY_FILES = ("ncu_copies.csv", "ncu_copies_stalls.csv")  # what the recorder writes (record step `ncu_copies`)
ATTN_FILE = "ncu_attention.csv"


def _family():
    st = evidence.reference_holding(*COPY_FILES)
    if st is None:
        return None
    bench = st.load("bench").values.get("copies") if "bench.json" in st.files() else None
    return copy_info.family(st.text(COPY_FILES[0]), st.text(COPY_FILES[1]), bench)


def _profile():
    st = evidence.reference_holding(ATTN_FILE)
    return attn.profile(st.text(ATTN_FILE)) if st is not None else None


def copy_family():
    """The copy-family table (sectors per request, DRAM bytes per useful byte...), recorded (ex1, ex2)."""
    fam = _family()
    return fam.table if fam is not None else None


def stride8_stalls():
    """The stride-8 copy's stall samples per reason, with shares of all its samples (ex3)."""
    fam = _family()
    return fam.stalls_for("stride 8") if fam is not None else None


def stall_shift():
    """Each reason's share at the coalesced copy and at the largest stride, and the change (q10)."""
    fam = _family()
    return copy_info.shift_table(fam) if fam is not None else None


def attention_variants():
    """DRAM traffic per attention variant (q5)."""
    p = _profile()
    return p.variants if p is not None else None


def sol_pairs():
    """Per attention variant, SM % and memory % of peak and the larger of the two (q11)."""
    p = _profile()
    return attn.sol_pairs(p.variants) if p is not None else None


def kv_reads():
    """Per tiled attention kernel, the K/V passes from DRAM bytes and the traffic model's (ex4)."""
    p = _profile()
    return attn.kv_reads(p) if p is not None else None
