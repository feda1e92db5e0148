"""The lab cell protocol (docs/CONTRACTS.md, "quiz: the cell protocol"): question cells rendered from
the bank, and the shape numbers a lab is held to.

* :func:`question_markdown` renders one question (prompt, every option or the accepted form of the
  answer) as the markdown cell that sits right above its answer cell, so that the question reads the
  same in JupyterLab, in the offline edition and on GitHub, with no kernel and no widget.
* :func:`lab_shape` counts, for one notebook, what the shape rules are about: exercises, answer cells
  (quiz plumbing), the median code cell's lines, and whether each question's markdown cell sits right
  above its answer cell.

Pure functions of a bank and a notebook dict: nothing here runs a cell.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from .bank import answer_variable, question

TAG_QUESTION = "question"
TAG_ANSWER = "answer"
TAG_EXERCISE = "exercise"
TAG_SOLUTION = "solution"
EDIT_KEY = "edit"
TAG_LOOK = "look"  # a predict-then-look cell: its output answers a question above it (``metadata.infralens.reveals``)
# Cells whose outputs answer something: `make lab`'s working copy clears them (:func:`working_copy`).
CLEARED_TAGS = (TAG_ANSWER, TAG_EXERCISE, TAG_SOLUTION, TAG_LOOK)
# Cells whose committed outputs sit in a fold (``metadata.jupyter.outputs_hidden``; the offline edition's <details>).
FOLDED_TAGS = (TAG_SOLUTION, TAG_LOOK)
MARK = "<!-- infralens:question {qid} -->"  # first line of a question cell: how tools find it again


def question_markdown(qid: str, number: int | None = None) -> str:
    """The markdown of question ``qid``: a bold heading (``Question N`` or ``Exercise N``, with the id
    and points), the prompt, then the options as a list (choice), or the unit and form of the answer
    (number, text), and the answer variable to set."""
    q = question(qid)
    kind = "Exercise" if qid.split(".", 1)[1].startswith("ex") else "Question"
    n = number if number is not None else qid.split(".", 1)[1].lstrip("qex")
    pts = f"{q.points:g} point{'s' if q.points != 1 else ''}"
    lines = [MARK.format(qid=qid), f"**{kind} {n}** (`{qid}`, {pts}). {q.prompt}", ""]
    var = answer_variable(qid)
    if q.kind == "choice":
        lines += [f"- **{k}.** {v}" for k, v in q.options.items()]
        lines += ["", f"Answer in `{var}` with the letter as a string, e.g. `{var} = \"{next(iter(q.options))}\"`."]
    elif q.kind == "number":
        unit = f" in {q.unit}" if q.unit else ""
        lines.append(f"Answer in `{var}` with a number{unit}.")
    elif q.kind == "function":
        unit = f" in {q.unit}" if q.unit else ""
        lines.append(f"Answer in `{var}` with a function that returns a number{unit} (`{var} = your_function`, the "
                     "function itself). The check runs it on this lab's evidence and on held-out evidence (the other "
                     "GPU's recording, perturbed copies of the lab's own) and names the first case it gets wrong.")
    else:
        lines.append(f"Answer in `{var}` with one of: {', '.join(f'`{w}`' for w in q.words)}.")
    if q.derive is not None:
        lines.append("The right answer is worked out from the evidence this notebook shows.")
    return "\n".join(lines)


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []) or [])


def _qid(cell: dict) -> str | None:
    meta = cell.get("metadata", {}).get("infralens", {})
    return meta.get("question") if isinstance(meta, dict) else None


def reveals(cell: dict) -> list[str]:
    """The question ids whose answer a cell gives away (``metadata.infralens.reveals``: one id or a list); such
    a cell sits after the question's answer cell, or in a fold when the question is in a later lab."""
    meta = cell.get("metadata", {}).get("infralens", {})
    got = meta.get("reveals", []) if isinstance(meta, dict) else []
    return [got] if isinstance(got, str) else list(got)


def output_folded(cell: dict) -> bool:
    """True when a code cell's outputs are out of sight until opened: ``metadata.jupyter.outputs_hidden`` (a
    fold in JupyterLab; the offline edition folds the cells tagged with :data:`FOLDED_TAGS`) or no outputs."""
    if not cell.get("outputs"):
        return True
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("outputs_hidden")) and bool(_tags(cell) & set(FOLDED_TAGS))


