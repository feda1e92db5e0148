"""Lab 02's readings of its tables, as rules with tests: sentences computed from the kernel, copy, ceiling and
hierarchy tables, so every number and every verdict word in the lab's prose follows from the evidence.

Inputs are the tables of :mod:`infralens_lab.analysis.counters` (``kernel_table``, ``copy_table``,
``hierarchy_points``, ``tensor_op_check``), :class:`~infralens_lab.analysis.hardware.Ceilings` and
:mod:`infralens_lab.analysis.launches`' matmul table. Verdicts come from the one rule
(:func:`infralens_lab.analysis.roofline.verdict`); clocks from :mod:`infralens_lab.analysis.clocks`.
SI units in, the units named in each sentence out.
"""
from __future__ import annotations

import math

import pandas as pd

from ..units import MiB
from . import clocks
from . import roofline as rl
from . import traffic as tr
from .hardware import memory_word

NEAR = 0.25  # a level's model "predicts" the DRAM bytes when within 25% of them


def measured_ridges(ceilings) -> pd.DataFrame:
    """Ridge point (FLOP/byte) of each measured matmul rate against the measured copy bandwidth."""
    return pd.DataFrame([{"roof": f"{d} matmul", "TFLOP/s": getattr(ceilings, d) / 1e12,
                          "copy TB/s": ceilings.copy_bw / 1e12,
                          "ridge (FLOP/B)": rl.ridge(getattr(ceilings, d), ceilings.copy_bw)}
                         for d in ("fp32", "tf32", "fp16", "bf16") if getattr(ceilings, d, None)])


def kernel_notes(kt: pd.DataFrame) -> list[str]:
    """Sentences read off a kernel table: where measured and predicted intensity part ways (and which way),
    and each matmul's verdict with the unit that decided it."""
    if kt is None or kt.empty:
        return []
    out = []
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
        out.append("Matmuls: " + ", ".join(f"{int(r['size'])}³ {r['bound']} ({r['decided_by']} {r['decided_pct']:.0f}%)"
                                           for _, r in mm.iterrows())
                   + (f"; the first at or right of the ridge is {int(right['size'].iloc[0])}³." if len(right)
                      else "; none reaches the ridge."))
    return out


def matmul_notes(t: pd.DataFrame) -> list[str]:
    """What :func:`infralens_lab.analysis.launches.matmul_launches` says about each latency-bound size and about
    the host, in sentences: waves, achieved occupancy, the tensor pipe's share, and per call the host gap."""
    out = []
    for _, r in t.iterrows():
        fill = ("fills the GPU" if r["waves"] >= 1 else f"leaves {1 - r['waves']:.0%} of the GPU's block slots empty")
        pipe = f"; tensor pipe busy {r['tensor_pipe_pct']:.0f}% of the cycles" if pd.notna(r["tensor_pipe_pct"]) else ""
        out.append(f"{int(r['size'])}³: {int(r['ctas'])} CTAs = {r['waves']:.2f} waves ({fill}), achieved occupancy "
                   f"{r['occupancy_pct']:.0f}%{pipe}, {r['kernel_us']:.1f} µs at {r['clock_ghz']:.2f} GHz")
    if "paced_by" in t.columns:
        host = t[t["paced_by"] == "host"]
        if len(host):
            per, ker = _span(host["per_call_us"], ".0f"), _span(host["kernel_us"], ".1f")
            out.append("Called back to back, " + ", ".join(f"{int(r['size'])}³" for _, r in host.iterrows())
                       + f" wait on the host: {per} µs per call against {ker} µs of kernel ({t['timing'].iloc[0]}).")
        out += [line for _, r in t[t["paced_by"] == "kernel"].iterrows() if (line := slower_back_to_back(r))]
    return out


SLOWER = 1.10  # a kernel-paced call this much longer than its kernel gets a sentence on why


def slower_back_to_back(r) -> str | None:
    """For a kernel-paced size whose calls back to back take at least :data:`SLOWER` times its kernel: why it is
    not the host. The host issues a call in ``cpu_issue_us``, far less than the kernel runs, so the queue never
    ran dry; the extra time per call is the kernel itself running slower back to back than alone (single calls,
    Nsight Compute), which for the same work is a lower clock. The sweep did not sample its clock, so the sentence
    says so. None when the call is within :data:`SLOWER` of the kernel or no CPU issue time was recorded."""
    issue = r.get("cpu_issue_us")
    if issue is None or math.isnan(issue) or not r["per_call_us"] >= SLOWER * r["kernel_us"] or issue >= r["kernel_us"]:
        return None
    return (f"{int(r['size'])}³: {r['per_call_us']:,.0f} µs per call back to back against a {r['kernel_us']:,.0f} µs "
            f"kernel, yet the host issues a call in {issue:,.0f} µs, so the GPU's queue never ran dry: the extra "
            f"{r['per_call_us'] - r['kernel_us']:,.0f} µs per call is the kernel running slower back to back than "
            f"alone ({r['single_call_us']:,.0f} µs for a single call, {r['kernel_us']:,.0f} µs under Nsight Compute "
            f"at {r['clock_ghz']:.2f} GHz): the same work at a lower clock, we think (the sweep did not sample its "
            "clock).")


