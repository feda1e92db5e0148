"""Predicted memory ledger of a decoder transformer: bytes per category, each with its formula.

A training step holds weights, gradients, optimizer states, activations saved for backward,
temporary buffers and (with data parallelism) communication buckets; inference holds weights,
a KV cache and a transient working set. :func:`predict_training` and :func:`predict_inference`
return one row per category (``category, bytes, formula, source``) so a lab can name the term
that dominates (:func:`dominant`) and see how it moves with model size, sequence, batch and
ZeRO stage (:func:`scaling_table`). Sources: ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054),
activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", arXiv:2205.05198), PyTorch's DDP and optimizer source. Bytes are bytes; GB = 1e9 B,
GiB = 2**30 B. Pure arithmetic: no torch import.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import pandas as pd

from ..units import ELEM_BYTES, MiB
from .buckets import bucket_caps, bucket_count, rule_text

CATEGORIES = ("weights", "gradients", "optimizer states", "activations", "temporary buffers",
              "communication buckets", "KV cache")
ZERO = "Rajbhandari et al. 2020 (ZeRO) §3, §5"
KORTH = "Korthikanti et al. 2022 §4"
# bytes per element: w weights, g grads, master fp32 copy, e 16/32-bit activations,
# r residual stream (autocast keeps it fp32), copies = autocast's 16-bit weight copies.
PRECISIONS = {
    "fp32": dict(w=4, g=4, master=0, e=4, r=4, copies=0),
    "bf16_mixed": dict(w=2, g=2, master=4, e=2, r=2, copies=0),
    "fp16_mixed": dict(w=2, g=2, master=4, e=2, r=2, copies=0),
    "amp_bf16": dict(w=4, g=4, master=0, e=2, r=4, copies=2),
    "amp_fp16": dict(w=4, g=4, master=0, e=2, r=4, copies=2),
}
OPTIMIZER_STATE_BYTES = {"sgd": 0, "sgd_momentum": 4, "adam": 8, "adamw": 8}  # fp32 m (and v)
RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("materialized", "flash")
OPTIMIZER_IMPL = ("foreach", "forloop", "fused")
DTYPE_BYTES = {k: ELEM_BYTES[k] for k in ("fp32", "bf16", "fp16", "fp8", "int8")}  # the dtypes a ledger accepts


def _check_int(owner: str, name: str, v, minimum: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{owner}.{name} = {v!r}; expected an int >= {minimum}")


def _check_choice(owner: str, name: str, v, choices) -> None:
    if v not in choices:
        raise ValueError(f"{owner}.{name} = {v!r}; expected one of {tuple(choices)}")


@dataclass(frozen=True)
class Model:
    """Shape of a decoder-only transformer. ``n_positions`` > 0 means learned position
    embeddings of that length (GPT); 0 means rotary (Llama, no parameters). ``tied`` shares
    the embedding with the LM head. ``dropout`` says whether training applies dropout (it
    adds Korthikanti's 1-byte masks)."""

    name: str
    n_layer: int
    hidden: int
    n_head: int
    n_kv_head: int
    ffn: int
    vocab: int
    n_positions: int = 0
    tied: bool = False
    norm: str = "layernorm"      # layernorm (weight + bias) | rmsnorm (weight)
    mlp: str = "gelu"            # gelu (fc, out) | swiglu (gate, up, down)
    attn_bias: bool = False      # biases on q, k, v and the output projection
    mlp_bias: bool = True
    dropout: bool = False

    def __post_init__(self):
        for n in ("n_layer", "hidden", "n_head", "n_kv_head", "ffn", "vocab"):
            _check_int("Model", n, getattr(self, n))
        _check_int("Model", "n_positions", self.n_positions, minimum=0)
        if self.hidden % self.n_head:
            raise ValueError(f"Model.hidden = {self.hidden} is not divisible by n_head = {self.n_head}; "
                             f"expected hidden to be a multiple of n_head")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"Model.n_head = {self.n_head} is not divisible by n_kv_head = "
                             f"{self.n_kv_head}; expected n_head to be a multiple of n_kv_head")
        _check_choice("Model", "norm", self.norm, ("layernorm", "rmsnorm"))
        _check_choice("Model", "mlp", self.mlp, ("gelu", "swiglu"))

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_head

    @property
    def kv_dim(self) -> int:
        return self.n_kv_head * self.head_dim

    @classmethod
    def from_gpt_config(cls, cfg, name: str = "tiny-gpt") -> Model:
        """The shape of :class:`~infralens_lab.workloads.tiny_gpt.TinyGPT` for a ``GPTConfig``
        (or a dict of its fields): LayerNorm with bias, GELU MLP with bias, q/kv/proj without
        bias, learned positions, untied head, no dropout."""
        get = cfg.get if isinstance(cfg, dict) else lambda k: getattr(cfg, k)
        return cls(name, get("n_layer"), get("n_embd"), get("n_head"), get("n_kv_head"), get("ffn"),
                   get("vocab"), n_positions=get("block_size"), tied=False, norm="layernorm",
                   mlp="gelu", attn_bias=False, mlp_bias=True, dropout=False)

    @classmethod
    def preset(cls, name: str) -> Model:
        """Published shapes: GPT-2 (Radford et al. 2019; HF configs) and Llama 2 (Touvron et
        al. 2023, Table 1; HF configs: 70B has 8 KV heads)."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; expected one of {tuple(PRESETS)}")
        return PRESETS[name]


def _gpt2(name, L, h, a):
    return Model(name, L, h, a, a, 4 * h, 50257, n_positions=1024, tied=True, attn_bias=True, dropout=True)


def _llama(name, L, h, a, kv, f):
    return Model(name, L, h, a, kv, f, 32000, tied=False, norm="rmsnorm", mlp="swiglu", mlp_bias=False)


PRESETS = {
    "gpt2-125m": _gpt2("gpt2-125m", 12, 768, 12),
    "gpt2-350m": _gpt2("gpt2-350m", 24, 1024, 16),
    "gpt2-1.5b": _gpt2("gpt2-1.5b", 48, 1600, 25),
    "llama2-7b": _llama("llama2-7b", 32, 4096, 32, 32, 11008),
    "llama2-13b": _llama("llama2-13b", 40, 5120, 40, 40, 13824),
    "llama2-70b": _llama("llama2-70b", 80, 8192, 64, 8, 28672),
}


def layer_params(m: Model) -> int:
    """Parameters of one block: q, k, v, output projection, MLP and two norms."""
    h, kv, f = m.hidden, m.kv_dim, m.ffn
    attn = 2 * h * h + 2 * h * kv + (2 * h + 2 * kv if m.attn_bias else 0)
    mlp = (3 * h * f + (2 * f + h if m.mlp_bias else 0)) if m.mlp == "swiglu" else \
          (2 * h * f + (f + h if m.mlp_bias else 0))
    norm = 2 * h if m.norm == "layernorm" else h
    return attn + mlp + 2 * norm


def param_count(m: Model) -> int:
    """Exact parameter count for the layout the shape fields describe: L blocks, token
    embedding V·h, learned positions n_positions·h, final norm, LM head V·h unless tied."""
    final_norm = 2 * m.hidden if m.norm == "layernorm" else m.hidden
    head = 0 if m.tied else m.vocab * m.hidden
    return m.n_layer * layer_params(m) + m.vocab * m.hidden + m.n_positions * m.hidden + final_norm + head


def gpt_params_closed_form(n_layer: int, hidden: int, vocab: int, n_positions: int) -> int:
    """The usual GPT-2 closed form 12·L·h² + 13·L·h + (V + s)·h + 2h (tied head, biases,
    LayerNorm, ffn = 4h); equals :func:`param_count` for that layout."""
    L, h = n_layer, hidden
    return 12 * L * h * h + 13 * L * h + (vocab + n_positions) * h + 2 * h


def matmul_weight_params(m: Model) -> int:
    """Parameters in matmul weight matrices (no biases, norms or embeddings; the head counts,
    tied or not): what torch.autocast casts to 16 bits and keeps for backward."""
    h, kv, f = m.hidden, m.kv_dim, m.ffn
    per_layer = 2 * h * h + 2 * h * kv + (3 if m.mlp == "swiglu" else 2) * h * f
    return m.n_layer * per_layer + m.vocab * h


@dataclass(frozen=True)
class Training:
    """One data-parallel rank's training step. ``batch`` is the per-rank micro-batch;
    ``precision`` ``fp32`` | ``bf16_mixed``/``fp16_mixed`` (ZeRO/Megatron: 16-bit weights and
    grads, fp32 master in the optimizer) | ``amp_bf16``/``amp_fp16`` (torch.autocast: fp32
    weights and grads, 16-bit compute copies). ``attention`` ``materialized`` stores the s×s
    scores (the paper's case), ``flash`` stores only a logsumexp. ``optimizer_impl`` is
    PyTorch's Adam code path (foreach is the CUDA default, forloop the CPU one)."""

    batch: int
    seq: int
    precision: str = "bf16_mixed"
    optimizer: str = "adamw"
    dp: int = 1
    zero_stage: int = 0
    recompute: str = "none"
    bucket_mb: float | None = None
    attention: str = "materialized"
    optimizer_impl: str = "foreach"
    grad_as_bucket_view: bool = False
    repeat_kv: bool = False

    def __post_init__(self):
        for n in ("batch", "seq", "dp"):
            _check_int("Training", n, getattr(self, n))
        for n, choices in (("precision", PRECISIONS), ("optimizer", OPTIMIZER_STATE_BYTES),
                           ("recompute", RECOMPUTE), ("attention", ATTENTION), ("optimizer_impl", OPTIMIZER_IMPL)):
            _check_choice("Training", n, getattr(self, n), choices)
        if isinstance(self.zero_stage, bool) or self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"Training.zero_stage = {self.zero_stage!r}; expected one of 0, 1, 2, 3")
        if self.bucket_mb is not None and (isinstance(self.bucket_mb, bool) or not isinstance(self.bucket_mb, (int, float))
                                           or self.bucket_mb <= 0):
            raise ValueError(f"Training.bucket_mb = {self.bucket_mb!r}; expected a positive number of MiB, or None "
                             f"for DDP's default")


