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
* **Two half tiles per program**: a program owns BLOCK_M query rows as two halves with a
  running max, sum and accumulator each, and orders its loop body QK^T(half 0), QK^T(half 1),
  softmax(half 0), P V(half 0), softmax(half 1), P V(half 1). A P V product only adds into a
  loop-carried accumulator, so Triton 3.6 issues it asynchronously (``wgmma`` without an
  immediate wait), and half 1's softmax runs on the CUDA cores while half 0's P V runs on the
  tensor cores. A QK^T result is waited for at once, so with one tile per program nothing
  overlaps inside the program; this is the overlap FlashAttention-3 gets from warp
  specialization, which Triton 3.6 offers on Hopper only under conditions (the ``ws`` switch
  below; docs/kernels_notes.md, runs 4 and 9).
* **Causal split in two stages**: the off-band tiles (entirely below the diagonal) run a loop
  with no mask at all; only the BLOCK_M/BLOCK_N on-band tiles pay for the mask.
* **Causal, heaviest block first**: within a head, the programs take the query blocks from the
  last (which reads every key) to the first (docs/kernels_notes.md, run 8).
* **Warp specialization, behind a switch** (``Cand.ws``; no autotuner candidate uses it,
  docs/kernels_notes.md run 9): the K/V loop becomes ``tl.range(...,
  warp_specialize=True)`` over on-device descriptors (``tl.make_tensor_descriptor``, one per head,
  so TMA itself zero-fills reads and clips stores past N). Triton 3.6 then splits the program on
  Hopper into a producer warpgroup that only issues the TMA loads and two consumer warpgroups that
  each compute 64 rows of both halves, with ``setmaxnreg`` moving registers from the producer to
  the consumers. It needs 4 warps (with 8 the compiler ignores it) and BLOCK_M = 256 (with halves
  of 64 rows both consumers would compute the same rows), and one K/V loop per kernel: causal
  and ragged-N kernels then run their masks on every tile instead of a separate masked stage.
  Measured on an H100 (run 9): correct only with ``num_stages = 2`` and not causal (with 3 stages
  the outputs held NaN, causal outputs were wrong), and no faster than the default path, so the
  wrapper refuses the rest and no autotuner candidate uses it.
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
from . import arch
from ._validate import check_qkv, check_tma_operands, out_or_new

LOG2E = math.log2(math.e)  # 1.4426950408889634


@triton.jit
def _online_softmax(qk, m_i, l_i, acc, offs_m, cols, N_CTX, qk_scale,
                    CAUSAL_MASK: tl.constexpr, KEY_MASK: tl.constexpr):
    # One half tile's online-softmax update: scores (float32 registers) -> probabilities P,
    # new running max and sum, accumulator rescaled to the new max.
    if CAUSAL_MASK or KEY_MASK:
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
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    return p, m_ij, l_i, acc


@triton.jit
def _fast_inner(acc0, l0, m0, acc1, l1, m1, q0, q1, desc_k, desc_v, kv_row0, lo, hi, offs_m0, offs_m1,
                N_CTX, qk_scale, BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, KEY_MASK: tl.constexpr,
                WS: tl.constexpr):
    # Stream the K/V tiles with keys [lo, hi) past the two half Q tiles held on chip. The order
    # of the statements is the optimisation: both QK^T products first, then half 0's softmax
    # and P V, then half 1's softmax. A P V product only adds into a loop-carried accumulator,
    # so Triton leaves it running asynchronously on the tensor cores, and half 1's softmax
    # (exp2 on the CUDA cores) runs while half 0's P V is still being computed. WS: the compiler
    # moves the loads to a producer warpgroup and splits the rows between two consumer warpgroups.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k = desc_k.load([kv_row0 + start_n, 0])  # TMA: HBM -> SRAM, BLOCK_N x D, shared by both halves
        qk0 = tl.dot(q0, k.T)  # raw scores of half 0, float32 registers
        qk1 = tl.dot(q1, k.T)
        p0, m0, l0, acc0 = _online_softmax(qk0, m0, l0, acc0, offs_m0, cols, N_CTX, qk_scale,
                                           CAUSAL_MASK, KEY_MASK)
        v = desc_v.load([kv_row0 + start_n, 0])  # TMA: HBM -> SRAM, BLOCK_N x D
        acc0 = tl.dot(p0.to(q0.dtype), v, acc0)  # P stays in registers; float32 accumulate; async
        p1, m1, l1, acc1 = _online_softmax(qk1, m1, l1, acc1, offs_m1, cols, N_CTX, qk_scale,
                                           CAUSAL_MASK, KEY_MASK)
        acc1 = tl.dot(p1.to(q0.dtype), v, acc1)
    return acc0, l0, m0, acc1, l1, m1


