"""Compile the fast attention kernels for Hopper (sm_90) without a GPU, and say what the compiler made of them.

Usage, from the repo root: ``python3 tools/attn_compile_check.py [--only SUBSTRING]``. Triton compiles for
``GPUTarget("cuda", 90, 32)`` with the ptxas of its wheel, so this runs on a CPU-only machine. For every
variant of ``tools/attn_ws_experiment.py`` (the committed ``attn_fwd_fast`` configs, its ``ws`` configs and
the experiment's single-tile kernel) and every kernel family (head dim 64 or 128, float16 or bfloat16,
causal or not, N a multiple of the blocks or ragged) it prints: whether the K/V loop was warp-specialized
(a ``ttg.warp_specialize`` op in the TTGIR), the warps the kernel launches with, the ``setmaxnreg`` values in
the PTX, registers per thread and stack bytes (spills) from ``cuobjdump --dump-resource-usage``, and shared
memory. A compile error is printed as such. Nothing here is timed: it says what would run, not how fast.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import infralens_lab  # noqa: E402,F401  (decides the mode: without a GPU it sets TRITON_INTERPRET=1)

os.environ["TRITON_INTERPRET"] = "0"  # compile the kernels, even on a machine without a GPU
import attn_ws_experiment as exp  # noqa: E402  (tools/ is sys.path[0] when this file runs)
import triton  # noqa: E402  (after TRITON_INTERPRET=0 above)
from triton.backends.compiler import GPUTarget  # noqa: E402  (after TRITON_INTERPRET=0 above)
from triton.compiler import ASTSource  # noqa: E402  (after TRITON_INTERPRET=0 above)

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
FAMILIES = [(64, "fp16", False), (128, "fp16", False), (64, "fp16", True), (128, "fp16", True), (64, "bf16", False)]


def compile_report(variant: exp.Variant, head_dim: int, dtype: str, causal: bool, even: bool) -> dict:
    """Compile one variant for sm_90 and read the result (raises what the compiler raises)."""
    fn, sig, const, opts, attrs = exp.compile_args(variant, head_dim, dtype, causal, even)
    k = triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32), options=opts)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        usage = subprocess.run([str(BIN / "cuobjdump"), "--dump-resource-usage", f.name],
                               capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    regs = sorted({f"{d}{n}" for d, n in re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", k.asm["ptx"])})
    return {"ws": "ttg.warp_specialize(" in k.asm["ttgir"], "warps": k.metadata.num_warps,
            "regs": int(m.group(1)), "stack": int(m.group(2)), "shared": k.metadata.shared, "setmaxnreg": regs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="only variants whose label contains this")
    a = ap.parse_args()
    print(f"triton {triton.__version__}, target sm_90")
    print(f"{'variant':44} {'family':18} {'WS':3} {'warps':>5} {'regs':>4} {'stack':>5} {'shared':>7}  setmaxnreg")
    for head_dim, dtype, causal in FAMILIES:
        for v in exp.variants_for(head_dim, causal):
            if a.only not in v.label:
                continue
            for even in (True, False):
                fam = f"D{head_dim} {dtype}{' causal' if causal else ''}{'' if even else ' ragged'}"
                try:
                    r = compile_report(v, head_dim, dtype, causal, even)
                except Exception as e:  # a compile error is a result here; KeyboardInterrupt still stops
                    print(f"{v.label_for(causal):44} {fam:18} COMPILE ERROR: {str(e).strip().splitlines()[-1][:80]}")
                    continue
                print(f"{v.label_for(causal):44} {fam:18} {'yes' if r['ws'] else 'no':3} {r['warps']:5} {r['regs']:4} "
                      f"{r['stack']:5} {r['shared']:7}  {' '.join(r['setmaxnreg'])}")


if __name__ == "__main__":
    main()
