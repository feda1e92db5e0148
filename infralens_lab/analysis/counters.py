"""ncu counters as the roofline reads them: FLOPs and bytes per launch, tensor-op checks, unit handling,
and the per-kernel bound table of lab 02.

Input: the tidy frame of :func:`infralens_lab.parse.ncu.parse_raw_csv` (recorded files join runs in
``==INFRALENS== config: <label>`` blocks, labels read by :class:`infralens_lab.parse.runs.RunConfig`).
Per launch: time ``gpu__time_duration.sum`` (ns), DRAM bytes ``dram__bytes_read.sum`` +
``dram__bytes_write.sum``, CUDA-core FLOPs from ``sm__sass_thread_inst_executed_op_{fadd,fmul,ffma,hadd,hmul,hfma}_pred_on.sum``
(an FMA counts 2) and tensor-core work from the tensor-path op counter (:data:`~infralens_lab.parse.ncu.TENSOR_OPS_NAMES`).
What one unit of that tensor counter is worth in FLOPs is not assumed: :func:`tensor_op_check` divides it by
the 2·M·N·K of the recorded matmuls and :func:`tensor_flops_per_op` reads the factor off that evidence.
Predictions come from :mod:`infralens_lab.analysis.traffic`, bounds from the series' one rule
(:func:`infralens_lab.analysis.roofline.classify`). SI units: seconds, bytes, FLOP, byte/s, FLOP/s.
"""
from __future__ import annotations

import math
import re

import pandas as pd

from ..parse.ncu import (
    CLOCK,
    FLOP_METRICS,
    FLOP_WEIGHTS,
    GRID,
    HIERARCHY,
    SOL,
    TENSOR_INST,
    TENSOR_OPS_NAMES,
    WAVES,
    parse_raw_csv,
    wide,
)
from ..parse.runs import RunConfig
from . import roofline as rl
from . import traffic as tr
from .hardware import Ceilings, has_fp8, peak_per_cycle

TIME = "gpu__time_duration.sum"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
L1_BYTES, L2_BYTES = HIERARCHY
TENSOR_KERNELS = ("naive_qk", "naive_pv", "attn_fwd", "attn_fwd_fast", "matmul")  # tl.dot / cuBLAS on tensor cores


def parse_config(label: str) -> dict:
    """The recorder's run label as a dict (:meth:`RunConfig.fields`): ``family`` (copy, copy_strided,
    attention, matmul), the shape fields as ints, ``dtype`` and ``elem_bytes``. ValueError for a label
    it does not know."""
    if not isinstance(label, str):
        raise TypeError(f"config label is {type(label).__name__}; expected a str such as 'matmul size=256,256,256 fp16'")
    return RunConfig.parse(label).fields()


def wide_counters(df) -> pd.DataFrame:
    """One row per (config, kernel, launch), one column per metric (floats)."""
    return wide(df)


def _col(w: pd.DataFrame, metric: str) -> pd.Series:
    return w[metric].fillna(0.0) if metric in w.columns else pd.Series(0.0, index=w.index)


def _tensor_ops(w: pd.DataFrame) -> pd.Series:
    """The tensor-path op counter under the first name the recording has, else all NaN."""
    for name in TENSOR_OPS_NAMES:
        if name in w.columns:
            return w[name]
    return pd.Series(math.nan, index=w.index)


def counter_flops(w: pd.DataFrame, tensor_flops_per_op: float | None) -> pd.DataFrame:
    """Per launch: ``cuda_core_flops`` (fadd + fmul + 2·ffma + hadd + hmul + 2·hfma, thread
    instructions), ``tensor_ops`` (the tensor-path op counter, 0 where absent), ``tensor_inst``
    (tensor-pipe instructions), ``tensor_flops`` (ops × factor, NaN when the factor is unknown)
    and ``flops`` (their sum)."""
    out = w.copy()
    out["cuda_core_flops"] = sum(FLOP_WEIGHTS[op] * _col(w, m) for op, m in FLOP_METRICS.items())
    out["tensor_ops"] = _tensor_ops(w).fillna(0.0)
    out["tensor_inst"] = _col(w, TENSOR_INST)
    f = math.nan if tensor_flops_per_op is None else float(tensor_flops_per_op)
    out["tensor_flops"] = out["tensor_ops"] * f
    out["flops"] = out["cuda_core_flops"] + out["tensor_flops"].fillna(0.0)
    return out


