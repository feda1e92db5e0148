"""Execution mode and device facts. The only module that looks at the hardware.

Two modes, decided once per process:

* ``gpu``: a CUDA GPU is usable. Triton kernels compile for it; timings and profilers
  give live evidence.
* ``interpreter``: no usable GPU (CI, laptops), or the user asked for it. Triton kernels
  run in Triton's interpreter on CPU tensors, and performance evidence comes from
  recorded runs.

The mode is chosen by :func:`mode`. The environment variable ``INFRALENS_MODE`` overrides
detection: ``interpreter`` forces the interpreter on a GPU machine, ``gpu`` insists on a
GPU (and raises if there is none), ``auto`` (the default) detects. In interpreter mode
``TRITON_INTERPRET=1`` is set before any of this package's kernels are defined; Triton
reads it when ``@triton.jit`` decorates a function, so importing ``torch`` or ``triton``
before this package is fine.
"""
from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import InfraLensError

MODE_ENV = "INFRALENS_MODE"
MODES = ("gpu", "interpreter")


class ModeSettingError(InfraLensError, ValueError):
    """``INFRALENS_MODE`` holds a value that is not a mode. Importing the package tolerates it
    (so that ``python -m infralens_lab doctor`` can run and diagnose it); asking for the mode
    raises it."""


class GpuUnavailableError(InfraLensError, RuntimeError):
    """``INFRALENS_MODE=gpu`` on a machine without a usable CUDA GPU. Tolerated at import like
    :class:`ModeSettingError`, raised when the mode is asked for."""


def _cuda_usable() -> tuple[bool, str]:
    """Whether torch sees a CUDA GPU it can use, and why not if it cannot."""
    try:
        import torch  # heavy: torch, only here
    except ImportError as exc:  # pragma: no cover - torch is a hard dependency
        return False, f"torch is not importable ({exc})"
    try:
        if not torch.cuda.is_available():
            return False, "torch.cuda.is_available() is False (no NVIDIA GPU, no driver, or a CPU build of torch)"
        if torch.cuda.device_count() < 1:
            return False, "torch sees no CUDA device"
        torch.cuda.get_device_properties(0)
    except Exception as exc:  # a broken driver raises here
        return False, f"CUDA is present but not usable: {exc}"
    return True, "a CUDA GPU is usable"


def decide_mode(env: dict[str, str] | None = None, cuda_usable: bool | None = None) -> tuple[str, str]:
    """Pure mode decision: returns ``(mode, reason)``.

    ``env`` defaults to ``os.environ``; ``cuda_usable`` defaults to probing torch. Raises
    :class:`ModeSettingError` (a ``ValueError``) for an unknown ``INFRALENS_MODE`` value and ``RuntimeError`` when ``gpu``
    is forced on a machine without a usable GPU.
    """
    env = os.environ if env is None else env
    wanted = env.get(MODE_ENV, "auto").strip().lower() or "auto"
    if wanted not in ("auto", *MODES):
        raise ModeSettingError(f"{MODE_ENV}={env.get(MODE_ENV)!r} is not understood; expected one of 'auto', "
                               f"'gpu', 'interpreter'. Fix: `unset {MODE_ENV}` (auto-detect) or set it to one "
                               "of those.")
    if wanted == "interpreter":
        return "interpreter", f"forced by {MODE_ENV}=interpreter"
    if cuda_usable is None:
        usable, why = _cuda_usable()
    else:
        usable, why = cuda_usable, ("a CUDA GPU is usable" if cuda_usable else "no usable CUDA GPU")
    if wanted == "gpu" and not usable:
        raise GpuUnavailableError(f"{MODE_ENV}=gpu but {why}; unset it to fall back to the interpreter")
    if usable:
        return "gpu", why if wanted == "auto" else f"forced by {MODE_ENV}=gpu"
    return "interpreter", why


@functools.lru_cache(maxsize=1)
def _decided() -> tuple[str, str]:
    m, why = decide_mode()
    if m == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
    return m, why


# What a machine that can run CUDA (or ROCm) kernels shows without importing anything: NVIDIA's device nodes and
# driver, WSL's GPU paravirtualisation device, AMD's compute device (ROCm builds of torch answer torch.cuda).
GPU_DEVICE_PATHS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/dxg", "/dev/kfd")


def preset_interpreter() -> bool:
    """Set ``TRITON_INTERPRET=1`` now, without importing torch (about 2 s), when the mode can only be the
    interpreter: ``INFRALENS_MODE=interpreter``, or ``auto`` on a machine showing none of
    :data:`GPU_DEVICE_PATHS`. Returns whether it did. The package calls it at import, so a kernel the learner
    defines with ``@triton.jit`` after ``import infralens_lab`` runs interpreted as before, while commands that
    never run a kernel (``analyze``) skip the torch probe; :func:`mode` still decides (and explains) on first
    use, and :mod:`infralens_lab.kernels` asks it before defining any kernel. Never raises: a bad
    ``INFRALENS_MODE`` is reported when the mode is asked for."""
    wanted = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if wanted == "interpreter" or (wanted == "auto" and not any(Path(p).exists() for p in GPU_DEVICE_PATHS)):
        os.environ["TRITON_INTERPRET"] = "1"
        return True
    return False


