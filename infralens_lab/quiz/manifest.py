"""The grader's own files, checked before every grading run, and snapshots that catch changes during one.

``infralens_lab/quiz/manifest.json`` lists every file the grade is decided with (every ``.py`` under
``quiz/`` and the banks ``quiz/banks/*.json``) with its SHA-256, as ``data/recorded/<gpu>/manifest.json`` does for a
recorded set. ``make grade`` refuses to start when one of them differs, is missing or was added (a
submission's cell that appended to ``quiz/check.py`` in an earlier run, say), naming the file and the fix.
After a deliberate change, regenerate it::

    python -m infralens_lab.quiz manifest           # rewrite quiz/manifest.json
    python -m infralens_lab.quiz manifest --check   # what make grade checks

During a run the grader also holds a :class:`Snapshot` (hashes in its own memory, which a notebook cannot
rewrite) of the whole package, the bank folders and the recorded evidence, and compares it after each
executed notebook. A process running as your user can rewrite a file *and* this manifest; the manifest
catches a cell that edits the package, not one that also re-hashes it (docs/instructors.md).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import InfraLensError
from ..units import MiB

SCHEMA = "infralens.quiz-manifest/1"
QUIZ_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = QUIZ_DIR.parent
MANIFEST = QUIZ_DIR / "manifest.json"
REGENERATE = "python -m infralens_lab.quiz manifest"


class ManifestError(InfraLensError, RuntimeError):
    """The grader's files do not match the manifest; the message names each file and the fix."""


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB chunks: the one file hash of the grader (the manifest and
    the submissions' before/after state, ``quiz.submissions``)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(MiB), b""):
            h.update(chunk)
    return h.hexdigest()


def graded_files(quiz_dir: Path = QUIZ_DIR) -> list[Path]:
    """The files the manifest covers: every ``.py`` under ``quiz/`` (``quiz/keys/`` included), the banks
    ``quiz/banks/*.json`` and every file in ``quiz/grade_root/`` (make grade's pytest configuration), sorted."""
    py = [p for p in quiz_dir.rglob("*.py") if "__pycache__" not in p.relative_to(quiz_dir).parts]
    ini = [p for p in (quiz_dir / "grade_root").glob("*") if p.is_file()]  # make grade's pytest configuration
    return sorted(set([*py, *(quiz_dir / "banks").glob("*.json"), *ini]))


def _rel(path: Path, quiz_dir: Path) -> str:
    return path.relative_to(quiz_dir).as_posix()


def build(quiz_dir: Path = QUIZ_DIR) -> dict:
    """The manifest document for the files in ``quiz_dir`` as they are now."""
    return {"schema": SCHEMA, "note": "written by `" + REGENERATE + "`; checked by make grade",
            "files": {_rel(p, quiz_dir): sha256_file(p) for p in graded_files(quiz_dir)}}


def write(quiz_dir: Path = QUIZ_DIR) -> Path:
    path = quiz_dir / "manifest.json"
    path.write_text(json.dumps(build(quiz_dir), indent=1, sort_keys=True) + "\n")
    return path


def _shown(quiz_dir: Path, rel: str) -> str:
    """How a message names a file: from the repository root when the package sits in a checkout."""
    root = quiz_dir.parent.parent
    return f"{quiz_dir.parent.name}/{quiz_dir.name}/{rel}" if (root / "pyproject.toml").is_file() else str(quiz_dir / rel)


def verify(quiz_dir: Path = QUIZ_DIR) -> None:
    """Raise :class:`ManifestError` when a covered file changed, is missing or is not listed."""
    mpath = quiz_dir / "manifest.json"
    if not mpath.is_file():
        raise ManifestError(f"{_shown(quiz_dir, 'manifest.json')} is missing: the grader checks its own files against it "
                            "before grading. In a git checkout restore it with `git checkout -- "
                            f"{_shown(quiz_dir, 'manifest.json')}`; after a deliberate change to the quiz package "
                            f"write it again with `{REGENERATE}`")
    try:
        doc = json.loads(mpath.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{_shown(quiz_dir, 'manifest.json')} is not valid JSON ({exc}); expected the file "
                            f"`{REGENERATE}` writes") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("files"), dict):
        seen = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ManifestError(f"{_shown(quiz_dir, 'manifest.json')}: schema {seen!r}, expected {SCHEMA!r} with a "
                            f"'files' object (written by `{REGENERATE}`)")
    listed: dict = doc["files"]
    now = {_rel(p, quiz_dir): p for p in graded_files(quiz_dir)}
    changed = sorted(r for r in listed if r in now and sha256_file(now[r]) != listed[r])
    missing = sorted(r for r in listed if r not in now)
    added = sorted(r for r in now if r not in listed)
    if not (changed or missing or added):
        return
    parts = []
    for what, names in (("changed", changed), ("missing", missing), ("not in the manifest", added)):
        if names:
            parts.append(f"{what}: {', '.join(_shown(quiz_dir, r) for r in names)}")
    fix = " ".join(_shown(quiz_dir, r) for r in changed + missing)
    restore = f"`git checkout -- {fix}`" if fix else "deleting the added files"
    raise ManifestError(
        "refusing to grade: the grader's own files differ from infralens_lab/quiz/manifest.json ("
        + "; ".join(parts) + "). If you did not change them, something else did (a submission's code run as "
        f"your user can): restore them with {restore}, or reinstall the package. If you changed them on "
        f"purpose, record the change with `{REGENERATE}`.")