def tensor_op_check(matmul_df) -> pd.DataFrame:
    """Per recorded matmul: M, N, K, its kernels, the nominal 2·M·N·K, and what the tensor counters
    say: ``tensor_ops`` with ``ops_over_2mnk`` (1 means the op counter counts FLOPs, an FMA as two;
    0.5 means it counts multiply-adds; NaN when the recording lacks it) and ``tensor_inst`` with
    ``flops_per_inst`` (2·M·N·K per tensor-pipe instruction, which changes with the MMA shape the
    library picked, so an instruction count is not a FLOP count)."""
    w = wide_counters(matmul_df)
    has_ops = any(n in w.columns for n in TENSOR_OPS_NAMES)
    rows = []
    for cfg, g in w.groupby("config", sort=False):
        c = parse_config(cfg)
        nominal = 2 * c["M"] * c["N"] * c["K"]
        ops = float(_tensor_ops(g).sum()) if has_ops else math.nan
        inst = float(_col(g, TENSOR_INST).sum())
        rows.append({"config": cfg, "M": c["M"], "N": c["N"], "K": c["K"], "kernels": len(g),
                     "nominal_2MNK": nominal, "tensor_ops": ops, "ops_over_2mnk": ops / nominal,
                     "tensor_inst": inst, "flops_per_inst": nominal / inst if inst else math.nan})
    return pd.DataFrame(rows)


def tensor_flops_per_op(check: pd.DataFrame) -> float | None:
    """FLOPs one unit of the tensor counter stands for, read off :func:`tensor_op_check`: the
    median ``ops_over_2mnk`` over the matmuls of at least 1024³ (cuBLAS may pad small
    problems to its tile size, which inflates their counts), snapped to 1 (the counter counts
    FLOPs) or 0.5 (it counts multiply-adds: 2 FLOPs each) when within 5%, else the measured ratio
    as is; None when the counter saw (almost) nothing, i.e. it does not cover the tensor
    instructions these kernels use."""
    if check is None or check.empty or check["ops_over_2mnk"].isna().all():
        return None
    big = check[check["M"] * check["N"] * check["K"] >= 1024 ** 3]
    r = float((big if len(big) else check)["ops_over_2mnk"].median())
    if not r > 0.05:
        return None
    for snap in (1.0, 0.5):
        if abs(r - snap) <= 0.05 * snap:
            return 1.0 / snap
    return 1.0 / r


# ---------------------------------------------------------------- predictions
def predicted(cfg: dict, kernel: str, grid_size: float | None = None) -> tr.Traffic | None:
    """The traffic model's prediction for one kernel of a recorded run (None for a kernel the
    model does not cover). For the tiled kernels BLOCK_M is read off the launch's grid size
    (grid = ceil(N / BLOCK_M) × B·H), so the prediction uses the tile the GPU actually ran."""
    fam = cfg["family"]
    if fam == "copy":
        return tr.copy_traffic(cfg["n"], cfg["elem_bytes"], 1)
    if fam == "copy_strided":
        return tr.copy_traffic(cfg["n"], cfg["elem_bytes"], cfg["stride"])  # n = output (useful) elements
    if fam == "matmul":
        return tr.matmul_traffic(cfg["M"], cfg["N"], cfg["K"], cfg["elem_bytes"])
    B, H, N, D, e = cfg["B"], cfg["H"], cfg["N"], cfg["D"], cfg["elem_bytes"]
    if kernel.startswith("naive_"):
        return next((t for t in tr.attention_naive_traffic(B, H, N, D, e) if t.kernel == kernel), None)
    if kernel.startswith("attn_fwd") and grid_size and grid_size > 0:
        block_m = round(N * B * H / grid_size)
        return tr.attention_tiled_traffic(B, H, N, D, e, block_m=max(block_m, 1))
    return None


