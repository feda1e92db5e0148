"""Glue for lab 02 (the roofline): ceilings, kernels placed from their counters, and their bounds.

The recorded Nsight Compute CSVs (``ncu_copies.csv``, ``ncu_attention.csv``, ``ncu_matmul.csv``,
one ``==INFRALENS== config: <label>`` block per run, parsed by
:func:`infralens_lab.measure.ncu.parse_raw_csv`) give, per kernel launch, its time
(``gpu__time_duration.sum``, ns), its DRAM bytes (``dram__bytes_read.sum`` + ``dram__bytes_write.sum``)
and its executed floating-point work: CUDA-core FLOPs from
``sm__sass_thread_inst_executed_op_{fadd,fmul,ffma,hadd,hmul,hfma}_pred_on.sum`` (an FMA counts 2)
and tensor-core work from ``sm__ops_path_tensor_src_fp16_dst_fp32.sum``. What one unit of that
tensor counter is worth in FLOPs is not assumed: :func:`tensor_op_check` divides it by the
2·M·N·K of the recorded matmuls and :func:`tensor_flops_per_op` reads the factor off that
evidence. Predicted bytes and FLOPs come from :mod:`infralens_lab.analysis.traffic`; bounds
from :func:`infralens_lab.analysis.roofline.classify` against the measured ceilings. SI units:
seconds, bytes, FLOP, byte/s, FLOP/s.
"""
from __future__ import annotations

import math
import re

import pandas as pd

from ..analysis import roofline as rl
from ..analysis import traffic as tr

TIME = "gpu__time_duration.sum"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
FLOP_WEIGHTS = {"fadd": 1, "fmul": 1, "ffma": 2, "hadd": 1, "hmul": 1, "hfma": 2}
FLOP_METRICS = {op: f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in FLOP_WEIGHTS}
# tensor-core work: Nsight's "math ops executed in the tensor path" (the first name this ncu knows),
# and the count of tensor-pipe instructions (warp-level; its FLOPs per instruction depend on the MMA shape)
TENSOR_OPS_NAMES = ("sm__ops_path_tensor_src_fp16.sum", "sm__ops_path_tensor_src_fp16_dst_fp32.sum")
TENSOR_OPS = TENSOR_OPS_NAMES[0]
TENSOR_INST = "sm__inst_executed_pipe_tensor.sum"
GRID = "launch__grid_size"
L1_BYTES, L2_BYTES = "l1tex__t_bytes.sum", "lts__t_bytes.sum"
ELEM_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
TENSOR_KERNELS = ("naive_qk", "naive_pv", "attn_fwd", "attn_fwd_fast", "matmul")  # tl.dot / cuBLAS on tensor cores
CSV_FILES = ("ncu_copies.csv", "ncu_attention.csv", "ncu_matmul.csv")

_CONFIG_RES = (
    ("copy", re.compile(r"^copy n=(?P<n>\d+) (?P<dtype>fp16|bf16|fp32)$")),
    ("copy_strided", re.compile(r"^copy_strided stride=(?P<stride>\d+) n=(?P<n>\d+) (?P<dtype>fp16|bf16|fp32)$")),
    ("attention", re.compile(r"^(?P<variant>naive|tiled_fast|tiled) shape=(?P<B>\d+),(?P<H>\d+),(?P<N>\d+),(?P<D>\d+)"
                             r" (?P<dtype>fp16|bf16|fp32)$")),
    ("matmul", re.compile(r"^matmul size=(?P<M>\d+),(?P<N>\d+),(?P<K>\d+) (?P<dtype>fp16|bf16|fp32)$")),
)


def parse_config(label: str) -> dict:
    """The recorder's run label as a dict: ``family`` (copy, copy_strided, attention, matmul), the
    shape fields as ints, ``dtype`` and ``elem_bytes``. ValueError for a label it does not know."""
    if not isinstance(label, str):
        raise TypeError(f"config label is {type(label).__name__}; expected a str such as 'matmul size=256,256,256 fp16'")
    for family, rx in _CONFIG_RES:
        m = rx.match(label.strip())
        if m:
            d = {k: (v if k in ("dtype", "variant") else int(v)) for k, v in m.groupdict().items()}
            return {"family": family, **d, "elem_bytes": ELEM_BYTES[d["dtype"]]}
    raise ValueError(f"config label {label!r} is not one the recorder writes; expected e.g. 'copy n=16777216 fp32', "
                     f"'copy_strided stride=8 n=16777216 fp32', 'naive shape=1,8,2048,64 fp16' or "
                     f"'matmul size=1024,1024,1024 fp16'")


