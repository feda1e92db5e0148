"""Quiz banks, checks, derivations and self-check widgets (issue 7).

Every question of every bank is exercised: its right answer passes in grade mode, every
wrong option or word fails with that option's feedback, and an unanswered check fails in
grade mode but passes outside it. Derived questions are driven by a stand-in derivation
here (their real derivations are tested on synthetic evidence below), so the loop works
for banks other engineers add without knowing their evidence shapes.
"""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from infralens_lab import evidence
from infralens_lab.quiz import (
    BankError,
    CheckResult,
    DerivationError,
    all_questions,
    check,
    derivations,
    labs,
    load_bank,
    normalise_word,
    question,
    question_text,
    register_derivation,
    self_check,
)
from infralens_lab.quiz import bank as bank_mod
from infralens_lab.quiz import derive as derive_mod
from infralens_lab.quiz import widgets as widgets_mod
from infralens_lab.quiz.__main__ import main as quiz_main
from infralens_lab.quiz.check import GRADE_ENV
from infralens_lab.quiz.pytest_plugin import CHECK_RE

QUESTIONS = all_questions()
# a function exercise's answer is a function, run on cases: tests/test_quiz_functions.py holds those to the same rules
VALUE_QUESTIONS = [q for q in QUESTIONS if q.kind != "function"]
SENTINEL_EVIDENCE = object()  # stands in for evidence when the derivation is replaced


@pytest.fixture
def grade(monkeypatch):
    monkeypatch.setenv(GRADE_ENV, "1")


@pytest.fixture
def learner(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)


def _expect_fail(qid, answer, evidence=None, contains=()):
    with pytest.raises(AssertionError) as exc:
        check(qid, answer, evidence=evidence)
    msg = str(exc.value)
    for text in contains:
        assert text in msg, f"{qid}: {text!r} not in feedback {msg!r}"
    return msg


def _right_and_wrong(q, expected):
    """(right answers, [(wrong answer, feedback it must show)]) for ``q`` whose answer is ``expected``."""
    if q.kind == "choice":
        return [expected, expected.lower()], [(k, q.feedback.get(k, "")) for k in q.options if k != expected]
    if q.kind == "text":
        right = list(expected) if isinstance(expected, tuple) else [expected]
        return right, [(w, q.feedback.get(w, "")) for w in q.vocabulary if w not in right]
    tol = max(q.tolerance.get("abs", 0.0), q.tolerance.get("rel", 0.0) * abs(expected))
    step = tol * 1.5 + 1e-6 * max(1.0, abs(expected)) + 1.0
    return [expected], [(expected + step, q.feedback.get("high", "too high")),
                        (expected - step, q.feedback.get("low", "too low"))]


def _cases(q, monkeypatch):
    """Yield (expected, evidence) pairs covering the question; derived ones via a stand-in derivation."""
    if q.derive is None:
        yield q.answer, None
        return
    if q.kind == "choice":
        values = list(q.options)
    elif q.kind == "text":
        values = list(q.vocabulary)
    else:
        values = [0.0, 7.0, 1234.5]
    if "spread" in q.derive_args:  # the evidence's own spread (quiz.check.Measured): none in this stand-in
        monkeypatch.setitem(derive_mod._DERIVATIONS, "spread", lambda ev, **kw: 0.0)
    for v in values:
        monkeypatch.setitem(derive_mod._DERIVATIONS, q.derive, lambda ev, _v=v, **kw: _v)
        yield ((v,) if q.kind == "text" else v), SENTINEL_EVIDENCE


# ------------------------------------------------------------------ every bank question
def test_banks_exist_and_lab00_is_there():
    assert "lab00" in labs()
    assert len(QUESTIONS) >= 3
    assert {q.kind for q in load_bank("lab00").values()} == {"choice", "number", "text"}


@pytest.mark.parametrize("q", VALUE_QUESTIONS, ids=lambda q: q.id)
def test_question_right_passes_wrong_fails_in_grade_mode(q, grade, monkeypatch, capsys):
    for expected, ev in _cases(q, monkeypatch):
        right, wrong = _right_and_wrong(q, expected)
        for answer in right:
            r = check(q.id, answer, evidence=ev)
            assert (r.status, r.points, r.max_points) == ("correct", q.points, q.points)
            assert q.explanation in r.message
        assert wrong, f"{q.id} has no wrong answers to try"
        for answer, feedback in wrong:
            _expect_fail(q.id, answer, ev, contains=(q.id, "not right", feedback, q.hint))
    assert "✓" in capsys.readouterr().out


