"""What changed between two traces of one program (``python -m infralens_lab analyze BEFORE AFTER``): the same
quantities side by side as before, after, change (after − before) and ratio (after / before).

Pure functions over plain numbers and tables (what :class:`~infralens_lab.parse.trace.Trace` and
:mod:`~infralens_lab.analysis.idle` give for each trace); nothing here reads a file. Per-step quantities
are divided by each trace's own number of profiled steps, so two traces with different schedules compare.
:func:`compare` gives one row per metric, :func:`changes` one row per kernel (or idle cause) with ``status``
``both``, ``added`` (after only) or ``removed`` (before only), and :func:`common_share` says how much of the
kernel time the two traces share: near zero, they are not two runs of one program.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

STATUSES = ("both", "added", "removed")


def _ratio(before, after):
    """after / before, NaN where before is 0 (nothing to scale) or missing."""
    b = np.asarray(before, dtype=float)
    a = np.asarray(after, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / b, np.nan)


def compare(before: Mapping[str, float], after: Mapping[str, float]) -> pd.DataFrame:
    """One row per metric both mappings hold (in ``before``'s order; the metric's name carries its unit, e.g.
    ``period_ms``): ``metric, before, after, change`` (after − before) and ``ratio`` (after / before; NaN when
    before is 0). A metric only one side holds is left out."""
    keys = [k for k in before if k in after]
    if not keys:
        raise ValueError(f"no metric in common: before has {sorted(before)}, after has {sorted(after)}; expected "
                         f"the same metrics of two traces")
    b = np.array([float(before[k]) for k in keys])
    a = np.array([float(after[k]) for k in keys])
    return pd.DataFrame({"metric": keys, "before": b, "after": a, "change": a - b, "ratio": _ratio(b, a)})


def changes(before: pd.DataFrame, after: pd.DataFrame, key: str, value: str, count: str | None = None) -> pd.DataFrame:
    """``before`` and ``after`` (one row per ``key``: a kernel name, an idle cause) joined on ``key``: ``key``,
    ``status`` (``both``, ``added``: after only, ``removed``: before only), ``before_<value>``, ``after_<value>``,
    ``change_<value>`` (missing counts as 0), ``ratio`` (after / before; NaN when before is 0), and with ``count``
    ``before_<count>``, ``after_<count>``; largest change first (ties: by key). ``value`` and ``count`` name
    columns of both tables (e.g. ``ms``, ``launches``: per step)."""
    cols = [key, value] + ([count] if count else [])
    for side, df in (("before", before), ("after", after)):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(f"{side} table has columns {list(df.columns)}; expected {cols} (missing {missing})")
        if df[key].duplicated().any():
            raise ValueError(f"{side} table repeats {key} {sorted(df.loc[df[key].duplicated(), key])[:3]}; "
                             f"expected one row per {key}")
    m = before[cols].merge(after[cols], on=key, how="outer", suffixes=("_b", "_a"), indicator=True)
    status = m["_merge"].map({"both": "both", "right_only": "added", "left_only": "removed"}).astype(str)
    b, a = m[f"{value}_b"].fillna(0.0).astype(float), m[f"{value}_a"].fillna(0.0).astype(float)
    out = pd.DataFrame({key: m[key], "status": status, f"before_{value}": b, f"after_{value}": a,
                        f"change_{value}": a - b, "ratio": _ratio(b, a)})
    if count:
        out[f"before_{count}"] = m[f"{count}_b"].fillna(0).astype(float)
        out[f"after_{count}"] = m[f"{count}_a"].fillna(0).astype(float)
    order = out[f"change_{value}"].abs().to_numpy()
    return out.iloc[np.lexsort((out[key].astype(str).to_numpy(), -order))].reset_index(drop=True)


def common_share(table: pd.DataFrame, value: str) -> float:
    """The share of ``before + after`` of ``value`` in the rows both traces hold (``status == 'both'``) of a
    :func:`changes` table: 1 for the same kernels, 0 for two programs with no kernel in common (0 when empty)."""
    b, a = table[f"before_{value}"], table[f"after_{value}"]
    total = float(b.sum() + a.sum())
    both = table["status"] == "both"
    return float(b[both].sum() + a[both].sum()) / total if total > 0 else 0.0


__all__ = ["STATUSES", "changes", "common_share", "compare"]