# ---------------------------------------------------------------- evidence access
def load_counters(store, filename: str):
    """Tidy ncu frame of one recorded CSV, or None (with a printed note) when the set lacks it."""
    from ..measure.ncu import parse_raw_csv

    if filename not in CSV_FILES:
        raise ValueError(f"filename {filename!r}; expected one of {CSV_FILES}")
    if store is None or filename not in store.files():
        print(f"No recorded {filename} in this checkout yet: its kernels appear here once the recorder "
              f"(`python -m infralens_lab record`) has run on a GPU.")
        return None
    return parse_raw_csv(store.text(filename))


def wide_counters(df) -> pd.DataFrame:
    """One row per (config, kernel, launch), one column per metric (floats)."""
    from ..measure.ncu import wide

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


def what_moves_it(kind: str, fraction: float, kernel: str) -> str:
    """A sentence: what would raise this kernel's FLOP/s, given its bound and how close it is to
    the roof (``fraction`` of the attainable rate, or of the bandwidth for a copy)."""
    if kernel in _NAIVE_NOTE:
        return _NAIVE_NOTE[kernel]
    if kernel == "copy_strided" and kind == "memory":
        return ("a layout that makes the reads contiguous: DRAM is busy, but most of every sector it moves is "
                "thrown away")
    if kernel in ("copy", "copy_coalesced") and kind == "memory":
        return "nothing on this GPU: a copy near the memory roof is done; only moving fewer bytes (fusing it away) helps"
    if kind == "memory":
        if fraction >= 0.6:
            return "at its memory roof: only a higher intensity helps (reuse on chip: tiling, fusion, less traffic)"
        return "toward the memory roof first (coalescing, wider loads, more bytes in flight), then intensity"
    if kind == "compute":
        if fraction >= 0.6:
            return "at its compute roof: fewer FLOPs (algorithm) or a faster unit (tensor cores, lower precision)"
        return "toward the compute roof (tensor-core-friendly tiles, pipelining, occupancy)"
    return "neither roof binds: more parallel work per launch, fewer launches, or hide latency (more warps, async loads)"


def kernel_table(frames: list, ceilings, tensor_flop_factor: float | None) -> pd.DataFrame:
    """One row per kernel (attention kernels by name; a matmul's kernels summed into one row per
    size) from tidy ncu frames, with measured and predicted intensity, achieved FLOP/s, the roof it
    is judged against (the measured fp16 tensor-core rate if it used tensor cores, else the fp32
    rate; the measured copy bandwidth), its bound and what would move it. Copies are left out:
    they do no floating-point work (see :func:`copy_table`)."""
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
                rows.append(_kernel_row(label, kernel, cfg, cfg_label, gg, ceilings, tensor_flop_factor))
    return pd.DataFrame(rows)


def _kernel_row(label, kernel, cfg, cfg_label, g, ceilings, factor) -> dict:
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
    peak = ceilings.rate("fp16") if tensor else ceilings.rate("fp32")
    group = {"attention": "attention naive" if kernel.startswith("naive_") else "attention tiled",
             "matmul": "matmul fp16"}[cfg["family"]]
    b = rl.classify(flops, dram, t, peak, ceilings.copy_bw) if flops > 0 and dram > 0 and t > 0 else None
    return {
        "label": label, "group": group, "kernel": kernel, "config": cfg_label,
        "size": cfg["M"] if cfg["family"] == "matmul" else math.nan,
        "time_us": t * 1e6, "dram_bytes": dram, "flops": flops, "flops_source": source,
        "intensity": dram and flops / dram, "flops_per_s": flops / t if t else math.nan,
        "predicted_bytes": pred.bytes if pred else math.nan, "predicted_flops": pred.flops if pred else math.nan,
        "predicted_intensity": pred.intensity if pred else math.nan,
        "roof": roof_name, "ridge": b.ridge if b else math.nan,
        "attainable_per_s": b.attainable if b else math.nan,
        "fraction_of_roof": b.fraction_of_roof if b else math.nan,
        "bound": b.kind if b else "unknown",
        "above_ridge": bool(b and b.intensity >= b.ridge),
        "what_would_move_it": what_moves_it(b.kind, b.fraction_of_roof, kernel) if b else "",
    }


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
        useful = pred.useful_bytes_read + pred.bytes_written
        b = rl.classify(0, rd + wr, t, ceilings.rate("fp32"), ceilings.copy_bw)
        kernel = str(g["kernel"].iloc[0])
        rows.append({"label": kernel if cfg["family"] == "copy" else f"copy_strided ×{stride}", "kernel": kernel,
                     "stride": stride,
                     "time_us": t * 1e6, "dram_read_bytes": rd, "dram_write_bytes": wr, "useful_bytes": useful,
                     "read_amplification": rd / pred.useful_bytes_read,
                     "predicted_read_amplification": pred.bytes_read / pred.useful_bytes_read,
                     "dram_TBps": (rd + wr) / t / 1e12, "useful_TBps": useful / t / 1e12,
                     "fraction_of_copy_bw": b.fraction_of_roof, "bound": b.kind,
                     "what_would_move_it": what_moves_it(b.kind, b.fraction_of_roof, kernel)})
    return pd.DataFrame(rows)


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


