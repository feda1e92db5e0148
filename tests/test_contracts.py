"""docs/CONTRACTS.md is checked, not trusted (issue 41): every backticked ``module.symbol`` that names a package
module imports, and every owner in the "one owner per concept" table is where the symbol is defined, not a module
that only re-exports it (``measure.ncu`` re-exports ``parse.ncu``'s metric names; the owner is ``parse.ncu``)."""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import infralens_lab

DOC = Path(__file__).resolve().parents[1] / "docs" / "CONTRACTS.md"
TEXT = DOC.read_text()
TOPS = {m.name for m in pkgutil.iter_modules(infralens_lab.__path__)}
# a dotted name in backticks, call arguments dropped: `analysis.clocks.kernel_clock_ghz(ncu_df)`
DOTTED = re.compile(r"(?<![\w./<])((?:infralens_lab\.)?[a-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^)]*\))?(?![\w/<>:])")
# backticked words in the owner table that are data, not symbols, each with what it is
NOT_SYMBOLS = {
    "correlation": "the chrome-trace field that ties a GPU event to its launch call",
    "added": "a value of trace_diff.changes' change column",
    "removed": "a value of trace_diff.changes' change column",
}


def _resolve(ref: str) -> tuple[object, object, object, str]:
    """``(module, owner, obj, attr)`` for ``a.b.c``: the longest importable module prefix, then attributes;
    ``owner`` is the module or class that holds the last attribute (``obj`` itself when the name is a module)."""
    parts = ref.removeprefix("infralens_lab.").split(".")
    for i in range(len(parts), 0, -1):
        try:
            mod = importlib.import_module("infralens_lab." + ".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        owner, obj = mod, mod
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                raise AttributeError(f"`{ref}`: {getattr(obj, '__name__', obj)} has no {attr!r}")
            owner, obj = obj, getattr(obj, attr)
        return mod, owner, obj, parts[-1]
    raise ModuleNotFoundError(f"`{ref}`: no module infralens_lab.{parts[0]}")


def _defined_here(module, name: str) -> bool:
    """Whether ``module`` defines ``name`` itself (def, class or assignment at its top level), rather than importing
    it; a package's ``__init__`` may also re-export from its own submodules (the package is the public name)."""
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if name in names:
            return True
    if module.__file__.endswith("__init__.py"):
        obj = getattr(module, name, None)
        home = getattr(obj, "__module__", None) or ""
        return home.startswith(module.__name__ + ".")
    return False


def _package_refs(text: str) -> list[str]:
    refs = []
    for code in re.findall(r"`([^`\n]+)`", text):
        refs += [m.group(1) for m in DOTTED.finditer(code)
                 if m.group(1).removeprefix("infralens_lab.").split(".")[0] in TOPS]
    return refs


def _owner_rows() -> list[tuple[str, str]]:
    """(concept, owner cell) of each row of the "one owner per concept" table."""
    section = TEXT.split("## one owner per concept", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("|")]
    assert rows[0].startswith("| concept | owner |") and rows[1].startswith("| ---"), rows[:2]
    out = []
    for ln in rows[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
        assert len(cells) == 2, f"owner table row with {len(cells)} cells, expected 2: {ln[:80]}"
        out.append((cells[0], cells[1]))
    return out


REFS = sorted(set(_package_refs(TEXT)))
ROWS = _owner_rows()


def test_the_document_names_package_symbols():
    assert len(REFS) > 50 and len(ROWS) > 20, (len(REFS), len(ROWS))


@pytest.mark.parametrize("ref", REFS)
def test_every_dotted_reference_imports(ref):
    _resolve(ref)


@pytest.mark.parametrize("concept, owner", ROWS, ids=[c[:40] for c, _ in ROWS])
def test_each_owner_defines_what_the_table_says(concept, owner):
    """Dotted owners are defined where named; a bare name in the same cell (``classify``, ``TIME``, ``kernels()``)
    is defined by one of the modules or classes the cell names (a bare module name, ``analyze``, counts as one)."""
    codes = re.findall(r"`([^`\n]+)`", owner)
    holders, bad = [], []
    for ref in _package_refs(owner):
        module, owner_obj, obj, attr = _resolve(ref)
        holders += [module, *([owner_obj] if owner_obj is not module else []), *([obj] if inspect.isclass(obj) else [])]
        if inspect.ismodule(obj):
            continue
        if inspect.ismodule(owner_obj) and not _defined_here(owner_obj, attr):
            home = getattr(obj, "__module__", "another module")
            bad.append(f"`{ref}` is imported into {owner_obj.__name__}, not defined there (it lives in {home})")
    for code in codes:
        name = re.sub(r"\(.*\)$", "", code)
        if name in TOPS:
            holders.append(importlib.import_module(f"infralens_lab.{name}"))
    for code in codes:
        name = re.sub(r"\(.*\)$", "", code)
        if not re.fullmatch(r"[A-Za-z_]\w*", name) or name in TOPS or name in NOT_SYMBOLS:
            continue
        found = [h for h in holders if hasattr(h, name)]
        if not found:
            bad.append(f"`{code}` is in none of {[getattr(h, '__name__', h) for h in holders]}")
        elif not any(inspect.isclass(h) or _defined_here(h, name) for h in found):
            bad.append(f"`{code}` is only imported into {[h.__name__ for h in found]}")
    assert not bad, f"owner table, {concept[:60]!r}: " + "; ".join(bad)


def test_a_drifted_owner_is_caught():
    """The check itself: a re-export is not an owner, and a module that does not exist is named."""
    from infralens_lab.measure import ncu as measure_ncu
    from infralens_lab.parse import ncu as parse_ncu

    assert _defined_here(parse_ncu, "TIME") and not _defined_here(measure_ncu, "TIME")
    with pytest.raises(AttributeError, match="has no 'runs'"):
        _resolve("measure.runs.RunConfig")
