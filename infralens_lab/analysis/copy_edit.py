"""Lab 04's "Edit and measure": the loads an edited strided copy made, read as warp-wide requests and 32-byte sectors,
and the table that sets it beside the original and the recorded counters.

**The request model** (:func:`warp_requests`). The addresses are real (what the kernel's pointer tensor held in
Triton's interpreter); which of them one warp instruction carries is a model of Triton's blocked layout for these
kernels: each thread holds ``16 / elem_bytes`` consecutive positions of the loaded tensor (row-major), the 32 lanes
of a warp take consecutive threads' positions, so one warp instruction covers ``32 * 16 / elem_bytes`` consecutive
positions. When every thread's positions are consecutive addresses starting on a 16-byte boundary the thread loads
them as one 16-byte vector and the warp makes **one** request; otherwise each position is a scalar load, and the
warp makes one request per position, lane ``l`` carrying its ``j``-th element. A request costs the distinct 32-byte
sectors its active lanes touch (Nsight Compute's ``l1tex__t_sectors`` counts sectors per request). On the lab's
copies this gives 16 sectors per request coalesced and 32 at every stride >= 2 (tests hold it to the recorded
counters); the compiler may load narrower than the addresses allow when it cannot prove the alignment, which only
ncu on a GPU shows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..parse.ncu import SECTORS
from .traffic import SECTOR_BYTES, VECTOR_BYTES, WARP_THREADS

SPR, PER_USEFUL = "sectors/req", "sector bytes per useful byte"  # the two ratios a model row and a recorded row share
MODEL = ("real addresses (Triton's interpreter), modelled grouping: 32 lanes per warp, 16 consecutive bytes per "
         "thread, one request per warp when they are one aligned vector, else one per element")


@dataclass(frozen=True)
class Requests:
    """Warp-wide requests of some loads and the 32-byte sectors they touched. ``full_*``: requests whose every lane
    was active (a partly masked last warp touches fewer sectors, so sectors per request is read off full ones)."""

    requests: int
    sectors: int
    full_requests: int
    full_sectors: int

    @property
    def sectors_per_request(self) -> float:
        return self.full_sectors / self.full_requests if self.full_requests else float("nan")

    def __add__(self, other: Requests) -> Requests:
        return Requests(*(a + b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def astuple(self) -> tuple[int, int, int, int]:
        return self.requests, self.sectors, self.full_requests, self.full_sectors


def _distinct(sectors: np.ndarray) -> np.ndarray:
    """Distinct non-negative values per row (-1 marks an inactive lane)."""
    s = np.sort(sectors, axis=1)
    new = np.ones_like(s, dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    return (new & (s >= 0)).sum(axis=1)


def warp_requests(offsets, active, elem_bytes: int = 4) -> Requests:
    """The requests and sectors of one load (``offsets``: byte offsets in the pointer tensor's row-major order;
    ``active``: the lanes the mask let through, same length), under the model in this module's docstring."""
    off, act = np.asarray(offsets, dtype=np.int64).ravel(), np.asarray(active, dtype=bool).ravel()
    if off.shape != act.shape:
        raise ValueError(f"offsets has {off.size} positions and active {act.size}; expected one flag per offset")
    if elem_bytes not in (1, 2, 4, 8, 16):
        raise ValueError(f"elem_bytes is {elem_bytes!r}; expected 1, 2, 4, 8 or 16")
    per = VECTOR_BYTES // elem_bytes
    group = WARP_THREADS * per
    pad = -off.size % group
    real = np.concatenate([np.ones(off.size, bool), np.zeros(pad, bool)]).reshape(-1, WARP_THREADS, per)
    off = np.concatenate([off, np.zeros(pad, np.int64)]).reshape(-1, WARP_THREADS, per)
    act = np.concatenate([act, np.zeros(pad, bool)]).reshape(-1, WARP_THREADS, per)
    steps = (np.diff(off, axis=2) == elem_bytes) | ~real[:, :, 1:]
    vector = (steps.all(axis=(1, 2)) & ((off[:, :, 0] % VECTOR_BYTES == 0) | ~real[:, :, 0]).all(axis=1))
    sec = np.where(act, off // SECTOR_BYTES, -1)
    v_sec, v_act = sec[vector].reshape(-1, group), act[vector].reshape(-1, group)
    s_sec = sec[~vector].transpose(0, 2, 1).reshape(-1, WARP_THREADS)  # one row per (warp, element j)
    s_act = act[~vector].transpose(0, 2, 1).reshape(-1, WARP_THREADS)
    n_v, n_s = _distinct(v_sec), _distinct(s_sec)
    used_v, used_s = v_act.any(axis=1), s_act.any(axis=1)
    full_v, full_s = v_act.all(axis=1), s_act.all(axis=1)
    return Requests(int(used_v.sum() + used_s.sum()), int(n_v.sum() + n_s.sum()),
                    int(full_v.sum() + full_s.sum()), int(n_v[full_v].sum() + n_s[full_s].sum()))


def run_requests(loads, elem_bytes: int = 4) -> Requests:
    """:func:`warp_requests` summed over the loads of one run (``Load`` objects of ``measure.copy_edit``)."""
    total = Requests(0, 0, 0, 0)
    for ld in loads:
        total = total + warp_requests(ld.offsets, ld.active, elem_bytes)
    return total


def edit_row(run, elem_bytes: int = 4) -> dict:
    """One row of the edit table from a ``measure.copy_edit.EditRun``: the check, then what was measured in its
    mode (counts in interpreter mode; time, useful rate, SM clock and ncu's counters on a GPU)."""
    row = {"kernel": run.name, "stride": run.stride, "records": run.n_out, "output": "PASS" if run.ok else "FAIL"}
    if not run.ok:
        return row
    useful = run.n_out * elem_bytes  # bytes the copy needs to read
    if run.loads:
        r = run_requests(run.loads, elem_bytes)
        row |= {"requests": r.requests, "sectors": r.sectors, SPR: round(r.sectors_per_request, 2),
                PER_USEFUL: round(r.sectors * SECTOR_BYTES / useful, 2)}
    t = run.timing
    if t.meaningful:
        row |= {"time (µs)": round(t.median_ms * 1e3, 1),
                "p10-p90 (µs)": f"{t.p10_ms * 1e3:.1f}-{t.p90_ms * 1e3:.1f}",
                "useful GB/s (read + written)": round(2 * useful / (t.median_ms * 1e-3) / 1e9, 1)}
        if run.clock is not None:
            row["SM clock (GHz)"] = round(run.clock.sm_clock_hz / 1e9, 3)
    if run.ncu:
        row["sectors/req (ncu)"] = round(run.ncu["sectors"] / run.ncu["requests"], 2)
    return row


def edit_table(runs) -> pd.DataFrame:
    """One row per run (:func:`edit_row`), the columns a mode measured."""
    return pd.DataFrame([edit_row(r) for r in runs])


def recorded_view(table: pd.DataFrame, rows: dict, stride: int) -> pd.DataFrame:
    """The coalesced and the stride-``stride`` copies of a recorded family, on the edit table's ratios: ``table`` is
    :attr:`infralens_lab.analysis.copies.CopyFamily.table` (``useful_read_mb``, ``read_x``...), ``rows`` its raw
    counters (:func:`infralens_lab.analysis.copies.counter_rows`). Sectors are ncu's, not a model's."""
    out = []
    for r in table[table["label"].isin(["coalesced", f"stride {stride}"])].itertuples():
        c = rows.get(r.label, {})
        if SECTORS[0] not in c or SECTORS[1] not in c:
            raise ValueError(f"recorded counters of {r.label!r} lack {SECTORS}; have {sorted(c)}")
        out.append({"copy": r.label, "outputs": round(r.useful_read_mb * 1e6 / r.elem_bytes),
                    SPR: round(c[SECTORS[0]] / c[SECTORS[1]], 2),
                    PER_USEFUL: round(c[SECTORS[0]] * SECTOR_BYTES / (r.useful_read_mb * 1e6), 2),
                    "DRAM read per useful byte": round(r.read_x, 2), "DRAM (TB/s)": round(r.dram_tbps, 2),
                    "SM clock (GHz)": round(r.clock_ghz, 3)})
    return pd.DataFrame(out)


def conditions(runs) -> str:
    """What the numbers of ``runs`` were measured under, for a caption: the GPU, clock source and spread, or that the
    interpreter counts and does not time; and the request model when counts are shown."""
    timed = [r for r in runs if r.timing.meaningful]
    if timed:
        t = timed[0].timing
        return (f"{timed[0].gpu} · CUDA events, median and p10-p90 of {t.n} runs after warm-up · SM clock: NVML, "
                "sampled during those runs")
    return f"interpreter: counts, no timing · {MODEL}"


def notes(runs) -> list[str]:
    """One line per run that failed its check (what differed) or whose ncu run did not happen (why)."""
    out = [f"FAIL {r.name}: {r.problem}" for r in runs if not r.ok]
    return out + [f"{r.name}: {r.ncu_note}" for r in runs if r.ok and r.ncu_note]


def reading(table: pd.DataFrame) -> str:
    """One line comparing the last row (the edit) with the first (the original), on what both rows measured."""
    if len(table) < 2:
        raise ValueError(f"the table has {len(table)} rows; expected the original and at least one edit")
    first, last = table.iloc[0], table.iloc[-1]
    if last["output"] != "PASS":
        return f"{last['kernel']}: its output is wrong, so nothing it measured is worth reading; fix it first."
    parts = []
    for col, what in ((SPR, "sectors per request"), ("sectors/req (ncu)", "sectors per request (ncu)"),
                      (PER_USEFUL, "sector bytes per useful byte"), ("requests", "requests"),
                      ("time (µs)", "median time (µs)")):
        if col in table and pd.notna(first.get(col)) and pd.notna(last.get(col)):
            parts.append(f"{what} {first[col]:g} -> {last[col]:g}")
    return f"{first['kernel']} -> {last['kernel']}: " + "; ".join(parts) if parts else "nothing measured in both rows"
