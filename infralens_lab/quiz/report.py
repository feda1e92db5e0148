"""The class report: one self-contained HTML page an instructor reads after ``make grade``.

``write_report(rows, path, students)`` writes ``class_report.html`` (no script, no stylesheet or font from
the network, an inline SVG histogram; it reads at 800 px) from the same rows as scores.csv:

* **per question**: the lab section it covers (the heading above it in the lab notebook), the share of
  notebooks that got it right, and the most common wrong answers, which are the misconceptions to teach
  again, with how many left it unanswered or wrote code instead of a value;
* **per student**: total points and every flag the grader raised (lab mismatch, unknown lab in metadata,
  duplicate, unreadable, timed out, kernel died, runner killed, changed grader files, ...);
* **a histogram of totals** per lab.

Every value that came from a submission (names, answers) is HTML-escaped.
"""
from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from pathlib import Path

from .bank import BankError, load_bank
from .cells import question_sections
from .scores import atomic_write, escape_controls

TOP_WRONG = 3
FLAG_MEANING = {
    "lab mismatch": "the file name names another lab than the notebook's metadata (graded as the metadata says)",
    "unknown lab in metadata": "the metadata names a lab with no question bank (graded as the file name says)",
    "unknown lab": "neither the metadata nor the file name names a lab with a bank",
    "unreadable": "the file is not a readable notebook",
    "grader error": "the grader failed on this notebook (the row says why); no one else's rows are affected",
    "duplicate": "the same file or the same answer cells as another submission (for you to judge)",
    "timed out": "the notebook ran past the time limit and was stopped; scored from its written answers",
    "kernel died": "the kernel died during the run (os._exit, out of memory); scored from its written answers",
    "runner killed": "a cell killed the process running the notebook; scored from its written answers",
    "runner failed": "the process running the notebook failed; scored from its written answers",
    "not run": "not executed because an earlier notebook changed the grader's files",
    "not run: budget": "not executed: the class's time budget (make grade BUDGET=) was spent; scored from its file",
    "changed grader files": "the grader's own files changed while this notebook ran",
    "changed submissions": "the submissions folder changed while this notebook ran (put back; all graded from the "
                           "copy taken before any ran)",
    "changed during grading": "another notebook's run changed this file; graded from the copy taken before, put back",
    "not graded": "not a notebook (a Python file, a link, a FIFO, a hidden folder): listed, never read or imported",
    "second notebook of a lab": "the student handed in another notebook of this lab, which is counted; this one is not",
}
CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1f24;background:#fff}
main{max-width:1100px;margin:0 auto;padding:16px}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.4em 0 .4em;border-bottom:1px solid #d0d7de}
h3{font-size:1.05em;margin:1em 0 .3em}p.note{color:#57606a;margin:.3em 0}
.scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;width:100%;font-size:.92em}
th,td{border-bottom:1px solid #d8dee4;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.flag{display:inline-block;background:#fff1e5;border:1px solid #d4a373;border-radius:10px;padding:0 7px;
margin:1px 2px;font-size:.85em;white-space:nowrap}.ok{color:#57606a}
.bar{display:inline-block;height:.7em;background:#2da44e;vertical-align:middle;margin-right:6px}
.bar.bg{background:#d8dee4}.wrong code{background:#ffebe9;border-radius:4px;padding:0 4px}
svg{max-width:100%;height:auto}.nb small{color:#57606a;overflow-wrap:anywhere}td{overflow-wrap:anywhere}td.q{white-space:nowrap;overflow-wrap:normal}dl{margin:.3em 0}dt{font-weight:600}dd{margin:0 0 .4em 1.2em}
"""


def _e(x) -> str:
    """HTML-escaped, control and bidirectional characters shown as escapes (a folder named with U+202E
    cannot pass for another)."""
    return html.escape(escape_controls(str(x)), quote=True)


def _p(x: float) -> str:
    return f"{x:g}"


def lab_sections(lab: str) -> dict[str, str]:
    """The heading above each question of ``lab`` in its committed notebook (``labs/NN_*.ipynb`` beside the
    package), or ``{}`` when the notebook is not there (an installed package)."""
    labs_dir = Path(__file__).resolve().parents[2] / "labs"
    for nb_path in sorted(labs_dir.glob(f"{lab[3:]}_*.ipynb")):
        try:
            return question_sections(json.loads(nb_path.read_text()))
        except (OSError, ValueError):
            return {}
    return {}


def histogram_svg(totals: list[float], max_points: float, title: str) -> str:
    """An inline SVG bar chart of how many notebooks scored each total (bins of one point up to 20 points,
    else ten equal bins)."""
    whole = max_points <= 20 and float(max_points).is_integer()
    n_bins = int(max_points) + 1 if whole else 10
    width_pts = 1.0 if whole else max(max_points, 1e-9) / n_bins
    counts = [0] * n_bins
    for t in totals:
        counts[min(int(t // width_pts) if width_pts else 0, n_bins - 1)] += 1
    W, H, left, bottom, top = 640, 220, 40, 36, 16
    bw = (W - left - 10) / n_bins
    peak = max(counts) or 1
    parts = [f'<svg viewBox="0 0 {W} {H}" width="{W}" role="img" aria-label="{_e(title)}" '
             'xmlns="http://www.w3.org/2000/svg" font-family="system-ui,sans-serif" font-size="12">',
             f"<title>{_e(title)}</title>",
             f'<line x1="{left}" y1="{H - bottom}" x2="{W - 10}" y2="{H - bottom}" stroke="#57606a"/>']
    for i, c in enumerate(counts):
        h = (H - bottom - top) * c / peak
        x = left + i * bw
        label = _p(i) if whole else f"{_p(round(i * width_pts, 1))}"
        parts.append(f'<rect x="{x + 2:.1f}" y="{H - bottom - h:.1f}" width="{bw - 4:.1f}" height="{h:.1f}" '
                     f'fill="#0969da"><title>{label} points: {c}</title></rect>')
        if c:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{H - bottom - h - 3:.1f}" text-anchor="middle">{c}</text>')
        parts.append(f'<text x="{x + bw / 2:.1f}" y="{H - bottom + 14}" text-anchor="middle">{label}</text>')
    parts.append(f'<text x="{left + (W - left) / 2:.0f}" y="{H - 4}" text-anchor="middle">total points '
                 f'(of {_p(max_points)})</text>')
    parts.append(f'<text x="12" y="{top + (H - top - bottom) / 2:.0f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {top + (H - top - bottom) / 2:.0f})">notebooks</text></svg>')
    return "".join(parts)


def _flags(text: str) -> list[str]:
    return [f for f in (text or "").split("; ") if f]


def _question_table(lab: str, rows: list[dict], sections: dict[str, str]) -> str:
    try:
        bank = load_bank(lab)
    except BankError:
        bank = {}
    by_q: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["question"]:
            by_q[r["question"]].append(r)
    out = ['<div class="scroll"><table><thead><tr><th>question</th><th>lab section</th><th>right</th>'
           '<th>most common wrong answers</th><th>unanswered</th><th>set by code</th></tr></thead><tbody>']
    for qid in [q for q in bank if q in by_q] + [q for q in by_q if q not in bank]:
        qs = by_q[qid]
        right = sum(r["status"] == "correct" for r in qs)
        share = right / len(qs) if qs else 0.0
        wrong = Counter(r.get("answer", "") for r in qs if r["status"] == "wrong")
        shown = ", ".join(f"<code>{_e(a or '?')}</code> &times;{n}" for a, n in wrong.most_common(TOP_WRONG)) or \
            '<span class="ok">none</span>'
        prompt = bank[qid].prompt if qid in bank else ""
        out.append(
            f'<tr><td title="{_e(prompt)}" class="q"><b>{_e(qid)}</b></td><td>{_e(sections.get(qid, "?"))}</td>'
            f'<td class="num"><span class="bar" style="width:{60 * share:.0f}px"></span>'
            f'<span class="bar bg" style="width:{60 * (1 - share):.0f}px"></span>{right}/{len(qs)} '
            f'({100 * share:.0f}%)</td><td class="wrong">{shown}</td>'
            f'<td class="num">{sum(r["status"] == "unanswered" for r in qs)}</td>'
            f'<td class="num">{sum(r["status"] == "invalid" for r in qs)}</td></tr>')
    out.append("</tbody></table></div>")
    return "".join(out)


def _student_table(rows: list[dict], students: dict[str, str]) -> str:
    """One row per student: total over their notebooks, every flag, then each notebook's lab and points."""
    by_student: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_student[students.get(r["notebook"], Path(r["notebook"]).stem)][r["notebook"]].append(r)
    out = ['<div class="scroll"><table><thead><tr><th>student</th><th>total</th><th>flags</th><th>notebooks</th>'
           "</tr></thead><tbody>"]
    for who in sorted(by_student, key=str.lower):
        nbs = by_student[who]
        rs = [r for v in nbs.values() for r in v]
        flags = list(dict.fromkeys(f for r in rs for f in _flags(r.get("flags", ""))))
        badges = "".join(f'<span class="flag" title="{_e(FLAG_MEANING.get(f, ""))}">{_e(f)}</span>' for f in flags) \
            or '<span class="ok">none</span>'
        items = "".join(
            f'<div class="nb">{_e(", ".join(dict.fromkeys(r["lab"] for r in v if r["lab"])) or "?")}: '
            f'{_p(sum(r["points"] for r in v))}/{_p(sum(r["max_points"] for r in v))} <small>{_e(nb)}</small></div>'
            for nb, v in nbs.items())
        out.append(f'<tr><td>{_e(who)}</td><td class="num">{_p(sum(r["points"] for r in rs))}/'
                   f'{_p(sum(r["max_points"] for r in rs))}</td><td>{badges}</td><td>{items}</td></tr>')
    out.append("</tbody></table></div>")
    return "".join(out)


def render(rows: list[dict], students: dict[str, str] | None = None,
           submitted: dict[str, dict] | None = None) -> str:
    """The report's HTML (a whole page) for ``rows`` (dicts with scores.csv's columns). ``students`` maps a
    notebook to who handed it in; ``submitted`` maps a lab to one submitted notebook (a dict), whose headings
    name the sections of questions the committed lab does not have (an exercise added by the instructor)."""
    students, submitted = students or {}, submitted or {}
    labs = list(dict.fromkeys(r["lab"] for r in rows if r["lab"]))
    n_nb = len({r["notebook"] for r in rows})
    body = [f"<h1>InfraLens Lab: class report</h1><p class=\"note\">{n_nb} notebook(s), "
            f"{len({students.get(r['notebook'], r['notebook']) for r in rows})} student(s), labs: "
            f"{_e(', '.join(labs) or 'none')}. Scores are in the CSV written beside this page; this page "
            "summarises the same rows.</p>",
            "<h2>Students</h2>", _student_table(rows, students)]
    for lab in labs:
        lab_rows = [r for r in rows if r["lab"] == lab]
        totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for r in lab_rows:
            totals[r["notebook"]][0] += r["points"]
            totals[r["notebook"]][1] += r["max_points"]
        max_points = max((t[1] for t in totals.values()), default=0.0)
        body += [f'<h2 id="{_e(lab)}">{_e(lab)}</h2>', "<h3>Totals</h3>",
                 histogram_svg([t[0] for t in totals.values()], max_points, f"{lab}: notebooks per total"),
                 "<h3>Questions</h3>", '<p class="note">Right: the share of notebooks that earned the points. '
                 "The most common wrong answers are the misconceptions to teach again.</p>",
                 _question_table(lab, lab_rows, {**question_sections(submitted.get(lab, {})),
                                                 **lab_sections(lab)})]
    used = list(dict.fromkeys(f for r in rows for f in _flags(r.get("flags", ""))))
    if used:
        body.append("<h2>Flags</h2><dl>" + "".join(f"<dt>{_e(f)}</dt><dd>{_e(FLAG_MEANING.get(f, ''))}</dd>"
                                                   for f in used) + "</dl>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>InfraLens class report</title><style>{CSS}</style></head><body><main>"
            + "".join(body) + "</main></body></html>\n")


def write_report(rows: list[dict], path: str | Path, students: dict[str, str] | None = None,
                 submitted: dict[str, dict] | None = None) -> None:
    """Write :func:`render` to ``path``, atomically."""
    atomic_write(path, render(rows, students, submitted).encode("utf-8"))


# ---------------------------------------------------------------- one page per student
def page_name(student: str) -> str:
    """A file name for ``student``'s page: letters, digits, ``. _ -`` kept, anything else ``_``, and a short
    hash of the name when anything was replaced (two students never share a page; no name leaves the folder)."""
    import hashlib
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", student).strip(".") or "_"
    if safe != student:
        safe = f"{safe[:60]}-{hashlib.sha256(student.encode()).hexdigest()[:8]}"
    return f"{safe}.html"


def student_page(student: str, rows: list[dict]) -> str:
    """One student's feedback page: per notebook, each question with the answer read, right or wrong, the
    feedback and the lab section to reread (no script, nothing fetched; every value escaped)."""
    body = [f"<h1>Feedback: {_e(student)}</h1>",
            f'<p class="note">{_p(sum(r["points"] for r in rows))}/{_p(sum(r["max_points"] for r in rows))} points.</p>']
    for nb in dict.fromkeys(r["notebook"] for r in rows):
        nb_rows = [r for r in rows if r["notebook"] == nb]
        lab = next((r["lab"] for r in nb_rows if r["lab"]), "")
        sections = lab_sections(lab) if lab else {}
        body.append(f"<h2>{_e(nb)}</h2>")
        flags = list(dict.fromkeys(f for r in nb_rows for f in _flags(r.get("flags", ""))))
        if flags:
            body.append('<p class="note">' + "".join(f'<span class="flag">{_e(f)}</span>' for f in flags) + "</p>")
        body.append('<div class="scroll"><table><thead><tr><th>question</th><th>your answer</th><th>result</th>'
                    "<th>feedback</th><th>reread</th></tr></thead><tbody>")
        for r in nb_rows:
            result = "right" if r["status"] == "correct" else r["status"]
            body.append(f'<tr><td class="q">{_e(r["question"] or "-")}</td><td><code>{_e(r.get("answer", ""))}</code></td>'
                        f'<td>{_e(result)} ({_p(r["points"])}/{_p(r["max_points"])})</td><td>{_e(r["feedback"])}</td>'
                        f'<td>{_e(sections.get(r["question"], ""))}</td></tr>')
        body.append("</tbody></table></div>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>Feedback: {_e(student)}</title><style>{CSS}</style></head><body><main>"
            + "".join(body) + "</main></body></html>\n")


def write_student_pages(rows: list[dict], folder: str | Path, students: dict[str, str]) -> list[Path]:
    """Write one page per student (:func:`student_page`, named by :func:`page_name`) into ``folder``: built in a
    fresh folder beside it, then renamed into place (what was there before is removed). Returns the pages."""
    import shutil
    import tempfile

    folder = Path(folder)
    fresh = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[students.get(r["notebook"], Path(r["notebook"]).stem)].append(r)
    for who, rs in by.items():
        (fresh / page_name(who)).write_text(student_page(who, rs), encoding="utf-8")
    fresh.chmod(0o755)
    old = None
    if folder.is_symlink() or folder.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old.", dir=folder.parent)) / "x"
        folder.rename(old)
    fresh.rename(folder)
    if old is not None:
        shutil.rmtree(old.parent, ignore_errors=True)
    return sorted(folder / page_name(w) for w in by)
