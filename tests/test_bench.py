"""bench: table formatting and ratios on a synthetic result (CPU), refusal in interpreter mode."""
import json

import pytest

from infralens_lab import bench
from infralens_lab.device import is_gpu


def _synthetic():
    copies = [
        {"variant": "torch_copy_", "dtype": "float32", "stride": 1, "n_in": 2**28, "n_out": 2**28,
         "useful_bytes": 2**31, "median_ms": 0.5, "useful_tbps": 4.0, "predicted_fraction": None,
         "measured_fraction": None, "model_sectors_per_request": 16, "correct": True},
        {"variant": "coalesced", "dtype": "float32", "stride": 1, "n_in": 2**28, "n_out": 2**28,
         "useful_bytes": 2**31, "median_ms": 0.5, "useful_tbps": 3.96, "predicted_fraction": None,
         "measured_fraction": None, "model_sectors_per_request": 16, "correct": True},
        {"variant": "strided", "dtype": "float32", "stride": 8, "n_in": 2**28, "n_out": 2**25,
         "useful_bytes": 2**28, "median_ms": 0.3, "useful_tbps": 0.88, "predicted_fraction": 2 / 9,
         "measured_fraction": 0.88 / 3.96, "model_sectors_per_request": 32, "correct": False},
    ]
    shape = [4, 16, 4096, 64]
    attn = [dict(shape=shape, dtype="float16", causal=False, variant=v, median_ms=ms, tflops=t, rel_err=1e-3,
                 correct=True, config=None) for v, ms, t in
            [("sdpa_default", 0.16, 400.0), ("naive", 2.5, 25.0), ("tiled", 0.2, 320.0), ("tiled_fast", 0.17, 380.0),
             ("naive_torch", 8.0, 5.0)]]
    attn[3]["config"] = {"block_m": 128, "block_n": 64, "num_warps": 4, "num_stages": 3, "maxnreg": 128}
    skipped = [dict(shape=[1, 16, 16384, 128], dtype="float16", causal=False, variant="naive",
                    reason="needs 24.0 GiB for S and P, 10.0 GiB free")]
    result = {"meta": {"gpu": "NVIDIA Test GPU 80GB", "torch": "2.x", "triton": "3.6.0",
                       "date_utc": "2026-11-22T10:00:00Z"},
              "copies": copies, "attention": attn, "skipped": skipped}
    result["ratios"] = bench.compute_ratios(copies, attn)
    return result


def test_ratios_from_rows():
    r = {x["name"]: x for x in _synthetic()["ratios"]}
    assert r["coalesced / copy_ (float32)"]["value"] == pytest.approx(0.99)
    assert r["coalesced / copy_ (float32)"]["met"] is True
    fast = r["tiled_fast / sdpa_default @ 4x16x4096x64 float16"]
    assert fast["value"] == pytest.approx(0.95) and fast["target"] == 0.85 and fast["met"] is True
    assert r["tiled / sdpa_default @ 4x16x4096x64 float16"]["target"] is None
    assert r["tiled_fast / naive @ 4x16x4096x64 float16"]["value"] == pytest.approx(15.2)
    assert r["tiled_fast / naive_torch @ 4x16x4096x64 float16"]["value"] == pytest.approx(76.0)
    assert r["tiled_fast / naive_torch @ 4x16x4096x64 float16"]["met"] is True
    assert "coalesced / copy_ (float16)" not in r  # no float16 rows, no ratio
    # the naive floor needs a float16 torch copy_ row; this result has float32 copies only
    assert not any(name.startswith("naive floor") for name in r)


def test_naive_floor_is_model_bytes_over_copy_bandwidth():
    # (4,16,4096,64) fp16: S 4 B written + read, P 2 B written + read per score (12 B x 4*16*4096^2
    # = 12.885 GB), plus Q, K, V read and O written (4 x 33.6 MB); at 4.0 TB/s that is 3.255 ms.
    copies = [{"variant": "torch_copy_", "dtype": "float16", "useful_tbps": 4.0}]
    floor = bench.naive_floor((4, 16, 4096, 64), "float16", False, copies)
    scores = 4 * 16 * 4096 ** 2
    nbytes = 12 * scores + 4 * 4 * 16 * 4096 * 64 * 2
    assert floor["bytes"] == nbytes
    assert floor["ms"] == pytest.approx(nbytes / 4.0e12 * 1e3)
    assert "4.00 TB/s" in floor["note"]
    assert bench.naive_floor((4, 16, 4096, 64), "float16", False, []) is None
    attn = [dict(shape=[4, 16, 4096, 64], dtype="float16", causal=False, variant="tiled_fast", median_ms=0.65,
                 tflops=423.0)]
    r = {x["name"]: x for x in bench.compute_ratios(copies, attn)}
    row = r["naive floor / tiled_fast @ 4x16x4096x64 float16"]
    assert row["value"] == pytest.approx(floor["ms"] / 0.65) and row["target"] is None
    assert row["note"] == floor["note"]


