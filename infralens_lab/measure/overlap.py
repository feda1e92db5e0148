"""Measurements for lab 05: host-to-device bandwidth, copy/compute traces, two-stage pipeline traces,
launch overhead with and without CUDA graphs, torch.compile time, graph breaks and fusion.

Each function runs a workload from :mod:`infralens_lab.workloads.overlap` and returns JSON-shaped
dicts or :class:`~infralens_lab.parse.trace.Trace` objects; the maths on them lives in
:mod:`infralens_lab.analysis.overlap`. GPU-only requests raise
:class:`~infralens_lab.workloads.overlap.NeedsGpu` with the reason. :func:`record_into` is the
recorder's ``overlap`` step: every record it writes is listed in :data:`RECORDS`. Times: ``_ms``
milliseconds, ``_s`` seconds, ``_us`` microseconds.
"""
from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from functools import partial

from ..device import is_gpu, synchronize
from ..parse.trace import Trace, trim
from ..units import MiB
from .timing import summarize, synced_wall_ms, time_fn
from .torch_trace import chrome_trace_of, profile

RECORDS = ("overlap_h2d", "trace_copy_pageable", "trace_copy_pinned", "trace_copy_double_buffered",
           "trace_pipeline_d1", "trace_pipeline_d2", "trace_launch_eager", "trace_launch_graph",
           "launch_overhead", "trace_compile_breaks", "trace_compile_whole", "compile_study", "fusion",
           "trace_fusion_eager", "trace_fusion_compiled", "graph_limits", "trace_launch_reduce_overhead")
PIPELINE_ITEMS = 10
CPU_STAGE_MS, CPU_ITEMS = (20.0, 30.0), 8  # the CPU pipeline's stand-in stages (sleeps) and items, lab 05 and its key
LAUNCH_OPS, LAUNCH_NUMEL = 200, 1024
BLOCKNET_GPU = {"width": 1024, "blocks": 8, "batch": 256}
BLOCKNET_CPU = {"width": 32, "blocks": 6, "batch": 8}
FUSION_NUMEL = 256 * MiB // 4  # 256 MiB of fp32: far above L2, so the byte model's no-reuse assumption holds


def wall(fn: Callable[[], object], repeats: int = 20, warmup: int = 3) -> dict:
    """Median wall-clock milliseconds of ``fn()`` followed by a device synchronise (on a CPU, just
    ``fn()``), after ``warmup`` untimed calls; also the first warm-up call's time (``first_ms``)."""
    if not isinstance(repeats, int) or repeats < 1 or not isinstance(warmup, int) or warmup < 1:
        raise ValueError(f"repeats={repeats!r}, warmup={warmup!r}; expected positive ints")
    t0 = time.perf_counter()
    fn()
    synchronize()
    first = (time.perf_counter() - t0) * 1e3
    for _ in range(warmup - 1):
        fn()
    synchronize()
    samples = synced_wall_ms(fn, repeats, synchronize)
    t = summarize(samples, "cpu_wall", "perf_counter around fn(); synchronize")
    return {"first_ms": first, **t.as_dict()}


