"""Plain-torch references for every kernel in :mod:`infralens_lab.kernels`.

Tests, labs and quizzes compare kernels against these; nothing here is fast or clever.
Attention is computed in float32 and returned in the input dtype, so a kernel's error is
measured against the exact math, not against another rounding of it. The intermediate
references (``scores_ref``, ``probs_ref``) match the three naive kernels one by one.
"""
from __future__ import annotations

import math

import torch


def copy_ref(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` (same dtype and device)."""
    return x.clone()


def copy_strided_ref(x: torch.Tensor, stride: int) -> torch.Tensor:
    """``x[::stride]`` as a new contiguous tensor of ``ceil(len(x) / stride)`` elements."""
    return x[::stride].contiguous()


def default_scale(head_dim: int) -> float:
    """The softmax scale attention uses when none is given: ``1 / sqrt(head_dim)``."""
    return 1.0 / math.sqrt(head_dim)


def scores_ref(q: torch.Tensor, k: torch.Tensor, sm_scale: float | None = None) -> torch.Tensor:
    """Scaled scores ``sm_scale * Q K^T`` in float32, shape (B, H, N, N); no mask."""
    scale = default_scale(q.shape[-1]) if sm_scale is None else sm_scale
    return (q.float() @ k.float().transpose(-1, -2)) * scale


def probs_ref(s: torch.Tensor, causal: bool = False, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Row softmax of float32 scores ``s`` (causal: key j > query i gets 0), cast to ``dtype``."""
    s = s.float()
    if causal:
        n_q, n_k = s.shape[-2], s.shape[-1]
        above = torch.ones(n_q, n_k, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(above, float("-inf"))
    return torch.softmax(s, dim=-1).to(dtype or s.dtype)


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  sm_scale: float | None = None) -> torch.Tensor:
    """``softmax(sm_scale * Q K^T [+ causal mask]) V`` in float32 math, returned in q's dtype.

    q, k, v: (B, H, N, D). ``sm_scale`` defaults to ``1 / sqrt(D)``; causal lets query i see
    keys 0..i only.
    """
    p = probs_ref(scores_ref(q, k, sm_scale), causal)
    return (p @ v.float()).to(q.dtype)


def naive_torch(q, k, v, causal):
    """Eager PyTorch attention as first written: scores, softmax and P @ V, each a tensor in HBM.

    Everything stays in the input dtype (torch's softmax computes in float32 inside and rounds
    its output); the causal mask is built per call, as eager code does.
    """
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v
