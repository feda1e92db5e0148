"""Top operators and kernels of a model from a torch.profiler trace, without counting one op three times.

An aten op's device time in :meth:`Trace.ops` is *inclusive*: ``aten::conv2d`` calls
``aten::convolution``, which calls ``aten::_convolution``, which calls ``aten::cudnn_convolution``,
and the kernel that last one launched is charged to all four. Ranking by that column puts a chain of
wrappers of one operation at the top. :func:`innermost_ops` charges each kernel once, to the
innermost aten op open when it was launched (its leaf op); :func:`kernel_families` sorts kernel
names into families (convolution, GEMM, layout transform, ...) by patterns in their names, the way
one reads a kernel list. Times in microseconds (``_us``).
"""
from __future__ import annotations

import re

import pandas as pd

from ..parse.trace import Trace

FAMILIES = (  # first match wins; patterns on the kernel name, case-insensitive
    ("layout transform", r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|transpose|permute"),
    ("convolution", r"conv|fprop|dgrad|wgrad|implicit_?gemm|winograd"),
    ("gemm", r"gemm|cutlass|cublas|matmul|Kernel2|xmma"),
    ("batch norm", r"batch_?norm|bn_fw|bn_"),
    ("pooling", r"pool"),
    ("reduction", r"reduce"),
    ("elementwise", r"elementwise|vectorized|unrolled"),
)


def kernel_family(name: str) -> str:
    """The family of a kernel name (:data:`FAMILIES`), or ``'other'``."""
    if not isinstance(name, str):
        raise TypeError(f"kernel name is {type(name).__name__}; expected a str")
    for fam, rx in FAMILIES:
        if re.search(rx, name, flags=re.IGNORECASE):
            return fam
    return "other"


def innermost_ops(tr: Trace, top: int | None = None) -> pd.DataFrame:
    """aten ops by the device time of the kernels they launched themselves: ``op, kernels, device_us,
    pct`` (of all kernel time charged to some op), each kernel charged to the innermost ``cpu_op``
    enclosing its launch call. Empty (with ``attrs['note']``) for a CPU-only trace."""
    ev = tr.events
    rows: dict[str, list[float]] = {}
    for g, rt in tr.launcher.items():
        if ev.at[g, "cat"] != "kernel":
            continue
        ops = [i for i in tr.enclosing.get(rt, []) if ev.at[i, "cat"] == "cpu_op"]
        if not ops:
            continue
        name = ev.at[ops[-1], "name"]
        r = rows.setdefault(name, [0, 0.0])
        r[0] += 1
        r[1] += float(ev.at[g, "dur"])
    out = pd.DataFrame([(n, c, d) for n, (c, d) in rows.items()], columns=["op", "kernels", "device_us"])
    if out.empty:
        out["pct"] = []
        out.attrs["note"] = "no kernels in this trace (a CPU-only trace): rank ops by self_cpu_us instead"
        return out
    out["pct"] = 100 * out["device_us"] / out["device_us"].sum()
    out = out.sort_values(["device_us", "op"], ascending=[False, True]).reset_index(drop=True)
    return out.head(top) if top else out


def kernel_families(tr: Trace) -> pd.DataFrame:
    """Kernel time by family: ``family, kernels (distinct names), launches, total_us, pct``."""
    k = tr.kernels()
    if k.empty:
        out = pd.DataFrame(columns=["family", "kernels", "launches", "total_us", "pct"])
        out.attrs["note"] = k.attrs.get("note", "")
        return out
    k = k.assign(family=[kernel_family(n) for n in k["name"]])
    g = k.groupby("family").agg(kernels=("name", "count"), launches=("count", "sum"),
                                total_us=("total_us", "sum")).reset_index()
    g["pct"] = 100 * g["total_us"] / g["total_us"].sum()
    return g.sort_values(["total_us", "family"], ascending=[False, True]).reset_index(drop=True)
