"""The recorder's ``gates`` step (GPU; ``device='cpu'`` is a dry run at tiny sizes): lab 07's evidence.

:func:`record_into` writes ``resnet_trace_channels_first`` / ``_last`` (one bf16 ResNet-50 forward each) and
``gates_gpu``: ResNet forward times and op tables per memory format, what moves the launch-bound forward
(:func:`resnet_variants`: eager, one CUDA graph, torch.compile), per regression of
:class:`~infralens_lab.workloads.gated.MLPStep` its counts and wall-clock ratios, an A/A run in this process
and the same A/A pair in several fresh processes (:func:`aa_processes`: the drift between processes), and
samples of every ratio gate. Counting and timing are :mod:`infralens_lab.measure.gates`'s.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..device import is_gpu, synchronize
from ..parse.trace import step_gpu_work, trim
from ..workloads.gated import REGRESSIONS, MLPStep
from ..workloads.overlap import cuda_graphed
from ..workloads.resnet import MEMORY_FORMATS, inference_step
from .gates import RATIO_GATES, count_step, cuda_launches, cuda_syncs, graph_breaks, ratio_samples
from .timing import time_fn
from .top_ops import innermost_ops, kernel_families
from .torch_trace import profile

RESNET_BATCH, RESNET_SIZE = 32, 224
AA_PROCESSES, AA_ROUNDS = 5, 15  # A/A pairs in 5 fresh processes, 15 rounds each: the drift between processes
GPU_MLP = dict(batch=8, seq=512, width=1024)  # x (4096, 1024) @ (1024, 4096): 34 GFLOP per matmul
STEPS_PER_TIMING = 10


def _synced_block(step, n: int = STEPS_PER_TIMING):
    """``n`` steps back to back, then one synchronize: wall time of this is what a user waits for."""
    def run():
        for _ in range(n):
            step()
        synchronize()
    return run


def _resnet(writer, batch: int, size: int, dtype, device: str, repeats: int) -> dict:
    """Trace and time one ResNet-50 forward per memory format; writes ``resnet_trace_<format>``."""
    out = {}
    for fmt in MEMORY_FORMATS:
        step = inference_step(batch, size, fmt, dtype=dtype, device=device)
        tr = profile(step, wait=1, warmup=2, active=1)
        for depth in (None, 6, 4, 3):  # keep each trace under ~2.5 MB of JSON
            data = trim(tr.data, max_depth=depth)
            if len(json.dumps(data)) < 2_500_000:
                break
        dt = str(dtype).replace("torch.", "")
        writer.write(f"resnet_trace_{fmt}", data, units={"ts": "us", "dur": "us"},
                     notes=f"torch.profiler chrome trace of one ResNet-50 inference forward (infralens_lab.workloads."
                           f"resnet, random weights), batch {batch}x3x{size}x{size} {dt}, {fmt}, "
                           f"trimmed by torch_trace.trim(max_depth={depth})")
        t = time_fn(step, warmup=3, repeats=repeats, clock="auto" if device == "cuda" else "cpu")
        out[fmt] = {"batch": batch, "size": size, "dtype": dt, "op_depth": depth, **t.as_dict(),
                    "top_ops": innermost_ops(tr, top=8).to_dict(orient="records"),
                    "families": kernel_families(tr).to_dict(orient="records")}
        del step
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


def _regressions(k: int, device: str, sizes: dict) -> list[dict]:
    """Per regression (and the intended step), eager then compiled: counts, GPU counts (on a GPU) and
    ``k`` wall-clock ratios ``t_intended / t_regressed``."""
    gpu = device == "cuda"
    rows = []
    breaks = {}  # counted once, before anything is compiled (explain resets dynamo's caches)
    for reg in (None, *REGRESSIONS):
        probe = MLPStep(reg, device=device, **sizes)
        breaks[reg or "intended"] = graph_breaks(probe.chain, *probe.chain_args()).breaks
    backend = "inductor" if gpu else "eager"  # a CPU dry run only traces: inductor's C++ build takes minutes there
    for compiled in (False, True):
        intended = MLPStep(None, compiled=compiled, device=device, backend=backend, **sizes)
        for reg in (None, *REGRESSIONS):
            step = intended if reg is None else MLPStep(reg, compiled=compiled, device=device, backend=backend,
                                                        **sizes)
            row = {"regression": reg or "intended", "compiled": compiled, "graph_breaks": breaks[reg or "intended"]}
            if not compiled:  # a dispatch mode around a compiled function would change what it measures
                c = count_step(step, steps=2, warmup=1, peak=True)
                row.update(aten_ops_per_step=c.aten_ops_per_step, syncs_per_step=c.syncs_per_step,
                           peak_bytes=c.peak_bytes)
            if gpu:
                row["cuda_syncs_per_step"] = cuda_syncs(step)
                row.update(cuda_launches(step))
            row["ratio_samples"] = ratio_samples(_synced_block(step), _synced_block(intended), k, repeats=5,
                                                 warmup=1, clock="cpu")
            rows.append(row)
    return rows


def _variant_summary(tr) -> dict:
    """Per profiled forward of a trace (the attribution rule, :func:`~infralens_lab.parse.trace.step_gpu_work`):
    launch calls, kernels, kernel µs, GPU busy µs, and the steady period (µs) the busy share is taken over."""
    w = step_gpu_work(tr)
    sw = tr.steady_window()
    period = (sw[1] - sw[0]) / sw[2] if sw else None
    return {"steps": len(w), "launch_calls": [int(x) for x in w["launch_calls"]],
            "kernels": [int(x) for x in w["kernels"]], "kernel_us": float(w["gpu_work_us"].mean()),
            "gpu_busy_us": float(w["gpu_busy_us"].mean()), "period_us": period}


RESNET_VARIANTS = ("eager", "cuda_graph", "compiled")


def resnet_variants(batch: int, size: int, dtype, device: str, repeats: int, compile_mode: str | None = "default") -> dict:
    """What moves a launch-bound ResNet-50 forward (channels_last, the faster format): the same forward
    eager, replayed as one CUDA graph (captured once, :func:`~infralens_lab.workloads.overlap.cuda_graphed`),
    and under ``torch.compile`` (Inductor, ``compile_mode``; its first call, the compile, timed apart). Per
    variant: CUDA-event timing of one forward (warm-up first) and, from a trace of two profiled forwards,
    launch calls, kernels, kernel and GPU-busy time per forward and the steady period (:func:`_variant_summary`).
    On a CPU (``device='cpu'``, a dry run) only eager and compiled (backend ``eager``) run."""
    gpu = device == "cuda"
    step = inference_step(batch, size, "channels_last", dtype=dtype, device=device)
    out: dict[str, Any] = {"batch": batch, "size": size, "dtype": str(dtype).replace("torch.", ""),
                           "memory_format": "channels_last", "compile_mode": compile_mode, "rows": []}
    variants: dict[str, Callable] = {"eager": step}
    if gpu:
        with torch.inference_mode():
            replay, _ = cuda_graphed(step.model, step.x)
        variants["cuda_graph"] = replay
    if compile_mode is not None:
        torch._dynamo.reset()
        comp = torch.compile(step.model, mode=None if compile_mode == "default" else compile_mode,
                             backend="inductor" if gpu else "eager")

        def compiled():
            with torch.inference_mode():
                return comp(step.x)

        t0 = time.perf_counter()
        try:
            compiled()
            if gpu:
                torch.cuda.synchronize()
            out["compile_first_call_s"] = time.perf_counter() - t0
            variants["compiled"] = compiled
        except Exception as exc:  # a compiler failure is recorded; eager and the CUDA graph still are measured
            out["compile_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    for name, fn in variants.items():
        t = time_fn(fn, warmup=3, repeats=repeats, clock="auto" if gpu else "cpu")
        row = {"variant": name, **t.as_dict()}
        row.update(_variant_summary(profile(fn, wait=1, warmup=2, active=2)))
        out["rows"].append(row)
    return out


_AA_CHILD = """
import json, sys
from infralens_lab.measure.gates_record import aa_pairs
print("INFRALENS_AA " + json.dumps(aa_pairs(*json.loads(sys.argv[1]))))
"""


def aa_pairs(device: str, sizes: dict, rounds: int, steps: int = STEPS_PER_TIMING) -> dict:
    """One process's A/A run: the intended :class:`~infralens_lab.workloads.gated.MLPStep` built twice (``a``
    and ``b``, the same code), timed alternately ``rounds`` times (host wall clock of ``steps`` steps and one
    synchronize, median of 5, as the regression ratios are), after one warm-up round. Returns ``a_ms``,
    ``b_ms`` (one per round) and the process id."""
    a, b = MLPStep(None, device=device, **sizes), MLPStep(None, device=device, **sizes)
    out = {"pid": os.getpid(), "a_ms": [], "b_ms": []}
    for i in range(rounds + 1):
        ta = time_fn(_synced_block(a, steps), warmup=1, repeats=5, clock="cpu").median_ms
        tb = time_fn(_synced_block(b, steps), warmup=1, repeats=5, clock="cpu").median_ms
        if i:  # round 0 warms the allocator, the kernels' caches and the clocks
            out["a_ms"].append(ta)
            out["b_ms"].append(tb)
    return out


def aa_processes(device: str, sizes: dict, processes: int, rounds: int, timeout_s: float = 120.0) -> list[dict]:
    """:func:`aa_pairs` in ``processes`` fresh Python processes, one after the other (each its own CUDA context,
    allocator, clocks and neighbours): the drift between processes that samples from one process cannot show.
    A child that fails or runs past ``timeout_s`` raises RuntimeError with its stderr tail."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the checkout holding infralens_lab
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = []
    for _ in range(processes):
        r = subprocess.run([sys.executable, "-c", _AA_CHILD, json.dumps([device, sizes, rounds])], env=env,
                           capture_output=True, text=True, timeout=timeout_s)
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith("INFRALENS_AA ")), None)
        if r.returncode != 0 or line is None:
            raise RuntimeError(f"A/A child process exited {r.returncode}: {r.stderr[-800:]}")
        out.append(json.loads(line.split(" ", 1)[1]))
    return out


