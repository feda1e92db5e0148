"""Performance regression gates: counts that never flake, and time ratios measured in one run.

**Counts per step** (:func:`count_step`), measured on any machine:

* ``aten_ops_per_step``: operator calls that reach a backend kernel, seen by a
  ``TorchDispatchMode`` below autograd (a composite op such as ``aten::linear`` is counted as what
  it decomposes into, so on a GPU each one is about one kernel launch);
* ``syncs_per_step``: calls among them that make the host wait for the device on a GPU
  (:data:`SYNC_OPS`: ``.item()``/``bool()`` via ``aten::_local_scalar_dense``, ops whose output
  size depends on the data such as ``aten::nonzero``, and copies from a CUDA tensor to the CPU).
  On a GPU, :func:`cuda_syncs` also counts what ``torch.cuda.set_sync_debug_mode`` reports;
* ``launches_per_step``: Triton kernel launches, counted at Triton's launcher (the same number in
  the interpreter and on a GPU); on a GPU, :func:`cuda_launches` counts every CUDA launch call in a
  torch.profiler trace;
* ``graph_breaks``: breaks ``torch._dynamo.explain`` finds when the step's function is compiled;
* ``peak_bytes``: the most bytes live above the start of the step (:func:`measure.memory.run_phase`:
  the CUDA caching allocator on a GPU, the profiler's allocation events on a CPU).

**Threshold file** (``data/gates.json``, :func:`load_thresholds`): ``{"schema": 1, "counts":
{workload: {metric: {"max"|"equals": number, "slack"?: fraction}}}, "ratios": {bench ratio name:
{"tolerance": fraction, "k": runs}}}``, and, keyed to the build (:func:`count_build`): ``"counts_build"``
(the build ``counts`` were measured on), ``"build_dependent"`` (``{metric: why it differs by build}``) and
``"counts_by_build"`` (``{build: {workload: {metric: rule}}}``, the build-dependent metrics measured on another
build). On another build a build-dependent metric is held to that build's own rule, or left out with the reason
(:func:`infralens_lab.gates_cli.check_counts`). Missing or malformed files, unknown workloads and unknown
metrics raise :class:`ThresholdError` saying what was seen and what was expected.

**Time ratios** (:func:`ratio_samples`, GPU only; :func:`infralens_lab.gates_cli.check_ratios` runs them): for each ratio the bench
reports, candidate and reference are timed alternately ``k`` times in this process (CUDA events,
medians, L2 flushed as the bench does), giving ``k`` ratios ``t_reference / t_candidate``; their
median is held against the committed reference set's ``bench`` ratio with the file's tolerance
(:func:`infralens_lab.analysis.gates.ratio_verdict`). ``python -m infralens_lab gates`` runs both.
"""
from __future__ import annotations

import contextlib
import functools
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode

from ..device import is_gpu, mode, torch_device
from ..kernels.reference import naive_torch
from ..parse.gates import (  # noqa: F401  (re-exported)
    BUILDS,
    COUNTS_BUILD,
    DEFAULT_THRESHOLDS,
    METRICS,
    RATIO_GATE_PAIRS,
    SCHEMA,
    ThresholdError,
    gate_references,
    load_thresholds,
    reference_ratios,
)
from ..parse.trace import step_gpu_work
from ..units import GiB
from ..workloads.gated import REGRESSIONS, MLPStep, make_gated
from .memory import run_phase
from .timing import time_fn
from .torch_trace import profile

SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::_unique2",
                      "aten::unique_consecutive", "aten::unique_dim", "aten::repeat_interleave"})


