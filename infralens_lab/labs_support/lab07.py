"""Glue for lab 07 (regression gates): the live ResNet-50 trace here, the recorded GPU traces and gate record,
and which columns of them to show. Measuring is :mod:`infralens_lab.measure.gates`' and
:mod:`infralens_lab.measure.top_ops`', the arithmetic :mod:`infralens_lab.analysis.gates`'; the notebook calls
them in the open. A loader whose record is absent prints what is missing and returns ``None``.
"""
from __future__ import annotations

import pandas as pd

from .. import evidence
from ..analysis.formats import family_saving, forward_spread, forward_times  # noqa: F401  (the notebook uses them)
from ..analysis.gates import regression_times  # noqa: F401  (re-exported for the notebook)
from ..analysis.overlap import host_pace
from ..measure.top_ops import forward_busy, kernel_families, kernel_family, kernel_sums
from ..measure.torch_trace import profile
from ..measure.torch_trace import quiet_profiler_chatter as quiet_stderr  # (the notebook uses it)
from ..parse.trace import Trace, load_trace
from ..workloads.resnet import MEMORY_FORMATS, inference_step
from . import store  # noqa: F401  (re-exported for the notebook)

CPU_BATCH, CPU_SIZE = 1, 224  # one image at full size: ~40 ms a forward on a laptop core
RECORD_HINT = "on a GPU by `python -m infralens_lab record --only gates`"


def live_resnet(memory_format: str = "channels_first") -> tuple[Trace, evidence.Evidence]:
    """Profile ResNet-50 inference here (one warm-up forward, two recorded) at ``CPU_BATCH`` x 3 x ``CPU_SIZE``²,
    fp32; returns ``(Trace, Evidence)``."""
    step = inference_step(CPU_BATCH, CPU_SIZE, memory_format)
    with quiet_stderr():
        tr = profile(step, wait=0, warmup=1, active=2)
    cmd = f"torch_trace.profile(resnet.inference_step({CPU_BATCH}, {CPU_SIZE}, {memory_format!r}), wait=0, warmup=1, active=2)"
    return tr, evidence.live(f"resnet_trace_{memory_format}_live", {"summary": tr.summary()}, cmd)


def op_counts(tr: Trace) -> pd.DataFrame:
    """aten ops by calls per forward (counts only: the same on every run): ``op, calls_per_step``."""
    ops = tr.ops()
    ops = ops[ops["name"].str.startswith("aten::")]
    out = pd.DataFrame({"op": ops["name"], "calls_per_step": ops["count"] / max(1, len(tr.steps()))})
    return out.sort_values(["calls_per_step", "op"], ascending=[False, True]).reset_index(drop=True)


def recorded_resnet(st) -> dict | None:
    """``{memory_format: (Trace, Evidence)}`` from the recorded set, or None with a note."""
    want = {f: f"resnet_trace_{f}" for f in MEMORY_FORMATS}
    missing = [n for n in want.values() if st is None or n not in st.names()]
    if missing:
        print(f"Recorded ResNet-50 traces: {missing} not in the recorded set yet; they are written {RECORD_HINT}.")
        return None
    return {f: (load_trace(st.load(n)), st.load(n)) for f, n in want.items()}


def recorded_gates(st) -> evidence.Evidence | None:
    """The ``gates_gpu`` record, or None with a note."""
    if st is None or "gates_gpu" not in st.names():
        print(f"Recorded gate evidence: `gates_gpu` is not in the recorded set yet; it is written {RECORD_HINT}.")
        return None
    return st.load("gates_gpu")


def busy_table(traces: dict, gev) -> pd.DataFrame:
    """Per memory format, how much of the forward the GPU ran kernels (:func:`measure.top_ops.forward_busy`),
    profiled and against the forward timed without the profiler (the ``gates_gpu`` record), with that share at
    the forward's p90 and p10 (``busy_low_pct``, ``busy_high_pct``) and the one rule's ``verdict``
    (:func:`infralens_lab.analysis.overlap.host_pace`: host-bound, not host-bound, or borderline)."""
    rows = []
    for f, (tr, _) in traces.items():
        b = forward_busy(tr, gev.values["resnet"][f]["median_ms"] if gev is not None else None)
        v = host_pace(b["busy_ms"], forward_spread(gev.values, f)).as_row() if gev is not None else {}
        rows.append({"format": f, "kernels": b["kernels"], "kernel_ms": b["kernel_ms"], "profiled_ms": b["profiled_ms"],
                     "busy_profiled_pct": b["busy_pct"], "forward_ms": b.get("forward_ms"),
                     "busy_pct": b.get("busy_pct_unprofiled"), "busy_low_pct": v.get("busy_low_pct"),
                     "busy_high_pct": v.get("busy_high_pct"), "verdict": v.get("verdict")})
    return pd.DataFrame(rows)


