"""The doctor with fake probes: it never crashes, and every problem names its fix."""
from __future__ import annotations

import importlib
import sys

import pytest

import infralens_lab
from infralens_lab.device import DeviceFacts

doc = importlib.import_module("infralens_lab.doctor")

H100 = DeviceFacts(mode="gpu", mode_reason="a CUDA GPU is usable", name="NVIDIA H100 80GB HBM3", sm_count=132,
                   l2_bytes=50 * 2**20, memory_bytes=80 * 2**30, compute_capability="9.0", driver="580.159",
                   cuda="13.0", torch="2.11.0+cu130", triton="3.6.0", python="3.12.3")
CPU = DeviceFacts(mode="interpreter", mode_reason="torch.cuda.is_available() is False", name="CPU (x86_64, Triton interpreter)",
                  torch="2.13.0+cpu", triton="3.6.0", cuda=None, python="3.11.7")
NCU_PERM = ("==PROF== Connected to process 123\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission "
            "to access NVIDIA GPU Performance Counters on the target device 0.\n")


def probes(facts=H100, tools=("ncu", "nsys", "nvidia-smi"), params="RmProfilingAdminOnly: 0\n", root=False,
           counter_output="==PROF== Disconnected", recorded=("nvidia-h200",), **over):
    p = doc.Probes(facts=lambda: facts,
                   which=lambda t: f"/usr/bin/{t}" if t in tools else None,
                   tool_version=lambda t: {"ncu": "2025.3.1", "nsys": "2024.5.1"}.get(t),
                   params_text=lambda: params,
                   is_root=lambda: root,
                   counter_probe=lambda: counter_output,
                   recordings=lambda: list(recorded),
                   default_reference=lambda: ((recorded[0], "committed default") if recorded else (None, "none")),
                   numpy_problem=lambda: None,  # the machine's own numpy (2.5 on the lent GPU) must not leak in
                   container=lambda: None, sys_admin=lambda: root, hosted=lambda: None,  # a machine of one's own
                   modprobe_writable=lambda: root)
    for k, v in over.items():
        setattr(p, k, v)
    return p


def run(p, **kw):
    return doc.run_doctor(verbose=False, probes=p, **kw)


def test_healthy_gpu_machine_has_no_problems():
    r = run(probes())
    assert r.problems == []
    assert [c.name for c in r.checks] == ["mode", "gpu", "versions", "ncu", "nsys", "counters", "widgets", "recorded"]
    assert r.by_name("mode").status == "ok" and r.by_name("recorded").detail.startswith(
        "recorded evidence from: nvidia-h200; labs use nvidia-h200")
    assert r.by_name("gpu").detail == "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 50 MiB L2, 80 GiB, driver 580.159"
    assert r.by_name("ncu").detail == "Nsight Compute 2025.3.1"
    assert r.by_name("counters").detail == "readable by all users (RmProfilingAdminOnly=0)"
    assert str(r).splitlines()[0] == "InfraLens Lab doctor"


def test_ncu_absent_is_a_problem_with_the_install_fix():
    r = run(probes(tools=("nvidia-smi",)))
    ncu = r.by_name("ncu")
    assert (ncu.status, ncu.detail, ncu.fix) == ("problem", "not on PATH", doc.FIX_NO_NCU)
    assert "fix: " + doc.FIX_NO_NCU in str(r)
    assert r.by_name("nsys").status == "note" and r.by_name("nsys").fix == doc.FIX_NO_NSYS
    assert str(r).endswith("the labs still run, falling back to recorded evidence where a tool is missing.")


def test_counters_restricted_and_not_root_names_err_nvgpuctrperm():
    r = run(probes(params="Foo: 1\nRmProfilingAdminOnly: 1\n", root=False))
    c = r.by_name("counters")
    assert c.status == "problem" and "ERR_NVGPUCTRPERM" in c.detail
    assert c.fix == doc.counter_fix(doc.CounterSituation(root=False))[1] and c.fix.startswith("You are not root")
    assert "NVreg_RestrictProfilingToAdminUsers=0" in str(r) and "sudo tee /etc/modprobe.d/" in str(r)


def test_counters_restricted_but_root_is_fine():
    c = run(probes(params="RmProfilingAdminOnly: 1\n", root=True)).by_name("counters")
    assert c.status == "ok" and "root" in c.detail


