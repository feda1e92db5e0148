"""Compile every Triton kernel the labs launch for every architecture class a learner may have, on a CPU.

Usage, from the repo root: ``python3 tools/arch_compile_check.py [--json OUT] [--arch 75,80] [--only SUBSTRING]
[--cubin all|subset|none]``. For each target in :data:`infralens_lab.kernels.arch.ARCHS` (sm_75 ... sm_120) and each
dtype the target runs (:func:`~infralens_lab.kernels.arch.kernel_dtypes`), Triton compiles each kernel with the
configs its launch wrapper uses on a GPU (``add_kernel``, ``copy_coalesced``, ``copy_strided``, ``naive_qk``,
``naive_softmax``, ``naive_pv``, ``attn_fwd``, and ``attn_fwd_fast`` with every autotuner candidate), through
``GPUTarget("cuda", cc, 32)`` and the ptxas of Triton's wheel. Each row says whether it compiled (or the compiler's
last line), the stage reached (``ptx``; ``cubin`` where ptxas ran: ``--cubin subset``, the default, runs it for
the small kernels on every target and for one fast-attention config per target), the shared memory per block,
the warps, and what the PTX holds: TMA bulk copies, ``cp.async``, and the instruction behind ``tl.dot``
(``wgmma``, ``tcgen05``, ``mma.sync`` or ``fma``). Nothing is launched or timed. tests/test_arch_compile.py runs
this once per session and checks the rows against the package's variant table.

Runs with ``TRITON_INTERPRET=0`` and ``INFRALENS_MODE=gpu`` set before anything imports Triton (a CPU machine
would otherwise pick the interpreter), and with a fresh Triton cache unless ``TRITON_CACHE_DIR`` is set.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ["TRITON_INTERPRET"] = "0"  # compile, even on a machine without a GPU
os.environ["INFRALENS_MODE"] = "gpu"  # kernels/__init__ tolerates the missing GPU; nothing here launches
if "TRITON_CACHE_DIR" not in os.environ:  # a stopped-at-PTX kernel must not be found by a later full compile: its
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="arch_compile_")  # own cache, removed at exit
    atexit.register(shutil.rmtree, os.environ["TRITON_CACHE_DIR"], True)
sys.path.insert(0, str(ROOT))

import triton  # noqa: E402  (after the environment above)
from triton import knobs  # noqa: E402
from triton._C.libtriton import ir, nvidia, passes  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.backends.nvidia.compiler import get_ptx_version_from_options  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from infralens_lab.kernels import arch, attention, copies, intro  # noqa: E402
from infralens_lab.kernels import attention_fast as af  # noqa: E402

ELEM = {"fp32": 4, "fp16": 2, "bf16": 2}
N_SOFTMAX = 1024  # naive_softmax's row length for the compile (whole rows per program)
SMALL = ("add_kernel", "copy_coalesced", "copy_strided", "naive_softmax")  # ptxas runs for these on every target


def _spec(kernel, fn, args: dict, const: dict, opts: dict, dtype: str, config: str) -> dict:
    """One compile as Triton's JIT would specialize a launch on contiguous tensors at power-of-two sizes: ``args``
    maps each runtime argument to its type (``*fp16``, ``i32``, ``fp32``, ``tensordesc<...>``), with ``1`` for an
    int Triton specializes to the constant 1 (a unit stride) and a ``%16`` suffix (``*fp16%16``, ``i32%16``) for a
    pointer or int it marks divisible by 16 (16-byte-aligned storage, strides and lengths that are multiples of
    16)."""
    sig, const, aligned = {}, dict(const), []
    for name, kind in args.items():
        if kind == "1":
            sig[name], const[name] = "constexpr", 1
            continue
        if kind.endswith("%16"):
            kind = kind[:-3]
            aligned.append(name)
        sig[name] = kind
    sig.update({name: "constexpr" for name in const if name not in sig})
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    return {"kernel": kernel, "fn": fn, "sig": sig, "const": const, "opts": opts, "attrs": attrs,
            "dtype": dtype, "config": config}


def _strides(prefix: str, dims: str) -> dict:
    """A contiguous tensor's strides: the last is 1, the others multiples of 16."""
    return {f"stride_{prefix}{d}": ("1" if i == len(dims) - 1 else "i32%16") for i, d in enumerate(dims)}


