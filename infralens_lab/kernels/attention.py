"""Attention forward on (B, H, N, D): naive (scores in HBM) and tiled (flash-style).

``attention_naive`` runs three Triton kernels and materialises the N x N matrices in HBM, so
a profiler sees the traffic: ``naive_qk`` writes the scaled scores S = sm_scale * Q K^T as
**float32** (B*H*N*N*4 bytes; float32 keeps the logits exact before exp and cannot overflow),
``naive_softmax`` reads S and writes the probabilities P in the **input dtype** (what the
tensor cores consume next), ``naive_pv`` reads P and V and writes O = P V. The causal mask
is applied by ``naive_softmax`` (S holds every score, masked or not).

``attention_tiled`` is the teaching flash kernel ``attn_fwd``: one program per (query block,
batch*head) keeps its Q tile, a running max, a running sum and the output accumulator on
chip while it streams K and V through, so S and P only ever exist as one BLOCK_M x BLOCK_N
tile in registers. The tuned variant ``attn_fwd_fast`` lives in :mod:`.attention_fast`.

Inputs: q, k, v of one shape (B, H, N, D), D in (16, 32, 64, 128), float16/bfloat16 on a GPU,
float16/float32 in the interpreter. Any strides are accepted (the kernels take them);
``out`` if given must be a contiguous (B, H, N, D) tensor of q's dtype.
"""
# ruff: noqa: SIM108 (labs 02 and 04 print attn_fwd's source as the lesson: its causal if/else stays as written)
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..device import is_gpu
from ._validate import check_out, check_qkv, check_tensor, out_or_new


