"""Nsight Compute, run: profile a target kernel in a subprocess and return ncu's CSV text.

:func:`run_ncu` profiles kernels of ``python -m infralens_lab target ...`` in a subprocess with
``ncu --csv --page raw --clock-control none --kernel-name regex:... --launch-skip S
--launch-count C --metrics ...`` and returns ncu's stdout (the CSV); :func:`ncu_command` /
:func:`command_line` build that exact command so a lab can show it. Reading the CSV is
:mod:`infralens_lab.parse.ncu`'s (metric names, :func:`~infralens_lab.parse.ncu.parse_raw_csv` and the
views). Failures raise an :class:`NcuError` subclass that says what happened and how to fix it, never a
raw traceback.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

# re-exported (F401): the errors a runner raises, so callers catch them from here
from ..parse.ncu import (  # noqa: F401  (re-exported: see above)
    FIX_NO_GPU,
    FIX_NO_KERNELS,
    FIX_NOT_FOUND,
    FIX_PERM,
    NVTX_RANGE,
    NcuCsvError,
    NcuError,
    NcuFailed,
    NcuMetricError,
    NcuNoGpu,
    NcuNoKernels,
    NcuNotFound,
    NcuPermissionError,
    NcuTimeout,
    _find_headers,
    _source_header,
    classify_failure,
    config_block,
)
from ..parse.runs import RunConfig, target_args
from .target import REGEX, subprocess_env

NCU_ENV = "INFRALENS_NCU"


def ncu_binary() -> str | None:
    """Path of ``ncu``: ``$INFRALENS_NCU`` if set, else ``ncu`` on PATH, else None.

    ``$INFRALENS_NCU`` naming no executable file raises :class:`NcuNotFound` saying so (it used to fall
    through to "not on PATH", which sent people to fix the wrong thing)."""
    env = os.environ.get(NCU_ENV, "").strip()
    if env:
        problem = ncu_env_problem(env)
        if problem:
            raise NcuNotFound(problem, f"Point {NCU_ENV} at the ncu executable (e.g. "
                              "/opt/nvidia/nsight-compute/<version>/ncu), or unset it to use ncu from PATH.")
        return env
    return shutil.which("ncu")


def ncu_env_problem(path: str) -> str:
    """Why ``$INFRALENS_NCU=path`` cannot be run (empty when it can)."""
    if not Path(path).exists():
        return f"{NCU_ENV}={path!r} names no file (no such file or folder)"
    if Path(path).is_dir():
        return f"{NCU_ENV}={path!r} is a folder; expected the ncu executable inside it"
    if not os.access(path, os.X_OK):
        return f"{NCU_ENV}={path!r} is not executable"
    return ""


# ---------------------------------------------------------------- command
def ncu_command(target_args: Sequence[str], kernel_regex: str, metrics: Sequence[str] | None = None,
                sections: Sequence[str] | None = None, launch_skip: int = 0, launch_count: int | None = 1,
                nvtx: bool = True, ncu: str = "ncu", python: str | None = None) -> list[str]:
    """The ncu argument list profiling ``python -m infralens_lab target <target_args>``.

    ``kernel_regex`` filters kernel names (``regex:`` is added); ``launch_skip`` matching launches are
    skipped, then ``launch_count`` are profiled (None: all). With ``nvtx`` only launches inside the
    target's ``infralens`` NVTX range (its measured iterations) are eligible.
    """
    if not isinstance(kernel_regex, str) or not kernel_regex:
        raise ValueError(f"kernel_regex={kernel_regex!r}; expected a non-empty regular expression string")
    re.compile(kernel_regex)
    if not metrics and not sections:
        raise ValueError("neither metrics nor sections given; expected at least one metric name or section")
    if not isinstance(launch_skip, int) or launch_skip < 0:
        raise ValueError(f"launch_skip={launch_skip!r}; expected an int >= 0")
    if launch_count is not None and (not isinstance(launch_count, int) or launch_count < 1):
        raise ValueError(f"launch_count={launch_count!r}; expected an int >= 1 or None")
    cmd = [ncu, "--csv", "--page", "raw", "--clock-control", "none", "--kernel-name", f"regex:{kernel_regex}"]
    if nvtx:
        cmd += ["--nvtx", "--nvtx-include", f"{NVTX_RANGE}/"]
    cmd += ["--launch-skip", str(launch_skip)]
    if launch_count is not None:
        cmd += ["--launch-count", str(launch_count)]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    for s in sections or ():
        cmd += ["--section", s]
    return [*cmd, python or sys.executable, "-m", "infralens_lab", "target", *map(str, target_args)]


def command_line(*args, **kwargs) -> str:
    """:func:`ncu_command` as one shell-quoted string, to show in a lab."""
    return shlex.join(ncu_command(*args, **kwargs))


def profile_runs(runs: Sequence[RunConfig], parts: dict[str, Sequence[str]], launch_count: int = 1) -> dict[str, str]:
    """Profile each run once per part (``{part: metrics}``, e.g. counters and stall samples: separate
    runs, as the recorder does) and join each part's outputs in the recorded block format
    (:func:`config_block`). Raises the :class:`NcuError` of the first run that fails."""
    out: dict[str, list[str]] = {p: [] for p in parts}
    for cfg in runs:
        target = ["--kernel", cfg.kind, *target_args(cfg), "--warmup", "1", "--iters", "1"]
        for part, metrics in parts.items():
            text = run_ncu(target, REGEX[cfg.kind], metrics=list(metrics), launch_count=launch_count)
            cmd = command_line(target, REGEX[cfg.kind], metrics=list(metrics), launch_count=launch_count)
            out[part].append(config_block(cfg.label(), cmd, text))
    return {p: "".join(blocks) for p, blocks in out.items()}


# ---------------------------------------------------------------- errors from output
def run_ncu(target_args: Sequence[str], kernel_regex: str, metrics: Sequence[str] | None = None,
            sections: Sequence[str] | None = None, launch_skip: int = 0, launch_count: int | None = 1,
            nvtx: bool = True, timeout: float = 300.0) -> str:
    """Profile kernels of ``python -m infralens_lab target <target_args>`` and return ncu's CSV text.

    Arguments as in :func:`ncu_command`; ``timeout`` in seconds. Raises an :class:`NcuError`
    subclass (not found, permission, no GPU, timeout, unknown metric, no kernels, failure).
    """
    ncu = ncu_binary()
    if ncu is None:
        raise NcuNotFound("Nsight Compute (`ncu`) is not on PATH.", FIX_NOT_FOUND)
    cmd = ncu_command(target_args, kernel_regex, metrics, sections, launch_skip, launch_count, nvtx, ncu=ncu)
    stdout, text = _run(cmd, timeout, kernel_regex=kernel_regex, metrics=metrics or (),
                        timeout_fix="Profile fewer launches or metrics (each metric group is a replay pass), "
                                    "or raise timeout.")
    if not _find_headers(stdout.splitlines()):
        raise NcuCsvError("ncu finished but printed no CSV header (a line starting with \"ID\").",
                          "Check that --csv --page raw reached ncu; run the command by hand.", text)
    return stdout


def _run(cmd: list[str], timeout: float, what: str = "", kernel_regex: str = "", metrics: Sequence[str] = (),
         timeout_fix: str = "Profile fewer launches or sections, or raise timeout.") -> tuple[str, str]:
    """Run one ncu command line (``what`` names the step in errors); return ``(stdout, stdout + stderr)``.
    Raises the :class:`NcuError` subclass :func:`classify_failure` finds, a timeout or ncu not starting."""
    root, env = subprocess_env()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root, env=env)
    except subprocess.TimeoutExpired as exc:
        got = (exc.stdout or b"")
        got = got.decode(errors="replace") if isinstance(got, bytes) else got
        raise NcuTimeout(f"ncu{f' ({what})' if what else ''} did not finish within {timeout:.0f} s.", timeout_fix,
                         got) from None
    except OSError as exc:
        raise NcuNotFound(f"ncu at {cmd[0]!r} could not be started: {exc}", FIX_NOT_FOUND) from None
    text = out.stdout + ("\n" + out.stderr if out.stderr else "")
    err = classify_failure(text, out.returncode, list(metrics), kernel_regex)
    if err is not None:
        raise err
    return out.stdout, text


# ---------------------------------------------------------------- source page: counters per SASS instruction
# Sections behind ncu's Source page (Nsight Compute CLI, "--page source"; Kernel Profiling Guide, "Source
# Counters"): SourceCounters gives per-instruction executed counts and warp-state samples, WarpStateStats the
# sampling itself, InstructionStats the opcode mix (sass__inst_executed_per_opcode).
SOURCE_SECTIONS = ("SourceCounters", "WarpStateStats", "InstructionStats")

def _report_base(report: str) -> str:
    return report[:-len(".ncu-rep")] if report.endswith(".ncu-rep") else report


def source_commands(target_args: Sequence[str], kernel_regex: str, report: str, launch_skip: int = 0,
                    launch_count: int = 1, nvtx: bool = True, ncu: str = "ncu",
                    python: str | None = None) -> tuple[list[str], list[str], list[str], list[str]]:
    """The four ncu argument lists of a per-instruction capture: profile one launch of
    ``python -m infralens_lab target <target_args>`` with :data:`SOURCE_SECTIONS` into ``report``
    (``--export``; ``.ncu-rep`` is added), then export that report's Source page
    (``--import ... --csv --page source --print-source sass``: one row per SASS instruction) and its raw page
    (``--page raw``: the same report's kernel-level counters) twice, plain and with
    ``--print-metric-instances details`` (instanced metrics such as ``sass__inst_executed_per_opcode`` then carry
    their per-opcode values, ``"total (OPCODE: n; ...)"``). Filters as in :func:`ncu_command`."""
    base = ncu_command(target_args, kernel_regex, sections=SOURCE_SECTIONS, launch_skip=launch_skip,
                       launch_count=launch_count, nvtx=nvtx, ncu=ncu, python=python)
    cut = base.index(python or sys.executable) if (python or sys.executable) in base else len(base)
    profile = [a for a in base[:cut] if a not in ("--csv",)]
    i = profile.index("--page")
    del profile[i:i + 2]  # the report keeps everything; pages are chosen at export
    profile += ["--force-overwrite", "--export", _report_base(report), *base[cut:]]
    rep = _report_base(report) + ".ncu-rep"
    raw = [ncu, "--import", rep, "--csv", "--page", "raw"]
    return (profile, [ncu, "--import", rep, "--csv", "--page", "source", "--print-source", "sass"], raw,
            [*raw, "--print-metric-instances", "details"])


def source_command_line(target_args: Sequence[str], page: str = "source", **kwargs) -> str:
    """The profile command and the export of ``page`` (``"source"``, ``"raw"`` or ``"instances"``) of
    :func:`source_commands`,
    shell-quoted and joined by `` ; `` (the report path is a placeholder), to record beside the CSV."""
    cmds = dict(zip(("profile", "source", "raw", "instances"), source_commands(target_args, report="REPORT", **kwargs), strict=True))
    if page not in cmds or page == "profile":
        raise ValueError(f"page={page!r}; expected 'source', 'raw' or 'instances'")
    return shlex.join(cmds["profile"]) + " ; " + shlex.join(cmds[page])


def run_ncu_source(target_args: Sequence[str], kernel_regex: str, launch_skip: int = 0, launch_count: int = 1,
                   nvtx: bool = True, timeout: float = 240.0) -> dict[str, str]:
    """Capture per-instruction counters of one launch (:func:`source_commands`) and return
    ``{"source": CSV of the Source page, "raw": CSV of the raw page, "instances": the raw page with instance
    values}``. The report lives in a temporary folder
    and is deleted (it is binary and large; only CSV text is kept). Raises an :class:`NcuError` subclass."""

    ncu = ncu_binary()
    if ncu is None:
        raise NcuNotFound("Nsight Compute (`ncu`) is not on PATH.", FIX_NOT_FOUND)
    with tempfile.TemporaryDirectory(prefix="infralens_ncu_") as tmp:
        profile, source, raw, inst = source_commands(target_args, kernel_regex, str(Path(tmp) / "source"),
                                                     launch_skip, launch_count, nvtx, ncu=ncu)
        _run(profile, timeout, "profile", kernel_regex)  # its output is the report file
        if not Path(source[2]).exists():
            raise NcuNoKernels(f"ncu wrote no report ({Path(source[2]).name}): no kernel matched "
                               f"regex {kernel_regex!r} in the launch window.", FIX_NO_KERNELS)
        out = {"source": _run(source, timeout, "source page export")[0],
               "raw": _run(raw, timeout, "raw page export")[0],
               "instances": _run(inst, timeout, "raw page export with instances")[0]}
    if _source_header(out["source"].splitlines()) is None:
        raise NcuCsvError("ncu exported no Source page header (a row with \"Address\" and \"Source\").",
                          "Check that the SourceCounters section was collected; run the commands by hand.",
                          out["source"])
    return out


