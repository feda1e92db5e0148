"""Per-lab glue: the setups, tables and figure inputs one notebook needs, so its cells stay thin."""
from __future__ import annotations

from typing import NamedTuple

from .. import device, evidence
from ..parse.ncu import NcuError, NcuPermissionError
from ..quiz import check


def check_on(qid: str, answer, ev):
    """``quiz.check(qid, answer, evidence=ev)``, or a note instead when the evidence is not there."""
    if ev is None:
        print(f"{qid}: this question is checked against recorded evidence, which is missing here; "
              f"it cannot be marked until the recording exists.")
        return None
    return check(qid, answer, evidence=ev)


def counters_fallback(exc: NcuError, st) -> str:
    """The one line a cell prints when live ncu failed and it shows the recorded counters instead: what
    happened, and whose counters follow (the recorded set's GPU). The fix for this machine is the doctor's."""
    gpu = st.gpu if st is not None else "no GPU (nothing is recorded here)"
    if isinstance(exc, NcuPermissionError):
        what = "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM)"
        fix = "; `python -m infralens_lab doctor --probe-counters` names the fix for this machine"
    else:
        what, fix = "ncu could not run here: " + " ".join(exc.message.split()).rstrip("."), ""
    return f"Live counters: {what}; recorded counters from {gpu} are shown instead{fix}."


def store():
    """The recorded reference set, or None (after printing why) when there is none."""
    try:
        return evidence.reference()
    except evidence.EvidenceError as exc:
        print(f"No recorded evidence: {exc}")
        return None


class CopyCeiling(NamedTuple):
    """A GPU's copy rate (``tbps``, 10¹² bytes/s read + written; None when it has none here), the ``gpu`` it
    belongs to and ``basis``: words naming where it comes from (or why there is none)."""

    tbps: float | None
    gpu: str
    basis: str


def copy_ceiling(st, live: bool, measure_now=None) -> CopyCeiling:
    """The copy rate to hold a DRAM rate against, from the same GPU as that rate (one statement, one GPU). A
    recorded rate (``live`` False) gets the copy rate of its own recorded set ``st``. A live rate gets this GPU's:
    its own recorded set (:func:`infralens_lab.evidence.own_set`, matched by the device's slug) when there is
    one, else one measured now (``measure_now()`` → bytes/s; default: ``measure.ceilings.measure(quick=True)``'s
    copy), else None with the reason: never another GPU's recorded rate."""
    if not live:
        if st is None or "ceilings" not in st.names():
            return CopyCeiling(None, st.gpu if st is not None else "no GPU", "no `ceilings` record in this set")
        bw = st.load("ceilings").values["copy"]["bandwidth_bytes_per_s"]
        return CopyCeiling(bw / 1e12, st.gpu, f"the copy rate recorded in the same set, {st.folder.name}")
    name = device.facts().name
    own = evidence.own_set(name)
    if own is not None and "ceilings" in own.names():
        bw = own.load("ceilings").values["copy"]["bandwidth_bytes_per_s"]
        return CopyCeiling(bw / 1e12, name, f"this GPU's copy rate, recorded in its own set {own.folder.name}")
    if measure_now is None:
        def measure_now():
            from ..measure import ceilings  # lazy: torch and CUDA, only on a GPU

            return ceilings.measure(quick=True)[0]["copy"]["bandwidth_bytes_per_s"]
    try:
        bw = float(measure_now())
    except Exception as exc:  # any failure of a live measurement becomes the stated reason
        return CopyCeiling(None, name, f"no copy rate for this GPU: not recorded here (no set "
                                       f"{device.slug(name)!r}) and measuring it failed ({type(exc).__name__}: {exc})")
    return CopyCeiling(bw / 1e12, name, "this GPU's copy rate, measured now by measure.ceilings (1 GiB copy_)")
