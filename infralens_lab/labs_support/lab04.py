"""Glue for lab 04 (warp stalls): live correctness runs, the recorded (or, on a GPU with ncu, live) counters with
their captions, which columns each table shows, and the edit-and-measure run. Tables and sentences come from
:mod:`infralens_lab.analysis` (copies, attention, sass, traffic, copy_edit); the notebook does the lesson's arithmetic
in the open. Loaders return a result or ``None`` after a note naming what is missing."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from .. import evidence, present
from ..analysis import attention as attn
from ..analysis import copies as copy_info
from ..analysis import copy_edit as edit_info
from ..device import is_gpu
from ..kernels import check
from ..measure import copy_edit
from ..measure import ncu as NR
from ..parse import ncu
from ..parse.runs import copy_run
from ..units import MiB
from . import check_on, counters_fallback, store  # noqa: F401  (re-exported: notebooks call lab04.check_on and lab04.store)

COPY_FILES = ("ncu_copies.csv", "ncu_copies_stalls.csv")
ATTN_FILE, SOURCE_FILE = "ncu_attention.csv", "ncu_copies_source.csv"
LIVE_COPY_N_IN = 40_003  # odd: the last program of every launch runs with a partial mask
LIVE_ATTN_SHAPES = ((1, 2, 48, 32, False), (1, 2, 37, 16, True))  # (B, H, N, D, causal): N not a multiple of 32
LIVE_NCU_N, LIVE_NCU_STRIDES = 256 * MiB // 4, (2, 8, 32)  # live ncu: useful fp32 per copy (256 MiB, >4x L2), strides
# which columns each table shows, in reading order (units in the names: present.show puts them in the headers)
COPY_COLUMNS = ["label", "pred_sectors_per_req", "sectors_per_req", "pred_read_x", "read_x", "dram_tbps", "clock_ghz",
                "pred_useful_fraction", "useful_fraction"]
KERNEL_COLUMNS = ["kernel", "time_us", "pred_dram_mb", "dram_mb", "dram_tbps", "l2_hit_pct", "sm_pct", "memory_pct",
                  "clock_ghz"]
VARIANT_COLUMNS = ["variant", "kernels", "time_us", "pred_dram_mb", "dram_mb", "sm_pct", "memory_pct",
                   "achieved_occupancy_pct", "clock_ghz"]


def file_caption(st, *files: str, extra: str = "") -> str:
    """The recorded set's provenance line plus the files a table came from (and formulas, if any)."""
    return st.provenance.caption() + " · files " + ", ".join(files) + (f" · {extra}" if extra else "")


def _missing(what: str, files) -> None:
    print(f"{what}: the recorded set has no {', '.join(files)} yet, so this part shows no measurement. "
          f"It is written on a GPU by `python -m infralens_lab record --out data/recorded/<gpu-slug>`.")


def _gone(st, files) -> list[str]:
    return list(files) if st is None else [f for f in files if f not in set(st.files())]


def copies_correctness(n_in: int = LIVE_COPY_N_IN, seed: int = 0):
    """Every copy run now on fresh random input, outputs poisoned with NaN, against torch bit for bit
    (:func:`infralens_lab.kernels.check.copy_checks`). Returns ``(table, Evidence)``."""
    rows = check.copy_checks(n_in, seed)
    return pd.DataFrame(rows), evidence.live("copies_correctness", rows, "infralens_lab.labs_support.lab04.copies_correctness()")


def attention_correctness(shapes=LIVE_ATTN_SHAPES, seed: int = 0):
    """Every attention variant run now on small fp16 inputs (odd N, causal and not), outputs poisoned with NaN,
    against the fp32-math reference within :data:`infralens_lab.kernels.check.TOLERANCES`. Returns ``(table, Evidence)``."""
    rows = check.attention_checks(shapes, seed)
    return pd.DataFrame(rows), evidence.live("attention_correctness", rows, "labs_support.lab04.attention_correctness()")


def print_checks(table, flag: str, what: str) -> None:
    """One PASS/FAIL line per row of a correctness table (``flag`` is the boolean column)."""
    print("\n".join(f"{'PASS' if r[flag] else 'FAIL'}  {what}: " + ", ".join(f"{k}={v}" for k, v in r.items() if k != flag)
                    for r in table.to_dict(orient="records")))


def recorded_copy_family(st) -> copy_info.CopyFamily | None:
    """The copy family from the recorded ncu CSVs and the ``bench`` record (None, with a note, if missing)."""
    if _gone(st, COPY_FILES[:1]):
        return _missing("Copy family", COPY_FILES[:1])
    stalls_text = st.text(COPY_FILES[1]) if COPY_FILES[1] in st.files() else None
    if stalls_text is None:
        _missing("Copy stalls", COPY_FILES[1:])
    bench_rows = st.load("bench").values.get("copies") if "bench.json" in st.files() else None
    files = list(COPY_FILES if stalls_text else COPY_FILES[:1]) + (["bench.json"] if bench_rows else [])
    fam = copy_info.family(st.text(COPY_FILES[0]), stalls_text, bench_rows)
    return replace(fam, caption=file_caption(st, *files, extra="predictions: analysis.traffic.sector_model"),
                   stall_caption=file_caption(st, COPY_FILES[1]) if stalls_text else "")