def _any_derived_answer(q, monkeypatch):
    """For a derived question, make its derivation give some valid answer and return the evidence to pass
    (SENTINEL_EVIDENCE); None for a question with a fixed answer."""
    if q.derive is None:
        return None
    if "spread" in q.derive_args:  # the evidence's own spread (quiz.check.Measured): none in this stand-in
        monkeypatch.setitem(derive_mod._DERIVATIONS, "spread", lambda ev, **kw: 0.0)
    monkeypatch.setitem(derive_mod._DERIVATIONS, q.derive,
                        lambda e, **kw: next(iter(q.options)) if q.kind == "choice"
                        else (q.vocabulary[0] if q.kind == "text" else 1.0))
    return SENTINEL_EVIDENCE


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.id)
@pytest.mark.parametrize("blank", [None, ..., "", "   "], ids=["None", "Ellipsis", "empty", "blank"])
def test_unanswered_fails_in_grade_mode(q, blank, grade, monkeypatch):
    ev = _any_derived_answer(q, monkeypatch)
    _expect_fail(q.id, blank, ev, contains=("not answered yet",))


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.id)
def test_unanswered_passes_outside_grade_mode(q, learner, monkeypatch, capsys):
    ev = _any_derived_answer(q, monkeypatch)
    r = check(q.id, None, evidence=ev)
    assert (r.status, r.points, r.answered, r.correct) == ("unanswered", 0, False, False)
    assert capsys.readouterr().out == f"· {q.id}: not answered yet. Set the answer variable and run this cell again ({q.points:g} point{'s' if q.points != 1 else ''}).\n"


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.id)
def test_bank_file_does_not_spoil_answers(q):
    text = (bank_mod.BANKS_DIR / f"{q.lab}.json").read_text()
    assert q.explanation not in text
    for fb in q.feedback.values():
        assert fb not in text
    assert '"answer"' not in text and '"explanation"' not in text


def test_wrong_answer_outside_grade_mode_prints_feedback_and_returns(learner, capsys):
    r = check("lab00.q1", "A")
    out = capsys.readouterr().out
    assert r.status == "wrong" and r.points == 0 and r.max_points == 1
    assert out.startswith("✗ lab00.q1: not right. ") and question("lab00.q1").feedback["A"] in out
    assert "Hint: " + question("lab00.q1").hint in out


def test_check_output_is_deterministic(learner, capsys):
    outs = []
    for _ in range(2):
        check("lab00.q1", "C")
        check("lab00.q1", "B")
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and outs[0].count("\n") == 3


def test_checks_write_no_score_file_in_any_mode(monkeypatch, tmp_path):
    """Only the grader writes scores: a check in a kernel with the old score variable set writes nothing."""
    score = tmp_path / "scores.jsonl"
    monkeypatch.setenv("INFRALENS_SCORE_FILE", str(score))
    for mode in ("0", "1"):
        monkeypatch.setenv(GRADE_ENV, mode)
        check("lab00.q1", question("lab00.q1").answer)
    assert not score.exists()


def test_choice_answer_of_wrong_type_or_unknown_option_is_wrong_not_a_crash(learner, capsys):
    assert check("lab00.q1", 2).status == "wrong"
    assert check("lab00.q1", "Z").status == "wrong"
    out = capsys.readouterr().out
    assert "2 is of type int" in out and "'Z' is not one of the options A, B, C, D" in out


def test_result_displays_nothing_in_ipython():
    r = CheckResult("lab00.q1", "correct", 1, 1, "msg")
    assert r._ipython_display_() is None


def test_unknown_question_and_lab_raise_clear_errors():
    with pytest.raises(BankError, match=r"no question 'lab00.q99'; lab00 has \['lab00.q1'"):
        check("lab00.q99", "A")
    with pytest.raises(BankError, match=re.escape("no question bank lab97.json")):
        question("lab97.q1")
    with pytest.raises(BankError, match=re.escape("not valid; expected e.g. 'lab01.q1'")):
        question("q1")