def copy_notes(ct: pd.DataFrame) -> list[str]:
    """Sentences read off a :func:`copy_table`: where the sector model's read amplification holds
    and where DRAM moved more, and whether DRAM saw fewer written bytes than the copy wrote."""
    if ct is None or ct.empty:
        return []
    out = []
    off = ct[ct["read_amplification"] > 1.25 * ct["predicted_read_amplification"]]
    ok = ct[ct["read_amplification"] <= 1.25 * ct["predicted_read_amplification"]]
    if len(ok):
        out.append("The 32-byte sector model predicts the DRAM bytes read within 25% for: "
                   + ", ".join(ok["label"]) + ".")
    if len(off):
        out.append("DRAM read more than the sector model for: " + ", ".join(
            f"{r['label']} ({r['read_amplification']:.3g}x measured vs {r['predicted_read_amplification']:.3g}x "
            f"predicted)" for _, r in off.iterrows()) + ": DRAM fetched more than one 32-byte sector per useful element.")
    short = ct[ct["dram_write_bytes"] < 0.9 * ct["useful_bytes"] / 2]
    if len(short):
        out.append(f"{len(short)} of {len(ct)} copies wrote fewer bytes to DRAM than they stored: the last writes were "
                   f"still in L2 when the kernel ended, so 'useful' bandwidth can exceed DRAM bandwidth.")
    return out


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


def check_kernels(seed: int = 0) -> pd.DataFrame:
    """Run the kernels this lab places on the chart on tiny inputs (Triton's interpreter on a CPU,
    the GPU in gpu mode) and compare them with the torch references: fresh seeded random inputs,
    an odd length for the copies, outputs poisoned with NaN beforehand so an element a kernel
    skips cannot pass. One row per check: kernel, shape, dtype, tolerance, passed."""
    import torch

    from ..device import torch_device
    from ..kernels import attention, copies, reference

    dev = torch_device()
    gen = torch.Generator().manual_seed(seed)
    rows = []
    x = torch.randn(4099, generator=gen).to(dev)  # odd length: the last block is partly masked
    for stride in (1, 8):
        n_out = copies.strided_len(x.numel(), stride)
        out = torch.full((n_out,), float("nan"), device=dev)
        copies.copy_strided(x, stride, out=out)
        ok = _passes(out, reference.copy_strided_ref(x, stride), 0.0, 0.0)
        # tolerance 0: a copy moves bits, it computes nothing
        rows.append({"kernel": "copy_strided", "shape": f"n={x.numel()}, stride={stride}", "dtype": "fp32",
                     "atol": 0.0, "rtol": 0.0, "passed": ok, "note": ""})
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
        # atol/rtol 2e-2: fp16 inputs and output (about 3 decimal digits), P rounded to fp16 in the naive path
        rows.append({"kernel": name, "shape": f"B,H,N,D={B},{H},{N},{D}", "dtype": "fp16", "atol": 2e-2,
                     "rtol": 2e-2, "passed": not note and _passes(out.float(), ref, 2e-2, 2e-2), "note": note})
    return pd.DataFrame(rows)


