"""A tiny model for data-parallel training, and the launcher that runs a job on N ranks with timeouts.

:func:`tiny_mlp` is a stack of square ``Linear`` layers (ReLU between): its gradients are a few
tensors of known size, so how DDP packs them into buckets can be predicted by hand.
:func:`launch` starts ``world`` processes with ``torch.multiprocessing``'s ``spawn`` start method
(so it works from a notebook: the job is a function importable from this package, never one
defined in a cell), sets up ``torch.distributed`` in each (NCCL on GPUs, gloo on CPUs) with a
timeout on the process-group init and on every collective, and returns each rank's result.
Nothing hangs: if a rank raises or dies, the others are terminated and :class:`RankFailed` says
which rank failed and how; if the whole job runs past ``timeout_s``, every rank is terminated.

NVLink multicast stays off in every rank (``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``; see :data:`CHILD_ENV`).
"""
from __future__ import annotations

import os
import queue as _queue
import socket
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..errors import InfraLensError

CHILD_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
BACKENDS = ("gloo", "nccl")
FAILURE_GRACE_S = 3.0  # after a first failure, how long to wait for the other ranks' reports
# what a rank reports when it only saw a peer disappear (gloo / NCCL wording), so the root cause is listed first
PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "timed out", "Timed out", "Broken pipe",
             "NCCL communicator was aborted", "DistNetworkError")


# what `python -m <module>` says for a module of the DDP path that has no command line (it must not exit 0 silently)
NO_CLI = ("{module} has no command line: run under torchrun it would do nothing. To profile DDP on N ranks run\n"
          "  torchrun --nproc_per_node=N -m infralens_lab.profile_ddp --out DIR [--model module:function]\n"
          "(per-rank traces and provenance in DIR), or call infralens_lab.measure.distributed.run() from Python.")


class RankFailed(InfraLensError, RuntimeError):
    """A rank of a launched job raised, died or ran out of time; the message says which and how."""


@dataclass(frozen=True)
class MLPConfig:
    """The tiny model: ``depth`` Linear(width, width) layers with bias (fp32), ReLU between;
    ``batch`` rows per rank per micro-step. Parameters: depth·(width² + width)."""

    width: int = 512
    depth: int = 8
    batch: int = 32

    def __post_init__(self):
        for name in ("width", "depth", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"MLPConfig.{name} = {v!r}; expected a positive int")

    @property
    def params(self) -> int:
        return self.depth * (self.width * self.width + self.width)

    def param_sizes(self) -> list[int]:
        """Element counts of the parameters in registration order (weight, bias per layer)."""
        return [n for _ in range(self.depth) for n in (self.width * self.width, self.width)]


def tiny_mlp(cfg: MLPConfig, seed: int = 0):
    """The model of ``cfg`` with the same initial weights on every rank (seeded)."""
    import torch  # heavy: torch, only here
    import torch.nn as nn  # heavy: torch, only here

    g = torch.Generator().manual_seed(seed)
    layers: list = []
    for i in range(cfg.depth):
        lin = nn.Linear(cfg.width, cfg.width)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=g) / cfg.width ** 0.5)
            lin.bias.copy_(torch.randn(lin.bias.shape, generator=g) * 0.01)
        layers += [lin] + ([nn.ReLU()] if i < cfg.depth - 1 else [])
    return nn.Sequential(*layers)


def batch_for(cfg: MLPConfig, rank: int, step: int, device="cpu"):
    """A (x, y) micro-batch for ``rank`` at ``step``: fresh random data, different on every rank, drawn where
    the model runs. On a GPU it is drawn there: drawn on the CPU and copied from pageable memory, a 256 x 4096
    batch cost each rank 8 to 15 ms of CPU per step and a copy that waits for the GPU, so the ranks drifted apart
    by that much and the recorded "communication" was mostly one rank waiting for the other's data."""
    import torch  # heavy: torch, only here

    device = torch.device(device)
    g = torch.Generator(device=device).manual_seed(1000 * step + rank + 1)
    x = torch.randn(cfg.batch, cfg.width, generator=g, device=device)
    y = torch.randn(cfg.batch, cfg.width, generator=g, device=device)
    return x, y


