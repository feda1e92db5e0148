"""The copy family read against its models: the family's tables from the recorded files (:func:`family`), stall
mixes per copy, how the mix moves along the family, and where the measured sectors and DRAM bytes agree with the
32-byte sector model or part from it (the rules and the sentences a lab prints, pinned by tests).

Inputs are the joined copy table (:func:`infralens_lab.present.tables.copy_family`: columns ``config``,
``label``, ``sectors_per_req``, ``pred_sectors_per_req``, ``read_x``, ``pred_read_x`` ...) and the long stall
table (:func:`infralens_lab.parse.ncu.stall_breakdown`: ``config``, ``kernel``, ``reason``, ``samples``).
Shares are fractions of a copy's stall samples; ``read_x`` is DRAM bytes read per useful byte.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..parse import ncu
from . import joins
from .clocks import kernel_clock_ghz

NEAR = 0.15  # |measured / model - 1| within which read_x "matches" the model (L2 reuse moves it a few %)
DOUBLE = 0.2  # |measured / model - 2| within which read_x is "twice" the model (the 64-byte HBM fetch)


def reason_shares(breakdown: pd.DataFrame, config: str) -> pd.DataFrame:
    """Stall rows of one copy config: ``kernel``, ``reason``, ``samples`` and ``share`` (fraction of the
    config's samples), largest first (ties by name). Raises ValueError for a config with no samples."""
    b = breakdown[breakdown["config"] == config]
    if b.empty:
        raise ValueError(f"no stall samples for config {config!r}; have {sorted(breakdown['config'].unique())}")
    out = b.groupby("reason", sort=False)["samples"].sum().reset_index()
    out["share"] = out["samples"] / out["samples"].sum()
    out.insert(0, "kernel", b["kernel"].iloc[0])
    return out.sort_values(["samples", "reason"], ascending=[False, True]).reset_index(drop=True)


def share_shift(first: pd.DataFrame, last: pd.DataFrame) -> pd.DataFrame:
    """How each reason's share moved between two stall mixes (:func:`reason_shares`): columns ``reason``,
    ``first``, ``last`` and ``change`` (last - first, fractions; a reason absent from a mix counts 0),
    largest growth first."""
    a, b = first.set_index("reason")["share"], last.set_index("reason")["share"]
    reasons = a.index.union(b.index)
    out = pd.DataFrame({"first": a.reindex(reasons, fill_value=0.0), "last": b.reindex(reasons, fill_value=0.0)})
    out["change"] = out["last"] - out["first"]
    out = out.rename_axis("reason").reset_index()
    return out.sort_values(["change", "reason"], ascending=[False, True]).reset_index(drop=True)


def model_agreement(table: pd.DataFrame, near: float = NEAR, double: float = DOUBLE) -> dict:
    """Where the copy table agrees with the sector model. Returns labels by finding:
    ``sectors_off`` (sectors per request more than half a sector from the model), ``near`` / ``doubled`` /
    ``other`` (strided rows whose measured read_x is within ``near`` of the model, within ``double`` of twice
    it, or neither) and ``below_fraction`` (strided rows whose useful-bandwidth fraction is under the
    model's; empty without benchmark columns)."""
    t = table
    strided = t[t["label"] != "coalesced"]
    ratio = strided["read_x"] / strided["pred_read_x"]
    is_near, is_double = (ratio - 1).abs() <= near, (ratio - 2).abs() <= double
    below = []
    if "useful_fraction" in t.columns:
        s = strided[strided["useful_fraction"].notna()]
        below = list(s.loc[s["useful_fraction"] < s["pred_useful_fraction"], "label"])
    return {"sectors_off": list(t.loc[(t["sectors_per_req"] - t["pred_sectors_per_req"]).abs() > 0.5, "label"]),
            "near": list(strided.loc[is_near, "label"]), "doubled": list(strided.loc[is_double, "label"]),
            "other": list(strided.loc[~is_near & ~is_double, "label"]), "below_fraction": below,
            "with_fraction": int(strided["useful_fraction"].notna().sum()) if "useful_fraction" in t.columns else 0}


@dataclass
class CopyFamily:
    """The copy family from one ncu recording (or live run): ``table`` (:func:`infralens_lab.analysis.joins.copy_family`,
    one row per copy, predicted beside measured), ``breakdown`` (the stall samples, long form, of
    :func:`infralens_lab.parse.ncu.stall_breakdown`; None without a stall CSV), ``clocks`` (the SM clock per copy,
    :func:`infralens_lab.analysis.clocks.kernel_clock_ghz`; None when the CSV lacks it), ``commands`` (row label ->
    the ncu command line recorded for it) and the captions a lab prints under its tables."""

    table: pd.DataFrame
    breakdown: pd.DataFrame | None = None
    clocks: pd.DataFrame | None = None
    commands: dict = field(default_factory=dict)
    caption: str = ""
    stall_caption: str = ""

    def stalls_for(self, label: str) -> pd.DataFrame:
        """Stall rows (kernel, reason, samples, share) of one row label, e.g. ``'stride 8'``, largest first."""
        if self.breakdown is None:
            raise ValueError("no stall samples in this copy family (ncu_copies_stalls.csv is missing)")
        cfg = self.table.loc[self.table["label"] == label, "config"]
        if cfg.empty:
            raise ValueError(f"no copy config labelled {label!r}; have {list(self.table['label'])}")
        return reason_shares(self.breakdown, cfg.iloc[0])

    def order(self) -> list[str]:
        """Configs in table order (coalesced first, then by stride)."""
        return list(self.table["config"])

    def labels(self) -> dict:
        """Config -> row label (``'stride 8'``)."""
        return dict(zip(self.table["config"], self.table["label"], strict=True))


def counter_rows(raw, labels: dict | None = None) -> dict[str, dict[str, float]]:
    """``{row label: {metric: value}}``: each copy's raw Nsight Compute counters (the ``.sum`` metrics of
    :func:`infralens_lab.parse.ncu.parse_raw_csv`'s tidy frame ``raw``: totals over the GPU, in each metric's own
    unit), keyed by the row label ``labels`` gives its config (:meth:`CopyFamily.labels`; the config itself
    otherwise). What lab 04's exercise 1 hands a learner's function, one copy at a time."""
    if not {"config", "metric", "value"} <= set(getattr(raw, "columns", [])):
        raise ValueError(f"counter_rows: got {type(raw).__name__} with columns {list(getattr(raw, 'columns', []))}; "
                         "expected the tidy frame of parse.ncu.parse_raw_csv")
    w = ncu.wide(raw[raw["metric"].str.endswith(".sum")])
    labels = labels or {}
    return {labels.get(r["config"], r["config"]): {k: float(v) for k, v in r.items() if k not in ncu.KEYS and v == v}
            for r in w.to_dict(orient="records")}


def family(counters_text: str, stalls_text: str | None = None, bench_rows=None) -> CopyFamily:
    """The :class:`CopyFamily` of an ncu counters CSV (``ncu_copies.csv``), its stall-sampling CSV
    (``ncu_copies_stalls.csv``, optional) and the bench record's ``copies`` rows (optional: the useful bandwidth
    columns). The one path from the recorded files to the copy tables, for the lab and for the grader alike."""
    df = ncu.parse_raw_csv(counters_text)
    sdf = ncu.parse_raw_csv(stalls_text) if stalls_text else None
    table = joins.copy_family(df, sdf, bench_rows)
    try:
        clk = kernel_clock_ghz(df)
    except ValueError:  # a CSV recorded without the clock metric: the table still stands
        clk = None
    if clk is not None:
        table = table.merge(clk.drop(columns="kernel"), on="config", how="left")
    cmds = {lab: ncu.command_of(counters_text, cfg) for cfg, lab in zip(table["config"], table["label"], strict=True)}
    return CopyFamily(table, ncu.stall_breakdown(sdf) if sdf is not None else None, clk,
                      {k: v for k, v in cmds.items() if v})


def shift_table(fam: CopyFamily) -> pd.DataFrame | None:
    """Each reason's share at the first copy (coalesced) and the last (the largest stride), and the change
    (:func:`share_shift`); None without stall samples."""
    labels = list(fam.table["label"])
    return None if fam.breakdown is None else share_shift(fam.stalls_for(labels[0]), fam.stalls_for(labels[-1]))


def shift_lines(fam: CopyFamily, top: int = 3, min_change: float = 0.01) -> list[str]:
    """How the sampled stall mix moves from the first copy to the last, in sentences: whether one reason tops
    every copy (``dominant_stall`` column) and the ``top`` reasons whose share grew by more than ``min_change``
    (a fraction: one percentage point). [] without stall samples."""
    sh = shift_table(fam)
    if sh is None:
        return []
    labels, tops = list(fam.table["label"]), list(fam.table["dominant_stall"])
    first, last, d = labels[0], labels[-1], sh.set_index("reason")
    if len(set(tops)) == 1:
        lines = [f"{tops[0]} is the largest reason in every copy: {d.loc[tops[0], 'first']:.0%} of samples at "
                 f"{first}, {d.loc[tops[0], 'last']:.0%} at {last}"]
    else:
        lines = ["the largest reason changes along the family: " + ", ".join(f"{a} {r}" for a, r in zip(labels, tops, strict=True))]
    grew = sh[sh["change"] > min_change].head(top)
    if len(grew):
        lines.append(f"grew most from {first} to {last}: "
                     + ", ".join(f"{r.reason} ({r.first:.0%} to {r.last:.0%})" for r in grew.itertuples()))
    return lines


def gap_lines(table: pd.DataFrame, near: float = NEAR, double: float = DOUBLE) -> list[str]:
    """Sentences on where the copy table agrees with the 32-byte sector model and where it parts
    (:func:`model_agreement`; ``near`` and ``double`` are its thresholds and are quoted in the sentences)."""
    t, g = table.set_index("label"), model_agreement(table, near, double)
    out = ["sectors per request: every row matches the model" if not g["sectors_off"] else
           "sectors per request differ from the model for " + ", ".join(g["sectors_off"]),
           f"DRAM read per useful byte: within {near:.0%} of the 32-byte model at {', '.join(g['near']) or 'no stride'}"]
    if g["doubled"]:
        xs = ", ".join(f"{t.loc[x, 'read_x']:.1f}x" for x in g["doubled"])
        out.append(f"DRAM read per useful byte: twice the 32-byte model (within {double:g}) at "
                   f"{', '.join(g['doubled'])} ({xs} against its cap of {t.loc[g['doubled'][0], 'pred_read_x']:.0f}x)")
    for x in g["other"]:
        out.append(f"DRAM read per useful byte at {x}: {t.loc[x, 'read_x']:.2f}x against the model's "
                   f"{t.loc[x, 'pred_read_x']:.0f}x")
    if g["with_fraction"]:
        out.append(f"useful bandwidth: below the model's fraction at {len(g['below_fraction'])} of "
                   f"{g['with_fraction']} strides (the model assumes the strided copy streams DRAM at the coalesced rate)")
    return out
