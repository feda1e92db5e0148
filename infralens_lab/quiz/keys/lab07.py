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
from ...parse.trace import enclosing_parent, load_trace
from ...stats import percentile

FORMATS = ("channels_first", "channels_last")


def _store():
    return evidence.reference_holding()


def _resnet() -> tuple[dict, dict] | None:
    st = _store()
    if st is None or any(f"resnet_trace_{f}" not in st.names() for f in FORMATS) or "gates_gpu" not in st.names():
        return None
    return {f: load_trace(st.load(f"resnet_trace_{f}")) for f in FORMATS}, st.load("gates_gpu").values


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


def aa_process_quotients():
    """Ratio spread over a's spread in each recorded A/A process, and their median (lab07.q6)."""
    st = _store()
    procs = st.load("gates_gpu").values.get("aa_processes") if st is not None and "gates_gpu" in st.names() else None
    return analysis_gates.process_quotients(procs) if procs else None


def regression_counts():
    """Counts per step of the intended MLP step and each regression, on this machine (lab07.ex3)."""
    with quiet_profiler_chatter():
        return measure_gates.regression_counts()


# ---------------------------------------------------------------- function exercises (issue 38)
def self_ms(events, op: str, forwards: int) -> float:
    """Exercise 1's reference: the self CPU time of every call of ``op`` in ``events`` (one thread's CPU events:
    ``name, start_us, dur_us``), summed, per forward, in ms. An event's direct children are the events whose
    innermost enclosing event it is (:func:`infralens_lab.parse.trace.enclosing_parent`, the trace's own rule); its
    self time is its duration less what each direct child covers of it (``Trace.self_us``)."""
    import numpy as np

    ev = events.sort_values(["start_us", "dur_us"], ascending=[True, False], kind="stable")
    s = ev["start_us"].to_numpy(dtype=float)
    d = ev["dur_us"].to_numpy(dtype=float)
    e = s + d
    new = np.zeros(len(ev), dtype=bool)
    new[:1] = True
    parent = enclosing_parent(new, s, e)
    own = d.copy()
    has = parent >= 0
    np.subtract.at(own, parent[has], np.minimum(d[has], e[parent[has]] - s[has]))
    return float(own[(ev["name"] == op).to_numpy()].sum() / forwards / 1e3)


def _nest_deeper(events, op: str):
    """``events`` with one more level inside each call of ``op`` that has direct children: an event spanning from its
    first direct child's start to its last one's end, so those children become grandchildren."""
    import numpy as np
    import pandas as pd

    ev = events.sort_values(["start_us", "dur_us"], ascending=[True, False], kind="stable").reset_index(drop=True)
    s = ev["start_us"].to_numpy(dtype=float)
    e = s + ev["dur_us"].to_numpy(dtype=float)
    new = np.zeros(len(ev), dtype=bool)
    new[:1] = True
    parent = enclosing_parent(new, s, e)
    rows = []
    for i in np.flatnonzero((ev["name"] == op).to_numpy()):
        kids = np.flatnonzero(parent == i)
        if len(kids):
            lo, hi = s[kids].min(), e[kids].max()
            rows.append({"name": "cudnn::inner_setup", "start_us": lo, "dur_us": hi - lo})
    return pd.concat([ev, pd.DataFrame(rows)], ignore_index=True)