def test_format_table_is_one_table():
    text = bench.format_table(_synthetic())
    lines = text.splitlines()
    assert lines[0].startswith("InfraLens bench on NVIDIA Test GPU 80GB")
    assert lines[1].split() == ["section", "case", "variant", "median", "ms", "rate", "note"]
    assert set(lines[2].replace(" ", "")) == {"-"}
    assert len(lines) == 3 + 3 + 5 + 1 + len(_synthetic()["ratios"])
    assert any("copy_strided s=8" in ln and "0.88 TB/s" in ln and "(model 0.22x)" in ln and "WRONG OUTPUT" in ln
               for ln in lines)
    assert any("tiled_fast" in ln and "380.0 TFLOP/s" in ln and ln.endswith("BM128 BN64 w4 s3 maxnreg 128")
               for ln in (x.rstrip() for x in lines))
    ws = _synthetic()
    ws["attention"][3]["config"] = {"block_m": 256, "block_n": 64, "num_warps": 4, "num_stages": 2, "maxnreg": None,
                                    "ws": True}
    assert any(ln.rstrip().endswith("BM256 BN64 w4 s2 ws") for ln in bench.format_table(ws).splitlines())
    assert any("skipped" in ln and "needs 24.0 GiB" in ln for ln in lines)
    assert any(ln.startswith("ratio") and "0.99x" in ln and "target >= 0.97: met" in ln for ln in lines)


def test_format_table_says_which_fast_variant_ran():
    """The line under the title names the fast attention variant and its reason (kernels.arch), for any GPU class."""
    from infralens_lab.kernels import arch
    for cc in arch.ARCHS:
        name, reason = arch.attention_variant(cc)
        res = {**_synthetic(), "meta": {**_synthetic()["meta"], "fast_variant": name, "fast_variant_reason": reason}}
        assert bench.format_table(res).splitlines()[1] == f"tiled_fast variant {name}: {reason}"
    assert bench.format_table(_synthetic()).splitlines()[1].split()[0] == "section"  # older records: no line


def test_record_into_writes_bench_record():
    class Writer:
        def __init__(self):
            self.calls = []

        def write(self, name, values, units=None, notes=""):
            self.calls.append((name, values, units))

    w, res = Writer(), _synthetic()
    assert bench.record_into(w, result=res) is res
    (name, values, units), = w.calls
    assert name == "bench" and values is res and "tflops" in units
    json.dumps(values)  # JSON-shaped


@pytest.mark.skipif(is_gpu(), reason="on a GPU bench really runs")
def test_bench_refuses_in_interpreter(capsys):
    assert bench.main([]) == 2
    assert "timings mean nothing" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="interpreter mode"):
        bench.run_benchmark(quick=True)


