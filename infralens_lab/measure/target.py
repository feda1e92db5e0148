"""The workload Nsight Compute (or Nsight Systems) profiles: one kernel family, run a few times.

``python -m infralens_lab target --kernel {copy,copy_strided,copy_edit,naive,tiled,tiled_fast,gluon,sdpa,matmul,train_step}
[--stride S] [--source FILE --name KERNEL] [--shape B,H,N,D] [--n N] [--dtype fp16|fp32|bf16] [--causal] [--size M,N,K]
[--warmup W] [--iters I]``

Inputs are fresh seeded random tensors. The target runs ``W`` warm-up iterations (JIT compile,
autotuning, cuBLAS heuristics), then ``I`` measured iterations inside a push/pop NVTX range
named ``infralens`` (what ``ncu --nvtx --nvtx-include infralens/`` selects), synchronises and
exits. It prints nothing on success, because ncu's CSV shares its stdout.

Launches per iteration, by kernel name (so a runner without NVTX filtering can pick
``--launch-skip = W * launches`` and ``--launch-count = I * launches``), listed in
:data:`LAUNCHES`: ``copy`` 1 × ``copy_coalesced``; ``copy_strided`` 1 × ``copy_strided``;
``naive`` 1 each of ``naive_qk``, ``naive_softmax``, ``naive_pv``; ``tiled`` 1 × ``attn_fwd``;
``tiled_fast`` 1 × ``attn_fwd_fast``; ``gluon`` 1 × ``attn_fwd_gluon`` (Hopper only: the kernel refuses any other
GPU by name); ``copy_edit`` 1 × the ``@triton.jit`` kernel ``--name`` of the module file
``--source`` (lab 04's edited strided copy: the signature of ``copy_strided``, launched as it is) (autotuning, if any, launches extra copies during the first
warm-up iteration only: use NVTX filtering or W >= 1); ``sdpa``, ``matmul`` and ``train_step``
launch library kernels whose names and counts depend on the GPU and library versions
(``None`` in the table; profile them with NVTX filtering). For ``matmul`` the inputs are made on
the CPU and copied, so every kernel the process launches is a matmul kernel.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import device as device_mod  # the module: its mode is decided (and patched in tests) at run time
from ..units import MiB

KERNELS = ("copy", "copy_strided", "copy_edit", "naive", "tiled", "tiled_fast", "gluon", "sdpa", "matmul", "train_step")
DTYPES = {"fp16": "float16", "fp32": "float32", "bf16": "bfloat16"}
# kernel family -> {Triton kernel name: launches per iteration}; None = library kernels, count varies
LAUNCHES: dict[str, dict[str, int] | None] = {
    "copy": {"copy_coalesced": 1},
    "copy_strided": {"copy_strided": 1},
    "copy_edit": None,  # the edited kernel's name is --name; one launch per iteration
    "naive": {"naive_qk": 1, "naive_softmax": 1, "naive_pv": 1},
    "tiled": {"attn_fwd": 1},
    "tiled_fast": {"attn_fwd_fast": 1},
    "gluon": {"attn_fwd_gluon": 1},
    "sdpa": None,
    "matmul": None,
    "train_step": None,
}
# kernel-name regex for ncu --kernel-name regex:...
REGEX = {"copy": "copy_coalesced", "copy_strided": "copy_strided", "copy_edit": ".", "naive": "naive_",
         "tiled": "attn_fwd", "tiled_fast": "attn_fwd_fast", "gluon": "attn_fwd_gluon", "sdpa": ".", "matmul": ".", "train_step": "."}


def launch_window(kernel: str, warmup: int, iters: int) -> tuple[str, int, int | None]:
    """``(regex, launch_skip, launch_count)`` selecting the measured launches of ``kernel`` by counting
    (no NVTX). ``launch_count`` is None (all) for library kernels whose count is unknown."""
    if kernel not in LAUNCHES:
        raise ValueError(f"kernel {kernel!r}; expected one of {KERNELS}")
    per = LAUNCHES[kernel]
    if per is None:
        return REGEX[kernel], 0, None
    k = sum(per.values())
    return REGEX[kernel], warmup * k, iters * k


def subprocess_env() -> tuple[str, dict]:
    """``(cwd, env)`` for running ``python -m infralens_lab target`` under a profiler: the folder holding
    this package, also put on ``PYTHONPATH`` so the target imports it even when it is not installed."""
    root = str(Path(__file__).resolve().parents[2])
    return root, dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))


def _ints(text: str, n: int, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}={text!r}; expected {n} comma-separated integers") from None
    if len(vals) != n or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{what}={text!r}; expected {n} comma-separated positive integers")
    return vals


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m infralens_lab target", description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", required=True, choices=KERNELS)
    ap.add_argument("--stride", type=int, default=1, help="copy_strided: element stride of the reads")
    ap.add_argument("--source", help="copy_edit: a Python file defining the edited @triton.jit kernel")
    ap.add_argument("--name", help="copy_edit: the kernel's name in --source")
    ap.add_argument("--shape", type=lambda s: _ints(s, 4, "--shape"), default=(1, 8, 2048, 64),
                    help="attention: B,H,N,D")
    ap.add_argument("--n", type=int, default=64 * MiB // 4, help="copies: output (useful) elements")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                    help="fp32 for copies, fp16 for attention and matmul unless given")
    ap.add_argument("--causal", action="store_true", help="attention: causal mask")
    ap.add_argument("--size", type=lambda s: _ints(s, 3, "--size"), default=(4096, 4096, 4096), help="matmul: M,N,K")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=1)
    return ap


def build(args) -> callable:
    """Allocate inputs for ``args`` and return a zero-argument function running one iteration."""
    import torch  # lazy: torch loads only when this runs, so importing the module (and --help) stays light

    dev = device_mod.torch_device()
    torch.manual_seed(0)
    dtype = getattr(torch, DTYPES[args.dtype or ("fp32" if args.kernel.startswith("copy") else "fp16")])
    if args.kernel == "copy_edit":
        return _edited_copy(args, dev, dtype)
    if args.kernel in ("copy", "copy_strided"):
        from ..kernels import copies  # lazy: defines Triton kernels / models only when this runs

        stride = 1 if args.kernel == "copy" else args.stride
        x = torch.randn(args.n * stride, device=dev, dtype=dtype)
        if args.kernel == "copy":
            out = torch.empty_like(x)
            return lambda: copies.copy(x, out=out)
        out = torch.empty(args.n, device=dev, dtype=dtype)
        return lambda: copies.copy_strided(x, stride, out=out)
    if args.kernel in ("naive", "tiled", "tiled_fast", "gluon", "sdpa"):
        q, k, v = (torch.randn(args.shape, device=dev, dtype=dtype) for _ in range(3))
        if args.kernel == "sdpa":
            import torch.nn.functional as F  # lazy: torch loads only when this runs, so importing the module (and --help) stays light

            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
        if args.kernel == "gluon":
            from ..kernels.attention_gluon import attention_gluon  # lazy: Gluon kernels only when this runs

            return lambda: attention_gluon(q, k, v, causal=args.causal)
        from ..kernels import attention  # lazy: defines Triton kernels / models only when this runs

        fn = attention.VARIANTS[args.kernel]
        return lambda: fn(q, k, v, causal=args.causal)
    if args.kernel == "matmul":
        m, n, kk = args.size
        a = torch.randn(m, kk, dtype=dtype).to(dev)  # made on the CPU and copied: no init kernels
        b = torch.randn(kk, n, dtype=dtype).to(dev)
        return lambda: a @ b
    from ..workloads.pipeline import make_step  # lazy: defines Triton kernels / models only when this runs

    return make_step("fixed", device=dev)


def _edited_copy(args, dev, dtype) -> callable:
    """One launch of the kernel ``args.name`` of the file ``args.source`` on the strided copy's workload
    (``args.n`` records of ``args.stride`` values), launched as :func:`infralens_lab.kernels.copies.copy_strided` is."""
    import importlib.util

    import torch  # lazy: torch loads only when this runs, so importing the module (and --help) stays light

    from ..kernels import copies  # lazy: defines Triton kernels / models only when this runs

    if not args.source or not args.name:
        raise SystemExit("target: --kernel copy_edit needs --source FILE and --name KERNEL")
    spec = importlib.util.spec_from_file_location("infralens_edit_kernel", args.source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = getattr(module, args.name)
    x = torch.randn(args.n * args.stride, device=dev, dtype=dtype)
    out = torch.empty(args.n, device=dev, dtype=dtype)
    grid = (-(-args.n // copies.BLOCK),)
    return lambda: kernel[grid](x, out, args.n, STRIDE=args.stride, BLOCK=copies.BLOCK, num_warps=copies.NUM_WARPS)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name in ("warmup", "iters", "stride", "n"):
        lo = 0 if name == "warmup" else 1
        if getattr(args, name) < lo:
            print(f"target: --{name} is {getattr(args, name)}; expected an int >= {lo}", file=sys.stderr)
            return 2
    import torch  # lazy: torch loads only when this runs, so importing the module (and --help) stays light

    fn = build(args)
    for _ in range(args.warmup):
        fn()
    device_mod.synchronize()
    gpu = device_mod.is_gpu()
    if gpu:
        torch.cuda.nvtx.range_push("infralens")
    for _ in range(args.iters):
        fn()
    if gpu:
        torch.cuda.nvtx.range_pop()
    device_mod.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
