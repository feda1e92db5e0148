"""One forward in two memory formats (ResNet-50 channels_first against channels_last, lab 07): what a kernel-time
saving is made of, family by family, and what of it reached the wall clock, under the spread rule.

Kernel sums come from profiled forwards: the same kernels take the same time run to run, so a saving made of them
is a steady basis for a graded key (:func:`family_saving`; each sum carries its spread over the profiled forwards
the recording holds). Wall times are medians of CUDA-event timings whose p10-p90 can be wide (the host's issue
time moves from run to run): :func:`saving_on_wall` divides them only when both are steady
(:data:`infralens_lab.stats.SPREAD_LIMIT`), and :func:`saving_sentence` words the result from the signs of the
numbers, never from what they were expected to be. Times: ``_us`` microseconds, ``_ms`` milliseconds.
"""
from __future__ import annotations

import pandas as pd

from ..stats import SPREAD_LIMIT, Spread, ratio_range, require_steady, spread_of

BEFORE, AFTER = "channels_first", "channels_last"
LAYOUT = "layout transform"  # the kernel family channels_last removes (measure.top_ops.FAMILIES)


def forward_spread(gates_values: dict, fmt: str) -> Spread:
    """The recorded ResNet-50 forward time of ``fmt`` (``gates_gpu``'s ``resnet``: CUDA events, no profiler) as a
    :class:`~infralens_lab.stats.Spread` in ms: median, p10, p90 and the number of timings."""
    r = gates_values["resnet"][fmt]
    return Spread(r["median_ms"], r["p10_ms"], r["p90_ms"], r.get("n", 0))


def forward_times(ev) -> pd.DataFrame:
    """Recorded ResNet-50 forward time per memory format (the ``gates_gpu`` Evidence): batch, dtype, median and
    p10/p90 (ms, CUDA events) and ``spread_pct``, the p10-p90 width as a share of the median (the spread rule
    allows :data:`~infralens_lab.stats.SPREAD_LIMIT`)."""
    return pd.DataFrame([{"format": f, "batch": r["batch"], "dtype": r["dtype"], "median_ms": r["median_ms"],
                          "p10_ms": r["p10_ms"], "p90_ms": r["p90_ms"], "spread_pct": 100 * forward_spread(ev.values, f).rel}
                         for f, r in ev.values.get("resnet", {}).items()])


def family_saving(families: dict[str, dict[str, float]], family: str = LAYOUT, before: str = BEFORE,
                  after: str = AFTER, samples: dict[str, list[float]] | None = None) -> dict:
    """What share of the kernel time ``after`` saved over ``before`` one kernel ``family`` accounts for.

    ``families``: ``{format: {family: µs per forward}}`` (:func:`infralens_lab.measure.top_ops.family_us`).
    Returns ``kernel_us`` (each format's sum), ``kernel_saved_us``, ``kernel_saved_pct`` (of ``before``),
    ``family_saved_us`` (that family's own difference) and ``share`` = family saved / kernel saved. ``samples``
    (``{format: [GPU work µs, one per profiled forward]}``) give each sum its
    :class:`~infralens_lab.stats.Spread` from forward to forward (``kernel_spread``); a sum wider than the spread rule allows raises
    :class:`~infralens_lab.stats.SpreadTooWide`, so no key is derived from it. ValueError when a format is
    missing or nothing was saved."""
    missing = [f for f in (before, after) if f not in families]
    if missing:
        raise ValueError(f"family_saving: formats {missing} not in the families given ({sorted(families)}); "
                         f"expected {before!r} and {after!r}")
    kernel = {f: float(sum(families[f].values())) for f in (before, after)}
    saved = kernel[before] - kernel[after]
    if saved <= 0:
        raise ValueError(f"kernel time per forward {kernel}: {after!r} saved none over {before!r}; "
                         "the share of a saving is undefined")
    fam = float(families[before].get(family, 0.0)) - float(families[after].get(family, 0.0))
    out = {"kernel_us": kernel, "kernel_saved_us": saved, "kernel_saved_pct": 100 * saved / kernel[before],
           "family": family, "family_saved_us": fam, "share": fam / saved}
    if samples is not None:
        out["kernel_spread"] = {f: require_steady(f"{f} kernel time per forward", spread_of(samples[f]))
                                for f in (before, after)}
    return out


def saving_on_wall(kernel_ms: dict[str, float], wall: dict[str, Spread], before: str = BEFORE,
                   after: str = AFTER) -> dict:
    """What a kernel-time saving did to the wall clock: ``kernel_saved_ms`` and ``kernel_saved_pct``, the wall
    spreads, ``unsteady`` (``[(format, Spread)]`` wider than :data:`~infralens_lab.stats.SPREAD_LIMIT`) and
    ``steady``. Only when both wall times are steady: ``wall_saved_ms`` with ``wall_saved_range`` (before's p10
    minus after's p90 to before's p90 minus after's p10), ``share`` = wall saved / kernel saved and
    ``share_range``. ValueError when nothing was saved in kernel time."""
    ks = kernel_ms[before] - kernel_ms[after]
    if ks <= 0:
        raise ValueError(f"kernel time {kernel_ms}: {after!r} saved none over {before!r}; the share is undefined")
    unsteady = [(f, wall[f]) for f in (before, after) if not wall[f].steady()]
    out = {"kernel_ms": dict(kernel_ms), "kernel_saved_ms": ks, "kernel_saved_pct": 100 * ks / kernel_ms[before],
           "wall": {f: wall[f] for f in (before, after)}, "unsteady": unsteady, "steady": not unsteady,
           "before": before, "after": after}
    if not unsteady:
        b, a = wall[before], wall[after]
        ws, lo, hi = b.median - a.median, b.p10 - a.p90, b.p90 - a.p10
        out.update(wall_saved_ms=ws, wall_saved_range=(lo, hi), share=ws / ks, share_range=(lo / ks, hi / ks))
    return out


