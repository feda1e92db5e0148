"""Authoring tool: ``python -m infralens_lab.quiz encode|decode|answers|manifest``.

* ``encode SRC [-o OUT]``: SRC is a ``.json`` file or a ``.py`` file defining ``BANK`` (a plain
  bank dict, answers in clear); writes the sealed bank (default ``quiz/banks/<lab>.json``).
* ``decode LAB|PATH``: prints a bank in plain form (JSON), e.g. to edit and encode again.
* ``answers [LAB ...]``: the instructor's key, one line per question.
* ``manifest [--check]``: rewrite (or check) ``quiz/manifest.json``, the checksums of the grader's own
  files that ``make grade`` verifies before grading (after a deliberate change to ``quiz/``, run it).

Keep plain sources out of the repository: the sealed bank is the committed copy, and
``decode`` recovers the plain form whenever you need to edit it.
"""
from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path

from .bank import BANKS_DIR, BankError, banks_dirs, decode_bank, encode_bank, labs, load_bank
from .manifest import ManifestError, verify, write


def _read_plain(src: Path) -> dict:
    if src.suffix == ".py":
        ns = runpy.run_path(str(src))
        if "BANK" not in ns:
            raise BankError(f"{src}: defines no BANK dict")
        return ns["BANK"]
    if src.suffix == ".json":
        return json.loads(src.read_text())
    raise BankError(f"{src}: expected a .py (defining BANK) or .json file")


def _bank_doc(ref: str) -> dict:
    """The sealed bank document for a lab name (``lab00``) or a path to a bank file."""
    p = Path(ref)
    if not p.is_file():
        found = [d / f"{ref}.json" for d in banks_dirs() if (d / f"{ref}.json").is_file()]
        if not found:
            raise BankError(f"no question bank {ref!r}: it is neither a file nor a lab with a bank; "
                            f"expected a path to a bank .json or one of the labs {labs()}")
        p = found[0]
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise BankError(f"{p}: not valid JSON ({exc}); expected a bank written by "
                        "`python -m infralens_lab.quiz encode`") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infralens_lab.quiz", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("encode", help="plain bank (.py with BANK, or .json) -> sealed bank JSON")
    e.add_argument("src", type=Path)
    e.add_argument("-o", "--out", type=Path, default=None, help="default: quiz/banks/<lab>.json")
    d = sub.add_parser("decode", help="print a sealed bank in plain form")
    d.add_argument("bank", help="lab name (lab00) or path to a bank file")
    a = sub.add_parser("answers", help="print the answer key")
    a.add_argument("labs", nargs="*")
    m = sub.add_parser("manifest", help="rewrite quiz/manifest.json (checksums make grade verifies)")
    m.add_argument("--check", action="store_true", help="only check; exit 1 naming what differs")
    args = ap.parse_args(argv)
    if args.cmd == "manifest":
        if args.check:
            try:
                verify()
            except ManifestError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            print("quiz/manifest.json matches the grader's files")
        else:
            print(f"wrote {write()}")
        return 0
    try:
        if args.cmd == "encode":
            doc = encode_bank(_read_plain(args.src))
            out = args.out or BANKS_DIR / f"{doc['lab']}.json"
            out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
            print(f"wrote {out}: {len(doc['questions'])} questions for {doc['lab']}")
        elif args.cmd == "decode":
            print(json.dumps(decode_bank(_bank_doc(args.bank), args.bank), indent=1, ensure_ascii=False))
        else:
            for lab in args.labs or labs():
                for q in load_bank(lab).values():
                    key = (f"function: {q.reference} on the cases of {q.cases}" if q.kind == "function" else
                           f"derived: {q.derive}({q.derive_args})" if q.derive else q.answer)
                    tol = f" ± {q.tolerance}" if q.tolerance else ""
                    print(f"{q.id}\t{q.kind}\t{q.points:g} pt\t{key}{tol}")
    except BankError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a source that cannot be read, an output folder that cannot be written
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}; expected a readable source and a "
              "writable output path (-o)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
