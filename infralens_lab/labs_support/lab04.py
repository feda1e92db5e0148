"""Glue for lab 04 (warp stalls): live correctness runs, sector-model predictions, and the copy-family and
attention tables from recorded (or, on a GPU with ncu, live) counters. Loaders return a result object or
``None`` after a note naming what is missing. Logic lives in :mod:`infralens_lab.analysis.copies`,
:mod:`~infralens_lab.analysis.traffic`, :mod:`~infralens_lab.analysis.stalls`; tables in
:mod:`infralens_lab.present.tables` and :mod:`~infralens_lab.present.attention`; this module keeps sentences.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from .. import evidence
from . import check_on, store  # noqa: F401  (re-exported: notebooks call lab04.check_on and lab04.store)
from ..analysis import copies as copy_info
from ..analysis import joins
from ..analysis import roofline as rl
from ..analysis import traffic
from ..device import is_gpu
from ..kernels import check
from ..parse import ncu as N
from ..measure import ncu as NR
from ..parse.runs import copy_run
from ..present import attention as attn_tables
from ..present import tables

COPY_FILES = ("ncu_copies.csv", "ncu_copies_stalls.csv")
ATTN_FILE, SOURCE_FILE = "ncu_attention.csv", "ncu_copies_source.csv"
LIVE_COPY_N_IN = 40_003  # odd: the last program of every launch runs with a partial mask
LIVE_ATTN_SHAPES = ((1, 2, 48, 32, False), (1, 2, 37, 16, True))  # (B, H, N, D, causal): N not a multiple of 32
LIVE_NCU_N, LIVE_NCU_STRIDES = 64 * 2**20, (2, 8, 32)  # live ncu: useful fp32 per copy (256 MiB, >4x L2), strides


def file_caption(st, *files: str, extra: str = "") -> str:
    """The recorded set's provenance line plus the files a table came from (and formulas, if any)."""
    cap = st.provenance.caption() + " · files " + ", ".join(files)
    return cap + (f" · {extra}" if extra else "")


def _have(st, files) -> list[str]:
    return list(files) if st is None else [f for f in files if f not in set(st.files())]


def _missing(what: str, files) -> None:
    print(f"{what}: the recorded set has no {', '.join(files)} yet, so this part shows no measurement. "
          f"It is written on a GPU by `python -m infralens_lab record --out data/recorded/<gpu-slug>`.")


def copies_correctness(n_in: int = LIVE_COPY_N_IN, seed: int = 0):
    """Every copy run now on fresh random input, outputs poisoned with NaN, against torch bit for bit
    (:func:`infralens_lab.kernels.check.copy_checks`). Returns ``(table, Evidence)``."""
    rows = check.copy_checks(n_in, seed)
    ev = evidence.live("copies_correctness", rows, "infralens_lab.labs_support.lab04.copies_correctness()")
    return pd.DataFrame(rows), ev


def attention_correctness(shapes=LIVE_ATTN_SHAPES, seed: int = 0):
    """Every attention variant run now on small fp16 inputs (odd N, causal and not), outputs poisoned with NaN,
    against the fp32-math reference within :data:`infralens_lab.kernels.check.TOLERANCES` (atol=3e-3,
    rtol=2e-3: two fp16 roundings). Returns ``(table, Evidence)``."""
    rows = check.attention_checks(shapes, seed)
    ev = evidence.live("attention_correctness", rows, "infralens_lab.labs_support.lab04.attention_correctness()")
    return pd.DataFrame(rows), ev


def print_checks(table, flag: str, what: str) -> None:
    """One PASS/FAIL line per row of a correctness table (``flag`` is the boolean column)."""
    for r in table.to_dict(orient="records"):
        rest = ", ".join(f"{k}={v}" for k, v in r.items() if k != flag)
        print(f"{'PASS' if r[flag] else 'FAIL'}  {what}: {rest}")


def sector_predictions(elem_bytes: int = 4, strides=(1, 2, 4, 8, 16, 32)):
    """What the 32-byte sector model predicts per stride (:func:`infralens_lab.analysis.traffic.sector_table`;
    its ``pred_dram_*`` columns hold the 64-byte DRAM level, left out here until the lab teaches both)."""
    t = traffic.sector_table(elem_bytes, strides)
    return t[["stride", "bytes_apart", "pred_sectors_per_req", "pred_read_x", "pred_useful_fraction"]]


