"""Kernel against reference: the one tolerance table, used by the labs and the tests.

Outputs are compared with a reference computed in float32 from the same (rounded) inputs, so a
tolerance only has to cover the kernel's own roundings (``torch.testing.assert_close`` semantics:
``|got - want| <= atol + rtol * |want|``):

* copies move bits: ``atol = rtol = 0``;
* float16 attention: the output is rounded once (half an ulp: 2**-11 relative) and P is rounded to
  float16 before P @ V (2**-11 relative per probability, at most 2**-11 * max|v| in the output;
  max|v| < 5 for randn draws -> 2.5e-3): ``atol=3e-3, rtol=2e-3``;
* bfloat16 (GPU only): the same two roundings with 2**-8 instead of 2**-11: ``atol=2.5e-2, rtol=1.6e-2``;
* float32 (interpreter): only summation order differs, ~1e-6 relative: ``atol = rtol = 1e-5``.
"""
from __future__ import annotations

import torch

TOLERANCES = {
    "exact": dict(atol=0.0, rtol=0.0),
    torch.float16: dict(atol=3e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2.5e-2, rtol=1.6e-2),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
}


def tolerance(dtype) -> dict:
    """``{"atol", "rtol"}`` for outputs of ``dtype`` (a torch dtype) or ``"exact"`` (copies)."""
    if dtype not in TOLERANCES:
        raise ValueError(f"no tolerance for {dtype!r}; expected one of {list(TOLERANCES)}")
    return dict(TOLERANCES[dtype])


def matches(got: torch.Tensor, want: torch.Tensor, dtype=None) -> bool:
    """Whether ``got`` equals ``want`` within the tolerance of ``dtype`` (default ``got.dtype``; pass
    ``"exact"`` for a copy). NaN anywhere (an unwritten, poisoned element) fails."""
    tol = tolerance(got.dtype if dtype is None else dtype)
    try:
        torch.testing.assert_close(got.float(), want.float(), **tol)
    except AssertionError:
        return False
    return True
