"""The submissions folder as the grader sees it: notebooks to grade, everything else listed with a reason.

:func:`scan` walks the folder without following a symbolic link (``os.scandir``, ``lstat``): each path is a
notebook (a regular ``*.ipynb`` file) or an :class:`Entry` whose ``reason`` says why it is not graded (a
Python file, a symbolic link (dangling or not, to a classmate's notebook or to ``/dev/zero``), a FIFO, a
device, a hidden folder such as ``.ipynb_checkpoints``). No reason quotes a file's content. The grader
never imports or runs anything it finds here: pytest is pointed at the grader's own folder and these paths
are handed to it by the plugin (``conftest.py`` and ``test_*.py`` beside a notebook are just listed).

:func:`read_regular` reads a notebook's bytes without following a link and without blocking on a FIFO put in
its place after the scan. :class:`FolderState` holds the SHA-256 of every regular file (and what every other
path is), taken before any notebook runs: after each run (``RUN=1``) the grader compares the folder with it,
names each change, and :meth:`FolderState.restore` puts the original bytes back and removes what was added.
:func:`read_only` makes the originals read-only while notebooks run (a process of your user can undo that;
the comparison is what catches it).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ..units import MiB
from .manifest import sha256_file

NOTEBOOK_SUFFIX = ".ipynb"
HIDDEN_NOTE = "a hidden folder (Jupyter's .ipynb_checkpoints, dot-folders): not graded"
NOT_NOTEBOOK = "not graded: not a notebook"


@dataclass(frozen=True)
class Entry:
    """One path in the submissions folder: ``rel`` (relative to it), what it is, and why it is not graded
    (``reason`` is empty for a notebook to grade)."""

    path: Path
    rel: str
    kind: str          # "notebook", "not a notebook", "symlink", "special", "hidden", "unreadable"
    reason: str = ""

    @property
    def graded(self) -> bool:
        return self.kind == "notebook"


def classify(name: str, st: os.stat_result, link_target: str | None = None) -> tuple[str, str]:
    """``(kind, reason)`` of one path from its ``lstat``: a symbolic link is never followed (``link_target``,
    from ``os.readlink``, only says whether it dangles: no content is read)."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        where = " that points nowhere (dangling)" if link_target is not None and not Path(link_target).exists() \
            else ""
        return "symlink", (f"not graded: a symbolic link{where}; links are not followed (hand in the notebook "
                           "file itself)")
    if stat.S_ISDIR(mode):
        return ("hidden", f"not graded: {HIDDEN_NOTE}") if name.startswith(".") else ("folder", "")
    if not stat.S_ISREG(mode):
        what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        return "special", f"not graded: {what}, not a regular file"
    if name.startswith("."):
        return "hidden", "not graded: a hidden file"
    if not name.endswith(NOTEBOOK_SUFFIX):
        return "not a notebook", NOT_NOTEBOOK
    return "notebook", ""


def scan(folder: str | os.PathLike) -> list[Entry]:
    """Every path under ``folder`` (itself a real folder, not a link), sorted, links not followed; a hidden
    folder is one entry (not entered)."""
    root = Path(folder)
    out: list[Entry] = []
    todo = [root]
    while todo:
        here = todo.pop()
        try:
            children = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError as exc:
            out.append(Entry(here, _rel(here, root), "unreadable",
                             f"not graded: the folder cannot be listed ({exc.strerror or type(exc).__name__})"))
            continue
        for child in children:
            path = Path(child.path)
            try:
                st = child.stat(follow_symlinks=False)
                target = str(path.readlink()) if stat.S_ISLNK(st.st_mode) else None
            except OSError as exc:
                out.append(Entry(path, _rel(path, root), "unreadable",
                                 f"not graded: cannot be read ({exc.strerror or type(exc).__name__})"))
                continue
            if target is not None and not Path(target).is_absolute():
                target = str(path.parent / target)
            kind, reason = classify(child.name, st, target)
            if kind == "folder":
                todo.append(path)
            else:
                out.append(Entry(path, _rel(path, root), kind, reason))
    return sorted(out, key=lambda e: e.rel)


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path != root else "."


