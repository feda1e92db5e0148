"""Named ranges for profilers, at ground level so workloads and measure can both use them.

:func:`annotate` opens a ``torch.profiler.record_function`` range (shown in torch.profiler traces)
and, on a GPU, an NVTX range (shown by Nsight Systems and used by Nsight Compute's ``--nvtx`` filter).
"""
from __future__ import annotations

import contextlib

import torch
from torch.profiler import record_function

from .device import is_gpu


@contextlib.contextmanager
def annotate(name: str):
    """A ``record_function`` range named ``name`` (shown by torch.profiler), plus an NVTX range on a GPU."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"range name {name!r}; expected a non-empty str such as 'data'")
    gpu = is_gpu()
    if gpu:
        torch.cuda.nvtx.range_push(name)
    try:
        with record_function(name):
            yield
    finally:
        if gpu:
            torch.cuda.nvtx.range_pop()