def specs(dtype: str) -> list[dict]:
    """The kernels as their wrappers launch them on a GPU, for one dtype (attention kernels: fp16/bf16 only; head
    dims 64 and 128 in fp16, 64 in the other dtype)."""
    p = f"*{dtype}%16"
    blk = copies.block_size(ELEM[dtype])
    out = [_spec("add_kernel", intro.add_kernel, {"x_ptr": p, "y_ptr": p, "out_ptr": p, "n_elements": "i32%16"},
                 {"BLOCK_SIZE": intro.BLOCK_SIZE}, {}, dtype, f"BLOCK_SIZE={intro.BLOCK_SIZE}"),
           _spec("copy_coalesced", copies.copy_coalesced, {"x_ptr": p, "out_ptr": p, "n_elements": "i32%16"},
                 {"BLOCK": blk}, {"num_warps": copies.NUM_WARPS}, dtype, f"BLOCK={blk} w{copies.NUM_WARPS}"),
           _spec("copy_strided", copies.KERNELS["copy_strided"], {"x_ptr": p, "out_ptr": p, "n_out": "i32%16"},
                 {"STRIDE": 8, "BLOCK": blk}, {"num_warps": copies.NUM_WARPS}, dtype, f"STRIDE=8 BLOCK={blk}")]
    if dtype == "fp32":
        return out
    sm = attention.softmax_config(N_SOFTMAX)
    out.append(_spec("naive_softmax", attention.naive_softmax,
                     {"s_ptr": "*fp32%16", "p_ptr": p, "n_rows": "i32%16", "N_CTX": "i32%16"},
                     {"CAUSAL": True, "ROWS": sm["ROWS"], "BLOCK_N": sm["BLOCK_N"]}, {"num_warps": sm["num_warps"]},
                     dtype, f"N={N_SOFTMAX} ROWS={sm['ROWS']} w{sm['num_warps']}"))
    for D in ((64, 128) if dtype == "fp16" else (64,)):  # a second dtype changes the element type, not the tiles
        nc = attention._naive_config(D, gpu=True)
        args = {"q_ptr": p, "k_ptr": p, "s_ptr": "*fp32%16", **_strides("q", "bhmd"), **_strides("k", "bhnd"),
                **_strides("s", "bhmn"), "H": "i32%16", "N_CTX": "i32%16", "sm_scale": "fp32"}
        out.append(_spec("naive_qk", attention.naive_qk, args,
                         {"HEAD_DIM": D, "BLOCK_M": nc["BLOCK_M"], "BLOCK_N": nc["BLOCK_N"]},
                         {"num_warps": nc["warps"], "num_stages": 2}, dtype, f"D{D} {nc['BLOCK_M']}x{nc['BLOCK_N']}"))
        args = {"p_ptr": p, "v_ptr": p, "o_ptr": p, **_strides("p", "bhmk"), **_strides("v", "bhkd"),
                **_strides("o", "bhmd"), "H": "i32%16", "N_CTX": "i32%16"}
        out.append(_spec("naive_pv", attention.naive_pv, args,
                         {"HEAD_DIM": D, "BLOCK_M": nc["BLOCK_M"], "BLOCK_K": nc["BLOCK_K"]},
                         {"num_warps": nc["warps"], "num_stages": 3}, dtype, f"D{D} {nc['BLOCK_M']}x{nc['BLOCK_K']}"))
        tc = attention.tiled_config(D, gpu=True)
        args = {"q_ptr": p, "k_ptr": p, "v_ptr": p, "o_ptr": p, **_strides("q", "bhmd"), **_strides("k", "bhnd"),
                **_strides("v", "bhnd"), **_strides("o", "bhmd"), "H": "i32%16", "N_CTX": "i32%16", "sm_scale": "fp32"}
        out.append(_spec("attn_fwd", attention.attn_fwd, args,
                         {"HEAD_DIM": D, "BLOCK_M": tc["BLOCK_M"], "BLOCK_N": tc["BLOCK_N"], "CAUSAL": True},
                         {"num_warps": tc["num_warps"], "num_stages": tc["num_stages"]}, dtype,
                         f"D{D} {tc['BLOCK_M']}x{tc['BLOCK_N']} w{tc['num_warps']} s{tc['num_stages']} causal"))
    return out


