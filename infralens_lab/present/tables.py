"""Before/after tables a performance engineer would write: two rows of a joined table side by side.

The joins themselves (copy family, attention kernels and variants) are analysis and live in
:mod:`infralens_lab.analysis.joins`; they are re-exported here for the labs that import them from here.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from ..analysis.joins import (  # re-exported: table callers read these names here
    ATTN_KERNELS,
    ELEM_BYTES,
    attention_kernels,
    attention_variants,
    block_m_from_grid,
    config_fields,
    copy_family,
)


def before_after(before: dict, after: dict, metrics: Sequence[tuple], names: tuple[str, str] = ("before", "after")):
    """A two-column comparison: one row per metric with both values, ``after / before`` and a reason.

    ``metrics``: tuples ``(key, label, unit, why)``; ``why`` is a string or a callable
    ``why(before_value, after_value) -> str`` so reasons can quote the numbers. Numeric pairs get
    the ratio; text pairs (a stall name) get none. Missing keys show as NaN.
    """
    rows = []
    for item in metrics:
        if len(item) != 4:
            raise ValueError(f"before_after: metric {item!r}; expected (key, label, unit, why)")
        key, label, unit, why = item
        b, a = before.get(key, math.nan), after.get(key, math.nan)
        num = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (b, a))
        ratio = a / b if num and b and b == b and a == a else math.nan
        reason = why(b, a) if callable(why) else str(why)
        rows.append({"metric": label, "unit": unit, names[0]: b, names[1]: a, f"{names[1]} / {names[0]}": ratio,
                     "why": reason})
    return pd.DataFrame(rows)


__all__ = ["ATTN_KERNELS", "ELEM_BYTES", "attention_kernels", "attention_variants", "before_after",
           "block_m_from_grid", "config_fields", "copy_family"]