# ---------------------------------------------------------------- world size, ports
def gpu_count() -> int:
    """CUDA devices this process sees (0 without CUDA)."""
    import torch  # heavy: torch, only here

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_world(requested: int, backend: str, gpus: int | None = None) -> int:
    """The world size to launch: ``requested`` ranks of gloo (CPU processes), or
    ``min(requested, gpus)`` for NCCL. Raises when NCCL has no GPU, or when ``requested`` is
    not a positive int; a request above the GPU count for NCCL raises too (one rank per GPU),
    naming both numbers, so a caller that wants the clamp passes ``min(requested, gpus)``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; expected one of {BACKENDS}")
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ValueError(f"world size {requested!r}; expected a positive int")
    if backend == "gloo":
        return requested
    gpus = gpu_count() if gpus is None else gpus
    if gpus == 0:
        raise ValueError("backend='nccl' needs CUDA GPUs and this machine has none; "
                         "use backend='gloo' to run the ranks as CPU processes")
    if requested > gpus:
        raise ValueError(f"world size {requested} is larger than the {gpus} GPU(s) present; NCCL runs one rank "
                         f"per GPU: ask for world={min(requested, gpus)} (or use gloo on the CPU)")
    return requested


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(port: int, host: str = "127.0.0.1") -> int:
    """``port`` if it can be bound on ``host``; a clear error naming it if it is in use or invalid."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port={port!r}; expected an int in 1..65535 (or None to pick a free one)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ValueError(f"port {port} on {host} is already in use ({exc.strerror}); pass port=None to pick "
                             f"a free one, or choose another MASTER_PORT") from None
    return port


# ---------------------------------------------------------------- the launcher
def _rank_main(rank: int, world: int, backend: str, port: int, timeout_s: float, job: Callable, args: tuple,
               results) -> None:
    """Body of every spawned rank: env, process group (with timeouts), the job, the result on ``results``."""
    for k, v in CHILD_ENV.items():
        os.environ[k] = v
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        import torch  # heavy: torch, only here
        import torch.distributed as dist  # heavy: torch, only here

        torch.set_num_threads(1)  # two ranks share the cores; one thread each keeps them from fighting
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
        try:
            out = job(rank, world, *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, "ok", out))
    except BaseException as exc:  # report every failure (timeouts included) to the parent, then exit non-zero
        results.put((rank, "error", traceback.format_exc()[-4000:]))
        raise SystemExit(1) from exc  # an interrupt (it reaches the ranks too) ends the rank as well


@contextmanager
def _main_not_rerun(job: Callable):
    """While the ranks start, hide the parent's ``__main__`` path and module name from ``spawn``.

    A spawned child re-runs the parent's main script (as ``__mp_main__``) unless its code sits under
    ``if __name__ == "__main__"``, and a lab converted to a plain script has no such guard: every rank
    re-ran the lab from the top, tried to start ranks of its own while bootstrapping, and died
    (lab 06 as a script on the lent H100). The jobs are functions of this package, so a child never
    needs ``__main__``. A job defined in ``__main__`` itself keeps the default behaviour."""
    main = sys.modules.get("__main__")
    if main is None or getattr(job, "__module__", None) == "__main__":
        yield
        return
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def launch(job: Callable, world: int = 2, args: tuple = (), backend: str = "gloo", port: int | None = None,
           timeout_s: float = 60.0, collective_timeout_s: float | None = None) -> list[Any]:
    """Run ``job(rank, world, *args)`` on ``world`` spawned ranks and return their results in rank order.

    ``job`` must be importable (a module-level function of this package). ``port``: None picks a
    free one; a given busy port raises before anything starts. ``collective_timeout_s`` (default
    ``timeout_s / 2``) bounds process-group init and each collective; ``timeout_s`` bounds the
    whole job (seconds). A rank that raises or exits without a result makes every other rank
    terminate and raises :class:`RankFailed` naming it.
    """
    import torch.multiprocessing as mp  # heavy: torch, only here

    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; expected one of {BACKENDS}")
    world = resolve_world(world, backend)
    port = free_port() if port is None else check_port(port)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    coll = timeout_s / 2 if collective_timeout_s is None else collective_timeout_s
    procs = [ctx.Process(target=_rank_main, args=(r, world, backend, port, coll, job, args, results), daemon=True)
             for r in range(world)]
    with _main_not_rerun(job):
        for p in procs:
            p.start()
    got: dict[int, Any] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    first_failure = None  # monotonic time of the first failure seen; then a short grace to hear from the others

    def drain(wait_s: float) -> None:
        try:
            while True:
                rank, status, payload = results.get(timeout=wait_s)
                (got if status == "ok" else errors)[rank] = payload
                wait_s = 0.05
        except _queue.Empty:
            pass

    try:
        while len(got) < world:
            drain(0.2)
            for r, p in enumerate(procs):
                if r not in got and r not in errors and p.exitcode is not None:
                    drain(0.5)  # its report may still be in the pipe
                    if r not in got and r not in errors:
                        errors[r] = f"exited with code {p.exitcode} without a result (it died)"
            if errors and first_failure is None:
                first_failure = time.monotonic()
            if first_failure is not None and (time.monotonic() - first_failure > FAILURE_GRACE_S
                                              or len(got) + len(errors) == world):
                break
            if time.monotonic() > deadline:
                errors[-1] = f"the job ran past timeout_s={timeout_s:g} s"
                break
    except BaseException:  # interrupted (Kernel > Interrupt) or failed here: no rank outlives the call
        errors.setdefault(-1, "the parent stopped")
        raise
    finally:
        for p in procs:
            if p.exitcode is None and errors:
                p.terminate()
        for p in procs:
            p.join(timeout=10)
            if p.exitcode is None:
                p.kill()
                p.join(timeout=5)
    if errors:
        raise RankFailed(_failure_message(errors, got, world))
    return [got[r] for r in range(world)]


