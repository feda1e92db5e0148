"""Input checks shared by the kernel wrappers.

Every wrapper validates before it launches, because a Triton kernel given the wrong device,
dtype or layout does not fail politely: it reads the wrong bytes. Each check raises
``ValueError`` (device, shape, layout, value) or ``TypeError`` (dtype, Python type) with a
message that names what was seen and what was expected.
"""
from __future__ import annotations

import torch

from ..device import mode, torch_device

DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def check_tensor(name: str, t, what: str) -> None:
    """``t`` must be a torch.Tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: {name} is a {type(t).__name__}, expected a torch.Tensor")


def check_device(name: str, t: torch.Tensor, what: str) -> None:
    """``t`` must live where this mode's kernels run (cuda in gpu mode, cpu in interpreter mode)."""
    want = torch_device()
    if t.device.type != want:
        raise ValueError(f"{what}: {name} is on device '{t.device}', expected '{want}' "
                         f"(mode '{mode()}'; use infralens_lab.device.torch_device())")


def check_dtype(name: str, t: torch.Tensor, allowed: dict[str, tuple[torch.dtype, ...]], what: str) -> None:
    """``allowed`` maps a mode to the dtypes that mode supports; explains interpreter limits."""
    here = allowed[mode()]
    if t.dtype in here:
        return
    names = ", ".join(dtype_name(d) for d in here)
    extra = ""
    if mode() == "interpreter" and t.dtype == torch.bfloat16:
        extra = (" (Triton 3.6's interpreter cannot do bfloat16 arithmetic and gets bfloat16 "
                 "tl.dot silently wrong, so bfloat16 runs on a GPU only)")
    raise TypeError(f"{what}: {name} has dtype {dtype_name(t.dtype)}, expected one of {names} "
                    f"in {mode()} mode{extra}")


def check_out(out, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, what: str) -> None:
    """A caller-supplied output buffer must match exactly and be contiguous."""
    check_tensor("out", out, what)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{what}: out has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if out.dtype != dtype:
        raise TypeError(f"{what}: out has dtype {dtype_name(out.dtype)}, expected {dtype_name(dtype)}")
    if out.device != device:
        raise ValueError(f"{what}: out is on device '{out.device}', expected '{device}'")
    if not out.is_contiguous():
        raise ValueError(f"{what}: out has strides {tuple(out.stride())}, expected a contiguous tensor")


HEAD_DIMS = (16, 32, 64, 128)
ATTENTION_DTYPES = {
    "gpu": (torch.float16, torch.bfloat16),
    "interpreter": (torch.float16, torch.float32),
}
MAX_BATCH_HEADS = 65535  # B * H is a launch-grid dimension, which CUDA caps at 65535


def out_or_new(out, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, what: str) -> torch.Tensor:
    """The output buffer of a wrapper: a caller's ``out`` checked by :func:`check_out`, or, when it is None, a new
    contiguous tensor of that shape, dtype and device."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    check_out(out, shape, dtype, device, what)
    return out


def check_qkv(q, k, v, causal, sm_scale, what: str) -> tuple[int, int, int, int, float]:
    """Validate attention inputs; return ``(B, H, N, D, sm_scale)``.

    q, k and v must be rank-4 (B, H, N, D) tensors of the same shape, dtype and device, with
    D in HEAD_DIMS. ``causal`` must be a bool; ``sm_scale`` a positive real number or None
    (None means 1 / sqrt(D)).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, what)
        check_device(name, t, what)
        check_dtype(name, t, ATTENTION_DTYPES, what)
        check_rank4(name, t, what)
    return check_qkv_alike(q, k, v, causal, sm_scale, what)


def check_rank4(name: str, t: torch.Tensor, what: str) -> None:
    """``t`` must be a rank-4 (B, H, N, D) tensor."""
    if t.dim() != 4:
        raise ValueError(f"{what}: {name} has shape {tuple(t.shape)} (rank {t.dim()}), "
                         f"expected rank 4 (B, H, N, D)")


def check_qkv_alike(q, k, v, causal, sm_scale, what: str,
                    head_dims: tuple[int, ...] = HEAD_DIMS) -> tuple[int, int, int, int, float]:
    """The checks every attention kernel shares once q, k and v are rank-4 tensors: one shape, dtype and device,
    D in ``head_dims``, B, H, N >= 1, B * H within one grid dimension, a bool ``causal`` and a finite positive
    ``sm_scale`` (None means 1 / sqrt(D)); returns ``(B, H, N, D, sm_scale)``."""
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"{what}: q, k, v have shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}, "
                         f"expected one shape (B, H, N, D) for all three")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{what}: q, k, v have dtypes {dtype_name(q.dtype)}, {dtype_name(k.dtype)}, "
                        f"{dtype_name(v.dtype)}, expected one dtype for all three")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{what}: q, k, v are on {q.device}, {k.device}, {v.device}, expected one device")
    B, H, N, D = q.shape
    if D not in head_dims:
        raise ValueError(f"{what}: head dim D={D} is not supported, expected one of {head_dims}")
    if N < 1 or B < 1 or H < 1:
        raise ValueError(f"{what}: shape (B, H, N, D) = {tuple(q.shape)}, expected B, H, N >= 1")
    if B * H > MAX_BATCH_HEADS:
        raise ValueError(f"{what}: B * H = {B * H}, expected at most {MAX_BATCH_HEADS} (one grid dimension)")
    if not isinstance(causal, bool):
        raise TypeError(f"{what}: causal is {causal!r} ({type(causal).__name__}), expected True or False")
    if sm_scale is None:
        sm_scale = D ** -0.5
    elif isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)):
        raise TypeError(f"{what}: sm_scale is {sm_scale!r} ({type(sm_scale).__name__}), expected a float or None")
    elif not (sm_scale > 0 and sm_scale < float("inf")):
        raise ValueError(f"{what}: sm_scale is {sm_scale}, expected a finite number > 0")
    return B, H, N, D, float(sm_scale)


def check_tma_operands(what: str, contiguous_fix: str, **tensors: torch.Tensor) -> None:
    """Each tensor must be contiguous and start 16-byte aligned, as a TMA descriptor needs; ``contiguous_fix``
    is the parenthesis the contiguity error ends with (what to do instead)."""
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"{what}: {name} has strides {tuple(t.stride())}, expected a contiguous tensor "
                             f"({contiguous_fix})")
        if t.data_ptr() % 16:
            raise ValueError(f"{what}: {name} starts at address {t.data_ptr():#x}, expected a 16-byte-aligned "
                             f"start (TMA); call .clone()")
