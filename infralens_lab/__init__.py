"""InfraLens Lab: GPU performance engineering taught from evidence.

Importing the package decides the execution mode once (see :mod:`infralens_lab.device`)
and, in interpreter mode, sets ``TRITON_INTERPRET=1`` before any kernel is defined.
"""
from __future__ import annotations

import contextlib

__version__ = "0.1.0"

from . import device as device
from .device import facts, mode

# A bad or impossible INFRALENS_MODE is tolerated here: the doctor must still import to diagnose it; mode(),
# facts() and everything that runs a kernel raise the same clear error again.
with contextlib.suppress(device.ModeSettingError, device.GpuUnavailableError):
    mode()  # decide now, before any @triton.jit in this package runs


def doctor(verbose: bool = True):
    """Check this machine for the labs and print what is missing and how to fix it."""
    from .doctor import run_doctor  # cycle: doctor imports this package (and is an app: loaded only when asked)

    return run_doctor(verbose=verbose)


__all__ = ["__version__", "device", "doctor", "facts", "mode"]
