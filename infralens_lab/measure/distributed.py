"""DDP measured per rank: profiled steps at several bucket sizes, a planted straggler, ``no_sync``
accumulation, a plain all-reduce benchmark and a one-rank baseline, all in one launch.

:func:`run` launches :func:`job_ddp` on ``world`` ranks through
:func:`infralens_lab.workloads.ddp.launch` (spawn, timeouts, a dead rank stops the others) and
returns one dict per rank. Each rank, for every config of the :class:`RunSpec` (bucket cap, or DDP's
default cap, ``gradient_as_bucket_view``, a straggling last rank, the model), wraps
:func:`~infralens_lab.workloads.ddp.tiny_mlp` in ``DistributedDataParallel``, synchronises and meets the
other ranks at a barrier, then profiles ``active`` steps after :data:`WARMUP` warm-up steps with
:func:`infralens_lab.measure.torch_trace.profile` (DDP rebuilds its buckets in gradient-ready order at the
second iteration, inside the warm-up), times ``timed`` more steps, and keeps DDP's own logging data (bucket
sizes, the gradient-ready order, its reducer's overlap timers). Then ``no_sync``: one optimizer step of
``accum`` micro-batches with and without ``no_sync``; then an all-reduce of each benchmark size, timed
as nccl-tests does on a GPU (:func:`event_timed`: CUDA events around many calls) and host-timed between barriers
on a CPU, each row saying which (``timing``). Rank 0 also profiles and times the model alone (no DDP, no peer) as the one-rank baseline
while the other ranks wait at a barrier.

:func:`record_into` is the recorder's ``distributed`` step: NCCL on every GPU of the machine (at least 2);
it checks the run with the recorder's invariant check and refuses to write a set that breaks one
(:class:`InvariantBroken`); with fewer than 2 GPUs it raises :class:`NotEnoughGPUs` (logged as skipped).
Times: seconds (``_s``) or milliseconds (``_ms``); sizes in bytes.
"""
from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from ..errors import InfraLensError
from ..parse.trace import trim
from ..units import MiB
from ..workloads import ddp
from .torch_trace import profile


class NotEnoughGPUs(InfraLensError, RuntimeError):
    """The distributed recording needs 2 GPUs and this machine has fewer."""


class InvariantBroken(InfraLensError, RuntimeError):
    """A measured run breaks an invariant (exposed <= comm <= step, calls = buckets, ...): nothing is written."""


WARMUP = 2  # warm-up steps before the profiled ones: DDP's first iteration builds, its second rebuilds, buckets


@dataclass(frozen=True)
class DDPConfig:
    """One profiled DDP setup: a label, the bucket cap (MiB; None = DDP's default), ``gradient_as_bucket_view``,
    the model, and ``straggle_ms``: how long the last rank stops before each step's forward, its GPU drained first
    (a planted straggler)."""

    label: str
    bucket_cap_mb: float | None
    bucket_view: bool = False
    model: ddp.MLPConfig = field(default_factory=ddp.MLPConfig)
    straggle_ms: float = 0.0

    def __post_init__(self):
        if self.bucket_cap_mb is not None and (isinstance(self.bucket_cap_mb, bool) or
                                               not isinstance(self.bucket_cap_mb, (int, float)) or self.bucket_cap_mb <= 0):
            raise ValueError(f"DDPConfig.bucket_cap_mb = {self.bucket_cap_mb!r}; expected a positive number of MiB "
                             f"(or None for DDP's default)")
        if isinstance(self.straggle_ms, bool) or not isinstance(self.straggle_ms, (int, float)) or self.straggle_ms < 0:
            raise ValueError(f"DDPConfig.straggle_ms = {self.straggle_ms!r}; expected a number of ms >= 0")


