"""Evidence records: values plus provenance, live or recorded.

Every number a lab shows is an :class:`Evidence`: the values, and a :class:`Provenance`
saying which GPU, driver, CUDA, torch, Triton and ncu produced them, when (UTC), with which
command and package version, and whether they were measured just now (``live``) or read
from ``data/recorded/<gpu-slug>/`` (``recorded``).

Recorded sets are written only by the package's recorder (:class:`EvidenceWriter`, used by
``python -m infralens_lab record``). A set is a folder of JSON and CSV files plus
``manifest.json`` listing every file with its SHA-256. Loading checks the manifest, the
checksum and the schema, and raises :class:`EvidenceError` naming the file and what was
wrong. Only JSON and CSV are read: no pickle, no eval.

A large JSON record (a set of traces) is stored gzip-compressed, as ``<name>.json.gz``: the recorder writes it
so, and ``python -m infralens_lab.evidence compress <set>`` compresses a set recorded before. The manifest still
lists ``<name>.json``, with the SHA-256 and size of the decompressed bytes (the content the recorder wrote), and
that checksum is held to the decompressed bytes at every load: compressing changes how a file is stored, never
what it holds, so the provenance holds (docs/instructors.md, 'Provenance').
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import hashlib
import json
import math
import os
import pickle
import re
import sys
import sysconfig
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from . import device
from .errors import InfraLensError

EVIDENCE_SCHEMA = "infralens.evidence/1"
MANIFEST_SCHEMA = "infralens.manifest/1"
SOURCES = ("live", "recorded")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_ALLOWED_SUFFIXES = (".json", ".csv")

DATA_ROOT_ENV = "INFRALENS_DATA"
REFERENCE_ENV = "INFRALENS_REFERENCE_GPU"


class EvidenceError(InfraLensError, ValueError):
    """A recorded evidence file is missing, unknown, corrupt or of the wrong schema."""


INSTALLED_DATA = ("share", "infralens_lab", "recorded")  # where a wheel puts data/recorded, under the prefix


def data_root() -> Path:
    """Folder holding one sub-folder of recorded evidence per GPU: ``$INFRALENS_DATA`` if set; else
    ``data/recorded`` of the checkout this package sits in (an editable install); else, for a wheel,
    ``<prefix>/share/infralens_lab/recorded`` (pyproject's data-files), the prefix the package was installed
    under first (a venv, ``--prefix``, ``--user``, Debian's /usr/local), then Python's. The checkout's path when
    none exists."""
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[1] / "data" / "recorded"
    if checkout.is_dir():
        return checkout
    up = Path(__file__).resolve().parents  # <prefix> of <prefix>/lib/pythonX.Y/site-packages/infralens_lab: up[4]
    for prefix in (*up[4:5], sysconfig.get_paths()["data"], sys.prefix, sys.base_prefix):
        installed = Path(prefix).joinpath(*INSTALLED_DATA)
        if installed.is_dir():
            return installed
    return checkout


@dataclass(frozen=True)
class Provenance:
    """Where a set of values came from. ``date_utc`` is ISO 8601 (``2026-11-22T10:15:00Z``)."""

    source: str
    gpu: str
    gpu_slug: str
    driver: str | None
    cuda: str | None
    torch: str
    triton: str
    ncu: str | None
    date_utc: str
    command: str
    package_version: str
    mode: str

    def __post_init__(self):
        if self.source not in SOURCES:
            raise EvidenceError(f"provenance source {self.source!r} is not one of {SOURCES}")

    def caption(self) -> str:
        """One line for under a table or figure."""
        parts = [self.source, self.gpu]
        if self.driver:
            parts.append(f"driver {self.driver}")
        if self.cuda:
            parts.append(f"CUDA {self.cuda}")
        parts.append(f"torch {self.torch}")
        parts.append(f"triton {self.triton}")
        if self.ncu:
            parts.append(f"ncu {self.ncu}")
        parts.append(self.date_utc[:10] + " UTC")
        parts.append(f"`{self.command}`")
        parts.append(f"infralens_lab {self.package_version}")
        return "Evidence: " + " · ".join(parts)

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Provenance:
        if not isinstance(d, dict):
            raise EvidenceError(f"{where}: provenance is {type(d).__name__}, expected an object")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in d]
        if missing:
            raise EvidenceError(f"{where}: provenance lacks {missing}; expected the fields {names}")
        extra = sorted(set(d) - set(names))
        if extra:
            raise EvidenceError(f"{where}: provenance has unknown fields {extra}")
        for n in ("source", "gpu", "gpu_slug", "torch", "triton", "date_utc", "command", "package_version", "mode"):
            if not isinstance(d[n], str):
                raise EvidenceError(f"{where}: provenance.{n} is {d[n]!r}, expected a string")
        return cls(**{n: d[n] for n in names})


def current_provenance(command: str, source: str = "live") -> Provenance:
    """Provenance for values measured now on this machine."""
    from . import __version__  # lazy: the package's __init__ is still importing when this module loads

    f = device.facts()
    return Provenance(
        source=source,
        gpu=f.name,
        gpu_slug=f.slug,
        driver=f.driver,
        cuda=f.cuda,
        torch=f.torch,
        triton=f.triton,
        ncu=device.tool_version("ncu") if f.mode == "gpu" else None,
        date_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        command=command,
        package_version=__version__,
        mode=f.mode,
    )


@dataclass
class Evidence:
    """Values with their provenance. ``values`` is JSON-shaped; ``rows`` tables become DataFrames."""

    name: str
    values: Any
    provenance: Provenance
    units: dict[str, str] = field(default_factory=dict)
    notes: str = ""

    @property
    def source(self) -> str:
        return self.provenance.source

    def caption(self) -> str:
        return self.provenance.caption()

    def frame(self, key: str | None = None):
        """The values as a pandas DataFrame: a list of row objects, or ``values[key]`` if given."""
        v = self.values if key is None else self.values[key]
        if isinstance(v, dict) and "rows" in v:
            v = v["rows"]
        if not isinstance(v, list):
            raise TypeError(f"evidence {self.name!r}{'' if key is None else '[' + key + ']'} is "
                            f"{type(v).__name__}, expected a list of rows")
        import pandas as pd  # lazy: evidence is stdlib-only at import, so the doctor and a bare wheel load it

        return pd.DataFrame(v)

    def to_json(self) -> dict:
        return {
            "schema": EVIDENCE_SCHEMA,
            "name": self.name,
            "provenance": asdict(self.provenance),
            "units": self.units,
            "notes": self.notes,
            "values": self.values,
        }


def caption(obj: Evidence | Provenance) -> str:
    """The one-line provenance caption for an Evidence or Provenance."""
    return obj.caption()


# ---------------------------------------------------------------- JSON helpers
def _jsonable(v: Any) -> Any:
    """Convert numpy/pandas scalars and NaN to plain JSON values (NaN and inf become None)."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        with contextlib.suppress(ValueError, TypeError):
            v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    raise TypeError(f"cannot store a {type(v).__name__} as evidence; expected JSON-shaped values")


def _hashed_content(path: Path) -> tuple[bytes, str]:
    """(content, its SHA-256): the bytes ``path`` holds, decompressed for a ``.gz`` file (:func:`_content`)."""
    data = _content(path)
    return data, hashlib.sha256(data).hexdigest()


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise EvidenceError(f"evidence name {name!r} is not allowed; expected lower-case letters, digits, '_', '-', '.'")


# ---------------------------------------------------------------- writing
COMPACT_ABOVE = 1_000_000  # bytes of compact JSON above which a record is written without indentation
COMPRESS_ABOVE = 1_000_000  # bytes of a JSON record above which it is stored gzip-compressed (<name>.json.gz)
GZIP_SUFFIX = ".gz"
STORED_GZIP = "gzip"  # a manifest entry's "stored": the file sits on disk as <file>.gz
STORAGE_NOTE = ("Entries with \"stored\": \"gzip\" sit on disk as <file>.gz (gzip, mtime 0); their sha256 and bytes "
                "are of the decompressed content, which is what the recorder wrote and what every load checks.")


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed the one way the store writes it (level 9, mtime 0: the same bytes every time)."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def _content(path: Path) -> bytes:
    """The bytes a stored file holds: decompressed for a ``.gz`` file. Raises EvidenceError for a ``.gz`` file
    that does not decompress."""
    raw = path.read_bytes()
    if not path.name.endswith(GZIP_SUFFIX):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise EvidenceError(f"{path}: a gzip file that does not decompress ({exc}); expected the gzip stream the "
                            f"store wrote. {_restore_fix(path)}") from None


class EvidenceWriter:
    """Writes one recorded set: JSON/CSV files, then ``manifest.json`` with checksums.

    Used by the recorder on a GPU. ``command`` is the command line that produced the set.
    """

    def __init__(self, out_dir: str | Path, command: str, provenance: Provenance | None = None):
        self.out = Path(out_dir)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            probe = self.out / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise EvidenceError(f"cannot write the recorded set to {self.out}: {exc.strerror or exc} "
                                f"(expected a folder this user can create and write). Fix: choose another "
                                f"--out, e.g. a folder under your home, or fix the folder's permissions") from None
        self.provenance = provenance or current_provenance(command, source="recorded")
        if self.provenance.source != "recorded":
            self.provenance = replace(self.provenance, source="recorded")
        self.files: dict[str, dict] = {}

    def write(self, name: str, values: Any, units: dict[str, str] | None = None, notes: str = "") -> Path:
        """Write ``<name>.json`` holding values plus provenance: indented, or compact when it is larger than
        :data:`COMPACT_ABOVE` bytes, and then stored gzip-compressed as ``<name>.json.gz`` when larger than
        :data:`COMPRESS_ABOVE` (a set of traces must fit a checkout and the GPU machine's 64 MiB tree). The
        manifest lists ``<name>.json`` either way, with the checksum of the uncompressed JSON. Returns the path
        written."""
        _check_name(name)
        ev = Evidence(name, _jsonable(values), self.provenance, dict(units or {}), notes)
        path = self.out / f"{name}.json"
        body = json.dumps(ev.to_json(), separators=(",", ":"), allow_nan=False)
        if len(body) <= COMPACT_ABOVE:  # small records stay readable in a diff; traces are written compact
            body = json.dumps(ev.to_json(), indent=1, allow_nan=False)
        data = (body + "\n").encode()
        entry = {"kind": "json", "name": name}
        gz = path.with_name(path.name + GZIP_SUFFIX)
        if len(data) > COMPRESS_ABOVE:
            path.unlink(missing_ok=True)  # a set recorded again into its folder keeps one form of each file
            gz.write_bytes(gzip_bytes(data))
            entry["stored"], path = STORED_GZIP, gz
        else:
            gz.unlink(missing_ok=True)
            path.write_bytes(data)
        self.files[f"{name}.json"] = entry
        return path

    def write_text(self, filename: str, text: str, kind: str = "csv") -> Path:
        """Write a raw text artefact (e.g. an ncu CSV) that the manifest vouches for."""
        if not filename.endswith(_ALLOWED_SUFFIXES):
            raise EvidenceError(f"recorded file {filename!r} must end in one of {_ALLOWED_SUFFIXES}")
        _check_name(filename.rsplit(".", 1)[0])
        path = self.out / filename
        path.write_text(text)
        self.files[filename] = {"kind": kind, "name": filename.rsplit(".", 1)[0]}
        return path

    def close(self) -> Path:
        """Write ``manifest.json`` over everything written so far and return its path."""
        entries = {}
        for fname, meta in sorted(self.files.items()):
            p = self.out / (fname + GZIP_SUFFIX if meta.get("stored") == STORED_GZIP else fname)
            data, digest = _hashed_content(p)
            entries[fname] = {**meta, "sha256": digest, "bytes": len(data)}
            if meta.get("stored") == STORED_GZIP:
                entries[fname]["stored_bytes"] = p.stat().st_size
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "gpu": self.provenance.gpu,
            "gpu_slug": self.provenance.gpu_slug,
            "provenance": asdict(self.provenance),
            "files": entries,
        }
        if any(e.get("stored") == STORED_GZIP for e in entries.values()):
            manifest["storage"] = STORAGE_NOTE
        path = self.out / "manifest.json"
        path.write_text(json.dumps(manifest, indent=1) + "\n")
        return path


# ---------------------------------------------------------------- reading
def _restore_fix(path: Path) -> str:
    """How to get a recorded file back: from git in a checkout, else by recording the set again."""
    folder = path.parent
    return (f"Fix: restore it (in a git checkout: `git checkout -- {path}`), or record the set again on its GPU "
            f"with `python -m infralens_lab record --out {folder}`. Recorded files are written only by the "
            "recorder; editing one and its checksum by hand is caught by review, not by this check "
            "(docs/instructors.md, 'Provenance').")


def _json_object(path: Path, schema: str, data: bytes | None = None) -> dict:
    """The JSON object in ``path`` (or in ``data``, its content already read), whose ``"schema"`` must be
    ``schema`` (a manifest or an evidence record)."""
    try:
        doc = json.loads(data if data is not None else _content(path))
    except json.JSONDecodeError as exc:
        raise EvidenceError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        seen = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise EvidenceError(f"{path}: schema is {seen!r}, expected {schema!r}")
    return doc


# Recorded files verified once per process (issue 41): key -> [sha256, the record's JSON object pickled (None
# until loaded)]. The key is the file's path, device, inode, size, mtime and ctime: a file that changes in any
# of them is read and hashed again, and its checksum is held to the manifest at every load. A file changed less
# than _SETTLED_NS before it is read is not cached at all (as git's "racy" index entries: a second write of the
# same size within one timestamp tick would keep the key). Loads hand out a fresh copy (pickle), so a caller
# that changes the values it got changes nobody else's.
_VERIFIED: dict[tuple, list] = {}
_SETTLED_NS = 2_000_000_000


def _settled_key(path: Path) -> tuple | None:
    st = path.stat()
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < _SETTLED_NS:
        return None
    return (str(path.absolute()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class RecordedStore:
    """A validated recorded set in ``data/recorded/<gpu-slug>/``."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        mpath = self.folder / "manifest.json"
        if not mpath.is_file():
            files = sorted(q.name for q in self.folder.iterdir() if q.is_file()) if self.folder.is_dir() else []
            seen = f"the folder holds {len(files)} file(s) but no manifest.json" if files else \
                ("the folder is empty" if self.folder.is_dir() else "there is no such folder")
            raise EvidenceError(f"{self.folder}: not a recorded set ({seen}); expected a folder written by the "
                                f"recorder, with a manifest.json listing each file's checksum. {_restore_fix(mpath)}")
        manifest = _json_object(mpath, MANIFEST_SCHEMA)
        if not isinstance(manifest.get("files"), dict):
            raise EvidenceError(f"{mpath}: 'files' is missing or not an object")
        self.manifest = manifest
        self.provenance = Provenance.from_dict(manifest.get("provenance"), str(mpath))
        self.gpu = self.provenance.gpu

    def names(self) -> list[str]:
        """Names of the JSON evidence records in this set."""
        return sorted(m["name"] for m in self.manifest["files"].values() if m.get("kind") == "json")

    def files(self) -> list[str]:
        return sorted(self.manifest["files"])

    def _checked_path(self, filename: str) -> Path:
        return self._checked(filename)[0]

    def stored_path(self, filename: str) -> Path:
        """Where listed file ``filename`` sits on disk: ``<filename>`` or, stored compressed, ``<filename>.gz``
        (not checked; :meth:`path` checks it). Raises EvidenceError when neither is there, or both are."""
        path = self.folder / filename
        gz = path.with_name(filename + GZIP_SUFFIX)
        if path.is_file() and gz.is_file():
            raise EvidenceError(f"{self.folder}: both {filename} and {gz.name} are there; expected one stored form "
                                f"of each listed file (remove the one not in git)")
        if gz.is_file():
            return gz
        if not path.is_file():
            raise EvidenceError(f"{path}: listed in manifest.json but missing on disk (neither {filename} nor "
                                f"{gz.name} is there)")
        return path

    def _checked(self, filename: str) -> tuple[Path, tuple | None, bytes | None]:
        """(path on disk, cache key or None, content when it was read here else None) of a listed file whose
        checksum, over its content (decompressed for a ``.gz`` file), matches the manifest (hashed once per
        process while the file is unchanged: see _VERIFIED)."""
        entry = self.manifest["files"].get(filename)
        if entry is None:
            raise EvidenceError(f"{self.folder}: {filename!r} is not listed in manifest.json; "
                                f"known files: {self.files()}")
        path = self.stored_path(filename)
        key = _settled_key(path)
        known = _VERIFIED.get(key) if key is not None else None
        data = None
        if known is not None:
            digest = known[0]
        else:
            data, digest = _hashed_content(path)
        if key is not None and known is None:
            _VERIFIED[key] = [digest, None]
        if digest != entry.get("sha256"):
            what = "its decompressed content" if path.name.endswith(GZIP_SUFFIX) else "this file"
            raise EvidenceError(f"{path}: checksum {digest[:12]}… of {what} does not match the manifest's "
                                f"{str(entry.get('sha256'))[:12]}… for {filename}: it changed after recording. "
                                f"{_restore_fix(path)}")
        return path, key, data

    def verify(self) -> None:
        """Check every listed file's checksum and that no unlisted file sits in the folder."""
        for fname in self.files():
            self._checked_path(fname)
        listed = set(self.manifest["files"])
        unknown = sorted(p.name for p in self.folder.iterdir()
                         if p.is_file() and p.name != "manifest.json" and p.name not in listed
                         and p.name.removesuffix(GZIP_SUFFIX) not in listed)
        if unknown:
            raise EvidenceError(f"{self.folder}: files not in manifest.json: {unknown}")

    def load(self, name: str) -> Evidence:
        """Load and validate the JSON record ``name``."""
        _check_name(name)
        path, key, data = self._checked(f"{name}.json")
        known = _VERIFIED.get(key) if key is not None else None
        if known is not None and known[1] is not None:
            doc = pickle.loads(known[1])  # parsed and schema-checked before: a fresh copy
        else:
            doc = _json_object(path, EVIDENCE_SCHEMA, data)
            if known is not None:
                known[1] = pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL)
        for key, typ in (("name", str), ("units", dict), ("notes", str)):
            if not isinstance(doc.get(key), typ):
                raise EvidenceError(f"{path}: {key!r} is {doc.get(key)!r}, expected {typ.__name__}")
        if "values" not in doc:
            raise EvidenceError(f"{path}: no 'values'")
        if doc["name"] != name:
            raise EvidenceError(f"{path}: holds evidence {doc['name']!r}, expected {name!r}")
        prov = Provenance.from_dict(doc.get("provenance"), str(path))
        if prov.source != "recorded":
            raise EvidenceError(f"{path}: provenance source is {prov.source!r}, expected 'recorded'")
        return Evidence(name, doc["values"], prov, doc["units"], doc["notes"])

    def text(self, filename: str) -> str:
        """A raw text artefact (e.g. ``ncu_copies.csv``) after its checksum is verified (decompressed when it is
        stored as ``<filename>.gz``)."""
        path, _, data = self._checked(filename)
        text = (data if data is not None else _content(path)).decode()
        return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as Path.read_text reads

    def path(self, filename: str) -> Path:
        """Path on disk of a listed file after its checksum is verified (for parsers that read paths): ``<filename>``,
        or ``<filename>.gz`` when it is stored compressed, which such a parser must read as gzip
        (:func:`infralens_lab.parse.trace.read_trace_file` does)."""
        return self._checked_path(filename)


def recordings(root: str | Path | None = None) -> list[str]:
    """GPU slugs with a recorded set under ``root`` (default :func:`data_root`)."""
    root = Path(root) if root is not None else data_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "manifest.json").is_file())


