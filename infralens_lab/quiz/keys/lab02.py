"""Lab 02's grading evidence, rebuilt in the grader's process from the recorded reference set with the same
analysis functions the notebook's cells call (:func:`infralens_lab.analysis.counters.store_kernel_table`,
:func:`~infralens_lab.analysis.counters.flop_split`, :class:`~infralens_lab.analysis.hardware.Ceilings`). Each
returns None when the recording is not there; the grader's row then says so. Bank questions name these as
``"evidence": "infralens_lab.quiz.keys.lab02:<function>"``.
"""
from __future__ import annotations

from ... import evidence
from ...analysis import counters, roofline
from ...analysis.hardware import Ceilings
from ...parse.ncu import parse_raw_csv
from ..functions import delegates


def ceilings():
    """Measured ceilings against the datasheet (q3: the fp16 ridge)."""
    st = evidence.reference_holding("ceilings.json")
    return Ceilings.from_evidence(st.load("ceilings")).versus_datasheet() if st is not None else None


def kernels():
    """The kernel table of the recorded set: intensity, attainable rate and the deciding unit (ex1, ex3)."""
    st = evidence.reference_holding("ncu_attention.csv", "ncu_matmul.csv", "ceilings.json")
    return counters.store_kernel_table(st) if st is not None else None


def attention_flop_split():
    """CUDA-core vs tensor-core FLOPs per recorded attention kernel, from the raw counters (q8)."""
    st = evidence.reference_holding("ncu_attention.csv", "ncu_matmul.csv")
    if st is None:
        return None
    factor = counters.tensor_flops_per_op(counters.tensor_op_check(parse_raw_csv(st.text("ncu_matmul.csv"))))
    return counters.flop_split(parse_raw_csv(st.text("ncu_attention.csv")), factor)


# ---------------------------------------------------------------- function exercises (issue 38)
ROOF_ARGS = ("flops", "dram_bytes", "seconds", "roof", "bandwidth")  # exercise 2's arguments, in order


def fraction_of_roof(flops: float, dram_bytes: float, seconds: float, roof: float, bandwidth: float) -> float:
    """Exercise 2's reference: the achieved FLOP/s over the attainable rate at the kernel's intensity,
    ``min(roof, intensity × bandwidth)`` (:func:`infralens_lab.analysis.roofline.attainable`), the table's
    ``fraction_of_roof``."""
    return flops / seconds / roofline.attainable(roofline.intensity(flops, dram_bytes), roof, bandwidth)


def _roof_rows(st) -> dict | None:
    """``{label: (flops, dram_bytes, seconds, roof FLOP/s, bandwidth byte/s)}`` of a set's kernel table."""
    if not all(f in st.files() for f in ("ncu_attention.csv", "ncu_matmul.csv", "ceilings.json")):
        return None
    t = counters.store_kernel_table(st)
    if t is None or not len(t):
        return None
    bw = Ceilings.from_evidence(st.load("ceilings")).copy_bw
    return {r.label: (float(r.flops), float(r.dram_bytes), float(r.time_us) * 1e-6, float(r.roof_TFLOPs) * 1e12, float(bw))
            for r in t.itertuples(index=False) if r.flops > 0}


