"""Lab 04's Hopper section: the Gluon kernel's ping-pong schedule as data, its recorded per-pipe counters beside
``attn_fwd_fast``'s, and where its timing lives.

* :func:`timeline` turns :func:`infralens_lab.kernels.attention_gluon.schedule` (the partition layout the kernel is
  launched with) into segments per partition: which consumer warpgroup issues its two GEMMs (S = Q K^T, O += P V)
  in which turn, when it runs its softmax, and when the producer's TMA copies fill the K/V ring. A schematic in
  turns (one turn = one warpgroup's two GEMMs), drawn from the layout, not a measured trace.
* :func:`recorded_set` finds the recording ``ncu_gluon.csv`` (written on a Hopper GPU by
  ``python -m infralens_lab record --out data/recorded/<gpu-slug>-gluon --only device,ncu_gluon``);
  :func:`pipe_table` reads it, one row per kernel.
* :func:`bench_rows` returns the recorded bench rows of the ``gluon`` variant, if any recording has them.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from .. import evidence
from ..parse import ncu

GLUON_FILE = "ncu_gluon.csv"
KERNELS = ("attn_fwd_gluon", "attn_fwd_fast")
RECORD_COMMAND = "python -m infralens_lab record --out data/recorded/<gpu-slug>-gluon --only device,ncu_gluon"
RUN_NOTES = "docs/kernels_notes.md, run 12"
# column -> (metric, scale): what pipe_table shows per kernel, units in the column names
PIPE_COLUMNS = {
    "time_us": ("gpu__time_duration.sum", 1e-3),
    "grid": (ncu.GRID, 1),
    "threads_per_block": (ncu.BLOCK, 1),
    "registers_per_thread": ("launch__registers_per_thread", 1),
    "tensor_inst": (ncu.TENSOR_INST, 1),
    "tensor_active_pct": (ncu.PIPES[3], 1),
    "tensor_ops_pct": (ncu.TENSOR_PCT[0], 1),
    "fma_inst": (ncu.PIPES[0], 1),
    "alu_inst": (ncu.PIPES[1], 1),
    "xu_inst": (ncu.PIPES[2], 1),
    "issue_active_pct": (ncu.SCHEDULER[0], 1),
    "eligible_warps": (ncu.SCHEDULER[1], 1),
    "clock_ghz": (ncu.CLOCK[0], 1e-9),
}


def timeline(sched: list[dict], tiles: int = 3) -> pd.DataFrame:
    """Segments of ``tiles`` K/V tiles for the partitions of ``sched`` (:func:`attention_gluon.schedule`'s list):
    columns ``partition``, ``unit`` (``tensor cores``, ``CUDA cores``, ``TMA``), ``what``, ``start``, ``end`` (in
    turns). ``what``: ``S{j}, PV{j-1}`` (S_j = Q K_j^T and O += P_{j-1} V_{j-1}), ``softmax {j}`` (P_j, the running
    max and sum, O's rescale), ``K{j}`` / ``V{j}`` (a TMA copy into the ring). A consumer with ``turn_order`` t issues tile j's GEMMs in turn 2j + t and runs its softmax in the next
    turn (the other warpgroup's GEMM turn); without turns every consumer issues in turn 2j. The producer issues
    K0, V0, K1, V1, ... in order, half a turn each, each as soon as its ring stage is free (K_j's once every
    consumer's GEMMs of tile j - stages are done, V_j's once those of tile j - stages + 1 are)."""
    if not isinstance(tiles, int) or isinstance(tiles, bool) or tiles < 1:
        raise ValueError(f"timeline: tiles is {tiles!r}, expected an int >= 1")
    if not isinstance(sched, list) or not sched or not all(isinstance(p, dict) and "role" in p for p in sched):
        raise ValueError(f"timeline: sched is {sched!r:.80}, expected attention_gluon.schedule()'s list of dicts")
    rows = []
    consumers = [p for p in sched if p["role"] == "consumer"]
    last = max((p.get("turn_order") or 0) for p in consumers) + 1 if consumers else 1  # turns until all issued
    for p in consumers:
        t = p.get("turn_order") or 0
        for j in range(tiles):
            g = 2 * j + t
            rows.append({"partition": p["name"], "unit": "tensor cores",
                         "what": f"S{j}, PV{j - 1}" if j else "S0", "start": g, "end": g + 1})
            rows.append({"partition": p["name"], "unit": "CUDA cores", "what": f"softmax {j}",
                         "start": g + 1, "end": g + 2})
    for p in (p for p in sched if p["role"] == "producer"):
        cursor, s = -1.0, p["stages"]  # it issues K0, V0, K1, V1, ... in order, half a turn each
        for j in range(tiles):
            # the stage of tile j last held K_{j-s} (read by tile j-s's GEMMs) and V_{j-s} (read by tile j-s+1's)
            for name, free in ((f"K{j}", 2 * (j - s) + last), (f"V{j}", 2 * (j - s + 1) + last)):
                start = max(cursor, free if j >= s else cursor)
                rows.append({"partition": p["name"], "unit": "TMA", "what": name, "start": start, "end": start + 0.5})
                cursor = start + 0.5
    return pd.DataFrame(rows, columns=["partition", "unit", "what", "start", "end"])


def tensor_busy_share(segments: pd.DataFrame) -> float:
    """Share of the turns from the first GEMM to the last GEMM's end in which some warpgroup holds the tensor cores
    (in the schematic: 1.0 when two warpgroups take turns; with one warpgroup, GEMMs and softmax alternate and
    the share falls towards one half as tiles grow)."""
    g = segments[segments["unit"] == "tensor cores"]
    if g.empty:
        raise ValueError("tensor_busy_share: no tensor-core segments; expected timeline()'s output")
    busy = {t for s, e in zip(g["start"], g["end"], strict=True) for t in range(int(s), int(e))}
    return len(busy) / (int(g["end"].max()) - int(g["start"].min()))


def recorded_set(prefer: evidence.RecordedStore | None = None, root=None) -> evidence.RecordedStore | None:
    """The recorded set holding :data:`GLUON_FILE`: ``prefer`` (the lab's reference) when it has it, else a set of
    ``prefer``'s GPU, else any set that has it (its caption names its GPU); None when none was recorded."""
    sets = [s for s in evidence.load_all_sets(root) if GLUON_FILE in s.files()]
    if prefer is not None:
        sets.sort(key=lambda s: (s.folder.resolve() != prefer.folder.resolve(), s.gpu != prefer.gpu))
    return sets[0] if sets else None


def pipe_table(text: str) -> pd.DataFrame:
    """One row per kernel of :data:`KERNELS` (first launch of each) from an ``ncu_gluon.csv`` text: the columns of
    :data:`PIPE_COLUMNS` (NaN where ncu did not report a metric), then ``top_stall`` and ``top_stall_share`` (the
    largest sampled reason other than ``selected``, as a share of all samples), and ``config`` (the run's label)."""
    df = ncu.parse_raw_csv(text)
    first = df[df["launch"] == df.groupby("kernel")["launch"].transform("min")]
    w = ncu.wide(first).set_index("kernel")
    missing = [k for k in KERNELS if k not in w.index]
    if missing:
        raise ValueError(f"pipe_table: the CSV has kernels {sorted(w.index)}, expected {list(KERNELS)} "
                         f"(missing {missing}); record it with `{RECORD_COMMAND}`")
    rows = []
    for k in KERNELS:
        r = {"kernel": k}
        for col, (metric, scale) in PIPE_COLUMNS.items():
            r[col] = float(w.loc[k, metric]) * scale if metric in w.columns else math.nan
        r["top_stall"], r["top_stall_share"] = _top_stall(first[first["kernel"] == k])
        r["config"] = w.loc[k, "config"]
        rows.append(r)
    return pd.DataFrame(rows)


def _top_stall(df) -> tuple[str | None, float]:
    if not ncu.has_stalls(df):
        return None, math.nan
    b = ncu.stall_breakdown(df)
    b = b[b["reason"] != "selected"].sort_values("samples", ascending=False)
    total = ncu.stall_breakdown(df)["samples"].sum()
    return (b.iloc[0]["reason"], float(b.iloc[0]["samples"] / total)) if len(b) and total else (None, math.nan)


def bench_rows(by_gpu: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict]]:
    """``{gpu: [bench attention rows of the gluon variant]}`` for the GPUs whose recorded bench has any (the full
    case set the recorder records does not time ``gluon``; the issue 31 set does, see :data:`RUN_NOTES`)."""
    out = {}
    for gpu, values in by_gpu.items():
        rows = [r for r in (values.get("attention") or []) if r.get("variant") == "gluon"]
        if rows:
            out[gpu] = rows
    return out
