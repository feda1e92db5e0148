"""One error base (issue 41): every exception class defined in the package derives from
``infralens_lab.InfraLensError`` as well as from the built-in it always had, found by importing every module."""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import infralens_lab
from infralens_lab import InfraLensError

PKG = Path(infralens_lab.__file__).parent
# ``python -m`` entry points run their command when imported, so they are read with ast instead (below).
ENTRY_POINTS = {"infralens_lab.__main__", "infralens_lab.quiz.__main__"}


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(infralens_lab.__path__, "infralens_lab."))


def _exception_classes() -> list[type]:
    out = []
    for name in _modules():
        if name in ENTRY_POINTS:
            continue
        mod = importlib.import_module(name)
        out += [obj for obj in vars(mod).values()
                if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name]
    return out


def test_every_exception_class_derives_from_the_one_base():
    found = _exception_classes()
    assert len(found) >= 20, f"found only {len(found)} exception classes; expected the package's 20 or more"
    bad = [f"{c.__module__}.{c.__qualname__} (bases: {[b.__name__ for b in c.__bases__]})"
           for c in found if not issubclass(c, InfraLensError)]
    assert not bad, f"exception classes that do not derive from InfraLensError: {bad}"


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_the_entry_points_define_no_class(name):
    path = PKG.joinpath(*name.split(".")[1:]).with_suffix(".py")
    classes = [n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]
    assert not classes, f"{path.name} defines {classes}; an entry point is not imported by the error test, so a " \
                        "class belongs in a module it calls"


def test_old_bases_still_catch():
    """``except ValueError`` / ``except RuntimeError`` callers keep working beside ``except InfraLensError``."""
    from infralens_lab.parse.ncu import NcuCsvError, NcuError
    from infralens_lab.parse.trace import TraceError

    assert issubclass(TraceError, ValueError) and issubclass(NcuCsvError, NcuError)
    assert issubclass(NcuError, RuntimeError) and issubclass(NcuCsvError, InfraLensError)
    with pytest.raises(ValueError):
        raise TraceError("seen x; expected y")
