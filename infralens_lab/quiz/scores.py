"""What a grading run writes: the summary it prints, scores.csv, JUnit XML, each written once, atomically.

Rows are dicts with :data:`COLUMNS` (``grader.Row.as_dict()``). Every file is written into a fresh private
folder made in the destination folder and renamed over the destination (``os.replace``), so a reader, or a
process racing the grader, sees the old file or the whole new one, never a mix; a folder planted at the
destination is moved aside first (:func:`move_into_place`).

Cells are safe to open in a spreadsheet and to print: :func:`safe_cell` shows control and bidirectional
characters escaped (``\\x1b``, ``\\u202e``) and writes a cell that begins with ``= + - @`` (or a tab or
CR) as text, with the single quote OWASP's CSV-injection guidance prescribes; :func:`clip_row` caps answers
and feedback at :data:`CAPS` characters, with the length shown.
"""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import stat
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

COLUMNS = ("notebook", "lab", "question", "status", "points", "max_points", "feedback", "answer", "flags")
CAPS = {"answer": 200, "feedback": 600, "notebook": 300}   # characters kept of a cell that came from a file
DUPLICATES_NAMED = 3   # a duplicate's feedback names this many of the others, then counts the rest (60 copies: 59)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")          # OWASP: a spreadsheet reads these as a formula
# C0 and C1 controls (ESC, CR, ...) and Unicode's bidirectional and invisible format characters (U+202E, ...)
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """``text`` with every control and bidirectional character shown as an escape (``\\x1b``, ``\\u202e``,
    ``\\n``): what a terminal or a page shows is what the file holds."""
    return UNSAFE.sub(lambda m: _NAMED.get(m.group(), f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                                         else f"\\u{ord(m.group()):04x}"), text)


