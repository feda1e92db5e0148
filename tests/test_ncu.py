"""ncu: the raw-CSV parser (real recorded files and edge cases), derived views with hand-computed
answers, the runner's errors through a fake `ncu` on PATH, the command line, nsys, and the target."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from infralens_lab.measure import ncu as NR
from infralens_lab.measure import nsys, target
from infralens_lab.parse import ncu

DATA = Path(__file__).parent / "data"

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","device__attribute_max_threads_per_block","dram__bytes_read.sum","dram__bytes_write.sum",'
          '"gpu__time_duration.sum","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",'
          '"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","launch__grid_size",'
          '"smsp__pcsamp_warps_issue_stalled_long_scoreboard","smsp__pcsamp_warps_issue_stalled_selected",'
          '"smsp__pcsamp_warps_issue_stalled_wait","smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued"')
UNITS = '"","","","","","","","","","","","","byte","byte","ns","","sector","","","","",""'
ROW0 = ('"0","4242","python3.12","127.0.0.1","copy_strided","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","1,024",'
        '"536,870,912","67,108,864","1,234,567","524,288","16,777,216","4,096","800","150","50","700"')
ROW1 = ('"1","4242","python3.12","127.0.0.1","copy_strided","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","1,024",'
        '"268,435,456","67,108,864","617,283.5","524,288","8,388,608","4,096","n/a","0","0","0"')
SYNTHETIC = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
    "program says hello",
    '==PROF== Profiling "copy_strided" - 0: 0%....50%....100% - 9 passes',
    '==PROF== Profiling "copy_strided" - 1: 0%....50%....100% - 9 passes',
    "==PROF== Disconnected from process 4242",
    HEADER, UNITS, ROW0, ROW1, ""])


def test_parse_synthetic_exact():
    df = ncu.parse_raw_csv(SYNTHETIC)
    # 10 metric columns (device__attribute_* dropped) x 2 launches
    assert len(df) == 20
    assert sorted(df["launch"].unique()) == [0, 1] and df["kernel"].unique().tolist() == ["copy_strided"]
    assert set(df["config"]) == {""}
    v = df.set_index(["launch", "metric"])
    assert v.loc[(0, "dram__bytes_read.sum"), "value"] == 536_870_912  # thousands separators stripped
    assert v.loc[(0, "dram__bytes_read.sum"), "unit"] == "byte"
    assert v.loc[(0, "dram__bytes_read.sum"), "text"] == "536,870,912"
    assert v.loc[(1, "gpu__time_duration.sum"), "value"] == 617_283.5
    assert v.loc[(0, "launch__grid_size"), "value"] == 4096
    assert v.loc[(1, "smsp__pcsamp_warps_issue_stalled_long_scoreboard"), "value"] != v.loc[
        (1, "smsp__pcsamp_warps_issue_stalled_long_scoreboard"), "value"]  # "n/a" -> NaN
    with_attrs = ncu.parse_raw_csv(SYNTHETIC, device_attributes=True)
    assert len(with_attrs) == 22


def test_views_hand_computed():
    df = ncu.parse_raw_csv(SYNTHETIC)
    s = ncu.sectors_per_request(df)
    assert s["sectors_per_request"].tolist() == [32.0, 16.0]  # 16,777,216 / 524,288 and 8,388,608 / 524,288
    d = ncu.dram_bytes(df, useful_bytes=67_108_864)
    assert d["read_over_useful"].tolist() == [8.0, 4.0]
    assert d["total_bytes"].tolist() == [603_979_776, 335_544_320]
    sol = ncu.speed_of_light(df)
    assert sol["time_ns"].tolist() == [1_234_567, 617_283.5]
    assert sol["sm_pct"].isna().all()  # not in this CSV: NaN, not an error
    st = ncu.stall_breakdown(df)
    first = st[st["launch"] == 0]
    assert first["reason"].tolist() == ["long_scoreboard", "selected", "wait"]  # _not_issued excluded, largest first
    assert first["share"].tolist() == pytest.approx([0.8, 0.15, 0.05])
    summary = ncu.summary(df)
    assert len(summary) == 2 and {"time_ns", "read_bytes", "sectors_per_request", "l2_hit_pct"} <= set(summary.columns)


def test_config_blocks_and_program_lines_before_header():
    text = (f"{ncu.CONFIG_MARK} stride=8\n==INFRALENS== command: ncu ...\nsome program print\n{HEADER}\n{UNITS}\n{ROW0}\n"
            f"{ncu.CONFIG_MARK} stride=4\n==PROF== Connected\n{HEADER}\n{UNITS}\n{ROW1}\n")
    df = ncu.parse_raw_csv(text)
    assert df.groupby("config")["launch"].unique().to_dict() == {"stride=4": [1], "stride=8": [0]}
    w = ncu.wide(df, ["dram__bytes_read.sum"])
    assert w.set_index("config")["dram__bytes_read.sum"].to_dict() == {"stride=8": 536_870_912, "stride=4": 268_435_456}
    d = ncu.dram_bytes(df, useful_bytes={"stride=8": 67_108_864, "stride=4": 67_108_864})
    assert d["read_over_useful"].tolist() == [8.0, 4.0]


def test_no_kernels_warning_raises():
    text = "==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n==PROF== Disconnected\n"
    with pytest.raises(ncu.NcuNoKernels, match="no kernel") as e:
        ncu.parse_raw_csv(text)
    assert "regex" in e.value.fix


def test_permission_error_output_raises_with_fix():
    text = ("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
            "access NVIDIA GPU Performance Counters on the target device 0.\n")
    with pytest.raises(ncu.NcuPermissionError) as e:
        ncu.parse_raw_csv(text)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in e.value.fix and "sudo" in e.value.fix


@pytest.mark.parametrize("text, match", [
    ("hello world\n", "no ncu CSV header"),
    (f"{HEADER}\n", "header without a units row"),
    (f"{HEADER}\n{UNITS}\n", "no launch rows"),
    (f"{HEADER}\n{UNITS}\n\"0\",\"1\"\n", "2 fields, header has 22"),
    ('"ID","Foo"\n"",""\n"0","1"\n', "header lacks"),
])
def test_csv_that_is_not_ncu_raw(text, match):
    with pytest.raises(ncu.NcuCsvError, match=match):
        ncu.parse_raw_csv(text)


def test_parse_rejects_non_text():
    with pytest.raises(TypeError, match="expected str"):
        ncu.parse_raw_csv(b"bytes")


# ---------------------------------------------------------------- real recorded CSVs
def _expected():
    p = DATA / "ncu_expected.json"
    return json.loads(p.read_text()) if p.is_file() else {}


@pytest.mark.parametrize("name", ["ncu_copies.csv", "ncu_copies_stalls.csv", "ncu_attention.csv", "ncu_matmul.csv"])
def test_real_csv_exact_counts(name):
    exp = _expected().get(name)
    if exp is None or not (DATA / name).is_file():
        pytest.skip(f"tests/data/{name} not recorded yet")
    df = ncu.parse_raw_csv((DATA / name).read_text())
    assert len(df) == exp["rows"]
    assert sorted(df["kernel"].unique()) == exp["kernels"]
    assert len(df[["config", "kernel", "launch"]].drop_duplicates()) == exp["launches"]
    assert df["config"].nunique() == exp["configs"]
    units = df.drop_duplicates("metric").set_index("metric")["unit"]
    for metric, unit in exp["units"].items():
        assert units[metric] == unit
    assert df["value"].notna().sum() == exp["numeric"]


def test_real_copies_csv_tells_the_coalescing_story():
    if not (DATA / "ncu_copies.csv").is_file():
        pytest.skip("tests/data/ncu_copies.csv not recorded yet")
    df = ncu.parse_raw_csv((DATA / "ncu_copies.csv").read_text())
    s = ncu.sectors_per_request(df).set_index("config")["sectors_per_request"]
    coalesced = next(c for c in s.index if c.startswith("copy n="))
    strided8 = next(c for c in s.index if "stride=8 " in c)
    # Triton's 128-bit loads: 16 sectors per request coalesced; 32 once every thread has its own sector
    assert s[coalesced] == pytest.approx(16, rel=0.05)
    assert s[strided8] == pytest.approx(32, rel=0.05)
    d = ncu.dram_bytes(df).set_index("config")["read_bytes"]
    assert d[strided8] > 4 * d[coalesced] / 2  # the stride-8 copy reads several times its useful bytes


def test_real_stalls_csv_long_scoreboard_dominates_coalesced_copy():
    if not (DATA / "ncu_copies_stalls.csv").is_file():
        pytest.skip("tests/data/ncu_copies_stalls.csv not recorded yet")
    from infralens_lab.analysis.stalls import dominant

    st = ncu.stall_breakdown(ncu.parse_raw_csv((DATA / "ncu_copies_stalls.csv").read_text()))
    first = st[st["config"] == st["config"].iloc[0]]
    assert first["share"].sum() == pytest.approx(1.0)
    assert dominant(first) == "long_scoreboard"


# ---------------------------------------------------------------- runner, through a fake ncu
def fake_ncu(tmp_path, monkeypatch, body: str) -> Path:
    p = tmp_path / "ncu"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    monkeypatch.delenv("INFRALENS_NCU", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return p


ARGS = (["--kernel", "copy"], "copy_coalesced")


def test_runner_returns_csv_text(tmp_path, monkeypatch):
    csv_file = tmp_path / "out.csv"
    csv_file.write_text(SYNTHETIC)
    fake_ncu(tmp_path, monkeypatch, f'cat "{csv_file}"')
    text = NR.run_ncu(*ARGS, metrics=ncu.TIME)
    assert len(ncu.parse_raw_csv(text)) == 20


@pytest.mark.parametrize("body, error, needle", [
    ('echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission"; exit 1', ncu.NcuPermissionError,
     "NVreg_RestrictProfilingToAdminUsers"),
    ('echo "==PROF== Connected"; echo "==WARNING== No kernels were profiled."', ncu.NcuNoKernels, "launch-skip"),
    ('echo "==ERROR== Failed to find metric gpu__time_duration.sum"; exit 1', ncu.NcuMetricError, "--query-metrics"),
    ('echo "RuntimeError: No CUDA GPUs are available" >&2; echo "==ERROR== no CUDA-capable device is detected"; exit 1',
     ncu.NcuNoGpu, "GPU machine"),
    ('echo "==ERROR== The application returned an error code (1)."; exit 1', ncu.NcuFailed, "by hand"),
    ('echo "==PROF== Disconnected"', ncu.NcuCsvError, "by hand"),
])
def test_runner_errors_are_explained(tmp_path, monkeypatch, body, error, needle):
    fake_ncu(tmp_path, monkeypatch, body)
    with pytest.raises(error) as e:
        NR.run_ncu(*ARGS, metrics=ncu.TIME)
    assert needle in e.value.fix
    assert "Traceback" not in str(e.value)
    if error is ncu.NcuMetricError:
        assert e.value.metrics == ["gpu__time_duration.sum"]


def test_runner_timeout(tmp_path, monkeypatch):
    fake_ncu(tmp_path, monkeypatch, "sleep 5")
    with pytest.raises(ncu.NcuTimeout, match="within 1 s"):
        NR.run_ncu(*ARGS, metrics=ncu.TIME, timeout=1)


def test_runner_without_ncu(tmp_path, monkeypatch):
    monkeypatch.delenv("INFRALENS_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ncu.NcuNotFound) as e:
        NR.run_ncu(*ARGS, metrics=ncu.TIME)
    assert "PATH" in e.value.fix and "INFRALENS_NCU" in e.value.fix
    monkeypatch.setenv("INFRALENS_NCU", str(tmp_path / "nope"))
    with pytest.raises(ncu.NcuNotFound):
        NR.run_ncu(*ARGS, metrics=ncu.TIME)


def test_command_line_is_exact():
    cmd = NR.ncu_command(["--kernel", "copy_strided", "--stride", "8"], "copy_strided", metrics=ncu.DRAM,
                        launch_skip=2, launch_count=3, python="python3")
    assert cmd == ["ncu", "--csv", "--page", "raw", "--clock-control", "none", "--kernel-name", "regex:copy_strided",
                   "--nvtx", "--nvtx-include", "infralens/", "--launch-skip", "2", "--launch-count", "3",
                   "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum",
                   "python3", "-m", "infralens_lab", "target", "--kernel", "copy_strided", "--stride", "8"]
    line = NR.command_line(["--kernel", "naive"], "naive_", sections=["SpeedOfLight"], nvtx=False, launch_count=None)
    assert "--section SpeedOfLight" in line and "--nvtx" not in line and "--launch-count" not in line


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(kernel_regex=""), ValueError, "non-empty"),
    (dict(kernel_regex="copy", metrics=None), ValueError, "neither metrics nor sections"),
    (dict(kernel_regex="copy", launch_skip=-1), ValueError, "launch_skip=-1"),
    (dict(kernel_regex="copy", launch_count=0), ValueError, "launch_count=0"),
])
def test_command_rejects_bad_arguments(kwargs, exc, match):
    args = dict(metrics=ncu.TIME)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        NR.ncu_command(["--kernel", "copy"], **args)


# ---------------------------------------------------------------- nsys
def test_nsys_unavailable_points_to_torch_profiler(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(nsys.NsysUnavailable) as e:
        nsys.run_nsys(["--kernel", "copy"])
    assert "torch.profiler" in e.value.fix and "not on PATH" in e.value.message
    line = nsys.command_line(["--kernel", "tiled"])
    assert line.splitlines()[0].startswith("nsys profile --trace cuda,nvtx,osrt")
    assert "nsys stats" in line.splitlines()[1] and "cuda_gpu_kern_sum" in line


# ---------------------------------------------------------------- target
def test_launch_window_counts_launches():
    assert target.launch_window("naive", warmup=2, iters=3) == ("naive_", 6, 9)
    assert target.launch_window("copy_strided", 1, 1) == ("copy_strided", 1, 1)
    assert target.launch_window("matmul", 1, 1) == (".", 0, None)
    with pytest.raises(ValueError, match="expected one of"):
        target.launch_window("bogus", 1, 1)


@pytest.mark.parametrize("argv", [
    ["--kernel", "copy_strided", "--stride", "3", "--n", "257"],
    ["--kernel", "naive", "--shape", "1,2,33,16", "--causal"],
    ["--kernel", "matmul", "--size", "33,17,9", "--dtype", "fp32"],
])
def test_target_runs_and_prints_nothing(argv, capsys):
    assert target.main([*argv, "--warmup", "1", "--iters", "1"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("argv", [["--kernel", "tiled", "--shape", "1,2,3"], ["--kernel", "matmul", "--size", "0,1,1"],
                                  ["--kernel", "nope"]])
def test_target_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as e:
        target.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "expected" in err or "invalid choice" in err


def test_target_rejects_bad_counts(capsys):
    assert target.main(["--kernel", "copy", "--iters", "0"]) == 2
    assert "--iters is 0; expected an int >= 1" in capsys.readouterr().err


def test_short_name_regex_strips_templates_and_namespaces():
    from infralens_lab.parse.ncu import short_name_regex

    assert short_name_regex("void at::native::vectorized_elementwise_kernel<4, at::native::F>(int, F)") \
        == "vectorized_elementwise_kernel"
    assert short_name_regex("attn_fwd_fast") == "attn_fwd_fast"
    with pytest.raises(ValueError, match="non-empty string"):
        short_name_regex("  ")


def test_scheduler_statistics_are_requested_and_read():
    from infralens_lab import record

    for m in ncu.SCHEDULER:
        assert m in record.ATTN_METRICS
    text = ('"ID","Process ID","Process Name","Host Name","Kernel Name","' + '","'.join(ncu.SCHEDULER) + '"\n'
            '"","","","","","%","warp","warp"\n"0","1","p","h","k","12.5","0.2","7.9"\n')
    s = ncu.scheduler(ncu.parse_raw_csv(text)).iloc[0]
    assert (s["issue_active_pct"], s["eligible_warps"], s["active_warps"]) == (12.5, 0.2, 7.9)
    with pytest.raises(ncu.NcuCsvError, match="scheduler: the CSV has none of"):
        ncu.scheduler(ncu.parse_raw_csv(SYNTHETIC))
