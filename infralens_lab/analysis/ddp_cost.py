"""What DDP's overlapped communication costs, per bucket cap: the "overlapped is not free" table, whether a run's
sweep changes its buckets at all, and the multi-node model's own-rank-count row held against the measured step.

Every number is read from one DDP measurement (:class:`~infralens_lab.parse.ranks.RankRun`, live or recorded) with
the tables of :mod:`.ddp_run`; nothing here measures. The step splits exactly into three parts, per config, over the
steady profiled steps of every rank: ``step = one rank alone + DDP's extra compute + exposed all-reduce``, where one
rank alone is the one-rank baseline's median profiled step (no DDP, no peer) and the extra compute is what is left:
the work a DDP rank does that one GPU alone does not (copying gradients into buckets and back; on GPUs NCCL kernels
taking SMs and memory bandwidth from backward; on a CPU gloo's threads taking the cores). Times in ms.
"""
from __future__ import annotations

import pandas as pd

from ..parse.ranks import RankRun
from ..units import MiB
from . import ddp_run, distributed
from .scaling import multinode_model


def one_rank_step_ms(run: RankRun) -> float:
    """The one-rank baseline's median profiled step (ms): what :func:`.ddp_run.scaling_table` compares against."""
    return float(distributed.step_windows(run.traces("single")[0])["step_us"].median()) / 1e3


def cap_labels(run: RankRun) -> list[str]:
    """The sweep's ``cap …`` configs (no bucket view), smallest cap first."""
    caps = [c for c in run.ranks[0]["configs"] if c["label"].startswith("cap ") and not c["bucket_view"]
            and not c.get("straggle_ms")]
    return [c["label"] for c in sorted(caps, key=lambda c: c["bucket_cap_mb"])]


def cost_table(run: RankRun, labels=None) -> pd.DataFrame:
    """"Overlapped is not free", one row per cap (default :func:`cap_labels`): ``buckets`` (DDP's, from its Reducer),
    ``hidden_share`` (of all-reduce time, under backward), ``exposed_ms``, ``extra_compute_ms`` (DDP's extra compute
    against the one-rank step, see the module doc), ``step_ms`` (steady profiled, mean over ranks and steps) and
    ``one_rank_ms``; ``step_ms = one_rank_ms + extra_compute_ms + exposed_ms`` holds on every row."""
    labels = cap_labels(run) if labels is None else list(labels)
    times = ddp_run.sweep_times(run, labels).set_index("config")
    one = one_rank_step_ms(run)
    rows = []
    for label in labels:
        c, t = run.config(label), times.loc[label]
        rows.append({"config": label, "cap_MiB": c["bucket_cap_mb"], "buckets": len(c["bucket_bytes"]),
                     "hidden_share": t["hidden_under_backward"], "exposed_ms": t["exposed_ms"],
                     "extra_compute_ms": t["step_ms"] - t["exposed_ms"] - one, "step_ms": t["step_ms"],
                     "one_rank_ms": one})
    return pd.DataFrame(rows)


