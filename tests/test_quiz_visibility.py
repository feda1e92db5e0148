"""Every graded question is visible before its answer cell, in every committed lab (issue 14).

For each ``labs/NN_*.ipynb`` and each question of its lab's bank: the notebook has an answer
cell ``ANSWER_QK = ...``, and before it the learner can read the prompt and every option, in
markdown or in committed output (the ``self_check`` cell's text/plain). Known leaks, once fixed,
stay fixed: what printed before a question gave its answer away must not come back.
Works for any lab whose bank exists, so new labs are held to the same rule.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from infralens_lab.quiz import answer_variable, load_bank
from infralens_lab.quiz.bank import BankError
from infralens_lab.quiz.grader import lab_from_metadata
from infralens_lab.quiz.pytest_plugin import CHECK_RE

nbformat = pytest.importorskip("nbformat", reason="needs the Jupyter test stack (make test installs it); plain python3 on a GPU machine lacks it")

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))

# (question, text that gave its answer away before the question, where it was seen)
FIXED_LEAKS = [
    ("lab02.q3", "Ridge points of the measured ceilings", "the ridge table printed before question 3"),
    ("lab04.ex3", "dominant stall:", "the stall card naming the dominant reason (and its share)"),
    ("lab04.ex3", "dominant_stall", "the copy table's dominant_stall column"),
    ("lab04.ex1", "Recorded reference", "the copy table, whose sectors per request is the exercise's answer"),
    ("lab04.ex2", "Recorded reference", "the copy table, whose read x is the exercise's answer"),
    ("lab04.ex4", "DRAM read 1.", "the level-by-level line giving attn_fwd's DRAM passes"),
    ("lab04.q1", "pred_read_x", "the sector-model table answering the prediction questions"),
    ("lab04.q3", "64-byte", "the two-level table and its 64-byte reading"),
    ("lab04.q6", "branch to itself", "the SASS reading naming where drain sits"),
    ("lab04.q7", "tiled / naive", "the before/after table's ratio column (its inverse is the answer)"),
    ("lab04.q10", "Common misunderstandings", "the pitfall card that answers the occupancy question"),
    ("lab02.ex1", "Kernels from their counters", "the kernel table, whose FLOP/B column holds attn_fwd's intensity"),
    ("lab02.ex2", "Bound per kernel", "the verdict table's roof % column"),
    ("lab02.ex3", "Bound per kernel", "the verdict table's unit % column"),
    ("lab02.q4", "does not lower a kernel's fraction", "the matmul notes saying the host gap is outside the kernel"),
    ("lab03.ex1", "Predicted ledger, one AdamW step", "the predicted ledger's optimizer-states row"),
    ("lab03.ex3", "Predicted vs measured (MiB)", "the reconcile table's gap column"),
    ("lab03.ex2", "Generation: predicted vs measured", "the generation table's KV-cache row"),
    ("lab03.q3", "peak / between steps =", "the recorded GPU steps' ratio, within the live answer's tolerance"),
]


def _text(src) -> str:
    return "".join(src) if isinstance(src, list) else str(src)


def _visible(cell) -> str:
    """What a reader sees of a cell: markdown source, or a code cell's outputs as text."""
    if cell.cell_type == "markdown":
        return _text(cell.source)
    if cell.cell_type != "code":
        return ""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(_text(out.get("text", "")))
        data = out.get("data", {})
        parts.append(_text(data.get("text/plain", "")))
        parts.append(html.unescape(re.sub(r"<[^>]+>", " ", _text(data.get("text/html", "")))))
        parts.append(_text(data.get("text/markdown", "")))
    return "\n".join(parts)


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", s)


def _lab_of(nb, path: Path) -> str:
    lab = lab_from_metadata(nb)
    assert lab is not None, f"{path.name}: no metadata.infralens.lab (e.g. \"lab05\") and no 'Lab NN' title"
    return lab


def _answer_cell(nb, var: str) -> int | None:
    pat = re.compile(rf"^{var}\s*=", re.M)
    hits = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and pat.search(_text(c.source))]
    return hits[0] if hits else None


@pytest.mark.parametrize("path", LABS, ids=[p.stem for p in LABS])
def test_every_bank_question_is_visible_before_its_answer_cell(path):
    nb = nbformat.read(path, 4)
    lab = _lab_of(nb, path)
    try:
        bank = load_bank(lab)
    except BankError:
        pytest.skip(f"{lab} has no question bank")
    problems = []
    for q in bank.values():
        var = answer_variable(q.id)
        at = _answer_cell(nb, var)
        if at is None:
            problems.append(f"{q.id}: no answer cell `{var} = None` in the notebook")
            continue
        seen = _squash("\n".join(_visible(c) for c in nb.cells[:at]))
        if _squash(q.prompt) not in seen:
            problems.append(f"{q.id}: the prompt is not visible before its answer cell {at} "
                            f"(put a self_check({q.id!r}) cell right above it and commit its output)")
        for key, text in q.options.items():
            if _squash(text) not in seen:
                problems.append(f"{q.id}: option {key} ({text[:40]}...) is not visible before answer cell {at}")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", LABS, ids=[p.stem for p in LABS])
def test_every_checked_question_is_in_the_labs_bank(path):
    """A check cell naming a question that its lab's bank lacks would never be graded."""
    nb = nbformat.read(path, 4)
    lab = _lab_of(nb, path)
    used = {qid for c in nb.cells if c.cell_type == "code" for qid in CHECK_RE.findall(_text(c.source))}
    try:
        bank = load_bank(lab)
    except BankError:
        assert not used, f"{path.name} checks {sorted(used)} but {lab} has no bank"
        return
    assert used <= set(bank), f"{path.name}: checks {sorted(used - set(bank))} that {lab}'s bank does not have"


@pytest.mark.parametrize("qid, text, what", FIXED_LEAKS, ids=[f"{q}-{w[:20]}" for q, _, w in FIXED_LEAKS])
def test_fixed_leaks_stay_fixed(qid, text, what):
    lab = qid.split(".")[0]
    found = [p for p in LABS if lab_from_metadata(nbformat.read(p, 4)) == lab]
    if not found:
        pytest.skip(f"no notebook for {lab}")
    nb = nbformat.read(found[0], 4)
    at = _answer_cell(nb, answer_variable(qid))
    assert at is not None
    before = "\n".join(_visible(c) if c.cell_type == "code" else "" for c in nb.cells[:at])
    raw_html = "\n".join(_text(o.get("data", {}).get("text/html", "")) for c in nb.cells[:at]
                         if c.cell_type == "code" for o in c.get("outputs", []))
    assert text not in before and text not in raw_html, f"{qid}: {what} is shown before the question again"


def test_offline_site_fallback_shows_every_option_and_allowed_word():
    """The offline edition replaces the widget with static HTML: it too shows prompt and options."""
    from infralens_lab import site
    from infralens_lab.quiz import all_questions

    for q in all_questions():
        shown = html.unescape(re.sub(r"<[^>]+>", " ", site._quiz_fallback(q.id, "")))
        assert _squash(q.prompt) in _squash(shown), q.id
        for text in [*q.options.values(), *(q.shown or q.vocabulary)]:  # the words as the bank writes them
            assert text in shown, f"{q.id}: {text!r} missing from the offline self-check"