def roof_cases():
    """Exercise 2's cases, each ``(flops, dram_bytes, seconds, roof, bandwidth)``: the lab's attn_fwd (right of the
    ridge: the compute roof decides) and naive_qk (left of it: the memory roof decides) from the reference set's
    kernel table; the other GPU's attn_fwd and naive_softmax (held out); and attn_fwd perturbed: its DRAM bytes 8x
    (the memory roof now decides, so a fraction of the compute roof alone fails) and the bandwidth at a tenth.
    None without a recording."""
    ref = evidence.reference_holding("ncu_attention.csv", "ncu_matmul.csv", "ceilings.json")
    own = _roof_rows(ref) if ref is not None else None
    if not own or not {"attn_fwd", "naive_qk"} <= set(own):
        return None
    from ..functions import Case

    gpu = _short_gpu(ref)
    out = [Case(f"attn_fwd, {gpu} recording (this lab)", own["attn_fwd"]),
           Case(f"naive_qk, {gpu} recording (this lab, its kernel table)", own["naive_qk"])]
    for slug in evidence.recordings():
        st = evidence.reference(slug)
        if st.folder.resolve() == ref.folder.resolve():
            continue
        rows = _roof_rows(st)
        for label in ("attn_fwd", "naive_softmax"):
            if rows and label in rows:
                out.append(Case(f"{label}, {_short_gpu(st)} recording (held out)", rows[label], held_out=True))
    f, b, s, p, w = own["attn_fwd"]
    out += [Case(f"attn_fwd ({gpu}) with 8x its DRAM bytes (perturbed, held out)", (f, 8 * b, s, p, w), held_out=True),
            Case(f"attn_fwd ({gpu}) with a tenth of the bandwidth (perturbed, held out)", (f, b, s, p, w / 10),
                 held_out=True)]
    return out


def _short_gpu(st) -> str:
    words = str(st.gpu).replace("NVIDIA", "").split()
    return words[0] if words else str(st.folder.name)


UNIT_ARGS = ("roof_fraction", "sm_pct", "memory_pct")  # exercise 3's arguments, in order


@delegates(roofline.verdict)  # the one rule is the whole step: a function that calls it is refused
def busiest_pct(roof_fraction: float, sm_pct: float, memory_pct: float) -> float:
    """Exercise 3's reference: the % of its peak that a kernel's busiest unit reached, the unit the one rule
    (:func:`infralens_lab.analysis.roofline.verdict`) names: the roofline's fraction, SM % and Memory % together."""
    v = roofline.verdict({"FLOP/s roof": roof_fraction, "SM %": sm_pct / 100, "Memory %": memory_pct / 100})
    return 100 * v.fraction


def _unit_rows(st) -> dict | None:
    """``{label: (fraction_of_roof, sm_pct, memory_pct)}`` of a set's kernel table (kernels with speed of light)."""
    if not all(f in st.files() for f in ("ncu_attention.csv", "ncu_matmul.csv", "ceilings.json")):
        return None
    t = counters.store_kernel_table(st)
    return {r.label: (float(r.fraction_of_roof), float(r.sm_pct), float(r.memory_pct))
            for r in t.itertuples(index=False) if r.sm_pct == r.sm_pct and r.memory_pct == r.memory_pct}


def unit_cases():
    """Exercise 3's cases, each ``(roof_fraction, sm_pct, memory_pct)``: the lab's attn_fwd (SM % decides),
    naive_qk (the roofline decides) and matmul 512³ (Memory % decides) from the reference set's kernel table; the other
    GPU's attn_fwd and matmul 4096³ (held out); and attn_fwd with its roofline fraction at 0.8 (perturbed). None
    without a recording."""
    ref = evidence.reference_holding("ncu_attention.csv", "ncu_matmul.csv", "ceilings.json")
    own = _unit_rows(ref) if ref is not None else None
    if not own or not {"attn_fwd", "naive_qk", "matmul 512³"} <= set(own):
        return None
    from ..functions import Case

    gpu = _short_gpu(ref)
    out = [Case(f"{label}, {gpu} recording (this lab)", own[label]) for label in ("attn_fwd", "naive_qk", "matmul 512³")]
    for slug in evidence.recordings():
        st = evidence.reference(slug)
        rows = _unit_rows(st) if st.folder.resolve() != ref.folder.resolve() else None
        for label in ("attn_fwd", "matmul 4096³"):
            if rows and label in rows:
                out.append(Case(f"{label}, {_short_gpu(st)} recording (held out)", rows[label], held_out=True))
    _, sm, mem = own["attn_fwd"]
    out.append(Case(f"attn_fwd ({gpu}) with its roofline fraction at 0.8 (perturbed, held out)", (0.8, sm, mem),
                    held_out=True))
    return out