def back_to_back_ms(fn: Callable[[], object], calls: int = 50, warmup: int = 5) -> float:
    """Milliseconds per call of ``fn`` run ``calls`` times back to back with one synchronise at the end
    (throughput: the CPU may run ahead of the GPU), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize()
    return (time.perf_counter() - t0) * 1e3 / calls


# ---------------------------------------------------------------- copies
def h2d_bandwidth(mib: int = 256, repeats: int = 10, small_mib: int | None = None) -> list[dict]:
    """Host-to-device copy bandwidth (CUDA events around ``dst.copy_(src, non_blocking=True)``), one row per
    source: ``memory`` (``pageable`` or ``pinned``), ``written`` (whether the host pages were written before
    the copy: a buffer from ``torch.empty`` that nothing wrote is not yet backed by its own memory, and a
    pageable copy of it reads the kernel's shared zero page, which stays in the CPU's caches), ``mib``,
    ``median_ms``, ``p10_ms``, ``p90_ms``, ``gb_per_s`` (10⁹ bytes/s) and ``cpu_ms`` (host wall clock of one
    copy call: a pageable copy keeps the CPU in the call while it stages the data through a pinned buffer).
    Sizes ``mib`` and ``small_mib`` (the recorder passes the copy step's batch; None: one size)."""
    import torch  # heavy: torch, only here

    from ..workloads.overlap import pinned, require_gpu  # heavy: workloads.overlap imports torch

    require_gpu("h2d_bandwidth", "It times host-to-device copies over the GPU's host link.")
    rows = []
    for size in [mib] + ([small_mib] if small_mib and small_mib != mib else []):
        fresh = torch.empty(size * MiB, dtype=torch.uint8)  # never written: its pages are not yet backed
        written = torch.randint(0, 255, (size * MiB,), dtype=torch.uint8)  # every page written
        dst = torch.empty_like(fresh, device="cuda")
        for name, was_written, s in (("pageable", False, fresh), ("pageable", True, written),
                                     ("pinned", True, pinned(written))):
            t = time_fn(lambda s=s, d=dst: d.copy_(s, non_blocking=True), warmup=2, repeats=repeats)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dst.copy_(s, non_blocking=True)
            cpu = (time.perf_counter() - t0) * 1e3
            torch.cuda.synchronize()
            rows.append({"memory": name, "written": was_written, "mib": size, "median_ms": t.median_ms,
                         "p10_ms": t.p10_ms, "p90_ms": t.p90_ms, "gb_per_s": size * MiB / (t.median_ms * 1e-3) / 1e9,
                         "cpu_ms": cpu})
        del fresh, written, dst
    return rows


def copy_traces(steps: int = 3, **sizes) -> dict[str, Trace]:
    """torch.profiler traces of :class:`~infralens_lab.workloads.overlap.CopyComputeStep` in each mode
    (one step skipped, two warm-up, ``steps`` recorded)."""
    from ..workloads.overlap import COPY_MODES, CopyComputeStep  # heavy: workloads.overlap imports torch

    return {m: profile(CopyComputeStep(m, **sizes), wait=1, warmup=2, active=steps) for m in COPY_MODES}


# ---------------------------------------------------------------- pipeline
def profile_threads(fn: Callable[[], object]) -> Trace:
    """One call of ``fn`` under torch.profiler with every thread profiled (Kineto's
    ``profile_all_threads``), so ranges opened in worker threads appear too; CPU activity, plus CUDA on
    a GPU. :func:`~infralens_lab.measure.torch_trace.profile` records only the threads it knows (the
    caller's and autograd's), which would miss a producer thread's ranges."""
    import torch  # heavy: torch, only here
    from torch.profiler import ProfilerActivity  # heavy: torch, only here

    try:
        cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except TypeError as exc:
        raise RuntimeError(f"torch {torch.__version__} cannot profile all threads ({exc}); the two-stage "
                           "pipeline's producer ranges would be missing") from None
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_gpu() else [])
    with torch.profiler.profile(activities=acts, experimental_config=cfg) as p:
        fn()
        synchronize()
    return Trace(chrome_trace_of(p))


def pipeline_trace(depth: int, stages, items: int = PIPELINE_ITEMS) -> Trace:
    """A trace (:func:`profile_threads`) of :func:`~infralens_lab.workloads.overlap.run_two_stage` with
    ``depth`` buffers over ``items`` items: ranges ``stage0`` (producer thread) and ``stage1``."""
    from ..workloads.overlap import run_two_stage  # heavy: workloads.overlap imports torch

    s0, s1 = stages
    return profile_threads(lambda: run_two_stage(s0, s1, items, depth))


