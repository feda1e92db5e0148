"""Compile the Gluon attention forward for Hopper (sm_90) without a GPU, and say what the compiler made of it.

Usage, from the repo root: ``python3 tools/gluon_compile_check.py [--variant NAME] [--dtype fp16|bf16]``.
Gluon has no interpreter, so on a CPU-only machine this is how the kernel is checked: Triton compiles
``attn_fwd_gluon`` for ``GPUTarget("cuda", 90, 32)`` with its wheel's ptxas, and this reads the result: the
partitions of the ``ttg.warp_specialize`` op and their warps (TTGIR), the ``setmaxnreg`` values (PTX),
registers per thread and stack bytes (``cuobjdump --dump-resource-usage``; stack > 0 means spills),
shared memory, and the count of HGMMA (wgmma), UTMALDG (TMA loads) and LDL/STL (local memory) in the SASS.
Nothing is timed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["TRITON_INTERPRET"] = "0"  # compile, even on a machine without a GPU (before triton is imported)
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

from infralens_lab.kernels import attention_gluon as ag  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def compile_kernel(variant: str = ag.DEFAULT_VARIANT, head_dim: int = 128, dtype: str = "fp16", causal: bool = False):
    """The compiled kernel (Triton's CompiledKernel) of ``variant`` for sm_90, as the wrapper would launch it."""
    kc = ag.kernel_constants(variant, head_dim, causal)
    gdt = {"fp16": gl.float16, "bf16": gl.bfloat16}[dtype]

    def desc(rows):
        return f"tensordesc<{dtype}[{rows},{head_dim}],{ag.smem_layout(rows, head_dim, gdt)!r}>"

    fn = ag.attn_fwd_gluon
    sig = {"q_desc": desc(ag.BLOCK_M_WG), "k_desc": desc(ag.BLOCK_N), "v_desc": desc(ag.BLOCK_N),
           "o_ptr": f"*{dtype}", "N_CTX": "i32", "qk_scale": "fp32"}
    const = kc["constexprs"]
    sig.update({k: "constexpr" for k in const})
    attrs = {(fn.arg_names.index("o_ptr"),): [["tt.divisibility", 16]]}
    return triton.compile(GluonASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": kc["num_warps"]})


def partitions(ttgir: str) -> list[int]:
    """Warps of each partition: the default partition's (the module's num-warps) then each worker's
    (``partitionN(...) num_warps(W)`` regions of the ``ttg.warp_specialize`` op); one entry without that op."""
    default = int(re.search(r'"ttg.num-warps" = (\d+)', ttgir).group(1))
    return [default] + [int(w) for w in re.findall(r"^\s*partition\d+\(.*\) num_warps\((\d+)\)", ttgir, re.M)]


def requested_regs(ttgir: str) -> list[int]:
    """Registers per thread each worker partition asks for (``requestedRegisters``); empty without workers."""
    m = re.search(r"requestedRegisters = array<i32: ([\d,\s]+)>", ttgir)
    return [int(x) for x in m.group(1).split(",")] if m else []


def report(k) -> dict:
    """What the compiler made of a compiled kernel ``k``: partitions, registers, spills, instructions."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        usage = subprocess.run([str(BIN / "cuobjdump"), "--dump-resource-usage", f.name],
                               capture_output=True, text=True, check=True).stdout
        sass = subprocess.run([str(BIN / "cuobjdump"), "--dump-sass", f.name],
                              capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    ptx = k.asm["ptx"]
    return {"partition_warps": partitions(k.asm["ttgir"]), "worker_regs": requested_regs(k.asm["ttgir"]),
            "warps": k.metadata.num_warps,
            "regs": int(m.group(1)), "stack": int(m.group(2)), "shared": k.metadata.shared,
            "setmaxnreg": sorted({f"{d}{n}" for d, n in re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)",
                                                                   ptx)}),
            "wgmma_ptx": ptx.count("wgmma.mma_async"), "tma_ptx": ptx.count("cp.async.bulk.tensor"),
            "hgmma": sass.count("HGMMA"), "utmaldg": sass.count("UTMALDG"),
            "local": sass.count("LDL") + sass.count("STL")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", default="", help="one variant (default: all of attention_gluon.VARIANTS)")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--json", nargs="+", metavar="VARIANT:D:CAUSAL",
                    help="compile only these (e.g. pingpong:128:1) and print their reports as one JSON object")
    a = ap.parse_args()
    if a.json:
        out = {}
        for spec in a.json:
            v, d, c = spec.split(":")
            out[spec] = report(compile_kernel(v, int(d), a.dtype, c == "1"))
        print(json.dumps(out))
        return
    print(f"triton {triton.__version__}, target sm_90, {a.dtype}")
    print(f"{'variant':9} {'D':>3} {'causal':6} {'partition warps':16} {'regs':>4} {'stack':>5} {'shared':>7} "
          f"{'HGMMA':>5} {'UTMALDG':>7} {'LDL/STL':>7}  setmaxnreg")
    for v in [a.variant] if a.variant else list(ag.VARIANTS):
        for d in ag.HEAD_DIMS:
            for causal in (False, True):
                r = report(compile_kernel(v, d, a.dtype, causal))
                print(f"{v:9} {d:3} {causal!s:6} {r['partition_warps']!s:16} {r['regs']:4} {r['stack']:5} "
                      f"{r['shared']:7} {r['hgmma']:5} {r['utmaldg']:7} {r['local']:7}  {' '.join(r['setmaxnreg'])}")


if __name__ == "__main__":
    main()
