"""ncu's Source page (counters per SASS instruction): the capture's command lines, a run through a fake ``ncu``,
the parser on SYNTHETIC CSV text that mirrors the documented layout (tests/source_fixture.py; no recording of
this page exists yet), its errors, and the recorder step that writes ``ncu_copies_source.csv``."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest
import source_fixture

from infralens_lab import record
from infralens_lab.evidence import EvidenceWriter, RecordedStore
from infralens_lab.measure import ncu as NR
from infralens_lab.parse import ncu as parse_ncu

TARGET = ["--kernel", "copy_strided", "--stride", "8", "--n", "1024", "--dtype", "fp32"]


# ------------------------------------------------------------------ command lines
def test_source_commands_profile_into_a_report_and_export_two_pages():
    profile, source, raw, inst = NR.source_commands(TARGET, "copy_strided", "/tmp/x/rep.ncu-rep", ncu="ncu",
                                                   python="py")
    assert "--csv" not in profile and "--page" not in profile  # pages are chosen at export
    for s in NR.SOURCE_SECTIONS:
        assert profile[profile.index(s) - 1] == "--section"
    assert profile[profile.index("--export") + 1] == "/tmp/x/rep"  # ncu adds .ncu-rep itself
    assert profile[profile.index("--clock-control") + 1] == "none" and "--force-overwrite" in profile
    assert profile[profile.index("--nvtx-include") + 1] == "infralens/"
    assert profile[-len(TARGET) - 4:-len(TARGET)] == ["py", "-m", "infralens_lab", "target"]
    assert profile[-len(TARGET):] == TARGET and profile.index("--export") < profile.index("py")
    assert source == ["ncu", "--import", "/tmp/x/rep.ncu-rep", "--csv", "--page", "source", "--print-source", "sass"]
    assert raw == ["ncu", "--import", "/tmp/x/rep.ncu-rep", "--csv", "--page", "raw"]
    assert inst == [*raw, "--print-metric-instances", "details"]
    counted = NR.source_commands(TARGET, "copy_strided", "r", launch_skip=1, nvtx=False, ncu="ncu", python="py")[0]
    assert "--nvtx" not in counted and counted[counted.index("--launch-skip") + 1] == "1"
    line = NR.source_command_line(TARGET, page="raw", kernel_regex="copy_strided")
    assert " ; " in line and line.endswith("--page raw") and "--export REPORT" in line
    with pytest.raises(ValueError, match="expected 'source', 'raw' or 'instances'"):
        NR.source_command_line(TARGET, page="details", kernel_regex="copy_strided")


def test_source_commands_reject_bad_filters():
    with pytest.raises(ValueError, match="kernel_regex"):
        NR.source_commands(TARGET, "", "r")
    with pytest.raises(ValueError, match="launch_count"):
        NR.source_commands(TARGET, "copy", "r", launch_count=0)


# ------------------------------------------------------------------ running (a fake ncu on PATH)
FAKE_NCU = r"""#!/bin/sh
# fake ncu for tests: --export X writes X.ncu-rep; --import prints a page
for a in "$@"; do
  if [ "$prev" = "--export" ]; then echo rep > "$a.ncu-rep"; echo "==PROF== Report: $a.ncu-rep"; fi
  if [ "$prev" = "--page" ]; then page="$a"; fi
  if [ "$prev" = "--import" ]; then rep="$a"; fi
  if [ "$a" = "--print-metric-instances" ]; then inst=1; fi
  prev="$a"
done
if [ -n "$rep" ]; then
  echo "$rep" > "$(dirname "$0")/last_report"
  if [ "$page" = "source" ]; then cat "$(dirname "$0")/source.csv"
  elif [ -n "$inst" ]; then echo '"ID","Kernel Name","sass__inst_executed_per_opcode"'; echo '"","","inst"'; echo '"0","copy_strided","3,000 (IMAD: 2,000; LDG: 1,000)"'
  else echo '"ID","Kernel Name","x__y.sum"'; echo '"","","n"'; echo '"0","copy_strided","1"'; fi
