"""Bad input refused clearly (issue 12's battery, the parts this layer owns): what was seen, what was
expected, and the fix; never a raw traceback nor a silent empty result."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infralens_lab.analysis import ledger
from infralens_lab.evidence import EvidenceError, EvidenceWriter
from infralens_lab.parse import ncu

DATA = Path(__file__).parent / "data"


def _unwritable(tmp_path: Path) -> Path:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    return blocker / "set"  # a folder below a regular file cannot be made, whoever runs the test (root too)


def test_evidence_writer_on_an_unwritable_path(tmp_path):
    with pytest.raises(EvidenceError, match=r"cannot write the recorded set to .*a_file/set.*Fix: choose another"):
        EvidenceWriter(_unwritable(tmp_path), "test")


def test_record_to_an_unwritable_folder(tmp_path, monkeypatch, capsys):
    from infralens_lab import device, record

    monkeypatch.setattr(device, "is_gpu", lambda: True)  # get past the GPU check to the folder
    assert record.main(["--out", str(_unwritable(tmp_path)), "--only", "device"]) == 2
    err = capsys.readouterr().err
    assert "record: cannot write the recorded set" in err and "Fix:" in err


@pytest.mark.parametrize("params", [math.nan, math.inf, -5, 0])
def test_model_states_refuses_non_finite_params(params):
    with pytest.raises(ValueError, match="expected a positive, finite parameter count"):
        ledger.model_states(params)


M = ledger.Model.preset("gpt2-125m")


@pytest.mark.parametrize("kw, match", [
    (dict(precision="fp64"), r"precision = 'fp64'; expected one of \["),
    (dict(recompute="bogus"), r"recompute = 'bogus'; expected one of \['full', 'none', 'selective'\]"),
    (dict(attention="sdpa"), r"attention = 'sdpa'; expected one of"),
    (dict(batch=0), r"batch = 0; expected an int >= 1"),
    (dict(seq=-1), r"seq = -1; expected an int >= 1"),
])
def test_activation_bytes_refuses_bad_arguments(kw, match):
    args = dict(batch=2, seq=128) | kw
    with pytest.raises(ValueError, match=match):
        ledger.activation_bytes_per_layer(M, **args)


def test_stall_breakdown_without_stall_metrics_says_so():
    df = ncu.parse_raw_csv((DATA / "ncu_copies.csv").read_text())  # counters, no pc sampling
    assert not ncu.has_stalls(df)
    with pytest.raises(ncu.NcuCsvError, match="no stall samples") as e:
        ncu.stall_breakdown(df)
    assert "ncu_copies_stalls.csv" in e.value.fix


def test_sectors_per_request_without_its_counters_says_so():
    df = ncu.parse_raw_csv((DATA / "ncu_copies_stalls.csv").read_text())
    with pytest.raises(ncu.NcuCsvError, match="sectors_per_request: the CSV has none of") as e:
        ncu.sectors_per_request(df)
    assert "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum" in e.value.fix
    assert "sectors_per_request" not in ncu.summary(df).columns  # summary shows what the CSV has


DETAILS = '''==PROF== Connected to process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","host","copy_strided","1","7","(1024, 1, 1)","(4096, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Frequency","Ghz","2.62"
'''


def test_details_page_csv_asks_for_page_raw():
    with pytest.raises(ncu.NcuCsvError, match="default 'details' page") as e:
        ncu.parse_raw_csv(DETAILS)
    assert "--page raw" in e.value.fix


# ---------------------------------------------------------------- issue 28's battery (the parts outside grading)
ROOT = Path(__file__).resolve().parents[1]


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


@pytest.mark.skipif(not _no_gpu(), reason="needs a machine without a usable GPU")
@pytest.mark.parametrize("cmd", ["record --out {tmp}/set", "bench --quick"])
def test_gpu_mode_forced_without_a_gpu_is_a_message_not_a_traceback(tmp_path, cmd):
    env = {**os.environ, "INFRALENS_MODE": "gpu", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "infralens_lab", *cmd.format(tmp=tmp_path).split()], env=env,
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "INFRALENS_MODE=gpu but torch.cuda.is_available() is False" in r.stderr
    assert not (tmp_path / "set").exists()


def test_infralens_ncu_naming_no_file_is_named(monkeypatch, tmp_path):
    from infralens_lab.measure import ncu as MN

    monkeypatch.setenv("INFRALENS_NCU", str(tmp_path / "ncu"))
    with pytest.raises(ncu.NcuNotFound, match=r"INFRALENS_NCU='.*/ncu' names no file.*\nfix: Point INFRALENS_NCU"):
        MN.ncu_binary()
    with pytest.raises(ncu.NcuNotFound, match="names no file"):
        MN.run_ncu(["--kernel", "copy_coalesced"], "copy_coalesced", metrics=["gpu__time_duration.sum"])
    monkeypatch.setenv("INFRALENS_NCU", str(tmp_path))
    with pytest.raises(ncu.NcuNotFound, match="is a folder"):
        MN.ncu_binary()


def _a_set(tmp_path):
    w = EvidenceWriter(tmp_path / "nvidia-x", command="test")
    w.write("bench", {"rows": [{"gbps": 1.0}]})
    w.close()
    return tmp_path / "nvidia-x"


def test_checksum_mismatch_names_the_file_and_the_fix(tmp_path):
    from infralens_lab.evidence import RecordedStore

    folder = _a_set(tmp_path)
    (folder / "bench.json").write_text((folder / "bench.json").read_text().replace("1.0", "2.0"))
    with pytest.raises(EvidenceError) as exc:
        RecordedStore(folder).load("bench")
    msg = str(exc.value)
    assert "bench.json: checksum" in msg and "of this file does not match" in msg and "changed after recording" in msg
    assert f"git checkout -- {folder / 'bench.json'}" in msg and f"record --out {folder}" in msg


def test_missing_manifest_says_what_the_folder_holds_and_the_fix(tmp_path):
    from infralens_lab.evidence import RecordedStore

    folder = _a_set(tmp_path)
    (folder / "manifest.json").unlink()
    with pytest.raises(EvidenceError, match=r"not a recorded set \(the folder holds 1 file\(s\) but no manifest.json\)"
                                            r".*git checkout -- .*manifest.json"):
        RecordedStore(folder)


def test_empty_reference_gpu_is_said_not_silently_ignored(tmp_path, monkeypatch):
    from infralens_lab import evidence

    folder = _a_set(tmp_path)
    (folder.parent / evidence.DEFAULT_FILE).write_text("nvidia-x\n")
    monkeypatch.setenv(evidence.REFERENCE_ENV, "  ")
    with pytest.warns(UserWarning, match="INFRALENS_REFERENCE_GPU='  ' is empty"):
        slug, why = evidence.default_reference(folder.parent)
    assert slug == "nvidia-x" and "set but empty" in why