PREDICTION_CAPTION = ("Formula: infralens_lab.analysis.traffic.sector_model(stride, elem_bytes=4): read_x = "
                      "min(stride, 32 / elem_bytes); 16 sectors per request when coalesced (32 threads × 16-byte "
                      "vectors), 32 once threads sit in different sectors; useful fraction = 2 / (read_x + 1)")


@dataclass
class CopyFamily:
    """The copy family from one source: the joined table, the long stall table, captions."""

    table: pd.DataFrame
    breakdown: pd.DataFrame | None
    caption: str
    stall_caption: str | None
    source: str
    commands: dict = field(default_factory=dict)

    def stalls_for(self, label: str) -> pd.DataFrame:
        """Stall rows (kernel, reason, samples, share) of one row label, e.g. ``'stride 8'``, largest first."""
        if self.breakdown is None:
            raise ValueError("no stall samples in this copy family (ncu_copies_stalls.csv is missing)")
        cfg = self.table.loc[self.table["label"] == label, "config"]
        if cfg.empty:
            raise ValueError(f"no copy config labelled {label!r}; have {list(self.table['label'])}")
        return copy_info.reason_shares(self.breakdown, cfg.iloc[0])

    def order(self) -> list[str]:  # configs in table order
        return list(self.table["config"])

    def labels(self) -> dict:  # config -> row label
        return dict(zip(self.table["config"], self.table["label"]))


def _family(counters_text: str, stalls_text: str | None, bench_rows, caption, stall_caption, source):
    df = N.parse_raw_csv(counters_text)
    sdf = N.parse_raw_csv(stalls_text) if stalls_text else None
    table = tables.copy_family(df, sdf, bench_rows)
    bd = N.stall_breakdown(sdf) if sdf is not None else None
    cmds = {lab: N.command_of(counters_text, cfg) for cfg, lab in zip(table["config"], table["label"])}
    return CopyFamily(table, bd, caption, stall_caption, source, {k: v for k, v in cmds.items() if v})


def recorded_copy_family(st) -> CopyFamily | None:
    """The copy family from the recorded ncu CSVs and the ``bench`` record (None, with a note, if missing)."""
    if _have(st, COPY_FILES[:1]):
        return _missing("Copy family", COPY_FILES[:1])
    stalls_text = st.text(COPY_FILES[1]) if COPY_FILES[1] in st.files() else None
    if stalls_text is None:
        _missing("Copy stalls", COPY_FILES[1:])
    bench_rows = st.load("bench").values.get("copies") if "bench.json" in st.files() else None
    files = list(COPY_FILES if stalls_text else COPY_FILES[:1]) + (["bench.json"] if bench_rows else [])
    cap = file_caption(st, *files, extra="predictions: analysis.traffic.sector_model")
    scap = file_caption(st, COPY_FILES[1]) if stalls_text else None
    return _family(st.text(COPY_FILES[0]), stalls_text, bench_rows, cap, scap, "recorded")


def recorded_source(st):
    """Per-SASS-instruction rows of the recorded copies (parse.ncu.parse_source_csv), or None after a note."""
    gone = _have(st, [SOURCE_FILE])
    return _missing("Per-instruction stalls", gone) if gone else N.parse_source_csv(st.text(SOURCE_FILE))


def shift_table(fam: CopyFamily) -> pd.DataFrame | None:
    """Each reason's share at the first copy (coalesced) and the last (largest stride), and the change
    (:func:`infralens_lab.analysis.copies.share_shift`); None without stall samples."""
    labels = list(fam.table["label"])
    return None if fam.breakdown is None else copy_info.share_shift(fam.stalls_for(labels[0]), fam.stalls_for(labels[-1]))


def stall_shift(fam: CopyFamily, top: int = 3) -> list[str]:
    """How the sampled stall mix moves from the first copy to the last: whether one reason tops every
    copy, and the reasons whose share grew most (by more than one point). [] without stall samples."""
    sh = shift_table(fam)
    if sh is None:
        return []
    labels, tops = list(fam.table["label"]), list(fam.table["dominant_stall"])
    first, last, d = labels[0], labels[-1], sh.set_index("reason")
    if len(set(tops)) == 1:
        lines = [f"{tops[0]} is the largest reason in every copy: {d.loc[tops[0], 'first']:.0%} of samples at "
                 f"{first}, {d.loc[tops[0], 'last']:.0%} at {last}"]
    else:
        lines = ["the largest reason changes along the family: " + ", ".join(f"{a} {r}" for a, r in zip(labels, tops))]
    grew = sh[sh["change"] > 0.01].head(top)
    if len(grew):
        lines.append(f"grew most from {first} to {last}: "
                     + ", ".join(f"{r.reason} ({r.first:.0%} to {r.last:.0%})" for r in grew.itertuples()))
    return lines


