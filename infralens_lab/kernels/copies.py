"""Coalesced and strided copies: the smallest kernels that show what coalescing is worth.

``copy(x)`` reads a 1-D tensor and writes it back out, one contiguous block per program:
neighbouring threads touch neighbouring bytes, so a warp's load is a few full 32-byte
sectors and Triton emits 128-bit (16-byte) vector loads. ``copy_strided(x, stride)`` reads
every ``stride``-th element and writes them contiguously (``len(out) == ceil(len(x) /
stride)``): the useful bytes shrink by ``stride`` but, while ``stride * elem_bytes <= 32``,
DRAM still has to deliver every 32-byte sector the reads touch. The predicted numbers are in
:mod:`infralens_lab.analysis.traffic`; Nsight Compute shows the measured ones.

Triton kernels (names as profilers show them): ``copy_coalesced`` and ``copy_strided``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._validate import check_device, check_dtype, check_tensor, out_or_new

STRIDES = (1, 2, 4, 8, 16, 32)
# Warps per program and bytes per thread. Swept on an H200 (docs/kernels_notes.md): one
# 16-byte vector per thread per program (1024 float32 or 2048 float16 with 8 warps) matched
# torch's copy_; bigger blocks (more vectors per thread) were 2-5% slower.
NUM_WARPS = 8
VECTOR_BYTES = 16


def block_size(elem_bytes: int) -> int:
    """Elements per program: one 16-byte vector for each of the NUM_WARPS * 32 threads."""
    return NUM_WARPS * 32 * (VECTOR_BYTES // elem_bytes)


BLOCK = block_size(4)  # float32
_ALLOWED = {
    "gpu": (torch.float32, torch.float16, torch.bfloat16),
    "interpreter": (torch.float32, torch.float16),
}
_MAX_ELEMENTS = 2**31 - 1  # copy_coalesced and copy_strided's output index with int32 (its reads with int64)


@triton.jit
def copy_coalesced(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    # Program `pid` owns elements [pid * BLOCK, (pid + 1) * BLOCK). Consecutive threads get
    # consecutive elements, so each thread's slice is one 16-byte vector in HBM.
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements  # the last block may run past the end
    x = tl.load(x_ptr + offs, mask=mask)  # HBM -> registers (nothing is reused: no SRAM)
    tl.store(out_ptr + offs, x, mask=mask)  # registers -> HBM


@triton.jit
def copy_strided(x_ptr, out_ptr, n_out, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    # Output element i comes from input element i * STRIDE. The writes stay contiguous;
    # the reads of neighbouring threads are STRIDE * elem_bytes apart, so for STRIDE >= 2
    # every thread's load lands in its own 32-byte sector and most of that sector is waste.
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    # int64 before the multiply: at 64 Mi outputs and STRIDE 32 the read offset reaches 2**31
    x = tl.load(x_ptr + offs.to(tl.int64) * STRIDE, mask=mask)  # HBM -> registers, one scalar per sector
    tl.store(out_ptr + offs, x, mask=mask)


# The wrapper below is also called `copy_strided` (the name in docs/CONTRACTS.md), so keep a
# handle on the kernel first. The kernel keeps its own name, which is what profilers show.
_copy_strided_kernel = copy_strided
# the Triton kernels by the name profilers show (a lab prints their source: KERNELS[name].fn)
KERNELS = {"copy_coalesced": copy_coalesced, "copy_strided": _copy_strided_kernel}


def _check_input(x, what: str, limit: bool = True) -> None:
    check_tensor("x", x, what)
    check_device("x", x, what)
    check_dtype("x", x, _ALLOWED, what)
    if x.dim() != 1:
        raise ValueError(f"{what}: x has shape {tuple(x.shape)} (rank {x.dim()}), expected a 1-D tensor")
    if not x.is_contiguous():
        raise ValueError(f"{what}: x has stride {tuple(x.stride())}, expected a contiguous 1-D tensor "
                         f"(call .contiguous() first)")
    if limit and x.numel() > _MAX_ELEMENTS:
        raise ValueError(f"{what}: x has {x.numel()} elements, expected at most {_MAX_ELEMENTS} (int32 indexing)")


def copy(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Copy 1-D ``x`` into ``out`` (allocated if None) with the ``copy_coalesced`` kernel.

    Moves ``2 * x.numel() * x.element_size()`` bytes (read + write). Returns ``out``.
    """
    what = "copy"
    _check_input(x, what)
    out = out_or_new(out, tuple(x.shape), x.dtype, x.device, what)
    n = x.numel()
    if n:
        block = block_size(x.element_size())
        grid = (triton.cdiv(n, block),)
        copy_coalesced[grid](x, out, n, BLOCK=block, num_warps=NUM_WARPS)
    return out


def strided_len(n: int, stride: int) -> int:
    """Number of output elements of a strided copy: ``ceil(n / stride)``."""
    return -(-n // stride)


def copy_strided(x: torch.Tensor, stride: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Write ``x[::stride]`` contiguously into ``out`` with the ``copy_strided`` kernel.

    ``stride`` is the element stride of the read (an int >= 1); ``out`` has
    ``ceil(len(x) / stride)`` elements. Useful bytes: ``2 * len(out) * x.element_size()``.
    """
    what = "copy_strided"
    if isinstance(stride, bool) or not isinstance(stride, int):
        raise TypeError(f"{what}: stride is {stride!r} ({type(stride).__name__}), expected an int >= 1")
    if stride < 1:
        raise ValueError(f"{what}: stride is {stride}, expected an int >= 1")
    _check_input(x, what, limit=False)  # reads index with int64; the output (below) with int32
    n_out = strided_len(x.numel(), stride)
    if n_out > _MAX_ELEMENTS:
        raise ValueError(f"{what}: x[::{stride}] has {n_out} elements, expected at most {_MAX_ELEMENTS} "
                         f"(the output is indexed with int32)")
    out = out_or_new(out, (n_out,), x.dtype, x.device, what)
    if n_out:
        block = block_size(x.element_size())
        grid = (triton.cdiv(n_out, block),)
        _copy_strided_kernel[grid](x, out, n_out, STRIDE=stride, BLOCK=block, num_warps=NUM_WARPS)
    return out

