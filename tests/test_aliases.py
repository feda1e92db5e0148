"""Modules are imported under names a reader can read (issue 41): no single-letter ``as X`` alias of a
module in the package, the tests, the tools or the labs' code cells. The module's own name, or
``<layer>_<module>`` where that name is taken (``analysis_overlap`` beside ``measure_overlap``). The
conventions stay: ``torch.nn.functional as F``, ``numpy as np``, ``pandas as pd``, ``matplotlib.pyplot as plt``."""
from __future__ import annotations

import ast
import json

from conftest import ROOT

CONVENTIONS = {("torch.nn.functional", "F"), ("numpy", "np"), ("pandas", "pd"), ("matplotlib.pyplot", "plt")}


def single_letter_aliases(source: str) -> list[tuple[int, str, str]]:
    """(line, module, alias) for each ``import a.b as X`` / ``from a import b as X`` with a one-letter X that
    is not one of the conventions."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for a in node.names:
            if not a.asname or len(a.asname) != 1:
                continue
            module = a.name if isinstance(node, ast.Import) else ".".join(filter(None, [node.module, a.name]))
            if (module, a.asname) not in CONVENTIONS:
                found.append((node.lineno, "." * getattr(node, "level", 0) + module, a.asname))
    return found


def _code_cells(path):
    """(cell index, source) of each code cell, lines starting with % or ! (magics, shell) made ``pass`` at their
    indentation (the setup cell's `%pip` sits inside an ``if``)."""
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] == "code":
            src = "".join(cell["source"])
            yield i, "\n".join(ln[:len(ln) - len(ln.lstrip())] + "pass" if ln.lstrip().startswith(("%", "!")) else ln
                               for ln in src.split("\n"))


def test_the_check_finds_a_single_letter_alias_and_spares_the_conventions():
    src = ("import numpy as np\nimport pandas as pd\nimport torch.nn.functional as F\nimport matplotlib.pyplot as plt\n"
           "from infralens_lab.analysis import overlap as A\nimport infralens_lab.parse.trace as T\n"
           "from infralens_lab.analysis import gates as analysis_gates\nfrom . import ncu as N\n"
           "def f():\n    from torch.nn import functional as F\n")
    assert single_letter_aliases(src) == [(5, "infralens_lab.analysis.overlap", "A"), (6, "infralens_lab.parse.trace", "T"),
                                          (8, ".ncu", "N")]


def test_no_single_letter_module_aliases():
    bad = []
    for folder in ("infralens_lab", "tests", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            bad += [f"{rel}:{line}: {module} as {alias}"
                    for line, module, alias in single_letter_aliases(path.read_text(encoding="utf-8"))]
    for path in sorted((ROOT / "labs").glob("*.ipynb")):
        for i, src in _code_cells(path):
            bad += [f"{path.relative_to(ROOT)} cell {i} line {line}: {module} as {alias}"
                    for line, module, alias in single_letter_aliases(src)]
    assert not bad, ("single-letter module aliases (import the module under its own name, or <layer>_<module> "
                     "where that is taken):\n" + "\n".join(bad))
