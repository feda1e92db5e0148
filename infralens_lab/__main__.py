"""Command line: ``python -m infralens_lab <command> [options]``.

Commands: ``doctor`` (check this machine), ``bench`` (kernel benchmark, GPU),
``record`` (write recorded evidence, GPU), ``site`` (offline HTML edition),
``target`` (the workload script Nsight Compute profiles), ``analyze`` (any torch.profiler trace), ``gates``. Plain python3 only: nothing here
needs Jupyter or IPython.
"""
from __future__ import annotations

import importlib
import sys

from .device import GpuUnavailableError, ModeSettingError

COMMANDS = {
    "doctor": ("infralens_lab.doctor", "check GPU, drivers, profilers and counters; say how to fix problems"),
    "bench": ("infralens_lab.bench", "benchmark copies and attention against torch (GPU)"),
    "record": ("infralens_lab.record", "record the evidence the labs show, with provenance (GPU)"),
    "site": ("infralens_lab.site", "build the offline HTML edition from the committed notebooks"),
    "analyze": ("infralens_lab.analyze", "what the labs show, for your own torch.profiler trace (or rank folder)"),
    "evidence": ("infralens_lab.evidence", "recorded sets: store large traces compressed, verify checksums"),
    "gates": ("infralens_lab.gates_cli", "regression gates: counts (any machine), time ratios (GPU)"),
    "target": ("infralens_lab.measure.target", "run one kernel workload (what ncu/nsys profile)"),
}


def usage() -> str:
    lines = ["usage: python -m infralens_lab <command> [options]", "", "commands:"]
    lines += [f"  {name:<9} {desc}" for name, (_, desc) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"unknown command {cmd!r}; expected one of {sorted(COMMANDS)}\n\n{usage()}", file=sys.stderr)
        return 2

    try:
        module = importlib.import_module(COMMANDS[cmd][0])
        return int(module.main(rest) or 0)
    except (ModeSettingError, GpuUnavailableError) as exc:  # a mode the machine cannot give: say so, no traceback
        print(f"{cmd}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