def _small_matmuls(kt: pd.DataFrame, mt: pd.DataFrame | None) -> pd.DataFrame:
    """The latency-bound matmul rows of a kernel table, with achieved occupancy and the tensor pipe's busy share
    from :func:`~infralens_lab.analysis.launches.matmul_launches` (``mt``) joined by size when given."""
    rows = kt[(kt["group"] == "matmul fp16") & (kt["bound"] == "latency")].copy()
    if mt is not None:
        m = mt.set_index("size")
        rows["occupancy_pct"] = [m["occupancy_pct"].get(int(z), float("nan")) for z in rows["size"]]
        rows["tensor_pipe_pct"] = [m["tensor_pipe_pct"].get(int(z), float("nan")) for z in rows["size"]]
    return rows


def idle_sm_notes(kt: pd.DataFrame, mt: pd.DataFrame | None = None) -> list[str]:
    """Per latency-bound matmul of a kernel table (``counters.kernel_table``: ``waves``, ``bound_reasons``,
    ``decided_by``, ``decided_pct``), whether idle SMs are its story, by the verdict's own rule
    (:func:`infralens_lab.analysis.roofline.verdict`): a grid below :data:`~infralens_lab.analysis.roofline.BOUND_THRESHOLD`
    waves caps the kernel under the threshold on its own, so more blocks come first; a larger grid fills more of
    the GPU than its busiest unit reaches, so idle SMs cost it at most 1 / waves and the rest is inside the kernel.
    ``mt`` adds achieved occupancy."""
    t, out = rl.BOUND_THRESHOLD, []
    for _, r in _small_matmuls(kt, mt).iterrows():
        w, occ = r["waves"], r.get("occupancy_pct", float("nan"))
        occ = f"; achieved occupancy {occ:.0f}%" if occ == occ else ""
        unit = f"its busiest unit ({r['decided_by']}) reaches {r['decided_pct']:.0f}%"
        if rl.GRID_BELOW_WAVE in r["bound_reasons"]:
            out.append(f"{r['label']}: {w:.2f} waves leave {1 - w:.0%} of the GPU's block slots empty, under the rule's "
                       f"{t:g} waves: the grid alone keeps it under {t:.0%} of every roof, so idle SMs come first "
                       f"(more blocks per launch); {unit}{occ}.")
        elif w == w:
            fill = "fill the GPU" if w >= 1 else f"fill {w:.0%} of the GPU's block slots ({1 - w:.0%} empty)"
            cost = "" if w >= 1 else f", so idle SMs cost it at most {1 / w:.2f}x"
            out.append(f"{r['label']}: {w:.2f} waves {fill}, more than the {r['decided_pct']:.0f}% its busiest unit "
                       f"({r['decided_by']}) reaches{cost}: the rest of its distance to "
                       f"{t:.0%} is inside the kernel{occ}.")
    return out


def small_matmul_summary(kt: pd.DataFrame, mt: pd.DataFrame | None = None) -> str:
    """One sentence over the latency-bound matmuls, split by the same rule as :func:`idle_sm_notes`: the sizes
    whose grid is below one wave (idle SMs first) and the sizes whose grid fills more of the GPU than their
    busiest unit reaches (with the tensor pipe's idle share from ``mt``: the counters inside the kernel say why)."""
    rows = _small_matmuls(kt, mt)
    if rows.empty:
        return "No matmul size is latency-bound in this recording."
    low = rows[rows["bound_reasons"].str.contains(rl.GRID_BELOW_WAVE)]
    rest = rows.drop(low.index)
    parts = []
    if len(low):
        parts.append(", ".join(f"{r['label'].split()[-1]} ({r['waves']:.2f} waves)" for _, r in low.iterrows())
                     + f" {'runs' if len(low) == 1 else 'run'} a grid below one wave, where idle SMs come first")
    if len(rest):
        pipe = ""
        if "tensor_pipe_pct" in rest and rest["tensor_pipe_pct"].notna().all():
            pipe = (f" and still {'leaves' if len(rest) == 1 else 'leave'} the tensor pipe idle in "
                    f"{_span(100 - rest['tensor_pipe_pct'], '.0f')}% of the cycles")
        parts.append(", ".join(f"{r['label'].split()[-1]} ({r['waves']:.2f} waves)" for _, r in rest.iterrows())
                     + f" {'fills' if len(rest) == 1 else 'fill'} more of the GPU than the busiest unit reaches{pipe}: "
                       "there the counters inside the "
                       "kernel, not the grid, say why")
    return "Small matmuls differ by size: " + "; ".join(parts) + "."


