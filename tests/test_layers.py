"""Import layers (docs/CONTRACTS.md): every import in the package, parsed with ``ast`` (lazy ones inside
functions included), must point to the same layer or a lower one. Also: no lab module imports another lab
module or the recorder, and the package cites no file outside the repository."""
from __future__ import annotations

import ast
import re
from itertools import pairwise
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "infralens_lab"

# lowest first; a module may import its own layer and any layer before it
LAYERS = [
    ("ground", ["device", "evidence", "annotate", "units", "stats", "errors", "notebook_guard", "colab", "quick_nbformat", "__init__"]),
    ("kernels", ["kernels"]),
    ("workloads", ["workloads"]),
    ("parse", ["parse"]),
    ("measure", ["measure"]),
    ("analysis", ["analysis"]),
    ("present", ["present"]),
    ("quiz", ["quiz"]),
    ("labs", ["labs_support"]),
    ("apps", ["bench", "record", "doctor", "site", "site_assets", "gates_cli", "analyze", "profile_ddp", "__main__"]),
]
RANK = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}
# The one upward import, named with its reason: ``infralens_lab.doctor()``, the labs' one-line machine check,
# calls the doctor app lazily, inside the function (the doctor imports the package).
UPWARD_ALLOWED = {("infralens_lab.__init__", "infralens_lab.doctor")}
# Modules whose layer is not their folder's (none since the grader's providers moved to quiz/keys, issue 30).
LAYER_OF_FILE: dict[str, str] = {}


def _top(module: str) -> str:
    """``infralens_lab.measure.ncu`` -> ``measure``; ``infralens_lab`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    return ".".join(rel.parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """Absolute names of the infralens_lab modules a file imports (``from . import x`` resolved)."""
    mod = _module_name(path)
    package = mod.removesuffix(".__init__") if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("infralens_lab")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("infralens_lab"):
                continue
            if node.module is None or target.count(".") == 0:  # from . import x: x is a module
                out += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, target))
    return out


FILES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_package_is_covered():
    tops = {_top(_module_name(p)) for p in FILES}
    assert tops <= set(RANK), f"modules in no layer: {sorted(tops - set(RANK))}; add them to LAYERS and CONTRACTS.md"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_go_down_the_layers(path):
    me = LAYER_OF_FILE.get(_module_name(path), _top(_module_name(path)))
    bad = []
    for line, target in _imports(path):
        them = _top(target)
        if (_module_name(path), target) in UPWARD_ALLOWED:
            continue
        if them in RANK and RANK[them] > RANK[me]:
            bad.append(f"line {line}: {me} imports {target} ({them} is a higher layer)")
    assert not bad, "\n".join(bad)


# Imports the layer order alone would allow but the design forbids: analysis reads recorded files through
# parse, never through measure (which runs profilers); the quiz never reaches into a lab's glue.
FORBIDDEN = [("analysis", "measure"), ("quiz", "labs_support")]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_forbidden_pairs(path):
    me = _top(_module_name(path))
    bad = [f"line {line}: {me} imports {target}" for line, target in _imports(path)
           for a, b in FORBIDDEN if me == a and _top(target) == b]
    assert not bad, "\n".join(bad)


def _import_graph() -> dict[str, dict[str, int]]:
    """Module -> {package module it imports: first line}, module-level and lazy imports alike; ``from . import x``
    and ``import a.b`` resolve to the module itself, and a package's ``__init__`` stands for the package."""
    names = {_module_name(p).removesuffix(".__init__"): p for p in FILES}
    graph: dict[str, dict[str, int]] = {}
    for name, path in names.items():
        edges = graph.setdefault(name, {})
        for line, target in _imports(path):
            target = target.removesuffix(".__init__")
            while target not in names and "." in target:  # ``from .ncu import X``: X is a name, not a module
                target = target.rsplit(".", 1)[0]
            if target in names and target != name:
                edges.setdefault(target, line)
    return graph


def _cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import circle of ``graph`` as ``[a, b, ..., a]``, or None (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_import_circles():
    """No module reaches itself through the imports of others (lazy imports count: a lazy import only hides a
    circle until the function runs). A low module that needs a higher one is handed a hook instead (the guard asks
    the quiz through ``notebook_guard.register_restore_hook``). The package root's lazy ``doctor()`` call is the
    one allowed upward import (UPWARD_ALLOWED) and is left out of the graph with it. Submodules of a package are
    not counted as importing the package they sit in: Python loads the package first in any case."""
    graph = _import_graph()
    for src, dst in UPWARD_ALLOWED:
        graph[src.removesuffix(".__init__") or src].pop(dst, None)
    for name, edges in graph.items():  # a package's own __init__ importing its submodules is no circle
        for parent in [t for t in edges if name.startswith(t + ".")]:
            edges.pop(parent)
    found = _cycle(graph)
    where = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in pairwise(found)) + f" -> {found[-1]}" if found else ""
    assert found is None, f"import circle: {where}; expected none (hand the lower module a hook)"


