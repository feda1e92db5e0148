"""Workloads for lab 05: copies beside compute, a two-stage pipeline, a launch-bound step, a model
with graph breaks, and an elementwise chain to fuse.

* :class:`CopyComputeStep`: each step brings one batch from host memory to the GPU and runs a few
  matmuls on it. ``'pageable'`` copies from ordinary host memory on the compute stream (the CPU waits
  for the copy); ``'pinned'`` copies from page-locked memory with ``non_blocking=True`` on the same
  stream (the CPU no longer waits, but the GPU still runs copy then compute, in order);
  ``'double_buffered'`` copies the *next* batch on a side stream into the other of two device
  buffers while the compute stream works on this one, with events ordering the two.
* :func:`run_two_stage`: a producer (stage 0) and a consumer (stage 1) in two threads, with ``depth``
  buffers between them. With one buffer the producer must wait for the consumer to hand it back, so
  the stages take turns (period ≈ s0 + s1); with two, the producer fills one while the consumer works
  on the other (period ≈ max(s0, s1)). Ranges ``stage0``/``stage1`` mark each item.
* :func:`small_ops_step`: many tiny elementwise kernels per step (launch-bound on a GPU).
  :func:`cuda_graphed` captures such a step once and replays it with one launch.
* :class:`BlockNet`: a small MLP; ``graph_break=True`` reads a value back to the host in every block
  (``.item()``), which splits a compiled forward into many small graphs and syncs the GPU each time.
* :func:`elementwise_chain`: :data:`CHAIN_OPS` unary elementwise ops that torch.compile fuses into one
  kernel; eagerly each one is a kernel of its own.
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

import torch

from ..annotate import annotate
from ..device import is_gpu
from ..errors import InfraLensError
from ..units import MiB

COPY_MODES = ("pageable", "pinned", "double_buffered")
COPY_BATCH_MIB = 32  # the host batch CopyComputeStep and gpu_stages move per step (fp16)
CHAIN_OPS = 8


class NeedsGpu(InfraLensError, RuntimeError):
    """A request that only means something with a CUDA GPU (pinned memory, streams, CUDA graphs)."""

    def __init__(self, what: str, why: str, fix: str = "run this on a machine with an NVIDIA GPU, or read the "
                                                        "recorded evidence below"):
        self.what, self.why, self.fix = what, why, fix
        super().__init__(f"{what} needs a CUDA GPU, and this process has none: {why} Fix: {fix}.")


def require_gpu(what: str, why: str) -> None:
    """Raise :class:`NeedsGpu` (``what`` needs CUDA, ``why`` in one sentence) unless a GPU is in use."""
    if not is_gpu():
        raise NeedsGpu(what, why)


def pinned(t: torch.Tensor) -> torch.Tensor:
    """A page-locked copy of CPU tensor ``t`` (what DMA engines copy from without staging)."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
        raise ValueError(f"pinned() takes a CPU tensor; got {type(t).__name__} on "
                         f"{getattr(t, 'device', 'no device')}")
    require_gpu("Pinned (page-locked) host memory",
                "Pinning exists so a GPU's copy engine can read host memory directly; without a CUDA "
                "driver there is no pinned allocator, and torch raises 'Cannot access accelerator device'.")
    return t.pin_memory()


