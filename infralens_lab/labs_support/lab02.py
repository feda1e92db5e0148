"""Glue for lab 02 (the roofline): evidence loading, the live checks, captions and sentences.

The counters → FLOPs/bytes views, tensor-op checks, unit handling and the per-kernel bound table are
analysis (:mod:`infralens_lab.analysis.counters`, re-exported here under the names the notebook
uses); bounds follow the series' one rule (:data:`infralens_lab.analysis.roofline.RULE`). SI units.
"""
from __future__ import annotations

import pandas as pd
import torch

from .. import evidence
from ..analysis import roofline as rl
from ..analysis import traffic as tr
from ..analysis.counters import (FLOP_METRICS, FLOP_WEIGHTS, TENSOR_INST, TENSOR_OPS_NAMES,  # noqa: F401
                                 copy_table, counter_flops, flop_split, hierarchy_points, kernel_table, ncu_peak_bandwidths,
                                 parse_config, per_cycle, per_second, predicted, store_kernel_table,
                                 tensor_flops_per_op, tensor_op_check, what_moves_it, wide_counters)
from ..analysis.hardware import Ceilings
from ..device import is_gpu, torch_device
from ..kernels import attention, copies, reference
from ..kernels.check import matches, tolerance
from ..measure import ceilings as measure_ceilings
from ..parse.ncu import parse_raw_csv
from ..present.roofline import Roof, roofs_from

CSV_FILES = ("ncu_copies.csv", "ncu_attention.csv", "ncu_matmul.csv")
TENSOR_OPS = TENSOR_OPS_NAMES[0]
RULE = rl.RULE  # the bound rule, for the lab to print


def load_counters(store, filename: str):
    """Tidy ncu frame of one recorded CSV, or None (with a printed note) when the set lacks it."""
    if filename not in CSV_FILES:
        raise ValueError(f"filename {filename!r}; expected one of {CSV_FILES}")
    if store is None or filename not in store.files():
        print(f"No recorded {filename} in this checkout yet: its kernels appear here once the recorder "
              f"(`python -m infralens_lab record`) has run on a GPU.")
        return None
    return parse_raw_csv(store.text(filename))


def kernel_notes(kt: pd.DataFrame) -> list[str]:
    """Sentences read off a :func:`kernel_table`: the lowest-intensity kernel, where measured and
    predicted intensity part ways (and which way), and where the matmuls cross the ridge."""
    if kt is None or kt.empty:
        return []
    out = []
    low = kt.loc[kt["intensity"].idxmin()]
    out.append(f"Lowest intensity: {low['label']} at {low['intensity']:.3g} FLOP/byte ({low['bound']}-bound, "
               f"{low['fraction_of_roof']:.0%} of its roof).")
    ratio = kt["intensity"] / kt["predicted_intensity"]
    for _, r in kt[ratio > 1.5].iterrows():
        out.append(f"{r['label']}: measured intensity {r['intensity'] / r['predicted_intensity']:.2g}x the model's: "
                   f"DRAM moved fewer bytes than the model charged it (re-reads or writes served by L2).")
    for _, r in kt[ratio < 1 / 1.5].iterrows():
        out.append(f"{r['label']}: measured intensity {r['predicted_intensity'] / r['intensity']:.2g}x below the "
                   f"model's: DRAM moved more bytes than each operand once (tiles re-read from DRAM, not L2).")
    mm = kt[kt["group"] == "matmul fp16"].sort_values("size")
    if len(mm):
        right = mm[mm["above_ridge"]]
        out.append("Matmuls: " + ", ".join(f"{int(r['size'])}³ {r['bound']} ({r['fraction_of_roof']:.0%})"
                                           for _, r in mm.iterrows())
                   + (f"; the first at or right of the ridge is {int(right['size'].iloc[0])}³." if len(right)
                      else "; none reaches the ridge."))
    return out


