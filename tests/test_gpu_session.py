"""tools/gpu_session.sh, the script a lent GPU machine runs: its labs step reports each lab script's own
exit status (a command substitution on the echo line once reset ``$?``, so lab 06's exit 1 read as 0)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_labs_step_reports_each_scripts_exit_status(tmp_path):
    scripts = tmp_path / "build" / "labscripts"
    scripts.mkdir(parents=True)
    (tmp_path / "labs").mkdir()
    (scripts / "01_fine.py").write_text("print('fine')\n")
    (scripts / "02_broken.py").write_text("raise SystemExit(3)\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(ROOT), "INFRALENS_MODE": "interpreter",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = subprocess.run(["bash", str(ROOT / "tools" / "gpu_session.sh"), "labs"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    lines = dict(re.findall(r"^lab (\S+): exit (\d+) in", r.stdout, re.M))
    assert lines == {"01_fine.py": "0", "02_broken.py": "3"}, r.stdout + r.stderr
    assert (out / "lab-01_fine.log").read_text() == "fine\n"
