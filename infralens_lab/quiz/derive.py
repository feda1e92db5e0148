"""Derivations: right answers computed from the evidence a notebook shows.

A question with ``"derive": "<name>"`` (and optional ``"derive_args"``) has no stored answer;
``check(qid, answer, evidence=ev)`` calls the derivation registered under ``<name>`` as
``fn(ev, **derive_args)`` and compares the learner's answer with what it returns. So a
question like "which stall reason dominates?" is marked against the learner's own ncu run,
not a number typed into the bank.

Evidence may be an :class:`~infralens_lab.evidence.Evidence` (its ``values`` or
``values[key]`` rows), a pandas DataFrame, a list of row dicts, or a dict (for ``path``
look-ups). Lab authors add their own with::

    from infralens_lab.quiz import register_derivation

    @register_derivation("speedup")
    def speedup(evidence, slow="naive", fast="tiled"):
        ...
        return number
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

from ..errors import InfraLensError

# pandas and the analysis modules are imported by the derivations that use them, not here: a notebook's
# ``from infralens_lab.quiz import check`` (every answer cell, every graded kernel) then costs no pandas
# (about 0.3-0.5 s of a 2-core machine per kernel; tests/test_grading_parts.py holds it)

_DERIVATIONS: dict[str, Callable[..., Any]] = {}


class DerivationError(InfraLensError, ValueError):
    """The evidence given to a derived question does not hold what the derivation needs."""


def register_derivation(name: str):
    """Decorator registering ``fn(evidence, **args) -> answer`` under ``name`` (replaces an older one)."""
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"derivation name {name!r} must be lower-case letters, digits and '_'")

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise TypeError(f"register_derivation({name!r}) needs a function, got {type(fn).__name__}")
        _DERIVATIONS[name] = fn
        return fn

    return deco


def derivations() -> list[str]:
    """Names of the registered derivations."""
    return sorted(_DERIVATIONS)


def derive(name: str, evidence: Any, **args: Any) -> Any:
    """Run the derivation ``name`` on ``evidence``; DerivationError if unknown or the evidence does not fit."""
    fn = _DERIVATIONS.get(name)
    if fn is None:
        raise DerivationError(f"no derivation named {name!r}; registered: {derivations()}")
    return fn(evidence, **args)


# ---------------------------------------------------------------- helpers
def as_frame(evidence: Any, key: str | None = None):
    """Evidence as a DataFrame: an Evidence (``.frame(key)``), a DataFrame, or a list of row dicts."""
    import pandas as pd  # heavy: pandas, only here

    if isinstance(evidence, pd.DataFrame):
        return evidence if key is None else as_frame(evidence[key])
    if hasattr(evidence, "frame") and hasattr(evidence, "provenance"):
        try:
            return evidence.frame(key)
        except (KeyError, TypeError) as exc:
            raise DerivationError(f"evidence {evidence.name!r} has no table{'' if key is None else ' ' + repr(key)}: {exc}") from None
    v = evidence if key is None else evidence[key]
    if isinstance(v, dict) and "rows" in v:
        v = v["rows"]
    if isinstance(v, list) and all(isinstance(r, dict) for r in v):
        return pd.DataFrame(v)
    raise DerivationError(f"cannot read a table from {type(evidence).__name__}; expected Evidence, "
                          "a DataFrame or a list of row dicts")


def _select(df, where: dict | None):
    if not where:
        return df
    for col, want in where.items():
        if col not in df.columns:
            raise DerivationError(f"no column {col!r} to filter on; columns: {list(df.columns)}")
        df = df[df[col] == want]
    return df


def _number(v: Any, what: str) -> float:
    if isinstance(v, str):
        v = v.replace(",", "")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise DerivationError(f"{what} is {v!r}, expected a number") from None


# ---------------------------------------------------------------- built-ins
@register_derivation("value")
def value(evidence: Any, column: str | None = None, where: dict | None = None, key: str | None = None,
          path: str | None = None) -> Any:
    """One value: ``path`` ('a.b.0') into the evidence values, or ``column`` of the single row matching ``where``."""
    if path is not None:
        v = evidence.values if hasattr(evidence, "provenance") else evidence
        for part in path.split("."):
            try:
                v = v[int(part)] if isinstance(v, list) else v[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise DerivationError(f"evidence has no {path!r} (stopped at {part!r})") from None
        return v
    if column is None:
        raise DerivationError("derivation 'value' needs 'column' or 'path'")
    df = _select(as_frame(evidence, key), where)
    if column not in df.columns:
        raise DerivationError(f"no column {column!r}; columns: {list(df.columns)}")
    if len(df) != 1:
        raise DerivationError(f"'value' needs exactly one row matching {where!r}, found {len(df)}")
    v = df[column].iloc[0]
    return v.item() if hasattr(v, "item") else v


@register_derivation("spread")
def spread(evidence: Any, column: str | None = None, where: dict | None = None, key: str | None = None) -> float:
    """A derived number's own spread (a half-width in its unit, e.g. ``overlap_score_spread``): the ``value`` of that
    column; a number question's ``derive_args["spread"]`` names it, and the check's tolerance is at least that."""
    v = _number(value(evidence, column=column, where=where, key=key), f"spread {column!r}")
    if v < 0:
        raise DerivationError(f"spread {column!r} is {v}; expected a half-width >= 0")
    return v


@register_derivation("ratio")
def ratio(evidence: Any, num: dict, den: dict) -> float:
    """``value(**num) / value(**den)``: e.g. naive time over tiled time."""
    n = _number(value(evidence, **num), f"numerator {num!r}")
    d = _number(value(evidence, **den), f"denominator {den!r}")
    if d == 0:
        raise DerivationError(f"denominator {den!r} is zero")
    return n / d


@register_derivation("reciprocal")
def reciprocal(evidence: Any, scale: float = 1.0, **spec: Any) -> float:
    """``scale / value(**spec)``: e.g. with ``scale=100`` the step's ceiling speedup ``100 / gpu_util_pct``."""
    v = _number(value(evidence, **spec), f"value {spec!r}")
    if v == 0:
        raise DerivationError(f"value {spec!r} is zero; its reciprocal is undefined")
    return scale / v