def read_regular(path: str | os.PathLike, limit: int) -> bytes | None:
    """The bytes of the regular file at ``path``, read without following a link (``O_NOFOLLOW``) and without
    blocking on a FIFO (``O_NONBLOCK``; the open file is checked to be regular); None when it is something
    else, unreadable, or over ``limit`` bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _walk(folder: Path):
    """``(rel, path, lstat)`` of every path under ``folder``; links and hidden folders are not entered."""
    todo = [folder]
    while todo:
        here = todo.pop()
        try:
            children = list(os.scandir(here))
        except OSError:
            continue
        for child in children:
            path = Path(child.path)
            try:
                st = child.stat(follow_symlinks=False)
            except OSError:
                yield _rel(path, folder), path, None
                continue
            if stat.S_ISDIR(st.st_mode) and not child.name.startswith("."):
                todo.append(path)
            yield _rel(path, folder), path, st


def _state_of(folder: Path) -> dict[str, tuple]:
    """``{rel: state}``: ``("file", sha256, mode)`` for a regular file, ``("dir", mode)``, ``("link", target)``,
    ``("other", type)``."""
    out: dict[str, tuple] = {}
    for rel, path, st in _walk(folder):
        try:
            if st is None:
                out[rel] = ("unreadable",)
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", str(path.readlink()))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", sha256_file(path), stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
        except OSError:
            out[rel] = ("unreadable",)
    return out


class FolderState:
    """What every path under ``folder`` was when the grader started (hashes and bytes in its own memory).

    ``changes()`` names what differs now (contents and file types; the read-only mode the grader set is not a
    change); ``restore()`` writes the original bytes (and modes) back and removes what was added.
    """

    def __init__(self, folder: str | os.PathLike, keep_bytes_below: int = 256 * MiB):
        self.folder = Path(folder)
        self.state = _state_of(self.folder)
        self.data: dict[str, bytes] = {}
        for rel, st in self.state.items():
            if st[0] == "file":
                data = read_regular(self.folder / rel, keep_bytes_below)
                if data is not None:
                    self.data[rel] = data

    @staticmethod
    def _same(a: tuple | None, b: tuple | None) -> bool:
        if a is None or b is None or a[0] != b[0]:
            return a == b
        return a[:2] == b[:2] if a[0] in ("file", "link") else True

    def changes(self) -> list[tuple[str, str]]:
        """``[(rel, what)]``, sorted: ``changed``, ``added``, ``removed`` or ``replaced`` (by another type)."""
        now = _state_of(self.folder)
        out = []
        for rel in sorted(set(now) | set(self.state)):
            a, b = self.state.get(rel), now.get(rel)
            if self._same(a, b):
                continue
            what = "added" if a is None else "removed" if b is None else "replaced" if a[0] != b[0] else "changed"
            out.append((rel, what))
        return out

    def restore(self, changes: list[tuple[str, str]]) -> list[str]:
        """Put back what ``changes`` lists: original bytes for a changed, removed or replaced file, removal of
        an added path. Returns sentences for what could not be put back (empty when all was)."""
        failed = []
        for rel, what in sorted(changes, key=lambda c: -c[0].count("/")):   # deepest first
            path, orig = self.folder / rel, self.state.get(rel)
            try:
                if what in ("added", "replaced"):
                    _remove(path)
                if orig is None:
                    continue
                if orig[0] == "file" and rel in self.data:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    if path.is_symlink():
                        path.unlink()
                    with contextlib.suppress(FileNotFoundError):
                        path.chmod(0o600)
                    path.write_bytes(self.data[rel])
                    path.chmod(orig[2])
                elif orig[0] == "dir":
                    path.mkdir(parents=True, exist_ok=True)
                elif orig[0] == "link" and not path.is_symlink():
                    path.symlink_to(orig[1])
                else:
                    failed.append(f"{rel} ({what}) could not be put back: the grader kept no copy of it")
            except OSError as exc:
                failed.append(f"{rel} ({what}) could not be put back: {exc.strerror or exc}")
        return failed


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    else:
        for sub in [path, *(p for p in path.rglob("*") if p.is_dir() and not p.is_symlink())]:
            with contextlib.suppress(OSError):
                sub.chmod(0o700)
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def read_only(state: FolderState):
    """Within the block, every regular file and folder of ``state`` (links not followed) has its write bits
    cleared; the modes ``state`` recorded are put back afterwards, whatever happened inside."""
    modes = [(state.folder / rel, st[-1]) for rel, st in sorted(state.state.items()) if st[0] in ("file", "dir")]
    modes.append((state.folder, stat.S_IMODE(state.folder.stat().st_mode)))
    for path, mode in modes:  # the folder itself last, after its entries
        with contextlib.suppress(OSError):
            if not path.is_symlink():
                path.chmod(mode & ~0o222)
    try:
        yield
    finally:
        for path, mode in modes[::-1]:
            with contextlib.suppress(OSError):
                if not path.is_symlink():
                    path.chmod(mode)
