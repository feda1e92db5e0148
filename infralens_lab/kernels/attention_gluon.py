"""A FlashAttention-3-style forward for Hopper (sm_90), written in Gluon: ``attention_gluon``.

Triton's ``tl`` language leaves the schedule to the compiler (``attn_fwd_fast``, :mod:`.attention_fast`).
Gluon (``triton.experimental.gluon``, Triton 3.6) is the lower level: the kernel names its layouts, its
shared-memory buffers, its mbarriers and its warp partitions. This file uses that to write FA3's schedule:

* a **producer** partition (one warp) issues TMA copies of K and V tiles into a ring of ``STAGES``
  shared-memory stages, each stage with a "ready" mbarrier (the copy engine signals it when the bytes have
  landed) and an "empty" one (every consumer signals it when its tensor-core reads of the stage are done);
* **consumer warpgroups** (4 warps each, ``BLOCK_M_WG`` = 64 query rows each) run ``warpgroup_mma``
  (asynchronous ``wgmma``): per K/V tile, S = Q K^T into registers, the online softmax on the CUDA cores,
  then O += P V with P taken straight from registers;
* inside one warpgroup the two GEMMs overlap the softmax (FA3's intra-warpgroup overlap): iteration j
  issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} back to back, waits for S_j only, runs softmax(S_j) while
  P_{j-1} V_{j-1} is still on the tensor cores, and only then waits for O and rescales it: the rescale
  is off the GEMMs' critical path;
* with two consumer warpgroups and ``PINGPONG``, two mbarriers pass a turn between them: a warpgroup
  issues its two GEMMs only in its turn and hands the turn over right after issuing, so the tensor
  cores run one warpgroup's GEMMs while the other runs its softmax.

The variants (:data:`VARIANTS`) are the steps of the build, each kept so it can be measured: ``one_wg`` (no
warp specialization: one warpgroup issues its own TMA loads one tile ahead), ``ws`` (producer + one consumer
warpgroup), ``ws2`` (producer + two consumer warpgroups, no turn-taking) and ``pingpong`` (``ws2`` with the
turns). :func:`schedule` returns a variant's partition layout as data (for the lab's picture).

Inputs: q, k, v CUDA tensors of one shape (B, H, N, D), D in :data:`HEAD_DIMS`, float16 or bfloat16,
contiguous, on a Hopper GPU (compute capability 9.x); any N >= 1 (a ragged last tile is masked: keys >= N
get probability 0, query rows >= N are not stored). Gluon has no interpreter: on a machine without a Hopper
GPU the kernel can only be compiled (tests/test_attention_gluon.py does so for sm_90), not run.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ..errors import InfraLensError
from ._validate import check_qkv_alike, check_rank4, check_tensor, check_tma_operands, dtype_name

LOG2E = math.log2(math.e)
HEAD_DIMS = (64, 128)
DTYPES = (torch.float16, torch.bfloat16)
BLOCK_M_WG = 64  # query rows per consumer warpgroup (wgmma's M is 64 per warpgroup)
BLOCK_N = 128  # keys per K/V tile
STAGES = 2  # K/V ring depth: at D = 128, Q (128 rows) + 2 stages of K and V = 160 KiB of shared memory
PRODUCER_WARPS = 1
PRODUCER_REGS = 24  # registers per thread the producer keeps (setmaxnreg); it only issues TMA copies
CONSUMER_REGS = 240  # registers per thread of the worker consumer warpgroup


class Variant(NamedTuple):
    """One build step: consumer warpgroups, whether a producer partition loads K/V, whether they take turns."""

    consumers: int
    producer: bool
    pingpong: bool


VARIANTS = {
    "one_wg": Variant(1, False, False),
    "ws": Variant(1, True, False),
    "ws2": Variant(2, True, False),
    "pingpong": Variant(2, True, True),
}
DEFAULT_VARIANT = "pingpong"


class GluonUnavailableError(InfraLensError, RuntimeError):
    """The Gluon kernel cannot run here: no CUDA tensor, or a GPU that is not Hopper (sm_90)."""


# --------------------------------------------------------------------------- the kernel
@gluon.jit
def _softmax_tile(s, m_i, l_i, start_n, row0, N_CTX, qk_scale, s_layout: gl.constexpr,
                  BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    # One tile's online-softmax update. s: raw scores (float32, the wgmma accumulator layout). Returns
    # P (unnormalized, float32), the new running max and sum, and alpha = the factor O must be rescaled by.
    need_mask = start_n + BLOCK_N > N_CTX
    if CAUSAL:
        need_mask = need_mask | (start_n + BLOCK_N - 1 > row0)
    if need_mask:
        cols = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims(cols < N_CTX, 0)
        if CAUSAL:
            rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            keep = keep & (gl.expand_dims(rows, 1) >= gl.expand_dims(cols, 0))
        s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)  # log2 units: log2(e) is inside qk_scale
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _consumer(cid, q_desc, k_desc, v_desc, o_ptr, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready,
              v_empty, turn, N_CTX, qk_scale, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, NUM_CONS: gl.constexpr, CAUSAL: gl.constexpr, SELF_LOAD: gl.constexpr,
              PINGPONG: gl.constexpr):
    # One consumer warpgroup: BLOCK_M = 64 query rows of one (batch, head), all the key tiles it needs.
    BLOCK_M: gl.constexpr = 64
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    start_m = gl.program_id(0)
    if CAUSAL:
        start_m = gl.num_programs(0) - 1 - start_m  # heaviest query block first
    off_bh = gl.program_id(1)
    head_row = off_bh * N_CTX  # first row of this (batch, head) in the (B*H*N, D) views
    row0 = start_m * (BLOCK_M * NUM_CONS) + cid * BLOCK_M  # this warpgroup's first query row within the head
    hi = N_CTX
    if CAUSAL:
        hi = gl.minimum((start_m + 1) * (BLOCK_M * NUM_CONS), N_CTX)  # the producer loads the same tiles
    n_tiles = gl.cdiv(hi, BLOCK_N)
    kv_bytes: gl.constexpr = BLOCK_N * HEAD_DIM * 2

    qs = q_smem.index(cid)
    qb = q_bar.index(cid)
    mbarrier.expect(qb, BLOCK_M * HEAD_DIM * 2)
    tma.async_copy_global_to_shared(q_desc, [head_row + row0, 0], qb, qs)
    if SELF_LOAD:  # no producer partition: this warpgroup loads tile 0 now and tile j + 1 during tile j
        mbarrier.expect(k_ready.index(0), kv_bytes)
        tma.async_copy_global_to_shared(k_desc, [head_row, 0], k_ready.index(0), k_smem.index(0))
        mbarrier.expect(v_ready.index(0), kv_bytes)
        tma.async_copy_global_to_shared(v_desc, [head_row, 0], v_ready.index(0), v_smem.index(0))
    mbarrier.wait(qb, 0)

    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)

    # Tile 0: S_0 only (there is no P V before it).
    if SELF_LOAD:  # noqa: SIM102 (a constexpr test around a run-time one: Gluon compiles the inner one only then)
        if n_tiles > 1:  # stage 1 is free: tile 1's K and V now, tile j + 1's during tile j (below)
            mbarrier.expect(k_ready.index(1), kv_bytes)
            tma.async_copy_global_to_shared(k_desc, [head_row + BLOCK_N, 0], k_ready.index(1), k_smem.index(1))
            mbarrier.expect(v_ready.index(1), kv_bytes)
            tma.async_copy_global_to_shared(v_desc, [head_row + BLOCK_N, 0], v_ready.index(1), v_smem.index(1))
    mbarrier.wait(k_ready.index(0), 0)
    if PINGPONG:
        mbarrier.wait(turn.index(cid), 0)
    s_tok = warpgroup_mma(qs, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - cid))
    s = warpgroup_mma_wait(0, deps=(s_tok,))
    mbarrier.arrive(k_empty.index(0))
    p, m_i, l_i, alpha = _softmax_tile(s, m_i, l_i, 0, row0, N_CTX, qk_scale, s_layout, BLOCK_M, BLOCK_N, CAUSAL)
    p_op = gl.convert_layout(p.to(dtype), p_layout)

    for j in range(1, n_tiles):
        st = j % STAGES
        ph = (j // STAGES) & 1
        pst = (j - 1) % STAGES
        pph = ((j - 1) // STAGES) & 1
        mbarrier.wait(k_ready.index(st), ph)
        mbarrier.wait(v_ready.index(pst), pph)
        if PINGPONG:
            mbarrier.wait(turn.index(cid), j & 1)
        # Both GEMMs issued back to back: S_j = Q K_j^T, then O += P_{j-1} V_{j-1}.
        s_tok = warpgroup_mma(qs, k_smem.index(st).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        o_tok = warpgroup_mma(p_op, v_smem.index(pst), acc, is_async=True)
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - cid))  # pass the turn: the other warpgroup may issue its GEMMs now
        s = warpgroup_mma_wait(1, deps=(s_tok,))  # S_j done; P_{j-1} V_{j-1} may still run
        mbarrier.arrive(k_empty.index(st))
        if SELF_LOAD:  # noqa: SIM102
            if j + 1 < n_tiles:  # K stage (j+1) % STAGES was last read by S_{j-1}, done in iteration j-1
                nst = (j + 1) % STAGES
                mbarrier.expect(k_ready.index(nst), kv_bytes)
                tma.async_copy_global_to_shared(k_desc, [head_row + (j + 1) * BLOCK_N, 0], k_ready.index(nst),
                                                k_smem.index(nst))
        p, m_i, l_i, alpha = _softmax_tile(s, m_i, l_i, j * BLOCK_N, row0, N_CTX, qk_scale, s_layout, BLOCK_M,
                                           BLOCK_N, CAUSAL)
        acc, p_op = warpgroup_mma_wait(0, deps=(o_tok, p_op))  # O += P_{j-1} V_{j-1} done
        mbarrier.arrive(v_empty.index(pst))
        if SELF_LOAD:  # noqa: SIM102 (V stage (j+1) % STAGES held V_{j-1}, free since the wait above)
            if j + 1 < n_tiles:
                nst = (j + 1) % STAGES
                mbarrier.expect(v_ready.index(nst), kv_bytes)
                tma.async_copy_global_to_shared(v_desc, [head_row + (j + 1) * BLOCK_N, 0], v_ready.index(nst),
                                                v_smem.index(nst))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)

    # The last P V.
    lst = (n_tiles - 1) % STAGES
    mbarrier.wait(v_ready.index(lst), ((n_tiles - 1) // STAGES) & 1)
    o_tok = warpgroup_mma(p_op, v_smem.index(lst), acc, is_async=True)
    acc, p_op = warpgroup_mma_wait(0, deps=(o_tok, p_op))
    mbarrier.arrive(v_empty.index(lst))

    # Epilogue: O = acc / l, stored with a mask (rows >= N belong to the next head or to nothing).
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    o = (acc / gl.expand_dims(l_o, 1)).to(dtype)
    st_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (HEAD_DIM // 8), HEAD_DIM // 8], [4, 1], [1, 0])
    o = gl.convert_layout(o, st_layout)
    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, st_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, st_layout))
    offs = (gl.expand_dims(head_row + rows, 1).to(gl.int64) * HEAD_DIM + gl.expand_dims(cols, 0))
    gl.store(o_ptr + offs, o, mask=gl.expand_dims(rows < N_CTX, 1))


@gluon.jit
def _producer(k_desc, v_desc, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, N_CTX,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    # One warp: TMA copies of every K and V tile this program's consumers need, STAGES ahead of them.
    start_m = gl.program_id(0)
    if CAUSAL:
        start_m = gl.num_programs(0) - 1 - start_m
    head_row = gl.program_id(1) * N_CTX
    hi = N_CTX
    if CAUSAL:
        hi = gl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    n_tiles = gl.cdiv(hi, BLOCK_N)
    nbytes: gl.constexpr = k_desc.block_type.nbytes
    for j in range(n_tiles):
        st = j % STAGES
        ph = (j // STAGES) & 1
        mbarrier.wait(k_empty.index(st), ph ^ 1)  # a fresh barrier passes a wait on parity 1 at once
        mbarrier.expect(k_ready.index(st), nbytes)
        tma.async_copy_global_to_shared(k_desc, [head_row + j * BLOCK_N, 0], k_ready.index(st), k_smem.index(st))
        mbarrier.wait(v_empty.index(st), ph ^ 1)
        mbarrier.expect(v_ready.index(st), nbytes)
        tma.async_copy_global_to_shared(v_desc, [head_row + j * BLOCK_N, 0], v_ready.index(st), v_smem.index(st))


@gluon.jit
def _consumer1(q_desc, k_desc, v_desc, o_ptr, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
               turn, N_CTX, qk_scale, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
               NUM_CONS: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr):
    # The second consumer warpgroup (a worker partition): rows 64..127 of the program's query block.
    _consumer(1, q_desc, k_desc, v_desc, o_ptr, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
              turn, N_CTX, qk_scale, HEAD_DIM, BLOCK_N, STAGES, NUM_CONS, CAUSAL, False, PINGPONG)


@gluon.jit
def _consumer0(q_desc, k_desc, v_desc, o_ptr, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
               turn, N_CTX, qk_scale, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
               NUM_CONS: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr):
    # The first consumer warpgroup (the default partition): rows 0..63; it holds the first turn.
    if PINGPONG:
        mbarrier.arrive(turn.index(0))
    _consumer(0, q_desc, k_desc, v_desc, o_ptr, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
              turn, N_CTX, qk_scale, HEAD_DIM, BLOCK_N, STAGES, NUM_CONS, CAUSAL, False, PINGPONG)


@gluon.jit
def attn_fwd_gluon(q_desc, k_desc, v_desc, o_ptr, N_CTX, qk_scale, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
                   STAGES: gl.constexpr, NUM_CONS: gl.constexpr, PRODUCER: gl.constexpr, PINGPONG: gl.constexpr,
                   CAUSAL: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                   CONSUMER_REGS: gl.constexpr):
    # One program: NUM_CONS * 64 query rows of one (batch, head). Shared memory and barriers are made here,
    # before the fork into partitions, and passed to each.
    BLOCK_M: gl.constexpr = 64 * NUM_CONS
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [NUM_CONS, 64, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [NUM_CONS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_CONS):
        mbarrier.init(q_bar.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_CONS)  # every consumer releases every stage
        mbarrier.init(v_empty.index(i), count=NUM_CONS)
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)

    if PRODUCER:
        if NUM_CONS == 2:
            gl.warp_specialize([
                (_consumer0, (q_desc, k_desc, v_desc, o_ptr, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty,
                              v_ready, v_empty, turn, N_CTX, qk_scale, HEAD_DIM, BLOCK_N, STAGES, NUM_CONS,
                              CAUSAL, PINGPONG)),
                (_consumer1, (q_desc, k_desc, v_desc, o_ptr, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty,
                              v_ready, v_empty, turn, N_CTX, qk_scale, HEAD_DIM, BLOCK_N, STAGES, NUM_CONS,
                              CAUSAL, PINGPONG)),
                (_producer, (k_desc, v_desc, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, N_CTX, BLOCK_M,
                             BLOCK_N, STAGES, CAUSAL)),
            ], [4, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])
        else:
            gl.warp_specialize([
                (_consumer0, (q_desc, k_desc, v_desc, o_ptr, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty,
                              v_ready, v_empty, turn, N_CTX, qk_scale, HEAD_DIM, BLOCK_N, STAGES, NUM_CONS,
                              CAUSAL, False)),
                (_producer, (k_desc, v_desc, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, N_CTX, BLOCK_M,
                             BLOCK_N, STAGES, CAUSAL)),
            ], [PRODUCER_WARPS], [PRODUCER_REGS])
    else:
        _consumer(0, q_desc, k_desc, v_desc, o_ptr, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty, v_ready,
                  v_empty, turn, N_CTX, qk_scale, HEAD_DIM, BLOCK_N, STAGES, NUM_CONS, CAUSAL, True, False)


# --------------------------------------------------------------------------- launch
def kernel_constants(variant: str = DEFAULT_VARIANT, head_dim: int = 128, causal: bool = False) -> dict:
    """The constexpr arguments and launch options of ``variant`` (a key of :data:`VARIANTS`): what the wrapper
    launches and what the CPU compile test compiles."""
    if variant not in VARIANTS:
        raise ValueError(f"attention_gluon: variant {variant!r}, expected one of {sorted(VARIANTS)}")
    v = VARIANTS[variant]
    const = {"HEAD_DIM": head_dim, "BLOCK_N": BLOCK_N, "STAGES": STAGES, "NUM_CONS": v.consumers,
             "PRODUCER": v.producer, "PINGPONG": v.pingpong, "CAUSAL": causal, "PRODUCER_WARPS": PRODUCER_WARPS,
             "PRODUCER_REGS": PRODUCER_REGS, "CONSUMER_REGS": CONSUMER_REGS}
    return {"constexprs": const, "num_warps": 4, "block_m": BLOCK_M_WG * v.consumers}


def smem_layout(rows: int, head_dim: int, dtype) -> gl.NVMMASharedLayout:
    """The swizzled shared-memory layout of a (rows, head_dim) tile that TMA writes and wgmma reads."""
    return gl.NVMMASharedLayout.get_default_for([rows, head_dim], dtype)


def schedule(variant: str = DEFAULT_VARIANT) -> list[dict]:
    """The partition layout of ``variant`` as data, one dict a partition in launch order: its name, role, warps,
    registers per thread it asks for (None: what the compiler leaves the default partition), the query rows it
    owns, the GEMMs it issues, and the K/V ring it reads or fills (``stages``, ``block_n``). With ``pingpong``
    the consumers issue their GEMMs in turns (``turn_order``)."""
    if variant not in VARIANTS:
        raise ValueError(f"schedule: variant {variant!r}, expected one of {sorted(VARIANTS)}")
    v = VARIANTS[variant]
    out = []
    for c in range(v.consumers):
        out.append({"name": f"consumer{c}", "role": "consumer", "partition": "default" if c == 0 else "worker",
                    "warps": 4, "regs": None if c == 0 else CONSUMER_REGS,
                    "rows": (c * BLOCK_M_WG, (c + 1) * BLOCK_M_WG),
                    "gemms": ["S = Q K^T", "O += P V"], "loads": [] if v.producer else ["Q", "K", "V"],
                    "stages": STAGES, "block_n": BLOCK_N, "turn_order": c if v.pingpong else None})
        if v.producer:
            out[-1]["loads"] = ["Q"]
    if v.producer:
        out.append({"name": "producer", "role": "producer", "partition": "worker", "warps": PRODUCER_WARPS,
                    "regs": PRODUCER_REGS, "rows": None, "gemms": [], "loads": ["K", "V"],
                    "stages": STAGES, "block_n": BLOCK_N, "turn_order": None})
    return out


def check_inputs(q, k, v, causal, sm_scale, what: str = "attention_gluon") -> float:
    """Refuse anything the kernel cannot run, naming what was seen and what was expected; return the scale."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, what)
        check_rank4(name, t, what)
    *_, scale = check_qkv_alike(q, k, v, causal, sm_scale, what, head_dims=HEAD_DIMS)
    if q.dtype not in DTYPES:
        raise TypeError(f"{what}: q has dtype {dtype_name(q.dtype)}, expected float16 or bfloat16 (wgmma operands)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise GluonUnavailableError(f"{what}: {name} is on device '{t.device}', expected a CUDA tensor on a "
                                        f"Hopper GPU (sm_90): the Gluon kernel has no interpreter and no CPU path")
    check_tma_operands(what, "TMA descriptors need it; call .contiguous()", q=q, k=k, v=v)
    check_hopper(q.device, what)
    return scale