def test_counters_unknown_without_driver_params():
    c = run(probes(params=None)).by_name("counters")
    assert c.status == "note" and "--probe-counters" in c.detail


def test_counter_probe_reporting_err_nvgpuctrperm():
    r = run(probes(counter_output=NCU_PERM), probe_counters=True)
    c = r.by_name("counters")
    assert (c.status, c.detail) == ("problem", "ncu reported ERR_NVGPUCTRPERM") and c.fix.startswith("You are not root")


def test_counter_probe_success_overrides_params():
    c = run(probes(params="RmProfilingAdminOnly: 1\n", counter_output="gpu__time_duration.sum 2,048"),
            probe_counters=True).by_name("counters")
    assert c.status == "ok" and "read a counter" in c.detail


def test_counter_probe_that_raises_is_reported_not_raised():
    def probe():
        raise TimeoutError("ncu took too long")

    r = run(probes(counter_probe=probe), probe_counters=True)
    c = r.by_name("counters")
    assert c.status == "problem" and "TimeoutError: ncu took too long" in c.detail and c.fix


@pytest.mark.parametrize("broken", ["facts", "which", "recordings", "params_text", "tool_version"])
def test_a_probe_that_raises_never_crashes_the_doctor(broken):
    def boom(*a, **k):
        raise RuntimeError(f"{broken} exploded")

    p = probes()
    setattr(p, broken, boom)
    r = run(p)
    failed = [c for c in r.checks if "the check itself failed" in c.detail]
    assert failed, str(r)
    for c in failed:
        assert c.status == "problem" and f"RuntimeError: {broken} exploded" in c.detail
        assert c.fix  # every problem says what to do
    assert str(r)  # the report still renders


def test_interpreter_machine_explains_the_fallback():
    r = run(probes(facts=CPU, tools=(), params=None, recorded=()))
    mode = r.by_name("mode")
    assert mode.status == "note" and mode.fix == doc.FIX_NO_GPU
    assert r.by_name("gpu").detail == "none in use"
    assert r.by_name("counters").detail == "not checked (no GPU in use)"
    assert r.by_name("versions").status == "ok" and "CUDA none: CPU build" in r.by_name("versions").detail
    rec = r.by_name("recorded")
    assert rec.status == "problem" and rec.fix == doc.FIX_NO_RECORDED


def test_forced_interpreter_needs_no_fix():
    forced = DeviceFacts(**{**CPU.as_dict(), "mode_reason": "forced by INFRALENS_MODE=interpreter"})
    m = run(probes(facts=forced)).by_name("mode")
    assert m.status == "note" and m.fix == "" and "fix:" not in m.line()


def test_cpu_torch_on_a_gpu_machine_is_a_problem():
    v = run(probes(facts=CPU, tools=("nvidia-smi",))).by_name("versions")
    assert v.status == "problem" and v.fix == doc.FIX_CPU_TORCH


def test_missing_ipywidgets_is_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import now raises ImportError
    w = run(probes()).by_name("widgets")
    assert w.status == "note" and w.fix == doc.FIX_NO_WIDGETS


def test_every_problem_names_a_fix():
    worst = probes(facts=CPU, tools=("nvidia-smi",), recorded=())
    for r in (run(worst), run(probes(tools=(), params="RmProfilingAdminOnly: 1"))):
        assert r.problems
        for c in r.problems:
            assert c.fix, c
            assert "fix: " in c.line()


def test_counters_restricted_parser():
    assert doc.counters_restricted("RmProfilingAdminOnly: 1\n") is True
    assert doc.counters_restricted("A: 2\nRmProfilingAdminOnly: 0\n") is False
    assert doc.counters_restricted("A: 2\n") is None
    assert doc.counters_restricted(None) is None


def test_by_name_unknown_and_verbose_print(capsys):
    r = doc.run_doctor(verbose=True, probes=probes())
    assert capsys.readouterr().out == str(r) + "\n"
    with pytest.raises(KeyError, match="no check named 'gpus'"):
        r.by_name("gpus")


def test_cli_runs_on_this_machine(capsys):
    assert doc.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("InfraLens Lab doctor\n") and "[" in out


def test_package_doctor_can_be_called_twice(capsys):
    # importing infralens_lab.doctor rebinds the package attribute from the function to the module;
    # both must stay callable (regression: the second call raised "'module' object is not callable")
    first = infralens_lab.doctor(verbose=False)
    second = infralens_lab.doctor(verbose=False)
    assert [c.name for c in first.checks] == [c.name for c in second.checks]
    assert capsys.readouterr().out == ""