@pytest.mark.parametrize("causal", [False, True])
def test_naive_torch_is_attention(causal):
    # Plain torch, so it runs on the CPU too: fresh random inputs, odd N, against the float32 reference.
    import torch

    from infralens_lab.kernels.reference import attention_ref

    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, 37, 16, generator=g) for _ in range(3))
    # fp32 inputs and fp32 math in both: only summation order differs
    torch.testing.assert_close(bench.naive_torch(q, k, v, causal), attention_ref(q, k, v, causal=causal),
                               atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- --cases issue31
def test_issue31_case_set_is_the_issue_shapes():
    # Issue 31's table: (4,16,4096,64), (4,16,4096,128), (1,16,16384,128), (8,16,8192,128), causal and bf16
    # (4,16,4096,64); plus the full set's bf16 and causal D = 128 cases, which the same goal covers.
    cs = bench.CASE_SETS["issue31"]
    assert cs.copies is False
    assert set(cs.attention) == {((4, 16, 4096, 64), "float16", False), ((4, 16, 4096, 128), "float16", False),
                                 ((1, 16, 16384, 128), "float16", False), ((8, 16, 8192, 128), "float16", False),
                                 ((4, 16, 4096, 64), "float16", True), ((4, 16, 4096, 64), "bfloat16", False),
                                 ((4, 16, 4096, 128), "bfloat16", False), ((4, 16, 4096, 128), "float16", True)}
    assert len(cs.attention) == 8
    assert set(bench.ATTN_CASES) <= set(cs.attention)  # every attention case of the full bench is in it
    full = bench.CASE_SETS["full"]
    assert full.copies and full.attention is bench.ATTN_CASES and full.variants is None


def test_attention_variants_selection():
    every = [n for n, _ in bench.attention_variants()]
    assert every == ["sdpa_default", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "naive", "tiled", "tiled_fast",
                     "naive_torch"]
    picked = [n for n, _ in bench.attention_variants(bench.CASE_SETS["issue31"].variants)]
    # SDPA's FA2 path beside cuDNN, and issue 42's Gluon kernel (opt-in: the full set keeps its rows)
    assert picked == ["sdpa_default", "sdpa_flash", "sdpa_cudnn", "tiled_fast", "gluon"]
    assert "gluon" in bench.OPT_IN_VARIANTS and "gluon" not in every
    assert bench.kernel_of("gluon").startswith("attn_fwd_gluon (pingpong: consumer0 4 warps, consumer1 4 warps, "
                                               "producer 1 warps; 2 K/V stages of 128 keys)")
    assert bench.kernel_of("sdpa_cudnn") == "torch SDPA, cudnn backend only"
    assert [n for n, _ in bench.attention_variants(("tiled_fast",))] == ["sdpa_default", "tiled_fast"]
    with pytest.raises(ValueError, match=r"attention variants \['flash3'\] are unknown, expected names from"):
        bench.attention_variants(("tiled_fast", "flash3"))


def test_issue31_result_gives_one_ratio_per_case_and_one_table():
    # What a --cases issue31 run returns: no copies, four variants per case; the ratios are tiled_fast over
    # SDPA default per case, nothing that needs a copy or a naive row.
    attn = []
    for shape, dt, causal in bench.ATTN_CASES_ISSUE31:
        for v, t in (("sdpa_default", 500.0), ("sdpa_flash", 300.0), ("sdpa_cudnn", 510.0), ("tiled_fast", 450.0)):
            attn.append(dict(shape=list(shape), dtype=dt, causal=causal, variant=v, median_ms=1.0, tflops=t,
                             rel_err=1e-4, correct=True, config=None))
    ratios = bench.compute_ratios([], attn)
    assert len(ratios) == 8 and all(r["name"].startswith("tiled_fast / sdpa_default @ ") for r in ratios)
    assert all(r["value"] == pytest.approx(0.9) for r in ratios)
    assert [r["target"] for r in ratios].count(0.85) == 2  # the bench's own target: 4096, fp16, not causal
    text = bench.format_table({"meta": {"gpu": "G", "cases": "issue31"}, "copies": [], "attention": attn,
                               "skipped": [], "ratios": ratios})
    assert len(text.splitlines()) == 3 + len(attn) + 8
    assert not any(ln.startswith("copy") for ln in text.splitlines())


def test_partial_bench_is_never_recorded(capsys, tmp_path):
    # The recorded 'bench' is read whole by the labs and gates (copies and every case): a partial run is refused.
    assert bench.main(["--cases", "issue31", "--out", str(tmp_path / "rec")]) == 2
    assert "--cases issue31 times a part of it" in capsys.readouterr().err
    assert not (tmp_path / "rec").exists()
    with pytest.raises(ValueError, match=r"cases 'nope' is not a case set, expected one of \['full', 'issue31'\]"):
        bench.run_benchmark(cases="nope")
    with pytest.raises(SystemExit):
        bench.main(["--cases", "nope"])


def test_time_interleaved_rotates_the_first_variant_and_times_each_once_per_round():
    calls = []
    fns = {name: name for name in ("sdpa_default", "sdpa_cudnn", "tiled_fast")}

    def timer(fn):
        calls.append(fn)
        return float(len(calls))  # the position in the whole sequence, so each time says when it was taken

    times = bench.time_interleaved(fns, rounds=4, timer=timer)
    assert calls == ["sdpa_default", "sdpa_cudnn", "tiled_fast",  # round 0 starts at the first variant,
                     "sdpa_cudnn", "tiled_fast", "sdpa_default",  # round 1 at the second, ...
                     "tiled_fast", "sdpa_default", "sdpa_cudnn",
                     "sdpa_default", "sdpa_cudnn", "tiled_fast"]  # ... and round 3 wraps round
    assert times == {"sdpa_default": [1.0, 6.0, 8.0, 10.0], "sdpa_cudnn": [2.0, 4.0, 9.0, 11.0],
                     "tiled_fast": [3.0, 5.0, 7.0, 12.0]}
    assert bench._median(times["sdpa_default"]) == 7.0  # a row's time: the median over its rounds
    assert bench.time_interleaved({}, rounds=2, timer=timer) == {}
    with pytest.raises(ValueError, match=r"rounds = 0, expected an int >= 1"):
        bench.time_interleaved(fns, rounds=0, timer=timer)


def test_table_prints_the_rounds_and_each_rows_spread():
    res = _synthetic()
    res["meta"]["rounds"] = 3
    res["attention"][3]["round_ms"] = [0.16, 0.17, 0.18]  # (0.18 - 0.16) / 0.17 = 11.8 %
    res["copies"][0]["round_ms"] = [0.5, 0.5, 0.5]
    lines = bench.format_table(res).splitlines()
    assert lines[0].endswith("; medians over 3 interleaved rounds)")
    assert any("tiled_fast" in ln and "rel err 1.0e-03; spread 11.8%; BM128" in ln for ln in lines)
    assert any("torch copy_" in ln and ln.rstrip().endswith("spread 0.0%") for ln in lines)
    # a record written before the rounds (no round_ms, no meta rounds) prints as it did
    old = bench.format_table(_synthetic()).splitlines()
    assert old[0].endswith("; medians)") and not any("spread" in ln for ln in old)


@pytest.mark.skipif(is_gpu(), reason="on a GPU bench really runs")
def test_bench_refuses_rounds_below_one(capsys):
    assert bench.main(["--rounds", "0"]) == 2
    assert "--rounds 0, expected an int >= 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="rounds = 0"):
        bench.run_benchmark(rounds=0)
