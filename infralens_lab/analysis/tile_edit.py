"""Lab 02's edit-and-measure exercise, read: ``attn_fwd`` at the lab's tiles beside the learner's.

Three kinds of number, each labelled as what it is. The **model** (:func:`~infralens_lab.analysis.traffic.
attention_tiled_traffic`): K and V read ``ceil(N / BLOCK_M)`` times, so the bytes between the SMs and the memory system
and the intensity they give. The **compiler** (Triton and ptxas for sm_90, run on any CPU): registers per thread,
spills, shared memory per block, and from them the blocks one SM can hold (:func:`resident_blocks`, the CUDA occupancy
rules, the same limits ncu reports as ``launch__occupancy_limit_*``). The **measurement**: on a GPU, each tile set
timed with CUDA events at the recorded shape, its TFLOP/s (nominal ``4·B·H·N²·D`` FLOPs) with the SM clock sampled
during the timing; the recorded ncu counters of the lab's own tiles (:func:`recorded_original`).
"""
from __future__ import annotations

import math

import pandas as pd

from ..kernels import arch
from ..units import KiB, MiB
from . import counters, hardware, traffic

# Per-SM limits of compute capability 9.0 (H100, H200): CUDA C++ Programming Guide, "Compute Capabilities",
# technical specifications table: 64 K 32-bit registers per SM, at most 255 per thread, allocated per warp in units of
# 256 (8 per thread); 64 resident warps and 32 resident blocks per SM; up to 228 KiB of shared memory per SM, of
# which the system reserves 1 KiB per block. Checked against the recorded launch__occupancy_limit_* in the tests.
SM90 = {"registers": 65536, "reg_unit": 8, "warps": 64, "blocks": 32, "shared": 228 * KiB, "reserved": 1 * KiB}
SM90_SOURCE = "CUDA C++ Programming Guide, Compute Capabilities (compute capability 9.0)"