# ---------------------------------------------------------------- counting
class _OpCounter(TorchDispatchMode):
    """Counts aten ops and sync-inducing ones. Reads of an optimizer's ``step`` counter are not syncs:
    torch keeps that counter on the host by design (unless ``capturable``/``fused``), so reading it
    waits for nothing on a GPU either; their storages are collected by an optimizer pre-step hook."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.syncs: Counter = Counter()
        self.host_counters: set[int] = set()
        self._hook = None

    def _collect(self, opt, args, kwargs):
        for st in opt.state.values():
            t = st.get("step") if isinstance(st, dict) else None
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self.host_counters.add(t.untyped_storage().data_ptr())

    def __enter__(self):
        self._hook = register_optimizer_step_pre_hook(self._collect)
        return super().__enter__()

    def __exit__(self, *exc):
        self._hook.remove()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        self.ops[name] += 1
        if name in SYNC_OPS:
            t = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if not (t is not None and t.device.type == "cpu" and t.untyped_storage().data_ptr() in self.host_counters):
                self.syncs[name] += 1
        elif name in ("aten::_to_copy", "aten::copy_") and _device_to_host(func, args, kwargs):
            self.syncs[name] += 1
        return func(*args, **kwargs)


def _device_to_host(func, args, kwargs) -> bool:
    """A copy whose source is on a CUDA device and whose destination is the CPU."""
    if func._schema.name == "aten::copy_":
        dst, src = args[0], args[1]
        return src.device.type == "cuda" and dst.device.type == "cpu"
    src, dev = args[0], kwargs.get("device")
    return src.device.type == "cuda" and dev is not None and torch.device(dev).type == "cpu"


@contextlib.contextmanager
def triton_launches():
    """Count Triton kernel launches by kernel name while the block runs (a ``Counter``, filled in
    place). Wraps the ``run`` method of Triton's JIT and interpreter functions, so it counts the same
    launches on a GPU and in the interpreter; autotuner benchmarking runs are counted too, so warm up
    first."""
    from triton.runtime.interpreter import InterpretedFunction  # heavy: triton, only here
    from triton.runtime.jit import JITFunction  # heavy: triton, only here

    got: Counter = Counter()
    saved = {cls: cls.run for cls in (JITFunction, InterpretedFunction)}

    def wrap(orig):
        def run(self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                got[getattr(self, "__name__", None) or self.fn.__name__] += 1
            return orig(self, *args, **kwargs)
        return run

    for cls, orig in saved.items():
        cls.run = wrap(orig)
    try:
        yield got
    finally:
        for cls, orig in saved.items():
            cls.run = orig


@dataclass(frozen=True)
class StepCounts:
    """Counts per step of one workload (see the module doc); ``ops`` and ``kernels``: per-name counts
    per step; ``device``: where the step ran."""

    workload: str
    steps: int
    aten_ops_per_step: float
    syncs_per_step: float
    launches_per_step: float
    peak_bytes: int | None
    device: str
    ops: dict = field(default_factory=dict, repr=False)
    kernels: dict = field(default_factory=dict, repr=False)

    def metric(self, name: str) -> float:
        if name not in METRICS or name == "graph_breaks":
            raise ThresholdError(f"metric {name!r} is not a step count; expected one of "
                                 f"{[m for m in METRICS if m != 'graph_breaks']}")
        v = getattr(self, name)
        if v is None:
            raise ThresholdError(f"metric {name!r} was not measured for {self.workload!r} (peak=False?)")
        return v

    def as_dict(self) -> dict:
        return {"workload": self.workload, "steps": self.steps, "aten_ops_per_step": self.aten_ops_per_step,
                "syncs_per_step": self.syncs_per_step, "launches_per_step": self.launches_per_step,
                "peak_bytes": self.peak_bytes, "device": self.device, "ops": self.ops, "kernels": self.kernels}


def count_step(step_fn: Callable[[], Any], steps: int = 2, warmup: int = 1, peak: bool = True,
               workload: str = "step") -> StepCounts:
    """Run ``step_fn`` ``warmup`` times, then ``steps`` times counting aten ops, sync-inducing ops and
    Triton launches, then (``peak``) once more for the peak bytes above the start. Returns a
    :class:`StepCounts`; counts are per step (totals divided by ``steps``)."""
    if not callable(step_fn):
        raise TypeError(f"step_fn is {type(step_fn).__name__}; expected a callable")
    for name, v, lo in (("steps", steps, 1), ("warmup", warmup, 0)):
        if not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}={v!r}; expected an int >= {lo}")
    device = str(getattr(step_fn, "device", None) or torch_device())
    for _ in range(warmup):
        step_fn()
    counter = _OpCounter()
    with triton_launches() as launches, counter:
        for _ in range(steps):
            step_fn()
    peak_bytes = None
    if peak:
        _, _, peak_bytes = run_phase(step_fn, torch.device(device))
    return StepCounts(workload, steps, sum(counter.ops.values()) / steps, sum(counter.syncs.values()) / steps,
                      sum(launches.values()) / steps, None if peak_bytes is None else int(peak_bytes),
                      device, {k: v / steps for k, v in sorted(counter.ops.items())},
                      {k: v / steps for k, v in sorted(launches.items())})


@dataclass(frozen=True)
class GraphBreaks:
    """What ``torch._dynamo.explain`` found: graphs, breaks and the first line of each break reason."""

    graphs: int
    breaks: int
    reasons: tuple[str, ...]


def graph_breaks(fn: Callable, *args, **kwargs) -> GraphBreaks:
    """Trace ``fn(*args, **kwargs)`` with ``torch._dynamo.explain`` (no code generated, so it is quick on
    a CPU) and return the number of graphs and graph breaks. Resets dynamo's caches first and after."""
    import torch._dynamo  # heavy: torch, only here

    torch._dynamo.reset()
    try:
        e = torch._dynamo.explain(fn)(*args, **kwargs)
    finally:
        torch._dynamo.reset()
    reasons = tuple(str(r.reason).strip().splitlines()[0] for r in e.break_reasons)
    return GraphBreaks(int(e.graph_count), int(e.graph_break_count), reasons)