def test_the_circle_check_finds_a_circle():
    assert _cycle({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": 1}, "b": {}, "c": {"b": 1}}) is None


def test_nothing_below_the_apps_imports_the_grader_providers():
    for path in FILES:
        if RANK[_top(_module_name(path))] < RANK["__main__"] and _module_name(path) not in LAYER_OF_FILE:
            assert not any(t in LAYER_OF_FILE for _, t in _imports(path)), f"{path} imports an app-level module"


def test_no_lab_module_imports_another_lab_or_the_recorder():
    for path in (PKG / "labs_support").glob("lab*.py"):
        for line, target in _imports(path):
            name = target.split(".")[-1]
            assert not (re.fullmatch(r"lab\d\d", name) and name != path.stem), f"{path.name}:{line} imports {target}"
            assert name != "record", f"{path.name}:{line} imports the recorder"


def test_lab_modules_stay_small():
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PKG / "labs_support").glob("lab*.py")}
    assert sizes  # the glue modules exist
    # the target is 300 lines for every lab module
    limits = {f"lab0{i}.py": 150 for i in range(1, 8)}  # round 2 cuts every lab's glue to 150
    over = {n: s for n, s in sizes.items() if s > limits.get(n, 300)}
    assert not over, f"lab modules over their line budget: {over}"


def test_no_citation_of_files_outside_the_repository():
    bad = [f"{p.relative_to(PKG)}:{i}" for p in FILES for i, ln in enumerate(p.read_text().splitlines(), 1)
           if re.search(r"(?<![\w/])shared/|/work/|\.\./\.\./", ln)]
    assert not bad, f"the package points at files outside the repository: {bad}"


def test_the_layer_check_catches_an_upward_import(tmp_path):
    """The parser resolves relative imports: a measure module importing present would be caught."""
    fake = PKG / "measure" / "_layer_probe.py"
    try:
        fake.write_text("from ..present import tables\nfrom . import ncu\n")
        got = [t for _, t in _imports(fake)]
    finally:
        fake.unlink()
    assert got == ["infralens_lab.present", "infralens_lab.measure.ncu"] or got[0].startswith("infralens_lab.present")
    assert RANK[_top(got[0])] > RANK["measure"]


def test_units_have_one_owner():
    """MiB, GiB and bytes per element are defined in infralens_lab/units.py only (issue 30)."""
    names = {"MiB", "GiB", "KiB", "MB", "GB", "TB"}
    bad = []
    for p in FILES:
        if p.name == "units.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.BinOp, ast.Dict)):
                for t in node.targets:
                    if isinstance(t, ast.Name) and (t.id in names or (t.id in ("ELEM_BYTES", "DTYPE_BYTES") and isinstance(node.value, ast.Dict))):
                        bad.append(f"{p.relative_to(PKG)}:{node.lineno} {t.id}")
    assert not bad, f"unit constants defined outside infralens_lab/units.py: {bad}"


def test_no_binary_size_is_written_by_hand():
    """``2**20``, ``1 << 30`` and the like are ``units.MiB`` / ``units.GiB`` (issue 41); docstrings and comments may
    still say what a MiB is."""
    def by_hand(node) -> bool:
        if not (isinstance(node, ast.BinOp) and isinstance(node.left, ast.Constant)
                and isinstance(node.right, ast.Constant)):
            return False
        pair = (node.left.value, node.right.value)
        return (isinstance(node.op, ast.Pow) and pair in {(2, 10), (2, 20), (2, 30), (2, 40)}) or \
            (isinstance(node.op, ast.LShift) and pair in {(1, 10), (1, 20), (1, 30), (1, 40)})
    bad = [f"{p.relative_to(PKG)}:{n.lineno}" for p in FILES if p.name != "units.py"
           for n in ast.walk(ast.parse(p.read_text())) if by_hand(n)]
    assert not bad, f"binary sizes written by hand: {bad}; expected infralens_lab.units (KiB, MiB, GiB)"


def test_dtype_bytes_reads_names_and_dtypes():
    import torch

    from infralens_lab.units import dtype_bytes

    assert [dtype_bytes(x) for x in ("fp16", "bfloat16", "torch.float32", torch.float16, torch.int8)] == [2, 2, 4, 2, 1]
    with pytest.raises(ValueError, match="unknown; expected"):
        dtype_bytes("fp7")


def test_the_package_root_resolves_its_relative_imports():
    """``from .doctor import x`` in ``infralens_lab/__init__.py`` is ``infralens_lab.doctor`` (an app), not
    ``infralens_lab.__init__.doctor``, so the root's imports are held to the layers like any other module's."""
    got = [t for _, t in _imports(PKG / "__init__.py")]
    assert "infralens_lab.doctor" in got and "infralens_lab.device" in got
    assert RANK[_top("infralens_lab.doctor")] > RANK["__init__"]  # upward: allowed only by UPWARD_ALLOWED