def self_time_cases():
    """Exercise 1's cases, each ``(events, op, forwards)``: the lab's channels_first forward (its top op by self time
    and the wrapper conv2d, whose self time is small) and channels_last forward; the other GPU's forwards (held out);
    and perturbed copies of the lab's channels_first forward (held out): its rows shuffled, two forwards back to back,
    and the top op's direct children nested one level deeper (an inner range around them). None without a
    recording."""
    import pandas as pd

    from .lab01 import _sets_holding, _short_gpu

    names = tuple(f"resnet_trace_{f}" for f in FORMATS)
    sets = _sets_holding(*names)
    if not sets or sets[0][1]:
        return None
    from ..functions import Case

    own, gpu = sets[0][0], _short_gpu(sets[0][0])
    tr_first, tr_last = (load_trace(own.load(f"resnet_trace_{f}")) for f in FORMATS)
    first, n = top_ops.cpu_events(tr_first), max(1, len(tr_first.steps()))
    last, n_last = top_ops.cpu_events(tr_last), max(1, len(tr_last.steps()))
    top = top_ops.op_times(tr_first).iloc[0]["name"]
    out = [Case(f"{top}, channels_first forward, {gpu} recording (this lab)", (first, top, n)),
           Case(f"aten::conv2d, channels_first forward, {gpu} recording (this lab)", (first, "aten::conv2d", n)),
           Case(f"aten::native_batch_norm, channels_last forward, {gpu} recording (this lab)",
                (last, "aten::native_batch_norm", n_last))]
    for st, _ in sets[1:]:
        tr_other = load_trace(st.load("resnet_trace_channels_first"))
        other, m = top_ops.cpu_events(tr_other), max(1, len(tr_other.steps()))
        out += [Case(f"{top}, channels_first forward, {_short_gpu(st)} recording (held out)", (other, top, m),
                     held_out=True),
                Case(f"aten::batch_norm, channels_first forward, {_short_gpu(st)} recording (held out)",
                     (other, "aten::batch_norm", m), held_out=True)]
    shuffled = first.sample(frac=1.0, random_state=38).reset_index(drop=True)
    span = float((first["start_us"] + first["dur_us"]).max() - first["start_us"].min())
    twice = pd.concat([first, first.assign(start_us=first["start_us"] + span + 100.0)], ignore_index=True)
    out += [Case(f"{top}, channels_first forward ({gpu}), rows shuffled (perturbed, held out)", (shuffled, top, n),
                 held_out=True),
            Case(f"aten::empty, channels_first forward ({gpu}) twice, back to back (perturbed, held out)",
                 (twice, "aten::empty", 2 * n), held_out=True),
            Case(f"{top}, channels_first forward ({gpu}) with its children nested one level deeper (perturbed, "
                 "held out)", (_nest_deeper(first, top), top, n), held_out=True)]
    return out


LAB_BUDGET = 0.03  # the false-alarm rate lab 07's gate allows: clear of every k's rate on either recorded GPU


def smallest_k(ratios, tolerance: float, budget: float) -> float:
    """Exercise 2's reference: the smallest k of ``analysis.gates.KS`` whose false-alarm rate (exactly,
    :func:`infralens_lab.analysis.gates.false_alarm_exact`) at ``tolerance`` is at most ``budget`` (fractions);
    NaN when none is."""
    for k in analysis_gates.KS:
        if analysis_gates.false_alarm_exact(ratios, k, tolerance) <= budget:
            return float(k)
    return float("nan")


def smallest_k_cases():
    """Exercise 2's cases, each ``(ratios, tolerance, budget)``: the lab's recorded A/A ratios at its tolerance (1%)
    with a 3% false-alarm budget; the other GPU's at a 10% budget (held out); and perturbed copies of the lab's (held
    out): every ratio three times as far from their median (more noise) at a 2% tolerance, a 2% tolerance with a 5%
    budget, and every ratio 3% lower (the limit is relative to their own median, not to 1). On either recorded GPU
    as the lab's own, each budget sits at least two of the bootstrap's standard errors (2,000 draws) from every k's
    exact rate, so a resampled rate picks the same k. None without a recording."""
    from .lab01 import _sets_holding, _short_gpu

    sets = _sets_holding("gates_gpu")
    sets = [(st, held) for st, held in sets if st.load("gates_gpu").values.get("aa_ratios")]
    if not sets or sets[0][1]:
        return None
    from ..functions import Case

    own, gpu = sets[0][0], _short_gpu(sets[0][0])
    aa = [float(x) for x in own.load("gates_gpu").values["aa_ratios"]]
    med = percentile(aa, 50)
    tol = analysis_gates.LAB_TOLERANCE
    out = [Case(f"A/A ratios, {gpu} recording, tolerance 1%, budget {LAB_BUDGET:.0%} (this lab)", (aa, tol, LAB_BUDGET))]
    out += [Case(f"A/A ratios, {_short_gpu(st)} recording, tolerance 1%, budget 10% (held out)",
                 ([float(x) for x in st.load("gates_gpu").values["aa_ratios"]], tol, 0.10), held_out=True)
            for st, _ in sets[1:]]
    out += [Case(f"A/A ratios ({gpu}) three times as far from their median, tolerance 2%, budget 3% (perturbed, "
                 "held out)", ([med + 3 * (x - med) for x in aa], 0.02, 0.03), held_out=True),
            Case(f"A/A ratios ({gpu}), tolerance 2%, budget 5% (perturbed, held out)", (aa, 0.02, 0.05), held_out=True),
            Case(f"A/A ratios ({gpu}) all 3% lower, budget {LAB_BUDGET:.0%} (perturbed, held out)",
                 ([0.97 * x for x in aa], tol, LAB_BUDGET), held_out=True)]
    return out