def saving_sentence(g: dict) -> str:
    """One sentence for :func:`saving_on_wall`'s result, worded from the numbers' signs: refused (with the
    spread that was too wide) when a wall time is unsteady; else part, all, more than all, or none of the kernel
    saving reaching the wall clock, each with its range."""
    b, a = g["before"], g["after"]
    head = (f"{a} cut the kernel time {g['kernel_saved_pct']:.0f}% ({g['kernel_ms'][b]:.2f} -> "
            f"{g['kernel_ms'][a]:.2f} ms per forward)")
    wb, wa = g["wall"][b], g["wall"][a]
    if not g["steady"]:
        f, s = max(g["unsteady"], key=lambda x: x[1].rel)
        return (f"{head}; the wall-time medians moved {wb.median:.2f} -> {wa.median:.2f} ms, but {f}'s p10-p90 "
                f"({s.p10:.2f}-{s.p90:.2f} ms) spans {s.rel:.0%} of its median, over the {SPREAD_LIMIT:.0%} the "
                "spread rule allows: this recording cannot say how much of the kernel saving reached the wall clock")
    ws, (lo, hi) = g["wall_saved_ms"], g["wall_saved_range"]
    s, (slo, shi) = g["share"], g["share_range"]
    wall = f"the wall time changed {-ws:+.2f} ms ({-hi:+.2f} to {-lo:+.2f} over both p10-p90)"
    share = f"{s:.2f} of the kernel time saved ({slo:.2f}-{shi:.2f})"
    if shi < 0:
        return f"{head}, yet {wall}: it rose, so something besides the kernels got slower"
    if slo <= 0:
        return f"{head}; {wall}, a range that holds no change at all: the spread cannot tell whether any of it reached the wall clock"
    if shi < 1:
        return (f"{head}; {wall}, {share}: only part of it reached the wall clock, the rest lengthened the GPU's "
                "wait for the host")
    if slo > 1:
        return (f"{head}; {wall}, {share}: the wall time fell more than the kernel time, so the host's work per "
                "forward shrank too")
    return f"{head}; {wall}, {share}: within the spread, all of it reached the wall clock"


def kernel_spread_lines(saving: dict) -> list[str]:
    """One line per format of :func:`family_saving`'s ``kernel_spread``: the GPU work per profiled forward with its
    p10-p90 and its width against the spread rule, or, for a single recorded forward, that no spread was measured."""
    out = []
    for f, s in saving["kernel_spread"].items():
        if s.n < 2:
            out.append(f"{f}: {s.median:.1f} µs of GPU work in its one profiled forward (one sample: its spread is "
                       "not in this recording)")
        else:
            out.append(f"{f}: {s.text('µs', 1)} of GPU work per profiled forward: a p10-p90 of {100 * s.rel:.2f}% "
                       f"of the median (the spread rule allows {100 * SPREAD_LIMIT:.0f}%)")
    return out


def graph_gain(variants: dict) -> str:
    """What one CUDA graph did to the recorded forward (the ``resnet_variants`` record: eager and ``cuda_graph``
    rows), worded from the sign of its speedup over eager and that speedup's range over both timings' p10-p90
    (:func:`~infralens_lab.stats.ratio_range`)."""
    rows = {r["variant"]: r for r in variants["rows"]}
    e, g = (Spread(rows[v]["median_ms"], rows[v]["p10_ms"], rows[v]["p90_ms"], rows[v]["n"]) for v in ("eager", "cuda_graph"))
    lo, mid, hi = ratio_range(e, g)
    same = (f"the same {max(rows['eager']['kernels'])} kernels ({rows['eager']['kernel_us'] / 1e3:.2f} ms eager, "
            f"{rows['cuda_graph']['kernel_us'] / 1e3:.2f} ms replayed), launched by the host once instead of one by one")
    if lo > 1:
        return (f"One CUDA graph ran {same}, and the forward {mid:.2f}x faster ({lo:.2f}-{hi:.2f}x over both timings' "
                f"p10-p90): {e.median - g.median:.2f} of its {e.median:.2f} ms were the host's launches")
    if hi < 1:
        return f"One CUDA graph ran {same}, and the forward got slower: {mid:.2f}x ({lo:.2f}-{hi:.2f}x)"
    return f"One CUDA graph ran {same}, and the forward's time moved {mid:.2f}x ({lo:.2f}-{hi:.2f}x): no change beyond the spread"