def _failure_message(errors: dict[int, str], got: dict, world: int) -> str:
    """Root cause first: a rank that died, then one whose error is its own, then the ones that only saw a peer go."""
    def order(item):
        r, text = item
        last = text.strip().splitlines()[-1] if text.strip() else ""
        secondary = any(k in last for k in PEER_LOST)
        return (0 if "it died" in text else 1 if not secondary else 2, r)

    lines = []
    for r, text in sorted(errors.items(), key=order):
        if r == -1:
            lines.append(text)
        elif "it died" in text:
            lines.append(f"rank {r} {text}")
        else:
            lines.append(f"rank {r} raised:\n{text}")
    silent = [r for r in range(world) if r not in got and r not in errors]
    tail = f"Ranks {silent} had not finished and were stopped" if silent else "Every rank has exited"
    return "\n".join(lines) + f"\n{tail}; nothing is left running."


# ---------------------------------------------------------------- jobs used by tests and the lab's bad-input cells
def job_echo(rank: int, world: int, value: float = 1.0) -> dict:
    """All-reduce ``value * (rank + 1)`` and return the sum: the smallest job that proves the group works."""
    import torch  # heavy: torch, only here
    import torch.distributed as dist  # heavy: torch, only here

    t = torch.tensor([value * (rank + 1)])
    dist.all_reduce(t)
    return {"rank": rank, "world": world, "sum": float(t.item()), "backend": dist.get_backend()}


def job_die(rank: int, world: int, bad_rank: int = 1, how: str = "exit") -> dict:
    """Fault injection: ``bad_rank`` exits (``how='exit'``, code 3), raises (``'raise'``) or hangs
    (``'hang'``: sleeps 10 minutes) before an all-reduce the others wait in; they must be stopped, not hang."""
    import torch  # heavy: torch, only here
    import torch.distributed as dist  # heavy: torch, only here

    if rank == bad_rank:
        if how == "exit":
            os._exit(3)
        if how == "hang":
            time.sleep(600)
        raise RuntimeError(f"planted failure on rank {rank}")
    t = torch.ones(1)
    dist.all_reduce(t)
    return {"rank": rank}



def bucket_zoo(name: str):
    """``(model, input)`` of a few shapes whose gradients DDP buckets differently: ``mlp`` (equal layers, Linear
    bias ready before its weight), ``embedding`` (one tensor larger than small caps), ``conv`` (conv weights ready
    before their biases), ``odd`` (uneven sizes)."""
    import torch  # heavy: torch, only here
    import torch.nn as nn  # heavy: torch, only here

    torch.manual_seed(0)
    if name == "mlp":
        return nn.Sequential(*[nn.Linear(256, 256) for _ in range(6)]), torch.randn(4, 256)
    if name == "embedding":
        return nn.Sequential(nn.Embedding(3000, 128), nn.Flatten(), nn.Linear(3 * 128, 64)), torch.randint(0, 3000, (4, 3))
    if name == "conv":
        return (nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.Flatten(), nn.Linear(64 * 12 * 12, 10)),
                torch.randn(2, 3, 16, 16))
    if name == "odd":
        return nn.Sequential(nn.Linear(100, 700), nn.ReLU(), nn.Linear(700, 33), nn.ReLU(), nn.Linear(33, 900)), torch.randn(4, 100)
    raise ValueError(f"bucket_zoo model {name!r}; expected one of mlp, embedding, conv, odd")


def job_buckets(rank: int, world: int, cases: tuple) -> list[dict]:
    """For each ``(model name, bucket_cap_mb)`` of ``cases``: DDP's rebuilt bucket sizes after three iterations (it
    rebuilds at the start of the second and logs the sizes when the next one starts), the
    gradient-ready order DDP saw, and the parameter sizes (bytes, registration order), as DDP's logging reports them."""
    from torch.nn.parallel import DistributedDataParallel as DDP  # heavy: torch, only here

    out = []
    for name, cap in cases:
        model, x = bucket_zoo(name)
        m = DDP(model, bucket_cap_mb=cap)
        for _ in range(3):
            m(x).float().sum().backward()
        log = m._get_ddp_logging_data()
        ints = [[int(v) for v in str(log.get(k, "")).replace(",", " ").split()]
                for k in ("rebuilt_bucket_sizes", "prev_iteration_grad_ready_order_indices")]
        out.append({"model": name, "cap": cap, "bucket_bytes": ints[0], "ready_order": ints[1],
                    "param_bytes": [p.numel() * p.element_size() for p in m.parameters()]})
    return out

if __name__ == "__main__":
    raise SystemExit(NO_CLI.format(module="infralens_lab.workloads.ddp"))
