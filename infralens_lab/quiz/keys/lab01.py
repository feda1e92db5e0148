"""Lab 01's grading keys: the recorded traces and records the notebook's questions are about, rebuilt in the
grader's process with the same functions the notebook's cells call (``analysis``, ``parse``). Each returns None
when the recorded set lacks the record (the grader's row then says so)."""
from __future__ import annotations

import numpy as np

from ... import evidence
from ...analysis import variants
from ...analysis.hardware import matmul_rate_table
from ...analysis.joins import trace_comparison
from ...analysis.overlap import step_bound
from ...parse.trace import idle_by_cause, load_trace
from ..functions import delegates


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


# ---------------------------------------------------------------- function exercises (issue 38)
def _short_gpu(st) -> str:
    """``'H100'`` for a set recorded on ``'NVIDIA H100 80GB HBM3'``: how a case names its GPU."""
    words = str(st.gpu).replace("NVIDIA", "").split()
    return words[0] if words else str(st.folder.name)


def _sets_holding(*names: str) -> list:
    """``[(store, held_out)]``: the reference set first (the lab's own evidence), then every other recorded set that
    holds each record of ``names`` (the other GPU's recording: held out, the lab never shows it)."""
    ref = evidence.reference_holding()
    out = [(ref, False)] if ref is not None and all(n in ref.names() for n in names) else []
    for slug in evidence.recordings():
        try:
            st = evidence.reference(slug)
        except evidence.EvidenceError:
            continue
        if (ref is None or st.folder.resolve() != ref.folder.resolve()) and all(n in st.names() for n in names):
            out.append((st, True))
    return out


def _window_inputs(tr) -> tuple[np.ndarray, float, float]:
    start, end, _ = tr.steady_window()
    return np.asarray(tr.busy(), dtype=float).reshape(-1, 2), float(start), float(end)


def _stretch_gaps(busy: np.ndarray, t: float, factor: float) -> float:
    """Where time ``t`` moves when every idle gap of the sorted, merged ``busy`` grows ``factor`` times."""
    s0 = busy[0, 0]
    covered = (np.clip(busy[:, 1], s0, t) - np.clip(busy[:, 0], s0, t)).sum()
    return float(t + (factor - 1) * max(0.0, (t - s0) - covered))


def _longer(t: float, a: float, b: float, factor: float) -> float:
    """Where time ``t`` moves when the interval ``[a, b]`` becomes ``factor`` times longer (later times shift)."""
    return float(t if t <= a else a + factor * (t - a) if t <= b else t + (factor - 1) * (b - a))


def idle_share_cases():
    """Exercise 1's cases, each ``(busy, start, end)``: ``busy`` the merged (start_us, end_us) intervals of the
    profiled steps' GPU work as an (n, 2) array, ``[start, end]`` the steady window (µs). The lab's bubble and fixed
    traces; the other GPU's bubble trace (held out); and perturbed copies of the lab's bubble trace: idle gaps
    stretched 2x, the window's longest busy interval made 2x longer, its intervals shuffled, and the window cut in the middle
    of busy intervals (a share that does not clip to the window fails there). None without a recording."""
    sets = _sets_holding("trace_bubble", "trace_fixed")
    if not sets or sets[0][1]:
        return None
    from ..functions import Case

    own, gpu = sets[0][0], _short_gpu(sets[0][0])
    busy, start, end = _window_inputs(load_trace(own.load("trace_bubble")))
    out = [Case(f"bubble trace, {gpu} recording (this lab)", (busy, start, end)),
           Case(f"fixed trace, {gpu} recording (this lab)", _window_inputs(load_trace(own.load("trace_fixed"))))]
    out += [Case(f"bubble trace, {_short_gpu(st)} recording (held out)",
                 _window_inputs(load_trace(st.load("trace_bubble"))), held_out=True) for st, _ in sets[1:]]
    stretched = np.array([[_stretch_gaps(busy, x, 2.0) for x in row] for row in busy])
    out.append(Case(f"bubble trace ({gpu}) with every idle gap 2x longer (perturbed, held out)",
                    (stretched, _stretch_gaps(busy, start, 2.0), _stretch_gaps(busy, end, 2.0)), held_out=True))
    within = (busy[:, 0] >= start) & (busy[:, 1] <= end)
    k = int(np.argmax(np.where(within, busy[:, 1] - busy[:, 0], -1.0)))  # the window's longest busy interval
    a, b = busy[k]
    longer = np.array([[_longer(x, a, b, 2.0) for x in row] for row in busy])
    out.append(Case(f"bubble trace ({gpu}) with its longest busy interval 2x longer (perturbed, held out)",
                    (longer, _longer(start, a, b, 2.0), _longer(end, a, b, 2.0)), held_out=True))
    out.append(Case(f"bubble trace ({gpu}) with its intervals in shuffled order (perturbed, held out)",
                    (busy[np.random.default_rng(38).permutation(len(busy))], start, end), held_out=True))
    mid, length = busy.mean(axis=1), busy[:, 1] - busy[:, 0]
    halves = [within & (mid < (start + end) / 2), within & (mid >= (start + end) / 2)]
    # the middles of the longest busy interval in each half of the window: cut there, half of each is outside
    lo, hi = (mid[int(np.argmax(np.where(h, length, -1.0)))] for h in halves)
    out.append(Case(f"bubble trace ({gpu}), window starting and ending inside busy intervals (perturbed, held out)",
                    (busy, float(lo), float(hi)), held_out=True))  # a share that keeps whole intervals fails here
    return out


