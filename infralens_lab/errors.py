"""The package's one error base: every exception class of ``infralens_lab`` derives from :class:`InfraLensError`
as well as from the built-in it always had (``class TraceError(InfraLensError, ValueError)``), so a caller can
catch everything the package raises on purpose with one ``except InfraLensError`` while ``except ValueError``
callers keep working. Ground floor: imports nothing of the package (``tests/test_errors.py`` holds every class to
it)."""
from __future__ import annotations


class InfraLensError(Exception):
    """Raised on purpose by infralens_lab: the message names what was seen and what was expected."""


__all__ = ["InfraLensError"]