def record_into(writer, quick: bool = False, device: str | None = None) -> str:
    """Record lab 07's GPU evidence: ``resnet_trace_channels_first`` and ``resnet_trace_channels_last``
    (trimmed traces of one bf16 ResNet-50 forward, batch 32 at 224x224), and ``gates_gpu``: ResNet
    forward times and leaf-op/family tables per memory format; per regression of
    :class:`workloads.gated.MLPStep` (eager and compiled) its counts on the GPU (dispatch-level ops and
    syncs, ``set_sync_debug_mode`` syncs, CUDA launches and kernels, graph breaks, peak bytes) and ``k``
    wall-clock ratios against the intended step; an A/A run (intended vs itself) for the noise; and
    ``k`` samples of every ratio gate, from which the threshold file's tolerances were chosen. Each
    part that fails is logged in ``errors`` and the others go on. ``device='cpu'`` is a dry run of the
    same code at tiny sizes (tests use it; the ratio gates are left out there)."""
    device = device or ("cuda" if is_gpu() else None)
    if device is None:
        raise RuntimeError("gates.record_into records GPU evidence; this machine runs in interpreter mode")
    gpu = device == "cuda"
    sizes = GPU_MLP if gpu else dict(batch=2, seq=16, width=32)
    k = 5 if quick or not gpu else 15
    values: dict[str, Any] = {"errors": {}}
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()

    def part(name, fn):
        t = time.perf_counter()
        try:
            values[name] = fn()
        except Exception as exc:  # one failed part must not lose the others
            values["errors"][name] = f"{type(exc).__name__}: {exc}"[:1500]
            traceback.print_exc()
        seconds[name] = round(time.perf_counter() - t, 1)

    part("resnet", lambda: _resnet(writer, (8 if quick else RESNET_BATCH) if gpu else 1, RESNET_SIZE if gpu else 64,
                                   torch.bfloat16 if gpu else torch.float32, device, 10 if quick or not gpu else 30))
    part("regressions", lambda: _regressions(k, device, sizes))
    a = MLPStep(None, device=device, **sizes)
    part("aa_ratios", lambda: ratio_samples(_synced_block(a), _synced_block(a), 10 if quick or not gpu else 40,
                                            repeats=5, warmup=1, clock="cpu"))
    part("aa_processes", lambda: aa_processes(device, sizes, 2 if quick or not gpu else AA_PROCESSES,
                                              3 if quick or not gpu else AA_ROUNDS))
    part("resnet_variants", lambda: resnet_variants((8 if quick else RESNET_BATCH) if gpu else 1,
                                                     RESNET_SIZE if gpu else 64, torch.bfloat16 if gpu else torch.float32,
                                                     device, 10 if quick or not gpu else 30))

    def gates():
        out = {}
        for name, make in RATIO_GATES.items():
            cand, refn = make()
            out[name] = ratio_samples(cand, refn, k)
            del cand, refn
            torch.cuda.empty_cache()
        return out

    if gpu:
        part("ratio_gates", gates)
    seconds["total"] = round(time.perf_counter() - t0, 1)
    values["meta"] = {"quick": quick, "device": device, "mlp": sizes, "steps_per_timing": STEPS_PER_TIMING, "k": k,
                      "seconds": seconds}
    writer.write("gates_gpu", values,
                 units={"_ms": "ms", "_us": "us", "_s": "s", "peak_bytes": "byte",
                        "ratio_samples": "t_intended / t_regressed", "aa_ratios": "t_a / t_a (same step twice)",
                        "ratio_gates": "t_reference / t_candidate"},
                 notes="regression ratios: wall clock of 10 steps back to back + one synchronize, median of 5, "
                       "k rounds alternating order; aa_processes: the same A/A pair in fresh processes, one after "
                       "the other; resnet_variants: channels_last ResNet-50 eager, CUDA graph, torch.compile "
                       "(CUDA events; per-forward counts from a trace of two forwards); ratio gates: CUDA-event "
                       "medians of 20, L2 flushed")
    if values["errors"]:
        raise RuntimeError(f"gates_gpu written, but these parts failed: {values['errors']}")
    return ", ".join(f"{n} {v:.1f} s" for n, v in seconds.items())
