"""Glue for lab 04 (warp stalls): the live correctness runs, the sector-model predictions, and the
copy-family and attention tables built from recorded (or, on a GPU with ncu, live) counters.

Each loader returns a small result object holding the tables and the caption that names where
they came from, or ``None`` after printing a note saying what is missing and how to get it, so
a notebook cell never crashes on an absent record. Numbers come from
:mod:`infralens_lab.measure.ncu` (counters), the ``bench`` record (CUDA-event timings),
:mod:`infralens_lab.analysis.traffic` (predictions) and :mod:`infralens_lab.analysis.stalls`
(what each stall means); the joins live in :mod:`infralens_lab.present.tables`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from .. import evidence
from . import check_on, store  # noqa: F401  (re-exported: notebooks call lab04.check_on and lab04.store)
from ..analysis import joins
from ..analysis import roofline as rl
from ..analysis import stalls as stall_info
from ..analysis import traffic
from ..device import is_gpu
from ..kernels import check
from ..measure import ncu as N
from ..measure.runs import ELEM_BYTES, copy_run
from ..present import tables

COPY_FILES = ("ncu_copies.csv", "ncu_copies_stalls.csv")
ATTN_FILE = "ncu_attention.csv"
LIVE_COPY_N_IN = 40_003  # odd: the last program of every launch runs with a partial mask
LIVE_ATTN_SHAPES = ((1, 2, 48, 32, False), (1, 2, 37, 16, True))  # (B, H, N, D, causal): N not a multiple of 32
LIVE_NCU_N = 64 * 2**20  # useful elements per copy when ncu runs live on a GPU (256 MiB of fp32, over 4x L2)
LIVE_NCU_STRIDES = (2, 8, 32)
VOCABULARY = ("long_scoreboard", "short_scoreboard", "lg_throttle", "mio_throttle", "drain", "math_pipe_throttle",
              "barrier", "wait", "not_selected", "selected", "no_instruction")


# ---------------------------------------------------------------- recorded set
def file_caption(st, *files: str, extra: str = "") -> str:
    """The recorded set's provenance line plus the files a table came from (and formulas, if any)."""
    cap = st.provenance.caption() + " · files " + ", ".join(files)
    return cap + (f" · {extra}" if extra else "")


def _have(st, files) -> list[str]:
    if st is None:
        return list(files)
    known = set(st.files())
    return [f for f in files if f not in known]


def _missing(what: str, files) -> None:
    print(f"{what}: the recorded set has no {', '.join(files)} yet, so this part shows no measurement. "
          f"It is written on a GPU by `python -m infralens_lab record --out data/recorded/<gpu-slug>`.")


# ---------------------------------------------------------------- live correctness
def copies_correctness(n_in: int = LIVE_COPY_N_IN, seed: int = 0):
    """Run the coalesced copy and every strided copy now (interpreter on CPU, compiled on a GPU) on
    fresh random input, outputs poisoned with NaN, against the torch reference bit for bit
    (:func:`infralens_lab.kernels.check.copy_checks`). Returns ``(table, Evidence)``."""
    rows = check.copy_checks(n_in, seed)
    ev = evidence.live("copies_correctness", rows, "infralens_lab.labs_support.lab04.copies_correctness()")
    return pd.DataFrame(rows), ev


def attention_correctness(shapes=LIVE_ATTN_SHAPES, seed: int = 0):
    """Run every attention variant now on small fp16 inputs (odd N, causal and not), outputs poisoned
    with NaN, against the fp32-math reference with the float16 tolerance of the one table
    (:data:`infralens_lab.kernels.check.TOLERANCES`: atol=3e-3, rtol=2e-3, two fp16 roundings).
    fp16 runs in both modes (a GPU refuses fp32 attention). Returns ``(table, Evidence)``."""
    rows = check.attention_checks(shapes, seed)
    ev = evidence.live("attention_correctness", rows, "infralens_lab.labs_support.lab04.attention_correctness()")
    return pd.DataFrame(rows), ev


def print_checks(table, flag: str, what: str) -> None:
    """One PASS/FAIL line per row of a correctness table (``flag`` is the boolean column)."""
    for r in table.to_dict(orient="records"):
        rest = ", ".join(f"{k}={v}" for k, v in r.items() if k != flag)
        print(f"{'PASS' if r[flag] else 'FAIL'}  {what}: {rest}")