# --------------------------------------------------------------------------- naive
@triton.jit
def naive_qk(q_ptr, k_ptr, s_ptr,
             stride_qb, stride_qh, stride_qm, stride_qd,
             stride_kb, stride_kh, stride_kn, stride_kd,
             stride_sb, stride_sh, stride_sm, stride_sn,
             H, N_CTX, sm_scale,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program computes one BLOCK_M x BLOCK_N tile of S for one (batch, head).
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_bh = tl.program_id(2)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    q_ptr += b * stride_qb + h * stride_qh
    k_ptr += b * stride_kb + h * stride_kh
    s_ptr += b * stride_sb + h * stride_sh  # int64: B*H*N*N can pass 2**31
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # Q and K tiles: HBM (mostly L2 hits after the first tile of a head) -> registers/SRAM.
    q = tl.load(q_ptr + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < N_CTX, other=0.0)
    k = tl.load(k_ptr + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=offs_n[:, None] < N_CTX, other=0.0)
    s = tl.dot(q, tl.trans(k)) * sm_scale  # float32 accumulator
    # The whole point of the naive version: the tile goes back to HBM as float32.
    tl.store(s_ptr + offs_m[:, None] * stride_sm + offs_n[None, :] * stride_sn, s,
             mask=(offs_m[:, None] < N_CTX) & (offs_n[None, :] < N_CTX))


@triton.jit
def naive_softmax(s_ptr, p_ptr, n_rows, N_CTX, CAUSAL: tl.constexpr,
                  ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    # S and P are contiguous (B*H*N rows of N). One program owns ROWS whole rows
    # (BLOCK_N >= N), so each score is read from HBM once and each probability written once.
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    rows = tl.minimum(rows, n_rows - 1)  # past-the-end rows redo the last row; their store is masked
    row_ok = pid * ROWS + tl.arange(0, ROWS) < n_rows
    cols = tl.arange(0, BLOCK_N)
    offs = rows.to(tl.int64)[:, None] * N_CTX + cols[None, :]
    keep = cols[None, :] < N_CTX
    if CAUSAL:
        query = rows % N_CTX  # row r of S is query r mod N of its (batch, head)
        keep = keep & (cols[None, :] <= query[:, None])
    s = tl.load(s_ptr + offs, mask=cols[None, :] < N_CTX, other=float("-inf"))  # HBM -> registers
    s = tl.where(keep, s, float("-inf"))
    m = tl.max(s, axis=1)  # every row keeps key 0, so m is finite
    e = tl.exp(s - m[:, None])
    p = e / tl.sum(e, axis=1)[:, None]
    tl.store(p_ptr + offs, p.to(p_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols[None, :] < N_CTX))


@triton.jit
def naive_pv(p_ptr, v_ptr, o_ptr,
             stride_pb, stride_ph, stride_pm, stride_pk,
             stride_vb, stride_vh, stride_vk, stride_vd,
             stride_ob, stride_oh, stride_om, stride_od,
             H, N_CTX,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    # O tile (BLOCK_M x D) = P rows (BLOCK_M x N) @ V (N x D), K-loop over N in BLOCK_K steps.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    p_ptr += b * stride_pb + h * stride_ph
    v_ptr += b * stride_vb + h * stride_vh
    o_ptr += b * stride_ob + h * stride_oh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # lives in registers
    for start_k in range(0, N_CTX, BLOCK_K):
        offs_k = start_k + tl.arange(0, BLOCK_K)
        p = tl.load(p_ptr + offs_m[:, None] * stride_pm + offs_k[None, :] * stride_pk,
                    mask=(offs_m[:, None] < N_CTX) & (offs_k[None, :] < N_CTX), other=0.0)  # P: read from HBM
        v = tl.load(v_ptr + offs_k[:, None] * stride_vk + offs_d[None, :] * stride_vd,
                    mask=offs_k[:, None] < N_CTX, other=0.0)
        acc = tl.dot(p, v, acc)
    tl.store(o_ptr + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < N_CTX)


def _naive_config(D: int, gpu: bool | None = None) -> dict:
    """Tile sizes for the naive kernels (small in the interpreter to exercise the masks). ``gpu``: the GPU's
    sizes (True) or the interpreter's (False); None asks the mode (tools/arch_compile_check.py passes True)."""
    if not (is_gpu() if gpu is None else gpu):
        return dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, warps=4)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, warps=8 if D >= 128 else 4)


def naive_scores(q, k, sm_scale: float | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Kernel 1 of 3: S = sm_scale * Q K^T as float32 (B, H, N, N) via ``naive_qk``."""
    B, H, N, D, sm_scale = check_qkv(q, k, k, False, sm_scale, "naive_scores")
    out = out_or_new(out, (B, H, N, N), torch.float32, q.device, "naive_scores")
    c = _naive_config(D)
    grid = (triton.cdiv(N, c["BLOCK_M"]), triton.cdiv(N, c["BLOCK_N"]), B * H)
    naive_qk[grid](q, k, out, *q.stride(), *k.stride(), *out.stride(), H, N, sm_scale,
                   HEAD_DIM=D, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], num_warps=c["warps"], num_stages=2)
    return out


def naive_probs(s: torch.Tensor, causal: bool, dtype: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """Kernel 2 of 3: P = row softmax of float32 S (causal mask here), stored in ``dtype``."""
    check_tensor("s", s, "naive_probs")
    if s.dtype != torch.float32 or s.dim() != 4 or not s.is_contiguous() or s.shape[-1] != s.shape[-2]:
        raise ValueError(f"naive_probs: s is {tuple(s.shape)} {s.dtype} contiguous={s.is_contiguous()}, "
                         f"expected contiguous float32 (B, H, N, N)")
    N = s.shape[-1]
    out = out_or_new(out, tuple(s.shape), dtype, s.device, "naive_probs")
    n_rows = s.numel() // N
    c = softmax_config(N)
    naive_softmax[(triton.cdiv(n_rows, c["ROWS"]),)](s, out, n_rows, N, CAUSAL=causal, ROWS=c["ROWS"],
                                                      BLOCK_N=c["BLOCK_N"], num_warps=c["num_warps"])
    return out


def softmax_config(N: int) -> dict:
    """``naive_softmax``'s launch for rows of N scores: whole rows per program (BLOCK_N >= N), ROWS rows a
    program (up to 8192 scores), 4 to 16 warps."""
    block_n = triton.next_power_of_2(N)
    rows = max(1, min(64, 8192 // block_n))
    return dict(ROWS=rows, BLOCK_N=block_n, num_warps=min(16, max(4, rows * block_n // 1024)))


def naive_output(p: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Kernel 3 of 3: O = P V in v's dtype via ``naive_pv``; P is (B, H, N, N) in v's dtype."""
    B, H, N, D, _ = check_qkv(v, v, v, False, None, "naive_output")
    check_tensor("p", p, "naive_output")
    if tuple(p.shape) != (B, H, N, N) or p.dtype != v.dtype or p.device != v.device:
        raise ValueError(f"naive_output: p is {tuple(p.shape)} {p.dtype} on {p.device}, "
                         f"expected {(B, H, N, N)} {v.dtype} on {v.device}")
    out = out_or_new(out, (B, H, N, D), v.dtype, v.device, "naive_output")
    c = _naive_config(D)
    grid = (triton.cdiv(N, c["BLOCK_M"]), B * H)
    naive_pv[grid](p, v, out, *p.stride(), *v.stride(), *out.stride(), H, N,
                   HEAD_DIM=D, BLOCK_M=c["BLOCK_M"], BLOCK_K=c["BLOCK_K"], num_warps=c["warps"], num_stages=3)
    return out


def attention_naive(q, k, v, causal: bool = False, sm_scale: float | None = None,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """Attention the memory-hungry way: three kernels, S (float32) and P (q's dtype) in HBM.

    Needs ``B*H*N*N*(4 + elem_bytes)`` bytes of scratch on top of the inputs. Returns O,
    (B, H, N, D) in q's dtype.
    """
    _, _, _, _, scale = check_qkv(q, k, v, causal, sm_scale, "attention_naive")
    s = naive_scores(q, k, scale)
    p = naive_probs(s, causal, q.dtype)
    del s
    return naive_output(p, v, out=_checked_out(out, q, "attention_naive"))


def _checked_out(out, q, what):
    if out is not None:
        check_out(out, tuple(q.shape), q.dtype, q.device, what)
    return out


# --------------------------------------------------------------------------- tiled (teaching)
@triton.jit
def attn_fwd(q_ptr, k_ptr, v_ptr, o_ptr,
             stride_qb, stride_qh, stride_qm, stride_qd,
             stride_kb, stride_kh, stride_kn, stride_kd,
             stride_vb, stride_vh, stride_vn, stride_vd,
             stride_ob, stride_oh, stride_om, stride_od,
             H, N_CTX, sm_scale,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # Program (pid_m, pid_bh) computes output rows [pid_m*BLOCK_M, (pid_m+1)*BLOCK_M) of one
    # (batch, head). Everything below except the loads of Q, K, V and the store of O stays on
    # chip: registers for the tiles, shared memory (SRAM) for the tensor-core operands.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    q_ptr += b * stride_qb + h * stride_qh
    k_ptr += b * stride_kb + h * stride_kh
    v_ptr += b * stride_vb + h * stride_vh
    o_ptr += b * stride_ob + h * stride_oh

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # query rows of this program
    offs_n = tl.arange(0, BLOCK_N)  # key columns within one K/V tile
    offs_d = tl.arange(0, HEAD_DIM)

    # Load the Q tile once: HBM -> registers. It is reused for every K/V tile.
    q = tl.load(q_ptr + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < N_CTX, other=0.0)

    # Online-softmax state per query row, all in registers (float32):
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of the scores
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # running sum of exp(...) * V

    # Causal: keys after the last query row of this block are never needed, so stop there.
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, N_CTX)
    else:
        hi = N_CTX
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        # K tile: HBM -> SRAM. Every query block reads all of K (and V): ceil(N/BLOCK_M) times.
        k = tl.load(k_ptr + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                    mask=cols[:, None] < N_CTX, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale  # BLOCK_M x BLOCK_N scores: registers only
        keep = cols[None, :] < N_CTX  # keys past the end (N not a multiple of BLOCK_N)
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= cols[None, :])
        s = tl.where(keep, s, float("-inf"))
        # Online softmax: rescale what we have so far to the new running max.
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: key 0 is always in the first tile
        alpha = tl.exp(m_i - m_new)  # exp(-inf) = 0 on the first tile
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        # V tile: HBM -> SRAM; P goes to the tensor cores in V's dtype, accumulates in float32.
        v = tl.load(v_ptr + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=cols[:, None] < N_CTX, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    # Normalise and write O once: registers -> HBM. S and P never touched HBM.
    acc = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < N_CTX)


def tiled_config(head_dim: int, gpu: bool | None = None) -> dict:
    """BLOCK_M, BLOCK_N, num_warps and num_stages the teaching kernel uses for ``head_dim``.

    Fixed (no autotuning) so the lesson stays simple; the traffic model needs BLOCK_M. ``gpu``: the GPU's
    config (True) or the interpreter's (False); None asks the mode.
    """
    if not (is_gpu() if gpu is None else gpu):
        return dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1)
    # Best of 16 configs per head dim on an H200 (docs/kernels_notes.md).
    if head_dim >= 128:
        return dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)


def attention_tiled(q, k, v, causal: bool = False, sm_scale: float | None = None,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """Flash-style attention with the readable ``attn_fwd`` kernel; returns O (B, H, N, D).

    HBM traffic: Q read once, K and V read once per query block, O written once; no N x N
    buffer exists anywhere.
    """
    B, H, N, D, scale = check_qkv(q, k, v, causal, sm_scale, "attention_tiled")
    out = _checked_out(out, q, "attention_tiled")
    if out is None:
        out = torch.empty((B, H, N, D), dtype=q.dtype, device=q.device)
    c = tiled_config(D)
    grid = (triton.cdiv(N, c["BLOCK_M"]), B * H)
    attn_fwd[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), H, N, scale,
                   HEAD_DIM=D, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], CAUSAL=causal,
                   num_warps=c["num_warps"], num_stages=c["num_stages"])
    return out


from .attention_fast import attention_tiled_fast  # noqa: E402  (re-exported: attention.attention_tiled_fast)

VARIANTS = {
    "naive": attention_naive,
    "tiled": attention_tiled,
    "tiled_fast": attention_tiled_fast,
}
