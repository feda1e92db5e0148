"""Give every lab its optional setup cell and its "Open in Colab" link (issue 43, the Colab path).

    python tools/setup_cell.py            # write them into labs/*.ipynb (idempotent)
    python tools/setup_cell.py --check    # exit 1 naming each lab that differs

A lab begins with the two cells of :func:`infralens_lab.colab.setup_cells` (a markdown line, then a cell that
``%pip install``s the package from its repository when it is not importable, and does nothing where it is), and
its metadata carries ``infralens.colab``, :func:`infralens_lab.colab.colab_url` of its file. Cells tagged
``setup`` are replaced, so a changed text or repository is rewritten in place; an executed setup cell keeps
its execution count and (empty) outputs. Re-execute the labs after a first insertion (`make notebooks`).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from infralens_lab.colab import SETUP_TAG, colab_url, setup_cells

LABS = Path(__file__).resolve().parents[1] / "labs"


def _is_setup(cell: dict) -> bool:
    return SETUP_TAG in (cell.get("metadata", {}).get("tags") or [])


def with_setup(nb: dict, name: str) -> dict:
    """``nb`` with the setup cells first (their text regenerated) and its Colab link in the metadata."""
    old = {c["id"]: c for c in nb["cells"] if _is_setup(c) and "id" in c}
    new = setup_cells()
    for cell in new:
        cell["source"] = cell["source"].splitlines(keepends=True)  # as nbformat writes it
        kept = old.get(cell["id"])
        if kept is not None and cell["cell_type"] == "code":  # keep what the last execution wrote
            cell["execution_count"], cell["outputs"] = kept.get("execution_count"), kept.get("outputs", [])
            cell["metadata"] = {**kept.get("metadata", {}), "tags": [SETUP_TAG]}
    out = dict(nb, cells=new + [c for c in nb["cells"] if not _is_setup(c)])
    out["metadata"] = dict(nb.get("metadata", {}))
    out["metadata"]["infralens"] = {**out["metadata"].get("infralens", {}), "colab": colab_url(name)}
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path in sorted(LABS.glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        want = with_setup(nb, path.name)
        if want == nb:
            continue
        stale.append(path.name)
        if not check:
            path.write_text(json.dumps(want, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    verb = "differ from tools/setup_cell.py (run it)" if check else "rewritten"
    print(f"{len(stale)} lab(s) {verb}{': ' + ', '.join(stale) if stale else ''}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