TrainingSetup = Training  # the name docs/CONTRACTS.md first used


@dataclass(frozen=True)
class Inference:
    """Generation with a KV cache: ``context`` tokens of cache per sequence, weights and cache
    in ``dtype``; ``prompt`` tokens go through one prefill forward (default: ``context``);
    ``repeat_kv``: GQA implemented by copying K, V to all heads (TinyGPT, HF Llama)."""

    batch: int
    context: int
    dtype: str = "bf16"
    prompt: int | None = None
    repeat_kv: bool = False

    def __post_init__(self):
        _check_int("Inference", "batch", self.batch)
        _check_int("Inference", "context", self.context)
        _check_choice("Inference", "dtype", self.dtype, DTYPE_BYTES)
        if self.prompt is not None:
            _check_int("Inference", "prompt", self.prompt)
            if self.prompt > self.context:
                raise ValueError(f"Inference.prompt = {self.prompt} exceeds context = {self.context}; "
                                 f"expected prompt <= context")


# ---------------------------------------------------------------- model states (ZeRO)
def model_states(params: int, precision: str = "bf16_mixed", optimizer: str = "adamw", dp: int = 1,
                 zero_stage: int = 0, matmul_params: int = 0) -> dict[str, tuple[int, str]]:
    """Weights, gradients and optimizer states per rank, in bytes, with their formulas.

    Rajbhandari et al. 2020 §3.1: mixed-precision Adam holds 2Ψ (16-bit weights) + 2Ψ (16-bit
    grads) + KΨ with K = 12 (fp32 master, m, v) = 16Ψ bytes; §5.1: stage 1 divides the KΨ term
    by N_d, stage 2 also the gradients, stage 3 also the weights. fp32 training has no master
    copy (K = 8 for Adam); torch.autocast keeps fp32 weights and grads and adds 16-bit copies
    of the ``matmul_params`` matmul weights, held from forward to backward.
    """
    Training(1, 1, precision, optimizer, dp, zero_stage)  # validates the arguments
    if isinstance(params, bool) or not isinstance(params, (int, float)) or not math.isfinite(params) or params <= 0:
        raise ValueError(f"params = {params!r}; expected a positive, finite parameter count "
                         f"(e.g. param_count(Model.preset('gpt2-125m')))")
    p = PRECISIONS[precision]
    K = p["master"] + OPTIMIZER_STATE_BYTES[optimizer]
    n = dp
    sw, sg, so = (n if zero_stage >= 3 else 1), (n if zero_stage >= 2 else 1), (n if zero_stage >= 1 else 1)
    copies = p["copies"] * matmul_params
    w_txt = f"{p['w']}Ψ" + (f" + {p['copies']}Ψ_matmul (autocast copies)" if copies else "")
    return {
        "weights": (round((p["w"] * params + copies) / sw), w_txt + (f" / N_d={n}" if sw > 1 else "")),
        "gradients": (round(p["g"] * params / sg), f"{p['g']}Ψ" + (f" / N_d={n}" if sg > 1 else "")),
        "optimizer states": (round(K * params / so), f"KΨ, K={K} (" + (f"{p['master']} master + " if p["master"] else "")
                             + f"{OPTIMIZER_STATE_BYTES[optimizer]} {optimizer})" + (f" / N_d={n}" if so > 1 else "")),
    }