def fast_spec(c: af.Cand, head_dim: int, dtype: str, causal: bool = False) -> dict:
    """``attn_fwd_fast`` with candidate ``c`` as the autotuner launches it (descriptors of half tiles)."""
    half, bn, p = c.block_m // 2, c.block_n, f"*{dtype}%16"
    args = {"desc_q": f"tensordesc<{dtype}[{half},{head_dim}]>", "desc_k": f"tensordesc<{dtype}[{bn},{head_dim}]>",
            "desc_v": f"tensordesc<{dtype}[{bn},{head_dim}]>", "desc_o": f"tensordesc<{dtype}[{half},{head_dim}]>",
            "q_ptr": p, "k_ptr": p, "v_ptr": p, "o_ptr": p, "N_CTX": "i32%16", "qk_scale": "fp32"}
    const = {"HEAD_DIM": head_dim, "BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "CAUSAL": causal,
             "EVEN_M": True, "EVEN_N": True, "WS": c.ws}
    opts = {"num_warps": c.num_warps, "num_stages": c.num_stages, **({"maxnreg": c.maxnreg} if c.maxnreg else {})}
    label = af._name(c) + f" D{head_dim}" + (" causal" if causal else "")
    return _spec("attn_fwd_fast", af.attn_fwd_fast, args, const, opts, dtype, label)


def fast_specs(cc: int, dtype: str) -> list[dict]:
    """``attn_fwd_fast`` on ``cc``: in fp16 every autotuner candidate it may try there, unpruned
    (:func:`~infralens_lab.kernels.attention_fast.candidates_for`), and the first D = 128 one causal (its masked
    stage is a second loop); in another dtype the first D = 64 candidate (the dtype changes the element type, not
    the tiles)."""
    out = []
    for group, D in (("small_d", 64), ("d128", 128)):
        cands = af.candidates_for(group, cc, D, ELEM[dtype], prune=False)
        if dtype != "fp16" and D != 64:
            continue
        out += [fast_spec(c, D, dtype) | {"group": group} for c in (cands if dtype == "fp16" else cands[:1])]
        if dtype == "fp16" and D == 128:
            out.append(fast_spec(cands[0], D, dtype, causal=True) | {"group": group})
    return out


class _StopAfterTTGIR(Exception):
    """Raised by the stage hook after TTGIR and shared-memory allocation: the row needs nothing later."""

    def __init__(self, ttgir: str, shared: int):
        super().__init__("stopped after TTGIR")
        self.ttgir, self.shared = ttgir, shared


def _allocate_shared(backend, options, capability, mod) -> int:
    """Run make_llir's passes up to shared (and tensor) memory allocation on a TTGIR module; ``ttg.shared``."""
    pm = ir.pass_manager(mod.context)
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, capability,
                                                        get_ptx_version_from_options(options, backend.target.arch))
    nvidia.passes.ttnvgpuir.add_allocate_tensor_memory(pm)
    pm.run(mod, "arch_compile_check.allocate")
    return int(mod.get_int_attr("ttg.shared") or 0)


def ttgir_features(ttgir: str) -> dict:
    """What the TTGIR says about the copies and the dots (the same keys as :func:`ptx_features`)."""
    if "ttng.tc_gen5_mma" in ttgir:
        mma = "tcgen05"
    elif "versionMajor = 3" in ttgir and "ttng.warp_group_dot" in ttgir:
        mma = "wgmma"
    elif "#ttg.nvidia_mma<{versionMajor = 2" in ttgir:
        mma = "mma.sync"
    else:
        mma = "fma"
    return {"tma": "ttng.async_tma_copy_global_to_local" in ttgir, "cp_async": "ttg.async_copy_global_to_local" in ttgir,
            "mma": mma, "ws": "ttg.warp_specialize(" in ttgir}


def ptx_features(ptx: str) -> dict:
    """What the PTX holds: TMA bulk copies, cp.async, and the instruction behind tl.dot."""
    if "tcgen05.mma" in ptx:
        mma = "tcgen05"
    elif "wgmma.mma_async" in ptx:
        mma = "wgmma"
    elif re.search(r"\bmma\.sync\.aligned", ptx):
        mma = "mma.sync"
    else:
        mma = "fma"
    return {"tma": "cp.async.bulk.tensor" in ptx, "cp_async": bool(re.search(r"cp\.async\.(ca|cg)", ptx)), "mma": mma}


