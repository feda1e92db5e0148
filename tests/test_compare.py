"""Side-by-side comparisons across recorded GPUs, on the committed set and a synthetic second GPU."""
from __future__ import annotations

import copy

import pytest

from infralens_lab import evidence
from infralens_lab.analysis import compare

H200 = evidence.reference("nvidia-h200")
CEIL, BENCH = H200.load("ceilings").values, H200.load("bench").values


def _slower_memory(values, factor):
    """A second GPU with the same compute and `factor` times the memory bandwidth (test data only)."""
    v = copy.deepcopy(values)
    if "copy" in v:
        v["copy"]["bandwidth_bytes_per_s"] *= factor
    for r in v.get("copies", []):
        r["useful_tbps"] *= factor
    return v


def test_ceilings_ridge_is_rate_over_bandwidth():
    df = compare.ceilings({"H200": CEIL, "slow": _slower_memory(CEIL, 0.5)})
    h, s = df.iloc[0], df.iloc[1]
    assert h["ridge_bf16_FLOP_per_B"] == pytest.approx(h["bf16_TFLOP_s"] / h["copy_TB_s"])
    # same compute roof, half the bandwidth: the ridge doubles
    assert s["bf16_TFLOP_s"] == pytest.approx(h["bf16_TFLOP_s"])
    assert s["ridge_bf16_FLOP_per_B"] == pytest.approx(2 * h["ridge_bf16_FLOP_per_B"])
    assert 100 < h["ridge_bf16_FLOP_per_B"] < 300  # recorded H200: ~700 TFLOP/s over ~4.2 TB/s


def test_copy_family_fractions_are_per_gpu():
    df = compare.copy_family({"H200": BENCH, "slow": _slower_memory(BENCH, 0.7)})
    assert list(df["variant"])[:2] == ["torch_copy_", "coalesced"]
    coal = df[df["variant"] == "coalesced"].iloc[0]
    assert coal["H200 x coalesced"] == pytest.approx(1.0) and coal["slow x coalesced"] == pytest.approx(1.0)
    s8 = df[(df["variant"] == "strided") & (df["stride"] == 8)].iloc[0]
    assert s8["slow useful TB/s"] == pytest.approx(0.7 * s8["H200 useful TB/s"])
    assert s8["slow x coalesced"] == pytest.approx(s8["H200 x coalesced"])  # a property of the pattern
    assert s8["H200 x coalesced"] < 0.5


def test_attention_vs_sdpa_uses_each_gpus_own_sdpa():
    df = compare.attention_vs_sdpa({"H200": BENCH})
    row = df[(df["variant"] == "tiled_fast") & (df["case"] == "4x16x4096x128 float16")].iloc[0]
    sdpa = next(r["tflops"] for r in BENCH["attention"]
                if r["variant"] == "sdpa_default" and r["shape"] == [4, 16, 4096, 128]
                and r["dtype"] == "float16" and not r["causal"])
    assert row["H200 x SDPA"] == pytest.approx(row["H200 TFLOP/s"] / sdpa)
    assert set(df["variant"]) <= {"tiled", "tiled_fast"}


def test_bench_timing_notes_say_how_each_record_was_timed():
    h100 = evidence.reference("nvidia-h100-80gb-hbm3").load("bench").values
    assert h100["meta"]["rounds"] == 3 and all(len(r["round_ms"]) == 3 for r in h100["attention"])
    assert BENCH["meta"]["rounds"] == 3  # the H200 set of 2026-12-03 was timed the same way
    old = {"meta": {k: v for k, v in BENCH["meta"].items() if k != "rounds"},  # a record from before the rounds
           "attention": [{k: v for k, v in r.items() if k != "round_ms"} for r in BENCH["attention"]]}
    notes = compare.bench_timing_notes({"H100": h100, "H200": BENCH, "old": old, "X": {}})
    assert notes[0] == "H100: each row is the median of 3 interleaved rounds"
    assert notes[1] == "H200: each row is the median of 3 interleaved rounds"
    assert notes[2].startswith("old: one timing per variant in a fixed order")
    assert notes[3].startswith("X: one timing per variant")  # a record without meta reads as the old way