def _arg(evidence: Any, column: str, label: str, where: dict | None, key: str | None, largest: bool) -> Any:
    df = _select(as_frame(evidence, key), where)
    for c in (column, label):
        if c not in df.columns:
            raise DerivationError(f"no column {c!r}; columns: {list(df.columns)}")
    if df.empty:
        raise DerivationError(f"no rows match {where!r}")
    nums = [_number(v, f"{column!r}") for v in df[column]]
    pick = max(nums) if largest else min(nums)
    labels = sorted(str(lab) for lab, v in zip(df[label], nums, strict=True) if v == pick)
    return labels[0]  # ties: alphabetical, so the answer is deterministic


@register_derivation("argmax")
def argmax(evidence: Any, column: str, label: str, where: dict | None = None, key: str | None = None) -> Any:
    """The ``label`` of the row with the largest ``column``."""
    return _arg(evidence, column, label, where, key, largest=True)


@register_derivation("argmin")
def argmin(evidence: Any, column: str, label: str, where: dict | None = None, key: str | None = None) -> Any:
    """The ``label`` of the row with the smallest ``column``."""
    return _arg(evidence, column, label, where, key, largest=False)


# the stall metrics a key reads, in ncu's one stall-name grammar (parse.ncu.stall_metric): family -> roll-ups
_STALL_READ = {"pcsamp_warps": ("", ".sum"), "average_warps": ("_per_issue_active.ratio",)}
_SHARE_COLUMNS = ("share", "fraction", "pct", "percent", "samples", "count", "value")


