"""The same measurements on several GPUs, side by side.

Pure functions over the values of recorded (or live) records, keyed by GPU name: each returns a
DataFrame with one column group per GPU, so a lab can show how an H100 and an H200 (and the
learner's own GPU, when live) treat the same kernels. Only comparisons that teach are here:

- :func:`ceilings` — measured copy bandwidth and matmul rates, and the ridge points they imply
  (same SM count and tensor cores, different HBM: the ridge moves, the compute roof doesn't);
- :func:`copy_family` — useful bandwidth of the strided copies and their fraction of the
  coalesced copy on each GPU (the fraction is a property of the access pattern, the bandwidth of
  the memory);
- :func:`attention_vs_sdpa` — our attention kernels against SDPA's default on each GPU, as
  TFLOP/s and as a ratio measured in one run on that GPU (never across GPUs).

Inputs are the ``values`` of the ``ceilings`` / ``bench`` records (``Evidence.values``), so the
functions run on a laptop from the committed sets.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from .hardware import Ceilings

T = 1e12


def _need(values: Any, keys: tuple[str, ...], record: str, gpu: str) -> None:
    if not isinstance(values, Mapping) or any(k not in values for k in keys):
        seen = sorted(values) if isinstance(values, Mapping) else type(values).__name__
        raise ValueError(f"{record} values for {gpu!r} have {seen}; expected the keys {list(keys)} "
                         f"(the recorder's `{record}` record)")


def ceilings(by_gpu: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Measured ceilings per GPU, one row per GPU.

    Columns: ``gpu``, ``copy_TB_s`` (torch ``copy_``, bytes read + written per second),
    ``fp32_TFLOP_s`` (TF32 off), ``tf32_TFLOP_s``, ``fp16_TFLOP_s``, ``bf16_TFLOP_s`` (cuBLAS at
    8192³), and the ridge points ``ridge_bf16_FLOP_per_B`` and ``ridge_fp32_FLOP_per_B`` = rate /
    bandwidth: the arithmetic intensity above which a kernel at that precision can be compute-bound.
    """
    rows = []
    for gpu, values in by_gpu.items():
        _need(values, ("copy", "matmul"), "ceilings", gpu)
        c = Ceilings.from_values(values, gpu=gpu)
        row = {"gpu": gpu, "copy_TB_s": c.copy_bw / T}
        for d in ("fp32", "tf32", "fp16", "bf16"):
            row[f"{d}_TFLOP_s"] = getattr(c, d) / T if getattr(c, d) else None
        for d in ("bf16", "fp32"):
            row[f"ridge_{d}_FLOP_per_B"] = getattr(c, d) / c.copy_bw if getattr(c, d) else None
        rows.append(row)
    return pd.DataFrame(rows)


def copy_family(by_gpu: Mapping[str, Mapping[str, Any]], dtype: str = "float32") -> pd.DataFrame:
    """The bench's copy family per GPU: one row per variant and stride.

    Columns: ``variant``, ``stride``, then per GPU ``<gpu> useful TB/s`` (useful bytes read +
    written per second) and ``<gpu> x coalesced`` (that bandwidth over the same run's
    ``coalesced`` copy). Rows missing on a GPU stay empty.
    """
    frames = []
    for gpu, values in by_gpu.items():
        _need(values, ("copies",), "bench", gpu)
        df = pd.DataFrame([r for r in values["copies"] if r.get("dtype") == dtype])
        if df.empty:
            raise ValueError(f"bench values for {gpu!r} have no {dtype} copies; dtypes there: "
                             f"{sorted({r.get('dtype') for r in values['copies']})}")
        base = df.loc[df["variant"] == "coalesced", "useful_tbps"]
        if base.empty:
            raise ValueError(f"bench values for {gpu!r} lack the coalesced {dtype} row the fractions need")
        df = df[["variant", "stride", "useful_tbps"]].rename(columns={"useful_tbps": f"{gpu} useful TB/s"})
        df[f"{gpu} x coalesced"] = df[f"{gpu} useful TB/s"] / float(base.iloc[0])
        frames.append(df.set_index(["variant", "stride"]))
    out = pd.concat(frames, axis=1).reset_index()
    return out.sort_values(["variant", "stride"], key=lambda s: s.map(_variant_order) if s.name == "variant" else s,
                           kind="stable").reset_index(drop=True)


def _variant_order(v: str) -> int:
    return {"torch_copy_": 0, "coalesced": 1, "strided": 2}.get(v, 3)


def _shape_label(row: Mapping[str, Any]) -> str:
    shape = "x".join(str(s) for s in row["shape"])
    causal = " causal" if row.get("causal") else ""
    return f"{shape} {row['dtype']}{causal}"