def compile_one(s: dict, cc: int, stage: str) -> dict:
    """Compile one spec for ``sm_cc`` up to ``stage`` (``ttgir``: TTGIR and shared-memory allocation only;
    ``ptx``; ``cubin``: ptxas too); a compiler error is a result (its last line)."""
    row = {k: s[k] for k in ("kernel", "dtype", "config")} | {"cc": cc, "group": s.get("group"), "stage": stage}
    row["num_warps"] = s["opts"].get("num_warps", 4)
    t0 = time.perf_counter()

    def hook(backend, stages, options, language, capability):
        if stage == "ttgir":
            make_ttgir = stages["ttgir"]

            def ttgir_then_stop(src, metadata):
                mod = make_ttgir(src, metadata)
                text = str(mod)
                raise _StopAfterTTGIR(text, _allocate_shared(backend, options, capability, mod))

            stages["ttgir"] = ttgir_then_stop
        elif stage == "ptx":
            stages["cubin"] = lambda src, metadata: b""  # no ptxas

    knobs.runtime.add_stages_inspection_hook = hook
    try:
        k = triton.compile(ASTSource(s["fn"], s["sig"], s["const"], s["attrs"]), target=GPUTarget("cuda", cc, 32),
                           options=s["opts"])
    except _StopAfterTTGIR as stop:
        return row | {"ok": True, "shared": stop.shared, **ttgir_features(stop.ttgir),
                      "seconds": time.perf_counter() - t0}
    except Exception as e:  # a compile error is a result here; KeyboardInterrupt still stops
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()] or [type(e).__name__]
        return row | {"ok": False, "error": f"{type(e).__name__}: {lines[-1][:300]}",
                      "seconds": time.perf_counter() - t0}
    finally:
        knobs.runtime.add_stages_inspection_hook = None
    return row | {"ok": True, "shared": int(k.metadata.shared), **ttgir_features(k.asm["ttgir"]),
                  "ptx": ptx_features(k.asm["ptx"]), "seconds": time.perf_counter() - t0}


def ptx_targets(archs) -> set[int]:
    """One target per fast-attention variant (:func:`~infralens_lab.kernels.arch.attention_variant`): where the
    subset of rows goes through PTX and ptxas, to check the TTGIR reading against the PTX."""
    firsts = {}
    for cc in archs:
        firsts.setdefault(arch.attention_variant(cc)[0], cc)
    return set(firsts.values())


def run(archs, only: str = "", ptx: str = "subset") -> list[dict]:
    """Rows for every target in ``archs``: each spec to TTGIR (shared memory and the instruction kinds), and where
    ``ptx`` says (``all``; ``subset``: the small kernels in fp16 on every target, so ptxas is asked about each,
    and the first fast-attention config on one target per variant, :func:`ptx_targets`; ``none``) through PTX and
    ptxas as well."""
    rows, full_fast = [], ptx_targets(archs)
    for cc in archs:
        for dtype in arch.kernel_dtypes(cc):
            first_fast = True
            for s in specs(dtype) + ([] if dtype == "fp32" else fast_specs(cc, dtype)):
                if only not in s["kernel"]:
                    continue
                full = ptx == "all" or (ptx == "subset" and dtype == "fp16" and (
                    s["kernel"] in SMALL or (s["kernel"] == "attn_fwd_fast" and first_fast and cc in full_fast)))
                first_fast = first_fast and s["kernel"] != "attn_fwd_fast"
                rows.append(compile_one(s, cc, "cubin" if full else "ttgir"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows here as JSON")
    ap.add_argument("--arch", default=",".join(map(str, arch.ARCHS)), help="comma-separated targets (75,80,...)")
    ap.add_argument("--only", default="", help="only kernels whose name contains this")
    ap.add_argument("--ptx", choices=("all", "subset", "none"), default="subset",
                    help="which rows go on through PTX and ptxas (the rest stop after TTGIR)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = run([int(x) for x in a.arch.split(",")], a.only, a.ptx)
    report = {"triton": triton.__version__, "seconds": time.perf_counter() - t0, "rows": rows}
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    print(f"triton {triton.__version__}: {len(rows)} compiles in {report['seconds']:.1f} s")
    for r in rows:
        what = (f"{r['stage']:5} shared {r['shared']:6} B  {'tma' if r['tma'] else 'loads':5} {r['mma']:8}"
                f"{' cp.async' if r['cp_async'] else ''}{' ws' if r['ws'] else ''}"
                if r["ok"] else "ERROR " + r["error"])
        print(f"sm_{r['cc']:<4} {r['dtype']:4} {r['kernel']:15} {r['config']:34} {r['seconds']:5.1f} s  {what}")


if __name__ == "__main__":
    main()