# ---------------------------------------------------------------- predictions
def sector_predictions(elem_bytes: int = 4, strides=(1, 2, 4, 8, 16, 32)):
    """What the 32-byte sector model predicts per stride (:func:`infralens_lab.analysis.traffic.sector_table`;
    its ``pred_dram_*`` columns hold the 64-byte DRAM level, left out here until the lab teaches both)."""
    t = traffic.sector_table(elem_bytes, strides)
    return t[["stride", "bytes_apart", "pred_sectors_per_req", "pred_read_x", "pred_useful_fraction"]]


PREDICTION_CAPTION = ("Formula: infralens_lab.analysis.traffic.sector_model(stride, elem_bytes=4): "
                      "read_x = min(stride, 32 / elem_bytes); 16 sectors per request when coalesced "
                      "(32 threads × 16-byte vectors), 32 once threads sit in different sectors; "
                      "useful fraction = 2 / (read_x + 1)")


# ---------------------------------------------------------------- copy family
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
        """Stall rows (reason, samples, share) of one row label, e.g. ``'stride 8'``, largest first."""
        if self.breakdown is None:
            raise ValueError("no stall samples in this copy family (ncu_copies_stalls.csv is missing)")
        cfg = self.table.loc[self.table["label"] == label, "config"]
        if cfg.empty:
            raise ValueError(f"no copy config labelled {label!r}; have {list(self.table['label'])}")
        b = self.breakdown[self.breakdown["config"] == cfg.iloc[0]]
        out = b.groupby("reason", sort=False)["samples"].sum().reset_index()
        out["share"] = out["samples"] / out["samples"].sum()
        out.insert(0, "kernel", b["kernel"].iloc[0] if len(b) else "")
        return out.sort_values(["samples", "reason"], ascending=[False, True]).reset_index(drop=True)

    def order(self) -> list[str]:
        return list(self.table["config"])

    def labels(self) -> dict:
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
    missing = _have(st, COPY_FILES[:1])
    if missing:
        _missing("Copy family", missing)
        return None
    stalls_text = st.text(COPY_FILES[1]) if COPY_FILES[1] in st.files() else None
    if stalls_text is None:
        _missing("Copy stalls", COPY_FILES[1:])
    bench_rows = None
    files = list(COPY_FILES if stalls_text else COPY_FILES[:1])
    if "bench.json" in st.files():
        bench_rows = st.load("bench").values.get("copies")
        files.append("bench.json")
    cap = file_caption(st, *files, extra="predictions: analysis.traffic.sector_model")
    scap = file_caption(st, COPY_FILES[1]) if stalls_text else None
    return _family(st.text(COPY_FILES[0]), stalls_text, bench_rows, cap, scap, "recorded")


def stall_shift(fam: CopyFamily, top: int = 3) -> list[str]:
    """How the sampled stall mix moves along the copy family, from the first row (the coalesced copy)
    to the last (the largest stride): whether one reason tops every copy, and the reasons whose share
    grew most (by more than one point). Read off the samples; [] without stall samples."""
    if fam.breakdown is None:
        return []
    labels = list(fam.table["label"])
    shares = {lab: fam.stalls_for(lab).set_index("reason")["share"] for lab in labels}
    first, last = labels[0], labels[-1]
    a, b = shares[first], shares[last]
    tops = list(fam.table["dominant_stall"])  # tables.copy_family's top reason per row, same samples
    if len(set(tops)) == 1:
        r = tops[0]
        lines = [f"{r} is the largest reason in every copy: {a.get(r, 0.0):.0%} of samples at {first}, "
                 f"{b.get(r, 0.0):.0%} at {last}"]
    else:
        lines = ["the largest reason changes along the family: "
                 + ", ".join(f"{lab} {r}" for lab, r in zip(labels, tops))]
    reasons = a.index.union(b.index)
    grew = (b.reindex(reasons, fill_value=0.0) - a.reindex(reasons, fill_value=0.0)).sort_values(ascending=False)
    grew = grew[grew > 0.01].head(top)
    if len(grew):
        lines.append(f"grew most from {first} to {last}: "
                     + ", ".join(f"{r} ({a.get(r, 0.0):.0%} to {b.get(r, 0.0):.0%})" for r in grew.index))
    return lines