def attention_vs_sdpa(by_gpu: Mapping[str, Mapping[str, Any]], variants: tuple[str, ...] = ("tiled", "tiled_fast"),
                      reference: str = "sdpa_default") -> pd.DataFrame:
    """Attention TFLOP/s against SDPA's default, per GPU and case.

    One row per (case, variant) where ``variant`` is in ``variants`` and the same case has a
    ``reference`` row on that GPU. Columns: ``case`` (B x H x N x D, dtype, causal), ``variant``,
    then per GPU ``<gpu> TFLOP/s`` and ``<gpu> x SDPA`` (the variant's rate over SDPA's, both timed
    in the same run on that GPU). Only rows the bench marked correct are used.
    """
    frames = []
    for gpu, values in by_gpu.items():
        _need(values, ("attention",), "bench", gpu)
        rows = [r for r in values["attention"] if r.get("correct", True) and r.get("tflops")]
        ref = {_shape_label(r): r["tflops"] for r in rows if r["variant"] == reference}
        out = [{"case": _shape_label(r), "variant": r["variant"], f"{gpu} TFLOP/s": r["tflops"],
                f"{gpu} x SDPA": r["tflops"] / ref[_shape_label(r)]}
               for r in rows if r["variant"] in variants and _shape_label(r) in ref]
        if out:
            frames.append(pd.DataFrame(out).set_index(["case", "variant"]))
    if not frames:
        raise ValueError(f"no GPU has both {reference!r} and one of {list(variants)} in its bench record")
    return pd.concat(frames, axis=1).reset_index()


