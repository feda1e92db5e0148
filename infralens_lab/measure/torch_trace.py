"""torch.profiler, run: profile a step function and get its :class:`~infralens_lab.parse.trace.Trace`.

:func:`profile` runs a step function under ``torch.profiler`` (schedule wait/warmup/active, CPU activity
plus CUDA on a GPU) and returns the parsed trace of the active steps; reading a trace (recorded or live)
is :mod:`infralens_lab.parse.trace`'s. :func:`quiet_profiler_chatter` keeps Kineto's native stderr lines
out of notebooks.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import device
from ..parse.trace import Trace


@contextlib.contextmanager
def quiet_profiler_chatter():
    """Drop the ``USDT: ... profiler_start/stop`` lines torch's Kineto writes straight to the
    process's stderr (file descriptor 2, whatever ``sys.stderr`` is: Jupyter replaces that) each time
    a profiler starts or stops: they carry clock times and process ids, so a notebook showing them
    would differ on every run. Every other line written to fd 2 meanwhile is passed on to
    ``sys.stderr``. The package's one way of silencing native output."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            rest = [ln for ln in tmp.read().decode(errors="replace").splitlines() if not ln.startswith("USDT:")]
            if rest:
                print("\n".join(rest), file=sys.stderr)


def chrome_trace_of(prof) -> dict:
    """The chrome trace (JSON dict) of a finished ``torch.profiler.profile``: torch only exports to a
    file, so this writes a temporary one, reads it back and removes it."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        return json.loads(Path(path).read_text())
    finally:
        Path(path).unlink()


def profile(step_fn: Callable[[], Any], steps: int | None = None, wait: int = 1, warmup: int = 1,
            active: int = 3, record_shapes: bool = False) -> Trace:
    """Run ``step_fn`` ``steps`` times (default ``wait + warmup + active``) under torch.profiler and
    return the :class:`Trace` of the ``active`` steps. Each step is a ``ProfilerStep#N`` range."""
    import torch  # lazy: torch loads only when this runs, so importing the module (and --help) stays light
    from torch.profiler import (  # lazy: torch loads only when this runs, so importing the module (and --help) stays light
        ProfilerActivity,
        schedule,
    )

    for name, v, lo in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1)):
        if not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}={v!r}; expected an int >= {lo}")
    steps = wait + warmup + active if steps is None else steps
    if not isinstance(steps, int) or steps < wait + warmup + active:
        raise ValueError(f"steps={steps!r}; expected an int >= wait + warmup + active = {wait + warmup + active}")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.is_gpu() else [])
    got: dict = {}

    def ready(prof):
        got["data"] = chrome_trace_of(prof)

    sched = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
    with torch.profiler.profile(activities=acts, schedule=sched, on_trace_ready=ready, record_shapes=record_shapes) as p:
        for _ in range(steps):
            step_fn()  # no per-step synchronize: it would hide the very overlap we look for
            p.step()
    device.synchronize()
    if "data" not in got:
        raise RuntimeError("torch.profiler produced no trace; is steps >= wait + warmup + active?")
    return Trace(got["data"])