@pytest.mark.parametrize("fn, values, match", [
    (compare.ceilings, {"copy": {}}, r"have \['copy'\]; expected the keys \['copy', 'matmul'\]"),
    (compare.copy_family, {"attention": []}, r"expected the keys \['copies'\]"),
    (compare.attention_vs_sdpa, {"attention": []}, "no GPU has both 'sdpa_default'"),
])
def test_bad_records_are_named(fn, values, match):
    with pytest.raises(ValueError, match=match):
        fn({"X": values})


def test_copy_family_without_the_dtype():
    with pytest.raises(ValueError, match="no bfloat16 copies; dtypes there"):
        compare.copy_family({"H200": BENCH}, dtype="bfloat16")


def test_load_all_keys_by_gpu_default_first(tmp_path, monkeypatch):
    monkeypatch.delenv(evidence.REFERENCE_ENV, raising=False)
    got = evidence.load_all("bench")
    default = evidence.reference()  # data/recorded/DEFAULT names it
    assert next(iter(got)) == default.gpu and H200.gpu in got and got[H200.gpu].values == BENCH
    assert evidence.load_all("no_such_record") == {}


def test_ceiling_notes_are_computed():
    df = compare.ceilings({"H200": CEIL, "slow": _slower_memory(CEIL, 0.5)})
    (line,) = compare.ceiling_notes(df)
    assert "copy bandwidth 0.50x" in line and "matmul rates 1.00x to 1.00x" in line
    assert f"{df.iloc[0]['ridge_bf16_FLOP_per_B']:.0f} to {df.iloc[1]['ridge_bf16_FLOP_per_B']:.0f}" in line
    assert compare.ceiling_notes(df.iloc[:1]) == ["Only one recorded GPU: nothing to compare yet."]


def _kt(rows):
    import pandas as pd

    return pd.DataFrame(rows, columns=["label", "intensity", "flops_per_s", "above_ridge", "fraction_of_roof", "bound"])


def test_placement_by_hand():
    a = _kt([["k1", 200.0, 300e12, True, 0.5, "latency"], ["k2", 10.0, 30e12, False, 0.9, "memory"],
             ["only_a", 1.0, 1e12, False, 0.1, "latency"]])
    b = _kt([["k1", 200.0, 250e12, False, 0.7, "memory"], ["k2", 10.0, 20e12, False, 0.8, "memory"]])
    df = compare.placement({"A": a, "B": b})
    assert list(df["label"]) == ["k1", "k2"]  # kernels on every GPU only
    k1 = df.iloc[0]
    assert (k1["A roof"], k1["B roof"]) == ("compute", "memory") and k1["B TFLOP/s"] == pytest.approx(250)
    notes = compare.placement_notes(df)
    assert notes[0] == "k1: under the compute roof on A, memory roof on B (same kernel, same intensity; the ridge moved)"
    assert notes[1] == "memory-bound kernels (k2): B runs them at 0.67x to 0.67x the rate on A"


def test_placement_on_the_two_recorded_sets():
    from infralens_lab.labs_support import lab02

    tables = lab02.kernel_tables_by_gpu()
    df = compare.placement(tables)
    assert len(tables) == 2 and "matmul 8192³" in set(df["label"]) and "attn_fwd" in set(df["label"])
    # each table says which set it came from; a set without a kernel table (the DDP set) is neither a row nor a caption
    caps = [t.attrs["caption"] for t in tables.values()]
    assert all(c.startswith("Evidence: recorded") for c in caps) and not any("--only device,distributed" in c for c in caps)
    with pytest.raises(ValueError, match="lacks"):
        compare.placement({"X": df})
