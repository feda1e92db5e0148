"""The shape rules of a lab (docs/CONTRACTS.md, the cell protocol; /shared/TEACHING.md, "Exercises"):
exercises the learner writes, one cell per question with its markdown right above it, little quiz
plumbing, code cells that do work, and the Triton source shown where a lab profiles a Triton kernel."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infralens_lab.quiz.cells import EDIT_KEY, lab_shape, question_markdown

LABS = sorted((Path(__file__).resolve().parents[1] / "labs").glob("[0-9][0-9]_*.ipynb"))
MIN_EXERCISES = {"00": 1}          # every other lab: 3
SHOWS_KERNEL_SOURCE = {"00": ("add_kernel",), "02": ("attn_fwd", "copy_coalesced"),
                       "04": ("copy_strided", "naive_qk", "attn_fwd")}
# Labs not yet converted to the round-2 protocol. Each lab's issue removes its number when it lands.
NOT_YET: set[str] = set()  # every lab is on the round-2 protocol


def _nb(path: Path) -> dict:
    return json.loads(path.read_text())


def _questions(path: Path) -> dict:
    """The notebook without its edit-and-measure cells (``metadata.infralens.edit``: an exercise that is no bank
    question, so it has no question cell above it; tests/test_leaks.py holds its hint and solution folds)."""
    nb = _nb(path)
    return {**nb, "cells": [c for c in nb["cells"] if EDIT_KEY not in c.get("metadata", {}).get("infralens", {})]}


def _num(path: Path) -> str:
    return path.name[:2]


def _mark(path: Path):
    return pytest.mark.xfail(reason="lab not yet converted to the round-2 cell protocol", strict=False) \
        if _num(path) in NOT_YET else ()


PARAMS = [pytest.param(p, id=p.stem, marks=_mark(p)) for p in LABS]


@pytest.mark.parametrize("path", PARAMS)
def test_exercises_plumbing_and_median(path):
    s = lab_shape(_questions(path))
    need = MIN_EXERCISES.get(_num(path), 3)
    assert s.exercises >= need, f"{path.name}: {s.exercises} exercise cells; expected at least {need}"
    assert s.solutions >= s.exercises, f"{path.name}: {s.solutions} solution cells for {s.exercises} exercises"
    assert s.plumbing_share <= 0.30, (f"{path.name}: {s.answer_cells} of {s.code_cells} code cells are answer "
                                      f"cells ({s.plumbing_share:.0%}); expected at most 30%")
    assert s.median_lines >= 3, f"{path.name}: median code cell has {s.median_lines:g} lines; expected at least 3"


@pytest.mark.parametrize("path", PARAMS)
def test_every_question_sits_under_its_markdown(path):
    s = lab_shape(_questions(path))
    assert s.questions, f"{path.name}: no answer or exercise cells tagged"
    assert not s.unpaired, f"{path.name}: questions without their markdown cell right above: {s.unpaired}"
    assert not s.stale_markdown, (f"{path.name}: question cells that differ from the bank: {s.stale_markdown}; "
                                  f"run `python tools/sync_questions.py {path.relative_to(path.parents[1])}`")


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem, marks=_mark(p)) for p in LABS
                                  if _num(p) in SHOWS_KERNEL_SOURCE])
def test_labs_show_the_triton_source_they_profile(path):
    nb = _nb(path)
    shown = "\n".join("".join(o.get("text", "")) if isinstance(o.get("text"), (str, list)) else ""
                      for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))
    for kernel in SHOWS_KERNEL_SOURCE[_num(path)]:
        assert f"def {kernel}(" in shown, f"{path.name}: the Triton source of {kernel} is not shown in any output"


def test_question_markdown_renders_every_option():
    md = question_markdown("lab05.q1")
    assert md.startswith("<!-- infralens:question lab05.q1 -->")
    for key in "ABCD":
        assert f"- **{key}.**" in md
    assert "ANSWER_Q1" in md