def live_copy_family(n: int = LIVE_NCU_N, strides=LIVE_NCU_STRIDES) -> CopyFamily | None:
    """On a GPU with ncu: profile the coalesced copy and a few strides now (counters and stall samples,
    one ncu run each, as the recorder does). Elsewhere, or if ncu fails, None after a note."""
    if not is_gpu():
        print("Live counters: none in interpreter mode (no GPU, so no ncu); the recorded counters follow.")
        return None
    runs = [copy_run(n, "fp32")] + [copy_run(n, "fp32", s) for s in strides]
    try:
        texts = NR.profile_runs(runs, {"counters": N.TIME + N.DRAM + N.SECTORS + N.SOL + N.OCCUPANCY,
                                      "stalls": N.TIME + N.STALLS})
    except N.NcuError as exc:
        print(f"Live counters: ncu could not run here: {exc.message}\nfix: {exc.fix}\nThe recorded counters follow.")
        return None
    counters, stalls_text = texts["counters"], texts["stalls"]
    ev = evidence.live("ncu_copies_live", {"counters_csv": counters, "stalls_csv": stalls_text},
                       "infralens_lab.labs_support.lab04.live_copy_family() (ncu, see commands)")
    cap = ev.caption() + " · predictions: analysis.traffic.sector_model"
    return _family(counters, stalls_text, None, cap, ev.caption(), "live")


COPY_COLUMNS = ["label", "pred_sectors_per_req", "sectors_per_req", "pred_read_x", "read_x", "dram_read_mb",
                "useful_read_mb", "time_us", "dram_tbps", "long_scoreboard_pct", "dominant_stall",
                "achieved_occupancy_pct", "useful_tbps", "pred_useful_fraction", "useful_fraction"]


def copy_view(fam: CopyFamily) -> pd.DataFrame:
    """The columns of the copy table a reader needs, in reading order (those present)."""
    return fam.table[[c for c in COPY_COLUMNS if c in fam.table.columns]]


def model_gaps(fam: CopyFamily) -> list[str]:
    """Sentences on where measurement and the sector model agree or part
    (:func:`infralens_lab.analysis.copies.model_agreement`)."""
    t, g = fam.table.set_index("label"), copy_info.model_agreement(fam.table)
    out = ["sectors per request: every row matches the model" if not g["sectors_off"] else
           "sectors per request differ from the model for " + ", ".join(g["sectors_off"]),
           f"DRAM read per useful byte: within 15% of the model at {', '.join(g['near']) or 'no stride'}"]
    if g["doubled"]:
        xs = ", ".join(f"{t.loc[x, 'read_x']:.1f}x" for x in g["doubled"])
        out.append(f"DRAM read per useful byte: about twice the model at {', '.join(g['doubled'])} ({xs} against its cap of "
                   f"{t.loc[g['doubled'][0], 'pred_read_x']:.0f}x): consistent with DRAM being read in 64-byte units "
                   f"once every useful element sits in a pair of sectors of its own, which a 32-byte model does not count")
    for x in g["other"]:
        out.append(f"DRAM read per useful byte at {x}: {t.loc[x, 'read_x']:.2f}x against the model's "
                   f"{t.loc[x, 'pred_read_x']:.0f}x")
    if g["with_fraction"]:
        out.append(f"useful bandwidth: below the model's fraction at {len(g['below_fraction'])} of "
                   f"{g['with_fraction']} strides (the model assumes the strided copy streams DRAM at the coalesced rate)")
    return out


@dataclass
class Attention:
    kernels: pd.DataFrame
    variants: pd.DataFrame
    caption: str
    shape: tuple
    bench: list | None
    breakdown: pd.DataFrame  # stall samples per launch (parse.ncu.stall_breakdown); may be empty