CPU_MODEL = ddp.MLPConfig(width=512, depth=8, batch=32)  # 8.4 MB of fp32 gradients in 16 tensors
# 1.07 GB of fp32 gradients in 128 tensors: 64 weights of 16 MiB (and 8 KiB biases), so the caps below change the
# buckets. The sets recorded before it (16 x Linear(4096): 64 MiB weights) made 16 buckets at every cap <= 64 MiB.
GPU_MODEL = ddp.MLPConfig(width=2048, depth=64, batch=256)
# the practice project: many small layers; one run has a planted cause, the other is the reference
PRACTICE_MODEL = ddp.MLPConfig(width=128, depth=48, batch=32)
# the caps each model sweeps, chosen so every cap gives a different bucket count (analysis.buckets.bucket_plan, tested
# against torch's own assignment): CPU_MODEL 8/4/2/1, GPU_MODEL 64/32/10/3. "cap 1 MiB" (the straggler's and the
# no_sync run's cap) and "cap 25 MiB" (the scaling table's) are in both.
CPU_CAPS_MB = (1, 2, 4, 25)
GPU_CAPS_MB = (1, 25, 100, 400)
CAPS_MB = CPU_CAPS_MB
STRAGGLE_MS = 10.0  # the planted straggler's sleep: above a CPU step's noise, a third of a GPU step
BENCH_CALLS = 20  # all-reduces per CUDA-event pair (nccl-tests times its iterations the same way: one pair, many calls)
BENCH_WARMUP = 5  # untimed all-reduces of each size first (NCCL sets up its channels and buffers on the first calls)
# the GPU benchmark sizes, 8 KiB to 1 GiB in steps of 4 (MiB): small sizes give the latency, large ones the bandwidth
GPU_BENCH_MIB = (1 / 128, 1 / 32, 1 / 8, 0.5, 2, 8, 32, 128, 512, 1024)


def sweep_configs(model: ddp.MLPConfig, caps=CAPS_MB, practice: bool = True) -> tuple[DDPConfig, ...]:
    """The lab's configs: one per bucket cap, DDP's default cap (``bucket_cap_mb=None``: 25 MiB with a 1 MiB
    first bucket), 25 MiB with ``gradient_as_bucket_view``, the straggler (cap 1 MiB, the last rank drains its
    GPU and sleeps :data:`STRAGGLE_MS` before each forward) and the practice project's two runs (``mystery``, ``reference``)."""
    out = [DDPConfig(f"cap {c:g} MiB", c, False, model) for c in caps]
    out += [DDPConfig("default cap", None, False, model), DDPConfig("cap 25 MiB, bucket view", 25, True, model),
            DDPConfig("straggler", 1, False, model, STRAGGLE_MS)]
    if practice:
        out += [DDPConfig("mystery", 0.001, False, PRACTICE_MODEL), DDPConfig("reference", 25, False, PRACTICE_MODEL)]
    return tuple(out)


@dataclass(frozen=True)
class RunSpec:
    """What one launch measures. ``active``: profiled steps per config; ``timed``: wall-timed steps
    per config; ``accum``: micro-batches per optimizer step in the ``no_sync`` run; ``bench_mib``:
    all-reduce benchmark sizes (MiB), ``bench_reps`` timings each (on a GPU: CUDA events around ``bench_calls``
    back-to-back calls per timing, after :data:`BENCH_WARMUP`; on a CPU each timing is one call, host-timed)."""

    configs: tuple = field(default_factory=lambda: sweep_configs(CPU_MODEL))
    active: int = 3
    timed: int = 6
    accum: int = 4
    bench_mib: tuple = (0.25, 1, 4, 16)
    bench_reps: int = 5
    bench_calls: int = BENCH_CALLS

    def __post_init__(self):
        for n in ("active", "timed", "accum", "bench_reps", "bench_calls"):
            v = getattr(self, n)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"RunSpec.{n} = {v!r}; expected a positive int")
        if not self.configs or not all(isinstance(c, DDPConfig) for c in self.configs):
            raise ValueError(f"RunSpec.configs = {self.configs!r}; expected a non-empty tuple of DDPConfig")


CPU_SPEC = RunSpec(configs=sweep_configs(CPU_MODEL, CPU_CAPS_MB))
GPU_SPEC = RunSpec(configs=sweep_configs(GPU_MODEL, GPU_CAPS_MB), active=3, timed=20, accum=4,
                   bench_mib=GPU_BENCH_MIB, bench_reps=5)
LIVE_GPU_SPEC = RunSpec(configs=sweep_configs(GPU_MODEL, GPU_CAPS_MB), active=2, timed=5, accum=4,
                        bench_mib=(*GPU_BENCH_MIB[::2], 1024), bench_reps=3)  # lab 06 live on GPUs: fewer repeats
QUICK_GPU_SPEC = RunSpec(configs=sweep_configs(GPU_MODEL, caps=(1, 25), practice=False), active=2, timed=5, accum=2,
                         bench_mib=(1 / 32, 2, 128), bench_reps=3)


def spec_for(backend: str) -> RunSpec:
    """The lab's measurement for a backend: the small CPU model on gloo, the GPU-sized one on NCCL."""
    if backend not in ddp.BACKENDS:
        raise ValueError(f"backend={backend!r}; expected one of {ddp.BACKENDS}")
    return CPU_SPEC if backend == "gloo" else LIVE_GPU_SPEC


