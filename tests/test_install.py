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


# ---------------------------------------------------------------- learner install against test install
# A venv whose python is a stand-in: torch and triton import (unless FAKE_NO_TORCH is set), `-m pip --version`
# works, and `-m pip install ...` records its arguments and prints 300 lines of noise (failing with FAKE_PIP_RC).
_FAKE_VENV_PYTHON = f"""#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    [ "$3" = "--version" ] && {{ echo "pip 24.0"; exit 0; }}
    shift 2; echo "$*" >> "$FAKE_PIP_CALLS"
    for i in $(seq 300); do echo "Collecting noise-$i"; done
    echo "ERROR: fake pip says no" >&2
    exit "${{FAKE_PIP_RC:-0}}"
fi
if [ "$1" = "-c" ]; then
    case "$2" in
        "import torch, triton") [ -z "${{FAKE_NO_TORCH:-}}" ] ;;
        *print*) echo "2.13.0+cpu" ;;
    esac
    exit $?
fi
exec {sys.executable} "$@"
"""


def _fake_venv(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(_FAKE_VENV_PYTHON)
    py.chmod(0o755)
    return venv


def _install_mode(venv, mode, calls, **env):
    e = {**os.environ, "FAKE_PIP_CALLS": str(calls), "TORCH_CPU_INDEX": "http://127.0.0.1:9/", **env}
    return subprocess.run(["bash", str(ROOT / "tools" / "install.sh"), sys.executable, str(venv), mode],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=e)


def test_learner_install_leaves_out_the_test_extra_and_keeps_pip_quiet(tmp_path):
    venv, calls = _fake_venv(tmp_path), tmp_path / "calls"
    r = _install_mode(venv, "learner", calls, FAKE_NO_TORCH="1")
    assert r.returncode == 0, r.stderr
    installs = calls.read_text().splitlines()
    assert installs[-1].endswith("install --disable-pip-version-check -e .")
    assert any("torch" in c for c in installs[:-1])  # torch first, as for the test install
    assert not any("[test]" in c or "pytest" in c for c in installs)
    assert "noise" not in r.stdout + r.stderr and len(r.stdout.splitlines()) <= 5, r.stdout
    assert f"pip's output goes to {venv}/install.log" in r.stdout and r.stdout.splitlines()[-1].startswith("install: done")
    assert "Collecting noise-300" in (venv / "install.log").read_text()


def test_learner_install_shows_pips_output_when_pip_fails(tmp_path):
    venv, calls = _fake_venv(tmp_path), tmp_path / "calls"
    r = _install_mode(venv, "learner", calls, FAKE_PIP_RC="1")
    assert r.returncode == 1
    assert "pip failed" in r.stderr and f"{venv}/install.log" in r.stderr
    assert "Collecting noise-300" in r.stderr and "ERROR: fake pip says no" in r.stderr


def test_test_install_has_the_test_extra(tmp_path):
    venv, calls = _fake_venv(tmp_path), tmp_path / "calls"
    r = _install_mode(venv, "test", calls)
    assert r.returncode == 0, r.stderr
    assert calls.read_text().splitlines() == ["install --disable-pip-version-check -e .[test]"]
    assert "Collecting noise-300" in r.stdout  # the full install shows pip as it goes


def test_make_lab_takes_the_learner_install_and_make_test_stamps_both(tmp_path):
    """`make lab` depends on the learner install, `make test` on the full one; the full one's stamp, when
    fresh, stands for the learner's, so `make lab` after `make test` installs nothing."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    venv = tmp_path / "venv"

    def dry(target):
        return subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={venv}"], capture_output=True,
                              text=True, timeout=60, cwd=ROOT).stdout

    lab = dry("lab")
    assert f'tools/install.sh "python3" "{venv}" learner' in lab and "[test]" not in lab
    assert f'tools/install.sh "python3" "{venv}" test' in dry("test")
    venv.mkdir()
    (venv / ".installed").touch()  # a fresh full install (newer than pyproject.toml and install.sh)
    lab = dry("lab")
    assert f"[ -f {venv}/.installed ]" in lab and "tools/lab.sh" in lab
    done = subprocess.run(["make", "--no-print-directory", f"VENV={venv}", f"{venv}/.installed-lab"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and "install.sh" not in done.stdout and (venv / ".installed-lab").exists()
