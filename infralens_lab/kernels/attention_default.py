"""Which fast attention kernel the package runs, decided in one place: ``attention_default``.

Two fast forwards exist. ``attn_fwd_fast`` (:mod:`.attention_fast`, Triton ``tl``) runs on every GPU class and in
Triton's interpreter on a CPU. ``attn_fwd_gluon`` (:mod:`.attention_gluon`, Gluon: a TMA producer warp and two
consumer warpgroups that take turns on the tensor cores) runs only on Hopper (sm_90). The rule, :func:`choose`:

* Hopper (compute capability 9.x), a CUDA run, head dim D in :data:`GLUON_HEAD_DIMS`, fp16 or bf16: the Gluon kernel;
* anything else (another GPU class, D = 64, fp32, the interpreter on a CPU): ``attn_fwd_fast``, as before.

Why D = 128 only: docs/kernels_notes.md, run 12 (an H200, three processes with interleaved rounds): there the
Gluon kernel met the issue's bar (at least 0.95x SDPA's default) in every D = 128 case and stayed below 1.0x
in every D = 64 case, where ``attn_fwd_fast`` stays the default. Every caller can say which kernel ran:
:func:`choose_for` gives the :class:`Choice` for the tensors it was handed, :func:`kernel_line` the sentence a
lab prints beside a profile.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .. import device
from ._validate import dtype_name
from .arch import cc_int

GLUON_HEAD_DIMS = (128,)  # where attn_fwd_gluon is the default: docs/kernels_notes.md, run 12
GLUON_DTYPES = (torch.float16, torch.bfloat16)  # wgmma operands; fp32 stays on attn_fwd_fast
RUN = "docs/kernels_notes.md, run 12"


class Choice(NamedTuple):
    """One dispatch decision: ``kernel`` (the name the profilers show), ``function`` (the package's wrapper that
    launches it) and ``why`` (the rule's reason, in words)."""

    kernel: str
    function: str
    why: str


FAST = "attn_fwd_fast", "kernels.attention_fast.attention_tiled_fast"
GLUON = "attn_fwd_gluon", "kernels.attention_gluon.attention_gluon"


def choose(head_dim: int, dtype, cc, on_gpu: bool = True) -> Choice:
    """The kernel :func:`attention_default` runs for head dim ``head_dim``, torch ``dtype`` and compute capability
    ``cc`` (``(9, 0)``, ``90``, ``'9.0'``, ``'sm_90'``; None: no GPU), with ``on_gpu`` False for Triton's
    interpreter on a CPU. A pure function of its arguments, so the rule is tested with a faked capability."""
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 1:
        raise ValueError(f"choose: head_dim is {head_dim!r}, expected a positive int (the D of (B, H, N, D))")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"choose: dtype is {dtype!r} ({type(dtype).__name__}), expected a torch.dtype")
    if not on_gpu or cc is None:
        return Choice(*FAST, "no GPU here: the Gluon kernel has no interpreter, attn_fwd_fast runs in Triton's")
    major = cc_int(cc) // 10
    if major != 9:
        return Choice(*FAST, f"compute capability {major}.x, not Hopper (9.x): the Gluon kernel is sm_90 only")
    if head_dim not in GLUON_HEAD_DIMS:
        dims = " and ".join(map(str, GLUON_HEAD_DIMS))
        return Choice(*FAST, f"Hopper at D = {head_dim}: the Gluon kernel is the default only at D = {dims}; it was "
                             f"below SDPA's default at D = 64 ({RUN})")
    if dtype not in GLUON_DTYPES:
        return Choice(*FAST, f"Hopper at D = {head_dim} in {dtype_name(dtype)}: the Gluon kernel takes fp16 and "
                             "bf16 only (wgmma operands)")
    return Choice(*GLUON, f"Hopper at D = {head_dim} in {dtype_name(dtype)}: at least 0.95x SDPA's default in "
                          f"every D = 128 case measured ({RUN})")


def choose_for(q: torch.Tensor) -> Choice:
    """:func:`choose` for the tensor ``q`` (B, H, N, D) as it is: its head dim, dtype, and the capability of the
    CUDA device it sits on (a CPU tensor: no GPU)."""
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        seen = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ValueError(f"choose_for: q is {seen}, expected a rank-4 torch.Tensor (B, H, N, D)")
    on_gpu = q.device.type == "cuda" and device.is_gpu()
    cc = torch.cuda.get_device_capability(q.device) if on_gpu else None
    return choose(q.shape[-1], q.dtype, cc, on_gpu)


def attention_default(q, k, v, causal: bool = False, sm_scale: float | None = None,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """The package's fast attention forward: the kernel :func:`choose_for` picks for ``q`` (``attn_fwd_gluon`` on
    Hopper at D = 128 in fp16/bf16, ``attn_fwd_fast`` elsewhere); returns O (B, H, N, D) in q's dtype. Each
    wrapper checks its inputs and names what it refuses."""
    c = choose_for(q)
    if c.kernel == GLUON[0]:
        from .attention_gluon import attention_gluon  # lazy: Gluon kernels are defined only when they run

        return attention_gluon(q, k, v, causal=causal, sm_scale=sm_scale, out=out)
    from .attention_fast import attention_tiled_fast  # lazy: the tuned kernel only when it runs

    return attention_tiled_fast(q, k, v, causal=causal, sm_scale=sm_scale, out=out)


def kernel_line(shape, dtype, cc, profiled: str) -> str:
    """The line a lab prints beside a profile of kernel ``profiled`` at ``shape`` (B, H, N, D), ``dtype`` (torch's, or
    a label's ``fp16``/``bf16``/``fp32``) on
    a GPU of capability ``cc``: which kernel the package's default runs there, and whether that is the one shown."""
    B, H, N, D = shape
    if isinstance(dtype, str):  # a run label's name: fp16, bf16, fp32 (or torch's float16, ...)
        names = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
        want = names.get(dtype, getattr(torch, dtype, None))
        if not isinstance(want, torch.dtype):
            raise ValueError(f"kernel_line: dtype {dtype!r}, expected a torch.dtype or one of {sorted(names)}")
        dtype = want
    c = choose(int(D), dtype, cc)
    same = ("the kernel profiled here" if c.kernel == profiled
            else f"not the kernel profiled here ({profiled})")
    return (f"kernel profiled: {profiled}, at (B, H, N, D) = ({B}, {H}, {N}, {D}) {dtype_name(dtype)} on "
            f"sm_{cc_int(cc)}; the package's default attention (kernels.attention_default) runs {c.kernel} there, "
            f"{same}: {c.why}")