fi
exit 0
"""


def _fake_ncu(tmp_path, monkeypatch, source_text: str):
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU)
    ncu.chmod(ncu.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "source.csv").write_text(source_text)
    monkeypatch.setenv("INFRALENS_NCU", str(ncu))
    return tmp_path


def test_run_ncu_source_returns_both_pages_and_deletes_the_report(tmp_path, monkeypatch):
    d = _fake_ncu(tmp_path, monkeypatch, source_fixture.page("copy_strided", source_fixture.STRIDED))
    out = NR.run_ncu_source(TARGET, "copy_strided", timeout=30)
    assert set(out) == {"source", "raw", "instances"}
    census = parse_ncu.opcode_census(parse_ncu.parse_raw_csv(out["instances"]))
    assert census[["opcode", "executed"]].values.tolist() == [["IMAD", 2000.0], ["LDG", 1000.0]]
    assert len(parse_ncu.parse_source_csv(out["source"])) == len(source_fixture.STRIDED)
    assert parse_ncu.parse_raw_csv(out["raw"])["metric"].tolist() == ["x__y.sum"]
    rep = (d / "last_report").read_text().strip()
    assert rep.endswith(".ncu-rep") and not Path(rep).exists()  # the temporary report is gone


def test_run_ncu_source_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("INFRALENS_NCU", str(tmp_path / "no-such-ncu"))
    with pytest.raises(parse_ncu.NcuNotFound, match="names no file"):  # the doctor's message: the variable, not PATH
        NR.run_ncu_source(TARGET, "copy_strided")
    _fake_ncu(tmp_path, monkeypatch, "not a csv\n")
    with pytest.raises(parse_ncu.NcuCsvError, match="Source page header"):
        NR.run_ncu_source(TARGET, "copy_strided", timeout=30)


# ------------------------------------------------------------------ parsing (SYNTHETIC text)
def test_parse_source_csv_reads_every_instruction_of_every_block():
    df = parse_ncu.parse_source_csv(source_fixture.recorded_text())
    assert df["config"].unique().tolist() == ["copy n=67108864 fp32", "copy_strided stride=8 n=67108864 fp32"]
    assert df.groupby("config", sort=False).size().tolist() == [len(source_fixture.COALESCED), len(source_fixture.STRIDED)]
    assert df["kernel"].unique().tolist() == ["copy_coalesced", "copy_strided"]
    s = df[df["kernel"] == "copy_strided"].reset_index(drop=True)
    assert s["pc_offset"].tolist() == [16 * k for k in range(len(source_fixture.STRIDED))]
    assert s["sass"][5] == "@!P0 LDG.E R4, desc[UR6][R2.64]" and s["opcode"][5] == "LDG.E" and s["op"][5] == "LDG"
    assert s["inst_executed"].tolist() == [float(ex) for _, ex, _ in source_fixture.STRIDED]  # "4,000" read as 4000
    # the reason columns are ncu's stall_<label> ones, renamed to the package's reasons; (Not Issued) left out
    for label, reason in (("short_sb", "short_scoreboard"), ("mio", "mio_throttle"), ("drain", "drain"),
                          ("long_sb", "long_scoreboard"), ("lg", "lg_throttle"), ("selected", "selected")):
        assert s[reason].tolist() == [float(st.get(label, 0)) for _, _, st in source_fixture.STRIDED]
    reasons = [c for c in df.columns if c in parse_ncu.STALL_REASONS or c == "no_instruction" or c == "dispatch_stall"]
    assert (df[reasons].sum(axis=1) == df["samples"]).all()  # every sample has exactly one reason
    assert (df["samples_not_issued"] == df["samples"] - df["selected"]).all()


def test_parse_source_csv_accepts_older_labels_and_a_leading_number_column():
    old = source_fixture.page("copy_strided", source_fixture.STRIDED).replace("(All Samples)", "(All Cycles)")
    old = old.replace("(Not-issued Samples)", "(Not-issued Cycles)")
    lines = old.splitlines()
    lines[1] = '"#",' + lines[1]
    lines[2:] = [f'"{i}",' + ln for i, ln in enumerate(lines[2:], 1)]
    lines[2] = lines[2].replace(f'"{hex(0x7F0000001000)}"', f'"{0x7F0000001000}"')  # a decimal address
    df = parse_ncu.parse_source_csv("\n".join(lines))
    assert df["samples"].sum() == sum(sum(st.values()) for _, _, st in source_fixture.STRIDED)
    assert df["pc_offset"].tolist()[:2] == [0, 16] and len(df) == len(source_fixture.STRIDED)
    sass_named = parse_ncu.parse_source_csv(source_fixture.page("copy_strided", source_fixture.STRIDED).replace('"Source"', '"SASS"', 1))
    assert sass_named["sass"].tolist() == df["sass"].tolist()
    assert df["samples_not_issued"].notna().all()


def test_parse_source_csv_errors_name_what_was_seen_and_expected():
    with pytest.raises(TypeError, match="expected str"):
        parse_ncu.parse_source_csv(b"Address")
    raw = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n"0","k","1"\n'
    with pytest.raises(parse_ncu.NcuCsvError, match="raw page"):
        parse_ncu.parse_source_csv(raw)
    with pytest.raises(parse_ncu.NcuCsvError, match="--page source"):
        parse_ncu.parse_source_csv("hello\n")
    no_stalls = '"Address","Source","Instructions Executed"\n"0x10","EXIT","5"\n'
    with pytest.raises(parse_ncu.NcuCsvError) as e:
        parse_ncu.parse_source_csv(no_stalls)
    msg = str(e.value)
    assert "Warp Stall Sampling (All" in msg and "stall_<reason>" in msg and "'Instructions Executed'" in msg
    header_only = source_fixture.page("k", []).splitlines()
    with pytest.raises(parse_ncu.NcuCsvError, match="no instruction rows"):
        parse_ncu.parse_source_csv("\n".join(header_only))


# ------------------------------------------------------------------ the recorder step
class _Fake:
    def __init__(self, fail: dict):
        self.fail, self.calls = fail, []

    def __call__(self, target, kernel_regex, launch_skip=0, launch_count=1, nvtx=True, timeout=240.0):
        kind = target[1] + ("" if "--stride" not in target else target[target.index("--stride") + 1])
        self.calls.append((kind, nvtx))
        err = self.fail.get((kind, nvtx))
        if err is not None:
            raise err
        raw = '"ID","Kernel Name","x__y.sum"\n"","",""\n"0","k","1"\n'
        return {"source": source_fixture.page(kernel_regex, source_fixture.STRIDED), "raw": raw, "instances": raw}


def test_recorder_step_writes_both_files_and_falls_back_without_nvtx(tmp_path, monkeypatch):
    fake = _Fake({("copy_strided8", True): parse_ncu.NcuNoKernels("none in range"),
                  ("copy_strided32", True): parse_ncu.NcuFailed("ncu exited 1")})
    monkeypatch.setattr(NR, "run_ncu_source", fake)
    w = EvidenceWriter(tmp_path / "rec", "test")
    rec = record.Recorder(w, log=lambda m: None)
    assert "ncu_copies_source" in record.STEPS
    assert record.STEPS.index("ncu_copies_source") == record.STEPS.index("ncu_copies_stalls") + 1
    rec.run("ncu_copies_source")
    w.close()
    entry = rec.entries[-1]
    assert entry["status"] == "ok" and entry["detail"].startswith("2/3 captures ok") and "ncu exited 1" in entry["detail"]
    assert fake.calls == [("copy", True), ("copy_strided8", True), ("copy_strided8", False), ("copy_strided32", True)]
    assert rec.nvtx_ok is True  # learned from the first capture, as the other ncu steps learn it (Recorder._in_first_window)
    st = RecordedStore(tmp_path / "rec")
    df = parse_ncu.parse_source_csv(st.text("ncu_copies_source.csv"))
    assert df["config"].unique().tolist() == ["copy n=67108864 fp32", "copy_strided stride=8 n=67108864 fp32"]
    assert parse_ncu.command_of(st.text("ncu_copies_source.csv"), "stride=8").count("--page source") == 1
    assert not list((tmp_path / "rec").glob("*.ncu-rep"))
    assert len(parse_ncu.read_blocks(st.text("ncu_copies_source_raw.csv"))) == 2
    inst = st.text("ncu_copies_source_instances.csv")
    assert len(parse_ncu.read_blocks(inst)) == 2 and "--print-metric-instances details" in parse_ncu.command_of(inst, "stride=8")


def test_recorder_step_fails_soft_when_every_capture_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(NR, "run_ncu_source", _Fake({(k, v): parse_ncu.NcuNotFound("no ncu") for k in
                                                   ("copy", "copy_strided8", "copy_strided32") for v in (True, False)}))
    rec = record.Recorder(EvidenceWriter(tmp_path / "rec", "test"), log=lambda m: None)
    rec.run("ncu_copies_source")
    assert rec.entries[-1]["status"] == "failed" and "every ncu source capture failed" in rec.entries[-1]["detail"]


def test_opcode_census_reads_instance_values_and_refuses_a_plain_export():
    text = ('"ID","Kernel Name","sass__inst_executed_per_opcode"\n"","","inst"\n'
            '"0","copy_strided","9,000 (EXIT: 1,000; IMAD: 3,000; LDG: 4,000; S2R: 1,000)"\n')
    c = parse_ncu.opcode_census(parse_ncu.parse_raw_csv(text))
    assert dict(zip(c["opcode"], c["executed"], strict=True)) == {"EXIT": 1000, "IMAD": 3000, "LDG": 4000, "S2R": 1000}
    plain = text.replace("9,000 (EXIT: 1,000; IMAD: 3,000; LDG: 4,000; S2R: 1,000)", "9,000")
    with pytest.raises(parse_ncu.NcuCsvError, match="--print-metric-instances details"):
        parse_ncu.opcode_census(parse_ncu.parse_raw_csv(plain))
    with pytest.raises(parse_ncu.NcuCsvError, match="sass__inst_executed_per_opcode"):
        parse_ncu.opcode_census(parse_ncu.parse_raw_csv(text.replace("sass__inst_executed_per_opcode", "x__y.sum")))


# ------------------------------------------------------------------ the real recording, once there is one
def test_recorded_source_page_parses_and_matches_the_opcode_census():
    from infralens_lab import evidence
    from infralens_lab.analysis import sass

    try:
        st = evidence.reference()
    except evidence.EvidenceError:
        pytest.skip("no recorded evidence under data/recorded yet")
    if "ncu_copies_source.csv" not in st.files():
        pytest.skip("the recorded set has no ncu_copies_source.csv yet (recorder step ncu_copies_source)")
    df = parse_ncu.parse_source_csv(st.text("ncu_copies_source.csv"))
    assert set(df["kernel"]) <= {"copy_coalesced", "copy_strided"} and df["config"].nunique() >= 1
    for cfg, sub in df.groupby("config"):
        assert sub["samples"].sum() > 0 and sub["inst_executed"].sum() > 0, cfg
        assert {"short_scoreboard", "mio_throttle", "drain", "long_scoreboard"} <= set(df.columns)
        assert (sub["op"] == "EXIT").any() and (sub["op"] == "LDG").any(), cfg
    if "ncu_copies_source_instances.csv" in st.files():
        census = parse_ncu.opcode_census(parse_ncu.parse_raw_csv(st.text("ncu_copies_source_instances.csv")))
        agree = sass.census_agreement(df, census)
        assert agree["agree"].all(), agree[~agree["agree"]]
