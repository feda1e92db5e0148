"""tools/install.sh on a Python whose ``-m venv`` makes an environment without pip (Debian or
Ubuntu without python3-venv): it must refuse clearly, name the OS package, and leave no
broken .venv behind for the next run to reuse."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

_FAKE = f"""#!/usr/bin/env bash
if [ "${{1:-}}" = "-m" ] && [ "${{2:-}}" = "venv" ]; then exec {sys.executable} -m venv --without-pip "$3"; fi
exec {sys.executable} "$@"
"""


@pytest.fixture
def python_without_ensurepip(tmp_path):
    fake = tmp_path / "python3"
    fake.write_text(_FAKE)
    fake.chmod(0o755)
    return fake


def _install(python, venv):
    return subprocess.run(["bash", str(ROOT / "tools" / "install.sh"), str(python), str(venv)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_new_venv_without_pip_is_removed_and_package_named(python_without_ensurepip, tmp_path):
    venv = tmp_path / "venv"
    r = _install(python_without_ensurepip, venv)
    assert r.returncode == 1
    assert "python3-venv" in r.stderr and f"python3.{sys.version_info[1]}-venv" in r.stderr
    assert "without pip" in r.stderr
    assert not venv.exists()


def test_old_venv_without_pip_is_not_reused(python_without_ensurepip, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    assert os.access(venv / "bin" / "python", os.X_OK)
    r = _install(python_without_ensurepip, venv)
    assert "has no working pip" in r.stdout
    assert r.returncode == 1 and "python3-venv" in r.stderr
    assert not venv.exists()