def safe_cell(value) -> str:
    """One CSV cell: controls escaped, and a cell beginning with ``= + - @``, tab or CR prefixed with ``'``
    so a spreadsheet shows it as text (a plain number such as ``-3.5`` is left as it is)."""
    text = str(value)
    if text.startswith(FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + escape_controls(text)
    return escape_controls(text)


def clip(text: str, cap: int) -> str:
    """``text`` cut to ``cap`` characters, saying how long it was."""
    return text if len(text) <= cap else f"{text[:cap]}... [{len(text):,} characters, cut]"


def clip_row(row: dict) -> dict:
    """``row`` with its answer, feedback and notebook name capped (:data:`CAPS`)."""
    for key, cap in CAPS.items():
        if isinstance(row.get(key), str):
            row[key] = clip(row[key], cap)
    return row


def _p(x: float) -> str:
    return f"{x:g}"


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fresh private folder in the same folder and one rename."""
    path = Path(path)
    private = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp = private / path.name
    mask = os.umask(0)
    os.umask(mask)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 & ~mask)  # as open() would create it
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def move_into_place(write, path: str | os.PathLike) -> tuple[str, str] | None:
    """Call ``write(path)`` (an atomic writer); when a folder stands at ``path`` (a notebook made one while it
    ran), move it aside to ``path.moved-aside-N`` first. Returns ``(where, what)`` it was moved to, else None."""
    path = Path(path)
    moved = None
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        n = 1
        while Path(f"{path}.moved-aside-{n}").exists() or Path(f"{path}.moved-aside-{n}").is_symlink():
            n += 1
        aside = f"{path}.moved-aside-{n}"
        path.rename(aside)
        moved = (aside, "a folder")
    write(path)
    return moved


def add_flag(row: dict, flag: str, sentence: str = "") -> None:
    """Add ``flag`` to a row's flags (once) and ``sentence`` to its feedback."""
    flags = [f for f in row.get("flags", "").split("; ") if f]
    if flag not in flags:
        flags.append(flag)
    row["flags"] = "; ".join(flags)
    if sentence and sentence not in row["feedback"]:
        row["feedback"] = f"{row['feedback']} {sentence}".strip()


def flag_duplicates(rows: list[dict], prints: dict[str, str | None], shas: dict[str, str]) -> list[list[str]]:
    """Flag notebooks handed in twice: the same bytes, or the same answer cells (``prints``: notebook ->
    fingerprint, None when nothing is answered). Scores do not change. Returns the groups found."""
    groups = []
    for key, label in ((shas, "the same file"), (prints, "the same answer cells")):
        by: dict[str, list[str]] = defaultdict(list)
        for nb, value in key.items():
            if value is not None:
                by[value].append(nb)
        for members in by.values():
            if len(members) < 2 or any(set(members) <= set(g) for g in groups):
                continue
            groups.append(members)
            for r in rows:
                if r["notebook"] in members:
                    rest = [m for m in members if m != r["notebook"]]
                    others = ", ".join(rest[:DUPLICATES_NAMED]) + (
                        f" and {len(rest) - DUPLICATES_NAMED} more" if len(rest) > DUPLICATES_NAMED else "")
                    add_flag(r, "duplicate", f"Duplicate: {label} as {others} (for the instructor to judge; "
                                             "the score is unchanged).")
    return groups


def flag_second_notebooks(rows: list[dict], students: dict[str, str]) -> list[str]:
    """A student who handed in two notebooks of one lab: the first (by name) counts, every later one is
    flagged and its points set to 0 (not counted twice). Returns the notebooks not counted."""
    first: dict[tuple[str, str], str] = {}
    dropped = []
    for nb in sorted({r["notebook"] for r in rows if r.get("lab")}):
        lab = next(r["lab"] for r in rows if r["notebook"] == nb and r.get("lab"))
        key = (students.get(nb, nb), lab)
        if key not in first:
            first[key] = nb
            continue
        dropped.append(nb)
        for r in rows:
            if r["notebook"] == nb:
                r["points"] = 0
                add_flag(r, "second notebook of a lab", f"Not counted: {key[0]} also handed in {first[key]} for "
                                                        f"{lab}, which is counted (one notebook per lab and student).")
    return dropped


def summary_lines(rows: list[dict]) -> list[str]:
    """Human summary: per notebook, per lab, per question, then the total over all notebooks."""
    if not rows:
        return ["no quiz checks found in the collected notebooks"]
    lines = []
    notebooks = list(dict.fromkeys(r["notebook"] for r in rows))
    for nb in notebooks:
        nb_rows = [r for r in rows if r["notebook"] == nb]
        lines.append(escape_controls(nb))
        for lab in dict.fromkeys(r["lab"] for r in nb_rows):
            lab_rows = [r for r in nb_rows if r["lab"] == lab]
            lines.append(f"  {lab}: {_p(sum(r['points'] for r in lab_rows))}/{_p(sum(r['max_points'] for r in lab_rows))} points")
            for r in lab_rows:
                lines.append(f"    {r['question']:<12} {r['status']:<12} {_p(r['points'])}/{_p(r['max_points'])}")
        flags = list(dict.fromkeys(f for r in nb_rows for f in r.get("flags", "").split("; ") if f))
        if flags:
            lines.append(f"  flags: {escape_controls('; '.join(flags))}")
        lines.append(f"  total: {_p(sum(r['points'] for r in nb_rows))}/{_p(sum(r['max_points'] for r in nb_rows))}")
    lines.append(f"all notebooks: {_p(sum(r['points'] for r in rows))}/{_p(sum(r['max_points'] for r in rows))} "
                 f"points over {len(notebooks)} notebook(s)")
    return lines


def csv_bytes(rows: list[dict]) -> bytes:
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    w.writeheader()
    for r in rows:
        w.writerow({k: safe_cell(r.get(k, "")) for k in COLUMNS})
    return buf.getvalue().encode("utf-8")


def write_csv(rows: list[dict], path: str | os.PathLike) -> None:
    atomic_write(path, csv_bytes(rows))


def junit_bytes(rows: list[dict]) -> bytes:
    failed = [r for r in rows if r["status"] != "correct"]
    suite = ET.Element("testsuite", name="infralens-grade", tests=str(len(rows)), failures=str(len(failed)),
                       errors="0", skipped="0")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="points", value=_p(sum(r["points"] for r in rows)))
    ET.SubElement(props, "property", name="max_points", value=_p(sum(r["max_points"] for r in rows)))
    for r in rows:
        r = {k: escape_controls(v) if isinstance(v, str) else v for k, v in r.items()}  # XML holds no controls
        case = ET.SubElement(suite, "testcase", classname=r["notebook"], name=r["question"], time="0")
        cp = ET.SubElement(case, "properties")
        ET.SubElement(cp, "property", name="points", value=_p(r["points"]))
        ET.SubElement(cp, "property", name="max_points", value=_p(r["max_points"]))
        if r.get("flags"):
            ET.SubElement(cp, "property", name="flags", value=r["flags"])
        if r["status"] != "correct":
            fail = ET.SubElement(case, "failure", message=r["status"], type=r["status"].replace(" ", "_"))
            fail.text = r["feedback"]
    root = ET.Element("testsuites")
    root.append(suite)
    buf = io.BytesIO()
    ET.ElementTree(root).write(buf, encoding="utf-8", xml_declaration=True)
    return buf.getvalue()


def write_junit(rows: list[dict], path: str | os.PathLike) -> None:
    atomic_write(path, junit_bytes(rows))