def working_copy(nb: dict) -> int:
    """In place: the learner's copy of a lab (``make lab``, tools/lab.sh): the outputs and execution counts of
    the cells tagged :data:`CLEARED_TAGS` (answers, exercises, worked solutions, predict-then-look cells) are
    cleared, so no answer is on the page before the learner has tried. Returns how many cells were cleared."""
    n = 0
    for c in nb.get("cells", []):
        if c.get("cell_type") == "code" and _tags(c) & set(CLEARED_TAGS):
            n += bool(c.get("outputs"))
            c["outputs"] = []
            c["execution_count"] = None
    return n


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def code_lines(cell: dict) -> int:
    """Non-blank lines of a code cell (comments count: they are part of what the learner reads)."""
    return sum(1 for ln in _source(cell).splitlines() if ln.strip())


@dataclass
class LabShape:
    """What the shape rules of one notebook are about (see the module doc)."""

    code_cells: int = 0
    answer_cells: int = 0
    exercises: int = 0
    solutions: int = 0
    median_lines: float = 0.0
    questions: list[str] = field(default_factory=list)       # ids of answer and exercise cells, in order
    unpaired: list[str] = field(default_factory=list)        # questions whose markdown is not right above
    stale_markdown: list[str] = field(default_factory=list)  # question cells that differ from the bank

    @property
    def plumbing_share(self) -> float:
        return self.answer_cells / self.code_cells if self.code_cells else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"code_cells": self.code_cells, "answer_cells": self.answer_cells, "exercises": self.exercises,
                "solutions": self.solutions, "median_lines": self.median_lines,
                "plumbing_share": round(self.plumbing_share, 3), "unpaired": self.unpaired,
                "stale_markdown": self.stale_markdown}


def lab_shape(nb: dict) -> LabShape:
    """The shape numbers of a notebook (a dict as nbformat or ``json.load`` gives it)."""
    cells = nb.get("cells", [])
    out = LabShape()
    lines = []
    for i, c in enumerate(cells):
        tags = _tags(c)
        if c.get("cell_type") == "code":
            out.code_cells += 1
            lines.append(code_lines(c))
            if TAG_SOLUTION in tags:
                out.solutions += 1
            if TAG_ANSWER in tags or TAG_EXERCISE in tags:
                qid = _qid(c)
                out.answer_cells += TAG_ANSWER in tags
                out.exercises += TAG_EXERCISE in tags
                out.questions.append(qid or f"<cell {i} without metadata.infralens.question>")
                above = cells[i - 1] if i else {}
                if not (above.get("cell_type") == "markdown" and TAG_QUESTION in _tags(above) and _qid(above) == qid):
                    out.unpaired.append(qid or f"cell {i}")
        elif c.get("cell_type") == "markdown" and TAG_QUESTION in tags:
            qid = _qid(c)
            want = question_markdown(qid) if qid else None
            if want is None or _source(c).strip() != want.strip():
                out.stale_markdown.append(qid or f"cell {i}")
    out.median_lines = float(statistics.median(lines)) if lines else 0.0
    return out


def question_sections(nb: dict) -> dict[str, str]:
    """``{question id: heading}``: the nearest markdown heading above each question of a lab notebook.

    A question is found by its cell's ``metadata.infralens.question`` (the cell protocol) or, in a lab not yet
    converted, by its ``self_check("qid")`` / ``check("qid", ...)`` call; the first place it appears counts.
    """
    out: dict[str, str] = {}
    heading = ""
    for c in nb.get("cells", []):
        src = _source(c)
        if c.get("cell_type") == "markdown":
            fenced = False
            for line in src.splitlines():
                fenced ^= line.lstrip().startswith("```")
                if line.startswith("#") and not fenced:
                    heading = line.lstrip("#").strip()
        qids = [_qid(c)] if _qid(c) else re.findall(r"""check\(\s*["'](lab\d{2}\.[a-z0-9_]+)["']""", src)
        for qid in qids:
            out.setdefault(qid, heading)
    return out
