"""Lab 05's grading evidence: the recorded copy, launch and compile tables, and the live CPU pipeline, built in
the grader's process by the same functions the notebook's cells call (:mod:`infralens_lab.analysis.overlap_tables`).
A provider returns None when the recorded set lacks what it needs."""
from __future__ import annotations

import numpy as np

from ... import evidence
from ...analysis import overlap_tables
from ...analysis.overlap import overlap_bound
from ...measure import overlap
from ...measure.torch_trace import quiet_profiler_chatter
from ...parse.trace import load_trace
from ...units import MiB
from ...workloads.overlap import COPY_BATCH_MIB, COPY_MODES, sleep_stages
from ..functions import delegates
from . import lab01 as lab01_keys


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


# ---------------------------------------------------------------- function exercises (issue 38)
def _copy_kernel_intervals(tr) -> tuple[list, list]:
    """``(copies, kernels)`` of a copy trace as the lab's cell builds them: the host-to-device copies the profiled
    steps launched (the attribution rule) and every kernel in the trace, each a list of (start_us, end_us)."""
    g = tr.gpu_events(scope="steps")
    cp = g[(g["cat"] == "gpu_memcpy") & g["name"].str.contains("HtoD", regex=False)]
    k = tr.gpu_events(scope="all")
    k = k[k["cat"] == "kernel"]
    as_pairs = lambda df: [(float(a), float(b)) for a, b in zip(df["start_us"], df["end_us"], strict=True)]  # noqa: E731
    return as_pairs(cp), as_pairs(k)


def hidden_share_cases():
    """Exercise 1's cases, each ``(copies, kernels)``: lists of (start_us, end_us) pairs, the host-to-device copies
    the profiled steps launched and the kernels that ran. The lab's double-buffered and pinned traces; the other
    GPU's double-buffered trace (held out); and perturbed copies of the lab's double-buffered one: every kernel
    doubled on a second stream a third of its length later (kernels overlap each other, so a sum over pairs counts
    some time twice), two more copies after the last kernel that overlap each other (the copies must be merged
    too: their overlap counts once in the copy time), every copy moved
    later by half its length (partly off the kernels), and both lists shuffled (a sweep that assumes time order
    fails). None without a recording."""
    sets = lab01_keys._sets_holding("trace_copy_double_buffered", "trace_copy_pinned")
    if not sets or sets[0][1]:
        return None
    from ..functions import Case

    own, gpu = sets[0][0], lab01_keys._short_gpu(sets[0][0])
    copies_, kernels = _copy_kernel_intervals(load_trace(own.load("trace_copy_double_buffered")))
    out = [Case(f"double-buffered trace, {gpu} recording (this lab)", (copies_, kernels)),
           Case(f"pinned trace, {gpu} recording (this lab)",
                _copy_kernel_intervals(load_trace(own.load("trace_copy_pinned"))))]
    out += [Case(f"double-buffered trace, {lab01_keys._short_gpu(st)} recording (held out)",
                 _copy_kernel_intervals(load_trace(st.load("trace_copy_double_buffered"))), held_out=True)
            for st, _ in sets[1:]]
    doubled = sorted(kernels + [(a + (b - a) / 3, b + (b - a) / 3) for a, b in kernels])
    out.append(Case(f"double-buffered trace ({gpu}) with every kernel doubled on a second stream, overlapping the "
                    "first (perturbed, held out)", (copies_, doubled), held_out=True))
    end, length = max(b for _, b in kernels), max(b - a for a, b in copies_)
    extra = [(end, end + length), (end + length / 2, end + 1.5 * length)]  # two copy engines, nothing to hide under
    out.append(Case(f"double-buffered trace ({gpu}) with two more copies after the last kernel, overlapping each "
                    "other (perturbed, held out)", (copies_ + extra, kernels), held_out=True))
    later = [(a + (b - a) / 2, b + (b - a) / 2) for a, b in copies_]
    out.append(Case(f"double-buffered trace ({gpu}) with every copy half its length later (perturbed, held out)",
                    (later, kernels), held_out=True))
    rng = np.random.default_rng(38)
    out.append(Case(f"double-buffered trace ({gpu}) with copies and kernels in shuffled order (perturbed, held out)",
                    ([copies_[i] for i in rng.permutation(len(copies_))],
                     [doubled[i] for i in rng.permutation(len(doubled))]), held_out=True))
    return out


BOUND_ARGS = ("period_ms", "exposed_copy_ms", "copy_ms", "kernel_ms")  # exercise 3's arguments, in order


@delegates(overlap_bound)  # the whole step: a function that calls it is refused
def hiding_bound(period_ms: float, exposed_copy_ms: float, copy_ms: float, kernel_ms: float) -> float:
    """Exercise 3's reference: the best speedup of hiding a step's exposed copy under its kernels, with both floors
    (:func:`infralens_lab.analysis.overlap.overlap_bound`'s ``bound``)."""
    return overlap_bound(period_ms, exposed_copy_ms, [copy_ms, kernel_ms])["bound"]


def hiding_bound_cases():
    """Exercise 3's cases, each ``(period_ms, exposed_copy_ms, copy_ms, kernel_ms)``, rows of the copy table: the
    lab's pageable step (the overlap floor binds: the copy is longer than the kernels) and its pinned step, the other
    GPU's pageable step (held out), and perturbed copies of the lab's pageable row: the copy at a tenth (Amdahl's
    floor binds), the kernels longer than the copy and the period (the kernels' floor), and nothing exposed (no
    speedup at all). None without a recording."""
    sets = lab01_keys._sets_holding(*(f"trace_copy_{m}" for m in COPY_MODES))
    if not sets or sets[0][1]:
        return None
    from ..functions import Case

    def rows(st) -> dict:
        trs = {m: load_trace(st.load(f"trace_copy_{m}")) for m in COPY_MODES}
        t = overlap_tables.copy_table(trs, COPY_BATCH_MIB * MiB).set_index("mode")
        return {m: tuple(float(t.loc[m, k]) for k in BOUND_ARGS) for m in ("pageable", "pinned")}

    own = rows(sets[0][0])
    gpu = lab01_keys._short_gpu(sets[0][0])
    out = [Case(f"pageable step, {gpu} recording (this lab)", own["pageable"]),
           Case(f"pinned step, {gpu} recording (this lab)", own["pinned"])]
    out += [Case(f"pageable step, {lab01_keys._short_gpu(st)} recording (held out)", rows(st)["pageable"],
                 held_out=True) for st, _ in sets[1:]]
    p, x, c, k = own["pageable"]
    out += [Case(f"pageable step ({gpu}) with its copy at a tenth (perturbed, held out)",
                 (p - 0.9 * x, x / 10, c / 10, k), held_out=True),
            Case(f"pageable step ({gpu}) with kernels 2x its copy (perturbed, held out)",
                 (p - k + 2 * c, x, c, 2 * c), held_out=True),
            Case(f"pageable step ({gpu}) with no copy time exposed (perturbed, held out)", (p, 0.0, c, k),
                 held_out=True)]
    return out


# ---------------------------------------------------------------- the timeline question (read in Perfetto)
def double_buffered_trace():
    """The recorded double-buffered trace the lab exports for Perfetto (lab05.q8's evidence)."""
    trs = _traces({"double_buffered": "trace_copy_double_buffered"})
    return None if trs is None else trs["double_buffered"]
