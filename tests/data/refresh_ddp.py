"""Rewrite tests/data/ddp_gloo_run.json: two gloo ranks of this CPU running the package's DDP measurement on
``measure.distributed.FIXTURE_SPEC``, written (unedited) only when every invariant the recorder checks holds
(``analysis.ddp_run.run_violations``), as the recorder does for the NCCL set.

    PYTHONPATH=. python tests/data/refresh_ddp.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from infralens_lab.analysis.ddp_run import run_violations
from infralens_lab.measure import distributed

OUT = Path(__file__).resolve().parent / "ddp_gloo_run.json"

if __name__ == "__main__":  # the ranks are spawned: they must not re-run this file's top level
    ranks = distributed.run(distributed.FIXTURE_SPEC)
    broken = run_violations(ranks)
    if broken:
        sys.exit("not written, invariants broken (a busy machine? run it again):\n" + "\n".join(broken))
    OUT.write_text(json.dumps(ranks))
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e6:.1f} MB)")
