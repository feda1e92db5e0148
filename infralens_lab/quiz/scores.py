"""What a grading run writes: the summary it prints, scores.csv, JUnit XML, each written once, atomically.

Rows are dicts with :data:`COLUMNS` (``grader.Row.as_dict()``). Every file is written to a temporary file
in the destination folder and renamed over the destination (``os.replace``), so a reader, or a process
racing the grader, sees the old file or the whole new one, never a mix.
"""
from __future__ import annotations

import csv
import io
import os
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

COLUMNS = ("notebook", "lab", "question", "status", "points", "max_points", "feedback", "answer", "flags")


def _p(x: float) -> str:
    return f"{x:g}"


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and one rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    mask = os.umask(0)
    os.umask(mask)
    try:
        os.fchmod(fd, 0o666 & ~mask)  # as open() would create it (mkstemp makes it 0600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
                    others = ", ".join(m for m in members if m != r["notebook"])
                    add_flag(r, "duplicate", f"Duplicate: {label} as {others} (for the instructor to judge; "
                                             "the score is unchanged).")
    return groups


def summary_lines(rows: list[dict]) -> list[str]:
    """Human summary: per notebook, per lab, per question, then the total over all notebooks."""
    if not rows:
        return ["no quiz checks found in the collected notebooks"]
    lines = []
    notebooks = list(dict.fromkeys(r["notebook"] for r in rows))
    for nb in notebooks:
        nb_rows = [r for r in rows if r["notebook"] == nb]
        lines.append(nb)
        for lab in dict.fromkeys(r["lab"] for r in nb_rows):
            lab_rows = [r for r in nb_rows if r["lab"] == lab]
            lines.append(f"  {lab}: {_p(sum(r['points'] for r in lab_rows))}/{_p(sum(r['max_points'] for r in lab_rows))} points")
            for r in lab_rows:
                lines.append(f"    {r['question']:<12} {r['status']:<12} {_p(r['points'])}/{_p(r['max_points'])}")
        flags = list(dict.fromkeys(f for r in nb_rows for f in r.get("flags", "").split("; ") if f))
        if flags:
            lines.append(f"  flags: {'; '.join(flags)}")
        lines.append(f"  total: {_p(sum(r['points'] for r in nb_rows))}/{_p(sum(r['max_points'] for r in nb_rows))}")
    lines.append(f"all notebooks: {_p(sum(r['points'] for r in rows))}/{_p(sum(r['max_points'] for r in rows))} "
                 f"points over {len(notebooks)} notebook(s)")
    return lines


def csv_bytes(rows: list[dict]) -> bytes:
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in COLUMNS})
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