def bench_timing_notes(by_gpu: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One sentence per GPU: how its bench record timed the rows. A run in interleaved rounds says how many; a
    record without ``rounds`` in its meta timed each variant once, in a fixed order with SDPA's default first,
    which moved a ratio by up to 20 % on an H100 (docs/kernels_notes.md, run 10)."""
    out = []
    for gpu, values in by_gpu.items():
        rounds = (values.get("meta") or {}).get("rounds")
        out.append(f"{gpu}: " + (f"each row is the median of {rounds} interleaved rounds" if rounds else
                                 "one timing per variant in a fixed order, SDPA's default first (recorded before "
                                 "the bench interleaved its rounds)"))
    return out


def ceiling_notes(df: pd.DataFrame) -> list[str]:
    """Sentences computed from :func:`ceilings` for the first GPU against each other one: how the compute
    roofs and the bandwidth compare, and where the bf16 ridge moves."""
    if len(df) < 2:
        return ["Only one recorded GPU: nothing to compare yet."]
    a = df.iloc[0]
    out = []
    for _, b in df.iloc[1:].iterrows():
        mm = [b[f"{d}_TFLOP_s"] / a[f"{d}_TFLOP_s"] for d in ("fp32", "tf32", "fp16", "bf16")
              if a[f"{d}_TFLOP_s"] and b[f"{d}_TFLOP_s"]]
        out.append(f"{b['gpu']} vs {a['gpu']}: matmul rates {min(mm):.2f}x to {max(mm):.2f}x (the same compute roof), "
                   f"copy bandwidth {b['copy_TB_s'] / a['copy_TB_s']:.2f}x; so the bf16 ridge moves from "
                   f"{a['ridge_bf16_FLOP_per_B']:.0f} to {b['ridge_bf16_FLOP_per_B']:.0f} FLOP/byte: a bf16 kernel "
                   f"with an intensity between the two sits under the compute roof on one GPU and under the "
                   f"memory roof on the other.")
    return out


def placement(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The same kernels placed on each GPU's roofline: one row per kernel ``label`` found on every GPU.

    ``tables``: GPU name -> lab 02's kernel table (columns ``label``, ``intensity``, ``flops_per_s``,
    ``above_ridge``, ``fraction_of_roof``, ``bound``). Columns: ``label``, then per GPU ``<gpu> FLOP/B``
    (measured intensity), ``<gpu> TFLOP/s``, ``<gpu> roof`` (``compute`` right of that GPU's ridge,
    ``memory`` left of it), ``<gpu> of roof`` and ``<gpu> verdict`` (the series' one rule)."""
    need = ("label", "intensity", "flops_per_s", "above_ridge", "fraction_of_roof", "bound")
    frames = []
    for gpu, kt in tables.items():
        missing = [c for c in need if c not in kt.columns]
        if missing:
            raise ValueError(f"kernel table for {gpu!r} lacks {missing}; expected lab 02's kernel table")
        k = kt[kt["fraction_of_roof"].notna()].set_index("label")
        frames.append(pd.DataFrame({f"{gpu} FLOP/B": k["intensity"], f"{gpu} TFLOP/s": k["flops_per_s"] / T,
                                    f"{gpu} roof": k["above_ridge"].map({True: "compute", False: "memory"}),
                                    f"{gpu} of roof": k["fraction_of_roof"], f"{gpu} verdict": k["bound"]}))
    if not frames:
        raise ValueError("placement needs at least one GPU's kernel table; got none")
    return pd.concat(frames, axis=1, join="inner").reset_index()


def placement_notes(df: pd.DataFrame) -> list[str]:
    """Sentences computed from :func:`placement`: kernels whose side of the ridge or verdict differs by GPU."""
    gpus = [c[: -len(" roof")] for c in df.columns if c.endswith(" roof") and not c.endswith(" of roof")]
    out = []
    for _, r in df.iterrows():
        sides = {g: r[f"{g} roof"] for g in gpus}
        verdicts = {g: r[f"{g} verdict"] for g in gpus}
        if len(set(sides.values())) > 1:
            out.append(f"{r['label']}: under the " + ", ".join(f"{s} roof on {g}" for g, s in sides.items())
                       + " (same kernel, same intensity; the ridge moved)")
        elif len(set(verdicts.values())) > 1:
            out.append(f"{r['label']}: " + ", ".join(f"{v} on {g} ({r[f'{g} of roof']:.0%} of roof)"
                                                     for g, v in verdicts.items()))
    if not out:
        out.append("Every kernel sits on the same side of the ridge with the same verdict on every GPU.")
    for g in gpus[1:]:
        for side in ("memory", "compute"):
            rows = df[(df[f"{gpus[0]} roof"] == side) & (df[f"{gpus[0]} verdict"] == side)]
            if len(rows):
                x = rows[f"{g} TFLOP/s"] / rows[f"{gpus[0]} TFLOP/s"]
                out.append(f"{side}-bound kernels ({', '.join(rows['label'])}): {g} runs them at {x.min():.2f}x to "
                           f"{x.max():.2f}x the rate on {gpus[0]}")
    return out


def short_gpu(name: str) -> str:
    """A GPU's name cut to its model for column headers: ``'H100 80GB HBM3'`` -> ``'H100'``, ``'NVIDIA H200'`` ->
    ``'H200'``; a live GPU keeps its ``(live)`` mark."""
    live = " (live)" if name.endswith(" (live)") else ""
    words = name.removesuffix(" (live)").removeprefix("NVIDIA ").split()
    return (words[0] if words else name) + live


def placement_view(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`placement` narrowed to fit a page (issue 29.6): ``kernel``, then per GPU ``<model> TFLOP/s`` and
    ``<model> % roof``, and one ``verdict`` column (the verdict where every GPU agrees, else each GPU's)."""
    gpus = [c[: -len(" verdict")] for c in df.columns if c.endswith(" verdict")]
    out = pd.DataFrame({"kernel": df["label"]})
    for g in gpus:
        out[f"{short_gpu(g)} TFLOP/s"] = df[f"{g} TFLOP/s"]
        out[f"{short_gpu(g)} % roof"] = 100 * df[f"{g} of roof"]
    out["verdict"] = [v[0] if len(set(v)) == 1 else "; ".join(f"{short_gpu(g)} {x}" for g, x in zip(gpus, v, strict=True))
                      for v in zip(*(df[f"{g} verdict"] for g in gpus), strict=True)]
    return out


def backend_pair(by_gpu: Mapping[str, Mapping[str, Any]], a: str = "sdpa_default", b: str = "sdpa_cudnn") -> pd.DataFrame:
    """Two SDPA rows of the bench side by side, per GPU and case: ``gpu``, ``case``, ``<a> TFLOP/s``,
    ``<b> TFLOP/s`` and ``ratio`` (a / b, both timed in the same run on that GPU)."""
    rows = []
    for gpu, values in by_gpu.items():
        _need(values, ("attention",), "bench", gpu)
        got = {(r["variant"], _shape_label(r)): r["tflops"] for r in values["attention"]
               if r.get("correct", True) and r.get("tflops") and r["variant"] in (a, b)}
        for case in dict.fromkeys(c for _, c in got):
            if (a, case) in got and (b, case) in got:
                rows.append({"gpu": gpu, "case": case, f"{a} TFLOP/s": got[(a, case)], f"{b} TFLOP/s": got[(b, case)],
                             "ratio": got[(a, case)] / got[(b, case)]})
    if not rows:
        raise ValueError(f"no GPU's bench has both {a!r} and {b!r} for one case")
    return pd.DataFrame(rows)


def backend_pair_notes(pair: pd.DataFrame, a: str = "sdpa_default", b: str = "sdpa_cudnn") -> list[str]:
    """Per GPU: how far the two rows of :func:`backend_pair` part (lowest and highest ratio) and whether the
    sign flips across cases: when it does, neither row is consistently faster."""
    out = []
    for gpu, g in pair.groupby("gpu", sort=False):
        lo, hi = float(g["ratio"].min()), float(g["ratio"].max())
        flips = lo < 1 < hi
        out.append(f"{gpu}: {a} / {b} from {lo:.3f} to {hi:.3f} over {len(g)} cases"
                   + ("; the sign flips, so neither is consistently faster" if flips else
                      f"; {a if lo > 1 else b} is faster in every case"))
    return out
