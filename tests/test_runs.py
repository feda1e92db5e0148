"""The recorder's run configurations: label() and parse() are inverses on every label the recorder and the
recorded files carry; the block format has one writer and one reader; bad labels are refused clearly."""
from __future__ import annotations

from pathlib import Path

import pytest

from infralens_lab.measure import ncu as NR
from infralens_lab.parse import ncu
from infralens_lab.parse.runs import ELEM_BYTES, RunConfig, copy_run, target_args

DATA = Path(__file__).parent / "data"
LABELS = ["copy n=16777216 fp32", "copy_strided stride=8 n=16777216 fp32", "naive shape=1,8,2048,64 fp16",
          "tiled_fast shape=4,16,4096,64 fp16 causal", "matmul size=1024,512,256 fp16", "train_step fixed"]


@pytest.mark.parametrize("label", LABELS)
def test_label_parse_round_trip(label):
    assert RunConfig.parse(label).label() == label


def test_fields_and_target_args():
    c = RunConfig.parse("copy_strided stride=8 n=1024 fp32")
    assert (c.family, c.stride, c.n, c.elem_bytes) == ("copy_strided", 8, 1024, 4) and c == copy_run(1024, "fp32", 8)
    assert target_args(c) == ["--stride", "8", "--n", "1024", "--dtype", "fp32"]
    a = RunConfig.parse("tiled shape=1,2,48,32 fp16 causal")
    assert a.fields()["variant"] == "tiled" and a.fields()["N"] == 48 and "--causal" in target_args(a)
    m = RunConfig.parse("matmul size=8,4,2 bf16").fields()
    assert (m["M"], m["N"], m["K"], m["elem_bytes"]) == (8, 4, 2, ELEM_BYTES["bf16"])


def test_every_label_in_the_recorded_files_parses():
    files = sorted(DATA.glob("ncu_*.csv"))
    assert files
    for f in files:
        for b in ncu.read_blocks(f.read_text()):
            if b["label"]:
                assert RunConfig.parse(b["label"]).label() == b["label"]


@pytest.mark.parametrize("label, match", [
    ("conv shape=1", "'conv shape=1' is not one the recorder writes"),
    ("copy n=12", "lacks \\['dtype'\\]"),
    ("matmul size=1,2 fp16", "lacks a shape of 3"),
    ("copy n=12 fp64", "word 'fp64' is not understood"),
    ("", "expected e.g."),
])
def test_bad_labels(label, match):
    with pytest.raises(ValueError, match=match):
        RunConfig.parse(label)


def test_block_writer_and_reader_agree():
    text = ncu.config_block("copy n=8 fp32", "ncu --csv x", '"ID","Kernel Name"\n') + \
        ncu.config_block("matmul size=2,2,2 fp16", "ncu --csv y", '"ID","Kernel Name"\n')
    assert [(b["label"], b["command"]) for b in ncu.read_blocks(text)] == [
        ("copy n=8 fp32", "ncu --csv x"), ("matmul size=2,2,2 fp16", "ncu --csv y")]
    assert ncu.command_of(text, "matmul") == "ncu --csv y" and ncu.command_of(text, "conv") is None
    with pytest.raises(ValueError, match="single lines"):
        ncu.config_block("a\nb", "c", "")


def test_profile_runs_joins_one_block_per_run_and_part(monkeypatch):
    calls = []

    def fake_run(target, regex, metrics, launch_count):
        calls.append((tuple(target), regex, tuple(metrics)))
        return f'"ID","Kernel Name"\n"0","{target[1]}"\n'

    monkeypatch.setattr(NR, "run_ncu", fake_run)
    runs = [copy_run(64, "fp32"), copy_run(64, "fp32", 8)]
    texts = NR.profile_runs(runs, {"counters": ncu.TIME + ncu.DRAM, "stalls": ncu.TIME + ncu.STALLS})
    assert len(calls) == 4 and calls[1][2][1].startswith("smsp__pcsamp")
    for part in ("counters", "stalls"):
        assert [b["label"] for b in ncu.read_blocks(texts[part])] == [r.label() for r in runs]
        assert "--stride 8" in ncu.command_of(texts[part], "stride=8")
