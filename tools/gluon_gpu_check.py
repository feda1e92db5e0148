"""Check and time every Gluon attention variant on a Hopper GPU in one call (issue 42; GPU only).

Usage, from the repo root on the GPU machine: ``python3 tools/gluon_gpu_check.py --out $OUT [--skip-time]``.
Each variant of ``attention_gluon.VARIANTS`` is first checked in its own process (a deadlocked barrier or a
crash then costs that variant only, after ``--timeout`` seconds): fresh ``torch.randn`` inputs, output
poisoned with NaN, ragged and odd shapes, D = 64 and 128, float16 and bfloat16, causal and not, against the
float32 reference with the package tolerance (``kernels.check.TOLERANCES``). Then the variants that passed
every check are timed beside SDPA (default, cuDNN, flash) and ``tiled_fast`` on issue 31's cases, in
interleaved rounds (``bench.time_interleaved``). Prints the GPU's name and clocks; writes
``$OUT/gluon_check.json`` and ``$OUT/gluon_time.txt``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHAPES = [(1, 3, 777, 128), (2, 5, 1000, 128), (1, 2, 1, 128), (1, 1, 130, 64), (2, 3, 777, 64), (1, 2, 4096, 128)]


def child_check(variant: str) -> dict:
    import torch

    from infralens_lab.kernels.attention_gluon import attention_gluon
    from infralens_lab.kernels.check import TOLERANCES
    from infralens_lab.kernels.reference import attention_ref

    rows = []
    for shape in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                q, k, v = (torch.randn(shape, device="cuda").to(dtype) for _ in range(3))
                out = torch.full_like(q, float("nan"))
                t0 = time.time()
                try:
                    attention_gluon(q, k, v, causal=causal, variant=variant, out=out)
                    torch.cuda.synchronize()
                except Exception as e:  # a result: the variant fails on this case
                    rows.append({"shape": shape, "dtype": str(dtype), "causal": causal, "ok": False,
                                 "error": f"{type(e).__name__}: {str(e)[:300]}"})
                    continue
                ref = attention_ref(q.float(), k.float(), v.float(), causal=causal)
                err = (out.float() - ref).abs()
                try:
                    torch.testing.assert_close(out.float(), ref, **TOLERANCES[dtype])
                    ok = True
                except AssertionError:
                    ok = False
                rows.append({"shape": shape, "dtype": str(dtype), "causal": causal, "ok": ok,
                             "nan": int(out.isnan().sum()), "max_abs_err": float(err.nan_to_num(1e9).max()),
                             "rel_err": float((out.float() - ref).norm() / ref.norm()), "s": time.time() - t0})
    return {"variant": variant, "ok": all(r["ok"] for r in rows), "rows": rows}


def _gluon(fn, variant, q, k, v, causal):
    return fn(q, k, v, causal=causal, variant=variant)


def child_time(variants: list[str], rounds: int) -> str:
    import torch

    from infralens_lab.bench import ATTN_CASES_ISSUE31, _sdpa, time_interleaved
    from infralens_lab.kernels.attention_fast import attention_tiled_fast, last_config
    from infralens_lab.kernels.attention_gluon import attention_gluon

    lines = [f"{torch.cuda.get_device_name()}; torch {torch.__version__}; rounds {rounds}; x SDPA default = "
             f"sdpa_default ms / variant ms (> 1 faster)"]
    names = ["sdpa_default", "sdpa_cudnn", "sdpa_flash", "tiled_fast", *[f"gluon_{v}" for v in variants]]
    lines.append(f"{'case':32} " + " ".join(f"{n:>16}" for n in names))
    for shape, dt, causal in ATTN_CASES_ISSUE31:
        dtype = getattr(torch, dt)
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3))
        fns = {"sdpa_default": _sdpa(None), "sdpa_cudnn": _sdpa("cudnn"), "sdpa_flash": _sdpa("flash"),
               "tiled_fast": attention_tiled_fast}
        for v_ in variants:
            fns[f"gluon_{v_}"] = partial(_gluon, attention_gluon, v_)
        ref = fns["sdpa_default"](q, k, v, causal)
        calls, errs = {}, {}
        for n, f in fns.items():
            o = f(q, k, v, causal)
            errs[n] = float((o.float() - ref.float()).norm() / ref.float().norm())
            calls[n] = partial(f, q, k, v, causal)
        times = time_interleaved(calls, rounds)
        med = {n: sorted(ts)[len(ts) // 2] for n, ts in times.items()}
        case = "x".join(map(str, shape)) + f" {dt}" + (" causal" if causal else "")
        lines.append(f"{case:32} " + " ".join(f"{med['sdpa_default'] / med[n]:16.3f}" for n in names))
        lines.append(f"{'  ms':32} " + " ".join(f"{med[n]:16.3f}" for n in names))
        bad = [f"{n} {e:.1e}" for n, e in errs.items() if e > 1e-2]
        lines.append(f"  tiled_fast config {last_config()}" + (f"; REL ERR > 1e-2: {bad}" if bad else ""))
        print(lines[-3], flush=True)
    return "\n".join(lines)


def clocks() -> str:
    q = "name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,utilization.gpu"
    r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True, text=True)
    return r.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("gluon_out"))
    ap.add_argument("--child", default="")
    ap.add_argument("--time", nargs="*", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--skip-time", action="store_true")
    ap.add_argument("--variants", nargs="*", default=None)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child_check(a.child)))
        return 0
    if a.time is not None:
        print(child_time(a.time, a.rounds))
        return 0
    from infralens_lab.kernels.attention_gluon import VARIANTS

    a.out.mkdir(parents=True, exist_ok=True)
    print(clocks(), flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    results, passed = [], []
    todo = a.variants or list(VARIANTS)
    t0 = time.time()
    # The checks run in parallel processes (correctness does not mind sharing the GPU; compiling is CPU work).
    procs = {v: subprocess.Popen([sys.executable, __file__, "--child", v], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env) for v in todo}
    for v, p in procs.items():
        try:
            out, err = p.communicate(timeout=max(1.0, a.timeout - (time.time() - t0)))
            res = json.loads(out.strip().splitlines()[-1]) if p.returncode == 0 else {
                "variant": v, "ok": False, "error": err[-1500:]}
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            res = {"variant": v, "ok": False, "error": f"timed out after {a.timeout:.0f} s (a deadlock?)"}
        res["seconds"] = time.time() - t0
        results.append(res)
        bad = [x for x in res.get("rows", []) if not x["ok"]]
        print(f"check {v:9} {'PASS' if res['ok'] else 'FAIL'} {res['seconds']:.0f} s "
              f"{len(res.get('rows', [])) - len(bad)}/{len(res.get('rows', []))} cases; "
              f"{res.get('error', '')[-600:]}", flush=True)
        for x in bad[:6]:
            print("   ", x, flush=True)
        if res["ok"]:
            passed.append(v)
    (a.out / "gluon_check.json").write_text(json.dumps(results, indent=1))
    if a.skip_time or not passed:
        return 0 if passed else 1
    r = subprocess.run([sys.executable, __file__, "--time", *passed, "--rounds", str(a.rounds)],
                       capture_output=True, text=True, env=env, timeout=900)
    text = clocks() + "\n" + r.stdout + ("\n" + r.stderr[-3000:] if r.returncode else "")
    (a.out / "gluon_time.txt").write_text(text)
    print(text)
    print(clocks())
    return 0


if __name__ == "__main__":
    sys.exit(main())