def cuda_launches(step_fn: Callable[[], Any], steps: int = 2) -> dict:
    """GPU only: CUDA launch calls, memcpys and kernels per step, read from a torch.profiler trace of ``steps``
    active steps by the series' attribution rule (:func:`infralens_lab.parse.trace.step_gpu_work`: each kernel
    belongs to the step that launched it, so kernels still queued from the warm-up step are not counted).
    Each count is the largest per-step count, a whole number by construction (a count that differs between
    steps shows in ``per_step``)."""
    if not is_gpu():
        raise RuntimeError("cuda_launches needs a GPU (interpreter mode has no CUDA launches); use count_step")
    tr = profile(step_fn, wait=1, warmup=1, active=steps)
    w = step_gpu_work(tr)
    k = tr.kernels()
    n = len(w)
    return {"launches_per_step": int(w["launch_calls"].max()), "memcpys_per_step": int(w["memcpys"].max()),
            "kernels_per_step": int(w["kernels"].max()),
            "per_step": {c: [int(x) for x in w[c]] for c in ("launch_calls", "kernels", "memcpys")},
            "kernels": [{"name": r.name, "per_step": r.count / n, "total_us": r.total_us / n}
                        for r in k.itertuples(index=False)]}


def cuda_syncs(step_fn: Callable[[], Any], steps: int = 2) -> int:
    """GPU only: synchronising CUDA calls per step as ``torch.cuda.set_sync_debug_mode('warn')`` reports
    them (one warning each), after one warm-up step: the largest count of any one step, counted step by step,
    so a whole number (a sync in one step of two is 1 per step, not 0.5)."""
    if not is_gpu():
        raise RuntimeError("cuda_syncs needs a GPU; on a CPU count sync-inducing ops with count_step")
    step_fn()
    torch.cuda.synchronize()
    old = torch.cuda.get_sync_debug_mode()
    counts = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                before = len(caught)
                step_fn()
                counts.append(sum("synchroniz" in str(w.message) for w in caught[before:]))
        finally:
            torch.cuda.set_sync_debug_mode(old)
    torch.cuda.synchronize()
    return max(counts)


# ---------------------------------------------------------------- thresholds
def count_build() -> str:
    """The build counts are measured on here, one of :data:`~infralens_lab.parse.gates.BUILDS`: ``'cpu'`` for a
    CPU wheel of torch, ``'cuda-interpreter'`` / ``'cuda-gpu'`` for a CUDA wheel in interpreter or gpu mode.
    Counts are the same on every run of one build; peak bytes, which follow the allocator, differ between builds."""
    if torch.version.cuda is None:
        return "cpu"
    return f"cuda-{mode()}"


def measure_counts(workload: str, metrics: list[str] | None = None) -> dict[str, float]:
    """Measure the count metrics of a gated workload (``workloads.gated.GATED``): ``{metric: value}``.
    ``graph_breaks`` compiles the workload's step with dynamo's explain."""
    metrics = list(METRICS) if metrics is None else metrics
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ThresholdError(f"unknown metric(s) {unknown}; expected some of {sorted(METRICS)}")
    step = make_gated(workload)
    out: dict[str, float] = {}
    step_metrics = [m for m in metrics if m != "graph_breaks"]
    if step_metrics:
        c = count_step(step, peak="peak_bytes" in step_metrics, workload=workload)
        out.update({m: c.metric(m) for m in step_metrics})
    if "graph_breaks" in metrics:
        if not hasattr(step, "compile_target"):
            raise ThresholdError(f"workload {workload!r} has no compile target, so graph_breaks cannot be gated")
        fn, args = step.compile_target()
        out["graph_breaks"] = graph_breaks(fn, *args).breaks
    return out