FIX_ARGS = ("period_ms", "gpu_ms", "cpu_ms", "fraction", "speedup")  # exercise 4's arguments, in order


@delegates(step_bound)  # step_bound is the whole step: a function that calls it is refused
def fix_bound(period_ms: float, gpu_ms: float, cpu_ms: float, fraction: float, speedup: float) -> float:
    """Exercise 4's reference: the bound of a fix with both floors, ``analysis.overlap.step_bound(...).bound``."""
    return step_bound(period_ms, gpu_ms, cpu_ms, fraction, speedup).bound


def _tf32_inputs(st) -> dict | None:
    if variants.RECORD not in st.names() or "ceilings" not in st.names():
        return None
    rates = matmul_rate_table(st.load("ceilings").values, st.load("device").values if "device" in st.names() else None)
    try:
        return variants.untraced_fix(st.load(variants.RECORD).values, rates.set_index("dtype")["rate_TFLOPs"].to_dict(),
                                     "fixed+tf32").inputs
    except variants.UntracedFloorMissing:
        return None


def fix_bound_cases():
    """Exercise 4's cases, each ``(period_ms, gpu_ms, cpu_ms, fraction, speedup)``: the lab's TF32 fix (the inputs it
    prints, untraced basis), the other GPU's (held out), and perturbed copies of the lab's: the CPU floor at a third
    (the GPU floor decides, so a bound from the CPU floor alone fails), the fix on a fifth of the GPU work, and a fix
    with no speed-up (the bound is then the GPU's busy share's reciprocal, or the CPU's). None without a recording."""
    sets = [(st, held, _tf32_inputs(st)) for st, held in _sets_holding(variants.RECORD, "ceilings")]
    sets = [(st, held, x) for st, held, x in sets if x is not None]
    if not sets or sets[0][1]:
        return None
    from ..functions import Case

    own, gpu = sets[0][2], _short_gpu(sets[0][0])
    args = tuple(float(own[k]) for k in FIX_ARGS)
    out = [Case(f"TF32 fix, {gpu} recording (this lab)", args)]
    out += [Case(f"TF32 fix, {_short_gpu(st)} recording (held out)", tuple(float(x[k]) for k in FIX_ARGS),
                 held_out=True) for st, _, x in sets[1:]]
    p, g, c, f, s = args
    out += [Case(f"TF32 fix ({gpu}) with the CPU floor at a third (perturbed, held out)", (p, g, c / 3, f, s),
                 held_out=True),
            Case(f"TF32 fix ({gpu}) on a fifth of the GPU work (perturbed, held out)", (p, g, c, 0.2, s), held_out=True),
            Case(f"a fix ({gpu}) that speeds nothing up: speedup 1 (perturbed, held out)", (p, g, c, f, 1.0),
                 held_out=True)]
    return out