def counts_spec(backend: str) -> RunSpec:
    """The lab's measurement for a backend (:func:`spec_for`) cut to what its counts read: the sweep's first config
    (``cap 1 MiB``: its all-reduce calls per step and DDP's buckets) and its ``no_sync`` run with the lab's
    accumulation, one timed step and one benchmark size. The counts depend on the model, the cap and the
    accumulation, which are the lab's, not on how many steps are timed: the grader marks lab 06's count questions
    against this run (7 s against the full run's 11 s on an idle 2-core CPU; starting the ranks is most of the rest)."""
    spec = spec_for(backend)
    return replace(spec, configs=spec.configs[:1], timed=1, bench_mib=spec.bench_mib[:1], bench_reps=1)

# the small run committed as tests/data/ddp_gloo_run.json (see tests/data/README.md)
_SMALL, _SMALL_PRACTICE = ddp.MLPConfig(width=256, depth=8, batch=8), ddp.MLPConfig(width=64, depth=8, batch=8)
FIXTURE_SPEC = RunSpec(configs=(DDPConfig("cap 0.25 MiB", 0.25, False, _SMALL), DDPConfig("cap 25 MiB", 25, False, _SMALL),
                                DDPConfig("default cap", None, False, _SMALL),
                                DDPConfig("cap 25 MiB, bucket view", 25, True, _SMALL),
                                DDPConfig("straggler", 0.25, False, _SMALL, STRAGGLE_MS),
                                DDPConfig("mystery", 0.001, False, _SMALL_PRACTICE),
                                DDPConfig("reference", 25, False, _SMALL_PRACTICE)),
                       active=4, timed=2, accum=2, bench_mib=(0.25, 1), bench_reps=2)


# ---------------------------------------------------------------- inside each rank
def _sync(device):
    import torch  # heavy: torch, only here

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def together(device):
    """Synchronise this rank's GPU, then meet every rank at a barrier (and synchronise again): what a
    profiled window starts from, so no rank's first collective waits for a peer still finishing older work."""
    import torch.distributed as dist  # heavy: torch, only here

    _sync(device)
    dist.barrier()
    _sync(device)


def _stepper(model, opt, cfg: ddp.MLPConfig, rank: int, device, straggle_s: float = 0.0):
    import torch.nn.functional as F  # heavy: torch, only here

    it = [0]

    def micro():
        x, y = ddp.batch_for(cfg, rank, it[0], device)
        it[0] += 1
        if straggle_s:
            # the planted straggler: its GPU drained first (on a GPU the host runs steps ahead, and a sleep
            # shorter than that lead would cost the GPU nothing), then the host stops, so this rank reaches
            # every collective about straggle_s late, as a rank stalled on its data or I/O does
            _sync(device)
            time.sleep(straggle_s)
        F.mse_loss(model(x), y).backward()

    def step():
        micro()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return micro, step


def _timed(step, n: int, device, barrier: bool = True) -> float:
    """Median seconds of ``n`` steps, each timed on its own (synchronised; ranks meet at a barrier first)."""
    if barrier:
        together(device)
    else:
        _sync(device)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def profiled(step, active: int, device, barrier: bool = True, warmup: int = WARMUP) -> dict:
    """The trimmed trace of ``active`` profiled steps after ``warmup`` warm-up steps, all ranks started together."""
    if barrier:
        together(device)
    else:
        _sync(device)
    return trim(profile(step, wait=0, warmup=warmup, active=active).data, max_depth=2)


def _ddp(cfg: DDPConfig, device):
    import torch  # heavy: torch, only here
    from torch.nn.parallel import DistributedDataParallel as DDP  # heavy: torch, only here

    model = ddp.tiny_mlp(cfg.model).to(device)
    ids = [device.index] if device.type == "cuda" else None
    m = DDP(model, device_ids=ids, bucket_cap_mb=cfg.bucket_cap_mb, gradient_as_bucket_view=cfg.bucket_view)
    return m, torch.optim.SGD(m.parameters(), lr=1e-3)


def _ints(text) -> list[int]:
    return [int(v) for v in str(text).replace(",", " ").split()] if str(text).strip() else []