def recorded_attention(st) -> Attention | None:
    """Naive vs tiled attention from ``ncu_attention.csv`` (+ ``bench`` if there); None with a note if missing."""
    if _have(st, [ATTN_FILE]):
        return _missing("Attention counters", [ATTN_FILE])
    df = N.parse_raw_csv(st.text(ATTN_FILE))
    k = tables.attention_kernels(df)
    v = tables.attention_variants(k, df)
    shape = tables.config_fields(k["config"].iloc[0]).get("shape")
    bench = st.load("bench").values.get("attention") if "bench.json" in st.files() else None
    files = [ATTN_FILE] + (["bench.json"] if bench else [])
    cap = file_caption(st, *files, extra="predictions: analysis.traffic.attention_naive_traffic / "
                                         "attention_tiled_traffic (BLOCK_M read off the launch grid)")
    return Attention(k, v, cap, shape, bench, N.stall_breakdown(df))


KERNEL_COLUMNS = ["variant", "kernel", "time_us", "pred_dram_mb", "dram_mb", "dram_tbps", "l2_hit_pct", "sm_pct",
                  "memory_pct", "achieved_occupancy_pct", "dominant_stall", "dominant_stall_pct", "long_scoreboard_pct"]


def kernel_view(a: Attention) -> pd.DataFrame:
    """Per-kernel columns in reading order; ``dram_tbps`` = DRAM bytes / ncu time (MB/µs = TB/s)."""
    k = a.kernels.assign(dram_tbps=a.kernels["dram_mb"] / a.kernels["time_us"])
    return k[[c for c in KERNEL_COLUMNS if c in k.columns]]


def before_after(a: Attention, before: str = "naive", after: str = "tiled") -> pd.DataFrame:
    """The naive → tiled table (:func:`infralens_lab.present.attention.attention_before_after`)."""
    return attn_tables.attention_before_after(a.variants, a.shape, a.bench, before, after)


def copy_ceiling(st) -> float | None:
    """The recorded copy bandwidth ceiling (bytes/s, CUDA events; the ``ceilings`` record), or None."""
    if st is None or "ceilings" not in st.names():
        return None
    return st.load("ceilings").values.get("copy", {}).get("bandwidth_bytes_per_s")


def sol_evidence(a: Attention) -> pd.DataFrame:
    """The per-variant speed-of-light pair with ``busiest_pct`` = the larger of SM % and memory % (question q10)."""
    return a.variants[["variant", "sm_pct", "memory_pct"]].assign(busiest_pct=a.variants[["sm_pct", "memory_pct"]].max(axis=1))


def sol_reading(a: Attention, ceiling_bps: float | None = None, verdicts: dict[str, str] | None = None) -> list[str]:
    """One line per attention variant: its speed-of-light pair, the series' verdict for each of its kernels
    (``verdicts``: kernel -> text, :func:`infralens_lab.analysis.counters.store_kernel_table`'s ``bound_text``;
    without it, the rule on the pair alone, :func:`infralens_lab.analysis.roofline.sol_verdict`), and the DRAM
    rate (bytes / time) against the measured copy ceiling ``ceiling_bps`` (bytes/s)."""
    out = []
    for r in a.variants.to_dict(orient="records"):
        kernels = list(a.kernels.loc[a.kernels["variant"] == r["variant"], "kernel"])
        tbps = r["dram_mb"] / r["time_us"]  # MB/µs = TB/s
        dram = f"DRAM {tbps:.2f} TB/s" + (f" = {tbps * 1e12 / ceiling_bps:.0%} of the measured copy ceiling "
                                          f"({ceiling_bps / 1e12:.2f} TB/s)" if ceiling_bps else "")
        if verdicts and all(k in verdicts for k in kernels):
            said = "; ".join(f"{k} {verdicts[k]}" for k in kernels)
        else:
            said = rl.sol_verdict(r["sm_pct"], r["memory_pct"])
        out.append(f"{r['variant']}: SM {r['sm_pct']:.0f}%, memory {r['memory_pct']:.0f}% (speed of light); "
                   f"{said}; {dram}")
    return out


def model_notes(a: Attention) -> list[str]:
    """Where measured DRAM bytes part from the traffic model, per kernel (:func:`~infralens_lab.present.attention.traffic_notes`)."""
    return attn_tables.traffic_notes(a.kernels)


def occupancy_table(fam: CopyFamily | None, att: Attention | None) -> pd.DataFrame:
    """Achieved occupancy beside what each kernel achieved (:func:`infralens_lab.analysis.joins.occupancy_table`)."""
    return joins.occupancy_table(fam.table if fam is not None else None, att.variants if att is not None else None)
