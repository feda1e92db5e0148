"""Glue for lab 03 (the memory ledger): the live measurements it runs, the recorded ones it loads, and the
predicted-vs-measured table it reconciles.

Formulas are :mod:`infralens_lab.analysis.ledger`'s, the lab's tables and rules
:mod:`infralens_lab.analysis.ledger_views`' (the live setup, moments, scaling, what-if, slack), measurements
:mod:`infralens_lab.measure.memory`'s. Bytes are bytes; MiB = 2**20 B.
"""
from __future__ import annotations

import pandas as pd

from ..analysis.ledger_views import in_mib, live_config, live_training
from ..evidence import EvidenceError
from ..measure import memory_timeline
from ..measure.memory import compare, from_evidence, measure_inference, measure_training_step
from ..measure.torch_trace import quiet_profiler_chatter

TIMELINE = "memory_timeline"


def measure_live_step():
    """Measure one training step of :func:`~infralens_lab.analysis.ledger_views.live_config` with the shapes of
    :func:`~infralens_lab.analysis.ledger_views.live_training` on this machine
    (:func:`infralens_lab.measure.memory.measure_training_step`)."""
    t = live_training()
    with quiet_profiler_chatter():
        return measure_training_step(live_config(), batch=t.batch, seq=t.seq, precision=t.precision)


def measure_live_inference(batch: int = 4):
    """Measure generation with a KV cache for the live TinyGPT on this machine
    (:func:`infralens_lab.measure.memory.measure_inference`, fp32, ``batch`` sequences)."""
    with quiet_profiler_chatter():
        return measure_inference(live_config(), batch=batch)


def reconcile(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """:func:`infralens_lab.measure.memory.compare` in MiB: predicted, measured, measured minus predicted, gap
    in % of the prediction, and where the gap comes from."""
    cmp = compare(predicted, measured)
    cmp["difference_bytes"] = cmp["measured_bytes"] - cmp["predicted_bytes"]
    cmp = cmp[["category", "predicted_bytes", "measured_bytes", "difference_bytes", "gap_pct", "explanation"]]
    return in_mib(cmp, ("predicted_bytes", "measured_bytes", "difference_bytes"))


def recorded_memory(store, which: str = "train"):
    """The recorded GPU measurement (``memory_train`` or ``memory_infer``) as ``(evidence, {run: measured
    DataFrame})`` with one run per precision (train) or dtype (infer), or ``(None, {})`` with a printed note when
    the recording lacks it."""
    name = {"train": "memory_train", "infer": "memory_infer"}.get(which)
    if name is None:
        raise ValueError(f"which = {which!r}; expected 'train' or 'infer'")
    if store is None or name not in store.names():
        print(f"No recorded {name} in this checkout yet: the GPU measurement appears here once the recorder "
              f"(`python -m infralens_lab record`) has run on a GPU.")
        return None, {}
    try:
        ev = store.load(name)
    except EvidenceError as exc:
        print(f"The recorded {name} could not be read: {exc}")
        return None, {}
    key = "precision" if which == "train" else "dtype"
    runs = list(dict.fromkeys(r[key] for r in ev.values["rows"]))
    return ev, {r: from_evidence(ev, r) for r in runs}


def recorded_timeline(store):
    """The recorded allocation timeline (record ``memory_timeline``) as ``(evidence, {precision: timeline
    DataFrame})`` (:func:`~infralens_lab.measure.memory_timeline.timeline`: allocated bytes after each allocator
    event, by phase), or ``(None, {})`` when the reference set has no such record."""
    if store is None or TIMELINE not in store.names():
        return None, {}
    ev = store.load(TIMELINE)
    out = {}
    for prec, v in ev.values.items():
        missing = [k for k in ("meta", "baseline_bytes", "events") if not isinstance(v, dict) or k not in v]
        if missing:
            raise ValueError(f"{TIMELINE}[{prec!r}] lacks {missing}; expected {{'meta', 'baseline_bytes', 'events'}} "
                             "per precision, as measure.memory_timeline.record_into writes it (re-record it)")
        out[prec] = memory_timeline.timeline(v["events"], v["baseline_bytes"], steps=v["meta"]["steps"])
    return ev, out