def ddp_facts(m) -> dict:
    """What DDP says about its buckets (``_get_ddp_logging_data()``, after its second iteration): ``bucket_bytes``
    (rebuilt, in reduction order), ``grad_ready_order`` (parameter indices in the order their gradients became
    ready), ``param_bytes`` (per parameter, registration order), ``param_tensors`` and ``ddp_timers_ns``."""
    log = m._get_ddp_logging_data()
    return {"bucket_bytes": _ints(log.get("rebuilt_bucket_sizes", "")) or _ints(log.get("bucket_sizes", "")),
            "grad_ready_order": _ints(log.get("prev_iteration_grad_ready_order_indices", "")),
            "param_bytes": [p.numel() * p.element_size() for p in m.parameters()],
            "param_tensors": int(log.get("num_parameter_tensors", 0)),
            "ddp_timers_ns": {k: int(log[k]) for k in ("avg_backward_comm_time", "avg_backward_compute_time",
                                                        "avg_backward_compute_comm_overlap_time") if k in log}}


def event_timed(call: Callable, calls: int, reps: int, device, meet: Callable | None = None, torch_mod=None) -> dict:
    """Time ``call`` as nccl-tests does: :data:`BENCH_WARMUP` untimed calls, then ``reps`` timings, each a CUDA event
    pair recorded on one side stream around ``calls`` back-to-back calls issued on it (NCCL's own stream waits for that
    stream at each call and the stream waits for NCCL's work, so the pair brackets the collectives; the host's launch
    cost is hidden while the GPU is busy). ``meet`` (the ranks' barrier) runs before each timing. Returns ``seconds``
    (per call, median of the timings), ``seconds_min``/``seconds_max``, ``calls_per_timing`` and ``timing``.
    ``torch_mod`` lets a test hand in a fake ``torch`` (events and streams) on a CPU."""
    if torch_mod is None:
        import torch as torch_mod  # heavy: torch, only here
    stream = torch_mod.cuda.Stream(device=device)
    per_call = []
    with torch_mod.cuda.stream(stream):
        for _ in range(BENCH_WARMUP):
            call()
        for _ in range(reps):
            stream.synchronize()
            if meet is not None:
                meet()
            start, end = torch_mod.cuda.Event(enable_timing=True), torch_mod.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(calls):
                call()
            end.record(stream)
            end.synchronize()
            per_call.append(start.elapsed_time(end) / 1e3 / calls)  # elapsed_time is in ms
    if not per_call or min(per_call) <= 0:
        raise ValueError(f"CUDA-event timings {per_call}; expected positive seconds per call")
    return {"seconds": statistics.median(per_call), "seconds_min": min(per_call), "seconds_max": max(per_call),
            "calls_per_timing": calls, "timing": "cuda_events"}  # named in analysis.scaling.TIMINGS