# ---------------------------------------------------------------- activations (Korthikanti)
def activation_bytes_per_layer(m: Model, batch: int, seq: int, precision: str = "bf16_mixed",
                               recompute: str = "none", attention: str = "materialized",
                               repeat_kv: bool = False) -> tuple[int, str]:
    """Bytes one block saves for backward, and the formula, after Korthikanti et al. 2022 §4.1.

    For 16-bit activations, ffn = 4h, kv heads = heads, dropout and materialized scores this is
    the paper's s·b·h·(34 + 5·a·s/h): LayerNorm inputs 4sbh, QKV input 2sbh, Q and K 4sbh,
    V 2sbh, softmax output 2as²b, its dropout mask as²b and output 2as²b, projection input
    2sbh and mask sbh, fc input 2sbh, GELU input 8sbh, out input 8sbh, mask sbh. Written term
    by term here for e-byte activations (r for the residual stream, fp32 under autocast),
    ffn f, kv width h_kv and SwiGLU (3 ffn-wide tensors). ``flash`` keeps a fp32 logsumexp
    (4·a·s·b) instead of the s² terms; ``repeat_kv`` (GQA with K, V copied to all heads before
    attention, as TinyGPT and HF Llama do) saves k, v at width h. Selective recomputation drops
    the attention core (s² terms) → 34sbh; full recomputation keeps only the block input, r·sbh
    (2sbh in 16 bits).
    """
    for name, v in (("batch", batch), ("seq", seq)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} = {v!r}; expected an int >= 1 (a batch or sequence of 0 holds no activations)")
    for name, v, choices in (("precision", precision, PRECISIONS), ("recompute", recompute, RECOMPUTE),
                             ("attention", attention, ATTENTION)):
        if v not in choices:
            raise ValueError(f"{name} = {v!r}; expected one of {sorted(choices)}")
    p = PRECISIONS[precision]
    e, r = p["e"], p["r"]
    s, b, h, a, f = seq, batch, m.hidden, m.n_head, m.ffn
    kv = h if repeat_kv else m.kv_dim
    sbh = s * b * h
    if recompute == "full":
        return r * sbh, f"{r}·sbh (block input only)"
    mask = 1 if m.dropout else 0
    mlp_w = 3 if m.mlp == "swiglu" else 2
    linear = (2 * r + 4 * e + 2 * mask) * sbh + 2 * e * s * b * kv + mlp_w * e * s * b * f
    lin_txt = (f"sbh·({2 * r} norms + {e} qkv-in + {e} q + {e} proj-in + {e} fc-in"
               + (f" + {2 * mask} dropout masks" if mask else "") + f") + {2 * e}·sb·h_kv (k, v)"
               + f" + {mlp_w * e}·sb·f (mlp)")
    if recompute == "selective":
        return linear, lin_txt + " (attention core recomputed)"
    if attention == "flash":
        core, core_txt = 4 * a * s * b, "4·a·s·b (fp32 logsumexp)"
    else:
        core = (e + (1 + e) * mask) * a * s * s * b
        core_txt = f"{e + (1 + e) * mask}·a·s²·b (scores" + (", mask, dropout out)" if mask else ")")
    return linear + core, lin_txt + " + " + core_txt