def test_doctor_names_the_reference_set_and_flags_an_unusable_default():
    r = run(probes(recorded=("nvidia-h100-80gb-hbm3", "nvidia-h200"),
                   default_reference=lambda: ("nvidia-h200", "committed default (data/recorded/DEFAULT)")))
    assert r.by_name("recorded").status == "ok"
    assert "labs use nvidia-h200 (committed default" in r.by_name("recorded").detail
    r = run(probes(recorded=("nvidia-h100-80gb-hbm3", "nvidia-h200"),
                   default_reference=lambda: ("nvidia-a100", "$INFRALENS_REFERENCE_GPU=nvidia-a100")))
    bad = r.by_name("recorded")
    assert bad.status == "problem" and "nvidia-a100" in bad.detail and "INFRALENS_REFERENCE_GPU" in bad.fix


def test_ncu_absent_without_a_gpu_is_a_note_not_a_problem():
    r = run(probes(facts=CPU, tools=()))
    ncu = r.by_name("ncu")
    assert ncu.status == "note" and ncu.fix == doc.FIX_NO_NCU_NO_GPU and "nothing to profile" in ncu.detail
    assert "ncu" not in [c.name for c in r.problems]


def test_bad_mode_setting_is_a_problem_not_a_crash():
    from infralens_lab import device

    def bad_facts():
        device.decide_mode(env={"INFRALENS_MODE": "bogus"}, cuda_usable=False)

    p = probes()
    p.facts = bad_facts
    r = run(p)
    mode = r.by_name("mode")
    assert mode.status == "problem" and mode.fix == doc.FIX_MODE_SETTING
    assert "'bogus' is not understood; expected one of 'auto', 'gpu', 'interpreter'" in mode.detail
    assert r.by_name("versions").status == "ok"  # still read without a mode
    assert str(r).endswith("until the mode problem is fixed.")


