"""The tuned flash-attention forward, ``attn_fwd_fast``: same algorithm, Hopper-friendly code.

What it changes against the teaching kernel ``attn_fwd`` (:mod:`.attention`), each for speed:

* **Tensor descriptors** (TMA on Hopper): Q, K, V, O are addressed as 2-D (B*H*N, D) views;
  the hardware copy engine moves whole tiles HBM -> SRAM without spending registers on
  addresses. Rows past one head's end belong to the next head, so the kernel masks those
  keys and stores a ragged last query block with an ordinary masked store.
* **Software pipelining** (``num_stages``): the K/V tiles of the next iterations are already
  in flight while the tensor cores work on this one.
* **exp2 with log2(e) folded into the scale**: ``exp(x*s) == exp2(x * s*log2(e))``, one
  multiply-add and a native ``ex2`` per score instead of a multiply, a subtract and ``exp``.
* **Causal split in two stages**: the off-band tiles (entirely below the diagonal) run a loop
  with no mask at all; only the BLOCK_M/BLOCK_N on-band tiles pay for the mask.
* **Autotuned** tile sizes, warps and stages per (N, D, causal, dtype). In interpreter mode
  the autotuner means nothing, so one fixed config runs instead.

Inputs as for :func:`.attention.attention_tiled`, except q, k, v must be contiguous with a
16-byte-aligned start (what TMA needs); anything else is refused with a ValueError.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ..device import is_gpu
from ._validate import check_out, check_qkv

LOG2E = math.log2(math.e)  # 1.4426950408889634


@triton.jit
def _fast_inner(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, lo, hi, offs_m, N_CTX, qk_scale,
                BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, KEY_MASK: tl.constexpr):
    # Stream the K/V tiles with keys [lo, hi) past the Q tile held on chip.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([kv_row0 + start_n, 0])  # TMA: HBM -> SRAM, BLOCK_N x D
        qk = tl.dot(q, k.T)  # raw scores, float32 registers
        if CAUSAL_MASK or KEY_MASK:
            cols = start_n + offs_n
            keep = cols[None, :] < N_CTX
            if CAUSAL_MASK:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        else:
            # No mask: fold the scale into the max and into one fused multiply-add.
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)  # base-2 exponent; log2(e) is already inside qk_scale
        alpha = tl.math.exp2(m_i - m_ij)  # rescale factor for what was accumulated so far
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([kv_row0 + start_n, 0])  # TMA: HBM -> SRAM, BLOCK_N x D
        acc = tl.dot(p.to(q.dtype), v, acc)  # P stays in registers; float32 accumulate
        l_i = l_i * alpha + l_ij
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attn_fwd_fast(desc_q, desc_k, desc_v, desc_o, o_ptr, N_CTX, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    row0 = off_bh * N_CTX  # first row of this (batch, head) in the (B*H*N, D) views
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (log2 units)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # output accumulator, registers
    q = desc_q.load([row0 + start_m * BLOCK_M, 0])  # Q tile: HBM -> SRAM once, reused throughout

    if CAUSAL:
        # Stage 1, off-band: keys [0, start_m*BLOCK_M) are below the diagonal for every row of
        # this block, so no mask (and all of them are < N_CTX).
        acc, l_i, m_i = _fast_inner(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, start_m * BLOCK_M, offs_m,
                                    N_CTX, qk_scale, BLOCK_N, False, False)
        # Stage 2, on-band: the BLOCK_M keys on the diagonal, masked (BLOCK_M % BLOCK_N == 0).
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
        acc, l_i, m_i = _fast_inner(acc, l_i, m_i, q, desc_k, desc_v, row0, start_m * BLOCK_M, hi, offs_m,
                                    N_CTX, qk_scale, BLOCK_N, True, not EVEN_N)
    else:
        if EVEN_N:
            acc, l_i, m_i = _fast_inner(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, N_CTX, offs_m,
                                        N_CTX, qk_scale, BLOCK_N, False, False)
        else:
            n_full = (N_CTX // BLOCK_N) * BLOCK_N
            acc, l_i, m_i = _fast_inner(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, n_full, offs_m,
                                        N_CTX, qk_scale, BLOCK_N, False, False)
            # The ragged last K/V tile: keys >= N_CTX belong to the next head; mask them.
            acc, l_i, m_i = _fast_inner(acc, l_i, m_i, q, desc_k, desc_v, row0, n_full, N_CTX, offs_m,
                                        N_CTX, qk_scale, BLOCK_N, False, True)

    acc = acc / l_i[:, None]
    o = acc.to(desc_o.dtype)
    if EVEN_M:
        desc_o.store([row0 + start_m * BLOCK_M, 0], o)  # registers -> SRAM -> HBM by TMA
    else:
        # A ragged last query block must not spill into the next head's rows.
        offs_d = tl.arange(0, HEAD_DIM)
        rows = (row0 + offs_m).to(tl.int64)
        tl.store(o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], o, mask=offs_m[:, None] < N_CTX)


def _set_block_shapes(nargs):
    """Autotuner pre-hook: a descriptor's block shape must match the config's tile sizes."""
    bm, bn, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
    nargs["desc_q"].block_shape = [bm, d]
    nargs["desc_o"].block_shape = [bm, d]
    nargs["desc_k"].block_shape = [bn, d]
    nargs["desc_v"].block_shape = [bn, d]


class Cand(NamedTuple):
    """One autotuner candidate. ``maxnreg`` caps registers per thread (None: no cap)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    maxnreg: int | None = None


