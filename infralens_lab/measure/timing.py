"""Timing GPU work honestly: CUDA events, warm-up, medians and spread, cold or warm caches.

:func:`time_fn` runs a callable ``warmup`` times (compilation, autotuning, allocator warm-up),
then ``repeats`` times between a pair of CUDA events each, and reports the median and the
10th/90th percentiles in milliseconds. Two cache effects are handled on request: ``rotate``
cycles through several input sets so that a working set smaller than L2 is not served from
L2 on every repeat (:func:`rotation_count` says how many sets), and ``flush=True`` writes a
buffer twice the L2 size before every repeat. In interpreter mode no number is produced:
Triton's interpreter runs kernels as Python on the CPU, so its timings say nothing about a
GPU, and the :class:`Timing` says so (``meaningful=False``, ``median_ms=None``). Pure-torch
CPU work can be timed with ``clock="cpu"`` (wall clock, labelled as such).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import device as device_mod  # the module: its mode is decided (and patched in tests) at run time
from ..stats import percentile  # (re-exported: timing users read percentiles here too)
from ..units import MiB

CLOCKS = ("auto", "cuda", "cpu")
INTERPRETER_NOTE = ("no timing: kernels run in Triton's interpreter (Python on the CPU), so their "
                    "timings mean nothing about a GPU; see the recorded evidence instead")


@dataclass(frozen=True)
class Timing:
    """Result of :func:`time_fn`. Times in milliseconds; ``None`` when nothing meaningful was measured.

    ``clock`` is ``'cuda_events'`` (GPU time between events), ``'cpu_wall'`` (host wall clock)
    or ``'none'``. ``samples_ms`` holds every measured repeat in order.
    """

    median_ms: float | None
    p10_ms: float | None
    p90_ms: float | None
    n: int
    meaningful: bool
    note: str
    clock: str = "none"
    samples_ms: tuple[float, ...] = field(default=(), repr=False)

    def as_dict(self) -> dict:
        return {"median_ms": self.median_ms, "p10_ms": self.p10_ms, "p90_ms": self.p90_ms, "n": self.n,
                "meaningful": self.meaningful, "note": self.note, "clock": self.clock}

    def __str__(self) -> str:
        if not self.meaningful or self.median_ms is None:
            return f"Timing(not meaningful: {self.note})"
        return (f"{self.median_ms:.4f} ms median (p10 {self.p10_ms:.4f}, p90 {self.p90_ms:.4f}, "
                f"n={self.n}, {self.clock})")


def summarize(samples_ms: Sequence[float], clock: str, note: str = "") -> Timing:
    """A :class:`Timing` from measured samples (ms): median and 10th/90th percentiles."""
    samples = tuple(float(x) for x in samples_ms)
    if not samples:
        raise ValueError("no samples to summarize; expected at least one measured repeat")
    return Timing(percentile(samples, 50), percentile(samples, 10), percentile(samples, 90), len(samples),
                  True, note, clock, samples)


def not_meaningful(note: str = INTERPRETER_NOTE) -> Timing:
    """The Timing returned when no meaningful number can be measured."""
    return Timing(None, None, None, 0, False, note, "none", ())


def rotation_count(working_set_bytes: int, l2_bytes: int | None = None, factor: float = 2.0,
                   max_sets: int = 64) -> int:
    """How many distinct input sets to cycle through so that their total exceeds ``factor`` × L2.

    A kernel whose inputs fit in L2 reads them from L2, not DRAM, when it is timed in a loop;
    cycling through ``n`` sets whose sum is at least twice the L2 size evicts each set before
    its next use. ``l2_bytes`` defaults to the current device's (``facts().l2_bytes``); returns 1
    when the working set is already larger or the L2 size is unknown.
    """
    if not isinstance(working_set_bytes, int) or working_set_bytes <= 0:
        raise ValueError(f"working_set_bytes={working_set_bytes!r}; expected a positive int (bytes)")
    if l2_bytes is None:
        l2_bytes = device_mod.facts().l2_bytes
    if not l2_bytes:
        return 1
    return int(min(max_sets, max(1, math.ceil(factor * l2_bytes / working_set_bytes))))


def _call(fn: Callable, args: Any) -> Any:
    if args is None:
        return fn()
    return fn(*args) if isinstance(args, tuple) else fn(args)


def time_fn(fn: Callable, warmup: int = 10, repeats: int = 50, rotate: Sequence[Any] | None = None,
            flush: bool = False, clock: str = "auto") -> Timing:
    """Time ``fn`` and return a :class:`Timing` (median and p10/p90 in ms over ``repeats``).

    ``rotate``: a sequence of argument tuples (or single arguments); call ``j`` (warm-up calls
    first, then repeats) is ``fn(*rotate[j % len(rotate)])``. ``flush``: before each repeat, overwrite a buffer of
    2 × L2 bytes so the kernel starts with a cold L2 (not timed). ``clock``: ``'auto'`` uses
    CUDA events in gpu mode and returns a not-meaningful Timing in interpreter mode;
    ``'cpu'`` times host wall clock with ``time.perf_counter`` (for pure-torch CPU work);
    ``'cuda'`` insists on CUDA events.
    """
    if not callable(fn):
        raise TypeError(f"fn is {type(fn).__name__}; expected a callable")
    if clock not in CLOCKS:
        raise ValueError(f"clock={clock!r}; expected one of {CLOCKS}")
    for name, v, lo in (("warmup", warmup, 0), ("repeats", repeats, 1)):
        if not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}={v!r}; expected an int >= {lo}")
    if rotate is not None and len(rotate) == 0:
        raise ValueError("rotate is empty; expected at least one argument set (or None)")
    args_at = (lambda i: None) if rotate is None else (lambda i: rotate[i % len(rotate)])

    if clock == "cpu":
        for i in range(warmup):
            _call(fn, args_at(i))
        samples = []
        for i in range(repeats):
            t0 = time.perf_counter()
            _call(fn, args_at(warmup + i))
            samples.append((time.perf_counter() - t0) * 1e3)
        return summarize(samples, "cpu_wall", "host wall clock (time.perf_counter), not GPU time")
    if not device_mod.is_gpu():
        if clock == "cuda":
            raise RuntimeError("clock='cuda' needs a GPU, but infralens_lab runs in interpreter mode")
        return not_meaningful()

    import torch  # lazy: torch loads only when this runs, so importing the module (and --help) stays light

    scratch = None
    if flush:
        l2 = device_mod.facts().l2_bytes or 64 * MiB
        scratch = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    for i in range(warmup):
        _call(fn, args_at(i))
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for i in range(repeats):
        if scratch is not None:
            scratch.zero_()  # evict L2: the timed launch starts cold
        starts[i].record()
        _call(fn, args_at(warmup + i))
        ends[i].record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    parts = [f"CUDA events, {warmup} warm-up calls"]
    if rotate is not None:
        parts.append(f"rotating over {len(rotate)} input sets")
    if flush:
        parts.append("L2 flushed before each repeat")
    return summarize(samples, "cuda_events", ", ".join(parts))


def throughput(amount: float, t: Timing, per: float = 1e12) -> float | None:
    """``amount`` (bytes or FLOPs) per second divided by ``per`` (1e12: TB/s or TFLOP/s) at the
    median time; ``None`` when the timing is not meaningful."""
    if not t.meaningful or not t.median_ms:
        return None
    return amount / (t.median_ms * 1e-3) / per


def synced_wall_ms(fn: Callable[[], Any], n: int, sync: Callable[[], None]) -> list[float]:
    """Wall-clock milliseconds of ``n`` calls of ``fn()``, each timed with the ``sync()`` that follows it."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def time_steps(step: Callable[[], Any], synced: int = 40, batched: int = 30, skip: int = 10,
               sync: Callable[[], None] | None = None) -> dict:
    """Wall-clock times of a whole step function (ms): ``synced`` steps each followed by ``sync``
    (default: the device's synchronize), the first ones included so warm-up shows, then ``batched``
    steps back to back with one ``sync`` at the end (throughput). Median/p10/p90 over the synced steps
    after the first ``skip``. Returns ``{per_step_sync_ms, throughput_ms_per_step, median_ms, p10_ms, p90_ms}``."""
    if not (isinstance(synced, int) and isinstance(batched, int) and isinstance(skip, int)) \
            or synced <= skip or batched < 1 or skip < 0:
        raise ValueError(f"synced={synced!r}, batched={batched!r}, skip={skip!r}; expected ints with "
                         f"synced > skip >= 0 and batched >= 1")
    sync = sync or device_mod.synchronize
    per = synced_wall_ms(step, synced, sync)
    t0 = time.perf_counter()
    for _ in range(batched):
        step()
    sync()
    throughput = (time.perf_counter() - t0) * 1e3 / batched
    t = summarize(per[skip:], clock="cpu", note="perf_counter around step(); synchronize")
    return {"per_step_sync_ms": per, "throughput_ms_per_step": throughput,
            "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms}
