"""The measured ceilings: torch ``copy_`` bandwidth and cuBLAS matmul rates, on a GPU, with the SM clock they ran at.

:func:`measure` returns ``(values, units, notes)``, what the recorder's ``ceilings`` step writes and
what lab 02 shows live (:class:`infralens_lab.analysis.hardware.Ceilings` reads the values). Copy:
torch ``copy_`` of 1 GiB fp32, bytes read + written, CUDA events. Matmul: ``a @ b`` at 8192³ for fp32
(TF32 off), tf32, fp16, bf16, plus an fp16 size sweep (inputs rotated over several sets when they fit
in L2). FLOPs = 2·M·N·K; ``min_bytes`` = (M·K + K·N + M·N) · element size. SI units.

Two additions for lab 02 (issue 26, clocks redone in issue 37): each clocked measurement's ``sm_clock_hz``, the
median SM clock NVML read *during its own timed repetitions* on the device torch used (by PCI bus id; the GPU's
own clock policy, nothing locked; None without NVML), with its range and the memory clock, and, per sweep size, ``batched_ms`` (one CUDA-event pair around all the
repeats, divided by their number: calls back to back with nothing recorded between them) and
``cpu_issue_ms`` (host wall time to issue them, per call), so the host gap of a small matmul can be held
against the kernel's own duration (ncu ``gpu__time_duration``).
"""
from __future__ import annotations

import math
import time

import torch

from .clocks import ClockError, ClockSampler
from .timing import rotation_count, time_fn

MATMUL_SIZES = (256, 512, 1024, 2048, 4096, 8192)
CLOCK_SECONDS = 0.5  # the shortest timed loop of a clocked ceiling: ~50 NVML readings at 10 ms
QUICK_SECONDS = 0.2  # the same in quick mode (lab 02's live ceilings): ~20 readings
UNITS = {"bandwidth_bytes_per_s": "byte/s", "flops_per_s": "FLOP/s", "median_ms": "ms", "flops": "FLOP",
         "min_bytes": "byte", "intensity": "FLOP/byte", "sm_clock_hz": "Hz", "batched_ms": "ms",
         "cpu_issue_ms": "ms", "sm_clock_min_hz": "Hz", "sm_clock_max_hz": "Hz", "mem_clock_hz": "Hz",
         "clock_samples": "count"}
NOTES = ("copy: torch copy_ of 1 GiB fp32, bytes read + written. matmul: torch a @ b (cuBLAS), "
         "flops = 2*M*N*K, min_bytes = (M*K + K*N + M*N) * element size (each operand once). "
         "fp32 has TF32 off. Sweep: inputs rotated over several sets when they fit in L2; median_ms: an event pair "
         "around each call, calls back to back; batched_ms: one event pair around all repeats / repeats; "
         "cpu_issue_ms: host time to issue them / repeats. sm_clock_hz (median), sm_clock_min_hz, sm_clock_max_hz, "
         "mem_clock_hz: NVML clock readings of this device (opened by its PCI bus id, UUID checked against torch's) "
         f"every 10 ms during the timed repetitions themselves, which last at least {CLOCK_SECONDS:g} s "
         "(clocks not locked; None without NVML, with clock_note).")


def clocked(fn, pairs: list | None, warmup: int, repeats: int, seconds: float = CLOCK_SECONDS) -> tuple:
    """``(Timing, clock fields)``: ``fn`` timed with CUDA events (median, p10, p90) over at least ``repeats`` calls
    and at least ``seconds`` of them, while :class:`~infralens_lab.measure.clocks.ClockSampler` reads NVML's SM and
    memory clocks of this very device (by PCI bus id) in the background: the clock is the one the timing saw. The
    clock fields are ``sm_clock_hz`` (median), ``sm_clock_min_hz``, ``sm_clock_max_hz``, ``mem_clock_hz``,
    ``clock_samples``, ``clock_source``; without NVML, ``sm_clock_hz`` None and ``clock_note`` saying why."""
    probe = time_fn(fn, warmup=warmup, repeats=3, rotate=pairs)
    reps = max(repeats, min(5000, math.ceil(seconds * 1e3 / max(probe.median_ms, 1e-3))))
    try:
        sampler = ClockSampler(torch.cuda.get_device_properties(torch.cuda.current_device()))
    except (ClockError, ValueError) as exc:
        return time_fn(fn, warmup=0, repeats=reps, rotate=pairs), {"sm_clock_hz": None, "clock_note": str(exc)}
    with sampler:
        t = time_fn(fn, warmup=0, repeats=reps, rotate=pairs)
    summ = sampler.summary().as_dict()
    return t, {"sm_clock_hz": summ["sm_clock_hz"], "sm_clock_min_hz": summ["sm_clock_min_hz"],
               "sm_clock_max_hz": summ["sm_clock_max_hz"], "mem_clock_hz": summ["mem_clock_hz"],
               "clock_samples": summ["samples"], "clock_source": summ["source"], "pci_bus_id": summ["pci_bus_id"]}


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


def matmul(n: int, dtype, name: str, reps: int, sets: int = 1, clock: bool = False,
           seconds: float = CLOCK_SECONDS) -> dict:
    """One timed square matmul of size ``n`` (CUDA events): FLOPs, minimum bytes, FLOP/s, timing fields, the
    batched per-call time and, with ``clock``, the SM clock under a second of the same matmul."""
    pairs = [(torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype))
             for _ in range(sets)]
    if clock:
        t, clock_fields = clocked(lambda a, b: a @ b, pairs, warmup=3, repeats=reps, seconds=seconds)
    else:
        t, clock_fields = time_fn(lambda a, b: a @ b, warmup=3, repeats=reps, rotate=pairs), {}
    flops, size = 2 * n ** 3, torch.empty((), dtype=dtype).element_size()
    min_bytes = 3 * n * n * size
    out = {"dtype": name, "M": n, "N": n, "K": n, "flops": flops, "min_bytes": min_bytes,
           "intensity": flops / min_bytes, "flops_per_s": flops / (t.median_ms * 1e-3), "input_sets": sets,
           **t.as_dict(), **batched(lambda a, b: a @ b, pairs, reps), **clock_fields}
    return out


def measure(quick: bool = False) -> tuple[dict, dict, str]:
    """``(values, units, notes)`` of the ceilings on this GPU (see module doc); ``quick``: fewer repeats,
    every other sweep size, clocked loops of 0.2 s instead of 0.5 s."""
    reps = 5 if quick else 20
    src = torch.randn(2**28, device="cuda")  # 1 GiB of fp32
    dst = torch.empty_like(src)
    seconds = QUICK_SECONDS if quick else CLOCK_SECONDS
    t, clock_fields = clocked(lambda: dst.copy_(src), None, warmup=3, repeats=reps, seconds=seconds)
    moved = 2 * src.numel() * 4
    copy = {"bytes_moved": moved, "bandwidth_bytes_per_s": moved / (t.median_ms * 1e-3), **t.as_dict(),
            **clock_fields}
    src = dst = None  # free 2 GiB before the matmuls (None, not del: the timed lambda closes over them)
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    rows, old = [], torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dt in dtypes.items():
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            rows.append(matmul(8192, dt, name, reps=3 if quick else 10, clock=True, seconds=seconds))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    sweep = []
    for n in MATMUL_SIZES[::2] if quick else MATMUL_SIZES:
        sets = rotation_count(3 * n * n * 2)
        sweep.append(matmul(n, torch.float16, "fp16", reps=10 if quick else 30, sets=sets))
    return {"copy": copy, "matmul": rows, "sweep": sweep}, dict(UNITS), NOTES
