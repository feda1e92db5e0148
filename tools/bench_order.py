"""Does the order variants are timed in move the bench's ratio? (GPU only; docs/kernels_notes.md, run 10.)

Usage, from the repo root: ``PYTHONPATH=. python3 tools/bench_order.py [--rounds R]``. For every case of
``bench --cases issue31``, in one process, times SDPA's default, its cuDNN path and tiled_fast three ways:
A, one timing each in the order the bench used before run 10 (SDPA's default first, tiled_fast last, right
after its tuning); B, one timing each in the reverse order; C, ``bench.time_interleaved`` (R rounds, the
bench's way since). Prints tiled_fast / SDPA default for A, B and C, every time, and nvidia-smi's SM clock,
power and throttle reasons after each case. A diagnostic, not evidence: the labs read the recorder's bench.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
from functools import partial

import torch

from infralens_lab import bench


def _smi() -> str:
    q = "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    return subprocess.run(["nvidia-smi", q, "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    fns = dict(bench.attention_variants(("sdpa_cudnn", "tiled_fast")))
    print(torch.cuda.get_device_name(), "idle:", _smi())
    for shape, dt, causal in bench.ATTN_CASES_ISSUE31:
        q, k, v = (torch.randn(shape, device="cuda", dtype=getattr(torch, dt)) for _ in range(3))
        call = {n: partial(f, q, k, v, causal) for n, f in fns.items()}
        first = {n: bench._ms(call[n]) for n in ("sdpa_default", "sdpa_cudnn")}
        call["tiled_fast"]()  # tunes, right before it is timed, as the bench did
        first["tiled_fast"] = bench._ms(call["tiled_fast"])
        last = {n: bench._ms(call[n]) for n in ("tiled_fast", "sdpa_cudnn", "sdpa_default")}
        rounds = bench.time_interleaved({n: call[n] for n in ("sdpa_default", "tiled_fast", "sdpa_cudnn")}, a.rounds)
        mid = {n: statistics.median(ts) for n, ts in rounds.items()}
        ratio = {w: d["sdpa_default"] / d["tiled_fast"] for w, d in (("A", first), ("B", last), ("C", mid))}
        key = f"{'x'.join(map(str, shape))} {dt}{' causal' if causal else ''}"
        print(f"{key:30} ratio A {ratio['A']:.3f}  B {ratio['B']:.3f}  C {ratio['C']:.3f} | sdpa ms "
              f"{first['sdpa_default']:.3f} / {last['sdpa_default']:.3f} / {mid['sdpa_default']:.3f} | ours ms "
              f"{first['tiled_fast']:.3f} / {last['tiled_fast']:.3f} / {mid['tiled_fast']:.3f} | {_smi()}", flush=True)


if __name__ == "__main__":
    main()
