"""Question banks: one JSON file per lab in ``infralens_lab/quiz/banks/<lab>.json``.

A question has public fields (id, prompt, kind, options or vocabulary, unit, hint, points,
and an optional ``derive`` naming an evidence derivation) and a *sealed* blob holding what
would give the answer away: the answer, per-option feedback, tolerance and explanation.
Sealing is zlib-compressed JSON XOR-ed with a key made from the question id, then base64.
It stops a learner from reading answers off the file by accident; it is obfuscation, not
security (anyone can run :func:`unseal`, and ``python -m infralens_lab.quiz decode lab00``
prints a bank in plain form).

Authors write a plain dict (see :func:`encode_bank` and docs/instructors.md) and turn it into
a bank file with ``python -m infralens_lab.quiz encode SRC.py -o banks/labNN.json``.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InfraLensError

BANK_SCHEMA = "infralens.quizbank/1"
KINDS = ("choice", "number", "text", "function")
BANKS_DIR = Path(__file__).resolve().parent / "banks"
BANKS_ENV = "INFRALENS_QUIZ_BANKS"  # extra folders searched first, os.pathsep-separated
SEAL_NOTE = ("Answers, feedback and explanations are sealed (zlib + XOR with a key from the question id + "
             "base64) so that reading this file does not spoil them. This is obfuscation, not security.")
_ID_RE = re.compile(r"^(lab\d{2})\.[a-z0-9_]+$")
_PUBLIC = ("id", "kind", "prompt", "options", "vocabulary", "unit", "hint", "points", "derive", "derive_args",
           "evidence", "cases")
_PROVIDER_RE = re.compile(r"^infralens_lab(\.[A-Za-z_][A-Za-z0-9_]*)+:[A-Za-z_][A-Za-z0-9_]*$")
_SECRET = ("answer", "feedback", "tolerance", "explanation", "reference")


class BankError(InfraLensError, ValueError):
    """A question bank (file or plain dict) is malformed; the message names the question and field."""


def normalise_word(word: str) -> str:
    """Text-answer normal form: case-folded, runs of non-alphanumerics become one ``_``.

    ``"Long Scoreboard"``, ``"long-scoreboard"`` and ``" LONG_scoreboard "`` all become
    ``"long_scoreboard"``.
    """
    return re.sub(r"[^0-9a-z]+", "_", str(word).casefold()).strip("_")


@dataclass(frozen=True)
class Question:
    """One quiz question. ``answer`` is None for a derived question (its answer comes from evidence)."""

    id: str
    kind: str
    prompt: str
    hint: str
    points: float
    explanation: str
    options: dict[str, str] = field(default_factory=dict)      # choice: key -> text
    vocabulary: tuple[str, ...] = ()                            # text: allowed (normalised) words
    shown: tuple[str, ...] = ()                                 # text: the same words as the bank writes them
    unit: str = ""                                              # number: unit shown with the prompt
    answer: Any = None                                          # choice key | number | tuple of words
    feedback: dict[str, str] = field(default_factory=dict)      # wrong option/word -> why; number: low/high
    tolerance: dict[str, float] = field(default_factory=dict)   # number: abs and/or rel
    derive: str | None = None
    derive_args: dict[str, Any] = field(default_factory=dict)
    evidence: str | None = None  # derived: 'infralens_lab.module:function' giving the grader its evidence
    reference: str | None = None  # function: 'infralens_lab.module:function', the right function (sealed)
    cases: str | None = None      # function: 'infralens_lab.module:function' giving the cases it is run on

    @property
    def lab(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def words(self) -> tuple[str, ...]:
        """A text question's words as a learner reads them: the bank's spelling, else the normalised ones."""
        return self.shown or self.vocabulary


# ---------------------------------------------------------------- sealing
def _key(qid: str) -> bytes:
    return hashlib.sha256(f"infralens-quiz:{qid}".encode()).digest()


def seal(qid: str, secret: dict) -> str:
    """Seal a question's secret fields into a base64 string (deterministic for the same input)."""
    raw = zlib.compress(json.dumps(secret, sort_keys=True, separators=(",", ":")).encode(), 9)
    key = _key(qid)
    return base64.b64encode(bytes(b ^ key[i % len(key)] for i, b in enumerate(raw))).decode("ascii")