def live_copy_family(st=None, n: int = LIVE_NCU_N, strides=LIVE_NCU_STRIDES) -> copy_info.CopyFamily | None:
    """On a GPU with ncu: profile the coalesced copy and a few strides now (counters and stall samples, one ncu
    run each, as the recorder does). Elsewhere, or if ncu fails, None after one line (naming the GPU of the
    recorded set ``st``, whose counters the lab shows instead)."""
    if not is_gpu():
        print("Live counters: none in interpreter mode (no GPU, so no ncu); the recorded counters follow.")
        return None
    runs = [copy_run(n, "fp32")] + [copy_run(n, "fp32", s) for s in strides]
    try:
        texts = NR.profile_runs(runs, {"counters": ncu.TIME + ncu.DRAM + ncu.SECTORS + ncu.SOL + ncu.OCCUPANCY + ncu.CLOCK,
                                       "stalls": ncu.TIME + ncu.STALLS})
    except ncu.NcuError as exc:  # one line, then the recorded counters
        print(counters_fallback(exc, st))
        return None
    ev = evidence.live("ncu_copies_live", {"counters_csv": texts["counters"], "stalls_csv": texts["stalls"]}, "lab04.live_copy_family() (ncu)")
    fam = copy_info.family(texts["counters"], texts["stalls"])
    return replace(fam, caption=ev.caption() + " · predictions: analysis.traffic.sector_model", stall_caption=ev.caption())


def edit_and_measure(kernel, stride: int = 8, fam: copy_info.CopyFamily | None = None, rows=None) -> pd.DataFrame:
    """The lab's ``copy_strided`` and ``kernel`` (an edit of it) run now (``measure.copy_edit``): one table, what failed,
    a one-line reading, then the recorded copies ``fam`` with their raw counters ``rows`` at that stride."""
    runs = copy_edit.beside_original(kernel, stride, profile=True)
    table = edit_info.edit_table(runs)
    ev = evidence.live("copy_edit", table.to_dict(orient="records"), f"lab04.edit_and_measure(kernel, stride={stride})")
    present.show(table, caption=f"{ev.caption()} · {edit_info.conditions(runs)}", title=f"Stride {stride}, measured now")
    print("\n".join([*edit_info.notes(runs), edit_info.reading(table)]))
    if fam is not None and rows is not None:  # the recorded counters of the original (and the coalesced copy)
        present.show(edit_info.recorded_view(fam.table, rows, stride), caption=fam.caption, title="Recorded: the lab's copies")
    return table


def recorded_source(st):
    """Per-SASS-instruction rows of the recorded copies (parse.ncu.parse_source_csv), or None after a note."""
    gone = _gone(st, [SOURCE_FILE])
    return _missing("Per-instruction stalls", gone) if gone else ncu.parse_source_csv(st.text(SOURCE_FILE))


def recorded_attention(st) -> tuple[attn.AttentionProfile, str] | tuple[None, None]:
    """``(profile, caption)`` of naive vs tiled attention from ``ncu_attention.csv``; ``(None, None)`` with a note."""
    if _gone(st, [ATTN_FILE]):
        return _missing("Attention counters", [ATTN_FILE]) or (None, None)
    return attn.profile(st.text(ATTN_FILE)), file_caption(
        st, ATTN_FILE, extra="predictions: analysis.traffic.attention_naive_traffic / attention_tiled_traffic "
                             "(BLOCK_M read off the launch grid)")


def copy_ceiling(st) -> float | None:
    """The recorded copy bandwidth ceiling (bytes/s, CUDA events; the ``ceilings`` record), or None."""
    has = st is not None and "ceilings" in st.names()
    return st.load("ceilings").values.get("copy", {}).get("bandwidth_bytes_per_s") if has else None


# shorter headers with spaces (present.show wraps headers between words; units stay in the header)
DISPLAY = {"clock_ghz": "SM clock (GHz)", "pred_sectors_per_req": "sectors/req model", "sectors_per_req": "sectors/req",
           "pred_read_x": "read x model", "read_x": "read x", "pred_useful_fraction": "useful fraction model",
           "useful_fraction": "useful fraction", "blocks_per_sm": "blocks per SM", "limited_by": "limited by",
           "eligible_warps": "eligible warps", "inst_executed": "inst executed", "bytes_apart": "bytes apart",
           "pred_L2_sector_x": "L1-L2 model x (32 B)", "pred_HBM_64B_x": "HBM model x (64 B)", "measured_dram_x": "DRAM x measured"}


def columns(table: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """The columns of ``names`` that ``table`` has, in that order, headers as shown (a view for one table of the lab)."""
    return table[[c for c in names if c in table.columns]].rename(columns=DISPLAY)