# Candidates per head-dim group: the best few of the configs timed on an H200
# (docs/kernels_notes.md). Cand(128, 64, 8, 2, 128) caps registers at 128 so that two
# programs fit on one SM (registers and shared memory), letting one program's softmax
# overlap the other's matmuls; it won at N = 16384.
GPU_CANDIDATES = {
    "small_d": [Cand(128, 128, 4, 3), Cand(128, 64, 8, 3), Cand(128, 64, 4, 4), Cand(64, 64, 4, 3)],
    "d128": [Cand(128, 128, 8, 3), Cand(128, 128, 8, 2), Cand(128, 64, 8, 2, 128), Cand(64, 64, 4, 3)],
    "short": [Cand(64, 64, 4, 2)],  # N < 256: one config, nothing worth tuning
}
INTERPRETER_CONFIG = Cand(32, 16, 4, 1)  # BLOCK_M != BLOCK_N exercises the on-band sub-tiles


def _config(c: Cand) -> triton.Config:
    return triton.Config({"BLOCK_M": c.block_m, "BLOCK_N": c.block_n}, num_warps=c.num_warps,
                         num_stages=c.num_stages, maxnreg=c.maxnreg, pre_hook=_set_block_shapes)


def _cand_of(c: triton.Config) -> Cand:
    return Cand(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages, c.maxnreg)


_ALL = sorted({c for cs in GPU_CANDIDATES.values() for c in cs}, key=lambda c: (*c[:4], c.maxnreg or 0))
CONFIGS = [_config(c) for c in _ALL]


def _prune(configs, named_args, **kwargs):
    """Keep the candidates for this head dim and length; causal needs BLOCK_M % BLOCK_N == 0."""
    args = {**named_args, **kwargs}
    n, d, causal = args["N_CTX"], args["HEAD_DIM"], args["CAUSAL"]
    group = "short" if n < 256 else ("d128" if d >= 128 else "small_d")
    wanted = set(GPU_CANDIDATES[group])
    keep = [c for c in configs if _cand_of(c) in wanted
            and (not causal or c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"] == 0)]
    return keep or configs[:1]


_with_flags = triton.heuristics({
    "EVEN_M": lambda a: a["N_CTX"] % a["BLOCK_M"] == 0,
    "EVEN_N": lambda a: a["N_CTX"] % a["BLOCK_N"] == 0,
})(attn_fwd_fast)
_tuned = triton.autotune(CONFIGS, key=["N_CTX", "HEAD_DIM", "CAUSAL"],
                         prune_configs_by={"early_config_prune": _prune})(_with_flags)


def attention_tiled_fast(q, k, v, causal: bool = False, sm_scale: float | None = None,
                         out: torch.Tensor | None = None, config: tuple | None = None) -> torch.Tensor:
    """Tuned flash attention (``attn_fwd_fast``); returns O (B, H, N, D) in q's dtype.

    ``config`` = a :class:`Cand` or ``(BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg])``
    skips the autotuner (tests, experiments); by default the GPU autotunes over
    GPU_CANDIDATES and the interpreter runs INTERPRETER_CONFIG. Same HBM traffic model as
    ``attention_tiled`` with the chosen BLOCK_M (see :func:`last_config`).
    """
    what = "attention_tiled_fast"
    B, H, N, D, scale = check_qkv(q, k, v, causal, sm_scale, what)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise ValueError(f"{what}: {name} has strides {tuple(t.stride())}, expected a contiguous tensor "
                             f"(tensor descriptors need it; call .contiguous() or use attention_tiled)")
        if t.data_ptr() % 16:
            raise ValueError(f"{what}: {name} starts at address {t.data_ptr():#x}, expected a 16-byte-aligned "
                             f"start (TMA); call .clone()")
    if out is None:
        out = torch.empty_like(q)
    else:
        check_out(out, tuple(q.shape), q.dtype, q.device, what)
    if config is not None:
        config = Cand(*config)
        if causal and config.block_m % config.block_n:
            raise ValueError(f"{what}: config {tuple(config)} has BLOCK_M % BLOCK_N != 0, which causal needs")
    elif not is_gpu():
        config = INTERPRETER_CONFIG
    rows = B * H * N

    def desc(t, block_rows):
        return TensorDescriptor(t, shape=[rows, D], strides=[D, 1], block_shape=[block_rows, D])

    bm0, bn0 = (config.block_m, config.block_n) if config else (64, 64)  # the tuner's pre-hook resets these
    dq, dk, dv, do = desc(q, bm0), desc(k, bn0), desc(v, bn0), desc(out, bm0)
    args = (dq, dk, dv, do, out, N, scale * LOG2E)
    if config is not None:
        grid = (triton.cdiv(N, config.block_m), B * H)
        extra = {} if config.maxnreg is None else {"maxnreg": config.maxnreg}
        _with_flags[grid](*args, HEAD_DIM=D, CAUSAL=causal, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                          num_warps=config.num_warps, num_stages=config.num_stages, **extra)
    else:
        def grid(meta):
            return (triton.cdiv(N, meta["BLOCK_M"]), B * H)

        _tuned[grid](*args, HEAD_DIM=D, CAUSAL=causal)
    return out


def last_config() -> dict | None:
    """The candidate the autotuner picked last, as a dict of :class:`Cand` fields, if any."""
    c = getattr(_tuned, "best_config", None)
    return None if c is None else _cand_of(c)._asdict()


def _name(c: Cand) -> str:
    return f"BM{c.block_m}-BN{c.block_n}-w{c.num_warps}-s{c.num_stages}" + (f"-r{c.maxnreg}" if c.maxnreg else "")


def tuning_timings() -> dict[str, float]:
    """Median ms of every config the autotuner timed for its latest key (empty if none)."""
    out = {}
    for c, t in (getattr(_tuned, "configs_timings", None) or {}).items():
        out[_name(_cand_of(c))] = float(t[0] if isinstance(t, (list, tuple)) else t)
    return out
