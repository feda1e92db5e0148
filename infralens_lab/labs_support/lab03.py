"""Glue for lab 03 (the memory ledger): the live step it measures, the tables it reconciles, and
the what-if and scaling tables it discusses.

Everything numeric comes from :mod:`infralens_lab.analysis.ledger` (formulas) or
:mod:`infralens_lab.measure.memory` (measurements); this module only picks the setups the lab
talks about and shapes the results into the tables and figure inputs the notebook shows.
Bytes are bytes; MiB = 2**20 B, GB = 1e9 B.
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ..analysis import ledger
from ..measure.torch_trace import quiet_profiler_chatter  # noqa: F401  (re-exported)
from ..workloads.tiny_gpt import GPTConfig
from .. import device
from ..measure.memory import measure_training_step
from ..measure.memory import measure_inference
from ..measure.memory import compare
from ..evidence import EvidenceError
from ..measure.memory import from_evidence
from ..measure import memory_timeline

from ..units import GB, MiB
LIVE_BATCH = 8
LIVE_SEQ = 128
STEADY = ("weights", "optimizer states")


def live_config() -> GPTConfig:
    """The TinyGPT the lab measures live: the package default (2 layers, 128 wide, 512 tokens of
    vocabulary), small enough that a measured CPU step takes a few seconds."""
    return GPTConfig()


def live_training() -> ledger.Training:
    """The training setup of the live step, as the ledger describes it: fp32, AdamW, SDPA
    (flash-style, no s×s scores kept), PyTorch's Adam code path for this device (``foreach`` on a
    GPU, ``forloop`` on a CPU)."""
    return ledger.Training(batch=LIVE_BATCH, seq=LIVE_SEQ, precision="fp32", optimizer="adamw",
                           attention="flash", optimizer_impl="foreach" if device.is_gpu() else "forloop")


def measure_live_step():
    """Measure one training step of :func:`live_config` with :func:`live_training`'s shapes on
    this machine (:func:`infralens_lab.measure.memory.measure_training_step`)."""
    t = live_training()
    with quiet_profiler_chatter():
        return measure_training_step(live_config(), batch=t.batch, seq=t.seq, precision=t.precision)


def measure_live_inference(batch: int = 4):
    """Measure generation with a KV cache for :func:`live_config` on this machine
    (:func:`infralens_lab.measure.memory.measure_inference`, fp32, ``batch`` sequences)."""
    with quiet_profiler_chatter():
        return measure_inference(live_config(), batch=batch)


def in_mib(df: pd.DataFrame, columns=("bytes",)) -> pd.DataFrame:
    """A copy of ``df`` with each of ``columns`` (bytes) replaced by ``<column>_MiB``."""
    out = df.copy()
    for c in columns:
        if c not in out.columns:
            raise ValueError(f"in_mib: no column {c!r}; columns are {list(out.columns)}")
        out.insert(list(out.columns).index(c), c.replace("bytes", "MiB") if "bytes" in c else f"{c}_MiB",
                   out[c] / MiB)
        out = out.drop(columns=[c])
    return out


def reconcile(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """:func:`infralens_lab.measure.memory.compare` in MiB: predicted, measured, measured minus
    predicted, gap in % of the prediction, and where the gap comes from."""
    cmp = compare(predicted, measured)
    cmp["difference_bytes"] = cmp["measured_bytes"] - cmp["predicted_bytes"]
    cmp = cmp[["category", "predicted_bytes", "measured_bytes", "difference_bytes", "gap_pct", "explanation"]]
    return in_mib(cmp, ("predicted_bytes", "measured_bytes", "difference_bytes"))


def _row(df: pd.DataFrame, category: str) -> int:
    hit = df.loc[df["category"] == category, "bytes"]
    if hit.empty:
        raise ValueError(f"no {category!r} row; categories are {list(df['category'])}")
    return int(hit.iloc[0])


def step_moments(measured: pd.DataFrame) -> tuple[dict, dict]:
    """Stacks (moment -> {category: bytes}) and peaks (moment -> bytes) for
    :func:`infralens_lab.present.ledger.peak_figure`, from one measured step: between steps
    (weights and optimizer states: gradients are freed by ``zero_grad(set_to_none=True)``), the
    end of forward (plus what is live then: saved activations, logits), after backward (weights,
    optimizer states and gradients; the activations are gone), and the measured peak."""
    w, o = _row(measured, "weights"), _row(measured, "optimizer states")
    stacks = {
        "between steps": {"weights": w, "optimizer states": o},
        "end of forward": {"weights": w, "optimizer states": o,
                           "activations": _row(measured, "activations (live after forward)")},
        "after backward": {"weights": w, "optimizer states": o, "gradients": _row(measured, "gradients")},
    }
    return stacks, {"end of forward": _row(measured, "peak")}


def moments_table(measured: pd.DataFrame) -> pd.DataFrame:
    """Live bytes at the moments of :func:`step_moments` plus the measured peak: ``moment, bytes, MiB``."""
    stacks, peaks = step_moments(measured)
    rows = [(k, sum(v.values())) for k, v in stacks.items()] + [("peak", v) for v in peaks.values()]
    return pd.DataFrame([{"moment": k, "bytes": int(b), "MiB": b / MiB} for k, b in rows])


def ledger_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Only the ledger's categories (:data:`infralens_lab.analysis.ledger.CATEGORIES`) of a
    measured or predicted frame, dropping extra rows such as ``peak``."""
    return df[df["category"].isin(ledger.CATEGORIES)].reset_index(drop=True)


