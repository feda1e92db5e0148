"""The copy family read against its models: stall mixes per copy, how the mix moves along the family, and
where the measured sectors and DRAM bytes agree with the 32-byte sector model or part from it.

Inputs are the joined copy table (:func:`infralens_lab.present.tables.copy_family`: columns ``config``,
``label``, ``sectors_per_req``, ``pred_sectors_per_req``, ``read_x``, ``pred_read_x`` ...) and the long stall
table (:func:`infralens_lab.parse.ncu.stall_breakdown`: ``config``, ``kernel``, ``reason``, ``samples``).
Shares are fractions of a copy's stall samples; ``read_x`` is DRAM bytes read per useful byte.
"""
from __future__ import annotations

import pandas as pd

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
