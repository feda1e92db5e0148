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
from ...analysis.stalls import dominant_item
from ...parse import ncu
from ..derive import dominant_stall_share
from ..functions import delegates
from .lab01 import _short_gpu

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


# ---------------------------------------------------------------- function exercises (issue 38)
@delegates(ncu.sectors_per_request)  # the whole step: a function that calls it is refused
def sectors_per_request(row: dict) -> float:
    """Exercise 1's reference: the 32-byte sectors a warp-wide global load touched in L1TEX, on average, from one
    copy's raw counters ``{metric: value}``: ``l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum`` over
    ``l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum`` (:func:`infralens_lab.parse.ncu.sectors_per_request`'s
    division)."""
    sectors, requests = ncu.SECTORS
    return float(row[sectors]) / float(row[requests])


@delegates(dominant_stall_share, dominant_item)  # the series' rule is the step: a function calling it is refused
def dominant_share(samples) -> float:
    """Exercise 3's reference: the dominant stall reason's share (0 to 1) of all of one kernel's samples, by the
    series' one rule (:func:`infralens_lab.analysis.stalls.dominant_item`: ``selected`` left out of the choice, kept
    in the total): :func:`infralens_lab.quiz.derive.dominant_stall_share` on a ``reason``/``samples`` table."""
    return dominant_stall_share(samples)


def _copy_sets() -> list:
    """``[(store, held_out, CopyFamily, raw counters)]``: the lab's own recorded set first, then the other GPUs'."""
    own = evidence.reference_holding(*COPY_FILES)
    if own is None:
        return []
    out, others = [], []
    for slug in evidence.recordings():
        try:
            st = evidence.reference(slug)
        except evidence.EvidenceError:
            continue
        if st.folder.resolve() != own.folder.resolve() and all(f in st.files() for f in COPY_FILES):
            others.append(st)
    for st, held in [(own, False)] + [(st, True) for st in others]:
        text = st.text(COPY_FILES[0])
        out.append((st, held, copy_info.family(text, st.text(COPY_FILES[1])), ncu.parse_raw_csv(text)))
    return out


def counter_row_cases():
    """Exercise 1's cases, each ``(row,)``: one copy's raw ``.sum`` counters ``{metric: value}``
    (:func:`infralens_lab.analysis.copies.counter_rows`). The lab's coalesced copy and strides 1, 8 and 32 (16 and 32
    sectors per request; at stride 32 the DRAM bytes read per sector double, so a count from DRAM bytes fails there);
    the other GPU's coalesced and stride-8 copies (held out); and perturbed copies of the lab's: the coalesced copy as
    if it loaded 4-byte scalars (4x the requests for the same sectors: 4 per request) and the stride-8 copy with 2x
    its DRAM bytes read (sectors per request unchanged). None without a recording."""
    sets = _copy_sets()
    if not sets or sets[0][1]:
        return None
    from ..functions import Case

    own_st, _, own_fam, own_raw = sets[0]
    gpu, rows = _short_gpu(own_st), copy_info.counter_rows(own_raw, own_fam.labels())
    out = [Case(f"{label} copy, {gpu} recording (this lab)", (rows[label],))
           for label in ("coalesced", "stride 1", "stride 8", "stride 32")]
    for st, _, fam, raw in sets[1:]:
        other = copy_info.counter_rows(raw, fam.labels())
        out += [Case(f"{label} copy, {_short_gpu(st)} recording (held out)", (other[label],), held_out=True)
                for label in ("coalesced", "stride 8")]
    _, requests = ncu.SECTORS
    scalar = rows["coalesced"] | {requests: 4 * rows["coalesced"][requests]}
    dram = rows["stride 8"] | {"dram__bytes_read.sum": 2 * rows["stride 8"]["dram__bytes_read.sum"]}
    out += [Case(f"coalesced copy ({gpu}) loading 4-byte scalars: 4x the requests, the same sectors (perturbed, "
                 "held out)", (scalar,), held_out=True),
            Case(f"stride-8 copy ({gpu}) with 2x its DRAM bytes read (perturbed, held out)", (dram,), held_out=True)]
    return out


def _with_samples(table, reason: str, samples: float):
    """A copy of a stall table with ``reason``'s samples set to ``samples`` (share recomputed, largest first)."""
    t = table.copy()
    t.loc[t["reason"] == reason, "samples"] = float(samples)
    return t.sort_values(["samples", "reason"], ascending=[False, True]).reset_index(drop=True)


def stall_cases():
    """Exercise 3's cases, each ``(samples,)``: one copy's stall samples as the lab shows them (columns ``kernel``,
    ``reason``, ``samples``, one row per reason, largest first). The lab's stride-8, coalesced and stride-32 copies;
    the other GPU's stride-8 copy (held out); and perturbed copies of the lab's stride-8 table: drain at 1.5x
    long_scoreboard's samples (another reason dominates), ``selected`` at 2x the largest reason's (a share that does
    not leave it out fails, and so does a total without it), and its rows in shuffled order. None without a recording."""
    sets = _copy_sets()
    if not sets or sets[0][1]:
        return None
    from ..functions import Case

    def table(fam, label):
        return fam.stalls_for(label)[["kernel", "reason", "samples"]].reset_index(drop=True)

    own_st, _, own_fam, _ = sets[0]
    gpu = _short_gpu(own_st)
    out = [Case(f"{label} copy, {gpu} recording (this lab)", (table(own_fam, label),))
           for label in ("stride 8", "coalesced", "stride 32")]
    out += [Case(f"stride 8 copy, {_short_gpu(st)} recording (held out)", (table(fam, "stride 8"),), held_out=True)
            for st, _, fam, _ in sets[1:]]
    s8 = table(own_fam, "stride 8")
    by = dict(zip(s8["reason"], s8["samples"], strict=True))
    top = max(v for r, v in by.items() if r != "selected")
    out += [Case(f"stride-8 copy ({gpu}) with drain at 1.5x long_scoreboard's samples (perturbed, held out)",
                 (_with_samples(s8, "drain", 1.5 * by["long_scoreboard"]),), held_out=True),
            Case(f"stride-8 copy ({gpu}) with selected at 2x the largest stall's samples (perturbed, held out)",
                 (_with_samples(s8, "selected", 2 * top),), held_out=True),
            Case(f"stride-8 copy ({gpu}) with its rows in shuffled order (perturbed, held out)",
                 (s8.sample(frac=1.0, random_state=38).reset_index(drop=True),), held_out=True)]
    return out