# ---------------------------------------------------------------- the kernel table
_NAIVE_NOTE = {
    "naive_qk": "fusion: a tiled kernel computes QKᵀ tile by tile on chip and never writes S to DRAM",
    "naive_softmax": "fusion: its whole job is reading S and writing P; fused into the tiled kernel it disappears",
    "naive_pv": "fusion: reading P back from DRAM is what a flash kernel avoids",
}


def what_moves_it(kind: str, fraction: float, kernel: str, reasons: str = "", waves: float | None = None,
                  tensor: bool = False, fp8: bool | None = True) -> str:
    """A sentence: what would raise this kernel's FLOP/s, given its bound and how close it is to
    the roof (``fraction`` of the attainable rate, or of the bandwidth for a copy); for a latency-bound kernel,
    ``waves`` (ncu ``launch__waves_per_multiprocessor``) says how much of the GPU its grid fills; ``tensor``: it
    already runs on tensor cores (so they are not the lever); ``fp8``: the GPU has fp8 tensor cores
    (:func:`~infralens_lab.analysis.hardware.has_fp8`; False names the lower precision it does have)."""
    if kernel in _NAIVE_NOTE:
        return _NAIVE_NOTE[kernel]
    if kernel == "copy_strided" and kind == "memory":
        return ("a layout that makes the reads contiguous: DRAM is busy, but most of every sector it moves is "
                "thrown away")
    if kernel in ("copy", "copy_coalesced") and kind == "memory":
        return "nothing on this GPU: a copy near the memory roof is done; only moving fewer bytes (fusing it away) helps"
    if kind == "memory":
        if fraction >= rl.BOUND_THRESHOLD:
            return "at its memory roof: only a higher intensity helps (reuse on chip: tiling, fusion, less traffic)"
        return "toward the memory roof first (coalescing, wider loads, more bytes in flight), then intensity"
    if kind == "compute":
        if fraction >= rl.BOUND_THRESHOLD:
            if tensor:
                lower = "fp8" if fp8 is not False else "int8, this GPU's tensor cores have no fp8"
                return f"at its compute roof, already on tensor cores: fewer FLOPs (algorithm) or a lower precision ({lower})"
            return "at its compute roof: fewer FLOPs (algorithm) or a faster unit (tensor cores, lower precision)"
        return "toward the compute roof (tensor-core-friendly tiles, pipelining, occupancy)"
    if rl.GRID_BELOW_WAVE in reasons:
        return "neither roof binds and SMs sit idle: more blocks per launch (smaller tiles, split the work) first"
    lever = "more work per launch, or hide latency (more warps, async loads)"
    if waves is None or waves != waves:
        return f"neither roof binds: {lever}"
    if waves < 1:
        return (f"neither roof binds, and its grid fills {waves:.0%} of the GPU's block slots, more than any unit reaches: "
                f"{lever}")
    return f"neither roof binds though the grid fills the GPU: {lever}"