def activation_bytes(m: Model, t: Training) -> tuple[int, str]:
    """Saved-for-backward bytes of the whole model: L blocks (full recomputation adds one
    block recomputed during backward), plus Korthikanti §4.3's outer terms: final norm input
    r·sbh, head input e·sbh, the fp32 cross-entropy logits 4·sbv and, with dropout, the
    embedding dropout mask sbh."""
    p = PRECISIONS[t.precision]
    per, txt = activation_bytes_per_layer(m, t.batch, t.seq, t.precision, t.recompute, t.attention, t.repeat_kv)
    sbh, sbv = t.seq * t.batch * m.hidden, t.seq * t.batch * m.vocab
    outer = p["r"] * sbh + p["e"] * sbh + 4 * sbv + (sbh if m.dropout else 0)
    total = m.n_layer * per + outer
    formula = f"L·[{txt}] + {p['r'] + p['e'] + (1 if m.dropout else 0)}·sbh + 4·sbv"
    if t.recompute == "full":
        one, _ = activation_bytes_per_layer(m, t.batch, t.seq, t.precision, "none", t.attention, t.repeat_kv)
        total += one
        formula += " + one block recomputed in backward"
    return total, formula


def kv_cache_bytes(n_layer: int, batch: int, context: int, n_kv_head: int, head_dim: int,
                   dtype_bytes: int) -> int:
    """2 (K and V) · layers · batch · context · kv heads · head dim · bytes per element."""
    for n, v in (("n_layer", n_layer), ("batch", batch), ("context", context), ("n_kv_head", n_kv_head),
                 ("head_dim", head_dim), ("dtype_bytes", dtype_bytes)):
        _check_int("kv_cache_bytes", n, v)
    return 2 * n_layer * batch * context * n_kv_head * head_dim * dtype_bytes


