"""What the grader's process loads besides its own files: checked before grading and after every run.

A ``RUN=1`` notebook runs as your user, so it can plant code that the *next* grading run would load: a
``conftest.py`` on the way up from the submissions folder or in the grader's working folder, a ``.pth`` file
in the environment's site-packages (Python runs its ``import`` lines at start-up), or a pytest plugin (an
entry point in the ``pytest11`` group). ``make grade`` loads no conftest.py and no plugin but its own
(``PYTEST_DISABLE_PLUGIN_AUTOLOAD``, ``-p infralens_lab.quiz.pytest_plugin``, pytest pointed at the grader's
own folder), and :func:`problems` refuses to start while one is there, naming it and the fix:

* a ``conftest.py`` in the grader's working folder or above it, or above the submissions folder (one inside
  it is just listed as not a notebook);
* a ``.pth`` file in site-packages that no installed distribution owns with that content (its ``RECORD``
  lists each file with its SHA-256, as pip wrote it);
* a ``pytest11`` entry point outside :data:`KNOWN_PLUGINS` (add yours with ``$INFRALENS_GRADE_PLUGINS``).

:func:`state` is the same ground as hashes, compared after each executed notebook. What it does not stop: a
process of your user that rewrites a distribution's ``RECORD`` to match, or the Python installation itself;
only another user or a container isolates that (docs/instructors.md).
"""
from __future__ import annotations

import base64
import csv
import hashlib
import os
import site
from importlib import metadata
from pathlib import Path

PLUGINS_ENV = "INFRALENS_GRADE_PLUGINS"
# pytest plugins a `make install` environment holds (the package's own and its test dependencies')
KNOWN_PLUGINS = frozenset({"infralens_quiz", "nbval", "xdist", "xdist.looponfail", "anyio", "platformdirs"})


def site_dirs() -> list[Path]:
    """The folders whose ``.pth`` files Python runs at start-up: site-packages, and the user's when enabled."""
    dirs = [Path(d) for d in site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(Path(site.getusersitepackages()))
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def _record_hash(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def owned_files(dists=None, suffix: str = "") -> dict[Path, str]:
    """``{absolute path: 'sha256=...'}`` of every file an installed distribution's RECORD lists with a hash; with
    ``suffix`` (".pth"), only the files whose name ends so. A suffix reads each RECORD's text and parses only the lines
    that hold it: the same entries, without resolving the ~30,000 files of an environment (a second of the grader's
    start-up on a 2-core machine)."""
    out: dict[Path, str] = {}
    for dist in metadata.distributions() if dists is None else dists:
        if suffix:
            lines = [ln for ln in (dist.read_text("RECORD") or "").splitlines() if suffix in ln]
            entries = [(path, digest) for path, digest, *_ in csv.reader(lines) if path.endswith(suffix)]
        else:
            entries = [(f, f"{f.hash.mode}={f.hash.value}") for f in dist.files or [] if f.hash is not None]
        for path, digest in entries:
            if digest.startswith("sha256="):
                out[Path(os.path.normpath(dist.locate_file(path)))] = digest
    return out


def unexpected_pth(dirs: list[Path] | None = None, owned: dict[Path, str] | None = None) -> list[Path]:
    """``.pth`` files in ``dirs`` (default :func:`site_dirs`) that no distribution owns with this content."""
    owned = owned_files(suffix=".pth") if owned is None else owned
    out = []
    for d in site_dirs() if dirs is None else dirs:
        for p in sorted(Path(d).glob("*.pth")):
            try:
                ok = owned.get(Path(os.path.normpath(p))) == _record_hash(p)
            except OSError:
                ok = False
            if not ok:
                out.append(p)
    return out


def allowed_plugins() -> set[str]:
    extra = {n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()}
    return set(KNOWN_PLUGINS) | extra


def unexpected_plugins(eps=None) -> list[str]:
    """``'name = module (distribution)'`` for every ``pytest11`` entry point not in :func:`allowed_plugins`."""
    eps = metadata.entry_points(group="pytest11") if eps is None else eps
    allowed = allowed_plugins()
    return sorted(f"{ep.name} = {ep.value} ({getattr(ep.dist, 'name', '?')})" for ep in eps if ep.name not in allowed)


def conftests(submissions: Path | None, cwd: Path | None = None) -> list[Path]:
    """``conftest.py`` files in ``cwd`` and its parents, and in the parents of ``submissions``."""
    places: list[Path] = []
    if cwd is not None:
        places += [cwd, *cwd.parents]
    if submissions is not None:
        places += list(Path(submissions).resolve().parents)
    return [p / "conftest.py" for p in dict.fromkeys(places) if (p / "conftest.py").exists()]


def problems(submissions: Path | None, cwd: Path | None = None) -> list[str]:
    """One sentence per unexpected thing the grader's process could load (empty when none), with the fix."""
    out = [f"{c}: a conftest.py where pytest would look for one; nothing of the grader's is named so. If you did "
           "not put it there, a submission's code may have (RUN=1): delete it" for c in conftests(submissions, cwd)]
    out += [f"{p}: a .pth file in site-packages that no installed package owns (Python runs its import lines at "
            "start-up). If you did not put it there, a submission's code may have: delete it, or reinstall the "
            "package it belongs to" for p in unexpected_pth()]
    out += [f"pytest plugin {name}: not one the grader expects. If you did not install it, a submission's code may "
            f"have: uninstall it (pip uninstall); if you trust it, add its name to ${PLUGINS_ENV}"
            for name in unexpected_plugins()]
    return out


def state(submissions: Path | None, cwd: Path | None = None, keep: dict | None = None) -> dict[str, str]:
    """``{path: sha256}`` of the conftest.py files :func:`conftests` finds, the ``.pth`` files and every
    distribution's ``entry_points.txt`` in :func:`site_dirs`: taken before notebooks run, compared after each.
    With ``keep``, each file's bytes are stored there too (to put back with ``quiz.manifest.put_back``)."""
    paths = [*conftests(submissions, cwd)]
    for d in site_dirs():
        paths += [*d.glob("*.pth"), *d.glob("*.dist-info/entry_points.txt"), *d.glob("*.egg-info/entry_points.txt")]
    out = {}
    for p in paths:
        try:
            data = p.read_bytes()
            out[str(p)] = hashlib.sha256(data).hexdigest()
        except OSError:
            data, out[str(p)] = None, "unreadable"
        if keep is not None:
            keep[str(p)] = data
    return out


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Paths added, removed or changed between two :func:`state` maps, sorted."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