def peak_over_steady(measured: pd.DataFrame) -> float:
    """Measured peak divided by the steady state between steps (weights + optimizer states)."""
    return _row(measured, "peak") / (_row(measured, "weights") + _row(measured, "optimizer states"))


def scaling(zero_stages=(0, 1, 2, 3), seq: int = 2048, batch: int = 1, dp: int = 8,
            recompute: str = "none", attention: str = "materialized") -> pd.DataFrame:
    """:func:`~infralens_lab.analysis.ledger.scaling_table` over the GPT-2 and Llama 2 presets
    (125M to 70B): bf16 mixed precision with AdamW on ``dp`` data-parallel ranks, bytes per rank."""
    return ledger.scaling_table(seqs=(seq,), batches=(batch,), zero_stages=tuple(zero_stages), dp=dp,
                                recompute=recompute, attention=attention)


def scaling_view(table: pd.DataFrame) -> pd.DataFrame:
    """The scaling table in GB per rank, with each category's share of the total."""
    cats = [c for c in ledger.CATEGORIES if c in table.columns and table[c].sum() > 0]
    out = table[["model", "params", "zero_stage"]].copy()
    out["params_B"] = out.pop("params") / 1e9
    for c in cats:
        out[f"{c} GB"] = table[c] / GB
    out["total GB"] = table["total"] / GB
    out["dominant"] = table["dominant"]
    out["dominant share %"] = [100 * table.loc[i, d] / table.loc[i, "total"] for i, d in zip(table.index, table["dominant"])]
    return out


WHAT_IF = (
    ("baseline: DDP, bucket 25 MiB", {}),
    ("smaller DDP bucket (5 MiB)", {"bucket_mb": 5.0}),
    ("gradient_as_bucket_view", {"grad_as_bucket_view": True}),
    ("ZeRO-1 (shard optimizer states)", {"zero_stage": 1}),
    ("ZeRO-1 + smaller buckets (5 MiB)", {"zero_stage": 1, "bucket_mb": 5.0}),
    ("ZeRO-2 (+ shard gradients)", {"zero_stage": 2}),
    ("ZeRO-3 (+ shard weights)", {"zero_stage": 3}),
    ("selective recomputation", {"recompute": "selective"}),
    ("full recomputation", {"recompute": "full"}),
    ("flash attention (no s² scores)", {"attention": "flash"}),
)


def what_if(model: str = "llama2-7b", batch: int = 1, seq: int = 4096, dp: int = 8) -> pd.DataFrame:
    """What each memory-saving option buys for ``model`` (a preset name) per rank, one row per
    option: total GB, saving against the baseline, and the dominant term afterwards. Baseline:
    bf16 mixed precision, AdamW, DDP on ``dp`` ranks with 25 MiB buckets, materialized attention."""
    m = ledger.Model.preset(model)
    base = ledger.Training(batch=batch, seq=seq, precision="bf16_mixed", optimizer="adamw", dp=dp)
    rows, ref = [], None
    for name, change in WHAT_IF:
        df = ledger.predict_training(m, replace(base, **change))
        tot = ledger.total(df)
        ref = tot if ref is None else ref
        by = dict(zip(df["category"], df["bytes"]))
        rows.append({"option": name, "total GB": tot / GB, "saves GB": (ref - tot) / GB,
                     "optimizer states GB": by["optimizer states"] / GB, "activations GB": by["activations"] / GB,
                     "communication buckets GB": by["communication buckets"] / GB, "dominant": ledger.dominant(df)})
    return pd.DataFrame(rows)