# ---------------------------------------------------------------- predictions
def _largest_tensor(m: Model) -> int:
    return max(m.vocab * m.hidden, m.ffn * m.hidden, m.hidden * m.hidden, 2 * m.kv_dim * m.hidden)


def _temporary(m: Model, t: Training, psi: int) -> tuple[int, str]:
    """Largest transient: the loss gradient, the optimizer's scratch, or ZeRO-3's gathered layer."""
    p = PRECISIONS[t.precision]
    cands = {"loss backward": (8 * t.batch * t.seq * m.vocab, "2·4·sbv, fp32 grads of nll_loss and log_softmax")}
    if t.optimizer in ("adam", "adamw"):
        shard = psi / (t.dp if t.zero_stage >= 1 else 1)
        if t.optimizer_impl == "foreach":
            cands["Adam foreach"] = (round(4 * shard), "4Ψ_shard, one fp32 sqrt(v) list")
        elif t.optimizer_impl == "forloop":
            cands["Adam for-loop"] = (8 * _largest_tensor(m), "2·4·largest tensor, sqrt(v) and its quotient")
    if t.zero_stage == 3 and t.dp > 1:
        cands["ZeRO-3 gather"] = (2 * layer_params(m) * p["w"], "2 gathered layers, current + prefetch")
    best = max(cands, key=lambda k: cands[k][0])
    return cands[best][0], "largest of " + "; ".join(f"{k} ({d})" for k, (_, d) in cands.items()) + f" → {best}"


def param_tensors(m: Model) -> list[int]:
    """Element counts of the model's parameter tensors in registration order (TinyGPT's layout: token and
    position embeddings, per block norm 1, q, k and v, output projection, norm 2, MLP, then the final norm and
    the head unless tied); they add up to :func:`param_count`."""
    h, kv, f = m.hidden, m.kv_dim, m.ffn
    norm = [h, h] if m.norm == "layernorm" else [h]
    attn = [h * h, 2 * h * kv] + ([h, 2 * kv] if m.attn_bias else []) + [h * h] + ([h] if m.attn_bias else [])
    if m.mlp == "swiglu":
        mlp = [h * f, h * f, f * h] + ([f, f, h] if m.mlp_bias else [])
    else:
        mlp = [h * f] + ([f] if m.mlp_bias else []) + [f * h] + ([h] if m.mlp_bias else [])
    block = norm + attn + norm + mlp
    head = [] if m.tied else [m.vocab * h]
    return [m.vocab * h] + ([m.n_positions * h] if m.n_positions else []) + block * m.n_layer + norm + head


