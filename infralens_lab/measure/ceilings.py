"""The measured ceilings: torch ``copy_`` bandwidth and cuBLAS matmul rates, on a GPU.

:func:`measure` returns ``(values, units, notes)``, what the recorder's ``ceilings`` step writes and
what lab 02 shows live (:class:`infralens_lab.analysis.hardware.Ceilings` reads the values). Copy:
torch ``copy_`` of 1 GiB fp32, bytes read + written, CUDA events. Matmul: ``a @ b`` at 8192³ for fp32
(TF32 off), tf32, fp16, bf16, plus an fp16 size sweep (inputs rotated over several sets when they fit
in L2). FLOPs = 2·M·N·K; ``min_bytes`` = (M·K + K·N + M·N) · element size. SI units.
"""
from __future__ import annotations

import torch

from .timing import rotation_count, time_fn

MATMUL_SIZES = (256, 512, 1024, 2048, 4096, 8192)
UNITS = {"bandwidth_bytes_per_s": "byte/s", "flops_per_s": "FLOP/s", "median_ms": "ms", "flops": "FLOP",
         "min_bytes": "byte", "intensity": "FLOP/byte"}
NOTES = ("copy: torch copy_ of 1 GiB fp32, bytes read + written. matmul: torch a @ b (cuBLAS), "
         "flops = 2*M*N*K, min_bytes = (M*K + K*N + M*N) * element size (each operand once). "
         "fp32 has TF32 off. Sweep: inputs rotated over several sets when they fit in L2.")


def matmul(n: int, dtype, name: str, reps: int, sets: int = 1) -> dict:
    """One timed square matmul of size ``n`` (CUDA events): FLOPs, minimum bytes, FLOP/s, timing fields."""
    pairs = [(torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype))
             for _ in range(sets)]
    t = time_fn(lambda a, b: a @ b, warmup=3, repeats=reps, rotate=pairs)
    flops, size = 2 * n ** 3, torch.empty((), dtype=dtype).element_size()
    min_bytes = 3 * n * n * size
    return {"dtype": name, "M": n, "N": n, "K": n, "flops": flops, "min_bytes": min_bytes,
            "intensity": flops / min_bytes, "flops_per_s": flops / (t.median_ms * 1e-3), "input_sets": sets,
            **t.as_dict()}


def measure(quick: bool = False) -> tuple[dict, dict, str]:
    """``(values, units, notes)`` of the ceilings on this GPU (see module doc); ``quick``: fewer repeats
    and every other sweep size."""
    reps = 5 if quick else 20
    src = torch.randn(2**28, device="cuda")  # 1 GiB of fp32
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src), warmup=3, repeats=reps)
    moved = 2 * src.numel() * 4
    copy = {"bytes_moved": moved, "bandwidth_bytes_per_s": moved / (t.median_ms * 1e-3), **t.as_dict()}
    src = dst = None  # free 2 GiB before the matmuls (None, not del: the timed lambda closes over them)
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    rows, old = [], torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dt in dtypes.items():
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            rows.append(matmul(8192, dt, name, reps=3 if quick else 10))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    sweep = []
    for n in MATMUL_SIZES[::2] if quick else MATMUL_SIZES:
        sets = rotation_count(3 * n * n * 2)
        sweep.append(matmul(n, torch.float16, "fp16", reps=10 if quick else 30, sets=sets))
    return {"copy": copy, "matmul": rows, "sweep": sweep}, dict(UNITS), NOTES