def with_dram_model(ct: pd.DataFrame, elem_bytes: int = 4) -> pd.DataFrame:
    """:func:`copy_table` plus ``predicted_dram_read_amplification``: the two-level model's DRAM
    bytes read per useful byte (64-byte fetches between HBM and L2 on H100/H200,
    :func:`infralens_lab.analysis.traffic.sector_model`), beside the 32-byte sector one (L1-L2).
    ``elem_bytes``: the copies' element size (the recorded copies are fp32)."""
    out = ct.copy()
    out["predicted_dram_read_amplification"] = [tr.sector_model(int(s), elem_bytes).dram_read_amplification
                                                for s in out["stride"]]
    return out


def copy_notes(ct: pd.DataFrame) -> list[str]:
    """Sentences read off :func:`with_dram_model`: where each level's model predicts the measured
    DRAM read amplification (within 25%), and whether DRAM saw fewer written bytes than the copy wrote."""
    if ct is None or ct.empty:
        return []
    out = []
    for col, unit in (("predicted_read_amplification", "32-byte sector (L1-L2)"),
                      ("predicted_dram_read_amplification", "64-byte fetch (HBM-L2)")):
        if col not in ct.columns:
            continue
        near = (ct["read_amplification"] - ct[col]).abs() <= 0.25 * ct[col]
        out.append(f"The {unit} model predicts the DRAM bytes read within 25% for {int(near.sum())} of {len(ct)} "
                   f"copies" + ("; not for: " + ", ".join(
                       f"{r['label']} ({r['read_amplification']:.3g}x measured vs {r[col]:.3g}x)"
                       for _, r in ct[~near].iterrows()) if (~near).any() else "") + ".")
    short = ct[ct["dram_write_bytes"] < 0.9 * ct["useful_bytes"] / 2]
    if len(short):
        out.append(f"{len(short)} of {len(ct)} copies wrote fewer bytes to DRAM than they stored: the last writes were "
                   f"still in L2 when the kernel ended, so 'useful' bandwidth can exceed DRAM bandwidth.")
    return out


def check_kernels(seed: int = 0) -> pd.DataFrame:
    """Run the kernels this lab places on the chart on tiny inputs (Triton's interpreter on a CPU,
    the GPU in gpu mode) and compare them with the torch references: fresh seeded random inputs,
    an odd length for the copies, outputs poisoned with NaN beforehand so an element a kernel
    skips cannot pass. Tolerances: :data:`infralens_lab.kernels.check.TOLERANCES` (the tests' table).
    One row per check: kernel, shape, dtype, tolerance, passed."""
    dev = torch_device()
    gen = torch.Generator().manual_seed(seed)
    rows = []
    x = torch.randn(4099, generator=gen).to(dev)  # odd length: the last block is partly masked
    exact = tolerance("exact")  # a copy moves bits, it computes nothing
    for stride in (1, 8):
        n_out = copies.strided_len(x.numel(), stride)
        out = torch.full((n_out,), float("nan"), device=dev)
        copies.copy_strided(x, stride, out=out)
        rows.append({"kernel": "copy_strided", "shape": f"n={x.numel()}, stride={stride}", "dtype": "fp32", **exact,
                     "passed": matches(out, reference.copy_strided_ref(x, stride), "exact"), "note": ""})
    B, H, N, D = 1, 2, 48, 32  # N not a multiple of the 32-row tiles: masks matter
    q, k, v = (torch.randn(B, H, N, D, generator=gen).to(dev, torch.float16) for _ in range(3))
    ref = reference.attention_ref(q.float(), k.float(), v.float())
    for name, fn in attention.VARIANTS.items():
        out = torch.full_like(q, float("nan"))
        note = ""
        try:
            fn(q, k, v, out=out)
        except Exception as exc:  # e.g. tiled_fast's TMA descriptors on a GPU older than Hopper
            note = f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        rows.append({"kernel": name, "shape": f"B,H,N,D={B},{H},{N},{D}", "dtype": "fp16", **tolerance(torch.float16),
                     "passed": not note and matches(out, ref, torch.float16), "note": note})
    return pd.DataFrame(rows)


