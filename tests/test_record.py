"""record: refuses without a GPU, keeps going when a step fails, joins ncu runs, bundles, imports no Jupyter."""
from __future__ import annotations

import re
import subprocess
import sys
import tarfile

import pytest
from test_ncu import SYNTHETIC  # tests/ is on sys.path (pytest rootdir import mode)

from infralens_lab import record
from infralens_lab.device import is_gpu
from infralens_lab.evidence import EvidenceWriter, RecordedStore
from infralens_lab.measure import ncu as NR
from infralens_lab.parse import ncu


@pytest.mark.skipif(is_gpu(), reason="checks the no-GPU refusal")
def test_refuses_without_gpu(tmp_path, capsys):
    out = tmp_path / "rec"
    assert record.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "refusing to record" in err and "interpreter mode" in err and "NVIDIA GPU" in err
    assert not out.exists()


def test_unknown_step_is_rejected(tmp_path, capsys):
    assert record.main(["--out", str(tmp_path / "rec"), "--only", "device,coffee"]) == 2
    assert "unknown step(s) ['coffee']" in capsys.readouterr().err


def test_help_lists_steps_and_records(capsys):
    with pytest.raises(SystemExit):
        record.main(["--help"])
    out = capsys.readouterr().out
    for name in (*record.STEPS, "trace_summary", "record_log", "ncu_copies_stalls.csv"):
        assert name in out.replace("\n", " ")


def test_failed_and_skipped_steps_do_not_stop_the_others(tmp_path, monkeypatch):
    w = EvidenceWriter(tmp_path / "rec", "test")
    logs = []
    rec = record.Recorder(w, log=logs.append)
    monkeypatch.setattr(record.Recorder, "step_ceilings", lambda self: 1 / 0, raising=False)
    monkeypatch.setattr(record, "_optional", lambda m, a: (_ for _ in ()).throw(record._Skip(f"{m} absent")))
    for step in ("ceilings", "bench", "device"):
        rec.run(step)
    status = {e["step"]: (e["status"], e["detail"]) for e in rec.entries}
    assert status["ceilings"] == ("failed", "ZeroDivisionError: division by zero")
    assert status["bench"] == ("skipped", "infralens_lab.bench absent")
    assert status["device"][0] == "ok"
    assert any("Traceback" in line for line in logs)  # the failure's traceback is in the log
    w.close()
    assert RecordedStore(tmp_path / "rec").load("device").values["mode"] in ("gpu", "interpreter")


def test_ncu_runs_are_joined_with_fallbacks(tmp_path, monkeypatch):
    calls = []

    def fake_run_ncu(target, kernel_regex, metrics=None, launch_skip=0, launch_count=1, nvtx=True, timeout=0):
        calls.append((target[1], kernel_regex, launch_skip, launch_count, nvtx, tuple(metrics)))
        if "bad__metric" in metrics:
            raise ncu.NcuMetricError("unknown", metrics=["bad__metric"])
        if target[1] == "naive" and nvtx:
            raise ncu.NcuNoKernels("none")
        if target[1] == "tiled":
            raise ncu.NcuPermissionError("no counters", ncu.FIX_PERM)
        return SYNTHETIC

    monkeypatch.setattr(NR, "run_ncu", fake_run_ncu)
    w = EvidenceWriter(tmp_path / "rec", "test")
    rec = record.Recorder(w, log=lambda m: None)
    cfgs = [("a", "copy", ["--n", "8"]), ("b", "naive", []), ("c", "tiled", [])]
    detail = rec._ncu_file("ncu_test.csv", cfgs, [*ncu.TIME, "bad__metric"])
    assert detail.startswith("2/3 runs ok; failed: ['c: no counters")
    # copy: dropped the bad metric and retried; naive: NVTX window empty -> counted window (skip 1 warm-up x 3)
    assert calls[0][0] == "copy" and calls[1] == ("copy", "copy_coalesced", 0, 1, True, tuple(ncu.TIME))
    assert ("naive", "naive_", 0, 3, True, tuple(ncu.TIME)) in calls
    assert ("naive", "naive_", 3, 3, False, tuple(ncu.TIME)) in calls
    df = ncu.parse_raw_csv((tmp_path / "rec" / "ncu_test.csv").read_text())
    assert sorted(df["config"].unique()) == ["a", "b"] and len(df) == 40
    with pytest.raises(RuntimeError, match=re.escape("every ncu run for ncu_none.csv failed")):
        rec._ncu_file("ncu_none.csv", [("c", "tiled", [])], ncu.TIME)


def test_bundle_holds_the_set_and_the_log(tmp_path):
    w = EvidenceWriter(tmp_path / "rec", "test")
    w.write("device", {"name": "x"})
    w.close()
    path = record.bundle(tmp_path / "rec", tmp_path / "b" / "rec.tar.gz", "step log\n")
    with tarfile.open(path) as tar:
        names = sorted(tar.getnames())
        assert names == ["rec", "rec.record.log", "rec/device.json", "rec/manifest.json"]
        assert tar.extractfile("rec.record.log").read() == b"step log\n"