DEFAULT_FILE = "DEFAULT"  # data/recorded/DEFAULT: the committed choice of reference set (one slug)


def default_reference(root: str | Path | None = None) -> tuple[str | None, str]:
    """The reference set the labs use and why: ``(slug, reason)``.

    Order: ``$INFRALENS_REFERENCE_GPU``; else, in gpu mode, this GPU's own recorded set when there is one
    (one statement, one GPU: a live table is never set beside another GPU's recording as "the" reference);
    else the slug committed in ``data/recorded/DEFAULT``; else the only recorded set when there is exactly one.
    Adding a set therefore changes nothing until it is chosen or its GPU runs the labs. ``slug`` is None when none
    can be chosen (the reason says why).
    """
    root = Path(root) if root is not None else data_root()
    have = recordings(root)
    raw = os.environ.get(REFERENCE_ENV)
    env = (raw or "").strip()
    if env:
        return env, f"${REFERENCE_ENV}={env}"
    ignored = ""
    if raw is not None:  # set but blank: say so rather than fall back in silence
        ignored = f"; ${REFERENCE_ENV} is set but empty ({raw!r}), so it was ignored: set a slug or unset it"
        warnings.warn(f"{REFERENCE_ENV}={raw!r} is empty; expected a recorded set's slug, one of {have}. "
                      "Using the committed default instead.", stacklevel=2)
    if device.is_gpu() and (own := device.slug(device.facts().name)) in have:
        return own, f"this GPU's own recorded set ({own}){ignored}"
    default = root / DEFAULT_FILE
    if default.is_file():
        slug = default.read_text().strip()
        return slug, f"committed default ({root.name}/{DEFAULT_FILE}){ignored}"  # data/recorded, or a wheel's share/../recorded
    if len(have) == 1:
        return have[0], "the only recorded set"
    if not have:
        return None, f"no recorded evidence under {root}"
    return None, (f"{len(have)} recorded sets ({', '.join(have)}) and no {default} naming the default; "
                  f"write one slug into it or set {REFERENCE_ENV}")