def _cli(env_mode: str, *args: str):
    import os
    import subprocess

    from conftest import ROOT

    env = {**os.environ, "INFRALENS_MODE": env_mode, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_cli_doctor_diagnoses_a_bogus_mode():
    r = _cli("bogus", "-m", "infralens_lab", "doctor")
    assert r.returncode == 1, r.stderr  # a problem found is an error status for scripts (it was 0)
    assert "Traceback" not in r.stderr + r.stdout
    assert "[PROBLEM] mode: INFRALENS_MODE='bogus' cannot be used" in r.stdout
    assert "unset INFRALENS_MODE" in r.stdout


def test_bogus_mode_still_refuses_clearly_where_a_lab_needs_the_mode():
    r = _cli("bogus", "-c", "import infralens_lab; infralens_lab.device.torch_device()")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("infralens_lab.device.ModeSettingError: INFRALENS_MODE='bogus' is not understood")
    assert "Fix: `unset INFRALENS_MODE`" in last


def test_numpy_too_new_for_the_interpreter():
    """A numpy the interpreter breaks on is a problem without a GPU (every lab kernel runs there) and a note with
    one (only the count gates use the interpreter); healthy machines get no numpy line at all."""
    import infralens_lab.device as device

    msg = device.numpy_interpreter_problem("2.4.1")
    r = run(probes(numpy_problem=lambda: msg))
    c = r.by_name("numpy")
    assert c.status == "note" and c.detail.startswith("numpy 2.4.1 is installed") and "make install" in c.fix
    assert run(probes(facts=CPU, numpy_problem=lambda: msg)).by_name("numpy").status == "problem"
    assert "numpy" not in [c.name for c in run(probes()).checks]
    assert doc.Probes().numpy_problem is device.numpy_interpreter_problem  # the real probe is the default


@pytest.mark.parametrize("what", ["missing", "folder", "not executable"])
def test_doctor_names_an_infralens_ncu_that_cannot_run(monkeypatch, tmp_path, what):
    target = {"missing": tmp_path / "ncu", "folder": tmp_path, "not executable": tmp_path / "ncu.txt"}[what]
    if what == "not executable":
        target.write_text("#!/bin/sh\n")
    monkeypatch.setenv("INFRALENS_NCU", str(target))
    check = doc.run_doctor(verbose=False, probes=probes()).by_name("ncu")
    assert check.status == "problem" and f"INFRALENS_NCU={str(target)!r}" in check.detail
    assert "unset it to use ncu from PATH" in check.fix


def test_doctor_uses_an_infralens_ncu_that_runs(monkeypatch, tmp_path):
    ncu = tmp_path / "ncu"
    ncu.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler Version 2025.3.1'\n")
    ncu.chmod(0o755)
    monkeypatch.setenv("INFRALENS_NCU", str(ncu))
    check = doc.run_doctor(verbose=False, probes=probes(tool_version=infralens_lab.device.tool_version)).by_name("ncu")
    assert check.status == "ok" and "2025.3.1" in check.detail and "INFRALENS_NCU" in check.detail


# ---------------------------------------------------------------- ERR_NVGPUCTRPERM: the fix for the learner's situation
SITUATIONS = {  # name: (root, probes' overrides, status, words the fix must hold)
    "colab": (True, dict(hosted=lambda: "Google Colab", container=lambda: "docker", sys_admin=lambda: False),
              "note", ["Not possible on this host (Google Colab)", "The labs use recorded counters."]),
    "kaggle": (True, dict(hosted=lambda: "Kaggle", container=lambda: "docker", sys_admin=lambda: False),
               "note", ["Not possible on this host (Kaggle)", "recorded counters"]),
    "container as root": (True, dict(container=lambda: "docker", sys_admin=lambda: False), "problem",
                          ["Not settable inside this container (docker)", "--cap-add=SYS_ADMIN", "host's driver"]),
    "container, not root": (False, dict(container=lambda: "kubepods"), "problem",
                            ["Not settable inside this container (kubepods)"]),
    "bare metal, root": (True, dict(modprobe_writable=lambda: True), "problem",
                         ["You are root here", "> /etc/modprobe.d/nvidia-profiling.conf", "reboot"]),
    "bare metal, root, read-only /etc": (True, dict(modprobe_writable=lambda: False), "problem",
                                         ["Not settable on this host", "not writable even as root"]),
    "bare metal, not root": (False, {}, "problem", ["You are not root", "sudo tee", "ask the administrator"]),
}


@pytest.mark.parametrize("name", SITUATIONS)
def test_err_nvgpuctrperm_fix_names_the_learners_situation(name):
    """ncu's real permission error on a faked machine of each kind: the doctor names the fix that applies there,
    and no other situation's fix."""
    root, over, status, words = SITUATIONS[name]
    c = run(probes(root=root, counter_output=NCU_PERM, **over), probe_counters=True).by_name("counters")
    assert (c.status, c.detail) == (status, "ncu reported ERR_NVGPUCTRPERM"), c
    for w in words:
        assert w in c.fix, (name, c.fix)
    for other, (_, _, _, their_words) in SITUATIONS.items():
        if their_words[0].split(" (")[0] != words[0].split(" (")[0]:
            assert their_words[0] not in c.fix, (name, other)


def test_root_in_a_container_without_cap_sys_admin_is_told_before_ncu_fails():
    """Driver params say admins only; this process is root but has no CAP_SYS_ADMIN (a container): not 'ok'."""
    p = probes(params="RmProfilingAdminOnly: 1\n", root=True, sys_admin=lambda: False, container=lambda: "docker")
    c = run(p).by_name("counters")
    assert c.status == "problem" and "CAP_SYS_ADMIN" in c.detail and "Not settable inside this container" in c.fix
    assert run(probes(params="RmProfilingAdminOnly: 1\n", root=True)).by_name("counters").status == "ok"


def test_the_situation_probes_read_this_machine_without_raising():
    s = doc.Probes().counter_situation()
    assert isinstance(s.root, bool) and s.sys_admin in (True, False, None) and isinstance(s.modprobe_writable, bool)
    assert s.container is None or isinstance(s.container, str)


def test_cap_sys_admin_is_read_from_capeff(monkeypatch, tmp_path):
    status, real = tmp_path / "status", doc.Path
    monkeypatch.setattr(doc, "Path", lambda arg: status if arg == "/proc/self/status" else real(arg))
    status.write_text("Name:\tpython\nCapEff:\t000001ffffffffff\n")
    assert doc.has_sys_admin() is True
    status.write_text("Name:\tpython\nCapEff:\t00000000a80425fb\n")  # docker's default set: no CAP_SYS_ADMIN (bit 21)
    assert doc.has_sys_admin() is False
    status.write_text("Name:\tpython\n")
    assert doc.has_sys_admin() is None
