"""ERR_NVGPUCTRPERM, the usual first failure on cloud and consumer GPUs (issue 43): each lab cell that runs ncu live
falls back to the recorded counters with one line, not a traceback. ncu is faked by a script on PATH that prints
ncu's own permission error and exits non-zero; the cells' glue functions are called as the labs call them."""
from __future__ import annotations

import os

import pytest
from helpers import recorded_set

from infralens_lab.labs_support import counters_fallback, lab01, lab04
from infralens_lab.parse import ncu
from infralens_lab.present.trace_tables import hot_kernel_name

# ncu 2025.3's output when counters are kept to administrators (the text parse.ncu.classify_failure reads)
PERM_OUTPUT = ("==PROF== Connected to process 4242 (/usr/bin/python3.11)\n"
               "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
               "Counters on the target device 0. For instructions on enabling permissions and to get more information "
               "see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
               "==PROF== Disconnected from process 4242\n")


def _fake_ncu(folder, body: str, monkeypatch):
    script = folder / "ncu"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("INFRALENS_NCU", raising=False)


@pytest.fixture
def ncu_without_permission(tmp_path, monkeypatch):
    (tmp_path / "perm.txt").write_text(PERM_OUTPUT)
    _fake_ncu(tmp_path, f'cat "{tmp_path / "perm.txt"}"; exit 1', monkeypatch)


def _one_line(out: str, gpu: str) -> str:
    lines = out.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out, out
    assert f"recorded counters from {gpu} are shown instead" in lines[0], lines[0]
    return lines[0]


def test_lab04_live_copies_fall_back_in_one_line(ncu_without_permission, monkeypatch, capsys):
    st = recorded_set(files=lab04.COPY_FILES)
    monkeypatch.setattr(lab04, "is_gpu", lambda: True)
    assert lab04.live_copy_family(st, n=4096, strides=(2,)) is None
    line = _one_line(capsys.readouterr().out, st.gpu)
    assert line.startswith("Live counters: ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM)")
    assert "python -m infralens_lab doctor --probe-counters" in line
    assert lab04.recorded_copy_family(st) is not None  # what the cell shows next


def test_lab01_hot_kernel_falls_back_to_the_recorded_counters(ncu_without_permission, monkeypatch, capsys):
    st = recorded_set("trace_fixed", files=(lab01.TRAIN_STEP_FILE,))
    hot = hot_kernel_name(lab01.recorded_traces(st)["fixed"][0])
    capsys.readouterr()
    got = lab01.hot_kernel_ncu(st, hot, live=True)  # as on a GPU: ncu is tried first
    assert got is not None and not got.live and got.gpu == st.gpu and len(got.sel)
    assert "ERR_NVGPUCTRPERM" in _one_line(capsys.readouterr().out, st.gpu)


def test_another_ncu_failure_is_one_line_too(tmp_path, monkeypatch, capsys):
    """A failure of another kind (here ncu exits 3 with a two-line error) is also said in one line."""
    _fake_ncu(tmp_path, 'echo "==ERROR== The application returned an error code (1)."; '
                        'echo "==ERROR== An error occurred while trying to profile."; exit 3', monkeypatch)
    st = recorded_set(files=lab04.COPY_FILES)
    monkeypatch.setattr(lab04, "is_gpu", lambda: True)
    assert lab04.live_copy_family(st, n=4096, strides=(2,)) is None
    line = _one_line(capsys.readouterr().out, st.gpu)
    assert line.startswith("Live counters: ncu could not run here: ncu or the profiled program exited with code 3")


def test_the_line_without_a_recorded_set_says_so():
    line = counters_fallback(ncu.NcuPermissionError("no", "fix"), None)
    assert "recorded counters from no GPU (nothing is recorded here)" in line and "\n" not in line