@register_derivation("dominant_stall")
def dominant_stall(evidence: Any, kernel: str | None = None, key: str | None = None,
                   exclude: tuple[str, ...] | list[str] = ("selected",)) -> str:
    """The stall reason with the largest share for ``kernel`` (all rows if None).

    ``exclude`` drops reasons that are not stalls (``selected`` = the warp issued).
    Reads either a breakdown with a ``reason`` column and a share column (one of
    ``share, fraction, pct, percent, samples, count, value``), or the tidy ncu frame
    ``(kernel, launch, metric, unit, value)`` with ``smsp__pcsamp_warps_issue_stalled_<reason>``
    (``_not_issued`` variants ignored) or ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``
    rows. Shares are summed over launches; ties go to the alphabetically first reason.
    """
    from ..analysis import stalls  # heavy: pandas, only here
    from ..parse.ncu import stall_metric  # heavy: pandas, only here

    df = as_frame(evidence, key)
    if kernel is not None:
        if "kernel" not in df.columns:
            raise DerivationError(f"evidence has no 'kernel' column to pick {kernel!r}; columns: {list(df.columns)}")
        sel = df[df["kernel"] == kernel]
        if sel.empty:
            sel = df[df["kernel"].astype(str).str.contains(kernel, regex=False)]
        if sel.empty:
            raise DerivationError(f"no rows for kernel {kernel!r}; kernels: {sorted(set(map(str, df['kernel'])))}")
        df = sel
    if "reason" in df.columns:
        share = next((c for c in _SHARE_COLUMNS if c in df.columns), None)
        if share is None:
            raise DerivationError(f"stall breakdown has no share column (one of {_SHARE_COLUMNS}); "
                                  f"columns: {list(df.columns)}")
        pairs = [(str(r), _number(v, f"{share} of {r!r}")) for r, v in zip(df["reason"], df[share], strict=True)]
    elif {"metric", "value"} <= set(df.columns):
        pairs = []
        for metric, v in zip(df["metric"], df["value"], strict=True):
            m = stall_metric(str(metric))
            if m and m["rollup"] in _STALL_READ.get(m["family"], ()) and not m["not_issued"]:
                pairs.append((m["reason"], _number(v, str(metric))))
    else:
        raise DerivationError(f"not a stall breakdown: expected a 'reason' column or ncu 'metric'/'value' "
                              f"columns; got {list(df.columns)}")
    if not pairs:
        raise DerivationError("no stall reasons found in the evidence")
    totals: dict[str, float] = {}
    skip = {stalls.normalize(e) for e in exclude}
    for r, v in pairs:
        r = stalls.normalize(r)
        if r not in skip:
            totals[r] = totals.get(r, 0.0) + v
    if not totals:
        raise DerivationError(f"only excluded stall reasons {sorted(skip)} in the evidence")
    return stalls.dominant_item(totals, include_selected=True)[0]  # the series' one rule (exclusions done above)


@register_derivation("dominant_stall_share")
def dominant_stall_share(evidence: Any, key: str | None = None, exclude: tuple[str, ...] | list[str] = ("selected",)) -> float:
    """The share of all samples held by the dominant stall reason: its samples over the samples of every reason
    (``selected`` included in the total, left out of the choice, by the series' one rule
    :func:`infralens_lab.analysis.stalls.dominant_item`). Reads a breakdown with ``reason`` and ``samples``
    columns (one copy or kernel: :func:`infralens_lab.analysis.copies.reason_shares`), a fraction 0..1."""
    from ..analysis import stalls  # heavy: pandas, only here

    df = as_frame(evidence, key)
    if not {"reason", "samples"} <= set(df.columns):
        raise DerivationError(f"dominant_stall_share needs 'reason' and 'samples' columns; got {list(df.columns)}")
    totals: dict[str, float] = {}
    for r, v in zip(df["reason"], df["samples"], strict=True):
        totals[stalls.normalize(str(r))] = totals.get(stalls.normalize(str(r)), 0.0) + _number(v, f"samples of {r!r}")
    total = sum(totals.values())
    if not total > 0:
        raise DerivationError("dominant_stall_share: the breakdown has no samples")
    skip = {stalls.normalize(e) for e in exclude}
    kept = {r: v for r, v in totals.items() if r not in skip}
    if not kept:
        raise DerivationError(f"only excluded stall reasons {sorted(skip)} in the evidence")
    return stalls.dominant_item(kept, include_selected=True)[1] / total