# ---------------------------------------------------------------- copies and compute
class CopyComputeStep:
    """One step per call: a host batch of ``batch_mib`` MiB (fp16, ``(rows, width)``) goes to the GPU
    and ``matmuls`` matmuls with a ``(width, width)`` weight run on it. ``mode``: see module doc.
    Batches cycle over ``host_batches`` prepared host tensors. Ranges: ``h2d`` and ``compute``.
    ``prefetch(step, i)`` (double-buffered mode only) replaces :meth:`_prefetch`: lab 05's edit-and-measure
    exercise swaps in the learner's version; :meth:`stand_in` builds the same step over CPU tensors."""

    def __init__(self, mode: str, batch_mib: int = COPY_BATCH_MIB, width: int = 4096, matmuls: int = 4, host_batches: int = 4,
                 prefetch: Callable[[CopyComputeStep, int], None] | None = None):
        if mode not in COPY_MODES:
            raise ValueError(f"copy mode {mode!r}; expected one of {COPY_MODES}")
        _check_prefetch(mode, prefetch)
        for name, v in (("batch_mib", batch_mib), ("width", width), ("matmuls", matmuls), ("host_batches", host_batches)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r}; expected a positive int")
        require_gpu(f"CopyComputeStep({mode!r})", "It times host-to-device copies against GPU kernels.")
        self.mode, self.matmuls = mode, matmuls
        rows = batch_mib * MiB // (2 * width)
        if rows < 1:
            raise ValueError(f"batch_mib={batch_mib} holds less than one row of width {width} fp16")
        host = [torch.randn(rows, width).half() for _ in range(host_batches)]
        self.host = host if mode == "pageable" else [pinned(h) for h in host]
        self.w = torch.randn(width, width, device="cuda", dtype=torch.float16) / width ** 0.5
        self.i = 0
        if mode == "double_buffered":
            self._double_buffer(rows, width, "cuda", prefetch)

    def _double_buffer(self, rows: int, width: int, device: str, prefetch) -> None:
        """The double-buffered state: a side stream, two buffers, per buffer a ``copied`` and a ``freed`` event;
        then the first batch's prefetch."""
        self.side = torch.cuda.Stream()
        self.buf = [torch.empty(rows, width, device=device, dtype=self.host[0].dtype) for _ in range(2)]
        self.copied = [torch.cuda.Event() for _ in range(2)]
        self.freed = [torch.cuda.Event() for _ in range(2)]
        if prefetch is not None:
            self._prefetch = lambda i: prefetch(self, i)
        self._prefetch(0)

    @classmethod
    def stand_in(cls, host: list[torch.Tensor], w: torch.Tensor, matmuls: int,
                 prefetch: Callable[[CopyComputeStep, int], None] | None = None) -> CopyComputeStep:
        """A double-buffered step over CPU tensors (``host`` batches, weight ``w``): the same state and the same
        :meth:`__call__`, for a recorder that stands in for ``torch.cuda``'s streams and events
        (:mod:`infralens_lab.measure.stream_record`); call it inside that recorder."""
        if not host or any(h.shape != host[0].shape for h in host) or host[0].dim() != 2:
            raise ValueError(f"host batches of shapes {[tuple(h.shape) for h in host]}; expected one or more 2-D "
                             "tensors of one shape")
        _check_prefetch("double_buffered", prefetch)
        step = cls.__new__(cls)
        step.mode, step.matmuls, step.host, step.w, step.i = "double_buffered", matmuls, host, w, 0
        step._double_buffer(host[0].shape[0], host[0].shape[1], "cpu", prefetch)
        return step

    def _prefetch(self, i: int) -> None:
        slot = i % 2
        with torch.cuda.stream(self.side), annotate("h2d"):
            self.side.wait_event(self.freed[slot])  # the compute stream is done with this buffer
            self.buf[slot].copy_(self.host[i % len(self.host)], non_blocking=True)
            self.copied[slot].record(self.side)

    def _compute(self, x: torch.Tensor) -> torch.Tensor:
        with annotate("compute"):
            for _ in range(self.matmuls):
                x = x @ self.w
        return x

    def __call__(self) -> torch.Tensor:
        i, self.i = self.i, self.i + 1
        if self.mode != "double_buffered":
            with annotate("h2d"):
                x = self.host[i % len(self.host)].to("cuda", non_blocking=self.mode == "pinned")
            return self._compute(x)
        self._prefetch(i + 1)  # start the next batch's copy before this batch's compute
        slot = i % 2
        torch.cuda.current_stream().wait_event(self.copied[slot])
        out = self._compute(self.buf[slot])
        self.freed[slot].record(torch.cuda.current_stream())
        return out


def same_stream_prefetch(step: CopyComputeStep, i: int) -> None:
    """Lab 05's edit-and-measure starting point: batch ``i`` copied into its buffer on the compute stream (in order
    with the matmuls, as ``'pinned'`` copies), then marked copied. Safe, and nothing overlaps."""
    slot = i % 2
    step.buf[slot].copy_(step.host[i % len(step.host)], non_blocking=True)
    step.copied[slot].record(torch.cuda.current_stream())


def _check_prefetch(mode: str, prefetch) -> None:
    if prefetch is not None and (mode != "double_buffered" or not callable(prefetch)):
        raise ValueError(f"prefetch={prefetch!r} with mode {mode!r}; expected a function prefetch(step, i), and "
                         "only with mode 'double_buffered' (the mode with a side stream and two buffers)")


# ---------------------------------------------------------------- two-stage pipeline
def run_two_stage(stage0: Callable[[int], object], stage1: Callable[[object], None], items: int, depth: int) -> float:
    """Run ``items`` items through ``stage0`` (in a producer thread) then ``stage1`` (in this thread)
    with ``depth`` buffers in flight; returns wall seconds. The producer takes a free buffer before
    producing and the consumer returns it after consuming, so ``depth=1`` forces the stages to take
    turns. Each item is wrapped in a ``stage0`` / ``stage1`` range."""
    if not isinstance(items, int) or items < 1:
        raise ValueError(f"items={items!r}; expected a positive int")
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth={depth!r}; expected a positive int (buffers between the stages)")
    free = threading.Semaphore(depth)
    q: queue.Queue = queue.Queue()
    failed: list[BaseException] = []

    def producer():
        try:
            for i in range(items):
                free.acquire()
                with annotate("stage0"):
                    q.put(stage0(i))
        except BaseException as exc:  # surface the producer's error in the caller's thread (re-raised there)
            failed.append(exc)
            q.put(StopIteration)
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: this thread stops too
                raise

    t0 = time.perf_counter()
    th = threading.Thread(target=producer, name="stage0", daemon=True)
    th.start()
    for _ in range(items):
        item = q.get()
        if item is StopIteration:
            break
        with annotate("stage1"):
            stage1(item)
        free.release()
    th.join()
    if failed:
        raise failed[0]
    return time.perf_counter() - t0


