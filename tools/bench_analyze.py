"""How long `analyze` takes on a large trace, beside Holistic Trace Analysis on the same file (CPU only).

Usage, from the repo root: ``.venv/bin/python tools/bench_analyze.py [--mb 200] [--trace trace_fixed] [--hta]``.
Builds one chrome trace of about ``--mb`` MB by repeating the events of a committed recorded trace end to end
(each copy shifted by the original's span, its correlation ids and ``ProfilerStep#N`` numbers renumbered, so the
big trace is one long profiled run of many steps), then runs ``python -m infralens_lab analyze FILE`` in a child
process and, with ``--hta``, HTA 0.5.0's ``TraceAnalysis`` plus its temporal breakdown in another. Prints each
tool's wall time, CPU time and peak resident memory (the child's ``ru_maxrss``). A diagnostic, not evidence: the
machine it ran on is printed with it, and nothing is written to data/.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^ProfilerStep#(\d+)$")

HTA_SCRIPT = """
import logging, os, sys
os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
logging.getLogger("hta").setLevel(logging.ERROR)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
print(ta.get_temporal_breakdown(visualize=False).to_string())
"""


def big_trace(values: dict, target_bytes: int) -> tuple[dict, int]:
    """The trace ``values`` repeated end to end until its JSON reaches ``target_bytes``: ``(trace, copies)``."""
    events = values["traceEvents"]
    ts = [float(e["ts"]) for e in events if "ts" in e]
    span = max(float(e["ts"]) + float(e.get("dur", 0)) for e in events if "ts" in e) - min(ts) + 1000.0
    steps = sorted({int(m.group(1)) for e in events if (m := STEP.match(str(e.get("name", ""))))})
    corr = [e.get("args", {}).get("correlation") for e in events]
    corr_span = max((c for c in corr if isinstance(c, int)), default=0) + 1
    one = len(json.dumps(values))
    copies = max(1, round(target_bytes / one))
    out = []
    for k in range(copies):
        for e in events:
            e2 = copy.deepcopy(e)
            if "ts" in e2:
                e2["ts"] = float(e2["ts"]) + k * span
            args = e2.get("args")
            if isinstance(args, dict) and isinstance(args.get("correlation"), int):
                args["correlation"] += k * corr_span
            if e2.get("cat") == "ac2g" and isinstance(e2.get("id"), int):
                e2["id"] += k * corr_span
            m = STEP.match(str(e2.get("name", "")))
            if m:
                e2["name"] = f"ProfilerStep#{int(m.group(1)) + k * (len(steps) or 1)}"
            out.append(e2)
    return {**{k: v for k, v in values.items() if k != "traceEvents"}, "traceEvents": out}, copies


def timed(cmd: list[str]) -> dict:
    """Run ``cmd`` to its end: wall seconds, CPU seconds and peak RSS (GB) of that child alone (``os.wait4``),
    its exit code and the tail of what it printed."""
    with tempfile.TemporaryFile() as out:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        out.seek(0)
        tail = out.read().decode(errors="replace")[-600:]
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_gb": ru.ru_maxrss / 1024**2,
            "rc": os.waitstatus_to_exitcode(status), "tail": tail}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=200.0, help="size of the trace to build, MB")
    ap.add_argument("--trace", default="trace_fixed", help="committed trace to repeat (the default set)")
    ap.add_argument("--hta", action="store_true", help="also time HTA 0.5.0 on the same file")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from infralens_lab import evidence

    ev = evidence.reference().load(a.trace)
    big, copies = big_trace(ev.values, int(a.mb * 1e6))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rank-0.json"
        path.write_text(json.dumps({**big, "distributedInfo": {"rank": 0}}))
        size = path.stat().st_size
        print(f"{platform.node()} · {os.cpu_count()} cores · {a.trace} ({ev.provenance.gpu}) x {copies} = "
              f"{size / 1e6:.0f} MB, {len(big['traceEvents'])} events")
        rows = {"analyze": timed([sys.executable, "-m", "infralens_lab", "analyze", str(path)])}
        if a.hta:
            rows["HTA 0.5.0"] = timed([sys.executable, "-c", HTA_SCRIPT, d])
    print("| tool | wall s | CPU s | peak GB | exit |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['peak_gb']:.2f} | {r['rc']} |")
    for name, r in rows.items():
        if r["rc"]:
            print(f"{name} failed:\n{r['tail']}")
    return max(r["rc"] for r in rows.values())


if __name__ == "__main__":
    sys.exit(main())
