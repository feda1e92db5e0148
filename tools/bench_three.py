"""The bench in three fresh processes: every ratio's median and spread across them (issue 31; GPU only).

Usage, from the repo root on the GPU machine (plain python3, no Jupyter)::

    python3 tools/bench_three.py --out $OUT                     # bench --cases issue31, three processes
    python3 tools/bench_three.py --out $OUT -- --cases full     # the whole bench (copies too), three times
    python3 tools/bench_three.py --summarize a.json b.json c.json   # any machine: summary of saved runs

Each run is ``python3 -m infralens_lab bench --json $OUT/bench_runI.json <bench args>`` in its own process, one
after the other, so each tunes ``tiled_fast`` afresh (the autotuner keeps its choice in memory only) and
times SDPA again. Its table goes to ``$OUT/bench_runI.txt``. The summary (stdout, ``$OUT/bench_three.txt``
and ``.json``) gives, for every ratio the bench computes, its value in each run, the median, the spread
(min-max, and (max - min) / median) and whether the median meets the bench's target and issue 31's goal;
then every attention variant against SDPA's default (SDPA's flash and cuDNN paths beside ours) the same
way; then the config the autotuner picked for ``tiled_fast`` in each run. A ratio is from one run's own
rows: runs are never mixed within a ratio. A tool, not evidence: the labs read the recorder's numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BENCH_ARGS = ["--cases", "issue31"]


def issue31_goal(ratio_name: str) -> float | None:
    """Issue 31's goal for a ``tiled_fast / sdpa_default @ BxHxNxD dtype [causal]`` ratio (issue 42's, the same,
    for ``gluon / sdpa_default @ ...``): >= 1.0 at D = 64, >= 0.95 at D = 128 (16k included) and causal (the issue's causal row is D = 64), bf16 like fp16; None
    for any other ratio."""
    if not ratio_name.startswith(("tiled_fast / sdpa_default @ ", "gluon / sdpa_default @ ")):
        return None
    case = ratio_name.split(" @ ")[1].split()
    return 1.0 if case[0].split("x")[3] == "64" and "causal" not in case else 0.95


def run_three(out: Path, bench_args: list[str], runs: int = 3, timeout_s: float = 300,
              command: list[str] | None = None) -> list[dict]:
    """Run the bench ``runs`` times, each in a fresh process; return one record per run (``rc``, ``seconds``,
    ``json``: the result, or None with ``error`` when the run failed or timed out)."""
    out.mkdir(parents=True, exist_ok=True)
    command = command or [sys.executable, "-m", "infralens_lab", "bench"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    records = []
    for i in range(1, runs + 1):
        path = out / f"bench_run{i}.json"
        cmd = [*command, *bench_args, "--json", str(path)]
        print(f"run {i}/{runs}: {' '.join(cmd)}", flush=True)
        t0 = time.time()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout_s)
            rc, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout, stderr = None, exc.stdout or "", f"timed out after {timeout_s:.0f} s"
            stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
        seconds = time.time() - t0
        (out / f"bench_run{i}.txt").write_text(stdout + ("\n" + stderr if stderr else ""))
        rec = {"run": i, "rc": rc, "seconds": seconds, "json": None}
        if rc == 0 and path.exists():
            rec["json"] = json.loads(path.read_text())
        else:
            rec["error"] = (stderr or stdout).strip()[-2000:] or f"exit code {rc}, no output"
        print(f"run {i}/{runs}: exit {rc}, {seconds:.0f} s", flush=True)
        records.append(rec)
    return records


def _stats(values: list[float | None]) -> dict:
    got = [v for v in values if v is not None]
    if not got:
        return {"values": values, "n": 0, "median": None, "min": None, "max": None, "spread": None}
    med = statistics.median(got)
    return {"values": values, "n": len(got), "median": med, "min": min(got), "max": max(got),
            "spread": (max(got) - min(got)) / med if med else None}


def _label(row: dict) -> str:
    return "x".join(map(str, row["shape"])) + f" {row['dtype']}" + (" causal" if row["causal"] else "")


def _config_name(cfg: dict | None) -> str:
    if not cfg:
        return "-"
    name = f"BM{cfg['block_m']}-BN{cfg['block_n']}-w{cfg['num_warps']}-s{cfg['num_stages']}"
    return name + (f"-r{cfg['maxnreg']}" if cfg.get("maxnreg") else "") + ("-ws" if cfg.get("ws") else "")


def summarize(results: list[dict]) -> dict:
    """Per-ratio and per-variant statistics across runs (``results``: bench JSON results, one per run).

    ``ratios``: every ratio the bench computed, in the order first seen: its value in each run (None where
    a run lacks it), median, min, max, spread = (max - min) / median, the bench's target, whether the
    median meets it, issue 31's goal (:func:`issue31_goal`) and whether the median meets that.
    ``vs_sdpa``: every other attention variant's TFLOP/s over sdpa_default's of the same run and case (> 1:
    faster than SDPA's default), likewise. ``configs``: tiled_fast's config in each run, per case.
    ``wrong``: every row the bench marked incorrect (relative error against SDPA's default above its bound).
    """
    if not results:
        raise ValueError("summarize: no runs to summarize, expected at least one bench result")
    names, targets = [], {}
    for res in results:
        for r in res.get("ratios", []):
            if r["name"] not in targets:
                names.append(r["name"])
                targets[r["name"]] = r.get("target")
    ratios = []
    for name in names:
        vals = [next((r["value"] for r in res.get("ratios", []) if r["name"] == name), None) for res in results]
        st = _stats(vals)
        target, goal = targets[name], issue31_goal(name)
        ratios.append({"name": name, **st, "target": target, "goal": goal,
                       "target_met": None if target is None or st["median"] is None else st["median"] >= target,
                       "goal_met": None if goal is None or st["median"] is None else st["median"] >= goal})
    keys, wrong = [], []
    for i, res in enumerate(results, 1):
        for r in res.get("attention", []):
            if r["variant"] != "sdpa_default" and (_label(r), r["variant"]) not in keys:
                keys.append((_label(r), r["variant"]))
            if not r.get("correct", True):
                wrong.append(f"run{i} {_label(r)} {r['variant']}: rel err {r['rel_err']:.1e} against sdpa_default")
    vs_sdpa, configs = [], {}
    for case, variant in keys:
        vals = []
        for res in results:
            rows = {r["variant"]: r for r in res.get("attention", []) if _label(r) == case}
            ok = variant in rows and "sdpa_default" in rows
            vals.append(rows[variant]["tflops"] / rows["sdpa_default"]["tflops"] if ok else None)
            if variant == "tiled_fast":
                configs.setdefault(case, []).append(_config_name(rows[variant].get("config")) if variant in rows
                                                    else None)
        vs_sdpa.append({"case": case, "variant": variant, **_stats(vals)})
    metas = [res.get("meta", {}) for res in results]
    return {"runs": len(results), "gpus": sorted({m.get("gpu", "?") for m in metas}),
            "meta": metas[0], "dates": [m.get("date_utc") for m in metas],
            "ratios": ratios, "vs_sdpa": vs_sdpa, "configs": configs, "wrong": wrong}


def _f(v, fmt="{:.3f}"):
    return "-" if v is None else fmt.format(v)


def format_summary(summary: dict, seconds: list[float] | None = None) -> str:
    """The summary as fixed-width text: ratios, then variants against SDPA default, then tiled_fast configs."""
    meta, n = summary["meta"], summary["runs"]
    lines = [f"bench in {n} processes on {', '.join(summary['gpus'])} (torch {meta.get('torch', '?')}, "
             f"triton {meta.get('triton', '?')}, cases {meta.get('cases', 'full')}; {', '.join(map(str, summary['dates']))})"]
    if len(summary["gpus"]) > 1:
        lines.append("WARNING: the runs come from different GPUs; their ratios do not compare")
    if seconds:
        lines.append("wall seconds per process: " + ", ".join(f"{s:.0f}" for s in seconds)
                     + f" (total {sum(seconds):.0f})")
    lines += [f"WRONG OUTPUT {w}" for w in summary.get("wrong", [])]
    runs = [f"run{i + 1}" for i in range(n)]

    def table(head, rows):
        widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return [fmt.format(*head), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r).rstrip() for r in rows]

    def spread(s):
        return "-" if s["median"] is None else f"{s['min']:.3f}-{s['max']:.3f} ({s['spread']:.1%})"

    def verdict(value, met):
        return "" if value is None else f">= {value:g}: " + ("met" if met else "NOT met")

    lines += ["", "ratios (each from one run's own rows; median and spread across runs)"]
    lines += table(["ratio", *runs, "median", "min-max (spread)", "bench target", "issue 31 goal"],
                   [[r["name"], *(_f(v) for v in r["values"]), _f(r["median"]), spread(r),
                     verdict(r["target"], r["target_met"]), verdict(r["goal"], r["goal_met"])]
                    for r in summary["ratios"]])
    lines += ["", "attention, x SDPA default (sdpa_default time / variant time, same run; > 1 is faster)"]
    lines += table(["case", "variant", *runs, "median", "min-max (spread)"],
                   [[r["case"], r["variant"], *(_f(v) for v in r["values"]), _f(r["median"]), spread(r)]
                    for r in summary["vs_sdpa"]])
    if summary["configs"]:
        lines += ["", "tiled_fast: the autotuner's pick in each process"]
        lines += table(["case", *runs, "same in every run"],
                       [[case, *(c or "-" for c in cs), "yes" if len(set(cs)) == 1 else "NO"]
                        for case, cs in summary["configs"].items()])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args = DEFAULT_BENCH_ARGS
    if "--" in argv:
        i = argv.index("--")
        argv, bench_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench_three_out"), help="folder for every run's files")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300, help="seconds one bench process may take")
    ap.add_argument("--summarize", nargs="+", type=Path, metavar="JSON", help="summarize saved bench JSONs only")
    a = ap.parse_args(argv)
    if a.summarize:
        summary = summarize([json.loads(p.read_text()) for p in a.summarize])
        print(format_summary(summary))
        return 0
    if a.runs < 1:
        ap.error(f"--runs is {a.runs}, expected at least 1")
    if any(x in ("--json", "--out") for x in bench_args):
        ap.error(f"bench args {bench_args} name --json or --out; this tool writes $OUT/bench_runI.json itself")
    records = run_three(a.out, bench_args, a.runs, a.timeout)
    ok = [r for r in records if r["json"] is not None]
    for r in records:
        if r["json"] is None:
            print(f"run {r['run']} FAILED (exit {r['rc']}): {r['error']}", file=sys.stderr)
    if not ok:
        return 1
    summary = summarize([r["json"] for r in ok])
    summary["seconds"] = [r["seconds"] for r in records]
    summary["failed_runs"] = [r["run"] for r in records if r["json"] is None]
    text = format_summary(summary, summary["seconds"])
    if summary["failed_runs"]:
        text += f"\n\nruns that failed and are left out: {summary['failed_runs']}"
    print("\n" + text)
    (a.out / "bench_three.txt").write_text(text + "\n")
    (a.out / "bench_three.json").write_text(json.dumps(summary, indent=1))
    return 1 if summary["failed_runs"] else 0


if __name__ == "__main__":
    sys.exit(main())