def inference_scaling(models=("llama2-7b", "llama2-13b", "llama2-70b"), contexts=(1024, 4096),
                      batches=(1, 16, 64), dtype: str = "bf16") -> pd.DataFrame:
    """Predicted inference ledger per (model, context, batch): weights, KV cache and the prefill
    activations of one 1024-token prompt per sequence in GB, and the dominant term."""
    rows = []
    for name in models:
        m = ledger.Model.preset(name)
        for ctx in contexts:
            for b in batches:
                inf = ledger.Inference(batch=b, context=ctx, dtype=dtype, prompt=min(ctx, 1024))
                df = ledger.predict_inference(m, inf)
                by = dict(zip(df["category"], df["bytes"]))
                rows.append({"model": name, "kv_heads": m.n_kv_head, "context": ctx, "batch": b,
                             "weights GB": by["weights"] / GB, "KV cache GB": by["KV cache"] / GB,
                             "activations GB": by["activations"] / GB, "dominant": ledger.dominant(df)})
    return pd.DataFrame(rows)


def kv_crossover_context(model: str, batch: int, dtype: str = "bf16") -> float:
    """Context length (tokens) at which the KV cache of ``batch`` sequences holds as many bytes
    as the weights: Ψ / (2·L·b·kv_heads·head_dim), both in the same dtype."""
    m = ledger.Model.preset(model)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch = {batch!r}; expected a positive int")
    per_token = ledger.kv_cache_bytes(m.n_layer, batch, 1, m.n_kv_head, m.head_dim, ledger.DTYPE_BYTES[dtype])
    return ledger.param_count(m) * ledger.DTYPE_BYTES[dtype] / per_token


RESERVED = "reserved (peak)"


def allocator_slack(runs: dict) -> pd.DataFrame | None:
    """Per recorded run that carries a ``reserved (peak)`` row (the CUDA caching allocator's segments,
    ``torch.cuda.max_memory_reserved``): peak allocated, peak reserved and their difference (bytes
    the allocator held but no tensor used: rounding, cached free blocks, fragmentation, and any
    segments cached by earlier work in the same process unless the measurement emptied the cache
    first), in MiB. None when no run has the row."""
    rows = []
    for run, df in runs.items():
        cats = dict(zip(df["category"], df["bytes"]))
        if RESERVED in cats and "peak" in cats:
            rows.append({"run": run, "peak_allocated_MiB": cats["peak"] / MiB, "peak_reserved_MiB": cats[RESERVED] / MiB,
                         "slack_MiB": (cats[RESERVED] - cats["peak"]) / MiB,
                         "slack_pct_of_allocated": 100 * (cats[RESERVED] - cats["peak"]) / cats["peak"]})
    return pd.DataFrame(rows) if rows else None


def recorded_memory(store, which: str = "train"):
    """The recorded GPU measurement (``memory_train`` or ``memory_infer``) as
    ``(evidence, {run: measured DataFrame})`` with one run per precision (train) or dtype (infer),
    or ``(None, {})`` with a printed note when the recording lacks it."""
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


ISOLATED_SINCE = "2026-11-23T12:09:32Z"  # the recorder change that empties the allocator's cache and resets its
# peak counters before each memory measurement (measure.memory.isolate); recordings dated earlier did not


def slack_isolated(ev) -> bool:
    """Whether a recorded ``memory_train`` was made by a recorder that isolates each measurement
    (``empty_cache`` + ``reset_peak_memory_stats`` first), judged by its date against
    :data:`ISOLATED_SINCE`. When False, each run's reserved peak also holds segments cached by the
    recorder's earlier steps and by the runs measured before it in the same process."""
    date = getattr(getattr(ev, "provenance", None), "date_utc", "") or ""
    if not date:
        raise ValueError("slack_isolated: the record has no provenance date_utc; expected a recorded memory_train")
    return date >= ISOLATED_SINCE


TIMELINE = "memory_timeline"


def recorded_timeline(store):
    """The recorded allocation timeline (record ``memory_timeline``, written by
    :func:`infralens_lab.measure.memory_timeline.record_into`) as ``(evidence, {precision: timeline
    DataFrame})`` (:func:`~infralens_lab.measure.memory_timeline.timeline`: allocated bytes after each
    allocator event, by phase), or ``(None, {})`` when the reference set has no such record."""
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


__all__ = ["GB", "RESERVED", "allocator_slack", "LIVE_BATCH", "LIVE_SEQ", "MiB", "WHAT_IF", "in_mib", "inference_scaling", "kv_crossover_context",
           "ledger_rows", "live_config", "live_training", "measure_live_inference", "measure_live_step", "moments_table",
           "quiet_profiler_chatter", "peak_over_steady", "reconcile", "recorded_memory", "recorded_timeline", "slack_isolated", "ISOLATED_SINCE", "TIMELINE",
           "scaling", "scaling_view", "step_moments", "what_if"]