def pace_verdicts(traces: dict, gev) -> dict:
    """``{format: PaceVerdict}`` for the recorded forwards (the one rule, with the forward's spread)."""
    return {f: host_pace(forward_busy(tr)["busy_ms"], forward_spread(gev.values, f)) for f, (tr, _) in traces.items()}


def pace_by_gpu(root=None) -> tuple[pd.DataFrame, dict]:
    """The rule on every recorded single-GPU set holding lab 07's evidence, each GPU from its own recording: a table
    (``gpu, format`` and :meth:`PaceVerdict.as_row`) and ``{gpu: {format: PaceVerdict}}``."""
    verdicts = {st.gpu: pace_verdicts({f: (load_trace(st.load(f"resnet_trace_{f}")), None) for f in MEMORY_FORMATS},
                                      st.load("gates_gpu")) for st in evidence.load_all_sets(root)
                if {"gates_gpu", *(f"resnet_trace_{f}" for f in MEMORY_FORMATS)} <= set(st.names())}
    rows = [{"gpu": g, "format": f, **v.as_row()} for g, vs in verdicts.items() for f, v in vs.items()]
    return pd.DataFrame(rows), verdicts


def layout_saving(traces: dict, gev) -> dict:
    """lab07.q5's evidence: :func:`analysis.formats.family_saving` of the recorded kernel sums, each with its spread
    (:func:`measure.top_ops.kernel_sums`), as the grading key builds it."""
    fams, samples = kernel_sums({f: tr for f, (tr, _) in traces.items()}, gev.values)
    return family_saving(fams, samples=samples)


def format_compare(traces: dict) -> pd.DataFrame:
    """Kernel launches and µs per forward by family, one column pair per memory format, and a total row."""
    parts = []
    for fmt, (tr, _) in traces.items():
        n = max(1, len(tr.steps()))
        f = kernel_families(tr).set_index("family")[["launches", "total_us"]] / n
        parts.append(f.rename(columns={"launches": f"{fmt}_launches", "total_us": f"{fmt}_us"}))
    out = pd.concat(parts, axis=1).fillna(0)
    out.loc["all kernels"] = out.sum()
    return out.reset_index().rename(columns={"index": "family"})


def variants_table(ev) -> pd.DataFrame | None:
    """What moves the launch-bound forward (``resnet_variants``: eager, CUDA graph, torch.compile): time, kernels
    and GPU busy share per forward, or None with a note when the record predates it."""
    v = (ev.values if ev is not None else {}).get("resnet_variants")
    if not v:
        print(f"ResNet-50 as a CUDA graph or compiled: not in this recording yet; it is measured {RECORD_HINT}.")
        return None
    t = pd.DataFrame([{"variant": r["variant"], "median_ms": r["median_ms"], "kernels": max(r["kernels"]),
                       "kernel_ms": r["kernel_us"] / 1e3, "busy_pct": 100 * r["gpu_busy_us"] / (r["median_ms"] * 1e3)}
                      for r in v["rows"]])
    t["vs_eager"] = t.loc[t["variant"] == "eager", "median_ms"].iloc[0] / t["median_ms"]
    if v.get("compile_error"):
        t.attrs["note"] = f"torch.compile failed on the recording GPU: {v['compile_error']}"
    return t


def matmul_kernels(ev) -> pd.DataFrame | None:
    """The GEMM kernels of the eager intended step and of the fp32_matmul regression (recorded), whole launches
    per step when the record counts them by the attribution rule (``per_step`` lists); an older record counted
    the warm-up step's leftovers too, so then only the time per launch is shown, with ``attrs['note']``."""
    if ev is None:
        return None

    rows, old = [], False
    for r in ev.values.get("regressions", []):
        if r["compiled"] or r["regression"] not in ("intended", "fp32_matmul"):
            continue
        old = old or "per_step" not in r
        for k in r.get("kernels", []):
            if kernel_family(k["name"]) in ("gemm", "convolution"):
                row = {"step": r["regression"], "kernel": k["name"], "us_per_launch": k["total_us"] / k["per_step"]}
                if "per_step" in r:
                    row.update(per_step=int(k["per_step"]), us_per_step=k["total_us"])
                rows.append(row)
    out = pd.DataFrame(rows)
    if old:
        out.attrs["note"] = ("This recording counted kernels over the whole trace, warm-up leftovers included, so its "
                             f"per-step counts are not whole; per launch the times hold. Re-recorded {RECORD_HINT}, "
                             "the table counts each step's own launches.")
    return out
