"""What each NVIDIA architecture class gets from the kernels: dtypes, shared memory, the fast attention variant.

The labs run on whatever GPU a learner has. Triton compiles every kernel here for each class in :data:`ARCHS`
(tests/test_arch_compile.py compiles them on CPU with ``tools/arch_compile_check.py``), but what the compiler makes
of ``attn_fwd_fast`` differs: Hopper turns its tensor descriptors into TMA copies and its ``tl.dot`` into
asynchronous ``wgmma``; Ampere and Ada have no TMA, so Triton rewrites the descriptors into ordinary loads and the
dots into ``mma.sync``; Triton 3.6 emits no tensor-core instruction for Turing at all. :func:`attention_variant`
names the variant for a compute capability and says why, from the same table the compile test checks against
the PTX, and :func:`fits_shared` is the shared-memory limit the fast kernel's autotuner prunes with.

Compute capabilities are ints as Triton's ``GPUTarget`` takes them (``90`` for 9.0); :func:`cc_int` converts
torch's ``(9, 0)`` or the ``'9.0'`` of :class:`~infralens_lab.device.DeviceFacts`.
"""
from __future__ import annotations

from typing import NamedTuple

from ..errors import InfraLensError


class UnknownArchError(InfraLensError, ValueError):
    """A compute capability outside the architecture classes the labs know (:data:`ARCHS`)."""


class Arch(NamedTuple):
    """One architecture class: its name, the GPUs a learner may have of it, the dtypes its tensor cores (or, for
    fp32, CUDA cores) take, and the most shared memory one block may opt in to (bytes)."""

    name: str
    examples: str
    dtypes: tuple[str, ...]
    max_shared_per_block: int


KIB = 1024
# Maximum shared memory per thread block (opt-in, cudaFuncAttributeMaxDynamicSharedMemorySize): CUDA C++ Programming
# Guide, "Compute Capabilities", technical specifications table, row "Maximum amount of shared memory per thread
# block" (the default without opt-in is 48 KiB everywhere). Triton opts in itself and refuses a launch above it.
# dtypes: no bf16 on sm_75 (Turing's tensor cores take fp16 and int8 only; analysis.hardware.PEAK_PER_CYCLE has no
# bf16 row for 7.5, and tests/test_arch_compile.py checks the two tables agree).
ARCHS: dict[int, Arch] = {
    75: Arch("Turing", "T4 (Colab, Kaggle), RTX 20", ("fp32", "fp16"), 64 * KIB),
    80: Arch("Ampere", "A100", ("fp32", "fp16", "bf16"), 163 * KIB),
    86: Arch("Ampere", "RTX 30, A10, A40", ("fp32", "fp16", "bf16"), 99 * KIB),
    89: Arch("Ada", "L4, L40S, RTX 40", ("fp32", "fp16", "bf16"), 99 * KIB),
    90: Arch("Hopper", "H100, H200", ("fp32", "fp16", "bf16"), 227 * KIB),
    100: Arch("Blackwell", "B200, GB200", ("fp32", "fp16", "bf16"), 227 * KIB),
    120: Arch("Blackwell (consumer)", "RTX 50, RTX PRO 6000", ("fp32", "fp16", "bf16"), 99 * KIB),
}
SHARED_SOURCE = ("CUDA C++ Programming Guide, Compute Capabilities: maximum amount of shared memory per thread block "
                 "(kernels.arch.ARCHS)")


def cc_int(cc) -> int:
    """``90`` from ``90``, ``'9.0'``, ``(9, 0)`` or ``'sm_90'``; :class:`UnknownArchError` for anything else."""
    if isinstance(cc, bool):
        raise UnknownArchError(f"compute capability {cc!r}; expected an int like 90, '9.0' or (9, 0)")
    if isinstance(cc, int):
        return cc
    if isinstance(cc, tuple) and len(cc) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in cc):
        return cc[0] * 10 + cc[1]
    if isinstance(cc, str):
        s = cc.strip().lower().removeprefix("sm_")
        major, dot, minor = s.partition(".")
        if major.isdigit() and (not dot or minor.isdigit()) and (dot or len(s) >= 2):
            return int(major) * 10 + int(minor) if dot else int(s)
    raise UnknownArchError(f"compute capability {cc!r}; expected an int like 90, '9.0', 'sm_90' or (9, 0)")


