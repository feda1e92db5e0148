"""How often the fast attention's autotuner picks its best candidate, and what a wrong pick costs (GPU only).

Usage, from the repo root: ``PYTHONPATH=. python3 tools/tuner_stability.py [--procs P] [--rounds R]``.
The autotuner keeps its choice in memory only, so every fresh process tunes again. This runs ``P`` fresh
processes with Triton's default tuner (one ``do_bench`` per candidate: warmup 25 ms, rep 100 ms) and ``P``
with the package's (``attention_fast._steady_bench``: the median of three such runs per candidate), each picking a config for
every case. The parent then times every candidate of each case side by side (``R`` interleaved rounds,
median of ``do_bench`` medians) with SDPA's default backend, so each pick can be priced against the best
candidate. A tuning tool, not evidence: the labs use the recorder's numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from infralens_lab.kernels import attention_fast as af

CASES = [(4, 16, 4096, 128), (1, 16, 16384, 128), (4, 16, 4096, 64)]  # (B, H, N, D), fp16, not causal


def child(steady: bool) -> None:
    if not steady:  # Triton's own timing: one do_bench per candidate
        af._tuned = triton.autotune(af.CONFIGS, key=["N_CTX", "HEAD_DIM", "CAUSAL"],
                                    prune_configs_by={"early_config_prune": af._prune})(af._with_flags)
    picks = {}
    for B, H, N, D in CASES:
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
        af.attention_tiled_fast(q, k, v)
        torch.cuda.synchronize()
        picks[f"{B}x{H}x{N}x{D}"] = af._name(af.Cand(**af.last_config()))
    print(json.dumps(picks))


def parent(procs: int, rounds: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    picks = {"default": [], "steady": []}
    for i in range(2 * procs):
        kind = "steady" if i % 2 else "default"  # interleaved, so drift hits both alike
        out = subprocess.run([sys.executable, __file__, "--child", kind], capture_output=True, text=True, env=env)
        if out.returncode:
            raise SystemExit(f"child {kind} failed:\n{out.stderr[-2000:]}")
        picks[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}  "
          f"procs {procs} per tuner, rounds {rounds}")
    for B, H, N, D in CASES:
        key = f"{B}x{H}x{N}x{D}"
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
        group = "d128" if D >= 128 else "small_d"
        fns = {"sdpa_default": partial(F.scaled_dot_product_attention, q, k, v)}
        for c in af.GPU_CANDIDATES[group]:
            fns[af._name(c)] = partial(af.attention_tiled_fast, q, k, v, config=c)
        times = {n: [] for n in fns}
        for _ in range(rounds):
            for n, fn in fns.items():
                times[n].append(float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")))
        med = {n: statistics.median(t) for n, t in times.items()}
        best = min((n for n in med if n != "sdpa_default"), key=med.get)
        print(f"\n{key} float16")
        for n, t in med.items():
            spread = (max(times[n]) - min(times[n])) / t
            print(f"  {n:22s} {t:7.3f} ms  spread {spread:5.1%}  /sdpa {med['sdpa_default'] / t:5.3f}")
        for kind, ps in picks.items():
            chosen = [p[key] for p in ps]
            cost = statistics.mean(med[c] / med[best] - 1 for c in chosen)
            counts = {c: chosen.count(c) for c in sorted(set(chosen))}
            print(f"  {kind:7s} tuner picks {counts}; best {chosen.count(best)}/{len(chosen)}, "
                  f"mean cost of the pick {cost:+.1%}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", choices=["default", "steady"])
    a = ap.parse_args()
    child(a.child == "steady") if a.child else parent(a.procs, a.rounds)
