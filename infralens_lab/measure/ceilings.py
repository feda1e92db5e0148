"""The measured ceilings: torch ``copy_`` bandwidth and cuBLAS matmul rates, on a GPU, with the SM clock they ran at.

:func:`measure` returns ``(values, units, notes)``, what the recorder's ``ceilings`` step writes and
what lab 02 shows live (:class:`infralens_lab.analysis.hardware.Ceilings` reads the values). Copy:
torch ``copy_`` of 1 GiB fp32, bytes read + written, CUDA events. Matmul: ``a @ b`` at 8192³ for fp32
(TF32 off), tf32, fp16, bf16, plus an fp16 size sweep (inputs rotated over several sets when they fit
in L2). FLOPs = 2·M·N·K; ``min_bytes`` = (M·K + K·N + M·N) · element size. SI units.

Two additions for lab 02 (issue 26): each measurement's ``sm_clock_hz``, the median SM clock nvidia-smi
reported while the same operation ran back to back for about a second (the GPU's own clock policy, nothing
locked; None without nvidia-smi), and, per sweep size, ``batched_ms`` (one CUDA-event pair around all the
repeats, divided by their number: calls back to back with nothing recorded between them) and
``cpu_issue_ms`` (host wall time to issue them, per call), so the host gap of a small matmul can be held
against the kernel's own duration (ncu ``gpu__time_duration``).
"""
from __future__ import annotations

import shutil
import statistics
import subprocess
import time

import torch

from .timing import rotation_count, time_fn

MATMUL_SIZES = (256, 512, 1024, 2048, 4096, 8192)
CLOCK_SECONDS = 1.0  # how long each operation runs back to back while nvidia-smi samples the SM clock
UNITS = {"bandwidth_bytes_per_s": "byte/s", "flops_per_s": "FLOP/s", "median_ms": "ms", "flops": "FLOP",
         "min_bytes": "byte", "intensity": "FLOP/byte", "sm_clock_hz": "Hz", "batched_ms": "ms",
         "cpu_issue_ms": "ms"}
NOTES = ("copy: torch copy_ of 1 GiB fp32, bytes read + written. matmul: torch a @ b (cuBLAS), "
         "flops = 2*M*N*K, min_bytes = (M*K + K*N + M*N) * element size (each operand once). "
         "fp32 has TF32 off. Sweep: inputs rotated over several sets when they fit in L2; median_ms: an event pair "
         "around each call, calls back to back; batched_ms: one event pair around all repeats / repeats; "
         "cpu_issue_ms: host time to issue them / repeats. sm_clock_hz: median of nvidia-smi clocks.sm samples "
         f"while the operation ran back to back for {CLOCK_SECONDS:g} s (clocks not locked; None without nvidia-smi).")


def parse_clock_samples(text: str, skip: int = 2) -> float | None:
    """The median of nvidia-smi ``clocks.sm`` samples (MHz, one a line, ``--format=csv,noheader,nounits``) after
    the first ``skip`` (taken before the load had started), in Hz; None when there are none."""
    vals = []
    for ln in text.splitlines():
        try:
            vals.append(float(ln.strip()))
        except ValueError:
            continue  # "[N/A]", blank lines, error text
    vals = vals[skip:] if len(vals) > skip else vals
    return statistics.median(vals) * 1e6 if vals else None


def sm_clock_under(fn, seconds: float = CLOCK_SECONDS, interval_ms: int = 50) -> float | None:
    """Median SM clock (Hz) nvidia-smi reports while ``fn`` runs back to back for ``seconds``; None when
    nvidia-smi is absent or reports nothing. The clock is the GPU's own choice (boost, power, heat)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    cmd = [exe, "-i", str(torch.cuda.current_device()), "--query-gpu=clocks.sm", "--format=csv,noheader,nounits",
           f"-lms={interval_ms}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(4):
                fn()
            torch.cuda.synchronize()
    finally:
        proc.terminate()
        try:
            out = proc.communicate(timeout=5)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
    return parse_clock_samples(out or "")


def batched(fn, args_sets: list, reps: int) -> dict:
    """``reps`` calls of ``fn`` back to back (rotating over ``args_sets``) between one pair of CUDA events:
    ``batched_ms`` (event time / reps) and ``cpu_issue_ms`` (host wall time to issue them / reps)."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for i in range(reps):
        fn(*args_sets[i % len(args_sets)])
    issue = time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    return {"batched_ms": start.elapsed_time(end) / reps, "cpu_issue_ms": issue * 1e3 / reps}


def matmul(n: int, dtype, name: str, reps: int, sets: int = 1, clock: bool = False) -> dict:
    """One timed square matmul of size ``n`` (CUDA events): FLOPs, minimum bytes, FLOP/s, timing fields, the
    batched per-call time and, with ``clock``, the SM clock under a second of the same matmul."""
    pairs = [(torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype))
             for _ in range(sets)]
    t = time_fn(lambda a, b: a @ b, warmup=3, repeats=reps, rotate=pairs)
    flops, size = 2 * n ** 3, torch.empty((), dtype=dtype).element_size()
    min_bytes = 3 * n * n * size
    out = {"dtype": name, "M": n, "N": n, "K": n, "flops": flops, "min_bytes": min_bytes,
           "intensity": flops / min_bytes, "flops_per_s": flops / (t.median_ms * 1e-3), "input_sets": sets,
           **t.as_dict(), **batched(lambda a, b: a @ b, pairs, reps)}
    if clock:
        out["sm_clock_hz"] = sm_clock_under(lambda: pairs[0][0] @ pairs[0][1])
    return out


def measure(quick: bool = False) -> tuple[dict, dict, str]:
    """``(values, units, notes)`` of the ceilings on this GPU (see module doc); ``quick``: fewer repeats,
    every other sweep size, no clock sampling."""
    reps = 5 if quick else 20
    src = torch.randn(2**28, device="cuda")  # 1 GiB of fp32
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src), warmup=3, repeats=reps)
    moved = 2 * src.numel() * 4
    copy = {"bytes_moved": moved, "bandwidth_bytes_per_s": moved / (t.median_ms * 1e-3), **t.as_dict()}
    if not quick:
        copy["sm_clock_hz"] = sm_clock_under(lambda: dst.copy_(src))
    src = dst = None  # free 2 GiB before the matmuls (None, not del: the timed lambda closes over them)
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    rows, old = [], torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dt in dtypes.items():
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            rows.append(matmul(8192, dt, name, reps=3 if quick else 10, clock=not quick))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    sweep = []
    for n in MATMUL_SIZES[::2] if quick else MATMUL_SIZES:
        sets = rotation_count(3 * n * n * 2)
        sweep.append(matmul(n, torch.float16, "fp16", reps=10 if quick else 30, sets=sets))
    return {"copy": copy, "matmul": rows, "sweep": sweep}, dict(UNITS), NOTES