def reference(gpu: str | None = None, root: str | Path | None = None) -> RecordedStore:
    """The recorded reference set: ``gpu`` (a slug), else :func:`default_reference`."""
    root = Path(root) if root is not None else data_root()
    have = recordings(root)
    want, why = (gpu, "asked for") if gpu else default_reference(root)
    if want:
        if want not in have:
            raise EvidenceError(f"no recorded set for GPU {want!r} under {root} ({why}); recorded sets: {have}")
        return RecordedStore(root / want)
    if not have:
        raise EvidenceError(f"no recorded evidence under {root}; record some on a GPU with "
                            f"`python -m infralens_lab record --out {root}/<gpu-slug>`")
    raise EvidenceError(f"cannot choose a reference set: {why}")


def own_set(gpu: str | None = None, root: str | Path | None = None) -> RecordedStore | None:
    """The recorded set of one GPU, the rule "which recorded set goes with this GPU" (one statement, one GPU): the
    one-GPU set whose folder is :func:`infralens_lab.device.slug` of ``gpu`` and whose manifest names that slug
    too; None when that GPU has no set here. ``gpu`` is a GPU name (``'NVIDIA H200'``); by default the GPU this
    process runs on in gpu mode (``device.facts().name``), and None in interpreter mode, where there is no live
    GPU to match. A live number is held only against this set's values (or ones measured now), never against the
    reference set of another GPU."""
    if gpu is None:
        if not device.is_gpu():
            return None
        gpu = device.facts().name
    want = device.slug(gpu)
    root = Path(root) if root is not None else data_root()
    if want not in recordings(root):
        return None
    st = RecordedStore(root / want)
    return st if st.provenance.gpu_slug == want else None


