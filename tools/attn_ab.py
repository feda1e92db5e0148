"""A/B timing of the fast attention forward, config by config, in one process (GPU only).

Usage, from the repo root: ``PYTHONPATH=. python3 tools/attn_ab.py [--old MODULE] [--rounds R]``.
For each case (B, H, N, D, dtype, causal) and each autotuner candidate of its head-dim group, times
``attention_fast.attention_tiled_fast`` (and, with ``--old``, the same function of another
module, e.g. a copy of the previous kernel saved as ``infralens_lab.kernels._attention_fast_old``,
over that module's own candidates) against SDPA's default backend. Rounds interleave the
variants so that clock drift hits them alike; a time is the median over rounds of ``triton.testing.do_bench`` medians (ms, CUDA
events, L2 flushed), the spread is (max - min) / median over rounds. Every output is checked
against SDPA (relative Frobenius error) before timing. TFLOP/s = 4*B*H*N^2*D / time (halved
for causal). A tuning tool, not evidence: the labs use the recorder's numbers.
"""
from __future__ import annotations

import argparse
import importlib
import statistics

import torch
import torch.nn.functional as F
import triton

from infralens_lab.kernels import attention_fast

CASES = [  # (B, H, N, D, dtype, causal)
    (4, 16, 4096, 128, torch.float16, False),
    (1, 16, 16384, 128, torch.float16, False),
    (4, 16, 4096, 64, torch.float16, False),
    (4, 16, 4096, 128, torch.bfloat16, False),
    (4, 16, 4096, 128, torch.float16, True),
    (4, 16, 4096, 64, torch.float16, True),
]
MAX_REL_ERR = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # P rounded to the input dtype


def _ms(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def run_case(case, mods: dict, rounds: int) -> list[tuple]:
    B, H, N, D, dtype, causal = case
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=dtype) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    flops = 4 * B * H * N * N * D / (2 if causal else 1)
    group = "d128" if D >= 128 else "small_d"
    fns = {("sdpa_default", "-"): lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
    errs = {("sdpa_default", "-"): 0.0}
    for label, mod in mods.items():
        name = mod._name  # each module names its own candidates
        for cand in mod.GPU_CANDIDATES[group]:
            if causal and cand.block_m % cand.block_n:
                continue
            out = torch.full_like(q, float("nan"))
            def fn(m=mod, c=cand, o=out):
                return m.attention_tiled_fast(q, k, v, causal=causal, out=o, config=c)

            fn()
            torch.cuda.synchronize()
            err = float((out.float() - ref.float()).norm() / ref.float().norm())
            if not err < MAX_REL_ERR[dtype]:
                raise AssertionError(f"{label} {name(cand)} {case}: rel err {err:.1e}")
            fns[(label, name(cand))] = fn
            errs[(label, name(cand))] = err
    times = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            times[key].append(_ms(fn))
    rows = []
    for key, ts in times.items():
        med = statistics.median(ts)
        rows.append((*key, med, (max(ts) - min(ts)) / med, flops / (med * 1e-3) / 1e12, errs[key]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", help="module with an older attention_tiled_fast to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    mods = {"new": attention_fast}
    if a.old:
        mods = {"old": importlib.import_module(a.old), **mods}
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}  "
          f"rounds {a.rounds}")
    for case in CASES:
        B, H, N, D, dtype, causal = case
        name = f"{B}x{H}x{N}x{D} {str(dtype)[6:]}" + (" causal" if causal else "")
        rows = run_case(case, mods, a.rounds)
        sdpa = rows[0][2]
        print(f"\n{name}")
        print(f"  {'variant':6} {'config':20} {'ms':>7} {'spread':>7} {'TFLOP/s':>8} {'/sdpa':>6} {'rel err':>8}")
        for label, cfg, ms, spread, tf, err in rows:
            print(f"  {label:6} {cfg:20} {ms:7.3f} {spread:7.1%} {tf:8.1f} {sdpa / ms:6.2f} {err:8.1e}")
        best = {lab: min(r[2] for r in rows if r[0] == lab) for lab in mods}
        print("  best: " + ", ".join(f"{lab} {ms:.3f} ms ({sdpa / ms:.2f}x sdpa)" for lab, ms in best.items())
              + (f"; new/old speed {best['old'] / best['new']:.3f}x" if "old" in best else ""))


if __name__ == "__main__":
    main()
