"""Lab 03's grading evidence, rebuilt in the grader's process with the functions the notebook's cells call: the
live TinyGPT step (measured on the grading machine, as the notebook measures it on the learner's), its predicted
ledger (:mod:`infralens_lab.analysis.ledger`), the lab's tables (:mod:`infralens_lab.analysis.ledger_views`). Bank
questions name these as ``"evidence": "infralens_lab.quiz.keys.lab03:<function>"``.
"""
from __future__ import annotations

import functools

from ...analysis import ledger
from ...analysis import ledger_views as views
from ...measure.memory import compare, measure_training_step
from ...measure.torch_trace import quiet_profiler_chatter
from ..functions import delegates


@functools.lru_cache(maxsize=1)
def _step():
    t = views.live_training()
    with quiet_profiler_chatter():
        return measure_training_step(views.live_config(), batch=t.batch, seq=t.seq, precision=t.precision)


def _predicted():
    return ledger.predict_training(ledger.Model.from_gpt_config(views.live_config()), views.live_training())


def ledger_rows():
    """The measured ledger of the live step, ledger categories only (q2)."""
    return views.ledger_rows(_step())


def gaps():
    """Predicted vs measured for the live step, gap in % of the prediction per category (ex3)."""
    return compare(_predicted(), _step())


def moments():
    """Live bytes by moment of the live step (q3)."""
    return views.moments_table(_step())


def scaling():
    """The scaling table (a formula) the lab shows (q5)."""
    return views.scaling()


# ---------------------------------------------------------------- function exercises (issue 38)
LIVE_INFER_BATCH = 4  # the sequences of the live generation the notebook measures (lab03.measure_live_inference)


@delegates(ledger.model_states)  # the ledger's own line: a function that calls it is refused
def optimizer_bytes(params: int, precision: str, optimizer: str) -> float:
    """Exercise 1's reference: the optimizer-states line of the ledger, KΨ bytes for ``params`` parameters trained
    in ``precision`` with ``optimizer`` (:func:`infralens_lab.analysis.ledger.model_states`, no sharding)."""
    return float(ledger.model_states(params, precision, optimizer)["optimizer states"][0])


