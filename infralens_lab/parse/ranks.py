"""Per-rank DDP evidence, read: the package's own DDP run (one dict per rank, live or recorded) and a folder of
per-rank chrome traces written under torchrun (:mod:`infralens_lab.profile_ddp`, or any job that names its
files ``rank<N>.json``).

Reading only: nothing here runs a rank. :class:`RankRun` wraps the dicts
:func:`infralens_lab.measure.distributed.job_ddp` returns (``rank``, ``world``, ``backend``, ``configs`` with
a trimmed ``trace`` each, ``single``, ``no_sync``, ``bench``); :func:`load_rank_folder` returns the traces of a
folder in rank order with the folder's ``provenance.json``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .trace import Trace, load_trace

RANK_FILE = re.compile(r"^rank(\d+)\.json$")


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


def load_rank_folder(path: str | Path) -> tuple[list[Trace], dict]:
    """The traces of a folder of per-rank chrome traces (``rank0.json``, ``rank1.json``, ...), in rank order,
    and the folder's ``provenance.json`` (empty dict when absent). Raises naming what was found when the
    folder has no rank files or a rank is missing."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"no folder at {p}; expected a folder of per-rank traces rank0.json, rank1.json, ...")
    found = {int(m.group(1)): f for f in p.iterdir() if (m := RANK_FILE.match(f.name))}
    if not found:
        raise ValueError(f"{p} holds no rank<N>.json traces (found {sorted(f.name for f in p.iterdir())[:8]}); "
                         f"expected the files `torchrun ... -m infralens_lab.profile_ddp --out {p}` writes")
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        raise ValueError(f"{p}: ranks {missing} have no trace (found ranks {sorted(found)}); expected rank0.json "
                         f"to rank{max(found)}.json")
    prov = p / "provenance.json"
    meta = json.loads(prov.read_text()) if prov.is_file() else {}
    return [load_trace(found[r]) for r in range(len(found))], meta
