"""Profile a DDP job on N ranks under torchrun, and write one chrome trace per rank plus provenance.

    torchrun --nproc_per_node=N [--nnodes=M --node_rank=K --rdzv_endpoint=HOST:PORT] \\
        -m infralens_lab.profile_ddp --out DIR [--model module:function] [--steps 3] [--bucket-cap-mb 25]

Each rank reads the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``), joins the process group (NCCL on ``cuda:LOCAL_RANK`` when this node has a GPU for it, else
gloo on the CPU; ``--backend`` overrides), wraps the model in ``DistributedDataParallel``, synchronises and
meets the other ranks at a barrier, then profiles ``--steps`` training steps after ``--warmup`` warm-up steps
(at least 2: DDP rebuilds its buckets at the second iteration). It writes one file per rank,
``DIR/rank<RANK>.json``: the chrome trace (trimmed to what the analysis reads) with ``distributedInfo``
(rank, world size, backend: the key torch's own distributed traces carry) and ``infralens`` (the provenance:
versions, host, device, the command; and DDP's buckets and gradient-ready order). On several nodes, point
``--out`` at a shared folder or gather the files afterwards.

The model: the package's MLP by default (``--width``, ``--depth``, ``--batch``), or yours as
``--model package.module:function``: ``function(rank, device)`` returns ``(model, loss_fn)`` where
``loss_fn(ddp_model, step)`` runs the forward pass on this rank's batch for ``step`` and returns the loss.

Read the folder with ``python -m infralens_lab analyze DIR`` (or ``infralens_lab.analysis.distributed``'s
``overlap_table`` / ``align`` on the traces); rank 0 prints a summary when every rank has written.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import sys
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

from . import evidence
from .analysis.distributed import invariant_violations, overlap_table
from .analyze import ranks
from .measure.distributed import ddp_facts, profiled
from .workloads import ddp as workloads_ddp

ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="torchrun --nproc_per_node=N -m infralens_lab.profile_ddp",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the rank<N>.json traces")
    ap.add_argument("--model", default="", help="package.module:function returning (model, loss_fn); default: the MLP")
    ap.add_argument("--width", type=int, default=512, help="MLP width (default model)")
    ap.add_argument("--depth", type=int, default=8, help="MLP Linear layers (default model)")
    ap.add_argument("--batch", type=int, default=32, help="MLP rows per rank per step (default model)")
    ap.add_argument("--steps", type=int, default=3, help="profiled steps")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up steps before them (>= 2)")
    ap.add_argument("--bucket-cap-mb", type=float, default=None, help="DDP bucket_cap_mb (default: DDP's own)")
    ap.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="process-group and collective timeout")
    return ap


def rank_env(environ=os.environ) -> tuple[int, int, int]:
    """``(rank, world, local_rank)`` from torchrun's environment; SystemExit naming what is missing otherwise."""
    missing = [k for k in ENV if k not in environ]
    if missing:
        raise SystemExit(f"profile_ddp: {', '.join(missing)} not set: this module runs one rank of a job started "
                         f"by torchrun. Run: torchrun --nproc_per_node=N -m infralens_lab.profile_ddp --out DIR")
    try:
        rank, world, local = (int(environ[k]) for k in ENV)
    except ValueError:
        raise SystemExit(f"profile_ddp: RANK/WORLD_SIZE/LOCAL_RANK = {[environ[k] for k in ENV]}; expected integers") from None
    if not 0 <= rank < world or local < 0:
        raise SystemExit(f"profile_ddp: RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local}; expected 0 <= RANK < WORLD_SIZE")
    return rank, world, local


def load_model_fn(spec: str):
    """The user's ``module:function`` (SystemExit naming the problem when it cannot be imported)."""
    mod, _, fn = spec.partition(":")
    if not mod or not fn:
        raise SystemExit(f"profile_ddp: --model {spec!r}; expected package.module:function")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"profile_ddp: --model {spec!r} cannot be loaded ({exc}); is its folder on PYTHONPATH?") from None


