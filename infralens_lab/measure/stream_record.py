"""Which stream each copy and kernel was issued on, and which waits were made, recorded without CUDA (lab 05's
edit-and-measure exercise).

:func:`recording` stands in for ``torch.cuda``'s streams and events: inside it, ``torch.cuda.Stream``, ``Event``,
``stream``, ``current_stream``, ``default_stream``, ``set_stream`` and ``synchronize`` are recorders, and a
``TorchFunctionMode`` notes every copy into, and every op reading, one of the buffers handed to it. Nothing runs
on a GPU, so no order is *enforced*: the log says what a GPU would have been told, and
:mod:`infralens_lab.analysis.stream_order` judges it (races, and a two-engine model of the period).

:func:`replay_prefetch` runs :class:`~infralens_lab.workloads.overlap.CopyComputeStep`'s own ``__call__`` with a
learner's ``prefetch(step, i)`` over small CPU tensors of odd shape, fresh each call, and checks each step's
output against torch's on the batch it should have used. :func:`live_prefetch` profiles and times the real step
on a GPU. The log is JSON-shaped: one dict per op, in issue order (see :func:`recording`).
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

from ..errors import InfraLensError

COMPUTE_STREAM = 0  # the recorder's default stream: the one a step's matmuls run on unless told otherwise
REPLAY_STEPS = 6
REPLAY_SHAPE = (37, 19)  # rows, width: odd, so a slot or a transpose mixed up does not line up by chance
MATMUL_NAMES = ("__matmul__", "matmul", "mm", "addmm", "bmm")


class PrefetchError(InfraLensError, ValueError):
    """A ``prefetch`` that is not a function of ``(step, i)``."""


class _Stream:
    def __init__(self, log: StreamLog, sid: int):
        self.log, self.sid = log, sid

    def wait_event(self, event) -> None:
        self.log.wait(self, event)

    def wait_stream(self, other) -> None:
        ev = _Event(self.log)
        ev.record(other)
        self.wait_event(ev)

    def record_event(self, event=None):
        event = event or _Event(self.log)
        event.record(self)
        return event

    def synchronize(self) -> None:
        self.log.sync(f"stream {self.sid}.synchronize()")

    def query(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<recorded stream {self.sid}>"


class _Event:
    def __init__(self, log: StreamLog, *args, **kwargs):
        self.log, self.eid = log, log.new_event_id()

    def record(self, stream=None) -> None:
        self.log.record(self, stream or self.log.current)

    def wait(self, stream=None) -> None:
        self.log.wait(stream or self.log.current, self)

    def synchronize(self) -> None:
        self.log.sync(f"event {self.eid}.synchronize()")

    def query(self) -> bool:
        return True


class StreamLog:
    """The ops a program issued, in order: dicts with ``kind`` (``copy``, ``kernel``, ``record``, ``wait``,
    ``sync``), ``stream`` (an int; :data:`COMPUTE_STREAM` is the default stream), ``step`` (the step call that
    issued it, ``-1`` before the first), and, per kind: ``slot`` (the buffer a copy writes or a kernel reads, None
    for a kernel that reads none), ``batch`` (the host batch a copy reads, None when it is not one), ``event``."""

    def __init__(self, buffers: list[torch.Tensor], sources: list[torch.Tensor]):
        self.ops: list[dict] = []
        self.step = -1
        self._events = 0
        self.streams = [_Stream(self, COMPUTE_STREAM)]
        self.current = self.streams[0]
        self._buf = [b.untyped_storage().data_ptr() for b in buffers]
        self._src = [s.untyped_storage().data_ptr() for s in sources]

    def new_stream(self, *args, **kwargs) -> _Stream:
        self.streams.append(_Stream(self, len(self.streams)))
        return self.streams[-1]

    def new_event_id(self) -> int:
        self._events += 1
        return self._events - 1

    def _add(self, kind: str, stream, **kw) -> None:
        if not isinstance(stream, _Stream):
            raise TypeError(f"{kind} on {stream!r}; expected a stream made inside the recorder "
                            "(torch.cuda.Stream(), torch.cuda.current_stream() or step.side)")
        self.ops.append({"kind": kind, "stream": stream.sid, "step": self.step, **kw})

    def record(self, event, stream) -> None:
        self._add("record", stream, event=event.eid)

    def wait(self, stream, event) -> None:
        if not isinstance(event, _Event):
            raise TypeError(f"wait on {event!r}; expected an event made inside the recorder (torch.cuda.Event())")
        self._add("wait", stream, event=event.eid)

    def sync(self, what: str) -> None:
        self._add("sync", self.current, what=what)

    def slot_of(self, t) -> int | None:
        ptr = t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None
        return self._buf.index(ptr) if ptr in self._buf else None

    def batch_of(self, t) -> int | None:
        ptr = t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None
        return self._src.index(ptr) if ptr in self._src else None


class _Ops(TorchFunctionMode):
    """Notes copies into a buffer and ops that read one (or are matmuls) on the current recorded stream."""

    def __init__(self, log: StreamLog):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "record_stream" and len(args) > 1 and isinstance(args[1], _Stream):
            return None  # the caching allocator's hint: nothing to record
        if name in ("copy_", "__setitem__") and (slot := self.log.slot_of(args[0])) is not None:
            src = args[-1] if name == "__setitem__" else args[1]
            self.log._add("copy", self.log.current, slot=slot, batch=self.log.batch_of(src))
        else:
            reads = [s for a in list(args) + list(kwargs.values()) if (s := self.log.slot_of(a)) is not None]
            if reads or name in MATMUL_NAMES:
                self.log._add("kernel", self.log.current, slot=reads[0] if reads else None)
        return func(*args, **kwargs)


@contextlib.contextmanager
def recording(buffers: list[torch.Tensor], sources: list[torch.Tensor]) -> Iterator[StreamLog]:
    """Inside: ``torch.cuda``'s streams, events and synchronize are recorders writing to the yielded
    :class:`StreamLog`; copies into ``buffers`` and ops reading them are noted with their buffer's index (a copy
    from one of ``sources`` with its index as ``batch``). Restored on exit, error or not."""
    log = StreamLog(buffers, sources)

    @contextlib.contextmanager
    def stream(s):
        before, log.current = log.current, s if s is not None else log.current
        try:
            yield
        finally:
            log.current = before

    fakes = {"Stream": log.new_stream, "Event": lambda *a, **k: _Event(log, *a, **k), "stream": stream,
             "current_stream": lambda *a, **k: log.current, "default_stream": lambda *a, **k: log.streams[0],
             "set_stream": lambda s: setattr(log, "current", s), "synchronize": lambda *a, **k: log.sync("synchronize()")}
    saved = {k: getattr(torch.cuda, k) for k in fakes}
    try:
        for k, v in fakes.items():
            setattr(torch.cuda, k, v)
        with _Ops(log):
            yield log
    finally:
        for k, v in saved.items():
            setattr(torch.cuda, k, v)


def _check_prefetch(prefetch) -> None:
    if not callable(prefetch):
        raise PrefetchError(f"prefetch is {type(prefetch).__name__}; expected a function prefetch(step, i)")


def replay_prefetch(prefetch: Callable, steps: int = REPLAY_STEPS, shape: tuple[int, int] = REPLAY_SHAPE,
                    matmuls: int = 2, host_batches: int = 3, seed: int | None = None) -> dict:
    """Run ``steps`` calls of a double-buffered :class:`~infralens_lab.workloads.overlap.CopyComputeStep` with
    ``prefetch`` swapped in, over fresh random fp32 CPU batches of ``shape``, inside :func:`recording`. Returns
    ``{"ops": [...], "wrong": None or a sentence, "steps", "shape"}``: ``wrong`` names the first step whose output
    is not torch's on the batch that step should have used (and which batch it used, when it matches one), or what
    the prefetch raised. Counts and orders only: nothing here is timed."""
    from ..workloads.overlap import CopyComputeStep  # heavy: workloads.overlap imports torch

    _check_prefetch(prefetch)
    for name, v in (("steps", steps), ("matmuls", matmuls), ("host_batches", host_batches)):
        if not isinstance(v, int) or v < 2:
            raise ValueError(f"{name}={v!r}; expected an int >= 2")
    g = torch.Generator().manual_seed(seed if seed is not None else torch.seed() % 2**31)
    host = [torch.randn(*shape, generator=g) for _ in range(host_batches)]
    w = torch.randn(shape[1], shape[1], generator=g) / math.sqrt(shape[1])

    def ref(x):
        for _ in range(matmuls):
            x = x @ w
        return x

    refs = [ref(h) for h in host]
    out = {"ops": [], "wrong": None, "steps": steps, "shape": list(shape)}
    buffers: list[torch.Tensor] = []
    try:
        with contextlib.ExitStack() as stack:
            # the step makes its buffers inside the recorder; the log learns them right after
            log = stack.enter_context(recording(buffers, host))
            step = _build(CopyComputeStep, host, w, matmuls, prefetch, log, buffers)
            for i in range(steps):
                log.step = i
                got = step()
                want = refs[i % host_batches]
                if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
                    used = [j for j, r in enumerate(refs) if r.shape == got.shape and torch.allclose(got, r, rtol=1e-5, atol=1e-5)]
                    out["wrong"] = (f"wrong data: step {i} should compute on host batch {i % host_batches}; "
                                    + (f"it computed on batch {used[0]}" if used else "its output matches no host batch")
                                    + " (check which slot and which host batch your prefetch copies)")
                    break
            out["ops"] = log.ops
    except Exception as exc:  # the learner's code: its error is the finding, named without a traceback
        out["wrong"] = f"it raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return out


def _build(cls, host, w, matmuls, prefetch, log: StreamLog, buffers: list) -> object:
    """The stand-in step, its two buffers handed to ``log`` before the first prefetch runs."""
    def deferred(step, i):  # the constructor's own prefetch(0): learn the buffers, then run the learner's
        if not buffers:
            buffers.extend(step.buf)
            log._buf = [b.untyped_storage().data_ptr() for b in buffers]
        return prefetch(step, i)

    return cls.stand_in(host, w, matmuls, prefetch=deferred)


def live_prefetch(prefetch: Callable, repeats: int = 20, steps: int = 11) -> dict:
    """On a GPU: the real double-buffered step with ``prefetch`` swapped in, profiled as the recorder profiles the
    copy modes (torch.profiler, one step skipped, two warm-up, ``steps`` recorded) and timed untraced with CUDA
    events around each step call (median, p10, p90 of ``repeats``; back to back, so one call spans one period) while
    NVML samples the SM clock (:func:`~infralens_lab.measure.ceilings.clocked`). ``{"trace", "timing", "clock",
    "gpu"}``."""
    from ..workloads.overlap import CopyComputeStep, require_gpu  # heavy: workloads.overlap imports torch
    from .ceilings import clocked
    from .torch_trace import profile

    _check_prefetch(prefetch)
    require_gpu("live_prefetch", "It profiles and times a host-to-device copy beside GPU matmuls.")
    trace = profile(CopyComputeStep("double_buffered", prefetch=prefetch), wait=1, warmup=2, active=steps)
    timing, clock = clocked(CopyComputeStep("double_buffered", prefetch=prefetch), None, warmup=3, repeats=repeats)
    return {"trace": trace, "timing": timing.as_dict(), "clock": clock, "gpu": torch.cuda.get_device_name()}