@triton.jit
def _store_half(desc_o, o_ptr, acc, l_i, row0, first, offs_m, N_CTX, HEAD_DIM: tl.constexpr,
                EVEN_M: tl.constexpr):
    # Rows offs_m (the first is `first`) of this head's output: O = acc / l.
    o = (acc / l_i[:, None]).to(desc_o.dtype)
    if EVEN_M:
        desc_o.store([row0 + first, 0], o)  # registers -> SRAM -> HBM by TMA
    else:
        # A ragged last query block must not spill into the next head's rows.
        offs_d = tl.arange(0, HEAD_DIM)
        rows = (row0 + offs_m).to(tl.int64)
        tl.store(o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], o, mask=offs_m[:, None] < N_CTX)


@triton.jit
def _head_desc(ptr, N_CTX, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr):
    # An on-device TMA descriptor over one head's (N, D) rows from ptr, ROWS rows a block.
    return tl.make_tensor_descriptor(ptr, [N_CTX, HEAD_DIM], [HEAD_DIM, 1], [ROWS, HEAD_DIM])


@triton.jit
def attn_fwd_fast(desc_q, desc_k, desc_v, desc_o, q_ptr, k_ptr, v_ptr, o_ptr, N_CTX, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, WS: tl.constexpr):
    # One program: BLOCK_M query rows of one (batch, head), kept as two halves of BLOCK_M // 2
    # rows with a running max, sum and accumulator each.
    HALF: tl.constexpr = BLOCK_M // 2
    start_m = tl.program_id(0)
    if CAUSAL:
        # Heaviest first: program 0 of a head takes its last query block (all keys), so the light
        # blocks near the diagonal, not the heavy ones, are what is left for the grid's last wave.
        start_m = tl.num_programs(0) - 1 - start_m
    off_bh = tl.program_id(1)
    if WS:
        # On-device descriptors over this head's (N, D) rows only (Triton 3.6 warp-specializes on
        # Hopper with these, not with the host-side ones): TMA zero-fills rows >= N on load and
        # drops them on store.
        head = off_bh.to(tl.int64) * N_CTX * HEAD_DIM
        d_q = _head_desc(q_ptr + head, N_CTX, HEAD_DIM, HALF)
        d_k = _head_desc(k_ptr + head, N_CTX, HEAD_DIM, BLOCK_N)
        d_v = _head_desc(v_ptr + head, N_CTX, HEAD_DIM, BLOCK_N)
        d_o = _head_desc(o_ptr + head, N_CTX, HEAD_DIM, HALF)
        row0 = 0
    else:
        d_q, d_k, d_v, d_o = desc_q, desc_k, desc_v, desc_o  # host-side, over all heads' (B*H*N, D) rows
        row0 = off_bh * N_CTX  # first row of this (batch, head) in the (B*H*N, D) views
    offs_m0 = start_m * BLOCK_M + tl.arange(0, HALF)
    offs_m1 = offs_m0 + HALF

    m0 = tl.full([HALF], float("-inf"), dtype=tl.float32)  # running max (log2 units)
    m1 = tl.full([HALF], float("-inf"), dtype=tl.float32)
    l0 = tl.zeros([HALF], dtype=tl.float32)  # running sum of exp2
    l1 = tl.zeros([HALF], dtype=tl.float32)
    acc0 = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)  # output accumulators, registers
    acc1 = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    q0 = d_q.load([row0 + start_m * BLOCK_M, 0])  # Q tiles: HBM -> SRAM once, reused throughout
    q1 = d_q.load([row0 + start_m * BLOCK_M + HALF, 0])

    if WS:
        # Triton 3.6 warp-specializes a kernel with one K/V loop only (a second loop, the on-band stage
        # or the ragged last tile, makes its Hopper pass fail): so one loop, each mask on every tile.
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX) if CAUSAL else N_CTX
        acc0, l0, m0, acc1, l1, m1 = _fast_inner(acc0, l0, m0, acc1, l1, m1, q0, q1, d_k, d_v, row0,
                                                 0, hi, offs_m0, offs_m1, N_CTX, qk_scale,
                                                 BLOCK_N, CAUSAL, not EVEN_N, True)
    elif CAUSAL:
        # Stage 1, off-band: keys [0, start_m*BLOCK_M) are below the diagonal for every row of
        # this block, so no mask (and all of them are < N_CTX).
        acc0, l0, m0, acc1, l1, m1 = _fast_inner(acc0, l0, m0, acc1, l1, m1, q0, q1, d_k, d_v, row0,
                                                 0, start_m * BLOCK_M, offs_m0, offs_m1, N_CTX, qk_scale,
                                                 BLOCK_N, False, False, False)
        # Stage 2, on-band: the BLOCK_M keys on the diagonal, masked (BLOCK_M % BLOCK_N == 0).
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
        acc0, l0, m0, acc1, l1, m1 = _fast_inner(acc0, l0, m0, acc1, l1, m1, q0, q1, d_k, d_v, row0,
                                                 start_m * BLOCK_M, hi, offs_m0, offs_m1, N_CTX, qk_scale,
                                                 BLOCK_N, True, not EVEN_N, False)
    else:
        n_full = N_CTX if EVEN_N else (N_CTX // BLOCK_N) * BLOCK_N
        acc0, l0, m0, acc1, l1, m1 = _fast_inner(acc0, l0, m0, acc1, l1, m1, q0, q1, d_k, d_v, row0,
                                                 0, n_full, offs_m0, offs_m1, N_CTX, qk_scale,
                                                 BLOCK_N, False, False, False)
        if not EVEN_N:
            # The ragged last K/V tile: keys >= N_CTX are the next head's rows; mask them.
            acc0, l0, m0, acc1, l1, m1 = _fast_inner(acc0, l0, m0, acc1, l1, m1, q0, q1, d_k, d_v, row0,
                                                     n_full, N_CTX, offs_m0, offs_m1, N_CTX, qk_scale,
                                                     BLOCK_N, False, True, False)

    # With WS the per-head descriptor clips a ragged last block itself.
    _store_half(d_o, o_ptr, acc0, l0, row0, start_m * BLOCK_M, offs_m0, N_CTX, HEAD_DIM, EVEN_M or WS)
    _store_half(d_o, o_ptr, acc1, l1, row0, start_m * BLOCK_M + HALF, offs_m1, N_CTX, HEAD_DIM, EVEN_M or WS)


def _set_block_shapes(nargs):
    """Autotuner pre-hook: a descriptor's block shape must match the config's tile sizes."""
    bm, bn, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
    nargs["desc_q"].block_shape = [bm // 2, d]  # Q and O move in half tiles
    nargs["desc_o"].block_shape = [bm // 2, d]
    nargs["desc_k"].block_shape = [bn, d]
    nargs["desc_v"].block_shape = [bn, d]


class Cand(NamedTuple):
    """One autotuner candidate: ``block_m`` query rows per program (two halves of block_m // 2),
    ``block_n`` keys per K/V tile. ``maxnreg`` caps registers per thread (None: no cap). ``ws``:
    warp-specialized K/V loop over on-device descriptors (num_warps 4, block_m 256; with it
    ``num_stages`` is the number of K/V buffers between producer and consumers)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    maxnreg: int | None = None
    ws: bool = False


# Candidates per head-dim group: the best of the configs timed on an H100 (docs/kernels_notes.md,
# run 4). With D = 128, BLOCK_N = 128 spills (two 64 x 128 score tiles and two accumulators
# live at once), so only BLOCK_N = 64 remains.
GPU_CANDIDATES = {
    "small_d": [Cand(128, 128, 4, 2), Cand(128, 128, 4, 3), Cand(128, 64, 4, 3), Cand(256, 128, 8, 2)],
    "d128": [Cand(128, 64, 4, 2), Cand(256, 64, 8, 3), Cand(256, 64, 8, 4)],
    "short": [Cand(128, 64, 4, 2)],  # N < 256: one config, nothing worth tuning
}
# Turing (sm_75): Triton 3.6 turns tl.dot into FMAs on the CUDA cores there (kernels.arch.attention_variant), so the
# tuned tiles above are pointless, and at 128 x 128 they took tens of seconds each to compile (tools/
# arch_compile_check.py times it). One small config, chosen to fit 64 KiB of shared memory at D = 128; not timed on
# a T4 (none was lent here).
FMA_CANDIDATES = [Cand(64, 32, 4, 2)]
INTERPRETER_CONFIG = Cand(32, 16, 4, 1)  # halves of 16 rows; BLOCK_M != BLOCK_N exercises the on-band sub-tiles


def _config(c: Cand) -> triton.Config:
    return triton.Config({"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "WS": c.ws}, num_warps=c.num_warps,
                         num_stages=c.num_stages, maxnreg=c.maxnreg, pre_hook=_set_block_shapes)


def _cand_of(c: triton.Config) -> Cand:
    return Cand(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages, c.maxnreg, c.kwargs["WS"])


_ALL = sorted({c for cs in (*GPU_CANDIDATES.values(), FMA_CANDIDATES) for c in cs},
              key=lambda c: (*c[:4], c.maxnreg or 0, c.ws))
CONFIGS = [_config(c) for c in _ALL]


def group_of(n_ctx: int, head_dim: int) -> str:
    """The candidate group for a sequence length and head dim: ``short`` (N < 256), ``d128`` or ``small_d``."""
    return "short" if n_ctx < 256 else ("d128" if head_dim >= 128 else "small_d")


def candidates_for(group: str, cc, head_dim: int, elem_bytes: int, prune: bool = True) -> list[Cand]:
    """The autotuner's candidates for ``group`` (:data:`GPU_CANDIDATES`) on a GPU of compute capability ``cc``:
    :data:`FMA_CANDIDATES` where ``tl.dot`` runs on the CUDA cores (sm_75), and, with ``prune``, only those whose
    shared memory (:func:`~infralens_lab.kernels.arch.shared_estimate`, an upper bound checked against Triton's
    allocation on every architecture by tests/test_arch_compile.py) fits the architecture's limit; a config that
    needs more could not launch there (Triton refuses it with OutOfResources)."""
    if group not in GPU_CANDIDATES:
        raise ValueError(f"candidate group {group!r}; expected one of {sorted(GPU_CANDIDATES)}")
    cands = FMA_CANDIDATES if arch.attention_variant_info(cc).mma == "fma" else GPU_CANDIDATES[group]
    if not prune:
        return list(cands)
    return [c for c in cands if arch.fits_shared(
        arch.shared_estimate(c.block_m, c.block_n, head_dim, c.num_stages, elem_bytes, cc), cc)]


def _prune(configs, named_args, **kwargs):
    """Keep the candidates for this head dim, length and GPU (:func:`candidates_for`: the architecture's
    instruction path and shared memory); causal needs BLOCK_M % BLOCK_N == 0."""
    args = {**named_args, **kwargs}
    n, d, causal, q = args["N_CTX"], args["HEAD_DIM"], args["CAUSAL"], args["q_ptr"]
    try:
        wanted = set(candidates_for(group_of(n, d), _capability(q.device), d, q.element_size()))
    except arch.UnknownArchError:  # a GPU outside kernels.arch.ARCHS: the tuned list, Triton refuses what cannot fit
        wanted = set(GPU_CANDIDATES[group_of(n, d)])
    keep = [c for c in configs if _cand_of(c) in wanted
            and (not causal or c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"] == 0)]
    return keep or configs[:1]


def _capability(dev) -> tuple[int, int]:
    """The compute capability of the GPU ``dev`` (a torch device) as torch reports it."""
    return torch.cuda.get_device_capability(dev)


def live_variant(dev=None) -> tuple[str, str]:
    """:func:`~infralens_lab.kernels.arch.attention_variant` of the GPU in use (``dev``, default the current
    one): the fast kernel's variant there and why; in interpreter mode, the interpreter's and why."""
    if not is_gpu():
        return "interpreter", ("Triton's interpreter on the CPU runs the kernel as numpy, one fixed config "
                               f"({_name(INTERPRETER_CONFIG)}); no tensor cores, no TMA")
    try:
        return arch.attention_variant(_capability(dev if dev is not None else torch.cuda.current_device()))
    except arch.UnknownArchError as e:  # say so instead of stopping a bench on a GPU the table does not know
        return "unknown", str(e)


_with_flags = triton.heuristics({
    "EVEN_M": lambda a: a["N_CTX"] % a["BLOCK_M"] == 0,
    "EVEN_N": lambda a: a["N_CTX"] % a["BLOCK_N"] == 0,
})(attn_fwd_fast)
TUNER_RUNS = 3  # do_bench runs per candidate: tools/tuner_stability.py (docs/kernels_notes.md, run 7)


def _steady_bench(kernel_call, quantiles=None):
    """The autotuner's timing of one candidate: the median of TUNER_RUNS ``do_bench`` medians (Triton's
    default is one), because the D = 128 candidates are within a few percent of each other and one
    run's pick varied between processes."""
    runs = sorted(triton.testing.do_bench(kernel_call, warmup=25, rep=100, return_mode="median")
                  for _ in range(TUNER_RUNS))
    t = runs[len(runs) // 2]
    return [t] * len(quantiles) if quantiles else t


_tuned = triton.autotune(CONFIGS, key=["N_CTX", "HEAD_DIM", "CAUSAL"], do_bench=_steady_bench,
                         prune_configs_by={"early_config_prune": _prune})(_with_flags)


def attention_tiled_fast(q, k, v, causal: bool = False, sm_scale: float | None = None,
                         out: torch.Tensor | None = None, config: tuple | None = None) -> torch.Tensor:
    """Tuned flash attention (``attn_fwd_fast``); returns O (B, H, N, D) in q's dtype.

    ``config`` = a :class:`Cand` or ``(BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg[, ws]])``
    skips the autotuner (tests, experiments); by default the GPU autotunes over
    GPU_CANDIDATES and the interpreter runs INTERPRETER_CONFIG. Same HBM traffic model as
    ``attention_tiled`` with the chosen BLOCK_M (see :func:`last_config`). A ``ws`` config
    builds its descriptors on the device, in scratch memory that Triton asks of the allocator
    this sets (``triton.set_allocator``, torch's caching allocator: 512 bytes per program); it is
    refused unless it has 4 warps, BLOCK_M 256 and 2 stages and is not causal (run 9 of
    docs/kernels_notes.md measured the others wrong).
    """
    what = "attention_tiled_fast"
    *_, scale = check_qkv(q, k, v, causal, sm_scale, what)
    check_tma_operands(what, "tensor descriptors need it; call .contiguous() or use attention_tiled", q=q, k=k, v=v)
    out = out_or_new(out, tuple(q.shape), q.dtype, q.device, what)
    if config is not None:
        config = Cand(*config)
        if config.block_m < 32 or config.block_m & (config.block_m - 1):
            raise ValueError(f"{what}: config {tuple(config)} has BLOCK_M = {config.block_m}, expected a power "
                             f"of two >= 32 (two halves of at least 16 rows, what tl.dot needs)")
        if causal and config.block_m % config.block_n:
            raise ValueError(f"{what}: config {tuple(config)} has BLOCK_M % BLOCK_N != 0, which causal needs")
        _check_ws(config, causal, what)
    elif not is_gpu():
        config = INTERPRETER_CONFIG
    return _launch(q, k, v, causal, scale, out, config)


def _check_ws(config: Cand, causal: bool, what: str) -> None:
    """Refuse a warp-specialized config that cannot split or that was measured wrong (run 9)."""
    if not config.ws:
        return
    if (config.num_warps, config.block_m) != (4, 256):
        raise ValueError(f"{what}: config {tuple(config)} asks for warp specialization with num_warps = "
                         f"{config.num_warps} and BLOCK_M = {config.block_m}, expected 4 and 256 (Triton "
                         f"3.6 ignores it with 8 warps; with 64-row halves both consumer warpgroups "
                         f"would compute the same rows)")
    if config.num_stages != 2:
        raise ValueError(f"{what}: config {tuple(config)} asks for warp specialization with num_stages = "
                         f"{config.num_stages}, expected 2: with 3 stages every warp-specialized kernel "
                         f"returned NaN outputs on an H100 with Triton 3.6, and only 2 was measured correct "
                         f"(docs/kernels_notes.md, run 9)")
    if is_gpu() and not arch.attention_variant_info(_capability(torch.cuda.current_device())).ws:
        name, why = arch.attention_variant(_capability(torch.cuda.current_device()))
        raise ValueError(f"{what}: config {tuple(config)} asks for warp specialization on a GPU whose variant is "
                         f"{name}, expected Hopper (sm_90), the only architecture it was measured on: {why}")
    if causal:
        raise ValueError(f"{what}: config {tuple(config)} asks for warp specialization with causal=True, "
                         f"expected causal=False: the warp-specialized causal kernels returned wrong outputs "
                         f"on an H100 with Triton 3.6 (docs/kernels_notes.md, run 9); drop ws for causal")


def _launch(q, k, v, causal: bool, scale: float, out, config: Cand | None):
    """Launch ``attn_fwd_fast`` on checked inputs with ``config`` (None: autotune) and no refusals of
    the config: what :func:`attention_tiled_fast` runs after its checks, and what
    tools/attn_ws_experiment.py calls to run the configs the wrapper refuses (to see whether a
    later Triton still gets them wrong)."""
    B, H, N, D = q.shape
    rows = B * H * N

    def desc(t, block_rows):
        return TensorDescriptor(t, shape=[rows, D], strides=[D, 1], block_shape=[block_rows, D])

    bm0, bn0 = (config.block_m, config.block_n) if config else (64, 64)  # the tuner's pre-hook resets these
    dq, dk, dv, do = desc(q, bm0 // 2), desc(k, bn0), desc(v, bn0), desc(out, bm0 // 2)
    args = (dq, dk, dv, do, q, k, v, out, N, scale * LOG2E)  # a ws config uses the raw tensors
    if is_gpu() and (config is None or config.ws):
        triton.set_allocator(_scratch)
    if config is not None:
        grid = (triton.cdiv(N, config.block_m), B * H)
        extra = {} if config.maxnreg is None else {"maxnreg": config.maxnreg}
        _with_flags[grid](*args, HEAD_DIM=D, CAUSAL=causal, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                          WS=config.ws, num_warps=config.num_warps, num_stages=config.num_stages, **extra)
    else:
        def grid(meta):
            return (triton.cdiv(N, meta["BLOCK_M"]), B * H)

        _tuned[grid](*args, HEAD_DIM=D, CAUSAL=causal)
    return out


def _scratch(size: int, alignment: int, stream):
    """Global scratch for on-device tensor descriptors (the ``ws`` configs), from torch's caching allocator."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def last_config() -> dict | None:
    """The candidate the autotuner picked last, as a dict of :class:`Cand` fields, if any."""
    c = getattr(_tuned, "best_config", None)
    return None if c is None else _cand_of(c)._asdict()


def _name(c: Cand) -> str:
    return (f"BM{c.block_m}-BN{c.block_n}-w{c.num_warps}-s{c.num_stages}" + (f"-r{c.maxnreg}" if c.maxnreg else "")
            + ("-ws" if c.ws else ""))


def tuning_timings() -> dict[str, float]:
    """Median ms of every config the autotuner timed for its latest key (empty if none)."""
    out = {}
    for c, t in (getattr(_tuned, "configs_timings", None) or {}).items():
        out[_name(_cand_of(c))] = float(t[0] if isinstance(t, (list, tuple)) else t)
    return out