def kernel_table(frames: list, ceilings, tensor_flop_factor: float | None,
                 launch_floor_s: float | None = None) -> pd.DataFrame:
    """One row per kernel (attention kernels by name; a matmul's kernels summed into one row per
    size) from tidy ncu frames, with measured and predicted intensity, achieved FLOP/s, the roof it
    is judged against (:func:`compute_roof`: SMs x the fp16 tensor or fp32 peak per cycle x the kernel's own clock,
    ``roof_TFLOPs`` and ``roof_basis``; the measured copy bandwidth for DRAM), its bound and what would move it. Copies are left out:
    they do no floating-point work (see :func:`copy_table`). The verdict is the series' one rule over every
    unit measured (:func:`infralens_lab.analysis.roofline.classify`): ``bound``, ``decided_by`` (the unit:
    ``FLOP/s roof``, ``DRAM roof``, ``SM %``, ``Memory %``) and ``decided_pct`` (its % of peak), ``bound_reasons``
    for a latency-bound kernel (from ncu ``launch__waves_per_multiprocessor``), ``bound_text`` (the sentence; it
    also says when back-to-back calls would wait on the host, against ``launch_floor_s``, default the
    ceilings' timed floor of the smallest matmul). ``sm_pct``, ``memory_pct``: the speed of light (time-weighted
    over a matmul's kernels); ``clock_ghz``: the SM clock it ran at (``sm__cycles_elapsed.avg.per_second``)."""
    if launch_floor_s is None:
        launch_floor_s = getattr(ceilings, "launch_floor_s", None)
    rows = []
    for df in frames:
        if df is None:
            continue
        w = counter_flops(wide_counters(df), tensor_flop_factor)
        for cfg_label, g in w.groupby("config", sort=False):
            cfg = parse_config(cfg_label)
            if cfg["family"] in ("copy", "copy_strided"):
                continue
            groups = [(f"matmul {cfg['M']}³", g)] if cfg["family"] == "matmul" else \
                [(k, gg) for k, gg in g.groupby("kernel", sort=False)]
            for label, gg in groups:
                kernel = str(gg["kernel"].iloc[0]) if cfg["family"] != "matmul" else "matmul"
                rows.append(_kernel_row(label, kernel, cfg, cfg_label, gg, ceilings, tensor_flop_factor,
                                        launch_floor_s))
    return pd.DataFrame(rows)


def _time_weighted(g: pd.DataFrame, metric: str) -> float | None:
    """``metric`` (a % of peak) averaged over the rows of ``g`` weighted by their ncu time; None if absent."""
    if metric not in g.columns or g[metric].isna().all():
        return None
    t = _col(g, TIME)
    return float((g[metric].fillna(0.0) * t).sum() / t.sum()) if t.sum() > 0 else float(g[metric].mean())


def compute_roof(ceilings, dtype: str, clock_hz: float | None, sm_count: float | None) -> tuple[float, str]:
    """``(FLOP/s, basis)``: the compute roof a kernel is judged against, per cycle at the kernel's own clock, so a
    verdict never divides a rate measured at one clock by a ceiling timed at another (issue 37): ``sm_count x
    PEAK_PER_CYCLE[compute capability][dtype] x clock_hz``. Falls back to the measured ceiling (FLOP/s, its own
    clock) when the kernel's clock, its SM count or the GPU's per-cycle peak is unknown, and says so in ``basis``."""
    ppc = peak_per_cycle(ceilings.compute_capability, dtype) if getattr(ceilings, "compute_capability", None) else None
    if ppc and clock_hz and sm_count and clock_hz > 0 and sm_count > 0:
        return (sm_count * ppc * clock_hz,
                f"{int(sm_count)} SMs x {ppc:,} FLOP/cycle ({dtype}) x the kernel's {clock_hz / 1e9:.2f} GHz")
    return ceilings.rate(dtype), f"measured {dtype} ceiling (the kernel's clock or the GPU's per-cycle peak unknown)"