def mode() -> str:
    """``'gpu'`` or ``'interpreter'``, decided once for this process."""
    return _decided()[0]


def mode_reason() -> str:
    """One sentence saying why :func:`mode` chose what it chose."""
    return _decided()[1]


def is_gpu() -> bool:
    return mode() == "gpu"


def torch_device() -> str:
    """The torch device kernels run on: ``'cuda'`` in gpu mode, ``'cpu'`` in interpreter mode."""
    return "cuda" if is_gpu() else "cpu"


def synchronize() -> None:
    """Wait for queued device work (no-op in interpreter mode)."""
    if is_gpu():
        import torch  # heavy: torch, only here

        torch.cuda.synchronize()


def slug(name: str) -> str:
    """File-system name for a GPU: ``'NVIDIA H100 80GB HBM3'`` -> ``'nvidia-h100-80gb-hbm3'``."""
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not s:
        raise ValueError(f"cannot make a slug from GPU name {name!r}")
    return s


def _run(cmd: list[str], timeout: float = 10.0) -> str | None:
    """stdout of a short command, or None if it is missing or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def driver_version() -> str | None:
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.strip().splitlines()[0] if out and out.strip() else None


def tool_version(tool: str) -> str | None:
    """Version string of ``ncu`` or ``nsys`` if on PATH (e.g. ``'2025.3.1'``), else None."""
    out = _run([tool, "--version"])
    if not out:
        return None
    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out)
    return m.group(1) if m else out.strip().splitlines()[-1]


@dataclass(frozen=True)
class DeviceFacts:
    """What the labs need to know about the machine. Sizes in bytes."""

    mode: str
    mode_reason: str
    name: str
    sm_count: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    compute_capability: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str = ""
    triton: str = ""
    python: str = field(default_factory=platform.python_version)

    @property
    def slug(self) -> str:
        return slug(self.name)

    def as_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=1)
def facts() -> DeviceFacts:
    """Device facts for the current mode (GPU properties in gpu mode, the CPU otherwise)."""
    import torch  # heavy: torch, only here

    m, why = _decided()
    try:
        import triton  # heavy: triton, only here

        triton_version = triton.__version__
    except ImportError:  # pragma: no cover
        triton_version = "missing"
    if m == "gpu":
        p = torch.cuda.get_device_properties(0)
        return DeviceFacts(
            mode=m,
            mode_reason=why,
            name=p.name,
            sm_count=p.multi_processor_count,
            l2_bytes=getattr(p, "L2_cache_size", None),
            memory_bytes=p.total_memory,
            compute_capability=f"{p.major}.{p.minor}",
            driver=driver_version(),
            cuda=torch.version.cuda,
            torch=torch.__version__,
            triton=triton_version,
        )
    cpu = platform.processor() or platform.machine() or "CPU"
    return DeviceFacts(
        mode=m,
        mode_reason=why,
        name=f"CPU ({cpu}, Triton interpreter)",
        torch=torch.__version__,
        triton=triton_version,
        cuda=torch.version.cuda,
    )


def reset_for_tests() -> None:
    """Forget the decided mode and facts (tests only; a real process decides once)."""
    _decided.cache_clear()
    facts.cache_clear()


NUMPY_INTERPRETER_MAX = (2, 4)  # pyproject pins numpy<2.4: the first version Triton 3.6's interpreter breaks on


def numpy_interpreter_problem(version: str | None = None) -> str | None:
    """Why Triton's interpreter cannot run here, or None: NumPy 2.4 made ``int()`` of a 1-element array a
    TypeError, and Triton 3.6's interpreter turns loop bounds into ints that way, so every kernel loop with a
    runtime bound fails ("only 0-dimensional arrays can be converted to Python scalars"). ``version``
    defaults to the installed NumPy's."""
    if version is None:
        import numpy  # light: device is imported at every kernel start, stdlib only at module level

        version = numpy.__version__
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return None
    if (major, minor) < NUMPY_INTERPRETER_MAX:
        return None
    return (f"numpy {version} is installed, expected numpy < {'.'.join(map(str, NUMPY_INTERPRETER_MAX))}: Triton's "
            f"interpreter fails on it (\"only 0-dimensional arrays can be converted to Python scalars\"). Fix: "
            f"`make install` (it pins numpy), or pip install 'numpy<2.4' in this environment")
