"""The doctor: what this machine can do for the labs, and how to fix what it cannot.

``python -m infralens_lab doctor`` or ``infralens_lab.doctor()`` in a notebook. Each check
ends as ``ok``, ``note`` (works, with a limit worth knowing) or ``problem`` (something a
lab would like to use is missing), and every non-ok line carries a one- or two-sentence
fix. The doctor never raises: a probe that fails becomes a line of the report.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

from . import colab, device
from .evidence import default_reference, recordings
from .units import GiB, MiB

PARAMS_FILE = Path("/proc/driver/nvidia/params")

FIX_NO_GPU = ("No usable CUDA GPU, so kernels run in Triton's interpreter and performance numbers come "
              "from recorded evidence. To measure live, run the labs on a machine with an NVIDIA GPU, "
              "its driver and a CUDA build of torch (`make lab` installs one when `nvidia-smi` works).")
FIX_NO_NCU = ("Nsight Compute (`ncu`) is not on PATH, so kernel counters come from recorded evidence. "
              "Install it with the CUDA toolkit or from NVIDIA's Nsight Compute page and add its folder "
              "(e.g. /opt/nvidia/nsight-compute/<version>) to PATH.")
FIX_NO_NCU_NO_GPU = ("Nothing to do here. On a machine with an NVIDIA GPU, install Nsight Compute "
                     "with the CUDA toolkit and put `ncu` on PATH to read counters live.")
FIX_MODE_SETTING = (f"`unset {device.MODE_ENV}` to let the labs detect the GPU, or set it to `interpreter` "
                    "(Triton's interpreter on the CPU) or `gpu` (only on a machine with a usable CUDA GPU).")
FIX_NO_NSYS = ("Nsight Systems (`nsys`) is not on PATH; the labs use torch.profiler's timeline instead "
               "and show the `nsys` command to run where it is installed.")
MODULE_OPTION = "options nvidia NVreg_RestrictProfilingToAdminUsers=0"
MODPROBE_DIR = Path("/etc/modprobe.d")
CAP_SYS_ADMIN = 21  # the capability bit (linux/capability.h) ncu needs to read counters restricted to admins
FIX_CPU_TORCH = ("This torch is a CPU build although an NVIDIA GPU is present. Reinstall a CUDA build: "
                 "`rm -rf .venv && make lab` picks one when `nvidia-smi` works.")
FIX_NO_RECORDED = ("No recorded evidence was found, so labs on this machine have nothing to show for "
                   "performance. Use a clean clone of the repository, or record your own on a GPU with "
                   "`python -m infralens_lab record --out data/recorded/<gpu-slug>`.")


@dataclass(frozen=True)
class CounterSituation:
    """What decides the fix for ERR_NVGPUCTRPERM here: root or not, CAP_SYS_ADMIN in effect (None: unknown),
    the container this runs in (None: none found), the hosted notebook service (Colab, Kaggle; None: none), and
    whether /etc/modprobe.d, where the driver's module option is set, is writable by this process."""

    root: bool
    sys_admin: bool | None = None
    container: str | None = None
    hosted: str | None = None
    modprobe_writable: bool = False


def counter_fix(s: CounterSituation) -> tuple[str, str]:
    """``(status, fix)`` for counters restricted to administrators, for the learner's situation ``s``: nothing
    to do on a hosted service (``note``: the labs use recorded counters), the host's job in a container, the
    module option written by root, or by sudo, on a machine of one's own."""
    option = f"`{MODULE_OPTION}`"
    if s.hosted:
        return "note", (f"Not possible on this host ({s.hosted}): the GPU's driver belongs to the service, which "
                        "keeps its performance counters to administrators, and nothing inside the notebook can "
                        "change that. The labs use recorded counters.")
    if s.container:
        return "problem", (f"Not settable inside this container ({s.container}): the module option belongs to the "
                           f"host's driver. Whoever runs the host can put {option} in its {MODPROBE_DIR}/ and "
                           "reboot, or start the container with `--cap-add=SYS_ADMIN`. Until then the labs use "
                           "recorded counters.")
    if s.root and s.modprobe_writable:
        return "problem", (f"You are root here: allow every user with `echo '{MODULE_OPTION}' > "
                           f"{MODPROBE_DIR}/nvidia-profiling.conf`, then `update-initramfs -u` (Debian, Ubuntu) and "
                           "reboot.")
    if s.root:
        return "problem", (f"Not settable on this host: {MODPROBE_DIR} is not writable even as root (a read-only "
                           "image). The image's maker can add the module option; until then the labs use recorded "
                           "counters.")
    return "problem", (f"You are not root, and ncu reads counters here only as an administrator. With sudo: `echo "
                       f"'{MODULE_OPTION}' | sudo tee {MODPROBE_DIR}/nvidia-profiling.conf`, then `sudo "
                       "update-initramfs -u` (Debian, Ubuntu) and reboot; without it, ask the administrator. Until "
                       "then the labs use recorded counters.")