def job_ddp(rank: int, world: int, spec: RunSpec) -> dict:
    """One rank's measurements for ``spec`` (see module doc); traces cut with ``parse.trace.trim(max_depth=2)``
    (ops nested deeper than two aten ops dropped: intervals, comm ranges, launches and c10d calls are kept)."""
    import torch  # heavy: torch, only here
    import torch.distributed as dist  # heavy: torch, only here

    backend = dist.get_backend()
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    out: dict = {"rank": rank, "world": world, "backend": backend, "device": str(device), "configs": []}
    # one-rank baseline: rank 0 alone, profiled and timed the same way; the others wait
    base_model = spec.configs[0].model
    if rank == 0:
        m = ddp.tiny_mlp(base_model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)
        _, step = _stepper(m, opt, base_model, rank, device)
        out["single"] = {"model": asdict(base_model), "trace": profiled(step, max(spec.active, 5), device, barrier=False),
                         "step_s": _timed(step, spec.timed, device, barrier=False)}
        del m, opt
    dist.barrier()
    for cfg in spec.configs:
        m, opt = _ddp(cfg, device)
        straggle = cfg.straggle_ms / 1e3 if rank == world - 1 else 0.0
        _, step = _stepper(m, opt, cfg.model, rank, device, straggle)
        trace = profiled(step, spec.active, device)
        step_s = _timed(step, spec.timed, device)
        facts = ddp_facts(m)
        micro = _stepper(m, opt, cfg.model, rank, device)[0]
        micro()  # one forward/backward more, to see where the gradients live
        storages = {p.grad.untyped_storage().data_ptr() for p in m.parameters()}
        opt.zero_grad(set_to_none=True)
        out["configs"].append({
            "label": cfg.label, "bucket_cap_mb": cfg.bucket_cap_mb, "bucket_view": cfg.bucket_view,
            "straggle_ms": cfg.straggle_ms, "model": asdict(cfg.model), "params": cfg.model.params,
            "step_s": step_s, "trace": trace, **facts, "grad_storages": len(storages)})
        del m, opt
    # no_sync: one optimizer step of `accum` micro-batches, with and without it
    cfg = spec.configs[0]
    out["no_sync"] = {"accum": spec.accum, "label": cfg.label}
    for name in ("plain", "no_sync"):
        m, opt = _ddp(cfg, device)
        micro, _ = _stepper(m, opt, cfg.model, rank, device)

        def opt_step(m=m, opt=opt, micro=micro, name=name):
            for i in range(spec.accum):
                if name == "no_sync" and i < spec.accum - 1:
                    with m.no_sync():
                        micro()
                else:
                    micro()
            opt.step()
            opt.zero_grad(set_to_none=True)

        out["no_sync"][name] = {"trace": profiled(opt_step, 1, device), "step_s": _timed(opt_step, 2, device)}
        del m, opt
    # plain all-reduce benchmark: CUDA events on a GPU (many calls per timing), host-timed on a CPU
    out["bench"] = []
    for mib in spec.bench_mib:
        n = max(1, int(mib * MiB // 4))
        t = torch.ones(n, dtype=torch.float32, device=device)
        dist.all_reduce(t)
        if device.type == "cuda":
            row = event_timed(lambda t=t: dist.all_reduce(t), spec.bench_calls, spec.bench_reps, device,
                              lambda: together(device))
        else:
            row = {"seconds": _timed(lambda t=t: dist.all_reduce(t), spec.bench_reps, device), "calls_per_timing": 1,
                   "timing": "host"}
        out["bench"].append({"bytes": 4 * n, "dtype": "float32", "reps": spec.bench_reps, **row})
    if backend == "nccl":
        v = torch.cuda.nccl.version()
        out["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    out["torch"] = torch.__version__
    return out


# ---------------------------------------------------------------- entry points
def run(spec: RunSpec = CPU_SPEC, world: int = 2, backend: str = "gloo", port: int | None = None,
        timeout_s: float = 180.0) -> list[dict]:
    """Launch :func:`job_ddp` on ``world`` ranks and return their dicts in rank order (see module doc)."""
    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec is {type(spec).__name__}; expected a RunSpec")
    return ddp.launch(job_ddp, world=world, args=(spec,), backend=backend, port=port, timeout_s=timeout_s)


def _topology() -> str:
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi topo -m failed: {exc}"


def record_into(writer, check: Callable[[list[dict]], list[str]], quick: bool = False, gpus: int | None = None,
                spec: RunSpec | None = None, backend: str = "nccl") -> str:
    """The recorder's ``distributed`` step: :func:`run` with NCCL on every GPU (``gpus``, default all of them,
    at least 2), checked by ``check`` (the recorder passes ``analysis.ddp_run.run_violations``: a list of broken
    invariants, empty when all hold), then written as records ``ddp_rank0`` … ``ddp_rank<N-1>`` (each rank's
    dict, traces included) and ``ddp_meta`` (world, NCCL version, topology). A run that breaks an invariant
    raises :class:`InvariantBroken` naming each, and nothing is written. Fewer than 2 GPUs: :class:`NotEnoughGPUs`.
    ``spec`` and ``backend`` (default :data:`GPU_SPEC`, NCCL) let a test drive the same path on gloo ranks."""
    gpus = ddp.gpu_count() if gpus is None else gpus
    if gpus < 2:
        raise NotEnoughGPUs(f"the distributed step needs 2 GPUs (NCCL, one rank per GPU) and this machine has "
                            f"{gpus}; record it on a machine with two or more GPUs (e.g. nvidia-h200-x2)")
    spec = spec or (QUICK_GPU_SPEC if quick else GPU_SPEC)
    t0 = time.perf_counter()
    ranks = run(spec, world=gpus, backend=backend, timeout_s=540.0)
    broken = check(ranks)
    if broken:
        raise InvariantBroken(f"{len(broken)} invariant(s) broken, nothing written:\n" + "\n".join(broken[:20]))
    for r in ranks:
        writer.write(f"ddp_rank{r['rank']}", r, units={"step_s": "s", "seconds": "s", "bytes": "B"},
                     notes="one rank of a DDP run (see infralens_lab.measure.distributed); traces trimmed")
    writer.write("ddp_meta", {"world": gpus, "gpus": gpus, "backend": backend, "nccl": ranks[0].get("nccl_version"),
                              "topology": _topology(), "spec": repr(spec), "seconds": time.perf_counter() - t0,
                              "invariants": "checked: exposed <= comm <= step, calls = buckets, speedup <= bound"},
                 notes="NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 in every rank")
    return f"{gpus} ranks, {len(spec.configs)} configs, {time.perf_counter() - t0:.1f} s, invariants hold"


if __name__ == "__main__":
    raise SystemExit(ddp.NO_CLI.format(module="infralens_lab.measure.distributed"))