def _kernel_row(label, kernel, cfg, cfg_label, g, ceilings, factor, launch_floor_s=None) -> dict:
    launches = len(g) if cfg["family"] != "matmul" else 1
    t = float(_col(g, TIME).sum()) * 1e-9 / launches
    dram = float((_col(g, DRAM_READ) + _col(g, DRAM_WRITE)).sum()) / launches
    tensor = float(g["tensor_ops"].sum()) > 0 or float(g["tensor_inst"].sum()) > 0
    flops = float(g["flops"].sum()) / launches
    grid = float(g[GRID].iloc[0]) if GRID in g.columns else None
    pred = predicted(cfg, kernel, grid)
    source = "counters"
    if pred is not None and pred.flops > 0 and ((tensor and factor is None) or flops == 0):
        # the tensor counter's unit is unknown, or the counters saw no FLOPs: use the model's count
        source = "nominal (tensor counter unit unknown)" if tensor else "nominal (counters saw no FLOPs)"
        flops = float(pred.flops)
        tensor = tensor or kernel in TENSOR_KERNELS
    roof_name = "fp16 tensor" if tensor else "fp32 CUDA core"
    clock = _time_weighted(g, CLOCK[0])  # Hz: the SM clock the kernel ran at (ncu --clock-control none)
    peak, roof_basis = compute_roof(ceilings, "fp16" if tensor else "fp32", clock,
                                    float(g["launch__sm_count"].iloc[0]) if "launch__sm_count" in g.columns else None)
    group = {"attention": "attention naive" if kernel.startswith("naive_") else "attention tiled",
             "matmul": "matmul fp16"}[cfg["family"]]
    waves = float(g[WAVES].max()) if WAVES in g.columns else None
    sol = [_time_weighted(g, m) for m in SOL]  # several kernels (a matmul's): weighted by their time
    b = rl.classify(flops, dram, t, peak, ceilings.copy_bw, waves=waves, launch_floor_s=launch_floor_s,
                    sm_pct=sol[0], memory_pct=sol[1]) if flops > 0 and dram > 0 and t > 0 else None
    return {
        "label": label, "group": group, "kernel": kernel, "config": cfg_label,
        "size": cfg["M"] if cfg["family"] == "matmul" else math.nan,
        "time_us": t * 1e6, "dram_bytes": dram, "flops": flops, "flops_source": source,
        "intensity": dram and flops / dram, "flops_per_s": flops / t if t else math.nan,
        "predicted_bytes": pred.bytes if pred else math.nan, "predicted_flops": pred.flops if pred else math.nan,
        "predicted_intensity": pred.intensity if pred else math.nan,
        "roof": roof_name, "roof_basis": roof_basis, "roof_TFLOPs": peak / 1e12, "ridge": b.ridge if b else math.nan,
        "attainable_per_s": b.attainable if b else math.nan,
        "attainable_TFLOPs": b.attainable / 1e12 if b else math.nan,
        "fraction_of_roof": b.fraction_of_roof if b else math.nan,
        "bound": b.kind if b else "unknown", "bound_reasons": ", ".join(b.reasons) if b else "",
        "decided_by": b.unit if b else "", "decided_pct": 100 * b.unit_fraction if b else math.nan,
        "sm_pct": sol[0] if sol[0] is not None else math.nan, "memory_pct": sol[1] if sol[1] is not None else math.nan,
        "clock_ghz": clock / 1e9 if clock else math.nan,
        "bound_text": (b.explanation if b.explanation.startswith(f"{b.kind}-bound") else
                       f"{b.kind}-bound: {b.explanation}") if b else "",
        "waves": waves if waves is not None else math.nan,
        "above_ridge": bool(b and b.intensity >= b.ridge),
        "what_would_move_it": what_moves_it(b.kind, b.fraction_of_roof, kernel, ", ".join(b.reasons), waves,
                                            tensor, has_fp8(getattr(ceilings, "compute_capability", None)))
        if b else "",
    }


def store_kernel_table(store) -> pd.DataFrame | None:
    """:func:`kernel_table` of a recorded set (its ``ncu_attention.csv``, ``ncu_matmul.csv`` and ``ceilings``),
    the tensor counter's unit checked on its matmuls; None when the set lacks one of them. Labs 02 and 04 both
    read their kernels' bound from here, so one kernel gets one verdict."""
    files, names = store.files(), store.names()
    if "ncu_attention.csv" not in files or "ncu_matmul.csv" not in files or "ceilings" not in names:
        return None
    attn, mm = parse_raw_csv(store.text("ncu_attention.csv")), parse_raw_csv(store.text("ncu_matmul.csv"))
    ceil = Ceilings.from_store(store)
    return kernel_table([attn, mm], ceil, tensor_flops_per_op(tensor_op_check(mm)))


