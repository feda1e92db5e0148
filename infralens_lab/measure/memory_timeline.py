"""The allocation timeline of one training step, from the CUDA caching allocator's own history.

``torch.cuda.memory._record_memory_history()`` makes the allocator log every ``alloc`` and
``free_completed`` (and every ``segment_alloc``/``segment_free`` of cudaMalloc'd memory) with its
size; ``torch.cuda.memory._snapshot()`` returns that log. :func:`record_step_timeline` runs one
warm-up step, then logs ``steps`` more AdamW steps of :class:`~infralens_lab.workloads.tiny_gpt.TinyGPT`
and keeps a compact, JSON-shaped copy of the log: ``[action, size]`` per event, in order, plus the
bytes already allocated when logging began (the weights, gradients set to None, optimizer states).

Phases are found without clocks: at each boundary (before forward, backward, optimizer step, and
after the step) the function allocates and frees one small *marker* block whose size is unique
(:data:`MARKER_BASE` + 512·i bytes). :func:`timeline` finds the markers, drops them, and labels
every other event with its phase, so the curve of allocated bytes can be drawn per phase on a
laptop. Markers cost two events and ~400 KB each and are never counted.

GPU only (the history is the CUDA allocator's); on a CPU :func:`record_step_timeline` raises a
``RuntimeError`` saying so. :func:`timeline` and :func:`phase_peaks` are pure and run anywhere.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import pandas as pd

MARKER_BASE = 777 * 512  # bytes; marker i allocates MARKER_BASE + 512*i: multiples of the allocator's 512-B
# rounding, under 1 MiB so they come from the small pool, whose blocks are split to the exact size
PHASES = ("forward", "backward", "optimizer")
_KEEP = ("alloc", "free_completed", "segment_alloc", "segment_free")


def compact(snapshot: Mapping[str, Any], device_index: int = 0) -> list[list]:
    """``[action, size]`` for each allocator event of one device, in order (see module docs)."""
    traces = snapshot.get("device_traces")
    if not isinstance(traces, list) or len(traces) <= device_index:
        raise ValueError(f"snapshot has device_traces={type(traces).__name__} of length "
                         f"{len(traces) if isinstance(traces, list) else 'n/a'}; expected a list with an entry for "
                         f"device {device_index} (was _record_memory_history enabled?)")
    return [[e["action"], int(e.get("size", 0))] for e in traces[device_index] if e.get("action") in _KEEP]


def timeline(events: list[list], baseline_bytes: int, steps: int) -> pd.DataFrame:
    """Allocated bytes after each event, labelled with step and phase.

    ``events`` as :func:`compact` returns them; ``baseline_bytes``: bytes allocated when logging began.
    Columns: ``event`` (index), ``step``, ``phase``, ``action``, ``size``, ``allocated_bytes`` (live
    tensors' blocks, the markers excluded) and ``reserved_bytes`` (cudaMalloc'd segments added since
    logging began). Raises ``ValueError`` when the markers are not all found in order.
    """
    expected = [MARKER_BASE + 512 * i for i in range(steps * len(PHASES) + 1)]
    rows, mark, allocated, reserved, pending_free = [], 0, int(baseline_bytes), 0, set()
    for action, size in events:
        if mark < len(expected) and action == "alloc" and size == expected[mark]:
            pending_free.add(size)
            mark += 1
            continue
        if action == "free_completed" and size in pending_free:
            pending_free.discard(size)
            continue
        if mark == 0 or mark == len(expected):
            continue  # before the first or after the last boundary: not part of a logged step
        k = mark - 1
        if action == "alloc":
            allocated += size
        elif action == "free_completed":
            allocated -= size
        elif action == "segment_alloc":
            reserved += size
        else:
            reserved -= size
        rows.append({"step": k // len(PHASES), "phase": PHASES[k % len(PHASES)], "action": action, "size": size,
                     "allocated_bytes": allocated, "reserved_bytes": reserved})
    if mark != len(expected):
        raise ValueError(f"found {mark} of {len(expected)} phase markers (sizes {expected[:3]}...); expected all, in "
                         "order: the history was truncated (raise max_entries) or is not from record_step_timeline")
    df = pd.DataFrame(rows, columns=["step", "phase", "action", "size", "allocated_bytes", "reserved_bytes"])
    df.insert(0, "event", range(len(df)))
    df.attrs["baseline_bytes"] = int(baseline_bytes)
    return df


def phase_peaks(df: pd.DataFrame) -> pd.DataFrame:
    """Per step and phase: allocated bytes at the start and end of the phase, its peak, and where the
    peak is reached (event index). Units: bytes."""
    delta = df["allocated_bytes"].diff().fillna(df["allocated_bytes"].iloc[0] - df.attrs.get("baseline_bytes", 0))
    g = df.assign(before=df["allocated_bytes"] - delta).groupby(["step", "phase"], sort=False)
    out = pd.DataFrame({"start_bytes": g["before"].first(), "end_bytes": g["allocated_bytes"].last(),
                        "peak_bytes": g["allocated_bytes"].max(), "peak_event": g["allocated_bytes"].idxmax()})
    return out.reset_index()


def record_step_timeline(config=None, batch: int = 8, seq: int | None = None, precision: str = "fp32",
                         steps: int = 1, max_entries: int = 200_000) -> dict:
    """Log ``steps`` AdamW steps of TinyGPT after one warm-up step; return JSON-shaped values
    ``{"meta", "baseline_bytes", "events"}`` for :func:`timeline`. CUDA only."""
    import torch  # heavy: torch, only here

    from ..workloads.tiny_gpt import GPTConfig, TinyGPT  # heavy: workloads.tiny_gpt imports torch

    if not torch.cuda.is_available():
        raise RuntimeError("the allocation timeline is the CUDA caching allocator's history; no CUDA device here "
                           "(the labs show the recorded timeline instead)")
    if precision not in ("fp32", "amp_bf16"):
        raise ValueError(f"precision = {precision!r}; expected 'fp32' or 'amp_bf16'")
    cfg = config or GPTConfig()
    seq = cfg.block_size if seq is None else seq
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = TinyGPT(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, cfg.vocab, (batch, seq), device=dev)
    y = torch.randint(0, cfg.vocab, (batch, seq), device=dev)

    def loss_fn():
        if precision == "amp_bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(x, y)[1]
        return model(x, y)[1]

    marks = iter(range(10**6))

    def mark():
        m = torch.empty(MARKER_BASE + 512 * next(marks), dtype=torch.uint8, device=dev)
        del m

    def step(with_marks: bool):
        opt.zero_grad(set_to_none=True)
        with_marks and mark()
        loss = loss_fn()
        with_marks and mark()
        loss.backward()
        del loss
        with_marks and mark()
        opt.step()

    step(False)  # warm-up: optimizer states and library workspaces exist from here on
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated(dev)
    torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
    try:
        for _ in range(steps):
            step(True)
        mark()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    events = compact(snap, torch.cuda.current_device())
    meta = {"config": asdict(cfg), "batch": batch, "seq": seq, "precision": precision, "steps": steps,
            "optimizer": "adamw", "marker_base_bytes": MARKER_BASE, "max_entries": max_entries}
    timeline(events, baseline, steps)  # refuse to record a log whose markers are incomplete
    return {"meta": meta, "baseline_bytes": baseline, "events": events}


def record_into(writer, config=None, batch: int = 8, seq: int | None = None) -> list:
    """Write record ``memory_timeline``: one fp32 and one amp_bf16 step of the GPU TinyGPT config
    used by ``memory_train`` (:data:`infralens_lab.measure.memory.GPU_CONFIG`)."""
    from .memory import GPU_CONFIG  # heavy: measure.memory imports torch

    cfg = config or GPU_CONFIG
    values = {p: record_step_timeline(cfg, batch, seq, p) for p in ("fp32", "amp_bf16")}
    return [writer.write("memory_timeline", values, units={"size": "B", "baseline_bytes": "B"},
                         notes="torch.cuda.memory._record_memory_history over one AdamW step after a warm-up step; "
                               "events [action, size]; phases found by marker allocations "
                               "(infralens_lab.measure.memory_timeline)")]
