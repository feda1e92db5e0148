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

from ..parse.trace import CPU_CATS, Trace, step_gpu_work

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


def family_us(tr: Trace) -> dict[str, float]:
    """Kernel µs per profiled forward (step) by family (:func:`kernel_families`' totals over the steps):
    ``{family: µs}``, empty for a CPU-only trace."""
    n = max(1, len(tr.steps()))
    return {r.family: float(r.total_us) / n for r in kernel_families(tr).itertuples(index=False)}


def gpu_work_samples(tr: Trace) -> list[float]:
    """The GPU work of each profiled forward (step), µs: summed durations of the kernels, copies and memsets it
    launched (:func:`~infralens_lab.parse.trace.step_gpu_work`), one sample per step: how steady a kernel sum is
    from forward to forward."""
    return [float(x) for x in step_gpu_work(tr)["gpu_work_us"]]


def kernel_sums(traces: dict, gates_values: dict | None = None) -> tuple[dict, dict]:
    """``({format: family_us(trace)}, {format: [GPU work µs per profiled forward]})`` for the recorded ResNet-50
    forwards (``{format: Trace}``): the samples are the trace's own forwards and, for channels_last, the
    ``resnet_variants`` eager forward of ``gates_values`` when it ran the same batch (its mean GPU work, one more
    sample). What :func:`infralens_lab.analysis.formats.family_saving` takes (lab07.q5 and its grading key)."""
    fams = {f: family_us(tr) for f, tr in traces.items()}
    samples = {f: gpu_work_samples(tr) for f, tr in traces.items()}
    gv = gates_values or {}
    v = gv.get("resnet_variants") or {}
    if "channels_last" in samples and v.get("batch") == gv.get("resnet", {}).get("channels_last", {}).get("batch"):
        samples["channels_last"] += [float(r["kernel_us"]) for r in v.get("rows", [])
                                     if r.get("variant") == "eager" and r.get("kernel_us")]
    return fams, samples


def op_calls(tr: Trace) -> pd.DataFrame:
    """Every aten op call of the profiled steps: ``name``, ``dur_us`` (inclusive: its whole CPU time) and
    ``children_us`` (the time of the events directly inside it on its thread: inner ops and launch calls),
    so that ``dur_us - children_us`` is its self time (the trace's own rule, ``Trace.self_us``)."""
    ev = tr.events
    st = tr.steps()
    ops = ev[ev["cat"] == "cpu_op"]
    if not st.empty:
        ops = ops[(ops["start_us"] >= st["cpu_start_us"].min()) & (ops["start_us"] < st["cpu_end_us"].max())]
    self_us = pd.Series([tr.self_us.get(i, 0.0) for i in ops.index], index=ops.index, dtype=float)
    return pd.DataFrame({"name": ops["name"], "dur_us": ops["dur"], "children_us": ops["dur"] - self_us}).reset_index(drop=True)


def cpu_events(tr: Trace) -> pd.DataFrame:
    """The profiled steps' CPU events (aten ops, runtime and driver calls, ranges) on the trace's one CPU thread, as
    ``name, start_us, dur_us`` (µs): what :func:`op_calls` reads its calls from, left for the reader to nest (lab
    07's exercise 1). The events that start inside the profiled steps' CPU span, as :func:`op_calls` keeps them.
    ValueError when the trace has CPU events on more than one thread (nesting is per thread)."""
    ev, st = tr.events, tr.steps()
    cpu = ev[ev["cat"].isin(CPU_CATS)]
    threads = sorted(cpu[["pid", "tid"]].drop_duplicates().itertuples(index=False, name=None))
    if len(threads) > 1:
        raise ValueError(f"the trace has CPU events on {len(threads)} threads {threads[:4]}; expected one "
                         "(nest each thread's events apart)")
    if not st.empty:
        cpu = cpu[(cpu["start_us"] >= st["cpu_start_us"].min()) & (cpu["start_us"] < st["cpu_end_us"].max())]
    return pd.DataFrame({"name": cpu["name"], "start_us": cpu["start_us"], "dur_us": cpu["dur"]}).reset_index(drop=True)


