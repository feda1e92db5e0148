"""Rewrite every question cell (markdown tagged ``question``) of the given notebooks from the bank.

    python tools/sync_questions.py labs/*.ipynb

A question cell is the visible question above its answer cell (docs/CONTRACTS.md, the cell protocol);
its text is ``quiz.cells.question_markdown(qid)`` and nothing else, so that the bank stays the one
source. Prints what it changed; exits 1 when a question cell names no question.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from infralens_lab.quiz.cells import TAG_QUESTION, _qid, _tags, question_markdown


def sync(path: Path) -> int:
    nb = json.loads(path.read_text())
    changed = 0
    for i, c in enumerate(nb["cells"]):
        if c.get("cell_type") != "markdown" or TAG_QUESTION not in _tags(c):
            continue
        qid = _qid(c)
        if not qid:
            raise SystemExit(f"{path}: cell {i} is tagged {TAG_QUESTION!r} but has no metadata.infralens.question")
        want = question_markdown(qid)
        if "".join(c["source"]) != want:
            c["source"] = want.splitlines(keepends=True)
            changed += 1
    if changed:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return changed


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for a in argv:
        n = sync(Path(a))
        print(f"{a}: {n} question cell(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