def put_back(saved: dict[str, bytes | None], paths: list[str], times: dict[str, tuple[int, int]] | None = None) -> list[str]:
    """Write each of ``paths`` back as ``saved`` holds it: its bytes (and its ``(atime_ns, mtime_ns)`` from ``times``,
    so that a ``.pyc`` compiled from it stays valid); removed when ``saved`` has no entry for it (a file added
    since); left as it is when ``saved`` holds None (it could not be read then). Returns sentences for what could
    not be put back (empty when all was)."""
    import os

    failed = []
    for p in paths:
        try:
            if p not in saved:
                Path(p).unlink(missing_ok=True)
            elif saved[p] is None:
                failed.append(f"{p} could not be put back: the grader could not read it before the runs")
            else:
                Path(p).parent.mkdir(parents=True, exist_ok=True)
                Path(p).write_bytes(saved[p])
                if times and p in times:
                    os.utime(p, ns=times[p])
        except OSError as exc:
            failed.append(f"{p} could not be put back: {exc.strerror or exc}")
    return failed


class Snapshot:
    """SHA-256 of every file under some folders, taken once and held in this process's memory, with the bytes
    (the package, the banks and the recorded evidence: about 20 MB) so that :meth:`restore` can put them back."""

    SUFFIXES = (".py", ".pyc", ".json", ".csv", ".txt", ".ipynb", ".ini")  # .pyc: the grader compiles them all first

    def __init__(self, folders: list[Path]):
        self.folders = [Path(f) for f in folders if Path(f).is_dir()]
        self.data: dict[str, bytes | None] = {}
        self.times: dict[str, tuple[int, int]] = {}
        self.hashes = self._hash(keep=self.data)

    def _hash(self, keep: dict | None = None) -> dict[str, str]:
        out = {}
        for folder in self.folders:
            for p in sorted(folder.rglob("*")):
                if p.is_file() and p.suffix in self.SUFFIXES:
                    try:
                        data = p.read_bytes()
                        out[str(p)] = hashlib.sha256(data).hexdigest()
                        if keep is not None:
                            st = p.stat()
                            self.times[str(p)] = (st.st_atime_ns, st.st_mtime_ns)
                    except OSError:
                        data, out[str(p)] = None, "unreadable"
                    if keep is not None:
                        keep[str(p)] = data
        return out

    def changes(self) -> list[str]:
        """Files changed, added or removed since the snapshot (paths as strings, sorted)."""
        now = self._hash()
        return sorted(p for p in set(now) | set(self.hashes) if now.get(p) != self.hashes.get(p))

    def restore(self, paths: list[str]) -> list[str]:
        """Put ``paths`` (from :meth:`changes`) back as the snapshot found them; sentences for what could not be."""
        return put_back(self.data, paths, self.times)