def bucket_term(t: Training, psi: int, m: Model | None = None) -> tuple[int, str]:
    """The communication-bucket term for ``psi`` parameters under ``t``: ``(bytes, formula)``. DDP copies
    every gradient into flat buckets unless ``grad_as_bucket_view``; ZeRO keeps two constant buffers. The
    number of buckets comes from the one bucket rule (:func:`infralens_lab.analysis.buckets.bucket_plan`: whole
    tensors, gradient-ready order taken as reverse registration, 1 MiB first bucket only with the default cap)
    on ``m``'s tensors (:func:`param_tensors`); without ``m`` the formula gives no count."""
    g = PRECISIONS[t.precision]["g"] * psi
    if t.dp == 1:
        return 0, "dp=1: no gradient all-reduce"
    if t.zero_stage == 0:
        gb = PRECISIONS[t.precision]["g"]
        n = f"{bucket_count([gb * x for x in reversed(param_tensors(m))], t.bucket_mb)} buckets" if m else "buckets"
        if t.grad_as_bucket_view:
            return 0, f"gradient_as_bucket_view: grads live in the {n}, no copy"
        return g, f"DDP flat buckets copy every gradient: {gb}Ψ in {n} ({rule_text(t.bucket_mb)})"
    cap = bucket_caps(t.bucket_mb)[1]
    return min(2 * cap, 2 * g), f"2 constant-size buffers of {cap / MiB:g} MiB (reduce-scatter, all-gather)"


def predict_training(model: Model, training: Training) -> pd.DataFrame:
    """Predicted bytes per rank for one training step: one row per category with its formula
    and source. ``df.attrs['notes']`` holds remarks (e.g. ZeRO with dp=1 has no effect). The
    rows are not simultaneous (activations shrink as gradients appear), so their sum
    (:func:`total`) is an upper bound on the peak."""
    if not isinstance(model, Model) or not isinstance(training, Training):
        raise TypeError(f"predict_training(model, training) got {type(model).__name__}, "
                        f"{type(training).__name__}; expected Model, Training")
    m, t = model, training
    if m.n_positions and t.seq > m.n_positions:
        raise ValueError(f"Training.seq = {t.seq} exceeds the model's n_positions = {m.n_positions}")
    psi = param_count(m)
    states = model_states(psi, t.precision, t.optimizer, t.dp, t.zero_stage, matmul_weight_params(m))
    act, act_f = activation_bytes(m, t)
    tmp, tmp_f = _temporary(m, t, psi)
    bkt, bkt_f = bucket_term(t, psi, m)
    rows = [(c, *states[c], ZERO) for c in ("weights", "gradients", "optimizer states")]
    rows += [("activations", act, act_f, KORTH + " (generalised here)"),
             ("temporary buffers", tmp, tmp_f, "estimate from torch.optim.adam and F.cross_entropy"),
             ("communication buckets", bkt, bkt_f, "torch DDP (bucket_cap_mb=25, gradient_as_bucket_view); "
                                                    "ZeRO-R constant-size buffers (ZeRO §6)"),
             ("KV cache", 0, "no KV cache in training", "—")]
    df = pd.DataFrame(rows, columns=["category", "bytes", "formula", "source"])
    df.attrs["notes"] = []
    if t.zero_stage > 0 and t.dp == 1:
        df.attrs["notes"].append(f"zero_stage={t.zero_stage} with dp=1 has no effect: one rank holds the "
                                 f"only shard")
    df.attrs["params"] = psi
    return df


def predict_inference(model: Model, inference: Inference) -> pd.DataFrame:
    """Predicted bytes for generation: weights (Ψ·bytes), the KV cache (exact formula), and
    the activations of a prefill of ``prompt`` tokens: the largest set of tensors an eager
    PyTorch forward holds at once, e·b·t·max(5h + 2h_kv, 2h + mlp, 2h + v) with mlp = 2f
    (GELU) or 3f (SwiGLU), +2h with ``repeat_kv`` under GQA; no s² scores (SDPA)."""
    if not isinstance(model, Model) or not isinstance(inference, Inference):
        raise TypeError(f"predict_inference(model, inference) got {type(model).__name__}, "
                        f"{type(inference).__name__}; expected Model, Inference")
    m, i = model, inference
    e = DTYPE_BYTES[i.dtype]
    tok = i.prompt or i.context
    h, kv = m.hidden, m.kv_dim
    attn = 5 * h + 2 * kv + (2 * h if i.repeat_kv and m.n_kv_head < m.n_head else 0)
    mlp = 2 * h + (3 if m.mlp == "swiglu" else 2) * m.ffn
    head = 2 * h + m.vocab
    psi = param_count(m)
    rows = [("weights", psi * e, f"Ψ·{e} ({i.dtype})", "parameter count × bytes"),
            ("KV cache", kv_cache_bytes(m.n_layer, i.batch, i.context, m.n_kv_head, m.head_dim, e),
             f"2·L·b·ctx·kv_heads·head_dim·{e}", "K and V per layer per token"),
            ("activations", e * i.batch * tok * max(attn, mlp, head),
             f"{e}·b·t·max(attention {attn}, mlp {mlp}, head {head}), t={tok}",
             "estimate: eager forward working set (this package)")]
    df = pd.DataFrame(rows, columns=["category", "bytes", "formula", "source"])
    df.attrs["notes"], df.attrs["params"] = [], psi
    return df


