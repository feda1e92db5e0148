"""tools/bench_three.py on a CPU: the summary across runs (medians, spreads, goals, the tuner's picks) from
bench results, and the runner with a fake bench that writes its JSON as the real one does."""
import json
import sys
import textwrap
from pathlib import Path

import pytest

from infralens_lab import bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import bench_three as b3

CASES = [((4, 16, 4096, 64), "float16", False), ((4, 16, 4096, 128), "float16", True)]


def _result(run: int, fast: tuple[float, float], cfgs=("BM128-BN128-w4-s3", "BM128-BN64-w4-s2")) -> dict:
    """A bench result as --cases issue31 writes it: SDPA at 500 TFLOP/s, flash 300, cuDNN 510, tiled_fast given."""
    attn = []
    for (shape, dt, causal), t, cfg in zip(CASES, fast, cfgs, strict=True):
        bm, bn, w, s = (int(x[2:] if x.startswith("BM") or x.startswith("BN") else x[1:]) for x in cfg.split("-"))
        for v, tf in (("sdpa_default", 500.0), ("sdpa_flash", 300.0), ("sdpa_cudnn", 510.0), ("tiled_fast", t)):
            attn.append(dict(shape=list(shape), dtype=dt, causal=causal, variant=v, median_ms=1.0, tflops=tf,
                             rel_err=1e-4, correct=True,
                             config={"block_m": bm, "block_n": bn, "num_warps": w, "num_stages": s, "maxnreg": None,
                                     "ws": False} if v == "tiled_fast" else None))
    return {"meta": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11", "triton": "3.6.0", "cases": "issue31",
                     "date_utc": f"2026-11-25T10:0{run}:00Z"},
            "copies": [], "attention": attn, "skipped": [], "ratios": bench.compute_ratios([], attn)}


def test_goal_of_issue_31():
    assert b3.issue31_goal("tiled_fast / sdpa_default @ 4x16x4096x64 bfloat16") == 1.0
    assert b3.issue31_goal("tiled_fast / sdpa_default @ 4x16x4096x64 float16 causal") == 0.95
    assert b3.issue31_goal("tiled_fast / sdpa_default @ 4x16x4096x128 float16 causal") == 0.95
    assert b3.issue31_goal("tiled_fast / sdpa_default @ 1x16x16384x128 float16") == 0.95
    assert b3.issue31_goal("tiled / sdpa_default @ 4x16x4096x64 float16") is None
    assert b3.issue31_goal("coalesced / copy_ (float32)") is None


def test_summary_medians_spreads_goals_and_picks():
    runs = [_result(1, (505.0, 480.0)), _result(2, (495.0, 470.0), cfgs=("BM128-BN128-w4-s3", "BM256-BN64-w8-s3")),
            _result(3, (500.0, 460.0))]
    s = b3.summarize(runs)
    r64, r128 = s["ratios"]
    assert r64["name"] == "tiled_fast / sdpa_default @ 4x16x4096x64 float16"
    assert r64["values"] == pytest.approx([1.01, 0.99, 1.0])
    assert (r64["median"], r64["min"], r64["max"]) == pytest.approx((1.0, 0.99, 1.01))
    assert r64["spread"] == pytest.approx(0.02)
    assert r64["target"] == 0.85 and r64["target_met"] is True and r64["goal"] == 1.0 and r64["goal_met"] is True
    assert r128["median"] == pytest.approx(0.94) and r128["goal"] == 0.95 and r128["goal_met"] is False
    assert r128["target"] is None and r128["target_met"] is None
    flash = next(x for x in s["vs_sdpa"] if x["variant"] == "sdpa_flash" and x["case"] == "4x16x4096x64 float16")
    assert flash["values"] == pytest.approx([0.6] * 3) and flash["spread"] == 0
    assert [x["variant"] for x in s["vs_sdpa"]] == ["sdpa_flash", "sdpa_cudnn", "tiled_fast"] * 2
    assert s["wrong"] == []
    assert s["configs"] == {"4x16x4096x64 float16": ["BM128-BN128-w4-s3"] * 3,
                            "4x16x4096x128 float16 causal": ["BM128-BN64-w4-s2", "BM256-BN64-w8-s3",
                                                             "BM128-BN64-w4-s2"]}
    text = b3.format_summary(s, [50.0, 30.0, 31.0])
    lines = text.splitlines()
    assert lines[0].startswith("bench in 3 processes on NVIDIA H100 80GB HBM3 (torch 2.11, triton 3.6.0, cases issue31")
    assert "wall seconds per process: 50, 30, 31 (total 111)" in text
    row = next(ln for ln in lines if ln.startswith("tiled_fast / sdpa_default @ 4x16x4096x128 float16 causal"))
    assert row.split()[7:13] == ["0.960", "0.940", "0.920", "0.940", "0.920-0.960", "(4.3%)"]
    assert row.endswith(">= 0.95: NOT met")
    assert any(ln.startswith("4x16x4096x128 float16 causal") and ln.rstrip().endswith("NO") for ln in lines)
    assert any(ln.startswith("4x16x4096x64 float16") and ln.rstrip().endswith("yes") for ln in lines)


