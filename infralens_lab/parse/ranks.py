"""Per-rank DDP evidence, read: the package's own DDP run, one dict per rank, live or recorded.

Reading only: nothing here runs a rank. :class:`RankRun` wraps the dicts
:func:`infralens_lab.measure.distributed.job_ddp` returns (``rank``, ``world``, ``backend``, ``configs`` with
a trimmed ``trace`` each, ``single``, ``no_sync``, ``bench``). A folder of per-rank chrome traces (what
:mod:`infralens_lab.profile_ddp` writes under torchrun) is read by ``infralens_lab.analyze.ranks``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import evidence
from .trace import Trace, load_trace


@dataclass
class RankRun:
    """One launch of the DDP measurement: each rank's dict in rank order, and the Evidence it came with (live
    or recorded, for captions; None when read from bare dicts)."""

    ranks: list
    ev: Any = None
    _traces: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if not self.ranks or not all(isinstance(r, dict) and "configs" in r for r in self.ranks):
            raise ValueError(f"RankRun needs one dict per rank with 'configs'; got {type(self.ranks).__name__} "
                             f"of {len(self.ranks) if hasattr(self.ranks, '__len__') else '?'}")
        got = [r.get("rank") for r in self.ranks]
        if got != list(range(len(self.ranks))):
            raise ValueError(f"ranks are {got}; expected 0..{len(self.ranks) - 1} in order")

    @property
    def world(self) -> int:
        return len(self.ranks)

    @property
    def backend(self) -> str:
        return str(self.ranks[0].get("backend", "gloo"))

    def labels(self) -> list[str]:
        return [c["label"] for c in self.ranks[0]["configs"]]

    def config(self, label: str, rank: int = 0) -> dict:
        for c in self.ranks[rank]["configs"]:
            if c["label"] == label:
                return c
        raise KeyError(f"no config {label!r}; expected one of {self.labels()}")

    def traces(self, label: str) -> list[Trace]:
        """The per-rank traces of config ``label``; ``'plain'``/``'no_sync'``: the accumulation runs;
        ``'single'``: rank 0 alone (one trace). Parsed once, then kept."""
        if label not in self._traces:
            if label in ("no_sync", "plain"):
                got = [load_trace(r["no_sync"][label]["trace"]) for r in self.ranks]
            elif label == "single":
                got = [load_trace(self.ranks[0]["single"]["trace"])]
            else:
                got = [load_trace(self.config(label, r)["trace"]) for r in range(self.world)]
            self._traces[label] = got
        return self._traces[label]


# The parsed traces and tables of each recorded run, shared by every RankRun read from it in this process: (the
# set's folder, its ddp files' checksums in the manifest) -> RankRun._traces. The recording does not change (every
# load checks its checksum), so a second reader of the same set parses nothing again. Its rank dicts are still a
# fresh copy per read; a caller that changes them builds its own RankRun from them (none in the package does).
_PARSED: dict[tuple, dict] = {}


def _recorded(store, world: int | None = None) -> RankRun:
    """The recorder's NCCL run of ``store`` (``ddp_meta``, ``ddp_rank0`` …), its parsed traces shared (_PARSED)."""
    world = store.load("ddp_meta").values["world"] if world is None else world
    files = [f"ddp_rank{r}.json" for r in range(world)]
    key = (str(Path(store.folder).resolve()), tuple(store.manifest["files"][f].get("sha256") for f in files))
    evs = [store.load(f.removesuffix(".json")) for f in files]
    return RankRun([e.values for e in evs], evs[0], _traces=_PARSED.setdefault(key, {}))


def recorded_runs() -> list[tuple[str, RankRun]]:
    """``[(set folder name, RankRun)]``: the recorder's NCCL run of every recorded set that has one, each from its
    own recording (the default reference first)."""
    return [(store.folder.name, _recorded(store)) for store in evidence.load_all_sets() if "ddp_meta" in store.names()]


def recorded_run() -> RankRun | None:
    """The recorder's NCCL run (``ddp_meta``, ``ddp_rank0`` …) from the first recorded set that has it (the
    default reference first), or None; a set that does not load raises :class:`~infralens_lab.evidence.EvidenceError`."""
    for store in evidence.load_all_sets():
        if "ddp_meta" in store.names():
            return _recorded(store)
    return None


def widest_recorded_run() -> tuple[str, RankRun] | None:
    """``(set folder name, RankRun)`` of the recorded NCCL run with the most ranks (the first in
    :func:`~infralens_lab.evidence.load_all_sets` order among equals: the default reference first), or None. Only
    each set's ``ddp_meta`` is read to choose; then the chosen set's ranks are loaded."""
    best = None
    for store in evidence.load_all_sets():
        if "ddp_meta" in store.names():
            world = store.load("ddp_meta").values["world"]
            if best is None or world > best[1]:
                best = (store, world)
    if best is None:
        return None
    store, world = best
    return store.folder.name, _recorded(store, world)


PID_STRIDE = 10_000_000  # rank r's processes become pid + (r + 1) * PID_STRIDE in a merged trace: no two ranks share one


def ranks_chrome_trace(traces: list[Trace]) -> dict:
    """Every rank's trace as one chrome-trace document (Perfetto, chrome://tracing), on the host clock the traces
    share (processes of one machine): each rank's processes renamed ``rank r · CPU (pid p)`` and ``rank r · GPU d``,
    sorted by rank, and each GPU stream named by what runs on it (``NCCL`` when it holds an NCCL kernel, else
    ``compute``). Times are kept as recorded; only ``pid`` changes (offset by :data:`PID_STRIDE` per rank) so that
    two ranks never share a row. ValueError for no traces or a trace without events."""
    if not traces:
        raise ValueError("ranks_chrome_trace needs the per-rank traces of at least one rank; got none")
    out: list[dict] = []
    for r, tr in enumerate(traces):
        events = tr.data.get("traceEvents") if isinstance(tr.data, dict) else None
        if not events:
            raise ValueError(f"rank {r}'s trace has no traceEvents; expected a torch.profiler chrome trace")
        gpu_pids = {e.get("pid") for e in events if e.get("cat") == "kernel"}
        nccl = {(e.get("pid"), e.get("tid")) for e in events if e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower()}
        streams = {(e.get("pid"), e.get("tid")) for e in events if e.get("cat") == "kernel"}
        base = (r + 1) * PID_STRIDE
        pids = sorted({e["pid"] for e in events if isinstance(e.get("pid"), int)})
        for i, pid in enumerate(pids):
            name = f"rank {r} · GPU {pid}" if pid in gpu_pids else f"rank {r} · CPU (pid {pid})"
            out += [{"ph": "M", "name": "process_name", "pid": base + pid, "tid": 0, "args": {"name": name}},
                    {"ph": "M", "name": "process_sort_index", "pid": base + pid, "tid": 0, "args": {"sort_index": base + i}}]
        for pid, tid in sorted(streams, key=str):
            what = "NCCL" if (pid, tid) in nccl else "compute"
            out.append({"ph": "M", "name": "thread_name", "pid": base + pid, "tid": tid,
                        "args": {"name": f"stream {tid} ({what})"}})
        out += [{**e, "pid": base + e["pid"]} if isinstance(e.get("pid"), int) else dict(e) for e in events]
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def export_ranks_chrome_trace(traces: list[Trace], path: str | Path) -> Path:
    """Write :func:`ranks_chrome_trace` of ``traces`` to ``path`` (JSON) and return the path: every rank in one file."""
    p = Path(path)
    p.write_text(json.dumps(ranks_chrome_trace(traces)))
    return p