def predict(model: Model, setup: Training | Inference) -> pd.DataFrame:
    """:func:`predict_training` or :func:`predict_inference`, by the type of ``setup``."""
    if isinstance(setup, Inference):
        return predict_inference(model, setup)
    return predict_training(model, setup)


def total(df: pd.DataFrame) -> int:
    """Sum of the category rows (a ``total`` row, if present, is left out)."""
    return int(df.loc[df["category"] != "total", "bytes"].sum())


def with_total(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` plus a ``total`` row (sum of the categories)."""
    out = pd.concat([df, pd.DataFrame([{"category": "total", "bytes": total(df), "formula": "sum",
                                        "source": ""}])], ignore_index=True)
    out.attrs = dict(df.attrs)
    return out


def dominant(df: pd.DataFrame) -> str:
    """Name of the category holding the most bytes."""
    rows = df[df["category"] != "total"]
    if rows.empty:
        raise ValueError("dominant() got a ledger with no category rows; expected predict_* output")
    return str(rows.loc[rows["bytes"].idxmax(), "category"])


def scaling_table(models=("gpt2-125m", "gpt2-350m", "gpt2-1.5b", "llama2-7b", "llama2-13b", "llama2-70b"),
                  seqs=(2048,), batches=(1,), zero_stages=(0, 3), dp: int = 8,
                  precision: str = "bf16_mixed", optimizer: str = "adamw", recompute: str = "none",
                  attention: str = "materialized") -> pd.DataFrame:
    """One row per (model, seq, batch, zero_stage): bytes per category per rank, the total and
    the dominant term. ``models`` are preset names or :class:`Model` objects; a GPT-2 asked
    for more than its 1024 positions gets a longer position table (its count grows a little)."""
    rows = []
    for mod, s, b, z in itertools.product(models, seqs, batches, zero_stages):
        m = Model.preset(mod) if isinstance(mod, str) else mod
        t = Training(b, s, precision, optimizer, dp, z, recompute, attention=attention)
        df = predict_training(_fit(m, s), t)
        row = {"model": m.name, "params": df.attrs["params"], "seq": s, "batch": b, "zero_stage": z, "dp": dp}
        row.update(dict(zip(df["category"], df["bytes"], strict=True)))
        row["total"], row["dominant"] = total(df), dominant(df)
        rows.append(row)
    return pd.DataFrame(rows)


def _fit(m: Model, seq: int) -> Model:
    """A learned-position model asked for a longer sequence: same shape, n_positions = seq."""
    if m.n_positions and seq > m.n_positions:
        return Model(**{**asdict(m), "n_positions": seq})
    return m


def predict_for(meta: dict) -> pd.DataFrame:
    """The prediction matching a measurement's ``meta`` (``df.attrs['meta']`` of
    :mod:`infralens_lab.measure.memory`, or the recorded evidence's values): TinyGPT's shape,
    SDPA (flash-style) attention, the PyTorch optimizer code path that ran."""
    m = Model.from_gpt_config(meta["config"])
    if meta["kind"] == "infer":
        return predict_inference(m, Inference(meta["batch"], meta["context"], meta["dtype"], meta["prompt"],
                                              repeat_kv=True))
    return predict_training(m, Training(meta["batch"], meta["seq"], meta["precision"], meta["optimizer"],
                                        attention="flash", optimizer_impl=meta["optimizer_impl"],
                                        repeat_kv=m.n_kv_head < m.n_head))