def _mlp(args):
    import torch.nn.functional as F  # heavy: torch, only here

    cfg = workloads_ddp.MLPConfig(width=args.width, depth=args.depth, batch=args.batch)

    def build(rank, device):
        def loss_fn(model, step):
            x, y = workloads_ddp.batch_for(cfg, rank, step, device)
            return F.mse_loss(model(x), y)
        return workloads_ddp.tiny_mlp(cfg), loss_fn
    return build, {"model": "infralens_lab.workloads.ddp.tiny_mlp", **vars(cfg)}


def node_backend(requested: str, cuda: bool, gpus: int, local_world: int) -> str:
    """The process-group backend, decided the same way on every rank of a node: ``requested`` unless it is
    ``'auto'``; then NCCL only when every local rank gets a GPU of its own, else gloo. (Deciding per rank, by
    ``gpus > local_rank``, once gave rank 0 NCCL beside three gloo ranks on a 1-GPU machine, and the group hung.)"""
    if requested != "auto":
        return requested
    return "nccl" if cuda and gpus >= local_world else "gloo"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    rank, world, local = rank_env()
    if args.warmup < 2 or args.steps < 1:
        raise SystemExit(f"profile_ddp: --warmup {args.warmup}, --steps {args.steps}; expected >= 2 and >= 1")
    import torch  # heavy: torch, only here
    import torch.distributed as dist  # heavy: torch, only here
    from torch.nn.parallel import DistributedDataParallel as DDP  # heavy: torch, only here

    backend = node_backend(args.backend, torch.cuda.is_available(), torch.cuda.device_count(),
                           int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    for k, v in workloads_ddp.CHILD_ENV.items():
        os.environ.setdefault(k, v)
    if backend == "nccl":
        torch.cuda.set_device(local)
    device = torch.device(f"cuda:{local}") if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout_s))
    try:
        build, model_meta = (load_model_fn(args.model), {"model": args.model}) if args.model else _mlp(args)
        model, loss_fn = build(rank, device)
        ddp = DDP(model.to(device), device_ids=[local] if backend == "nccl" else None, bucket_cap_mb=args.bucket_cap_mb)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        it = [0]

        def step():
            loss_fn(ddp, it[0]).backward()
            it[0] += 1
            opt.step()
            opt.zero_grad(set_to_none=True)

        trace = profiled(step, args.steps, device, warmup=args.warmup)
        cmd = "torchrun ... -m infralens_lab.profile_ddp " + " ".join(sys.argv[1:] if argv is None else argv)
        prov = asdict(evidence.current_provenance(cmd)) | {"host": socket.gethostname(), "device": str(device),
                                                            "local_rank": local, "bucket_cap_mb": args.bucket_cap_mb,
                                                            "steps": args.steps, "warmup": args.warmup, **model_meta}
        if backend == "nccl":
            prov["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        trace["distributedInfo"] = {"backend": backend, "rank": rank, "world_size": world}
        trace["infralens"] = {"provenance": prov, "ddp": ddp_facts(ddp)}
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{rank}.json").write_text(json.dumps(trace))
        dist.barrier()
        if rank == 0:
            print(summary(out))
    finally:
        dist.destroy_process_group()
    return 0


def summary(folder: Path) -> str:
    """Per rank: all-reduces per step against DDP's buckets, comm, exposed and wait per step; broken invariants."""
    traces, _, datas = ranks(folder, cpu_ok=True)
    t = overlap_table(traces)
    buckets = len(datas[0]["infralens"]["ddp"]["bucket_bytes"])
    g = t.groupby("rank")[["allreduce_calls", "step_us", "comm_us", "exposed_us", "wait_us"]].mean() / [1, 1e3, 1e3, 1e3, 1e3]
    g.columns = ["calls/step", "step ms", "comm ms", "exposed ms", "wait ms"]
    bad = invariant_violations(t, buckets)
    return (f"{len(traces)} rank traces in {folder} (DDP made {buckets} buckets)\n{g.round(3).to_string()}\n"
            + ("invariants: exposed <= comm <= step and calls = buckets hold" if not bad else "BROKEN:\n" + "\n".join(bad)))


if __name__ == "__main__":
    sys.exit(main())