# ------------------------------------------------------------------ synthetic bank (lab98)
def _plain_bank():
    return {"lab": "lab98", "questions": [
        {"id": "lab98.abs", "kind": "number", "prompt": "p", "hint": "h", "explanation": "e",
         "answer": 10.0, "tolerance": {"abs": 0.5}, "unit": "ms"},
        {"id": "lab98.rel", "kind": "number", "prompt": "p", "hint": "h", "explanation": "e",
         "answer": -200.0, "tolerance": {"rel": 0.05}, "feedback": {"low": "LOW!", "high": "HIGH!"}},
        {"id": "lab98.both", "kind": "number", "prompt": "p", "hint": "h", "explanation": "e",
         "answer": 1.0, "tolerance": {"abs": 0.25, "rel": 0.1}, "points": 2},
        {"id": "lab98.word", "kind": "text", "prompt": "p", "hint": "h", "explanation": "e",
         "vocabulary": ["Long Scoreboard", "short-scoreboard", "barrier", "selected"],
         "answer": ["long scoreboard", "BARRIER"], "feedback": {"Short Scoreboard": "SHORT!"}},
        {"id": "lab98.stall", "kind": "text", "prompt": "p", "hint": "h", "explanation": "e",
         "vocabulary": ["long_scoreboard", "short_scoreboard", "barrier"], "derive": "dominant_stall",
         "derive_args": {"kernel": "copy_strided"}},
        {"id": "lab98.speedup", "kind": "number", "prompt": "p", "hint": "h", "explanation": "e",
         "tolerance": {"rel": 0.01}, "derive": "ratio",
         "derive_args": {"num": {"column": "ms", "where": {"variant": "naive"}},
                         "den": {"column": "ms", "where": {"variant": "tiled"}}}},
        {"id": "lab98.fastest", "kind": "choice", "prompt": "p", "hint": "h", "explanation": "e",
         "options": {"naive": "naive", "tiled": "tiled"}, "derive": "argmin",
         "derive_args": {"column": "ms", "label": "variant"}},
    ]}