# ---------------------------------------------------------------- launches
def graph_limits() -> dict:
    """What CUDA graphs refuse, tried for real on the GPU: capturing a step that reads a value to the
    host (``.item()``), and replaying a graph with an input of another shape. Returns the error text
    (first line) or what happened, per case."""
    import torch  # heavy: torch, only here

    from ..workloads.overlap import cuda_graphed, small_ops_step  # heavy: workloads.overlap imports torch

    out = {}
    x = torch.randn(LAUNCH_NUMEL, device="cuda")
    try:
        cuda_graphed(lambda t: small_ops_step(t, 4) * float(t.sum().item()), x)
        out["host_sync_in_capture"] = "captured without error"
    except Exception as exc:  # the capture error is the evidence
        out["host_sync_in_capture"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    torch.cuda.synchronize()
    _replay, static = cuda_graphed(lambda t: small_ops_step(t, 4), x)
    try:
        static.copy_(torch.randn(2 * LAUNCH_NUMEL, device="cuda"))
        out["new_shape"] = "copied a larger input into the static buffer without error"
    except Exception as exc:
        out["new_shape"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return out


def launch_study(ops: int = LAUNCH_OPS, numel: int = LAUNCH_NUMEL, compile_too: bool = True) -> tuple[dict, dict]:
    """The launch-bound step (``ops`` tiny kernels on ``numel`` fp32 elements) eager, as a CUDA graph,
    and (``compile_too``) under ``torch.compile(mode='reduce-overhead')``: ``(values, traces)``. Values
    per variant: CPU milliseconds to issue one step without waiting (``cpu_issue_ms``), milliseconds per
    step back to back (``step_ms``), and, for reduce-overhead, its first call (compile) in seconds."""
    import torch  # heavy: torch, only here

    from ..workloads.overlap import cuda_graphed, require_gpu, small_ops_step  # heavy: workloads.overlap imports torch

    require_gpu("launch_study", "It counts kernel launches and times them against GPU work.")
    x = torch.randn(numel, device="cuda")
    replay, _static = cuda_graphed(lambda t: small_ops_step(t, ops), x)  # the graph's input buffer stays alive
    variants = {"eager": lambda: small_ops_step(x, ops), "graph": replay}
    vals: dict = {"ops": ops, "numel": numel}
    if compile_too:
        torch._dynamo.reset()
        comp = torch.compile(lambda t: small_ops_step(t, ops), mode="reduce-overhead")
        t0 = time.perf_counter()
        comp(x)
        torch.cuda.synchronize()
        vals["reduce_overhead_first_call_s"] = time.perf_counter() - t0
        variants["reduce_overhead"] = lambda: comp(x)
    rows = []
    for name, fn in variants.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        issue = (time.perf_counter() - t0) * 1e3 / 20  # the CPU's time to issue, not waiting for the GPU
        torch.cuda.synchronize()
        rows.append({"variant": name, "cpu_issue_ms": issue, "step_ms": back_to_back_ms(fn, calls=100)})
    vals["rows"] = rows
    traces = {v: profile(variants[v], wait=1, warmup=2, active=3) for v in ("eager", "graph")}
    if "reduce_overhead" in variants:  # its trace only counts its kernels: a failure here must not lose the others
        try:
            traces["reduce_overhead"] = profile(variants["reduce_overhead"], wait=1, warmup=2, active=3)
        except Exception as exc:  # recorded, not raised: the timings above stand without it
            vals["reduce_overhead_trace_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return vals, traces


# ---------------------------------------------------------------- compile
@contextlib.contextmanager
def _quiet_dynamo():
    """Silence dynamo's per-break warnings (the counts are what the lab shows)."""
    lg = logging.getLogger("torch._dynamo")
    old = lg.level
    lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        lg.setLevel(old)


def graph_breaks(model, x) -> dict:
    """``torch._dynamo.explain`` on ``model(x)``: ``graphs``, ``graph_breaks``, ``ops`` captured and
    each break's reason (first line), or ``{'error': ...}`` if this torch has no ``explain``."""
    import torch  # heavy: torch, only here

    explain = getattr(torch._dynamo, "explain", None)
    if explain is None:
        return {"error": f"torch {torch.__version__} has no torch._dynamo.explain"}
    with _quiet_dynamo():
        torch._dynamo.reset()
        e = explain(model)(x)
        torch._dynamo.reset()
    reasons = [str(getattr(b, "reason", b)).strip().splitlines()[0] for b in e.break_reasons]
    return {"graphs": int(e.graph_count), "graph_breaks": int(e.graph_break_count), "ops": int(e.op_count),
            "break_reasons": sorted(set(reasons)), "api": "torch._dynamo.explain"}


class CountingBackend:
    """A torch.compile backend that counts what dynamo hands over (``graphs``: one entry per compiled
    graph, its number of FX nodes) and how often compiled graphs run (``calls``), then compiles each
    with ``inner`` (``'inductor'``, or ``'eager'`` to skip code generation)."""

    def __init__(self, inner: str = "inductor"):
        if inner not in ("inductor", "eager"):
            raise ValueError(f"inner backend {inner!r}; expected 'inductor' or 'eager'")
        self.inner, self.graphs, self.calls = inner, [], 0

    def __call__(self, gm, example_inputs):
        self.graphs.append(len(gm.graph.nodes))
        if self.inner == "inductor":
            from torch._inductor.compile_fx import compile_fx  # heavy: torch, only here

            fn = compile_fx(gm, example_inputs)
        else:
            fn = gm.forward

        def run(*args):
            self.calls += 1
            return fn(*args)

        return run


def compile_study(device: str, width: int, blocks: int, batch: int, repeats: int = 20,
                  backend: str = "inductor") -> dict:
    """:class:`~infralens_lab.workloads.overlap.BlockNet` eager, compiled whole, and compiled with one
    graph break per block. Per variant (``rows``): the first call (``first_ms``: compile time for the
    compiled ones), the steady-state median (``median_ms``, warm-up excluded), the graphs dynamo
    compiled and the compiled graphs run per forward (:class:`CountingBackend`). Also ``explain`` counts
    for both models, and ``new_shape``: graphs compiled again when the batch size changes
    (recompilation)."""
    import torch  # heavy: torch, only here

    from ..workloads.overlap import BlockNet  # heavy: workloads.overlap imports torch

    torch.manual_seed(0)
    x = torch.randn(batch, width, device=device)
    out: dict = {"device": device, "width": width, "blocks": blocks, "batch": batch, "backend": backend}
    with torch.no_grad(), _quiet_dynamo():
        rows = []
        for name, brk, comp in (("eager", False, False), ("compiled", False, True), ("compiled_breaks", True, True)):
            m = BlockNet(width, blocks, graph_break=brk).to(device)
            counter = CountingBackend(backend)
            if comp:
                torch._dynamo.reset()
                m = torch.compile(m, backend=counter)
            r = wall(partial(m, x), repeats=repeats, warmup=3)
            row = {"variant": name, "first_ms": r["first_ms"], "median_ms": r["median_ms"], "p10_ms": r["p10_ms"],
                   "p90_ms": r["p90_ms"], "graphs_compiled": len(counter.graphs) if comp else 0}
            counter.calls = 0
            m(x)
            row["graph_calls_per_forward"] = counter.calls if comp else 0
            rows.append(row)
            if name == "compiled_breaks":
                n = len(counter.graphs)
                m(torch.randn(batch + 1, width, device=device))  # a new shape: dynamo compiles again
                out["new_shape"] = {"batch": batch + 1, "graphs_compiled": len(counter.graphs) - n}
        out["rows"] = rows
        out["explain_whole"] = graph_breaks(BlockNet(width, blocks).to(device), x)
        out["explain_breaks"] = graph_breaks(BlockNet(width, blocks, graph_break=True).to(device), x)
    return out


def fusion_study(numel: int = FUSION_NUMEL, repeats: int = 20) -> tuple[dict, dict]:
    """:func:`~infralens_lab.workloads.overlap.elementwise_chain` on ``numel`` fp32 elements, eager and
    compiled: CUDA-event medians per variant, and a trace of two calls of each (kernels per call are
    counted from it by :func:`infralens_lab.analysis.overlap.launches_per_step`)."""
    import torch  # heavy: torch, only here

    from ..workloads.overlap import CHAIN_OPS, elementwise_chain, require_gpu  # heavy: workloads.overlap imports torch

    require_gpu("fusion_study", "It times GPU kernels.")
    x = torch.randn(numel, device="cuda")
    torch._dynamo.reset()
    comp = torch.compile(elementwise_chain)
    t0 = time.perf_counter()
    comp(x)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    rows, traces = [], {}
    for name, fn in (("eager", elementwise_chain), ("compiled", comp)):
        t = time_fn(partial(fn, x), warmup=3, repeats=repeats)
        tr = profile(partial(fn, x), wait=1, warmup=1, active=2)
        traces[name] = tr
        rows.append({"variant": name, "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms})
    diff = float((comp(x) - elementwise_chain(x)).abs().max())  # recorded, not asserted: the record says it
    return {"numel": numel, "elem_bytes": 4, "ops": CHAIN_OPS, "compile_first_call_s": first, "rows": rows,
            "max_abs_diff_compiled_vs_eager": diff}, traces


# ---------------------------------------------------------------- the recorder step
def _write_trace(writer, name: str, tr: Trace, notes: str) -> str:
    for depth in (None, 4, 3, 2, 1):  # keep each under ~1.5 MB of JSON: drop the deepest aten ops first
        data = trim(tr.data, max_depth=depth)
        if len(json.dumps(data)) < 1_500_000:
            break
    p = writer.write(name, data, units={"ts": "us", "dur": "us"}, notes=f"{notes}; torch_trace.trim(max_depth={depth})")
    return f"{name} {p.stat().st_size / 1e6:.2f} MB"


def record_into(writer, quick: bool = False, log: Callable[[str], None] = print) -> str:
    """The recorder's ``overlap`` step (GPU only): writes every record in :data:`RECORDS`. A part that
    fails is logged and skipped so the others still record; raises only if every part failed."""
    import torch  # heavy: torch, only here

    from ..workloads.overlap import gpu_stages  # heavy: workloads.overlap imports torch

    done, failed = [], []

    def part(name, fn):
        t0 = time.perf_counter()
        try:
            detail = fn()
            done.append(name)
            log(f"[record]   overlap/{name}: {time.perf_counter() - t0:.1f} s {detail or ''}")
        except Exception as exc:  # one failed part must not stop the others
            failed.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
            log(f"[record]   overlap/{name} FAILED: {type(exc).__name__}: {exc}")

    def h2d():
        from ..workloads.overlap import COPY_BATCH_MIB  # heavy: workloads.overlap imports torch

        rows = h2d_bandwidth(64 if quick else 256, repeats=5 if quick else 10, small_mib=COPY_BATCH_MIB)
        writer.write("overlap_h2d", {"rows": rows}, units={"_ms": "ms", "gb_per_s": "1e9 byte/s", "mib": "MiB"},
                     notes="CUDA events around dst.copy_(src, non_blocking=True) from pageable (never written, and "
                           "written) and pinned host memory, at two sizes; cpu_ms: host wall clock of one copy call")
        return ", ".join(f"{r['memory']}{'' if r['written'] else ' (unwritten)'} {r['mib']} MiB "
                         f"{r['gb_per_s']:.1f} GB/s" for r in rows)

    def copies():
        trs = copy_traces()
        return "; ".join(_write_trace(writer, f"trace_copy_{m}", tr,
                                      f"CopyComputeStep('{m}') (32 MiB fp16 batch, 4 matmuls 4096 wide), "
                                      "profile(wait=1, warmup=2, active=3)") for m, tr in trs.items())

    def pipeline():
        outs = []
        for depth in (1, 2):
            tr = pipeline_trace(depth, gpu_stages(), items=PIPELINE_ITEMS)
            outs.append(_write_trace(writer, f"trace_pipeline_d{depth}", tr,
                                     f"run_two_stage(gpu_stages(), items={PIPELINE_ITEMS}, depth={depth}): stage0 = "
                                     "32 MiB pinned H2D copy on its stream, stage1 = 4 fp16 matmuls 4096 wide on another"))
        return "; ".join(outs)

    def launches():
        vals, trs = launch_study(compile_too=True)
        writer.write("launch_overhead", vals, units={"_ms": "ms", "_s": "s"},
                     notes="small_ops_step eager, CUDA graph, torch.compile(mode='reduce-overhead'); cpu_issue_ms: "
                           "time for the CPU to issue 20 steps / 20 without syncing; step_ms: 100 steps back to back")
        what = {"eager": "small_ops_step eager", "graph": "small_ops_step as a CUDA graph",
                "reduce_overhead": "small_ops_step under torch.compile(mode='reduce-overhead')"}
        return "; ".join(_write_trace(writer, f"trace_launch_{v}", tr, what[v]) for v, tr in trs.items())

    def compiled():
        cfg = BLOCKNET_GPU
        vals = compile_study("cuda", cfg["width"], cfg["blocks"], cfg["batch"], repeats=10 if quick else 30)
        writer.write("compile_study", vals, units={"_ms": "ms"},
                     notes="BlockNet eager / torch.compile / torch.compile with one .item() graph break per block; "
                           "first_ms = first call (compile for the compiled ones), median over later calls")
        from ..workloads.overlap import BlockNet  # heavy: workloads.overlap imports torch

        x = torch.randn(cfg["batch"], cfg["width"], device="cuda")
        outs = []
        with torch.no_grad(), _quiet_dynamo():
            for name, brk in (("trace_compile_whole", False), ("trace_compile_breaks", True)):
                torch._dynamo.reset()
                m = torch.compile(BlockNet(cfg["width"], cfg["blocks"], graph_break=brk).cuda())
                outs.append(_write_trace(writer, name, profile(partial(m, x), wait=1, warmup=2, active=3),
                                         f"compiled BlockNet forward, graph_break={brk}"))
        return "; ".join(outs)

    def fusion():
        vals, trs = fusion_study(numel=FUSION_NUMEL // (4 if quick else 1))
        writer.write("fusion", vals, units={"median_ms": "ms", "compile_first_call_s": "s"},
                     notes="elementwise_chain eager vs torch.compile (CUDA-event medians); bytes are a model "
                           "(analysis.overlap.elementwise_chain_traffic), not a counter")
        sizes = [_write_trace(writer, f"trace_fusion_{v}", tr, f"elementwise_chain {v}, profile(wait=1, warmup=1, "
                              "active=2)") for v, tr in trs.items()]
        return ", ".join(f"{r['variant']} {r['median_ms']:.3f} ms" for r in vals["rows"]) + "; " + "; ".join(sizes)

    def limits():  # last: a failed capture is the point here, and nothing after it should depend on CUDA state
        vals = graph_limits()
        writer.write("graph_limits", vals, notes="errors (first line) from capturing a step with .item() and "
                                                 "from feeding a captured graph's static input another shape")
        return "; ".join(f"{k}: {v[:80]}" for k, v in vals.items())

    for name, fn in (("h2d", h2d), ("copies", copies), ("pipeline", pipeline), ("launches", launches),
                     ("compile", compiled), ("fusion", fusion), ("graph_limits", limits)):
        part(name, fn)
    if not done:
        raise RuntimeError(f"every overlap part failed: {failed}")
    return f"{len(done)}/{len(done) + len(failed)} parts ok" + (f"; failed: {failed}" if failed else "")