@register_derivation("source")
def source(evidence: Any) -> str:
    """Where an Evidence came from: ``'live'`` or ``'recorded'`` (its provenance source)."""
    prov = getattr(evidence, "provenance", None)
    if prov is None or not hasattr(prov, "source"):
        raise DerivationError(f"'source' needs an Evidence with provenance, got {type(evidence).__name__}")
    return prov.source


@register_derivation("formula")
def formula(evidence: Any, fn: str, scale: float = 1.0, **args: Any) -> Any:
    """The package's own formula on the evidence: ``fn`` names ``'module:function'`` of
    ``infralens_lab.analysis`` (e.g. ``'scaling:largest_busbw'``), called as ``function(evidence, **args)``, or
    ``function(**evidence, **args)`` when the evidence is a dict of its arguments; a number result is multiplied
    by ``scale`` (e.g. 1e-3 for µs to ms). So an exercise's key is the very function the lab's tables use."""
    mod, _, name = str(fn).partition(":")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", mod) or not name.isidentifier():
        raise DerivationError(f"formula fn={fn!r}; expected 'module:function' of infralens_lab.analysis")
    try:
        f = getattr(importlib.import_module(f"infralens_lab.analysis.{mod}"), name)
    except (ImportError, AttributeError) as exc:
        raise DerivationError(f"formula fn={fn!r} cannot be loaded: {exc}") from None
    try:
        v = f(**evidence, **args) if isinstance(evidence, dict) else f(evidence, **args)
    except (TypeError, ValueError, KeyError) as exc:
        raise DerivationError(f"formula {fn} on this evidence failed: {type(exc).__name__}: {exc}") from None
    return v * scale if isinstance(v, (int, float)) and not isinstance(v, bool) and scale != 1.0 else v


# ---------------------------------------------------------------- lab-specific
def _launch_1d(evidence: Any, n: str, block: str, where: dict | None, what: str) -> tuple[int, int]:
    """(elements, block size) of a 1-D launch, read from columns ``n`` and ``block``; both must be >= 1."""
    elements = int(_number(value(evidence, column=n, where=where), f"column {n!r}"))
    size = int(_number(value(evidence, column=block, where=where), f"column {block!r}"))
    if elements < 1 or size < 1:
        raise DerivationError(f"{what} needs n >= 1 and block >= 1, got n={elements}, block={size}")
    return elements, size


