"""Units, the one owner: binary and decimal byte sizes, and bytes per element of every dtype the series uses.

``MiB``/``GiB`` are powers of two (2**20, 2**30 B: what allocators, buckets and caches use); ``MB``/``GB`` are
powers of ten (1e6, 1e9 B: what bandwidths in GB/s and datasheets use). :func:`dtype_bytes` takes the short
names labels use (``fp16``), torch's names (``float16``, ``torch.float16``) or a ``torch.dtype`` (read from its
``itemsize``); :data:`ELEM_BYTES` is the name table. Pure: importing this module imports no torch.
"""
from __future__ import annotations

from typing import Any

KiB, MiB, GiB = 2 ** 10, 2 ** 20, 2 ** 30
MB, GB, TB = 1e6, 1e9, 1e12

# bytes per element, by the short names labels use and torch's long names
ELEM_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "fp8": 1, "int8": 1,
              "float64": 8, "fp64": 8}


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element of ``dtype``: a name of :data:`ELEM_BYTES` (``'fp16'``, ``'bfloat16'``,
    ``'torch.float32'``) or an object with an ``itemsize`` (a ``torch.dtype``). Raises ValueError naming what
    was seen and the names it knows."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int) and not isinstance(dtype, str):
        return size
    name = str(dtype).removeprefix("torch.")
    if name not in ELEM_BYTES:
        raise ValueError(f"dtype {dtype!r}: unknown; expected a torch.dtype or one of {sorted(ELEM_BYTES)}")
    return ELEM_BYTES[name]


def decimals_to_show(agrees, start: int = 2, most: int = 6) -> int:
    """How many decimals a printed number needs: the fewest ``d`` from ``start`` to ``most`` for which
    ``agrees(d)`` is True (the printed arithmetic or comparison at ``d`` decimals is the one done, e.g. ``f =
    0.045`` and not ``0.04`` when the sentence prints ``2 x (1 - f)``); ``most`` when none does."""
    if not 0 <= start <= most:
        raise ValueError(f"start={start!r}, most={most!r}; expected 0 <= start <= most")
    return next((d for d in range(start, most + 1) if agrees(d)), most)