def live_copy_family(n: int = LIVE_NCU_N, strides=LIVE_NCU_STRIDES) -> CopyFamily | None:
    """On a GPU with ncu: profile the coalesced copy and a few strides now (counters and stall samples,
    one ncu run each, as the recorder does). Elsewhere, or if ncu fails, None after a note."""
    if not is_gpu():
        print("Live counters: none in interpreter mode (no GPU, so no ncu); the recorded counters follow.")
        return None
    runs = [copy_run(n, "fp32")] + [copy_run(n, "fp32", s) for s in strides]
    try:
        texts = N.profile_runs(runs, {"counters": N.TIME + N.DRAM + N.SECTORS + N.SOL + N.OCCUPANCY,
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
    """Sentences on where measurement and the sector model agree or part, computed from the table."""
    t = fam.table
    out = []
    sec = t[(t["sectors_per_req"] - t["pred_sectors_per_req"]).abs() > 0.5]
    out.append("sectors per request: every row matches the model" if sec.empty else
               "sectors per request differ from the model for " + ", ".join(sec["label"]))
    strided = t[t["label"] != "coalesced"]
    ratio = strided["read_x"] / strided["pred_read_x"]
    near = strided[(ratio - 1).abs() <= 0.15]
    out.append(f"DRAM read per useful byte: within 15% of the model at {', '.join(near['label']) or 'no stride'}")
    doubled = strided[(ratio - 2).abs() <= 0.2]
    if len(doubled):
        out.append(f"DRAM read per useful byte: about twice the model at {', '.join(doubled['label'])} "
                   f"({', '.join(f'{x:.1f}x' for x in doubled['read_x'])} against its cap of "
                   f"{doubled['pred_read_x'].iloc[0]:.0f}x): consistent with DRAM being read in 64-byte sector "
                   f"pairs once every useful element sits in a pair of its own, which a 32-byte model does not count")
    other = strided[((ratio - 1).abs() > 0.15) & ((ratio - 2).abs() > 0.2)]
    for r in other.itertuples():
        out.append(f"DRAM read per useful byte at {r.label}: {r.read_x:.2f}x against the model's {r.pred_read_x:.0f}x")
    if "useful_fraction" in t.columns and t["useful_fraction"].notna().any():
        s = strided[strided["useful_fraction"].notna()]
        below = s[s["useful_fraction"] < s["pred_useful_fraction"]]
        out.append(f"useful bandwidth: below the model's fraction at {len(below)} of {len(s)} strides "
                   f"(the model assumes the strided copy still streams DRAM at the coalesced rate)")
    return out


# ---------------------------------------------------------------- attention
@dataclass
class Attention:
    kernels: pd.DataFrame
    variants: pd.DataFrame
    caption: str
    shape: tuple
    bench: list | None
    breakdown: pd.DataFrame  # stall samples per launch (measure.ncu.stall_breakdown); may be empty


def recorded_attention(st) -> Attention | None:
    """Naive vs tiled attention from ``ncu_attention.csv`` (+ ``bench`` if there); None with a note if missing."""
    if _have(st, [ATTN_FILE]):
        _missing("Attention counters", [ATTN_FILE])
        return None
    df = N.parse_raw_csv(st.text(ATTN_FILE))
    k = tables.attention_kernels(df)
    v = tables.attention_variants(k, df)
    shape = tables.config_fields(k["config"].iloc[0]).get("shape")
    bench = st.load("bench").values.get("attention") if "bench.json" in st.files() else None
    files = [ATTN_FILE] + (["bench.json"] if bench else [])
    cap = file_caption(st, *files, extra="predictions: analysis.traffic.attention_naive_traffic / "
                                         "attention_tiled_traffic (BLOCK_M read off the launch grid)")
    return Attention(k, v, cap, shape, bench, N.stall_breakdown(df))


KERNEL_COLUMNS = ["variant", "kernel", "time_us", "pred_dram_mb", "dram_mb", "l2_hit_pct", "sm_pct", "memory_pct",
                  "achieved_occupancy_pct", "dominant_stall", "dominant_stall_pct", "long_scoreboard_pct"]


def kernel_view(a: Attention) -> pd.DataFrame:
    return a.kernels[[c for c in KERNEL_COLUMNS if c in a.kernels.columns]]


def _pct(v) -> str:
    return "—" if v is None or v != v else f"{v:.0f}%"


def before_after(a: Attention, before: str = "naive", after: str = "tiled") -> pd.DataFrame:
    """The naive → tiled table with a reason per row, each reason computed from the numbers shown."""
    rows = {r["variant"]: r for r in a.variants.to_dict(orient="records")}
    if before not in rows or after not in rows:
        raise ValueError(f"before_after: variants {before!r} and {after!r} needed; have {sorted(rows)}")
    b, f = dict(rows[before]), dict(rows[after])
    B, H, n_ctx, D = a.shape
    e = ELEM_BYTES.get(tables.config_fields(b["config"]).get("dtype") or "fp16", 2)
    sp_mb = B * H * n_ctx * n_ctx * (4 + e) * 2 / 1e6  # S (fp32) and P (input dtype), each written once, read once

    def speed(x, y):
        return f"{x / y:.1f}x faster: the {int(b['kernels'])} naive kernels round-trip S and P through HBM; " \
               f"one tiled kernel keeps them on chip" if y < x else "not faster here: look at the rows below"

    def dram(x, y):
        return f"S (fp32) and P ({e}-byte) written then read back would be {sp_mb:.0f} MB; measured naive " \
               f"moved {x:.0f} MB, tiled {y:.0f} MB"

    def l2(x, y):
        if x != x or y != y:
            return "no L2 counter recorded"
        return ("higher: K/V tiles re-read by neighbouring query blocks are served from L2" if y > x else
                "lower: the naive kernels' reads of S and P just written hit L2 more often")

    def stall(x, y):
        text = f"naive: {x} {_pct(b.get('dominant_stall_pct'))}, tiled: {y} {_pct(f.get('dominant_stall_pct'))}"
        try:
            return text + f"; {y} = {stall_info.explain(y).meaning}"
        except (ValueError, TypeError):
            return text

    def occ(x, y):
        faster = f["time_us"] < b["time_us"]
        return (f"tiled runs at {'lower' if y < x else 'higher'} occupancy yet is "
                f"{'faster' if faster else 'slower'}: occupancy is a means to hide latency, not the goal")

    metrics = [
        ("time_us", "kernel time (ncu, sum over kernels)", "µs", speed),
        ("pred_dram_mb", "DRAM bytes predicted (traffic model)", "MB",
         lambda x, y: f"{x / y:.1f}x less predicted: tiled never writes S or P"),
        ("dram_mb", "DRAM bytes measured (read + write)", "MB", dram),
        ("l2_hit_pct", "L2 hit rate (time-weighted)", "%", l2),
        ("memory_pct", "memory throughput, % of peak (SOL)", "%",
         lambda x, y: "how busy the busiest memory unit was; naive is busy moving S and P"),
        ("sm_pct", "SM throughput, % of peak (SOL)", "%",
         lambda x, y: "tiled spends its time in matmuls and exp, not in moving bytes" if y > x else
         "tiled has not turned saved bytes into SM work here"),
        ("dominant_stall", "dominant stall reason", "", stall),
        ("long_scoreboard_pct", "long-scoreboard share of samples", "%",
         lambda x, y: "fewer warps wait on global memory" if y < x else "warps still wait on global memory"),
        ("achieved_occupancy_pct", "achieved occupancy (time-weighted)", "%", occ),
    ]
    out = tables.before_after(b, f, metrics, names=(before, after))
    if a.bench:
        big = [r for r in a.bench if r.get("dtype") == "float16" and not r.get("causal")
               and r.get("variant") in (before, after)]
        have = {}
        for r in big:
            have.setdefault(tuple(r["shape"]), set()).add(r["variant"])
        both = [s for s, v in have.items() if v == {before, after}]
        if both:  # a shape where both ran; same head dim as the ncu shape if there is one, then the largest N
            shp = sorted(both, key=lambda s: (s[3] != D, -s[2]))[0]
            vals = {r["variant"]: r["tflops"] for r in big if tuple(r["shape"]) == shp}
            extra = tables.before_after({"t": vals.get(before, math.nan)}, {"t": vals.get(after, math.nan)},
                                        [("t", f"bench TFLOP/s at B,H,N,D = {','.join(map(str, shp))} (CUDA events)",
                                          "TFLOP/s", "a larger shape, timed without a profiler: the speedup holds "
                                          "outside ncu" if vals.get(after, 0) > vals.get(before, math.inf) else
                                          "timed without a profiler")], names=(before, after))
            out = pd.concat([out, extra], ignore_index=True)
    return out


def sol_reading(a: Attention) -> list[str]:
    """One line per attention variant: its speed-of-light pair read with the series' one bound rule
    (:func:`infralens_lab.analysis.roofline.sol_verdict`), with the launch's waves for a one-kernel variant."""
    waves = a.kernels.groupby("variant", sort=False)["waves"].agg(["min", "size"]) if "waves" in a.kernels else None
    out = []
    for r in a.variants.to_dict(orient="records"):
        w = None
        if waves is not None and r["variant"] in waves.index and waves.loc[r["variant"], "size"] == 1:
            w = float(waves.loc[r["variant"], "min"])
        out.append(f"{r['variant']}: {rl.sol_verdict(r['sm_pct'], r['memory_pct'], waves=w)}")
    return out


def model_notes(a: Attention) -> list[str]:
    """Where measured DRAM bytes part from the traffic model, per kernel, and the likely reason."""
    out = []
    for r in a.kernels.to_dict(orient="records"):
        x = r["dram_mb"] / r["pred_dram_mb"] if r["pred_dram_mb"] else math.nan
        if r["kernel"].startswith("attn_fwd") and x < 0.5:
            out.append(f"{r['kernel']}: measured {r['dram_mb']:.1f} MB is {x:.2f}x the model's {r['pred_dram_mb']:.0f} MB: "
                       f"the model counts every K/V re-read as DRAM traffic (an upper bound); L2 served most of them")
        elif abs(x - 1) > 0.2:
            out.append(f"{r['kernel']}: measured {r['dram_mb']:.1f} MB is {x:.2f}x the model's {r['pred_dram_mb']:.0f} MB")
        else:
            out.append(f"{r['kernel']}: measured within 20% of the model ({x:.2f}x)")
    return out


def parallelism_notes(a: Attention, st=None) -> list[str]:
    """Per kernel: blocks launched, warps per block and, with the recorded ``device`` record, blocks per
    SM available: how much parallel work the launch offers to hide latency."""
    sms = None
    if st is not None and "device" in st.names():
        sms = st.load("device").values.get("sm_count")
    out = []
    for r in a.kernels.to_dict(orient="records"):
        g, b = r.get("grid_blocks"), r.get("block_threads")
        if g is None or g != g or b is None or b != b:
            continue
        line = f"{r['kernel']}: {g:,.0f} blocks of {b / 32:.0f} warps"
        if sms:
            line += f" on {sms} SMs = {g / sms:.2f} blocks per SM"
        out.append(line + f", achieved occupancy {r['achieved_occupancy_pct']:.1f}%")
    return out


# ---------------------------------------------------------------- vocabulary and occupancy
def stall_vocabulary(reasons=VOCABULARY) -> pd.DataFrame:
    """Meaning and usual fix per stall reason, from :data:`infralens_lab.analysis.stalls.STALLS`."""
    return pd.DataFrame([{"reason": r, "is_stall": stall_info.explain(r).is_stall,
                          "meaning": stall_info.explain(r).meaning, "usual fix": stall_info.explain(r).fix}
                         for r in reasons])


def occupancy_table(fam: CopyFamily | None, att: Attention | None) -> pd.DataFrame:
    """Achieved occupancy beside what each kernel achieved (:func:`infralens_lab.analysis.joins.occupancy_table`)."""
    return joins.occupancy_table(fam.table if fam is not None else None, att.variants if att is not None else None)


def occupancy_facts(occ: pd.DataFrame) -> str:
    """Two sentences computed from :func:`occupancy_table`: is higher occupancy faster here?"""
    if occ.empty:
        return "No occupancy counters recorded."
    out = []
    copies = occ[occ["kernel"].str.startswith("copy stride")]
    if len(copies) >= 2:
        hi = copies.loc[copies["achieved_occupancy_pct"].idxmax()]
        fast = copies.loc[copies["dram_tbps"].idxmax()]
        out.append(f"Strided copies: occupancy spans {copies['achieved_occupancy_pct'].min():.0f}–"
                   f"{copies['achieved_occupancy_pct'].max():.0f}%, the highest at {hi['kernel']}; the highest DRAM "
                   f"rate is at {fast['kernel']}.")
    att = occ[occ["kernel"].str.startswith("attention")].sort_values("time_us")
    if len(att) >= 2:
        f, s = att.iloc[0], att.iloc[-1]
        out.append(f"Attention: the fastest variant ({f['kernel']}) runs at {f['achieved_occupancy_pct']:.0f}% "
                   f"occupancy, the slowest ({s['kernel']}) at {s['achieved_occupancy_pct']:.0f}%.")
    return " ".join(out)


def attention_predictions(a: Attention) -> pd.DataFrame:
    """The traffic model alone at the recorded shape (:func:`infralens_lab.analysis.joins.attention_predictions`)."""
    return joins.attention_predictions(a.kernels)