# ---------------------------------------------------------------- time ratios (GPU)
def _copy_pair():
    from ..kernels import copies  # heavy: kernels.copies imports triton

    x = torch.randn(GiB // 4, device="cuda")  # 1 GiB of fp32: far above L2, as in the bench
    dst = torch.empty_like(x)
    return (lambda: copies.copy(x, out=dst)), (lambda: dst.copy_(x))


def _attn_pair(variant: str, shape=(4, 16, 4096, 64)):
    from ..kernels import attention  # heavy: kernels.attention imports triton

    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    if variant == "tiled_fast_vs_naive_torch":
        return (lambda: attention.VARIANTS["tiled_fast"](q, k, v)), (lambda: naive_torch(q, k, v, False))
    return (lambda: attention.VARIANTS[variant](q, k, v)), (lambda: F.scaled_dot_product_attention(q, k, v))


def _pair(kind: str) -> tuple[Callable, Callable]:
    """The (candidate, reference) callables of one ratio gate, by its kind in ``parse.gates.RATIO_GATE_PAIRS``."""
    return _copy_pair() if kind == "copy" else _attn_pair(kind)


# bench ratio name -> a maker of (candidate, reference), one per name of parse.gates.RATIO_GATE_PAIRS
RATIO_GATES: dict[str, Callable[[], tuple[Callable, Callable]]] = {
    name: functools.partial(_pair, kind) for name, kind in RATIO_GATE_PAIRS.items()}


def ratio_samples(candidate: Callable, reference: Callable, k: int, repeats: int = 20, warmup: int = 3,
                  flush: bool = True, clock: str = "auto") -> list[float]:
    """``k`` ratios ``t_reference / t_candidate``, each from the medians of ``repeats`` timings of both
    (:func:`measure.timing.time_fn`: CUDA events by default, ``clock='cpu'`` for host wall clock),
    taken back to back; the order alternates between rounds so neither always runs second."""
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k={k!r}; expected an int >= 1")
    out = []
    for i in range(k):
        pair = [("c", candidate), ("r", reference)]
        t = {}
        for tag, fn in (pair if i % 2 == 0 else pair[::-1]):
            tm = time_fn(fn, warmup=warmup, repeats=repeats, flush=flush and clock != "cpu", clock=clock)
            if not tm.meaningful:
                raise RuntimeError(f"ratio gates need a GPU: {tm.note}")
            t[tag] = tm.median_ms
        out.append(t["r"] / t["c"])
    return out


def regression_counts(**sizes) -> Any:
    """Counts per step of the intended :class:`~infralens_lab.workloads.gated.MLPStep` and each regression on this
    machine (``sizes``: its batch, seq, width): aten ops, syncs, peak bytes (:func:`count_step`) and the graph
    breaks of its compiled chain (:func:`graph_breaks`), one row each (``regression``: ``intended`` or the name).
    Counts: the same on every run of the same build."""
    rows = []
    for reg in (None, *REGRESSIONS):
        s = MLPStep(reg, **sizes)
        c = count_step(s)
        rows.append({"regression": reg or "intended", "aten_ops_per_step": c.aten_ops_per_step,
                     "syncs_per_step": c.syncs_per_step, "graph_breaks": graph_breaks(s.chain, *s.chain_args()).breaks,
                     "peak_bytes": c.peak_bytes})
    return pd.DataFrame(rows)


def aa_timings(a: Callable[[], Any], b: Callable[[], Any], rounds: int, steps: int = 5, slow_every: int | None = None,
               stall_ms: float = 0.0) -> Any:
    """An A/A run on the host clock: ``rounds`` rounds, each timing ``steps`` calls of ``a`` and of ``b`` (the
    order alternates between rounds; one untimed warm-up round first). With ``slow_every`` = n, the rounds of
    every second block of n rounds run slowed: each call of ``a`` and of ``b`` is followed by ``stall_ms`` of
    sleep, a stand-in for what slows both alike between runs (a neighbour on the runner, a throttled clock, a
    slower machine). Returns ``round, state ('as is' | 'slowed'), a_ms, b_ms, ratio`` (``a / b``)."""
    for name, v in (("rounds", rounds), ("steps", steps)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}; expected a positive int")
    if slow_every is not None and (not isinstance(slow_every, int) or slow_every < 1 or stall_ms <= 0):
        raise ValueError(f"slow_every={slow_every!r}, stall_ms={stall_ms!r}; expected a positive int and a positive stall")

    def timed(fn, stall: float) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
            if stall:
                time.sleep(stall / 1e3)
        return (time.perf_counter() - t0) * 1e3

    timed(a, 0.0), timed(b, 0.0)
    rows = []
    for i in range(rounds):
        slowed = slow_every is not None and (i // slow_every) % 2 == 1
        stall = stall_ms if slowed else 0.0
        if i % 2 == 0:
            ta, tb = timed(a, stall), timed(b, stall)
        else:
            tb, ta = timed(b, stall), timed(a, stall)
        rows.append({"round": i, "state": "slowed" if slowed else "as is", "a_ms": ta, "b_ms": tb, "ratio": ta / tb})
    return pd.DataFrame(rows)