def _span(values: pd.Series, fmt: str) -> str:
    lo, hi = format(float(values.min()), fmt), format(float(values.max()), fmt)
    return lo if lo == hi else f"{lo} to {hi}"


def with_dram_model(ct: pd.DataFrame, elem_bytes: int = 4) -> pd.DataFrame:
    """A copy table plus ``predicted_dram_read_amplification``: the two-level model's DRAM bytes read per
    useful byte (64-byte fetches between HBM and L2, :func:`infralens_lab.analysis.traffic.sector_model`),
    beside the 32-byte sector one (L1-L2). ``elem_bytes``: the copies' element size (fp32 recorded)."""
    out = ct.copy()
    out["predicted_dram_read_amplification"] = [tr.sector_model(int(s), elem_bytes).dram_read_amplification
                                                for s in out["stride"]]
    return out


def copy_notes(ct: pd.DataFrame) -> list[str]:
    """Where each level's model predicts the measured DRAM read amplification (within :data:`NEAR`)."""
    if ct is None or ct.empty:
        return []
    out = []
    for col, unit in (("predicted_read_amplification", "32-byte sector (L1-L2)"),
                      ("predicted_dram_read_amplification", "64-byte fetch (HBM-L2)")):
        if col not in ct.columns:
            continue
        near = (ct["read_amplification"] - ct[col]).abs() <= NEAR * ct[col]
        miss = "; not for: " + ", ".join(f"{r['label']} ({r['read_amplification']:.3g}x measured vs {r[col]:.3g}x)"
                                         for _, r in ct[~near].iterrows()) if (~near).any() else ""
        out.append(f"The {unit} model predicts the DRAM bytes read within {NEAR:.0%} for {int(near.sum())} of "
                   f"{len(ct)} copies{miss}.")
    return out


def copy_over_ceiling(ct: pd.DataFrame, ceilings, l2_bytes: int) -> list[str]:
    """Why a copy can sit above the measured copy ceiling (issue 26.11), computed per copy that does. The
    ceiling is torch ``copy_`` of 1 GiB (2 GiB read + written) timed back to back, so each call's writes left in
    L2 drain during the next; under Nsight Compute a kernel's ``dram__bytes_write.sum`` stops at its end, and the
    writes still in L2 then are neither counted nor waited for, while the useful rate counts every byte stored.
    A copy whose DRAM traffic itself beats the ceiling reads more than it writes."""
    out = []
    bw = ceilings.copy_bw
    for _, r in ct.iterrows():
        useful, dram = r["useful_TBps"] * 1e12, r["dram_TBps"] * 1e12
        if useful > bw:
            stored = r["useful_bytes"] / 2  # a copy writes what it reads (useful read = useful written)
            left = max(0.0, stored - r["dram_write_bytes"])
            out.append(f"{r['label']}: {useful / 1e12:.2f} TB/s of useful bytes is {useful / bw:.2f}x the copy ceiling "
                       f"({bw / 1e12:.2f} TB/s), yet its DRAM traffic is {dram / 1e12:.2f} TB/s ({dram / bw:.0%} of the "
                       f"ceiling): {left / MiB:.0f} MiB of the {stored / MiB:.0f} MiB it stored were still in the "
                       f"{l2_bytes / MiB:.0f} MiB L2 when it ended (dram__bytes_write.sum {r['dram_write_bytes'] / MiB:.0f} "
                       f"MiB). The useful rate counts them; the ceiling's back-to-back copy_ pays for such bytes in "
                       f"its next call.")
        elif dram > bw:
            out.append(f"{r['label']}: its DRAM traffic, {dram / 1e12:.2f} TB/s, is {dram / bw:.0%} of the copy ceiling "
                       f"while it reads {r['read_amplification']:.0f}x the bytes it needs; copy_ reads and writes "
                       f"equally, this copy mostly reads. We think a read-heavy stream turns the "
                       f"{memory_word(ceilings.gpu)} bus around less often; a read-only kernel's DRAM rate would show it.")
    return out


