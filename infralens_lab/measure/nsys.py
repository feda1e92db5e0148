"""Nsight Systems, where it is installed: profile a target, return its summary tables.

``nsys`` is never a hard dependency. :func:`run_nsys` runs ``nsys profile`` on
``python -m infralens_lab target ...`` and then ``nsys stats`` for kernel, CUDA API and NVTX
summaries, returned as DataFrames by report name. Without ``nsys`` on PATH it raises
:class:`NsysUnavailable`, which says so and points to the torch.profiler timeline
(:mod:`infralens_lab.measure.torch_trace`), which shows the same kernels, ranges and gaps.
:func:`profile_command` / :func:`command_line` give the command to show in a lab either way.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..errors import InfraLensError
from .target import subprocess_env

REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum")


class NsysUnavailable(InfraLensError, RuntimeError):
    """Nsight Systems is not installed here (or could not run)."""

    def __init__(self, message: str = "Nsight Systems (`nsys`) is not on PATH.", fix: str = ""):
        self.message = message
        self.fix = fix or ("Use the torch.profiler timeline instead (infralens_lab.measure.torch_trace.profile and "
                           "infralens_lab.present.timeline.timeline): it shows the same kernels, NVTX/record_function "
                           "ranges and GPU idle gaps. To use nsys, install Nsight Systems from NVIDIA and put it on PATH.")
        super().__init__(f"{message}\nfix: {self.fix}")


def profile_command(target_args: Sequence[str], output: str = "infralens", nsys: str = "nsys",
                    python: str | None = None) -> list[str]:
    """``nsys profile`` argument list tracing CUDA, NVTX and OS runtime calls of the target."""
    return [nsys, "profile", "--trace", "cuda,nvtx,osrt", "--sample", "none", "--force-overwrite", "true",
            "--output", output, python or sys.executable, "-m", "infralens_lab", "target", *map(str, target_args)]


def stats_command(report: str, out_prefix: str, nsys: str = "nsys", reports: Sequence[str] = REPORTS) -> list[str]:
    """``nsys stats`` argument list writing one CSV per report as ``<out_prefix>_<report>.csv``."""
    return [nsys, "stats", "--force-export", "true", "--format", "csv", "--output", out_prefix,
            *[a for r in reports for a in ("--report", r)], report]


def command_line(target_args: Sequence[str], output: str = "infralens") -> str:
    """The ``nsys profile`` and ``nsys stats`` commands, shell-quoted, one per line, to show in a lab."""
    return (shlex.join(profile_command(target_args, output, python="python")) + "\n"
            + shlex.join(stats_command(f"{output}.nsys-rep", output)))


def run_nsys(target_args: Sequence[str], timeout: float = 300.0, reports: Sequence[str] = REPORTS) -> dict:
    """Profile the target with nsys and return ``{report name: DataFrame}``; raises :class:`NsysUnavailable`."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise NsysUnavailable()

    root, env = subprocess_env()
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "infralens")
        for cmd in (profile_command(target_args, out, nsys), stats_command(out + ".nsys-rep", out, nsys, reports)):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root, env=env)
            except subprocess.TimeoutExpired:
                raise NsysUnavailable(f"`{shlex.join(cmd[:3])} ...` did not finish within {timeout:.0f} s.") from None
            if r.returncode != 0:
                tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-5:])
                raise NsysUnavailable(f"`{shlex.join(cmd[:2])}` failed with code {r.returncode}: {tail}")
        tables = {}
        for rep in reports:
            p = Path(f"{out}_{rep}.csv")
            tables[rep] = pd.read_csv(p) if p.is_file() and p.stat().st_size else pd.DataFrame()
        return tables