def sweep_vs_ncu(ceilings_ev, kt: pd.DataFrame) -> pd.DataFrame | None:
    """The recorder's timed fp16 matmul sweep (CUDA events, no profiler) beside the same sizes under
    Nsight Compute: TFLOP/s both ways and their ratio, so the two measurements check each other."""
    sweep = (ceilings_ev.values.get("sweep") or []) if ceilings_ev is not None else []
    if not sweep or kt is None or kt.empty:
        return None
    mm = kt[kt["group"] == "matmul fp16"].set_index("size")
    rows = []
    for r in sweep:
        n = r.get("M")
        if n in mm.index:
            ncu_rate = float(mm.loc[n, "flops_per_s"])
            rows.append({"size": n, "timed_TFLOPs": r["flops_per_s"] / 1e12, "ncu_TFLOPs": ncu_rate / 1e12,
                         "ncu_over_timed": ncu_rate / r["flops_per_s"], "timed_median_ms": r.get("median_ms"),
                         "ncu_time_ms": float(mm.loc[n, "time_us"]) / 1e3})
    return pd.DataFrame(rows) if rows else None


def chart_roofs(ceilings, peaks=None):
    """The roofs lab 02 draws: the measured copy bandwidth and fp32 / tf32 / fp16 matmul rates,
    plus the datasheet's DRAM bandwidth and fp16 tensor peak (dashed) when ``peaks`` is given."""
    roofs = roofs_from(ceilings, None, ("fp32", "tf32", "fp16"))
    if peaks is not None:
        roofs += [Roof(f"{peaks.memory_kind} datasheet", peaks.bandwidth, "memory", "peak"),
                  Roof("fp16 datasheet", peaks.fp16, "compute", "peak")]
    return roofs


def measured_ridges(ceilings) -> pd.DataFrame:
    """Ridge point (FLOP/byte) of each measured matmul rate against the measured copy bandwidth."""
    rows = [{"roof": f"{d} matmul", "rate_TFLOPs": getattr(ceilings, d) / 1e12,
             "copy_bandwidth_TBps": ceilings.copy_bw / 1e12, "ridge_FLOP_per_byte": rl.ridge(getattr(ceilings, d),
                                                                                           ceilings.copy_bw)}
            for d in ("fp32", "tf32", "fp16", "bf16") if getattr(ceilings, d, None)]
    return pd.DataFrame(rows)


def tensor_counter_sentence(factor: float | None, check: pd.DataFrame | None) -> str:
    """What the lab did with the tensor counters, in sentences built from the evidence."""
    if check is None or check.empty:
        return "No recorded matmul counters: tensor-core FLOPs cannot be checked, so the nominal counts are used."
    parts = []
    fpi = check["flops_per_inst"].dropna()
    if len(fpi):
        parts.append(f"2·M·N·K per tensor-pipe instruction ranges from {fpi.min():,.0f} to {fpi.max():,.0f} FLOPs over "
                     f"the recorded matmuls: the instruction count depends on the MMA shape each kernel uses, so it "
                     f"is not a FLOP count.")
    if check["ops_over_2mnk"].isna().all():
        parts.append("This recording has no tensor-path op counter (sm__ops_path_tensor_src_fp16*), so kernels that use "
                     "tensor cores are placed with the traffic model's nominal FLOPs (2 per multiply-add); CUDA-core "
                     "FLOPs still come from the counters.")
    elif factor is None:
        r = float(check["ops_over_2mnk"].median())
        parts.append(f"The tensor-path op counter / (2·M·N·K) has median {r:.3g}: it did not see these kernels' tensor "
                     f"work, so tensor-core kernels are placed with the traffic model's nominal FLOPs.")
    else:
        r = float(check["ops_over_2mnk"].median())
        what = "FLOPs (a multiply-add counts two)" if factor == 1.0 else \
            "multiply-adds (one per FMA), so it is doubled" if factor == 2.0 else f"units worth {factor:.3g} FLOPs"
        parts.append(f"The tensor-path op counter / (2·M·N·K) has median {r:.3g} over the recorded matmuls: it counts "
                     f"{what}; tensor-core FLOPs below are that counter × {factor:g}.")
    return " ".join(parts)