def test_import_path_has_no_jupyter():
    code = ("import sys, infralens_lab.record, infralens_lab.measure.torch_trace, infralens_lab.present.timeline;"
            "bad=[m for m in sys.modules if m.split('.')[0] in ('IPython','ipywidgets','jupyter_client','nbformat',"
            "'ipykernel','jupyterlab')]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_metrics_that_ncu_silently_drops_are_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(NR, "run_ncu", lambda *a, **k: SYNTHETIC)
    rec = record.Recorder(EvidenceWriter(tmp_path / "rec", "test"), log=lambda m: None)
    detail = rec._ncu_file("ncu_t.csv", [("a", "copy", [])], [*ncu.TIME, "sm__ops_path_tensor_src_fp16_dst_fp32.sum"])
    assert detail == "1/1 runs ok; metrics absent from the CSV: ['sm__ops_path_tensor_src_fp16_dst_fp32.sum']"


def test_recorder_profile_shapes_and_labels():
    """The ncu runs the recorder makes: every label parses back to the run, copies have a working set over
    4x a 60 MB L2, attention runs at the bench's shape (many waves), and the clock policy is stated."""
    from infralens_lab import record
    from infralens_lab.parse.runs import RunConfig, target_args

    rec = record.Recorder(writer=None, quick=False, log=lambda m: None)
    for label, kernel, args in rec._copy_configs():
        cfg = RunConfig.parse(label)
        assert cfg.kind == kernel and target_args(cfg) == args
        assert 2 * cfg.n * cfg.elem_bytes >= 4 * 60 * 2**20  # useful bytes read + written
    assert record.ATTN_SHAPE[0] * record.ATTN_SHAPE[1] * record.ATTN_SHAPE[2] // 128 > 2 * 132  # tiled programs
    for m in ncu.CLOCK + ncu.SCHEDULER:
        assert m in record.ATTN_METRICS
    assert ncu.CLOCK[0] in record.COPY_METRICS and "--clock-control none" in record.NCU_NOTES
    assert "--clock-control" in NR.ncu_command(["--kernel", "copy"], "copy", metrics=ncu.TIME)


# ---------------------------------------------------------------- ncu_gluon (issue 42): Hopper only, its own set
def _facts(cc, name):
    from types import SimpleNamespace

    return lambda: SimpleNamespace(name=name, compute_capability=cc)


def test_ncu_gluon_skips_off_hopper(tmp_path, monkeypatch):
    rec = record.Recorder(EvidenceWriter(tmp_path / "rec", "test"), log=lambda m: None)
    monkeypatch.setattr(record.device, "facts", _facts("8.0", "NVIDIA A100-SXM4-80GB"))
    monkeypatch.setattr(NR, "run_ncu", lambda *a, **k: pytest.fail("ncu must not run off Hopper"))
    rec.run("ncu_gluon")
    (e,) = rec.entries
    assert e["status"] == "skipped" and e["detail"].startswith("needs sm_90: this GPU is NVIDIA A100-SXM4-80GB "
                                                               "(compute capability 8.0)")
    assert not (tmp_path / "rec" / "ncu_gluon.csv").exists()


def test_ncu_gluon_profiles_both_kernels_at_d128(tmp_path, monkeypatch):
    from infralens_lab.measure import target
    from infralens_lab.parse.runs import RunConfig, target_args

    calls = []

    def fake_run_ncu(tgt, kernel_regex, metrics=None, launch_skip=0, launch_count=1, nvtx=True, timeout=0):
        calls.append((tgt, kernel_regex, launch_count, tuple(metrics)))
        return SYNTHETIC

    rec = record.Recorder(EvidenceWriter(tmp_path / "rec", "test"), log=lambda m: None)
    monkeypatch.setattr(record.device, "facts", _facts("9.0", "NVIDIA H200"))
    monkeypatch.setattr(NR, "run_ncu", fake_run_ncu)
    assert rec.step_ncu_gluon().startswith("2/2 runs ok")
    assert [c[1] for c in calls] == ["attn_fwd_gluon", "attn_fwd_fast"] and all(c[2] == 1 for c in calls)
    assert all(m in calls[0][3] for m in (*record.ATTN_METRICS, *ncu.PIPES))
    text = (tmp_path / "rec" / "ncu_gluon.csv").read_text()
    labels = [b["label"] for b in ncu.read_blocks(text)]
    assert labels == ["gluon shape=4,16,4096,128 fp16", "tiled_fast shape=4,16,4096,128 fp16"]
    for label, (tgt, *_rest) in zip(labels, calls, strict=True):
        cfg = RunConfig.parse(label)
        assert cfg.family == "attention" and cfg.shape[3] == 128
        assert tgt[:2] == ["--kernel", cfg.kind] and tgt[2:-4] == target_args(cfg)
        target.parser().parse_args(tgt)  # the target accepts what the recorder asks of it
    assert target.launch_window("gluon", 1, 1) == ("attn_fwd_gluon", 1, 1)
    assert "ncu_gluon" in record.STEPS and "gluon" not in record.ATTENTION_KINDS  # ncu_attention.csv keeps its runs


def test_gluon_target_refuses_cpu_by_name():
    from infralens_lab.device import is_gpu
    from infralens_lab.kernels.attention_gluon import GluonUnavailableError
    from infralens_lab.measure import target

    if is_gpu():
        pytest.skip("checks the CPU refusal")
    fn = target.build(target.parser().parse_args(["--kernel", "gluon", "--shape", "1,1,8,128"]))
    with pytest.raises(GluonUnavailableError, match="expected a CUDA tensor on a Hopper GPU"):
        fn()