def resident_blocks(registers: int, threads: int, shared_bytes: int, shared_per_sm: int = SM90["shared"]) -> dict:
    """How many blocks of a kernel one sm_90 SM holds at once, limit by limit: ``by_registers``, ``by_shared``,
    ``by_warps``, ``by_blocks``, their minimum ``blocks`` and ``limited_by`` (the limit that decided).
    ``registers`` per thread, ``threads`` per block, ``shared_bytes`` per block (dynamic + static);
    ``shared_per_sm``: the carveout (the most, 228 KiB, unless the driver chose less: ncu's
    ``launch__shared_mem_config_size``)."""
    for name, v, lo in (("registers", registers, 1), ("threads", threads, 32), ("shared_bytes", shared_bytes, 0),
                        ("shared_per_sm", shared_per_sm, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}={v!r}; expected an int >= {lo}")
    if registers > 255 or threads % 32:
        raise ValueError(f"registers={registers}, threads={threads}; expected at most 255 registers per thread "
                         "and whole warps (a multiple of 32 threads)")
    warps = threads // 32
    per_warp = math.ceil(registers / SM90["reg_unit"]) * SM90["reg_unit"] * 32
    got = {"by_registers": SM90["registers"] // per_warp // warps,
           "by_shared": shared_per_sm // (shared_bytes + SM90["reserved"]),
           "by_warps": SM90["warps"] // warps, "by_blocks": SM90["blocks"]}
    limit = min(got, key=got.get)
    return got | {"blocks": got[limit], "limited_by": limit.removeprefix("by_")}


def model_row(tiles: dict, shape: tuple, elem_bytes: int = 2) -> dict:
    """The traffic model at ``tiles`` and ``shape`` (B, H, N, D): K/V passes, bytes (MiB) and FLOP/byte."""
    B, H, N, D = shape
    t = traffic.attention_tiled_traffic(B, H, N, D, elem_bytes, block_m=tiles["BLOCK_M"])
    return {"K/V passes (model)": -(-N // tiles["BLOCK_M"]), "MiB (model)": t.bytes / MiB,
            "FLOP/B (model)": t.intensity}


def edit_table(rows: list[dict]) -> pd.DataFrame:
    """One row per tile set: ``rows`` of ``{"config", "tiles", "shape", "check", "resources", "timing"}`` (the model
    at ``shape``, (B, H, N, D) fp16; ``check`` from
    :func:`infralens_lab.measure.tile_runs.correctness`, ``resources`` from
    :func:`infralens_lab.measure.sass_compile.attn_fwd_resources`, ``timing`` from
    :func:`infralens_lab.measure.tile_runs.time_tiles` or None off a GPU). Timing columns only where timed."""
    out = []
    for r in rows:
        t, c, res, tm = r["tiles"], r["check"], r["resources"], r.get("timing")
        row = {"config": r["config"], "BLOCK_M": t["BLOCK_M"], "BLOCK_N": t["BLOCK_N"], "warps": t["num_warps"],
               "stages": t["num_stages"],
               "correct": f"yes (N={c['shape'][2]})" if c["passed"] else f"NO (N={c['shape'][2]})",
               **model_row(t, r["shape"])}
        blocks = resident_blocks(res["registers"], res["threads"], res["shared_bytes"])
        row |= {"regs/thread": res["registers"], "spilled B": res["stack_bytes"] + res["local_bytes"],
                "shared KiB": res["shared_bytes"] / KiB, "blocks/SM": blocks["blocks"],
                "warps/SM": blocks["blocks"] * t["num_warps"], "limited by": blocks["limited_by"]}
        if tm is not None:
            rate, clock = traffic.attention_flops(*tm["shape"]) / (tm["median_ms"] * 1e-3), tm.get("sm_clock_hz")
            peak = hardware.peak_per_cycle(tm["cc"], "fp16")
            if clock and peak and rate > tm["sms"] * peak * clock:  # physics: a rate above the SMs' is an error
                raise hardware.PhysicsError(f"{r['config']}: {rate / 1e12:.0f} TFLOP/s at {clock / 1e9:.2f} GHz is "
                                            f"above {tm['sms']} SMs x {peak} FLOP/cycle x the clock; not a result")
            row |= {"median ms": tm["median_ms"], "p10-p90 ms": f"{tm['p10_ms']:.3f}-{tm['p90_ms']:.3f}",
                    "TFLOP/s": rate / 1e12, "SM GHz": clock / 1e9 if clock else float("nan")}
        out.append(row)
    return pd.DataFrame(out)


def recorded_original(frame: pd.DataFrame, kernel: str = "attn_fwd") -> pd.DataFrame:
    """The recorded ncu counters of ``kernel``'s first launch (a frame of :func:`infralens_lab.parse.ncu.
    parse_raw_csv`) beside the model at its tiles: registers, shared memory, ncu's resident blocks and their
    limit, SM-side bytes (``l1tex__t_bytes.sum``) against the model's, DRAM bytes, time, nominal TFLOP/s and the
    SM clock it ran at. One row."""
    rows = frame[(frame["kernel"] == kernel) & (frame["launch"] == 0)]
    if rows.empty:
        raise ValueError(f"no launch 0 of {kernel!r} in the frame; kernels seen: {sorted(frame['kernel'].unique())}")
    raw = rows.set_index("metric")["value"]
    cfg = counters.parse_config(rows["config"].iloc[0])
    B, H, N, D = cfg["B"], cfg["H"], cfg["N"], cfg["D"]
    block_m = round(N * B * H / raw["launch__grid_size"])  # grid = (N / BLOCK_M, B·H)
    limits = {k: int(raw[f"launch__occupancy_limit_{k}"]) for k in ("registers", "shared_mem", "warps", "blocks")}
    seconds = raw["gpu__time_duration.sum"] * 1e-9
    return pd.DataFrame([{
        "kernel": kernel, "shape": f"{B},{H},{N},{D}", "BLOCK_M": block_m,
        "warps": int(raw["launch__block_size"]) // 32,
        "regs/thread": int(raw["launch__registers_per_thread"]),
        "shared KiB": raw["launch__shared_mem_per_block_dynamic"] / KiB,
        "blocks/SM": min(limits.values()), "limited by": min(limits, key=limits.get).removesuffix("_mem"),
        "SM-side MiB (L1)": raw["l1tex__t_bytes.sum"] / MiB, "MiB (model)": model_row({"BLOCK_M": block_m},
                                                                                      (B, H, N, D))["MiB (model)"],
        "DRAM MiB": (raw["dram__bytes_read.sum"] + raw["dram__bytes_write.sum"]) / MiB, "time ms": seconds * 1e3,
        "TFLOP/s": traffic.attention_flops(B, H, N, D) / seconds / 1e12,
        "SM GHz": raw["sm__cycles_elapsed.avg.per_second"] / 1e9}])


def edit_caption(rows: list[dict]) -> str:
    """Where each column of :func:`edit_table` came from: the timing's GPU and method (or the interpreter's counts),
    the model, the compiler and the correctness check."""
    tm, res = rows[-1].get("timing"), rows[-1]["resources"]
    timed = (f"live · {tm['gpu']} · CUDA events, median and p10-p90 of {tm['n']} calls in {tm['rounds']} rounds of "
             f"alternating order at (B,H,N,D)={tm['shape']} fp16, SM clock read by NVML during the timing" if tm else
             "interpreter: counts, no timing (Triton's interpreter on the CPU)")
    return (f"{timed} · model: analysis.traffic.attention_tiled_traffic at {rows[-1]['shape']} fp16 · compiler: "
            f"Triton "
            f"{res['triton']} and ptxas for sm_{res['sm']}, cuobjdump -res-usage; blocks/SM by {SM90_SOURCE} · check: "
            "fresh random fp16 inputs at an odd N (column correct), against torch in float32")


def edit_notes(rows: list[dict]) -> list[str]:
    """What Triton said for a tile set it refused, and the error and seed of a wrong output (to reproduce it)."""
    out = []
    for r in rows:
        c = r["check"]
        if c["note"]:
            out.append(f"{r['config']}: Triton refused it: {c['note']}")
        elif not c["passed"]:
            out.append(f"{r['config']}: output differs from torch by up to {c['max_abs_err']:.3g} (allowed "
                       f"{c['atol']:g} + {c['rtol']:g}·|want|) at shape {c['shape']}, seed {c['seed']}")
    return out


def edit_reading(table: pd.DataFrame) -> str:
    """One sentence comparing the last row of :func:`edit_table` (the edit) with the first (the lab's tiles)."""
    if len(table) < 2:
        raise ValueError(f"edit table has {len(table)} rows; expected the lab's tiles first and the edit last")
    a, b = table.iloc[0], table.iloc[-1]
    if all(a[k] == b[k] for k in ("BLOCK_M", "BLOCK_N", "warps", "stages")):
        return "Your tiles are the lab's (the two rows agree): change one value in the cell and run it again."
    if not b["correct"].startswith("yes"):
        return (f"{b['config'].capitalize()} is wrong: its output differs from torch at {b['correct'][4:-1]}; fix it "
                "before measuring.")
    if b["blocks/SM"] == 0:
        limit = arch.arch_of(90).max_shared_per_block
        return (f"{b['config'].capitalize()} cannot launch on sm_90: {b['shared KiB']:.0f} KiB of shared memory per "
                f"block, above the {limit // KiB} KiB one block may have ({arch.SHARED_SOURCE}); shrink a tile or the "
                "stages.")
    blocks = "block" if b["blocks/SM"] == 1 else "blocks"
    s = (f"{b['config'].capitalize()} reads K and V {b['K/V passes (model)']} times instead of "
         f"{a['K/V passes (model)']} (model: "
         f"{b['MiB (model)'] / a['MiB (model)']:.2f}x the bytes, intensity {b['FLOP/B (model)']:,.0f} vs "
         f"{a['FLOP/B (model)']:,.0f} FLOP/B); the compiler gives it {b['regs/thread']} registers per thread "
         f"({a['regs/thread']}), {b['spilled B']} B spilled, {b['shared KiB']:.0f} KiB shared "
         f"({a['shared KiB']:.0f}): {b['warps/SM']} warps resident per SM ({b['blocks/SM']} {blocks}, limited by "
         f"{b['limited by']}) against {a['warps/SM']}")
    if "TFLOP/s" in table.columns and table["TFLOP/s"].notna().all():
        s += (f"; timed here: {b['TFLOP/s']:.0f} TFLOP/s at {b['SM GHz']:.2f} GHz against {a['TFLOP/s']:.0f} at "
              f"{a['SM GHz']:.2f} GHz (medians; spread in the table)")
    else:
        s += "; interpreter: counts and a model, no timing"
    return s + "."