def cost_sentence(t: pd.DataFrame) -> str:
    """What the cost table says, from its numbers: the fastest and slowest caps' step difference split into exposed
    all-reduce and DDP's extra compute (the two parts sum to it), and whether the cap that hides the most is the
    fastest."""
    if len(t) < 2:
        return "One cap only: nothing to compare."
    fast, slow = t.loc[t["step_ms"].idxmin()], t.loc[t["step_ms"].idxmax()]
    hid = t.loc[t["hidden_share"].idxmax()]
    d, de, dx = (slow[k] - fast[k] for k in ("step_ms", "exposed_ms", "extra_compute_ms"))
    out = (f"Fastest step: {fast.config} ({fast.buckets} buckets, {fast.step_ms:.2f} ms), slowest {slow.config} "
           f"({slow.buckets} buckets, {slow.step_ms:.2f} ms): of the {d:.2f} ms between them, {de:+.2f} ms is exposed "
           f"all-reduce and {dx:+.2f} ms DDP's extra compute. ")
    if hid.config != fast.config:
        out += (f"The cap that hides the most ({hid.config}, {hid.hidden_share:.0%} hidden, {hid.exposed_ms:.2f} ms "
                f"exposed) is not the fastest ({fast.hidden_share:.0%} hidden, {fast.exposed_ms:.2f} ms exposed): "
                f"hidden communication still costs compute, {hid.extra_compute_ms:.2f} against "
                f"{fast.extra_compute_ms:.2f} ms a step.")
    else:
        out += f"It also hides the most ({fast.hidden_share:.0%})."
    big = (t["extra_compute_ms"] > t["exposed_ms"]).sum()
    x, e = t["extra_compute_ms"], t["exposed_ms"]
    out += (f" DDP's extra compute exceeds the exposed all-reduce at {big} of {len(t)} caps (extra compute from "
            f"{x.min():.2f} to {x.max():.2f} ms, exposed from {e.min():.2f} to {e.max():.2f} ms).")
    if (x < 0).any():
        below = t.loc[x.idxmin()]
        out += (f" Below zero at {below.config}: its DDP step minus its exposed all-reduce came out "
                f"{-below.extra_compute_ms:.2f} ms shorter than one rank alone's median step "
                f"({below.one_rank_ms:.2f} ms), two measurements taken apart.")
    return out


def sweep_note(name: str, run: RankRun) -> str:
    """Whether ``run``'s caps change its buckets, in one line: the counts per cap and, where caps share a count,
    which caps and why (the largest gradient tensor against the cap: a tensor is never split, so at any cap up to
    its size each such tensor is a bucket of its own), so their time differences are not the cap's doing."""
    labels = cap_labels(run)
    counts = {lab: len(run.config(lab)["bucket_bytes"]) for lab in labels}
    said = ", ".join(f"{lab.removeprefix('cap ')}: {n}" for lab, n in counts.items())
    if len(set(counts.values())) == len(counts):
        return f"{name}: buckets per cap {said}: every cap changes the buckets."
    biggest = max(run.config(labels[0])["param_bytes"]) / MiB
    groups = {}
    for lab, n in counts.items():
        groups.setdefault(n, []).append(lab.removeprefix("cap ").removesuffix(" MiB"))
    same = "; ".join(f"caps {', '.join(caps)} MiB all give {n}" for n, caps in groups.items() if len(caps) > 1)
    return (f"{name}: buckets per cap {said}. {same}: its largest gradient tensor is {biggest:.2f} MiB, and a tensor is "
            f"never split, so at every cap up to that size each such tensor is a bucket of its own. Between caps with "
            f"the same buckets the sweep changes nothing DDP does, so their time differences are run-to-run spread, "
            f"not the cap; only the caps with other counts show what the cap does.")


def model_check(run: RankRun, tolerance: float = 0.15) -> dict:
    """The multi-node model fed ``run`` (:func:`.ddp_run.model_inputs`), its row at the run's own rank count against
    the run's measured steady step at :data:`.ddp_run.SCALING_CONFIG`: ``model_step_ms``, ``measured_step_ms``,
    ``model_comm_ms`` (alpha and beta's all-reduce of every bucket) against ``measured_comm_ms`` (the traced
    all-reduces, waits included), the relative errors and ``within`` (both steps within ``tolerance``). The step is
    partly the model's own input (one rank alone and DDP's overhead come from this run), so the comm row is the
    part the fit decides."""
    mi = ddp_run.model_inputs(run, None)
    df = multinode_model(**ddp_run.model_kwargs(mi), gpus=(1, run.world)).set_index("gpus")
    t = ddp_run.sweep_times(run, [ddp_run.SCALING_CONFIG]).iloc[0]
    step, comm = float(df.loc[run.world, "step_ms"]), float(df.loc[run.world, "comm_ms"])
    err = step / t["step_ms"] - 1
    return {"ranks": run.world, "model_step_ms": step, "measured_step_ms": float(t["step_ms"]), "step_error": err,
            "model_comm_ms": comm, "measured_comm_ms": float(t["comm_ms"]), "comm_error": comm / t["comm_ms"] - 1,
            "within": abs(err) <= tolerance, "tolerance": tolerance, "label": df.attrs["label"]}