def reference_holding(*files: str) -> RecordedStore | None:
    """The reference set when there is one and it lists every one of ``files``; else None (nothing recorded
    here, or a set recorded before those files were): what the grader's evidence providers ask first."""
    try:
        st = reference()
    except EvidenceError:
        return None
    return st if all(f in st.files() for f in files) else None


def load(name: str, gpu: str | None = None) -> Evidence:
    """The recorded reference record ``name``."""
    return reference(gpu).load(name)


def get(name: str, live: Callable[[], Any] | None = None, command: str | None = None,
        units: dict[str, str] | None = None) -> Evidence:
    """Live evidence on a GPU, else the recorded reference.

    ``live`` is a zero-argument callable returning JSON-shaped values; it runs only in gpu
    mode. ``command`` describes it for the provenance (default: ``infralens_lab.<name>``).
    """
    if live is not None and device.is_gpu():
        values = _jsonable(live())
        rec_units = units or {}
        return Evidence(name, values, current_provenance(command or f"infralens_lab live: {name}"), rec_units)
    return load(name)


def live(name: str, values: Any, command: str, units: dict[str, str] | None = None, notes: str = "") -> Evidence:
    """Wrap values measured just now (any mode) as live evidence."""
    return Evidence(name, _jsonable(values), current_provenance(command), dict(units or {}), notes)