def op_times(tr: Trace, top: int | None = None) -> pd.DataFrame:
    """aten ops per profiled step: ``name``, ``calls``, ``inclusive_ms`` and ``self_ms`` (CPU, from :func:`op_calls`),
    ``rank_inclusive`` and ``rank_self`` (1 = largest; ties by name), sorted by self time."""
    c = op_calls(tr)
    n = max(1, len(tr.steps()))
    g = c.assign(self_us=c["dur_us"] - c["children_us"]).groupby("name").agg(
        calls=("dur_us", "count"), inclusive_us=("dur_us", "sum"), self_us=("self_us", "sum")).reset_index()
    out = pd.DataFrame({"name": g["name"], "calls": g["calls"] / n, "inclusive_ms": g["inclusive_us"] / n / 1e3,
                        "self_ms": g["self_us"] / n / 1e3})
    for col, rank in (("inclusive_ms", "rank_inclusive"), ("self_ms", "rank_self")):
        order = out.sort_values([col, "name"], ascending=[False, True]).index
        out.loc[order, rank] = range(1, len(out) + 1)
    out = out.astype({"rank_inclusive": int, "rank_self": int}).sort_values("rank_self").reset_index(drop=True)
    return out.head(top) if top else out


def outermost_ops(tr: Trace, top: int | None = None) -> pd.DataFrame:
    """The ops the model's Python called (aten ops not inside another aten op), by their CPU time per profiled
    step (inclusive: dispatch, inner ops, launch calls): ``op, calls, cpu_ms, pct`` (of the step's CPU time).
    When the GPU waits on the CPU (a launch-bound step) this is where the wall time goes, op by op."""
    ev = tr.events
    st = tr.steps()
    ops = ev[ev["cat"] == "cpu_op"].sort_values(["pid", "tid", "start_us", "end_us"], ascending=[True, True, True, False])
    keep, end, key = [], -1.0, None
    for r in ops.itertuples():
        if (r.pid, r.tid) != key:
            key, end = (r.pid, r.tid), -1.0
        if r.start_us >= end:
            keep.append(r.Index)
            end = r.end_us
    top_ops = ops.loc[keep]
    n = max(1, len(st))
    if not st.empty:
        top_ops = top_ops[(top_ops["start_us"] >= st["cpu_start_us"].min()) & (top_ops["start_us"] < st["cpu_end_us"].max())]
    g = top_ops.groupby("name")["dur"].agg(calls="count", cpu_us="sum").reset_index()
    step_us = float((st["cpu_end_us"] - st["cpu_start_us"]).sum()) if not st.empty else float(g["cpu_us"].sum())
    out = pd.DataFrame({"op": g["name"], "calls": g["calls"] / n, "cpu_ms": g["cpu_us"] / n / 1e3,
                        "pct": 100 * g["cpu_us"] / step_us})
    out = out.sort_values(["cpu_ms", "op"], ascending=[False, True]).reset_index(drop=True)
    return out.head(top) if top else out


def forward_busy(tr: Trace, forward_ms: float | None = None) -> dict:
    """How much of a profiled forward the GPU spent running kernels, per profiled step (the attribution rule):
    ``kernels``, ``kernel_ms`` (their summed time), ``busy_ms`` (merged), ``profiled_ms`` (from the step's CPU
    start to the end of its last GPU work: the forward as profiled, the profiler's own CPU cost included),
    ``busy_pct`` of that, and, with ``forward_ms`` (the same forward timed without the profiler),
    ``busy_pct_unprofiled`` = busy / forward_ms."""
    w = step_gpu_work(tr)
    if w["gpu_end_us"].isna().any():
        raise ValueError("a profiled step launched no GPU work: expected a GPU trace of a forward")
    span = (w["gpu_end_us"] - w["cpu_start_us"]).mean()
    out = {"kernels": float(w["kernels"].mean()), "kernel_ms": float(w["gpu_work_us"].mean()) / 1e3,
           "busy_ms": float(w["gpu_busy_us"].mean()) / 1e3, "profiled_ms": float(span) / 1e3}
    out["busy_pct"] = 100 * out["busy_ms"] / out["profiled_ms"]
    if forward_ms is not None:
        out["forward_ms"] = float(forward_ms)
        out["busy_pct_unprofiled"] = 100 * out["busy_ms"] / float(forward_ms)
    return out