def copy_table(df, ceilings) -> pd.DataFrame:
    """One row per recorded copy: stride, time, DRAM bytes read and written, useful bytes (what
    the copy needs), measured and predicted read amplification, DRAM and useful bandwidth, the
    fraction of the measured copy bandwidth reached, and the bound (a copy does no FLOPs, so it
    is judged on bandwidth: memory-bound or latency-bound)."""
    rows = []
    w = wide_counters(df)
    for cfg_label, g in w.groupby("config", sort=False):
        cfg = parse_config(cfg_label)
        if cfg["family"] not in ("copy", "copy_strided"):
            continue
        stride = cfg.get("stride", 1)
        pred = predicted(cfg, str(g["kernel"].iloc[0]))
        t = float(_col(g, TIME).mean()) * 1e-9
        rd, wr = float(_col(g, DRAM_READ).mean()), float(_col(g, DRAM_WRITE).mean())
        clock = float(g[CLOCK[0]].mean()) if CLOCK[0] in g.columns else math.nan
        useful = pred.useful_bytes_read + pred.bytes_written
        b = rl.classify(0, rd + wr, t, ceilings.rate("fp32"), ceilings.copy_bw,
                        waves=float(g[WAVES].max()) if WAVES in g.columns else None)
        kernel = str(g["kernel"].iloc[0])
        rows.append({"label": kernel if cfg["family"] == "copy" else f"copy_strided ×{stride}", "kernel": kernel,
                     "stride": stride,
                     "time_us": t * 1e6, "dram_read_bytes": rd, "dram_write_bytes": wr, "useful_bytes": useful,
                     "read_amplification": rd / pred.useful_bytes_read,
                     "predicted_read_amplification": pred.bytes_read / pred.useful_bytes_read,
                     "dram_TBps": (rd + wr) / t / 1e12, "useful_TBps": useful / t / 1e12,
                     "fraction_of_copy_bw": b.fraction_of_roof, "bound": b.kind, "clock_ghz": clock / 1e9,
                     "what_would_move_it": what_moves_it(b.kind, b.fraction_of_roof, kernel)})
    return pd.DataFrame(rows)


def hierarchy_points(frames: list, tensor_flop_factor: float | None):
    """Points for a hierarchical roofline: per kernel, its intensity against L1, L2 and DRAM
    bytes at the same FLOP/s (``series`` joins them), or None when the recording lacks the
    ``l1tex__t_bytes.sum`` / ``lts__t_bytes.sum`` counters. A kernel whose L1/TEX bytes are under 1%
    of its L2 bytes gets no L1 point (its loads bypass L1: TMA copies L2 -> shared memory); their
    names are in ``attrs['l1_bypass']``."""
    rows, bypass = [], []
    for df in frames:
        if df is None:
            continue
        w = counter_flops(wide_counters(df), tensor_flop_factor)
        if L1_BYTES not in w.columns or L2_BYTES not in w.columns:
            continue
        for (cfg_label, kernel), g in w.groupby(["config", "kernel"], sort=False):
            cfg = parse_config(cfg_label)
            if cfg["family"] in ("copy", "copy_strided"):
                continue
            t = float(_col(g, TIME).sum()) * 1e-9
            f = float(g["flops"].sum())
            if not (t > 0 and f > 0):
                continue
            name = kernel if cfg["family"] != "matmul" else f"matmul {cfg['M']}³"
            l1, l2 = float(_col(g, L1_BYTES).sum()), float(_col(g, L2_BYTES).sum())
            if l1 < 0.01 * l2:  # its loads go L2 -> shared memory by TMA and never pass the L1/TEX t-stage
                bypass.append(name)
            for level, col in (("L1", L1_BYTES), ("L2", L2_BYTES), ("DRAM", None)):
                nbytes = float((_col(g, DRAM_READ) + _col(g, DRAM_WRITE)).sum()) if col is None else float(_col(g, col).sum())
                if level == "L1" and name in bypass:
                    continue
                if nbytes > 0:
                    rows.append({"label": name if level == "DRAM" else "", "group": level, "series": name,
                                 "intensity": f / nbytes, "flops_per_s": f / t, "bytes": nbytes})
    if not rows:
        return None
    out = pd.DataFrame(rows)
    out.attrs["l1_bypass"] = bypass  # kernels drawn without an L1 point (L1 bytes < 1% of L2 bytes)
    return out


