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

from ..device import torch_device
from . import attention, copies, reference

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


def copy_checks(n_in: int, seed: int = 0) -> list[dict]:
    """The coalesced copy and every strided copy on fresh seeded ``torch.randn(n_in)`` (on
    :func:`infralens_lab.device.torch_device`), each output poisoned with NaN first, compared with the
    torch reference bit for bit. One row per kernel and stride: element counts and ``equals_torch``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_in, generator=g).to(torch_device())
    out = torch.full_like(x, float("nan"))
    ok = matches(copies.copy(x, out=out), reference.copy_ref(x), "exact")
    rows = [{"kernel": "copy_coalesced", "stride": 1, "n_in": n_in, "n_out": n_in, "equals_torch": ok}]
    for s in copies.STRIDES:
        out = torch.full((copies.strided_len(n_in, s),), float("nan"), device=x.device)
        ok = matches(copies.copy_strided(x, s, out=out), reference.copy_strided_ref(x, s), "exact")
        rows.append({"kernel": "copy_strided", "stride": s, "n_in": n_in, "n_out": out.numel(), "equals_torch": ok})
    return rows


def attention_checks(shapes, seed: int = 0) -> list[dict]:
    """Every attention variant on fresh seeded fp16 inputs per ``(B, H, N, D, causal)``, outputs
    poisoned with NaN, against :func:`~infralens_lab.kernels.reference.attention_ref` with the float16
    tolerance of :data:`TOLERANCES`. One row per variant and shape: ``within_tol``."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for B, H, n_ctx, D, causal in shapes:
        q, k, v = (torch.randn(B, H, n_ctx, D, generator=g).to(torch_device(), torch.float16) for _ in range(3))
        ref = reference.attention_ref(q, k, v, causal=causal)
        for name, fn in attention.VARIANTS.items():
            out = torch.full_like(q, float("nan"))
            ok = matches(fn(q, k, v, causal=causal, out=out), ref, torch.float16)
            rows.append({"variant": name, "shape (B,H,N,D)": f"{B},{H},{n_ctx},{D}", "dtype": "fp16",
                         "causal": causal, "within_tol": ok})
    return rows