def arch_of(cc) -> Arch:
    """The :class:`Arch` of compute capability ``cc`` (any form :func:`cc_int` takes); an unknown minor version
    of a known family (8.7, 10.3, 12.1) counts as the family's row with the nearest lower minor version."""
    n = cc_int(cc)
    if n in ARCHS:
        return ARCHS[n]
    same_major = [k for k in ARCHS if k // 10 == n // 10 and k < n]
    if n < min(ARCHS) or not same_major:
        raise UnknownArchError(f"compute capability {n // 10}.{n % 10} (sm_{n}) is not an architecture the labs "
                               f"know; expected one of {', '.join(f'sm_{k}' for k in ARCHS)} (Triton 3.6 "
                               f"compiles for sm_75 and newer)")
    return ARCHS[max(same_major)]


def _family(cc) -> int:
    n = cc_int(cc)
    arch_of(n)  # raises for an unknown one
    return max(k for k in ARCHS if k <= n and k // 10 == n // 10)


class Variant(NamedTuple):
    """How ``attn_fwd_fast`` compiles on one architecture: ``name`` (``tma-wgmma`` ...), ``copies`` (``tma`` or
    ``loads``: the instruction moving the K/V tiles), ``mma`` (``wgmma``, ``tcgen05``, ``mma.sync`` or ``fma``: the
    instruction behind ``tl.dot``), ``ws`` (whether a warp-specialized config may run) and ``reason``."""

    name: str
    copies: str
    mma: str
    ws: bool
    reason: str


_TMA = "tensor descriptors compile to TMA bulk copies (cp.async.bulk.tensor)"
_NO_TMA = ("no TMA before sm_90: Triton rewrites the tensor descriptors into ordinary pointer loads, which its "
           "pipeliner leaves synchronous (no cp.async in the PTX, unlike the teaching kernel attn_fwd's loads), so "
           "num_stages buys nothing here")
_VARIANTS: dict[int, tuple[str, str, bool, str]] = {
    75: ("loads", "fma", False, _NO_TMA + "; Triton 3.6 emits no tensor-core instruction for sm_75, so tl.dot "
         "runs as FMAs on the CUDA cores (the fp16 tensor cores of a T4 stay idle) and the two-halves overlap "
         "has nothing to overlap with"),
    80: ("loads", "mma.sync", False, _NO_TMA + "; tl.dot is the synchronous mma.sync, so half 1's softmax "
         "waits for half 0's P V instead of overlapping it"),
    90: ("tma", "wgmma", True, _TMA + "; tl.dot is the asynchronous wgmma, so half 1's softmax overlaps half "
         "0's P V: the variant the kernel was written and tuned for (H100)"),
    100: ("tma", "tcgen05", False, _TMA + "; tl.dot is Blackwell's tcgen05.mma (accumulator in tensor memory); "
          "tuned on an H100, not on this GPU"),
    120: ("tma", "mma.sync", False, _TMA + "; consumer Blackwell has no wgmma or tcgen05, so tl.dot is the "
          "synchronous mma.sync of sm_80 and the two halves do not overlap"),
}


def attention_variant(cc) -> tuple[str, str]:
    """``(name, reason)`` of the fast attention kernel on a GPU of compute capability ``cc``: the name says how
    its tiles move and what runs ``tl.dot`` (``tma-wgmma`` on Hopper, ``loads-mma.sync`` on Ampere and Ada,
    ``loads-fma`` on Turing ...), the reason says why, in one sentence. :func:`attention_variant_info` has the
    parts. tests/test_arch_compile.py checks every name against the PTX Triton makes for that target."""
    v = attention_variant_info(cc)
    return v.name, v.reason


def attention_variant_info(cc) -> Variant:
    """The :class:`Variant` of ``attn_fwd_fast`` for compute capability ``cc`` (see :func:`attention_variant`)."""
    fam = _family(cc)
    base = 80 if fam in (80, 86, 89) else fam
    copies, mma, ws, why = _VARIANTS[base]
    arch = ARCHS[fam]
    reason = f"sm_{cc_int(cc)} ({arch.name}): {why}"
    if not ws:
        reason += "; no warp-specialized config (measured on Hopper only)"
    return Variant(f"{copies}-{mma}", copies, mma, ws, reason)


def fits_shared(shared_bytes: int, cc) -> bool:
    """Whether a kernel that needs ``shared_bytes`` of shared memory per block can launch on compute capability
    ``cc`` (at most the arch's opt-in maximum, :data:`ARCHS`)."""
    return shared_bytes <= arch_of(cc).max_shared_per_block


def shared_estimate(block_m: int, block_n: int, head_dim: int, num_stages: int, elem_bytes: int, cc) -> int:
    """An upper bound (bytes) on the shared memory ``attn_fwd_fast`` asks for with these tiles on ``cc``: the Q
    tile once, and ``num_stages`` buffers of the K and V tiles (``elem_bytes`` each), plus 1 KiB for barriers
    and layout conversions. tests/test_arch_compile.py checks it against what Triton allocates for every
    candidate the autotuner may try on every architecture, so that pruning with it never keeps a config that cannot
    launch. It bounds those candidates only: on sm_75, where ``tl.dot`` runs as FMAs with its operands staged in
    shared memory, larger tiles than :data:`~infralens_lab.kernels.attention_fast.FMA_CANDIDATES` took more."""
    q = block_m * head_dim * elem_bytes
    kv = 2 * num_stages * block_n * head_dim * elem_bytes
    arch_of(cc)  # raises for an unknown architecture
    return q + kv + KIB


def kernel_dtypes(cc) -> tuple[str, ...]:
    """The dtypes the labs' kernels run in on compute capability ``cc`` (``fp32``, ``fp16``, ``bf16``)."""
    return arch_of(cc).dtypes


VERIFIED_LIVE = {90: "H100, H200 (the recorded sets)"}  # classes whose live timing and ncu counters ran here


def support_markdown() -> str:
    """The README's "What works on each architecture class" table, generated from :data:`ARCHS` and
    :func:`attention_variant` (tests/test_arch_compile.py checks the README holds exactly this)."""
    head = ("| class | GPUs | live timing | ncu counters | kernel dtypes | shared memory / block | fast attention "
            "variant | run here |")
    rows = [head, "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cc, a in ARCHS.items():
        v = attention_variant_info(cc)
        rows.append(f"| sm_{cc} {a.name} | {a.examples} | yes | yes, the same metric names | {', '.join(a.dtypes)} | "
                    f"{a.max_shared_per_block // KIB} KiB | `{v.name}` | "
                    f"{VERIFIED_LIVE.get(cc, 'compiled on CPU only')} |")
    return "\n".join(rows)
