"""Execution mode, device facts and slugs (infralens_lab.device)."""
from __future__ import annotations

import os
import re
import stat

import pytest
import torch

from infralens_lab import device

NO_GPU = not torch.cuda.is_available()


@pytest.fixture
def fresh_mode(monkeypatch):
    """Let a test decide the mode again; afterwards forget it so the next caller decides as usual."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    device.reset_for_tests()
    yield
    device.reset_for_tests()


@pytest.mark.parametrize("env, cuda, want, reason_has", [
    ({}, False, "interpreter", "no usable CUDA GPU"),
    ({}, True, "gpu", "usable"),
    ({"INFRALENS_MODE": "auto"}, False, "interpreter", "no usable"),
    ({"INFRALENS_MODE": "auto"}, True, "gpu", "usable"),
    ({"INFRALENS_MODE": ""}, True, "gpu", "usable"),  # empty means auto
    ({"INFRALENS_MODE": "interpreter"}, True, "interpreter", "forced by INFRALENS_MODE=interpreter"),
    ({"INFRALENS_MODE": "interpreter"}, False, "interpreter", "forced"),
    ({"INFRALENS_MODE": " Interpreter "}, True, "interpreter", "forced"),  # case and spaces ignored
    ({"INFRALENS_MODE": "gpu"}, True, "gpu", "forced by INFRALENS_MODE=gpu"),
    ({"INFRALENS_MODE": "GPU"}, True, "gpu", "forced"),
])
def test_decide_mode(env, cuda, want, reason_has):
    got, reason = device.decide_mode(env=env, cuda_usable=cuda)
    assert got == want
    assert reason_has in reason


@pytest.mark.parametrize("bad", ["cuda", "cpu", "1", "gpu,interpreter"])
def test_decide_mode_rejects_unknown_values(bad):
    with pytest.raises(ValueError, match=rf"INFRALENS_MODE='{bad}' is not understood; expected one of 'auto', 'gpu', 'interpreter'"):
        device.decide_mode(env={"INFRALENS_MODE": bad}, cuda_usable=True)


def test_forced_gpu_without_gpu_raises_with_the_way_out():
    with pytest.raises(RuntimeError, match="INFRALENS_MODE=gpu but no usable CUDA GPU; unset it"):
        device.decide_mode(env={"INFRALENS_MODE": "gpu"}, cuda_usable=False)


def test_interpreter_override_does_not_probe_cuda(monkeypatch):
    def boom():
        raise AssertionError("probed CUDA although the interpreter was forced")

    monkeypatch.setattr(device, "_cuda_usable", boom)
    assert device.decide_mode(env={"INFRALENS_MODE": "interpreter"})[0] == "interpreter"


def test_interpreter_mode_sets_triton_interpret(fresh_mode, monkeypatch):
    monkeypatch.setenv("INFRALENS_MODE", "interpreter")
    assert device.mode() == "interpreter"
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert "forced" in device.mode_reason()
    assert not device.is_gpu() and device.torch_device() == "cpu"
    device.synchronize()  # a no-op without a GPU; must not touch CUDA


@pytest.mark.skipif(not NO_GPU, reason="needs a machine without a usable GPU")
def test_forced_gpu_on_this_machine_raises(fresh_mode, monkeypatch):
    monkeypatch.setenv("INFRALENS_MODE", "gpu")
    with pytest.raises(RuntimeError, match=re.escape("INFRALENS_MODE=gpu but torch.cuda.is_available")):
        device.mode()


def test_bad_env_value_at_mode_time(fresh_mode, monkeypatch):
    monkeypatch.setenv("INFRALENS_MODE", "fast")
    with pytest.raises(ValueError, match="'fast' is not understood"):
        device.mode()


@pytest.mark.skipif(not NO_GPU, reason="needs a machine without a usable GPU")
def test_auto_without_gpu_picks_interpreter_and_says_why(fresh_mode, monkeypatch):
    monkeypatch.delenv("INFRALENS_MODE", raising=False)
    assert device.mode() == "interpreter"
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert "torch.cuda.is_available() is False" in device.mode_reason()
    ok, why = device._cuda_usable()
    assert not ok and "is_available" in why


def test_mode_is_decided_once(fresh_mode, monkeypatch):
    monkeypatch.setenv("INFRALENS_MODE", "interpreter")
    assert device.mode() == "interpreter"
    monkeypatch.setenv("INFRALENS_MODE", "nonsense")  # read only at the first decision
    assert device.mode() == "interpreter"


@pytest.mark.parametrize("name, want", [
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
    ("NVIDIA H200", "nvidia-h200"),
    ("  NVIDIA  GeForce RTX 4090 ", "nvidia-geforce-rtx-4090"),
    ("CPU (x86_64, Triton interpreter)", "cpu-x86-64-triton-interpreter"),
])
def test_slug(name, want):
    assert device.slug(name) == want


@pytest.mark.parametrize("bad", ["", "   ", "()!"])
def test_slug_rejects_names_without_letters_or_digits(bad):
    with pytest.raises(ValueError, match="cannot make a slug from GPU name"):
        device.slug(bad)


@pytest.mark.skipif(not NO_GPU, reason="interpreter facts")
def test_facts_in_interpreter_mode(fresh_mode, monkeypatch):
    monkeypatch.setenv("INFRALENS_MODE", "interpreter")
    f = device.facts()
    assert f.mode == "interpreter" and "Triton interpreter" in f.name
    assert f.torch == torch.__version__ and f.triton
    assert f.sm_count is None and f.memory_bytes is None and f.l2_bytes is None
    assert f.slug == device.slug(f.name)
    assert set(f.as_dict()) >= {"mode", "name", "sm_count", "l2_bytes", "memory_bytes", "compute_capability",
                                "driver", "cuda", "torch", "triton", "python"}
    assert device.facts() is f  # cached


def _fake_tool(folder, name, text, rc=0):
    p = folder / name
    lines = "".join(f"echo '{line}'\n" for line in text.splitlines())  # shell builtins only: PATH is bare
    p.write_text(f"#!/bin/sh\n{lines}exit {rc}\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def test_tool_version_parses_ncu_and_nsys(tmp_path, monkeypatch):
    _fake_tool(tmp_path, "ncu", "NVIDIA (R) Nsight Compute Command Line Profiler\n"
                                "Copyright (c) 2018-2025 NVIDIA Corporation\n"
                                "Version 2025.3.1.0 (build 36398880) (public-release)")
    _fake_tool(tmp_path, "nsys", "NVIDIA Nsight Systems version 2024.5.1.113-245134619542v0")
    _fake_tool(tmp_path, "broken", "oops", rc=3)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert device.tool_version("ncu") == "2025.3.1.0"
    assert device.tool_version("nsys") == "2024.5.1.113"
    assert device.tool_version("broken") is None
    assert device.tool_version("not-installed") is None
    assert device.driver_version() is None  # no nvidia-smi on this PATH