def load_all_sets(root: str | Path | None = None) -> list[RecordedStore]:
    """Every recorded set under ``root`` (default :func:`data_root`), the default reference first."""
    root = Path(root) if root is not None else data_root()
    first = default_reference(root)[0]
    return [RecordedStore(root / slug) for slug in sorted(recordings(root), key=lambda s: s != first)]


def load_all(name: str, root: str | Path | None = None) -> dict[str, Evidence]:
    """Record ``name`` from every recorded set that has it, keyed by GPU name, the default set first.

    For side-by-side views (:mod:`infralens_lab.analysis.compare`); sets without the record are left out. Where
    two sets of one GPU both have it (a one-GPU set and a ``2x-`` set of the same card), the first in
    :func:`load_all_sets` order wins: the default reference, else the slug that sorts first.
    """
    out: dict[str, Evidence] = {}
    for store in load_all_sets(root):
        if name in store.names():
            ev = store.load(name)
            out.setdefault(ev.provenance.gpu, ev)
    return out



# ---------------------------------------------------------------- storing a set compressed
COMPRESSED_AFTER = " Compressed after recording by `python -m infralens_lab.evidence compress`."


def compress_set(folder: str | Path, above: int = COMPRESS_ABOVE) -> list[tuple[str, int, int]]:
    """Store every JSON record of the recorded set ``folder`` larger than ``above`` bytes gzip-compressed, as the
    recorder now writes them: ``<name>.json`` becomes ``<name>.json.gz``. The set is verified first (only what
    the manifest vouches for is compressed), each compressed file is read back and compared with the original
    before that is removed, and the manifest keeps each entry's sha256 and bytes (of the content) and gains
    ``"stored": "gzip"``, ``stored_bytes`` and a ``storage`` note saying so. Returns ``(file, bytes, stored
    bytes)`` per file compressed; a set with nothing left to compress is left as it is."""
    store = RecordedStore(folder)
    store.verify()
    manifest = store.manifest
    done = []
    for fname, entry in sorted(manifest["files"].items()):
        path = store.stored_path(fname)
        if entry.get("kind") != "json" or path.name.endswith(GZIP_SUFFIX):
            continue
        data = path.read_bytes()
        if len(data) <= above:
            continue
        gz = path.with_name(fname + GZIP_SUFFIX)
        gz.write_bytes(gzip_bytes(data))
        if _content(gz) != data:
            gz.unlink()
            raise EvidenceError(f"{gz}: reads back different from {fname}; expected the same bytes. Nothing removed")
        path.unlink()
        entry["stored"], entry["stored_bytes"] = STORED_GZIP, gz.stat().st_size
        done.append((fname, len(data), entry["stored_bytes"]))
    if done:
        manifest["storage"] = STORAGE_NOTE + COMPRESSED_AFTER
        (store.folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        RecordedStore(folder).verify()
    return done


def main(argv: list[str] | None = None) -> int:
    """``python -m infralens_lab.evidence compress SET [SET ...] [--above BYTES]``: store each recorded set's large
    JSON records gzip-compressed (:func:`compress_set`); ``verify SET ...`` checks every file's checksum."""
    import argparse  # lazy: only the command line needs it

    ap = argparse.ArgumentParser(prog="python -m infralens_lab.evidence",
                                 description="recorded sets: store large records compressed, or verify them")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compress", help="store JSON records over --above bytes as <name>.json.gz")
    c.add_argument("sets", nargs="+", help="recorded set folders, e.g. data/recorded/2x-nvidia-h200")
    c.add_argument("--above", type=int, default=COMPRESS_ABOVE, help=f"bytes (default {COMPRESS_ABOVE})")
    v = sub.add_parser("verify", help="check every listed file against the manifest")
    v.add_argument("sets", nargs="+")
    args = ap.parse_args(argv)
    try:
        for folder in args.sets:
            if args.cmd == "verify":
                RecordedStore(folder).verify()
                print(f"{folder}: every file matches manifest.json")
                continue
            done = compress_set(folder, args.above)
            for fname, before, after in done:
                print(f"{folder}/{fname}: {before / 1e6:.1f} MB -> {fname}.gz {after / 1e6:.1f} MB")
            if not done:
                print(f"{folder}: no JSON record over {args.above} bytes left uncompressed")
    except EvidenceError as exc:
        print(f"evidence: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