def tensor_counter_sentence(factor: float | None, check: pd.DataFrame | None) -> str:
    """What the lab did with the tensor counters (:func:`~infralens_lab.analysis.counters.tensor_op_check`)."""
    if check is None or check.empty:
        return "No recorded matmul counters: tensor-core FLOPs cannot be checked, so the nominal counts are used."
    parts = []
    fpi = check["flops_per_inst"].dropna()
    if len(fpi):
        parts.append(f"2·M·N·K per tensor-pipe instruction ranges from {fpi.min():,.0f} to {fpi.max():,.0f} FLOPs over "
                     f"the recorded matmuls: the instruction count depends on the MMA shape each kernel uses, so it "
                     f"is not a FLOP count.")
    r = float(check["ops_over_2mnk"].median()) if check["ops_over_2mnk"].notna().any() else None
    if r is None:
        parts.append("This recording has no tensor-path op counter (sm__ops_path_tensor_src_fp16*), so kernels that use "
                     "tensor cores are placed with the traffic model's nominal FLOPs (2 per multiply-add).")
    elif factor is None:
        parts.append(f"The tensor-path op counter / (2·M·N·K) has median {r:.3g}: it did not see these kernels' tensor "
                     f"work, so tensor-core kernels are placed with the traffic model's nominal FLOPs.")
    else:
        what = "FLOPs (a multiply-add counts two)" if factor == 1.0 else \
            "multiply-adds (one per FMA), so it is doubled" if factor == 2.0 else f"units worth {factor:.3g} FLOPs"
        parts.append(f"The tensor-path op counter / (2·M·N·K) has median {r:.3g} over the recorded matmuls: it counts "
                     f"{what}; tensor-core FLOPs below are that counter × {factor:g}.")
    return " ".join(parts)


def clock_notes(frames: list, text: str, peak_fp16: float | None, per_sm_cycle: float | None, sms: int) -> list[str]:
    """Issue 26.9, computed: whether ncu locked the clocks (``text``: a recorded ncu CSV), the range of SM clocks
    the kernels in ``frames`` ran at against the device's highest, and what a clock does to a % of peak (the
    datasheet's fp16 ``peak_fp16`` FLOP/s holds at the clock where ``sms`` SMs doing ``per_sm_cycle`` FLOPs per
    cycle reach it)."""
    ctl = clocks.clock_control(text)
    lo, hi = clocks.clock_range_ghz(frames)
    top = clocks.max_clock_hz(text)
    out = [f"Clock control: --clock-control {ctl} ({'not locked: each kernel ran at the clock the GPU chose' if ctl == 'none' else 'locked to the base clock'}). "
           f"The profiled kernels ran between {lo:.2f} and {hi:.2f} GHz"
           + (f"; the device's highest SM clock is {top / 1e9:.2f} GHz." if top else ".")]
    if top and round(hi, 2) > round(top / 1e9, 2):  # the two numbers as printed above disagree
        out[0] += (f" The fastest reading is {hi * 1e9 / top - 1:.1%} above that highest clock. The reading is "
                   f"{clocks.CLOCK}, elapsed SM cycles over the kernel's measured duration; we think a reading this "
                   "close to the maximum is the maximum within that division's error (Nsight Compute does not "
                   "report the error), not a faster clock.")
    if peak_fp16 and per_sm_cycle:
        f = clocks.clock_of_peak(peak_fp16, per_sm_cycle, sms)
        out.append(f"The datasheet's {peak_fp16 / 1e12:.1f} TFLOP/s is {sms} SMs × {per_sm_cycle:,.0f} FLOP per SM-cycle "
                   f"(read off the matmuls' counters) at {f / 1e9:.2f} GHz. A kernel that kept the tensor pipe busy "
                   f"every cycle would reach {clocks.rate_share_at_clock(1.0, lo * 1e9, f):.0%} of it at {lo:.2f} GHz and "
                   f"{clocks.rate_share_at_clock(1.0, hi * 1e9, f):.0%} at {hi:.2f} GHz: a FLOP/s against a fixed FLOP/s "
                   f"peak moves with the clock. Nsight's SM % and Memory % are per elapsed cycle, so they do not.")
    return out


def hierarchy_notes(points: pd.DataFrame | None) -> list[str]:
    """Per kernel of :func:`~infralens_lab.analysis.counters.hierarchy_points`: bytes L2 (and L1) moved per DRAM
    byte (on-chip reuse), and which kernels have no L1 point."""
    if points is None or points.empty:
        return []
    out = []
    for name, g in points.groupby("series", sort=False):
        b = dict(zip(g["group"], g["bytes"], strict=True))
        if "DRAM" not in b or "L2" not in b:
            continue
        parts = [f"L2 {b['L2'] / b['DRAM']:.2g}x"] + ([f"L1 {b['L1'] / b['DRAM']:.2g}x"] if "L1" in b else [])
        out.append(f"{name}: bytes per DRAM byte: " + ", ".join(parts))
    if points.attrs.get("l1_bypass"):
        out.append("No L1 point (L1/TEX bytes under 1% of L2 bytes: loads that bypass L1TEX, such as TMA copies "
                   "from L2 to shared memory): " + ", ".join(points.attrs["l1_bypass"]))
    return out
