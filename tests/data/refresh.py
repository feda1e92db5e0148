"""Refresh tests/data from a recorded set and recompute every expected count from the files.

    python tests/data/refresh.py [data/recorded/<gpu-slug>]   (default: the DEFAULT set)

Copies the four ncu CSVs unedited, cuts the trace excerpt (ProfilerStep#3 and #4 of ``trace_bubble``, from
3 ms before #3 starts to #4's end, ``parse.trace.trim(max_depth=2)``), and writes ``ncu_expected.json``
and ``trace_bubble_excerpt.expected.json`` by reading those files with the package's parsers. Never
edit the expected files by hand: rerun this, and review the diff.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from infralens_lab import evidence  # noqa: E402  (after the path above)
from infralens_lab.parse import ncu  # noqa: E402  (after the path above)
from infralens_lab.parse.trace import load_trace, trim  # noqa: E402  (after the path above)

CSVS = ("ncu_copies.csv", "ncu_copies_stalls.csv", "ncu_attention.csv", "ncu_matmul.csv")
UNITS = {  # the units the tests pin, per file
    "ncu_copies.csv": ["gpu__time_duration.sum", "dram__bytes_read.sum", "lts__t_sector_hit_rate.pct",
                       "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "launch__grid_size"],
    "ncu_copies_stalls.csv": ["gpu__time_duration.sum", "smsp__pcsamp_sample_count", "launch__grid_size"],
    "ncu_attention.csv": ["gpu__time_duration.sum", "dram__bytes_read.sum", "lts__t_sector_hit_rate.pct",
                          "smsp__pcsamp_sample_count", "sm__inst_executed_pipe_tensor.sum", "launch__grid_size"],
    "ncu_matmul.csv": ["gpu__time_duration.sum", "dram__bytes_read.sum", "lts__t_sector_hit_rate.pct",
                       "sm__inst_executed_pipe_tensor.sum", "launch__grid_size"],
}


def ncu_expected() -> dict:
    out = {}
    for name in CSVS:
        df = ncu.parse_raw_csv((HERE / name).read_text())
        units = df.drop_duplicates("metric").set_index("metric")["unit"]
        out[name] = {"rows": len(df), "kernels": sorted(df["kernel"].unique()),
                     "launches": len(df[["config", "kernel", "launch"]].drop_duplicates()),
                     "configs": int(df["config"].nunique()), "numeric": int(df["value"].notna().sum()),
                     "units": {m: units[m] for m in UNITS[name]}}
    return out


def trace_excerpt(data: dict) -> dict:
    ev = data["traceEvents"]
    # two profiled steps, so that the gap between them (the input-pipeline bubble) lies inside the work the
    # profiled steps launched (the attribution rule: idle gaps are measured between that work, never before it)
    first = next(e for e in ev if e.get("name") == "ProfilerStep#3" and e.get("ph") == "X")
    step = next(e for e in ev if e.get("name") == "ProfilerStep#4" and e.get("ph") == "X")
    lo, hi = float(first["ts"]) - 3000.0, float(step["ts"]) + float(step["dur"])
    keep = [e for e in ev if "ts" in e and lo <= float(e["ts"]) <= hi]
    return trim({**data, "traceEvents": keep}, max_depth=2)


def trace_expected(raw: dict) -> dict:
    tr = load_trace(raw)
    gaps = tr.idle_gaps(min_gap_us=50)
    return {"window": "ProfilerStep#3 and #4 of the recorded bubble trace, from 3 ms before #3 starts to #4's end; "
                      "trim(max_depth=2)",
            "kernels": int((tr.events["cat"] == "kernel").sum()), "attributed": len(tr.launcher),
            "gaps": len(gaps), "causes": gaps["cause"].tolist(), "gap_us": [round(g, 3) for g in gaps["gap_us"]],
            "forward_launches": int(tr.ranges().set_index("name").loc["forward", "launches"])}


def main(argv: list[str]) -> int:
    src = Path(argv[0]) if argv else evidence.reference().folder
    store = evidence.RecordedStore(src)  # checked against its manifest; a record stored as .json.gz reads the same
    for name in CSVS:
        (HERE / name).write_text(store.text(name))
    raw = trace_excerpt(store.load("trace_bubble").values)
    (HERE / "trace_bubble_excerpt.json").write_text(json.dumps(raw))
    (HERE / "ncu_expected.json").write_text(json.dumps(ncu_expected(), indent=1) + "\n")
    (HERE / "trace_bubble_excerpt.expected.json").write_text(json.dumps(trace_expected(raw), indent=1) + "\n")
    print(f"tests/data refreshed from {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