def test_summary_with_a_run_missing_a_ratio_and_mixed_gpus():
    a, b = _result(1, (500.0, 480.0)), _result(2, (490.0, 470.0))
    b["ratios"] = b["ratios"][:1]
    b["meta"]["gpu"] = "NVIDIA H200"
    b["attention"][3].update(correct=False, rel_err=0.23)
    s = b3.summarize([a, b])
    assert s["wrong"] == ["run2 4x16x4096x64 float16 tiled_fast: rel err 2.3e-01 against sdpa_default"]
    assert "WRONG OUTPUT run2 4x16x4096x64 float16 tiled_fast" in b3.format_summary(s)
    r128 = s["ratios"][1]
    assert r128["values"] == [pytest.approx(0.96), None] and r128["n"] == 1 and r128["median"] == pytest.approx(0.96)
    assert "WARNING: the runs come from different GPUs" in b3.format_summary(s)
    with pytest.raises(ValueError, match="no runs to summarize"):
        b3.summarize([])


FAKE_BENCH = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    args = sys.argv[1:]
    out = Path(args[args.index("--json") + 1])
    n = int(out.stem[len("bench_run"):])
    if n == 2 and "--fail-second" in args:
        print("bench: refusing to run in interpreter mode", file=sys.stderr)
        sys.exit(2)
    out.write_text(json.dumps(json.loads(Path(sys.argv[0]).with_suffix(".json").read_text())[n - 1]))
    print("InfraLens bench on fake", args)
""")


def _fake(tmp_path, runs):
    script = tmp_path / "fake_bench.py"
    script.write_text(FAKE_BENCH)
    script.with_suffix(".json").write_text(json.dumps(runs))
    return [sys.executable, str(script)]


def test_run_three_runs_each_process_and_keeps_its_files(tmp_path):
    runs = [_result(i, (500.0 + i, 470.0)) for i in (1, 2, 3)]
    out = tmp_path / "out"
    recs = b3.run_three(out, ["--cases", "issue31"], 3, 60, command=_fake(tmp_path, runs))
    assert [r["rc"] for r in recs] == [0, 0, 0] and [r["json"] for r in recs] == runs
    assert all(r["seconds"] > 0 for r in recs)
    assert "['--cases', 'issue31', '--json'" in (out / "bench_run2.txt").read_text()
    assert sorted(p.name for p in out.iterdir()) == [f"bench_run{i}.{e}" for i in (1, 2, 3) for e in ("json", "txt")]


def test_run_three_records_a_failing_run(tmp_path):
    runs = [_result(i, (500.0, 470.0)) for i in (1, 2, 3)]
    recs = b3.run_three(tmp_path / "out", ["--fail-second"], 3, 60, command=_fake(tmp_path, runs))
    assert [r["rc"] for r in recs] == [0, 2, 0]
    assert recs[1]["json"] is None and "interpreter mode" in recs[1]["error"]
    assert recs[2]["json"] == runs[2]


def test_main_summarizes_saved_runs_and_refuses_bad_args(tmp_path, capsys):
    paths = []
    for i in (1, 2, 3):
        p = tmp_path / f"r{i}.json"
        p.write_text(json.dumps(_result(i, (500.0, 470.0))))
        paths.append(str(p))
    assert b3.main(["--summarize", *paths]) == 0
    text = capsys.readouterr().out
    assert "tiled_fast / sdpa_default @ 4x16x4096x64 float16" in text and "0.940-0.940 (0.0%)" in text
    with pytest.raises(SystemExit):
        b3.main(["--out", str(tmp_path / "o"), "--", "--json", "x.json"])
    assert "this tool writes $OUT/bench_runI.json itself" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        b3.main(["--runs", "0"])