def unseal(qid: str, blob: str) -> dict:
    """Inverse of :func:`seal`; raises BankError if the blob was not sealed for ``qid``."""
    try:
        raw = base64.b64decode(blob.encode("ascii"), validate=True)
        key = _key(qid)
        secret = json.loads(zlib.decompress(bytes(b ^ key[i % len(key)] for i, b in enumerate(raw))))
    except Exception as exc:  # binascii.Error, zlib.error, UnicodeDecodeError, JSONDecodeError
        raise BankError(f"{qid}: 'sealed' does not decode ({type(exc).__name__}); "
                        "it must be written by `python -m infralens_lab.quiz encode`") from None
    if not isinstance(secret, dict):
        raise BankError(f"{qid}: sealed data is {type(secret).__name__}, expected an object")
    return secret


# ---------------------------------------------------------------- validation
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _need(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise BankError(f"{where}: {msg}")


def question_from_plain(d: Any, lab: str | None = None) -> Question:
    """Validate one plain question dict (public and secret fields together) into a Question."""
    _need(isinstance(d, dict), f"question in {lab or 'bank'}", f"is {type(d).__name__}, expected an object")
    qid = d.get("id")
    _need(isinstance(qid, str) and bool(_ID_RE.match(qid)), f"question {qid!r}",
          "id must look like 'lab01.q1' (lab, two digits, '.', lower-case name)")
    w = qid
    if lab is not None:
        _need(qid.startswith(lab + "."), w, f"belongs to bank {lab!r} but its id starts with {qid.split('.')[0]!r}")
    unknown = sorted(set(d) - set(_PUBLIC) - set(_SECRET))
    _need(not unknown, w, f"unknown fields {unknown}; expected some of {list(_PUBLIC + _SECRET)}")
    kind = d.get("kind")
    _need(kind in KINDS, w, f"kind is {kind!r}, expected one of {KINDS}")
    for name in ("prompt", "hint", "explanation"):
        _need(isinstance(d.get(name), str) and d[name].strip() != "", w, f"{name!r} must be a non-empty string")
    points = d.get("points", 1)
    _need(_is_number(points) and points > 0, w, f"points is {points!r}, expected a positive number")
    if kind == "function":
        return _function_question(d, w, points)
    for name in ("reference", "cases"):
        _need(name not in d, w, f"has {name!r}, which only a 'function' question takes (kind is {kind!r})")
    derive = d.get("derive")
    _need(derive is None or (isinstance(derive, str) and derive != ""), w,
          f"derive is {derive!r}, expected the name of a registered derivation")
    derive_args = d.get("derive_args", {})
    _need(isinstance(derive_args, dict), w, f"derive_args is {type(derive_args).__name__}, expected an object")
    provider = d.get("evidence")
    _need(provider is None or (derive is not None and isinstance(provider, str) and bool(_PROVIDER_RE.match(provider))),
          w, f"evidence is {provider!r}; expected 'infralens_lab.module:function' (the grader's evidence "
             "provider), and only on a question with 'derive'")
    _need(derive is not None or "answer" in d, w, "has no 'answer' (and no 'derive' to compute one)")
    _need(derive is None or "answer" not in d, w, "has both 'answer' and 'derive'; keep one")
    feedback = d.get("feedback", {})
    _need(isinstance(feedback, dict) and all(isinstance(v, str) for v in feedback.values()), w,
          "feedback must map option/word/'low'/'high' to a string")
    answer = d.get("answer")
    kw: dict[str, Any] = {}
    if kind == "choice":
        opts = d.get("options")
        _need(isinstance(opts, dict) and len(opts) >= 2 and all(isinstance(k, str) and isinstance(v, str)
                                                                   for k, v in opts.items()), w,
              "choice needs 'options': an object of at least two key -> text")
        if derive is None:
            _need(answer in opts, w, f"answer {answer!r} is not one of the options {sorted(opts)}")
            missing = sorted(k for k in opts if k != answer and k not in feedback)
            _need(not missing, w, f"no feedback for wrong options {missing}")
        extra = sorted(set(feedback) - set(opts))
        _need(not extra, w, f"feedback for unknown options {extra}")
        kw["options"] = dict(opts)
    elif kind == "number":
        tol = d.get("tolerance")
        _need(isinstance(tol, dict) and bool(tol) and set(tol) <= {"abs", "rel"}
              and all(_is_number(v) and v >= 0 for v in tol.values()), w,
              f"number needs 'tolerance' with 'abs' and/or 'rel' >= 0, got {tol!r}")
        if derive is None:
            _need(_is_number(answer), w, f"answer {answer!r} is not a finite number")
        extra = sorted(set(feedback) - {"low", "high"})
        _need(not extra, w, f"number feedback keys must be 'low'/'high', got {extra}")
        unit = d.get("unit", "")
        _need(isinstance(unit, str), w, f"unit is {unit!r}, expected a string")
        kw.update(tolerance={k: float(v) for k, v in tol.items()}, unit=unit)
    else:  # text
        vocab = d.get("vocabulary")
        _need(isinstance(vocab, list) and len(vocab) >= 2 and all(isinstance(v, str) for v in vocab), w,
              "text needs 'vocabulary': a list of at least two allowed words")
        vocab_n = tuple(dict.fromkeys(normalise_word(v) for v in vocab))
        if derive is None:
            words = [answer] if isinstance(answer, str) else answer
            _need(isinstance(words, list) and len(words) >= 1 and all(isinstance(a, str) for a in words), w,
                  f"answer {answer!r} must be a word or a list of accepted words")
            answer = tuple(normalise_word(a) for a in words)
            outside = [a for a in answer if a not in vocab_n]
            _need(not outside, w, f"answers {outside} are not in the vocabulary {list(vocab_n)}")
        extra = sorted(set(normalise_word(k) for k in feedback) - set(vocab_n))
        _need(not extra, w, f"feedback for words not in the vocabulary: {extra}")
        feedback = {normalise_word(k): v for k, v in feedback.items()}
        kw["vocabulary"] = vocab_n
        kw["shown"] = tuple(dict.fromkeys(vocab))  # what a learner reads: the names the lab's tables use
    return Question(id=qid, kind=kind, prompt=d["prompt"], hint=d["hint"], points=points,
                    explanation=d["explanation"], answer=answer, feedback=dict(feedback),
                    derive=derive, derive_args=dict(derive_args), evidence=provider, **kw)


def _function_question(d: dict, w: str, points: float) -> Question:
    """A ``function`` question: the learner hands in a function, run on the bank's ``cases`` and held to the
    ``reference`` function there (quiz.functions). It is an exercise, with a number tolerance and no fixed answer."""
    _need(bool(re.match(r"^lab\d{2}\.ex\d", w)), w, "a 'function' question is an exercise: its id looks like "
          "'lab01.ex1' (the grader reads what its check recorded in the cell's output)")
    for name in ("reference", "cases"):
        spec = d.get(name)
        _need(isinstance(spec, str) and bool(_PROVIDER_RE.match(spec)), w,
              f"{name} is {spec!r}; a 'function' question needs 'infralens_lab.module:function' there (the "
              + ("right function, called on each case" if name == "reference" else
                 "provider of the cases, called with no arguments") + ")")
    clash = sorted(k for k in ("answer", "derive", "derive_args", "evidence", "options", "vocabulary") if k in d)
    _need(not clash, w, f"has {clash}, which a 'function' question does not take (its answers come from "
                        "'reference' on 'cases')")
    tol = d.get("tolerance")
    _need(isinstance(tol, dict) and bool(tol) and set(tol) <= {"abs", "rel"}
          and all(_is_number(v) and v >= 0 for v in tol.values()), w,
          f"function needs 'tolerance' with 'abs' and/or 'rel' >= 0 (each case's value is a number), got {tol!r}")
    feedback = d.get("feedback", {})
    _need(isinstance(feedback, dict) and set(feedback) <= {"low", "high"}
          and all(isinstance(v, str) for v in feedback.values()), w,
          f"function feedback maps 'low'/'high' to a string, got {sorted(feedback) if isinstance(feedback, dict) else feedback!r}")
    unit = d.get("unit", "")
    _need(isinstance(unit, str), w, f"unit is {unit!r}, expected a string")
    return Question(id=w, kind="function", prompt=d["prompt"], hint=d["hint"], points=points,
                    explanation=d["explanation"], feedback=dict(feedback), unit=unit,
                    tolerance={k: float(v) for k, v in tol.items()}, reference=d["reference"], cases=d["cases"])


def _plain_to_file_entry(d: dict) -> dict:
    public = {k: d[k] for k in _PUBLIC if k in d}
    public.setdefault("points", 1)
    secret = {k: d[k] for k in _SECRET if k in d}
    public["sealed"] = seal(d["id"], secret)
    return public


def _check_bank_shape(doc: Any, where: str, sealed: bool) -> str:
    _need(isinstance(doc, dict), where, f"is {type(doc).__name__}, expected an object")
    if sealed:
        _need(doc.get("schema") == BANK_SCHEMA, where,
              f"schema is {doc.get('schema')!r}, expected {BANK_SCHEMA!r}")
    lab = doc.get("lab")
    _need(isinstance(lab, str) and re.fullmatch(r"lab\d{2}", lab or "") is not None, where,
          f"lab is {lab!r}, expected e.g. 'lab01'")
    qs = doc.get("questions")
    _need(isinstance(qs, list) and len(qs) >= 1, where, "'questions' must be a non-empty list")
    ids = [q.get("id") for q in qs if isinstance(q, dict)]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    _need(not dups, where, f"duplicate question ids {dups}")
    return lab


def encode_bank(plain: dict) -> dict:
    """Validate a plain bank ``{"lab": "lab01", "questions": [ {...}, ... ]}`` and return the sealed
    file form. Each plain question carries public fields plus ``answer`` (or ``derive``),
    ``feedback``, ``tolerance`` (numbers) and ``explanation``."""
    lab = _check_bank_shape(plain, "plain bank", sealed=False)
    for q in plain["questions"]:
        question_from_plain(q, lab)
    return {"schema": BANK_SCHEMA, "lab": lab, "note": SEAL_NOTE,
            "questions": [_plain_to_file_entry(q) for q in plain["questions"]]}


def decode_bank(doc: dict, where: str = "bank") -> dict:
    """The plain form of a sealed bank document (the inverse of :func:`encode_bank`)."""
    lab = _check_bank_shape(doc, where, sealed=True)
    out = []
    for entry in doc["questions"]:
        _need(isinstance(entry, dict), where, f"a question is {type(entry).__name__}, expected an object")
        qid = entry.get("id", "?")
        _need(isinstance(entry.get("sealed"), str), f"{where}: {qid}", "has no 'sealed' string")
        plain = {k: v for k, v in entry.items() if k != "sealed"}
        secret = unseal(str(qid), entry["sealed"])
        clash = sorted(set(secret) & set(plain))
        _need(not clash and set(secret) <= set(_SECRET), f"{where}: {qid}", f"sealed fields are wrong: {sorted(secret)}")
        plain.update(secret)
        out.append(plain)
    return {"lab": lab, "questions": out}


def load_bank_file(path: str | Path) -> dict[str, Question]:
    """Read and validate one sealed bank file; returns ``{question id: Question}`` in file order."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise BankError(f"{path}: no such question bank") from None
    except json.JSONDecodeError as exc:
        raise BankError(f"{path}: not valid JSON ({exc})") from None
    plain = decode_bank(doc, str(path))
    if path.stem != plain["lab"]:
        raise BankError(f"{path}: holds lab {plain['lab']!r}, but the file name says {path.stem!r}")
    try:
        return {q["id"]: question_from_plain(q, plain["lab"]) for q in plain["questions"]}
    except BankError as exc:
        raise BankError(f"{path}: {exc}") from None


def banks_dirs() -> list[Path]:
    """Folders searched for ``<lab>.json``: ``$INFRALENS_QUIZ_BANKS`` entries first, then the package's.

    An entry that is not a folder, or a folder with no ``labNN.json``, raises BankError naming it (it was
    silently skipped, so a typo left the package's banks in use without a word).
    """
    raw = os.environ.get(BANKS_ENV, "")
    extra = []
    for entry in (p for p in raw.split(os.pathsep) if p.strip()):
        d = Path(entry).expanduser()
        if not d.is_dir():
            seen = "a file" if d.exists() else "no such folder"
            raise BankError(f"{BANKS_ENV}={raw!r}: {entry!r} is not a folder ({seen}); expected folders holding "
                            f"labNN.json bank files, separated by {os.pathsep!r}")
        if not any(d.glob("lab[0-9][0-9].json")):
            found = sorted(p.name for p in d.iterdir())[:5]
            raise BankError(f"{BANKS_ENV}={raw!r}: the folder {entry!r} holds no labNN.json bank (found {found}); "
                            "expected sealed banks written by `python -m infralens_lab.quiz encode`")
        extra.append(d)
    return [*extra, BANKS_DIR]


@functools.cache
def _load_cached(path: str, mtime_ns: int) -> dict[str, Question]:
    return load_bank_file(path)


def load_bank(lab: str) -> dict[str, Question]:
    """The questions of ``lab`` (e.g. ``'lab01'``), from the first folder in :func:`banks_dirs` that has it."""
    if not isinstance(lab, str) or not re.fullmatch(r"lab\d{2}", lab):
        raise BankError(f"lab {lab!r} is not a lab name; expected e.g. 'lab01'")
    for d in banks_dirs():
        p = d / f"{lab}.json"
        if p.is_file():
            return _load_cached(str(p), p.stat().st_mtime_ns)
    raise BankError(f"no question bank {lab}.json in {[str(d) for d in banks_dirs()]}; known labs: {labs()}")


def labs() -> list[str]:
    """Lab names with a bank file, e.g. ``['lab00', 'lab01']``."""
    found = {p.stem for d in banks_dirs() if d.is_dir() for p in d.glob("lab[0-9][0-9].json")}
    return sorted(found)


def question(qid: str) -> Question:
    """The question ``qid`` (e.g. ``'lab01.q2'``); raises BankError naming the known ids if absent."""
    if not isinstance(qid, str) or not _ID_RE.match(qid):
        raise BankError(f"question id {qid!r} is not valid; expected e.g. 'lab01.q1'")
    bank = load_bank(qid.split(".", 1)[0])
    if qid not in bank:
        raise BankError(f"no question {qid!r}; {qid.split('.')[0]} has {list(bank)}")
    return bank[qid]


def is_exercise(qid: str) -> bool:
    """True for an exercise (``lab01.ex1``): the learner computes its answer with code, and the grader reads
    the value ``check`` recorded (docs/CONTRACTS.md, "quiz: the cell protocol")."""
    return isinstance(qid, str) and re.match(r"lab\d{2}\.ex\d", qid) is not None


def answer_variable(qid: str) -> str:
    """The notebook variable graded for ``qid``: ``'lab01.q3'`` -> ``'ANSWER_Q3'``."""
    return "ANSWER_" + qid.split(".", 1)[1].upper()


def all_questions() -> list[Question]:
    """Every question of every bank, in lab then file order."""
    return [q for lab in labs() for q in load_bank(lab).values()]