def container_kind() -> str | None:
    """The container this process runs in (``docker``, ``podman``, ``kubernetes``, ...), or None when none is
    found (marker files, then PID 1's control groups; a cgroup-v2 container may go unseen)."""
    if Path("/.dockerenv").exists():
        return "docker"
    if Path("/run/.containerenv").exists():
        return "podman"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    try:
        groups = Path("/proc/1/cgroup").read_text()
    except OSError:
        return None
    return next((k for k in ("kubepods", "docker", "containerd", "lxc") if k in groups), None)


def has_sys_admin() -> bool | None:
    """Whether CAP_SYS_ADMIN is in this process's effective capabilities (``CapEff`` of /proc/self/status), or
    None where that cannot be read."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    return None


FIX_NO_WIDGETS = ("ipywidgets is not importable, so quiz self-check buttons will not show (answers in "
                  "variables still work). Install it with `pip install ipywidgets` or run `make lab`.")


@dataclass
class Check:
    name: str
    status: str  # ok | note | problem
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = {"ok": "ok     ", "note": "note   ", "problem": "PROBLEM"}[self.status]
        s = f"[{mark}] {self.name}: {self.detail}"
        if self.fix and self.status != "ok":
            s += f"\n          fix: {self.fix}"
        return s


@dataclass
class Probes:
    """Everything the doctor asks of the machine; tests replace these with fakes."""

    facts: callable = device.facts
    which: callable = shutil.which
    tool_version: callable = device.tool_version
    params_text: callable = None
    is_root: callable = None
    counter_probe: callable = None  # runs ncu once on a tiny kernel; returns its output text
    recordings: callable = None
    default_reference: callable = None  # -> (slug or None, why): the set the labs use
    numpy_problem: callable = None  # -> the sentence saying this numpy breaks Triton's interpreter, or None
    container: callable = container_kind
    sys_admin: callable = has_sys_admin
    hosted: callable = colab.hosted
    modprobe_writable: callable = None

    def __post_init__(self):
        if self.params_text is None:
            self.params_text = lambda: PARAMS_FILE.read_text() if PARAMS_FILE.exists() else None
        if self.is_root is None:
            self.is_root = lambda: hasattr(os, "geteuid") and os.geteuid() == 0
        if self.recordings is None:
            self.recordings = recordings
        if self.default_reference is None:
            self.default_reference = default_reference
        if self.numpy_problem is None:
            self.numpy_problem = device.numpy_interpreter_problem
        if self.modprobe_writable is None:
            self.modprobe_writable = lambda: MODPROBE_DIR.is_dir() and os.access(MODPROBE_DIR, os.W_OK)

    def counter_situation(self) -> CounterSituation:
        """The situation :func:`counter_fix` words the fix for, from these probes."""
        return CounterSituation(root=bool(self.is_root()), sys_admin=self.sys_admin(), container=self.container(),
                                hosted=self.hosted(), modprobe_writable=bool(self.modprobe_writable()))


@dataclass
class DoctorReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if c.status == "problem"]

    def by_name(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self.checks]}")

    def __str__(self) -> str:
        head = "InfraLens Lab doctor"
        if any(c.name == "mode" for c in self.problems):
            tail = (f"{len(self.problems)} problem(s); the labs cannot choose how to run kernels until the "
                    "mode problem is fixed.")
        elif self.problems:
            tail = (f"{len(self.problems)} problem(s); the labs still run, falling back to recorded evidence "
                    "where a tool is missing.")
        else:
            tail = "Everything the labs use is here."
        return "\n".join([head, *(c.line() for c in self.checks), tail])


def counters_restricted(params: str | None) -> bool | None:
    """True if ``RmProfilingAdminOnly: 1`` is in the driver params, False if 0, None if unknown."""
    if not params:
        return None
    for line in params.splitlines():
        if line.strip().startswith("RmProfilingAdminOnly"):
            return line.split(":", 1)[-1].strip() == "1"
    return None


def probe_counters_with_ncu(timeout: float = 120.0) -> str:
    """Run ncu on one tiny torch kernel and return its combined output (for ERR_NVGPUCTRPERM)."""
    code = "import torch; x=torch.ones(1024, device='cuda'); (x+1).sum().item()"
    out = subprocess.run(["ncu", "--metrics", "gpu__time_duration.sum", "--launch-count", "1",
                          sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    return out.stdout + out.stderr


def _safe(name: str, fn, checks: list[Check]) -> None:
    try:
        fn()
    except Exception as exc:  # the doctor never crashes
        checks.append(Check(name, "problem", f"the check itself failed: {type(exc).__name__}: {exc}",
                            "Please report this with the output of `python -m infralens_lab doctor`."))


def run_doctor(verbose: bool = True, probes: Probes | None = None, probe_counters: bool = False) -> DoctorReport:
    """Run every check, print the report if ``verbose``, and return it."""
    p = probes or Probes()
    checks: list[Check] = []
    state: dict = {}

    def mode_check():
        try:
            f = p.facts()
        except (device.ModeSettingError, device.GpuUnavailableError) as exc:
            seen = os.environ.get(device.MODE_ENV)
            reason = str(exc).split(" Fix:")[0]
            checks.append(Check("mode", "problem", f"{device.MODE_ENV}={seen!r} cannot be used: {reason}",
                                FIX_MODE_SETTING))
            return
        state["facts"] = f
        if f.mode == "gpu":
            checks.append(Check("mode", "ok", f"gpu ({f.mode_reason})"))
        else:
            fix = "" if "forced" in f.mode_reason else FIX_NO_GPU
            checks.append(Check("mode", "note", f"interpreter ({f.mode_reason})", fix))

    def gpu_check():
        f = state.get("facts")
        if f is None or f.mode != "gpu":
            checks.append(Check("gpu", "note", "none in use", ""))
            return
        mem = f"{f.memory_bytes / GiB:.0f} GiB" if f.memory_bytes else "?"
        l2 = f"{f.l2_bytes / MiB:.0f} MiB L2" if f.l2_bytes else "L2 ?"
        checks.append(Check("gpu", "ok", f"{f.name}, sm_{(f.compute_capability or '?').replace('.', '')}, "
                                         f"{f.sm_count} SMs, {l2}, {mem}, driver {f.driver or '?'}"))

    def versions_check():
        f = state.get("facts")
        if f is None:  # the mode could not be decided: the versions still can be read

            import torch  # heavy: torch, only here
            import triton  # heavy: triton, only here

            detail = (f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none: CPU build'}), "
                      f"triton {triton.__version__}, python {platform.python_version()}")
            checks.append(Check("versions", "ok", detail))
            return
        detail = f"torch {f.torch} (CUDA {f.cuda or 'none: CPU build'}), triton {f.triton}, python {f.python}"
        if f.mode != "gpu" and f.cuda is None and p.which("nvidia-smi"):
            checks.append(Check("versions", "problem", detail, FIX_CPU_TORCH))
        else:
            checks.append(Check("versions", "ok", detail))
        bad = p.numpy_problem()
        if bad:  # the labs run kernels in the interpreter without a GPU; with one, only the count gates do
            what, fix = bad.split(" Fix: ", 1)
            checks.append(Check("numpy", "problem" if f.mode != "gpu" else "note", what, fix))

    def ncu_check():
        from .measure.ncu import NCU_ENV, ncu_env_problem  # light: ncu pulls pandas; the doctor must run without it

        env = os.environ.get(NCU_ENV, "").strip()
        if env:
            problem = ncu_env_problem(env)
            if problem:
                checks.append(Check("ncu", "problem", problem, f"Point {NCU_ENV} at the ncu executable (e.g. "
                                    "/opt/nvidia/nsight-compute/<version>/ncu), or unset it to use ncu from PATH."))
            else:
                checks.append(Check("ncu", "ok", f"Nsight Compute {p.tool_version(env) or '(version unknown)'} "
                                                 f"({NCU_ENV}={env})"))
            return
        if not p.which("ncu"):
            f = state.get("facts")
            if f is not None and f.mode == "gpu":
                checks.append(Check("ncu", "problem", "not on PATH", FIX_NO_NCU))
            else:  # ncu profiles a GPU: without one in use it could not run, so it is not missing
                checks.append(Check("ncu", "note", "not on PATH; without a GPU in use it would have nothing "
                                                   "to profile, so the labs show recorded counters",
                                    FIX_NO_NCU_NO_GPU))
            return
        checks.append(Check("ncu", "ok", f"Nsight Compute {p.tool_version('ncu') or '(version unknown)'}"))

    def nsys_check():
        if not p.which("nsys"):
            checks.append(Check("nsys", "note", "not on PATH", FIX_NO_NSYS))
            return
        checks.append(Check("nsys", "ok", f"Nsight Systems {p.tool_version('nsys') or '(version unknown)'}"))

    def counters_check():
        f = state.get("facts")
        if f is None or f.mode != "gpu":
            checks.append(Check("counters", "note", "not checked (no GPU in use)", ""))
            return
        restricted = counters_restricted(p.params_text())
        if probe_counters and p.which("ncu") and p.counter_probe is not None:
            out = p.counter_probe()
            if "ERR_NVGPUCTRPERM" in out:
                checks.append(Check("counters", *_perm("ncu reported ERR_NVGPUCTRPERM")))
                return
            checks.append(Check("counters", "ok", "ncu read a counter from a test kernel"))
            return
        if restricted and not p.is_root():
            checks.append(Check("counters", *_perm("RmProfilingAdminOnly=1 and not running as root: ncu will fail "
                                                   "with ERR_NVGPUCTRPERM")))
        elif restricted and p.sys_admin() is False:  # root in a container without CAP_SYS_ADMIN is no admin to ncu
            checks.append(Check("counters", *_perm("RmProfilingAdminOnly=1, and this root lacks CAP_SYS_ADMIN: ncu "
                                                   "will fail with ERR_NVGPUCTRPERM")))
        elif restricted:
            checks.append(Check("counters", "ok", "restricted to admins, and this process is root"))
        elif restricted is False:
            checks.append(Check("counters", "ok", "readable by all users (RmProfilingAdminOnly=0)"))
        else:
            checks.append(Check("counters", "note", "driver params unreadable; run with --probe-counters "
                                                    "to try ncu once", ""))

    def _perm(detail: str) -> tuple[str, str, str]:
        status, fix = counter_fix(p.counter_situation())
        return status, detail, fix

    def widgets_check():
        try:
            import ipywidgets  # noqa: F401  (the check: is it importable?)
        except ImportError:
            checks.append(Check("widgets", "note", "ipywidgets missing", FIX_NO_WIDGETS))
            return
        checks.append(Check("widgets", "ok", "ipywidgets available for quiz self-checks"))

    def recorded_check():
        have = p.recordings()
        if not have:
            checks.append(Check("recorded", "problem", "no recorded evidence sets", FIX_NO_RECORDED))
        else:
            slug, why = p.default_reference()
            if slug is None or slug not in have:
                checks.append(Check("recorded", "problem",
                                    f"recorded sets: {', '.join(have)}; no usable reference ({why})",
                                    f"Name one of {have} in data/recorded/DEFAULT or set "
                                    "INFRALENS_REFERENCE_GPU=<slug>."))
            else:
                checks.append(Check("recorded", "ok",
                                    f"recorded evidence from: {', '.join(have)}; labs use {slug} ({why})"))

    for name, fn in [("mode", mode_check), ("gpu", gpu_check), ("versions", versions_check),
                     ("ncu", ncu_check), ("nsys", nsys_check), ("counters", counters_check),
                     ("widgets", widgets_check), ("recorded", recorded_check)]:
        _safe(name, fn, checks)
    report = DoctorReport(checks)
    if verbose:
        print(report)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infralens_lab doctor", description=__doc__.splitlines()[0])
    ap.add_argument("--probe-counters", action="store_true",
                    help="run ncu once on a tiny kernel to prove counters are readable (GPU, ~10 s)")
    args = ap.parse_args(argv)
    probes = Probes(counter_probe=probe_counters_with_ncu)
    report = run_doctor(verbose=True, probes=probes, probe_counters=args.probe_counters)
    return 1 if report.problems else 0  # a problem (a bogus INFRALENS_MODE, ...) is an error status for scripts


class _CallableModule(types.ModuleType):
    """``infralens_lab.doctor()`` keeps working after this module is imported: importing a
    submodule rebinds the package attribute ``doctor`` from the function to the module."""

    def __call__(self, verbose: bool = True) -> DoctorReport:
        return run_doctor(verbose=verbose)


sys.modules[__name__].__class__ = _CallableModule