def check_hopper(dev, what: str = "attention_gluon") -> None:
    """Refuse a GPU that is not Hopper (compute capability 9.x), by name: wgmma and setmaxnreg are sm_90a only."""
    cc = torch.cuda.get_device_capability(dev)
    if cc[0] != 9:
        raise GluonUnavailableError(f"{what}: the GPU is {torch.cuda.get_device_name(dev)} (compute capability "
                                    f"{cc[0]}.{cc[1]}), expected a Hopper GPU (H100, H200: 9.0); the kernel is "
                                    f"built from wgmma, TMA and setmaxnreg. Use attention_tiled_fast there")


def attention_gluon(q, k, v, causal: bool = False, sm_scale: float | None = None, variant: str = DEFAULT_VARIANT,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """FA3-style attention forward (``attn_fwd_gluon``) on a Hopper GPU; returns O (B, H, N, D) in q's dtype.
    ``variant``: a key of :data:`VARIANTS` (the build steps; default :data:`DEFAULT_VARIANT`)."""
    scale = check_inputs(q, k, v, causal, sm_scale)
    kc = kernel_constants(variant, q.shape[-1], causal)
    B, H, N, D = q.shape
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device or not out.is_contiguous():
        raise ValueError(f"attention_gluon: out is {tuple(out.shape)} {dtype_name(out.dtype)} on {out.device}, "
                         f"expected a contiguous {tuple(q.shape)} {dtype_name(q.dtype)} tensor on {q.device}")
    gdt = gl.float16 if q.dtype == torch.float16 else gl.bfloat16
    rows = B * H * N
    q_desc = TensorDescriptor(q, [rows, D], [D, 1], [BLOCK_M_WG, D], smem_layout(BLOCK_M_WG, D, gdt))
    k_desc = TensorDescriptor(k, [rows, D], [D, 1], [BLOCK_N, D], smem_layout(BLOCK_N, D, gdt))
    v_desc = TensorDescriptor(v, [rows, D], [D, 1], [BLOCK_N, D], smem_layout(BLOCK_N, D, gdt))
    grid = (triton_cdiv(N, kc["block_m"]), B * H)
    attn_fwd_gluon[grid](q_desc, k_desc, v_desc, out, N, scale * LOG2E, **kc["constexprs"],
                         num_warps=kc["num_warps"])
    return out


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
