"""InfraLens Lab: GPU performance engineering taught from evidence.

Importing the package imports no torch: the execution mode (see :mod:`infralens_lab.device`) is decided once,
on first use, and :mod:`infralens_lab.kernels` decides it before any of the package's kernels is defined. Where
the mode can only be the interpreter (``INFRALENS_MODE=interpreter``, or a machine without any GPU device),
importing the package sets ``TRITON_INTERPRET=1`` at once, so a kernel defined after ``import infralens_lab``
runs interpreted (:func:`~infralens_lab.device.preset_interpreter`).
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import device as device
from .device import facts, mode
from .errors import InfraLensError

# Probing CUDA means importing torch (about 2 s), which `python -m infralens_lab analyze` never needs: the
# interpreter is preset only where it is certain without torch. A bad or impossible INFRALENS_MODE is reported
# by mode(), facts() and everything that runs a kernel (the doctor diagnoses it).
device.preset_interpreter()


def doctor(verbose: bool = True):
    """Check this machine for the labs and print what is missing and how to fix it."""
    from .doctor import run_doctor  # cycle: doctor imports this package (and is an app: loaded only when asked)

    return run_doctor(verbose=verbose)


__all__ = ["InfraLensError", "__version__", "device", "doctor", "facts", "mode"]
