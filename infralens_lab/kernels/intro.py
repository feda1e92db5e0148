"""Lab 00's first Triton kernel: add two vectors.

The whole of Triton's programming model in a dozen lines. The kernel is written for ONE
program (a block of threads); the launch grid says how many programs run. Each program
computes which elements it owns, loads them from HBM into registers, adds, and stores the
result back. ``mask`` stops the last program from touching memory past the end.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._validate import check_device, check_dtype, check_tensor, out_or_new

BLOCK_SIZE = 1024  # elements per program; a power of two, as tl.arange requires
_ALLOWED = {
    "gpu": (torch.float32, torch.float16, torch.bfloat16),
    "interpreter": (torch.float32, torch.float16),
}


@triton.jit
def add_kernel(x_ptr,  # pointer to the first input vector (in HBM)
               y_ptr,  # pointer to the second input vector
               out_ptr,  # pointer to the output vector
               n_elements,  # how many elements there are
               BLOCK_SIZE: tl.constexpr,  # elements per program, known at compile time
               ):
    # Several programs run this same code; `pid` says which one we are.
    pid = tl.program_id(axis=0)
    # This program owns elements [pid * BLOCK_SIZE, (pid + 1) * BLOCK_SIZE).
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    # The last block may run past the end of the vectors: mask those offsets off.
    mask = offsets < n_elements
    # Load x and y from HBM into registers (masked-off offsets are not read).
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    # Write the sum back to HBM (masked-off offsets are not written).
    tl.store(out_ptr + offsets, output, mask=mask)


def vector_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x + y`` for two 1-D tensors of the same length, dtype and device, via ``add_kernel``.

    Reads ``2 * n * elem_bytes`` and writes ``n * elem_bytes``. Returns ``out`` (allocated if None).
    """
    what = "vector_add"
    for name, t in (("x", x), ("y", y)):
        check_tensor(name, t, what)
        check_device(name, t, what)
        check_dtype(name, t, _ALLOWED, what)
        if t.dim() != 1 or not t.is_contiguous():
            raise ValueError(f"{what}: {name} has shape {tuple(t.shape)} and stride {tuple(t.stride())}, "
                             f"expected a contiguous 1-D tensor")
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"{what}: x is {tuple(x.shape)} {x.dtype} and y is {tuple(y.shape)} {y.dtype}, "
                         f"expected the same shape and dtype")
    out = out_or_new(out, tuple(x.shape), x.dtype, x.device, what)
    n_elements = out.numel()
    if n_elements:
        # One program per BLOCK_SIZE elements, rounded up.
        grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
        add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out