_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_TIME = {"second": 1.0, "msecond": 1e-3, "usecond": 1e-6, "nsecond": 1e-9, "s": 1.0, "ms": 1e-3, "us": 1e-6,
         "ns": 1e-9}


def per_second(value: float, unit: str) -> float:
    """A rate as ncu prints it (``'cycle/nsecond'``, ``'cycle/second'``, ``'GHz'``, ``'Mbyte/second'``)
    in events per second. ValueError naming the unit for anything else."""
    u = (unit or "").strip()
    m = re.fullmatch(r"([kKMGT]?)(?:hz|Hz|HZ)", u)
    if m:
        return value * _SI[m.group(1)]
    m = re.fullmatch(r"([kKMGT]?)[a-z]+/([a-z]+)", u)
    if m and m.group(2) in _TIME:
        return value * _SI[m.group(1)] / _TIME[m.group(2)]
    raise ValueError(f"rate unit {unit!r} is not understood; expected e.g. 'cycle/second', 'cycle/nsecond' or 'GHz'")


def per_cycle(value: float, unit: str) -> float:
    """A per-cycle amount as ncu prints it (``'byte/cycle'``, ``'Kbyte/cycle'``) in bytes per cycle."""
    m = re.fullmatch(r"([kKMGT]?)byte/cycle", (unit or "").strip())
    if not m:
        raise ValueError(f"per-cycle unit {unit!r} is not understood; expected e.g. 'byte/cycle'")
    return value * _SI[m.group(1)]


def ncu_peak_bandwidths(frames: list) -> list[tuple[str, float]]:
    """L1 and L2 bandwidths (byte/s) from the peaks Nsight Compute reports with a recording:
    ``l1tex__t_bytes.sum.peak_sustained`` (byte/cycle, all SMs) × ``sm__cycles_elapsed.avg.per_second``
    and ``lts__t_bytes.sum.peak_sustained`` × ``lts__cycles_elapsed.avg.per_second``, at the clocks the
    kernels ran at: ncu's peaks, not measured bandwidths. ``[(level, byte/s)]``, empty when absent."""
    pairs = (("L1", "l1tex__t_bytes.sum.peak_sustained", "sm__cycles_elapsed.avg.per_second"),
             ("L2", "lts__t_bytes.sum.peak_sustained", "lts__cycles_elapsed.avg.per_second"))
    out = []
    for level, peak_m, clock_m in pairs:
        for df in frames:
            if df is None:
                continue
            peak = df[df["metric"] == peak_m].dropna(subset=["value"])
            clock = df[df["metric"] == clock_m].dropna(subset=["value"])
            if len(peak) and len(clock):
                out.append((level, per_cycle(float(peak["value"].median()), str(peak["unit"].iloc[0]))
                            * per_second(float(clock["value"].median()), str(clock["unit"].iloc[0]))))
                break
    return out


def flop_split(df, tensor_flops_per_op: float | None) -> pd.DataFrame:
    """Per kernel of a tidy ncu frame (first launch): CUDA-core FLOPs, tensor-core FLOPs, their sum
    and ``cuda_core_pct``, the CUDA cores' share of the FLOPs in percent (what the counters saw:
    fadd/fmul/ffma/h* thread instructions, FMA = 2; MUFU work such as exp is not a FLOP here).
    Tensor FLOPs are the tensor-path op counter × ``tensor_flops_per_op`` (NaN share when unknown)."""
    w = counter_flops(wide_counters(df), tensor_flops_per_op)
    first = w[w["launch"] == w.groupby("kernel")["launch"].transform("min")]
    out = first[["kernel", "cuda_core_flops", "tensor_flops", "flops"]].reset_index(drop=True)
    out["cuda_core_pct"] = 100 * out["cuda_core_flops"] / (out["cuda_core_flops"] + out["tensor_flops"])
    return out