def counters_caption(store, *files: str) -> str:
    """Provenance line for values computed from recorded ncu CSVs: the set's caption plus the files."""
    return store.provenance.caption() + " · counters: recorded " + ", ".join(files)


def hierarchy_roofs(frames: list) -> list:
    """L1 and L2 roofs from the peaks Nsight Compute reports with the recorded matmuls
    (:func:`infralens_lab.analysis.counters.ncu_peak_bandwidths`), drawn as ``peak``: ncu's peaks at
    the clocks the kernels ran at, not measured bandwidths. Empty when the recording lacks them."""
    return [Roof(f"{level} (ncu peak)", bw, "memory", "peak") for level, bw in ncu_peak_bandwidths(frames)]


def hierarchy_notes(points: pd.DataFrame | None) -> list[str]:
    """Sentences read off :func:`hierarchy_points`: per kernel, how many bytes L2 (and L1) moved per
    DRAM byte (on-chip reuse), and which kernels have no L1 point."""
    if points is None or points.empty:
        return []
    out = []
    for name, g in points.groupby("series", sort=False):
        b = dict(zip(g["group"], g["bytes"]))
        if "DRAM" not in b or "L2" not in b:
            continue
        parts = [f"L2 {b['L2'] / b['DRAM']:.2g}x"] + ([f"L1 {b['L1'] / b['DRAM']:.2g}x"] if "L1" in b else [])
        out.append(f"{name}: bytes per DRAM byte: " + ", ".join(parts))
    if points.attrs.get("l1_bypass"):
        out.append("No L1 point (L1/TEX bytes under 1% of L2 bytes: loads that bypass L1TEX, such as TMA copies "
                   "from L2 to shared memory): " + ", ".join(points.attrs["l1_bypass"]))
    return out


def ceilings_from(store):
    """``(evidence, Ceilings)`` of the recorded ``ceilings`` record, or ``(None, None)`` with a note."""
    if store is None or "ceilings" not in store.names():
        print("No recorded ceilings in this checkout yet: they appear here once the recorder has run on a GPU.")
        return None, None
    ev = store.load("ceilings")
    return ev, Ceilings.from_evidence(ev)


def live_ceilings():
    """On a GPU: the ceilings measured now (:func:`infralens_lab.measure.ceilings.measure`, quick), as
    live evidence and Ceilings; ``(None, None)`` in interpreter mode or if measuring fails (the
    recorded ones are shown instead)."""
    if not is_gpu():
        return None, None
    try:
        values, units, notes = measure_ceilings.measure(quick=True)
    except Exception as exc:  # a live measurement must not stop the notebook: the recorded ceilings follow
        print(f"Measuring the ceilings live failed ({type(exc).__name__}: {exc}); showing the recorded ones.")
        return None, None
    ev = evidence.live("ceilings", values, command="infralens_lab.measure.ceilings.measure(quick=True)",
                       units=units, notes=notes)
    return ev, Ceilings.from_evidence(ev)


def kernel_tables_by_gpu() -> dict[str, pd.DataFrame]:
    """The kernel table (:func:`kernel_table`) of every recorded set, keyed by GPU name without the
    vendor prefix: the input of :func:`infralens_lab.analysis.compare.placement`."""
    out = {}
    for slug in evidence.recordings():
        st = evidence.reference(slug)
        kt = store_kernel_table(st)
        if kt is not None:
            out[st.gpu.removeprefix("NVIDIA ")] = kt
    return out