def sleep_stages(stage0_ms: float, stage1_ms: float):
    """CPU stand-ins for two stages that wait on something outside Python (a decoder, a device): each
    sleeps for its time, releasing the GIL as real I/O or a device wait would."""
    for name, v in (("stage0_ms", stage0_ms), ("stage1_ms", stage1_ms)):
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name}={v!r}; expected a positive number of milliseconds")
    return (lambda i: time.sleep(stage0_ms / 1e3) or i), (lambda item: time.sleep(stage1_ms / 1e3))


def gpu_stages(batch_mib: int = COPY_BATCH_MIB, width: int = 4096, matmuls: int = 4, buffers: int = 2):
    """Stage 0 copies a pinned host batch to the GPU on its own stream; stage 1 runs ``matmuls``
    matmuls on it on another stream; each stage waits for its own stream only (``synchronize`` releases
    the GIL), so the two can overlap on the GPU: copy engine and SMs."""
    require_gpu("gpu_stages", "Its stages are a host-to-device copy and GPU matmuls.")
    rows = batch_mib * MiB // (2 * width)
    host = [pinned(torch.randn(rows, width).half()) for _ in range(buffers)]
    dev = [torch.empty(rows, width, device="cuda", dtype=torch.float16) for _ in range(buffers)]
    w = torch.randn(width, width, device="cuda", dtype=torch.float16) / width ** 0.5
    s_copy, s_comp = torch.cuda.Stream(), torch.cuda.Stream()

    def stage0(i):
        slot = i % buffers
        with torch.cuda.stream(s_copy):
            dev[slot].copy_(host[slot], non_blocking=True)
        s_copy.synchronize()
        return slot

    def stage1(slot):
        with torch.cuda.stream(s_comp):
            x = dev[slot]
            for _ in range(matmuls):
                x = x @ w
        s_comp.synchronize()

    return stage0, stage1


# ---------------------------------------------------------------- launch-bound step
def small_ops_step(x: torch.Tensor, ops: int = 200) -> torch.Tensor:
    """``ops`` tiny elementwise kernels on ``x`` (alternating multiply and add): on a GPU each is a
    separate launch doing almost no work."""
    if not isinstance(ops, int) or ops < 2:
        raise ValueError(f"ops={ops!r}; expected an int >= 2")
    for _ in range(ops // 2):
        x = x * 1.0001
        x = x + 0.0001
    return x


def cuda_graphed(fn: Callable[[torch.Tensor], torch.Tensor], example: torch.Tensor, warmup: int = 3):
    """Capture ``fn(static_input)`` in a CUDA graph and return ``(replay, static_input)``: copy new data
    into ``static_input``, call ``replay()``, read its result. Shapes are fixed at capture and nothing
    in ``fn`` may synchronise with the host (no ``.item()``, no printing a tensor)."""
    require_gpu("A CUDA graph", "A CUDA graph records GPU launches on a CUDA stream and replays them; a CPU "
                "has no stream to capture (torch.cuda.CUDAGraph is a stub in CPU builds).")
    static = example.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up on a side stream, as torch's docs ask before capture
        for _ in range(warmup):
            fn(static)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(static)

    def replay() -> torch.Tensor:
        g.replay()
        return out

    return replay, static


# ---------------------------------------------------------------- compile
class Block(torch.nn.Module):
    """Linear(width, width) → GELU → residual. With ``graph_break=True`` it also checks the activation
    on the host (``.item()`` of its largest magnitude, halving it if it ever exceeds
    :data:`OVERFLOW_GUARD`), as an overflow guard or a logging line would: a graph break and, on a GPU,
    a sync, while the result stays the same for ordinary inputs."""

    def __init__(self, width: int, graph_break: bool):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.graph_break = graph_break

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + torch.nn.functional.gelu(self.lin(x))
        if self.graph_break and x.abs().max().item() > OVERFLOW_GUARD:  # host read: graph break + sync
            x = x * 0.5
        return x


OVERFLOW_GUARD = 1e30


class BlockNet(torch.nn.Module):
    """``blocks`` :class:`Block` s in a row; ``graph_break=True`` puts one ``.item()`` in each."""

    def __init__(self, width: int = 64, blocks: int = 8, graph_break: bool = False):
        super().__init__()
        if not isinstance(width, int) or width < 1 or not isinstance(blocks, int) or blocks < 1:
            raise ValueError(f"width={width!r}, blocks={blocks!r}; expected positive ints")
        self.blocks = torch.nn.ModuleList(Block(width, graph_break) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def elementwise_chain(x: torch.Tensor) -> torch.Tensor:
    """:data:`CHAIN_OPS` unary elementwise ops (each a kernel when run eagerly on a GPU)."""
    y = x * 1.5
    y = y + 0.25
    y = torch.sin(y)
    y = y * y
    y = y - 0.5
    y = torch.exp(y)
    y = y * 0.75
    return torch.tanh(y)