@delegates(ledger.kv_cache_bytes)  # the ledger's own line: a function that calls it is refused
def kv_bytes(n_layer: int, n_head: int, n_kv_head: int, n_embd: int, batch: int, context: int, dtype: str) -> float:
    """Exercise 2's reference: the KV cache's bytes for a model of ``n_layer`` layers, ``n_head`` query heads,
    ``n_kv_head`` key/value heads and width ``n_embd``, holding ``context`` positions of ``batch`` sequences in
    ``dtype`` (:func:`infralens_lab.analysis.ledger.kv_cache_bytes`; head dim = width / query heads)."""
    return float(ledger.kv_cache_bytes(n_layer, batch, context, n_kv_head, n_embd // n_head, ledger.DTYPE_BYTES[dtype]))


def _recorded_runs(name: str, key: str) -> list[tuple[str, bool, dict]]:
    """``[(gpu, held_out, meta)]`` of every run in record ``name`` (``memory_train`` by precision, ``memory_infer``
    by dtype): the reference set's first (this lab's), then the other GPUs' (held out)."""
    from .lab01 import _sets_holding, _short_gpu

    out = []
    for st, held in _sets_holding(name):
        ev = st.load(name).values
        for run in dict.fromkeys(r[key] for r in ev["rows"]):
            out.append((_short_gpu(st), held, {**ev["meta"], key: run}))
    return out


def _params(config) -> int:
    return ledger.param_count(ledger.Model.from_gpt_config(config))


def optimizer_cases():
    """Exercise 1's cases, each ``(params, precision, optimizer)``: the live TinyGPT step (fp32 AdamW); the reference
    set's recorded training steps (fp32 and autocast bf16: fp32 weights, no master copy); the other GPU's (held out);
    and setups the lab does not run (held out): Llama-2-7B and GPT-2 125M in 16-bit mixed precision with Adam (an
    fp32 master copy: K = 12), TinyGPT with SGD and momentum (K = 4) and SGD in bf16 mixed precision (the master copy
    alone). Bytes per parameter differ across them, so no constant K passes. None without a recording."""
    runs = _recorded_runs("memory_train", "precision")
    if not runs or runs[0][1]:
        return None
    from ..functions import Case

    t = views.live_training()
    psi = _params(views.live_config())
    out = [Case(f"live TinyGPT step, {t.precision} {t.optimizer} (this lab)", (psi, t.precision, t.optimizer))]
    out += [Case(f"recorded training step, {m['precision']} {m['optimizer']}, {gpu} recording "
                 f"({'held out' if held else 'this lab'})", (_params(m["config"]), m["precision"], m["optimizer"]),
                 held_out=held) for gpu, held, m in runs]
    llama, gpt2 = (ledger.param_count(ledger.Model.preset(n)) for n in ("llama2-7b", "gpt2-125m"))
    out += [Case("Llama-2-7B, bf16 mixed precision, adamw (held out)", (llama, "bf16_mixed", "adamw"), held_out=True),
            Case("GPT-2 125M, fp16 mixed precision, adam (held out)", (gpt2, "fp16_mixed", "adam"), held_out=True),
            Case("live TinyGPT, fp32, sgd with momentum (held out)", (psi, "fp32", "sgd_momentum"), held_out=True),
            Case("GPT-2 125M, bf16 mixed precision, plain sgd (held out)", (gpt2, "bf16_mixed", "sgd"), held_out=True)]
    return out


def _kv_args(config, batch: int, context: int, dtype: str) -> tuple:
    c = config if isinstance(config, dict) else vars(config)
    return (c["n_layer"], c["n_head"], c["n_kv_head"], c["n_embd"], batch, context, dtype)


def kv_cases():
    """Exercise 2's cases, each ``(n_layer, n_head, n_kv_head, n_embd, batch, context, dtype)``: the live generation
    (TinyGPT, fp32, the notebook's batch, its block size of context); the reference set's recorded generations (fp32
    and bf16); the other GPU's (held out); and caches the lab does not measure (held out): Llama-2-70B with grouped-
    query attention (64 query heads, 8 KV heads) in bf16, the live TinyGPT with one KV head (multi-query) and
    Llama-2-7B's cache in fp8. A cache counted per query head fails on the GQA cases. None without a recording."""
    runs = _recorded_runs("memory_infer", "dtype")
    if not runs or runs[0][1]:
        return None
    from ..functions import Case

    cfg = views.live_config()
    out = [Case("live TinyGPT generation, fp32 (this lab)", _kv_args(cfg, LIVE_INFER_BATCH, cfg.block_size, "fp32"))]
    out += [Case(f"recorded generation, {m['dtype']}, {gpu} recording ({'held out' if held else 'this lab'})",
                 _kv_args(m["config"], m["batch"], m["context"], m["dtype"]), held_out=held) for gpu, held, m in runs]
    l70, l7 = (ledger.Model.preset(n) for n in ("llama2-70b", "llama2-7b"))
    out += [Case("Llama-2-70B (GQA: 64 query heads, 8 KV heads), bf16, batch 1, context 4096 (held out)",
                 (l70.n_layer, l70.n_head, l70.n_kv_head, l70.hidden, 1, 4096, "bf16"), held_out=True),
            Case("live TinyGPT with one KV head (multi-query), fp32 (held out)",
                 (cfg.n_layer, cfg.n_head, 1, cfg.n_embd, LIVE_INFER_BATCH, cfg.block_size, "fp32"), held_out=True),
            Case("Llama-2-7B (MHA), fp8 cache, batch 8, context 2048 (held out)",
                 (l7.n_layer, l7.n_head, l7.n_kv_head, l7.hidden, 8, 2048, "fp8"), held_out=True)]
    return out
