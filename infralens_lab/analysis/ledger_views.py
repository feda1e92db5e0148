"""Lab 03's ledger tables, as rules with tests: the live step's setup as the ledger describes it, the moments
of a measured step, the scaling and what-if tables, the KV-cache crossover, and the allocator's slack.

Formulas are :mod:`infralens_lab.analysis.ledger`'s; measured frames come from
:mod:`infralens_lab.measure.memory` (``category, bytes, how``) through the lab's glue or the grader's keys.
Bytes are bytes; MiB = 2**20 B, GB = 1e9 B (:mod:`infralens_lab.units`).
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from .. import device
from ..units import GB, MiB
from ..workloads.tiny_gpt import GPTConfig
from . import ledger

LIVE_BATCH = 8
LIVE_SEQ = 128
STEADY = ("weights", "optimizer states")


def live_config() -> GPTConfig:
    """The TinyGPT lab 03 measures live: the package default (2 layers, 128 wide, 512 tokens of vocabulary),
    small enough that a measured CPU step takes a few seconds."""
    return GPTConfig()


def live_training() -> ledger.Training:
    """The live step's setup as the ledger describes it: fp32, AdamW, SDPA (flash-style, no s×s scores kept),
    PyTorch's Adam code path for this device (``foreach`` on a GPU, ``forloop`` on a CPU)."""
    return ledger.Training(batch=LIVE_BATCH, seq=LIVE_SEQ, precision="fp32", optimizer="adamw",
                           attention="flash", optimizer_impl="foreach" if device.is_gpu() else "forloop")


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


SHORT = {"weights": "weights", "gradients": "grads", "optimizer states": "optimizer", "activations": "activations"}


def scaling_view(table: pd.DataFrame) -> pd.DataFrame:
    """The scaling table narrowed to fit a page, in GB per rank: ``model``, ``zero_stage``, ``params_B``
    (billions), the four large terms (``weights_GB``, ``grads_GB``, ``optimizer_GB``, ``activations_GB``),
    ``other_GB`` (temporary buffers, communication buckets, KV cache), ``total_GB``, ``dominant`` and
    ``dominant_pct`` (its share of the total)."""
    out = table[["model", "zero_stage"]].copy()
    out["params_B"] = table["params"] / 1e9
    for c, short in SHORT.items():
        out[f"{short}_GB"] = table[c] / GB
    other = [c for c in ledger.CATEGORIES if c not in SHORT and c in table.columns]
    out["other_GB"] = table[other].sum(axis=1) / GB
    out["total_GB"] = table["total"] / GB
    out["dominant"] = table["dominant"]
    out["dominant_pct"] = [100 * table.loc[i, d] / table.loc[i, "total"] for i, d in zip(table.index, table["dominant"], strict=True)]
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
        by = dict(zip(df["category"], df["bytes"], strict=True))
        rows.append({"option": name, "total_GB": tot / GB, "saves_GB": (ref - tot) / GB,
                     "optimizer_GB": by["optimizer states"] / GB, "activations_GB": by["activations"] / GB,
                     "buckets_GB": by["communication buckets"] / GB, "dominant": ledger.dominant(df)})
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
                by = dict(zip(df["category"], df["bytes"], strict=True))
                rows.append({"model": name, "kv_heads": m.n_kv_head, "context": ctx, "batch": b,
                             "weights_GB": by["weights"] / GB, "KV_cache_GB": by["KV cache"] / GB,
                             "activations_GB": by["activations"] / GB, "dominant": ledger.dominant(df)})
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
        cats = dict(zip(df["category"], df["bytes"], strict=True))
        if RESERVED in cats and "peak" in cats:
            rows.append({"run": run, "peak_allocated_MiB": cats["peak"] / MiB, "peak_reserved_MiB": cats[RESERVED] / MiB,
                         "slack_MiB": (cats[RESERVED] - cats["peak"]) / MiB,
                         "slack_pct_of_allocated": 100 * (cats[RESERVED] - cats["peak"]) / cats["peak"]})
    return pd.DataFrame(rows) if rows else None


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