@pytest.fixture
def lab98(tmp_path, monkeypatch):
    (tmp_path / "lab98.json").write_text(json.dumps(bank_mod.encode_bank(_plain_bank())))
    monkeypatch.setenv(bank_mod.BANKS_ENV, str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("qid, answer, ok", [
    ("lab98.abs", 10.5, True), ("lab98.abs", 9.5, True), ("lab98.abs", 10.500001, False),
    ("lab98.abs", 9.499999, False), ("lab98.abs", "10.2", True), ("lab98.abs", 10, True),
    ("lab98.rel", -210.0, True), ("lab98.rel", -190.0, True), ("lab98.rel", -210.01, False),
    ("lab98.rel", -189.99, False), ("lab98.rel", "-2,00", False), ("lab98.rel", "-200", True),
    ("lab98.both", 1.25, True), ("lab98.both", 0.75, True), ("lab98.both", 1.2501, False),
    ("lab98.abs", True, False), ("lab98.abs", float("nan"), False), ("lab98.abs", float("inf"), False),
    ("lab98.abs", "ten", False), ("lab98.abs", [10], False),
])
def test_number_tolerance_edges(lab98, grade, qid, answer, ok):
    if ok:
        assert check(qid, answer).correct
    else:
        with pytest.raises(AssertionError):
            check(qid, answer)


def test_number_strings():
    from infralens_lab.quiz.check import _as_number

    assert _as_number("1,024") == 1024 and _as_number(" -1,000.5 ") == -1000.5 and _as_number("2e3") == 2000
    assert _as_number("0,5") is None and _as_number("1,00") is None and _as_number(False) is None


def test_number_feedback_says_high_or_low(lab98, learner, capsys):
    check("lab98.rel", -100.0)
    check("lab98.rel", -300.0)
    check("lab98.abs", 20)
    check("lab98.abs", "ten")
    check("lab98.abs", "10,2")
    out = capsys.readouterr().out
    assert "'10,2' is not a number; answer with a number with a dot for decimals (unit: ms)." in out
    assert "HIGH!" in out and "LOW!" in out and "20 ms is too high." in out
    assert "'ten' is not a number; answer with a number (unit: ms)." in out


def test_points_other_than_one(lab98, grade):
    r = check("lab98.both", 1.0)
    assert (r.points, r.max_points) == (2, 2)
    assert ", 2 points." in r.message


@pytest.mark.parametrize("answer", ["Long Scoreboard", "long-scoreboard", " LONG_scoreboard ", "long  scoreboard",
                                    "barrier", "Barrier!"])
def test_text_normalisation_accepts_variants(lab98, grade, answer):
    assert check("lab98.word", answer).correct


@pytest.mark.parametrize("answer, feedback", [("short scoreboard", "SHORT!"), ("selected", "selected is not it."),
                                              ("longscoreboard", "is not one of the allowed words"),
                                              (3, "is of type int")])
def test_text_wrong_words(lab98, grade, answer, feedback):
    _expect_fail("lab98.word", answer, contains=(feedback,))


def test_normalise_word():
    assert normalise_word("  Long--Scoreboard ") == "long_scoreboard"
    assert normalise_word("MIO throttle") == "mio_throttle"


# ------------------------------------------------------------------ evidence-derived questions
def _stall_frame():
    return pd.DataFrame({"config": "c", "kernel": ["copy_strided"] * 3 + ["copy_coalesced"] * 3,
                         "launch": 0,
                         "reason": ["long_scoreboard", "barrier", "selected"] * 2,
                         "samples": [70, 20, 500, 10, 60, 500],
                         "share": [0.12, 0.03, 0.85, 0.02, 0.1, 0.88]})


def _ncu_tidy():
    rows = []
    for kernel, (ls, bar, ni) in {"copy_strided": (900, 50, 5000), "copy_coalesced": (100, 400, 0)}.items():
        for launch in (0, 1):
            rows += [
                dict(kernel=kernel, launch=launch, metric="smsp__pcsamp_warps_issue_stalled_long_scoreboard", unit="", value=ls),
                dict(kernel=kernel, launch=launch, metric="smsp__pcsamp_warps_issue_stalled_barrier", unit="", value=f"{bar:,}"),
                dict(kernel=kernel, launch=launch, metric="smsp__pcsamp_warps_issue_stalled_barrier_not_issued", unit="", value=ni),
                dict(kernel=kernel, launch=launch, metric="smsp__pcsamp_warps_issue_stalled_selected", unit="", value=10**6),
                dict(kernel=kernel, launch=launch, metric="dram__bytes_read.sum", unit="byte", value=10**9),
            ]
    return pd.DataFrame(rows)


def test_dominant_stall_from_breakdown_frame_and_evidence(lab98, grade):
    assert check("lab98.stall", "long scoreboard", evidence=_stall_frame()).correct
    rec = evidence.live("stalls", {"rows": _stall_frame().to_dict("records")}, command="test")
    assert check("lab98.stall", "long_scoreboard", evidence=rec).correct
    _expect_fail("lab98.stall", "barrier", evidence=rec)


def test_dominant_stall_from_raw_ncu_metrics():
    df = _ncu_tidy()
    # summed over both launches; _not_issued and 'selected' ignored; thousands separators parsed
    assert derive_mod.derive("dominant_stall", df, kernel="copy_strided") == "long_scoreboard"
    assert derive_mod.derive("dominant_stall", df, kernel="copy_coalesced") == "barrier"
    assert derive_mod.derive("dominant_stall", df, kernel="coalesced") == "barrier"  # substring fallback
    assert derive_mod.derive("dominant_stall", df, kernel="copy_strided", exclude=()) == "selected"


def test_dominant_stall_errors_name_the_problem():
    with pytest.raises(DerivationError, match=r"no rows for kernel 'attn'; kernels: \['copy_coalesced', 'copy_strided'\]"):
        derive_mod.derive("dominant_stall", _stall_frame(), kernel="attn")
    with pytest.raises(DerivationError, match="not a stall breakdown"):
        derive_mod.derive("dominant_stall", pd.DataFrame({"a": [1]}))
    with pytest.raises(DerivationError, match="no share column"):
        derive_mod.derive("dominant_stall", pd.DataFrame({"reason": ["barrier"], "x": [1]}))
    with pytest.raises(DerivationError, match="cannot read a table from int"):
        derive_mod.derive("dominant_stall", 3)


def test_ratio_and_argmin_questions(lab98, grade):
    times = pd.DataFrame({"variant": ["naive", "tiled"], "ms": [12.0, 3.0]})
    assert check("lab98.speedup", 4.03, evidence=times).correct  # within 1 %
    _expect_fail("lab98.speedup", 4.1, evidence=times)
    assert check("lab98.fastest", "tiled", evidence=times).correct
    _expect_fail("lab98.fastest", "naive", evidence=times)
    slower_tiled = pd.DataFrame({"variant": ["naive", "tiled"], "ms": [1.0, 3.0]})
    assert check("lab98.fastest", "naive", evidence=slower_tiled).correct  # answer follows the evidence


def test_derived_question_without_evidence_raises_in_both_modes(lab98, monkeypatch):
    for mode in ("0", "1"):
        monkeypatch.setenv(GRADE_ENV, mode)
        with pytest.raises(ValueError, match=r"lab98.stall is checked against the evidence shown.*evidence="):
            check("lab98.stall", "barrier")
        self_check("lab98.stall")  # shown without evidence: the question is still visible


def test_derivation_giving_a_word_outside_the_vocabulary_is_an_authoring_error(lab98, learner):
    frame = pd.DataFrame({"kernel": "copy_strided", "reason": ["mio_throttle", "barrier"], "share": [0.9, 0.1]})
    with pytest.raises(ValueError, match="'mio_throttle', which is not in the vocabulary"):
        check("lab98.stall", "barrier", evidence=frame)


def test_value_argmax_source_and_masked_lanes():
    df = pd.DataFrame({"kernel": ["a", "b", "c"], "tflops": [1.0, 9.0, 9.0]})
    assert derive_mod.derive("argmax", df, column="tflops", label="kernel") == "b"  # tie: alphabetical
    assert derive_mod.derive("value", df, column="tflops", where={"kernel": "a"}) == 1.0
    with pytest.raises(DerivationError, match="exactly one row"):
        derive_mod.derive("value", df, column="tflops")
    with pytest.raises(DerivationError, match="no column 'gbps'"):
        derive_mod.derive("value", df, column="gbps", where={"kernel": "a"})
    rec = evidence.live("bench", {"peak": {"gbps": 3000}, "rows": [{"n": 98437, "block_size": 1024}]}, command="t")
    assert derive_mod.derive("value", rec, path="peak.gbps") == 3000
    with pytest.raises(DerivationError, match=re.escape("no 'peak.tflops'")):
        derive_mod.derive("value", rec, path="peak.tflops")
    assert derive_mod.derive("source", rec) == "live"
    assert derive_mod.derive("masked_lanes", rec, where=None) == 97 * 1024 - 98437
    assert derive_mod.derive("ratio", df, num={"column": "tflops", "where": {"kernel": "b"}},
                             den={"column": "tflops", "where": {"kernel": "a"}}) == 9.0
    zero = pd.DataFrame({"kernel": ["a", "b"], "ms": [0.0, 2.0]})
    with pytest.raises(DerivationError, match="is zero"):
        derive_mod.derive("ratio", zero, num={"column": "ms", "where": {"kernel": "b"}},
                          den={"column": "ms", "where": {"kernel": "a"}})


def test_register_derivation(lab98, grade):
    @register_derivation("always_naive")
    def always_naive(ev):
        return "naive"

    try:
        assert "always_naive" in derivations()
        assert derive_mod.derive("always_naive", None) == "naive"
        with pytest.raises(DerivationError, match="no derivation named 'nope'"):
            derive_mod.derive("nope", None)
        with pytest.raises(ValueError, match="must be lower-case"):
            register_derivation("Bad Name")
        with pytest.raises(TypeError, match="needs a function"):
            register_derivation("ok_name")(42)
    finally:
        derive_mod._DERIVATIONS.pop("always_naive", None)


# ------------------------------------------------------------------ malformed banks
def _q(**over):
    d = {"id": "lab98.q1", "kind": "choice", "prompt": "p", "hint": "h", "explanation": "e",
         "options": {"A": "a", "B": "b"}, "answer": "A", "feedback": {"B": "no"}}
    d.update(over)
    return {k: v for k, v in d.items() if v is not None}


@pytest.mark.parametrize("over, match", [
    (dict(id="lab98-q1"), "id must look like 'lab01.q1'"),
    (dict(id="lab97.q1"), "belongs to bank 'lab98' but its id starts with 'lab97'"),
    (dict(kind="essay"), "kind is 'essay', expected one of"),
    (dict(prompt=""), "'prompt' must be a non-empty string"),
    (dict(explanation=None), "'explanation' must be a non-empty string"),
    (dict(points=0), "points is 0, expected a positive number"),
    (dict(answer="C"), r"answer 'C' is not one of the options \['A', 'B'\]"),
    (dict(feedback={}), r"no feedback for wrong options \['B'\]"),
    (dict(feedback={"B": "no", "Z": "?"}), r"feedback for unknown options \['Z'\]"),
    (dict(options={"A": "a"}), "at least two"),
    (dict(answer=None), "has no 'answer'"),
    (dict(derive="value"), "has both 'answer' and 'derive'"),
    (dict(colour="red"), r"unknown fields \['colour'\]"),
    (dict(kind="number", options=None, feedback=None, answer=1.0), "number needs 'tolerance'"),
    (dict(kind="number", options=None, feedback=None, answer=1.0, tolerance={"abs": -1}), "tolerance"),
    (dict(kind="number", options=None, feedback=None, answer="1", tolerance={"abs": 1}), "is not a finite number"),
    (dict(kind="number", options=None, feedback={"wrong": "x"}, answer=1, tolerance={"rel": 0.1}), "'low'/'high'"),
    (dict(kind="text", options=None, feedback=None, vocabulary=["a", "b"], answer="c"), r"answers \['c'\] are not in the vocabulary"),
    (dict(kind="text", options=None, feedback=None, vocabulary="ab", answer="a"), "needs 'vocabulary'"),
])
def test_malformed_plain_question_is_rejected_clearly(over, match):
    with pytest.raises(BankError, match=match):
        bank_mod.encode_bank({"lab": "lab98", "questions": [_q(**over)]})


def test_malformed_bank_shapes():
    with pytest.raises(BankError, match=re.escape("lab is 'lab1', expected e.g. 'lab01'")):
        bank_mod.encode_bank({"lab": "lab1", "questions": [_q()]})
    with pytest.raises(BankError, match="'questions' must be a non-empty list"):
        bank_mod.encode_bank({"lab": "lab98", "questions": []})
    with pytest.raises(BankError, match=r"duplicate question ids \['lab98.q1'\]"):
        bank_mod.encode_bank({"lab": "lab98", "questions": [_q(), _q()]})


def _write(tmp_path, doc, name="lab98.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_malformed_bank_files(tmp_path):
    good = bank_mod.encode_bank({"lab": "lab98", "questions": [_q(), _q(id="lab98.q2")]})
    assert list(bank_mod.load_bank_file(_write(tmp_path, good))) == ["lab98.q1", "lab98.q2"]
    with pytest.raises(BankError, match="not valid JSON"):
        bank_mod.load_bank_file(_write(tmp_path, "{nope"))
    with pytest.raises(BankError, match=re.escape("schema is 'x', expected 'infralens.quizbank/1'")):
        bank_mod.load_bank_file(_write(tmp_path, {**good, "schema": "x"}))
    with pytest.raises(BankError, match="file name says 'lab97'"):
        bank_mod.load_bank_file(_write(tmp_path, good, "lab97.json"))
    tampered = json.loads(json.dumps(good))
    blob = tampered["questions"][0]["sealed"]
    tampered["questions"][0]["sealed"] = blob[:10] + ("A" if blob[10] != "A" else "B") + blob[11:]
    with pytest.raises(BankError, match=re.escape("lab98.q1: 'sealed' does not decode")):
        bank_mod.load_bank_file(_write(tmp_path, tampered))
    swapped = json.loads(json.dumps(good))  # a blob sealed for another question does not open
    swapped["questions"][0]["sealed"] = good["questions"][1]["sealed"]
    with pytest.raises(BankError, match=re.escape("lab98.q1: 'sealed' does not decode")):
        bank_mod.load_bank_file(_write(tmp_path, swapped))
    unsealed = json.loads(json.dumps(good))
    del unsealed["questions"][0]["sealed"]
    with pytest.raises(BankError, match="has no 'sealed' string"):
        bank_mod.load_bank_file(_write(tmp_path, unsealed))
    bad_secret = json.loads(json.dumps(good))
    bad_secret["questions"][0]["sealed"] = bank_mod.seal("lab98.q1", {"answer": "A", "prompt": "x"})
    with pytest.raises(BankError, match="sealed fields are wrong"):
        bank_mod.load_bank_file(_write(tmp_path, bad_secret))
    with pytest.raises(BankError, match="no such question bank"):
        bank_mod.load_bank_file(tmp_path / "lab96.json")
    with pytest.raises(BankError, match=r"lab98.json: lab98.q1: answer 'C' is not one of"):
        bad_answer = json.loads(json.dumps(good))
        bad_answer["questions"][0]["sealed"] = bank_mod.seal("lab98.q1", {"answer": "C", "feedback": {"B": "no"},
                                                                         "explanation": "e"})
        bank_mod.load_bank_file(_write(tmp_path, bad_answer))


def test_seal_round_trip_and_determinism():
    secret = {"answer": "B", "explanation": "because", "feedback": {"A": "no"}}
    blob = bank_mod.seal("lab01.q1", secret)
    assert blob == bank_mod.seal("lab01.q1", secret)
    assert bank_mod.unseal("lab01.q1", blob) == secret
    assert "because" not in blob


def test_encode_cli_round_trip(tmp_path, capsys):
    src = tmp_path / "plain.py"
    src.write_text(f"BANK = {_plain_bank()!r}\n")
    out = tmp_path / "lab98.json"
    assert quiz_main(["encode", str(src), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert quiz_main(["decode", str(out)]) == 0
    decoded = json.loads(capsys.readouterr().out)
    again = bank_mod.encode_bank(decoded)
    assert again == json.loads(out.read_text())
    assert quiz_main(["answers", "lab00"]) == 0
    assert "lab00.q1\tchoice\t1 pt\tC" in capsys.readouterr().out
    bad = tmp_path / "bad.py"
    bad.write_text("X = 1\n")
    assert quiz_main(["encode", str(bad)]) == 1
    assert "defines no BANK" in capsys.readouterr().err


def test_committed_banks_decode_to_what_encode_writes():
    for lab in labs():
        doc = json.loads((bank_mod.BANKS_DIR / f"{lab}.json").read_text())
        assert bank_mod.encode_bank(bank_mod.decode_bank(doc)) == doc, f"{lab}.json is not what encode writes"


# ------------------------------------------------------------------ self-check widgets
def test_self_check_without_ipython_prints_the_question(capsys):
    self_check("lab00.q1")
    out = capsys.readouterr().out
    assert out == question_text("lab00.q1") + "\n"
    assert out.startswith("lab00.q1 (1 point): You open lab 02") and "  C) A recorded set" in out


def test_question_text_for_number_and_text(lab98):
    assert "Answer in ANSWER_ABS with a number in ms." in question_text("lab98.abs")
    # the words as the bank writes them (the names a lab's tables use); answers are still matched normalised
    assert ("Answer in ANSWER_WORD with one of: Long Scoreboard, short-scoreboard, barrier, selected."
            in question_text("lab98.word"))
    assert "worked out from the evidence" in question_text("lab98.stall")


def test_self_check_widget_in_jupyter(monkeypatch, capsys):
    ipywidgets = pytest.importorskip("ipywidgets")
    shown, built = [], []
    monkeypatch.setattr(widgets_mod, "_ipython_and_widgets",
                        lambda: (lambda obj, raw=False: shown.append((obj, raw)), ipywidgets))
    real_build = widgets_mod._build
    monkeypatch.setattr(widgets_mod, "_build", lambda *a: built.append(real_build(*a)) or built[-1])
    assert self_check("lab00.q1") is None
    (bundle, raw), = shown
    box, = built
    assert raw and bundle["text/plain"] == question_text("lab00.q1")
    assert "lab00.q1" in bundle["text/html"] and "A recorded set" in bundle["text/html"]
    assert bundle[widgets_mod.WIDGET_VIEW]["model_id"] == box.model_id
    assert widgets_mod.CSS_CLASS in box._dom_classes
    radio, button = box.children[1], box.children[2]
    assert button.description == "Check"
    button.click()
    assert capsys.readouterr().out.endswith("Nothing chosen yet: pick one first.\n")  # after Output's clear codes
    radio.value = "B"
    button.click()
    assert question("lab00.q1").feedback["B"] in capsys.readouterr().out
    radio.value = "C"
    button.click()
    out = capsys.readouterr().out
    assert "✓ lab00.q1: right" in out
    assert 'Now set ANSWER_Q1 = \'C\' in the answer cell below: only that variable is graded.' in out


def test_self_check_never_raises_or_records_in_grade_mode(grade, monkeypatch, tmp_path, capsys):
    ipywidgets = pytest.importorskip("ipywidgets")
    box = widgets_mod._build(question("lab00.q3"), ipywidgets,
                             pd.DataFrame({"n": [2000], "block_size": [1024]}))
    monkeypatch.setenv("INFRALENS_SCORE_FILE", str(tmp_path / "s.jsonl"))
    text, button = box.children[1], box.children[2]
    button.click()
    assert capsys.readouterr().out.endswith("The box is empty: type your answer first.\n")
    text.value = "7"
    button.click()
    text.value = "48"
    button.click()
    out = capsys.readouterr().out
    assert "Too few" in out and "not right" in out and "✓ lab00.q3: right (from your evidence: 48 offsets)" in out
    assert "Now set ANSWER_Q3 = 48 in the answer cell below" in out
    assert not (tmp_path / "s.jsonl").exists()


# ------------------------------------------------------------------ grading plugin pieces
def test_plugin_finds_check_calls_but_not_self_checks():
    src = 'self_check("lab00.q1")\ncheck("lab00.q2", A)\nquiz.check( \'lab00.q3\', B, evidence=ev)\nrecheck("lab00.q4", 1)'
    assert CHECK_RE.findall(src) == ["lab00.q2", "lab00.q3"]


# ------------------------------------------------------------------ bad input to the authoring tool (issue 12)
def test_decode_of_an_unknown_lab_is_a_clear_error(capsys):
    assert quiz_main(["decode", "lab99"]) == 1
    err = capsys.readouterr().err
    assert "no question bank 'lab99'" in err and "lab00" in err and "Traceback" not in err


def test_decode_of_a_file_that_is_not_json_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "lab05.json"
    bad.write_text("{not json")
    assert quiz_main(["decode", str(bad)]) == 1
    assert "not valid JSON" in capsys.readouterr().err


def test_encode_to_an_unwritable_path_is_a_clear_error(tmp_path, capsys):
    src = tmp_path / "plain.json"
    src.write_text(json.dumps(bank_mod.decode_bank(json.loads((bank_mod.BANKS_DIR / "lab00.json").read_text()))))
    assert quiz_main(["encode", str(src), "-o", str(tmp_path / "no" / "such" / "folder" / "lab00.json")]) == 1
    err = capsys.readouterr().err
    assert "No such file or directory" in err and "writable output path" in err


@pytest.mark.parametrize("provider, ok", [
    ("infralens_lab.quiz.keys.lab00:vector_add", True),
    ("os:system", False), ("infralens_lab.quiz.grading_evidence", False), ("", False)])
def test_bank_evidence_provider_must_name_a_package_function(provider, ok):
    plain = {"id": "lab98.d", "kind": "number", "prompt": "p", "hint": "h", "explanation": "e",
             "tolerance": {"abs": 0}, "derive": "value", "derive_args": {"column": "n"}, "evidence": provider}
    if ok:
        assert bank_mod.question_from_plain(plain).evidence == provider
    else:
        with pytest.raises(BankError, match=re.escape("infralens_lab.module:function")):
            bank_mod.question_from_plain(plain)


def test_evidence_provider_only_on_derived_questions():
    plain = {"id": "lab98.n", "kind": "number", "prompt": "p", "hint": "h", "explanation": "e",
             "tolerance": {"abs": 0}, "answer": 1, "evidence": "infralens_lab.quiz.keys.lab00:vector_add"}
    with pytest.raises(BankError, match="only on a question with 'derive'"):
        bank_mod.question_from_plain(plain)


def test_reciprocal_derivation_gives_the_ceiling_speedup():
    ev = pd.DataFrame({"version": ["bubble", "fixed"], "gpu_util_pct": [80.0, 98.0]})
    got = derive_mod.derive("reciprocal", ev, scale=100, column="gpu_util_pct", where={"version": "bubble"})
    assert got == pytest.approx(1.25)
    with pytest.raises(DerivationError, match="zero"):
        derive_mod.derive("reciprocal", ev.assign(gpu_util_pct=0.0), column="gpu_util_pct",
                          where={"version": "fixed"})


def test_widget_pickers_follow_the_question_kind(lab98):
    ipywidgets = pytest.importorskip("ipywidgets")
    word = widgets_mod._build(question("lab98.word"), ipywidgets, None).children[1]
    assert isinstance(word, ipywidgets.RadioButtons) and list(word.options) == list(question("lab98.word").vocabulary)
    stall = widgets_mod._build(question("lab98.stall"), ipywidgets, None).children[1]
    many = widgets_mod._build(question("lab04.q4"), ipywidgets, None).children[1]
    assert isinstance(many, ipywidgets.Dropdown) and len(question("lab04.q4").vocabulary) > widgets_mod.RADIO_MAX_WORDS
    assert isinstance(stall, (ipywidgets.RadioButtons, ipywidgets.Dropdown))
    assert isinstance(widgets_mod._build(question("lab98.abs"), ipywidgets, None).children[1], ipywidgets.Text)


def test_widget_feedback_for_a_derived_question_without_evidence_points_to_the_check_cell(lab98):
    msg = widgets_mod.widget_feedback(question("lab98.stall"), "Barrier")
    assert "cannot check it" in msg and "ANSWER_STALL = 'Barrier'" in msg


def test_widget_says_the_exact_line_to_write_for_a_choice():
    q = question("lab00.q1")
    msg = widgets_mod.widget_feedback(q, q.answer.lower())  # a lower-case pick is still right
    assert f"Now set ANSWER_Q1 = {q.answer!r} in the answer cell below" in msg
    assert widgets_mod._literal(q, " c ") == "'C'"