@register_derivation("masked_lanes")
def masked_lanes(evidence: Any, n: str = "n", block: str = "block_size", where: dict | None = None) -> int:
    """Lab 00: offsets masked off in the last program of a 1-D launch, ``ceil(n/B)*B - n``."""
    elements, size = _launch_1d(evidence, n, block, where, "masked_lanes")
    return -(-elements // size) * size - elements


@register_derivation("programs")
def programs(evidence: Any, n: str = "n", block: str = "block_size", where: dict | None = None) -> int:
    """Lab 00: programs in a 1-D launch that covers ``n`` elements ``block`` at a time, ``ceil(n/B)``."""
    elements, size = _launch_1d(evidence, n, block, where, "programs")
    return -(-elements // size)


def _trace(evidence: Any, what: str):
    """The evidence as a parsed trace (anything with ``summary``, ``steady_window`` and ``kernels``)."""
    if not all(hasattr(evidence, a) for a in ("summary", "steady_window", "kernels")):
        raise DerivationError(f"{what} needs a parsed trace (infralens_lab.parse.trace.Trace), got "
                              f"{type(evidence).__name__}")
    return evidence


@register_derivation("trace_idle_share")
def trace_idle_share(evidence: Any) -> float:
    """Lab 01: the share (0..1) of the steady window (:meth:`Trace.steady_window`, whole periods) in which the GPU
    ran none of the work the profiled steps launched: ``1 - summary()['gpu_utilization']``."""
    util = _trace(evidence, "trace_idle_share").summary().get("gpu_utilization")
    if util is None:
        raise DerivationError("the trace has no GPU work in its profiled steps, so no idle share")
    return 1.0 - util


@register_derivation("trace_period_ms")
def trace_period_ms(evidence: Any) -> float:
    """Lab 01: the steady period (ms): from the end of the first profiled step's GPU work to the end of the last
    one's, over the steps between (:meth:`Trace.steady_window`)."""
    sw = _trace(evidence, "trace_period_ms").steady_window()
    if sw is None:
        raise DerivationError("the trace has fewer than two profiled steps that launched GPU work")
    a, b, periods = sw
    return (b - a) / periods / 1e3


@register_derivation("hot_kernel_pct")
def hot_kernel_pct(evidence: Any) -> float:
    """Lab 01: the hottest kernel's share (%) of the kernel time the profiled steps launched (:meth:`Trace.kernels`)."""
    k = _trace(evidence, "hot_kernel_pct").kernels()
    if k.empty:
        raise DerivationError("the trace has no kernels launched in its profiled steps")
    return float(k["pct"].iloc[0])


@register_derivation("step_bound")
def step_bound(evidence: Any) -> float:
    """Lab 01: the bound of a fix with both floors, :func:`infralens_lab.analysis.overlap.step_bound` on the
    evidence's ``period_ms, gpu_ms, cpu_ms, fraction, speedup`` (a dict)."""
    from ..analysis.overlap import step_bound as _step_bound  # heavy: pandas, only here

    keys = ("period_ms", "gpu_ms", "cpu_ms", "fraction", "speedup")
    if not isinstance(evidence, dict) or not set(keys) <= set(evidence):
        seen = sorted(evidence) if isinstance(evidence, dict) else type(evidence).__name__
        raise DerivationError(f"step_bound needs a dict with {list(keys)}; got {seen}")
    return _step_bound(**{k: float(evidence[k]) for k in keys}).bound


@register_derivation("overlap_bound")
def overlap_bound(evidence: Any, period: str, hidden: str, floors: list[str] | tuple[str, ...],
                  where: dict | None = None, key: str | None = None) -> float:
    """Lab 05: the best speedup of a step when ``hidden`` of it runs under the rest, with both floors (Amdahl's
    and the overlap floor), from one row's columns (:func:`infralens_lab.analysis.overlap.overlap_bound`)."""
    from ..analysis.overlap import overlap_bound as _overlap_bound  # heavy: pandas, only here

    def col(c):
        return _number(value(evidence, column=c, where=where, key=key), f"column {c!r}")

    try:
        return _overlap_bound(col(period), col(hidden), [col(c) for c in floors])["bound"]
    except ValueError as exc:
        raise DerivationError(str(exc)) from None


@register_derivation("smallest_k")
def smallest_k(evidence: Any, max_false_alarm_pct: float = 1.0, key: str | None = None) -> int:
    """Lab 07: the smallest k of a k table (:func:`infralens_lab.analysis.gates.k_table`) whose false-alarm rate
    is at most ``max_false_alarm_pct`` (:func:`infralens_lab.analysis.gates.smallest_k`)."""
    from ..analysis import gates as _gates  # heavy: pandas, only here

    df = as_frame(evidence, key)
    for c in ("k", "false_alarm_pct"):
        if c not in df.columns:
            raise DerivationError(f"not a k table: no column {c!r}; columns: {list(df.columns)}")
    k = _gates.smallest_k(df, max_false_alarm_pct)
    if k is None:
        raise DerivationError(f"no k in the table keeps false alarms at or under {max_false_alarm_pct}%")
    return k


@register_derivation("gates_tripped")
def gates_tripped(evidence: Any, base: str = "intended", key: str | None = None) -> int:
    """Lab 07: how many (regression, count gate) pairs trip when each gate is set at the ``base`` step's count
    (:func:`infralens_lab.analysis.gates.gates_tripped`, the project's count rule)."""
    from ..analysis import gates as _gates  # heavy: pandas, only here

    try:
        t = _gates.gates_tripped(as_frame(evidence, key), base=base)
    except (KeyError, ValueError) as exc:
        raise DerivationError(f"cannot hold the counts to the {base!r} step: {exc}") from None
    return int(t[list(_gates.COUNT_METRICS)].to_numpy().sum())