def _passes(got, want, atol: float, rtol: float) -> bool:
    import torch

    try:
        torch.testing.assert_close(got, want, atol=atol, rtol=rtol)
    except AssertionError:
        return False
    return True


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
    from ..present.roofline import Roof, roofs_from

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


def hierarchy_roofs(frames: list) -> list:
    """L1 and L2 bandwidth roofs from the peaks Nsight Compute reports with the recorded matmuls:
    ``l1tex__t_bytes.sum.peak_sustained`` (byte/cycle, all SMs) × ``sm__cycles_elapsed.avg.per_second``
    and ``lts__t_bytes.sum.peak_sustained`` × ``lts__cycles_elapsed.avg.per_second``, at the clocks the
    kernels ran at. They are ncu's peaks, not measured bandwidths, so they are drawn as ``peak``.
    Empty when the recording lacks them."""
    from ..present.roofline import Roof

    pairs = (("L1", "l1tex__t_bytes.sum.peak_sustained", "sm__cycles_elapsed.avg.per_second"),
             ("L2", "lts__t_bytes.sum.peak_sustained", "lts__cycles_elapsed.avg.per_second"))
    roofs = []
    for level, peak_m, clock_m in pairs:
        for df in frames:
            if df is None:
                continue
            peak, clock = df[df["metric"] == peak_m].dropna(subset=["value"]), df[df["metric"] == clock_m].dropna(
                subset=["value"])
            if len(peak) and len(clock):
                bw = per_cycle(float(peak["value"].median()), str(peak["unit"].iloc[0])) * \
                    per_second(float(clock["value"].median()), str(clock["unit"].iloc[0]))
                roofs.append(Roof(f"{level} (ncu peak)", bw, "memory", "peak"))
                break
    return roofs


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
        out.append("No L1 point (L1/TEX bytes under 1% of L2 bytes: loads copied L2 -> shared memory by TMA): "
                   + ", ".join(points.attrs["l1_bypass"]))
    return out


def ceilings_from(store):
    """``(evidence, Ceilings)`` of the recorded ``ceilings`` record, or ``(None, None)`` with a note."""
    from ..analysis.hardware import Ceilings

    if store is None or "ceilings" not in store.names():
        print("No recorded ceilings in this checkout yet: they appear here once the recorder has run on a GPU.")
        return None, None
    ev = store.load("ceilings")
    return ev, Ceilings.from_evidence(ev)


class _Capture:
    """Stands in for an EvidenceWriter: keeps what the recorder writes, in memory."""

    def __init__(self):
        self.values: dict = {}

    def write(self, name, values, units=None, notes=""):
        self.values[name] = (values, dict(units or {}), notes)

    def write_text(self, filename, text, kind="csv"):
        self.values[filename] = (text, {}, "")


def live_ceilings():
    """On a GPU: the recorder's ``ceilings`` step run now (quick), as live evidence and Ceilings;
    ``(None, None)`` in interpreter mode or if the step fails (the recorded ones are shown instead)."""
    from ..analysis.hardware import Ceilings
    from ..device import is_gpu
    from ..evidence import live

    if not is_gpu():
        return None, None
    from ..record import Recorder

    cap = _Capture()
    rec = Recorder(cap, quick=True, log=lambda msg: None)
    rec.run("ceilings")
    if rec.entries[-1]["status"] != "ok" or "ceilings" not in cap.values:
        print(f"Measuring the ceilings live failed ({rec.entries[-1]['detail']}); showing the recorded ones.")
        return None, None
    values, units, notes = cap.values["ceilings"]
    ev = live("ceilings", values, command="infralens_lab.record.Recorder(quick=True).run('ceilings')",
              units=units, notes=notes)
    return ev, Ceilings.from_evidence(ev)


__all__ = ["CSV_FILES", "FLOP_METRICS", "FLOP_WEIGHTS", "TENSOR_INST", "TENSOR_OPS", "TENSOR_OPS_NAMES", "ceilings_from", "copy_table", "counter_flops",
           "chart_roofs", "counters_caption", "copy_notes", "hierarchy_notes", "hierarchy_points", "hierarchy_roofs", "kernel_notes", "per_cycle", "per_second", "sweep_vs_ncu", "kernel_table", "measured_ridges", "tensor_counter_sentence", "live_ceilings", "load_counters", "parse_config", "predicted",
           "tensor_flops_per_op", "tensor_op_check", "what_moves_it", "wide_counters"]
