"""Lab 02 glue on synthetic ncu CSVs written in the recorder's layout (config blocks, header, units
row, thousands separators): FLOP counting, the tensor-counter check, predictions, bounds, copies,
the hierarchy view, and clear errors."""
from __future__ import annotations

import math
import re

import helpers
import pandas as pd
import pytest

from infralens_lab.analysis import counters
from infralens_lab.analysis import roofline_notes as NT
from infralens_lab.analysis import traffic as tr
from infralens_lab.analysis.hardware import Ceilings
from infralens_lab.device import is_gpu
from infralens_lab.kernels.check import matches
from infralens_lab.labs_support import lab02
from infralens_lab.parse.ncu import parse_raw_csv

T = 1e12
CEIL = Ceilings(gpu="NVIDIA H100 80GB HBM3", copy_bw=3.0 * T, fp32=50 * T, tf32=350 * T, fp16=600 * T, bf16=600 * T)


def ncu_block(label: str, launches: list[tuple[str, dict]], units: dict | None = None) -> str:
    """One recorder block (tests/helpers.py), values rounded to whole units as ncu prints counters."""
    return helpers.ncu_block(label, launches, fmt="{:,.0f}", units=units)


def _launch(time_ns, read, write, tensor=0, ffma=0, fadd=0, fmul=0, grid=None, l1=None, l2=None):
    d = {counters.TIME: time_ns, counters.DRAM_READ: read, counters.DRAM_WRITE: write, counters.TENSOR_OPS_NAMES[0]: tensor,
         counters.FLOP_METRICS["ffma"]: ffma, counters.FLOP_METRICS["fadd"]: fadd, counters.FLOP_METRICS["fmul"]: fmul}
    if grid is not None:
        d[counters.GRID] = grid
    if l1 is not None:
        d[counters.L1_BYTES], d[counters.L2_BYTES] = l1, l2
    return d


def matmul_csv(ops_per_flop: float = 1.0, sizes=(256, 1024, 4096)) -> str:
    blocks = []
    for n in sizes:
        flops = 2 * n ** 3
        dram = 3 * n * n * 2
        time_ns = max(flops / (500 * T), dram / (2.5 * T)) * 1e9 + 3000  # plus a fixed 3 us
        blocks.append(ncu_block(f"matmul size={n},{n},{n} fp16",
                                [("sm90_xmma_gemm_f16f16", _launch(time_ns, dram * 0.9, dram * 0.1,
                                                                   tensor=flops * ops_per_flop, l1=dram * 40,
                                                                   l2=dram * 8))]))
    return "".join(blocks)


def attention_csv(l1=True) -> str:
    B, H, N, D = 1, 8, 2048, 64
    naive = tr.attention_naive_traffic(B, H, N, D, 2)
    launches = []
    for t in naive:
        tensor = t.flops if t.kernel != "naive_softmax" else 0
        ffma = 0 if tensor else t.flops / 4
        launches.append((t.kernel, _launch(t.bytes / (2.4 * T) * 1e9, t.bytes_read, t.bytes_written,
                                           tensor=tensor, ffma=ffma, fadd=ffma, **({"l1": t.bytes * 3, "l2": t.bytes * 1.5}
                                                                                    if l1 else {}))))
    tiled = tr.attention_tiled_traffic(B, H, N, D, 2, block_m=128)
    tile_launch = _launch(tiled.flops / (300 * T) * 1e9, tiled.bytes_read / 4, tiled.bytes_written,
                          tensor=tiled.flops, ffma=1e6, grid=(N // 128) * B * H,
                          **({"l1": tiled.bytes * 2, "l2": tiled.bytes} if l1 else {}))
    return ncu_block(f"naive shape={B},{H},{N},{D} fp16", launches) + \
        ncu_block(f"tiled shape={B},{H},{N},{D} fp16", [("attn_fwd", tile_launch)])


def copies_csv() -> str:
    n = 1 << 24
    blocks = []
    for s in (1, 8):
        t = tr.copy_traffic(n, 4, s)
        kernel = "copy_coalesced" if s == 1 else "copy_strided"
        label = f"copy n={n} fp32" if s == 1 else f"copy_strided stride={s} n={n} fp32"
        blocks.append(ncu_block(label, [(kernel, _launch(t.bytes / (2.7 * T) * 1e9, t.bytes_read, t.bytes_written))]))
    return "".join(blocks)


class FakeStore:
    """The two RecordedStore methods lab02 reads, over in-memory CSVs."""

    def __init__(self, texts: dict[str, str]):
        self.texts = texts

    def files(self):
        return sorted(self.texts)

    def names(self):
        return []

    def text(self, name):
        return self.texts[name]


# ---------------------------------------------------------------- tests
def test_parse_config_labels_the_recorder_writes():
    m = counters.parse_config("matmul size=1024,512,256 fp16")
    assert {k: m[k] for k in ("family", "M", "N", "K", "dtype", "elem_bytes")} == {
        "family": "matmul", "M": 1024, "N": 512, "K": 256, "dtype": "fp16", "elem_bytes": 2}
    c = counters.parse_config("copy_strided stride=8 n=16777216 fp32")
    assert (c["family"], c["stride"], c["n"], c["elem_bytes"]) == ("copy_strided", 8, 16777216, 4)
    a = counters.parse_config("tiled_fast shape=1,8,2048,64 fp16")
    assert (a["variant"], a["N"], a["D"]) == ("tiled_fast", 2048, 64)
    with pytest.raises(ValueError, match="'conv shape=1' is not one"):
        counters.parse_config("conv shape=1")
    with pytest.raises(TypeError, match="int"):
        counters.parse_config(3)


def test_counter_flops_counts_fma_twice():
    w = pd.DataFrame({counters.FLOP_METRICS["ffma"]: [10.0], counters.FLOP_METRICS["fadd"]: [3.0],
                      counters.FLOP_METRICS["hfma"]: [5.0], counters.FLOP_METRICS["hmul"]: [1.0],
                      counters.TENSOR_OPS_NAMES[0]: [100.0]})
    out = counters.counter_flops(w, 2.0)
    assert out["cuda_core_flops"].iloc[0] == 2 * 10 + 3 + 2 * 5 + 1
    assert out["tensor_flops"].iloc[0] == 200 and out["flops"].iloc[0] == 234
    unknown = counters.counter_flops(w, None)
    assert math.isnan(unknown["tensor_flops"].iloc[0]) and unknown["flops"].iloc[0] == 34


@pytest.mark.parametrize("ops_per_flop, factor", [(1.0, 1.0), (0.5, 2.0), (0.0, None), (0.8, 1.25)])
def test_tensor_counter_unit_is_read_off_the_matmuls(ops_per_flop, factor):
    check = counters.tensor_op_check(parse_raw_csv(matmul_csv(ops_per_flop)))
    assert list(check["M"]) == [256, 1024, 4096]
    assert list(check["nominal_2MNK"]) == [2 * n ** 3 for n in (256, 1024, 4096)]
    got = counters.tensor_flops_per_op(check)
    assert got == (None if factor is None else pytest.approx(factor))


def test_predicted_reads_block_m_from_the_grid():
    cfg = counters.parse_config("tiled shape=1,8,2048,64 fp16")
    t = counters.predicted(cfg, "attn_fwd", grid_size=16 * 8)
    assert t == tr.attention_tiled_traffic(1, 8, 2048, 64, 2, block_m=128)
    assert counters.predicted(cfg, "attn_fwd", grid_size=None) is None
    naive = counters.parse_config("naive shape=1,8,2048,64 fp16")
    assert counters.predicted(naive, "naive_pv").kernel == "naive_pv"
    strided = counters.parse_config("copy_strided stride=4 n=1024 fp32")
    assert counters.predicted(strided, "copy_strided") == tr.copy_traffic(1024, 4, 4)


def test_kernel_table_places_and_classifies_kernels():
    frames = [parse_raw_csv(attention_csv()), parse_raw_csv(matmul_csv(1.0))]
    kt = counters.kernel_table(frames, CEIL, 1.0).set_index("label")
    assert list(kt.index) == ["naive_qk", "naive_softmax", "naive_pv", "attn_fwd", "matmul 256³", "matmul 1024³",
                              "matmul 4096³"]
    # the naive kernels were built at their predicted bytes: measured intensity equals predicted
    for k in ("naive_qk", "naive_pv"):
        assert kt.loc[k, "intensity"] == pytest.approx(kt.loc[k, "predicted_intensity"])
        assert kt.loc[k, "roof"] == "fp16 tensor"
    assert kt.loc["naive_softmax", "roof"] == "fp32 CUDA core"
    assert kt.loc["naive_softmax", "bound"] == "memory"  # built at 2.4 of 3.0 TB/s: 80% of the roof
    assert kt.loc["matmul 4096³", "bound"] == "compute" and kt.loc["matmul 4096³", "above_ridge"]
    assert not kt.loc["matmul 256³", "above_ridge"]
    # the 256³ matmul pays a fixed 3 us on a ~0.07 us job: far under both roofs
    assert kt.loc["matmul 256³", "bound"] == "latency"
    assert kt.loc["attn_fwd", "intensity"] > kt.loc["naive_qk", "intensity"]
    assert "fusion" in kt.loc["naive_softmax", "what_would_move_it"]
    assert kt.loc["matmul 1024³", "flops"] == 2 * 1024 ** 3
    assert set(kt["flops_source"]) == {"counters"}


def test_kernel_table_falls_back_to_nominal_flops_when_the_counter_unit_is_unknown():
    kt = counters.kernel_table([parse_raw_csv(matmul_csv(0.0))], CEIL, None).set_index("label")
    assert kt.loc["matmul 1024³", "flops"] == 2 * 1024 ** 3
    assert kt.loc["matmul 1024³", "flops_source"].startswith("nominal")


def test_copy_table_amplification_and_bound():
    ct = counters.copy_table(parse_raw_csv(copies_csv()), CEIL).set_index("stride")
    assert ct.loc[1, "read_amplification"] == pytest.approx(1.0)
    assert ct.loc[8, "read_amplification"] == pytest.approx(8.0)
    assert ct.loc[8, "predicted_read_amplification"] == 8.0
    # rel 1e-4: the CSV holds whole nanoseconds, so the built 2.7 TB/s comes back rounded
    assert ct.loc[1, "bound"] == "memory" and ct.loc[1, "fraction_of_copy_bw"] == pytest.approx(0.9, rel=1e-4)
    assert ct.loc[8, "useful_TBps"] < ct.loc[1, "useful_TBps"]


def test_hierarchy_points_need_l1_and_l2_counters():
    pts = counters.hierarchy_points([parse_raw_csv(attention_csv(l1=True))], 1.0)
    qk = pts[pts["series"] == "naive_qk"].set_index("group")
    assert list(qk.index) == ["L1", "L2", "DRAM"]
    assert qk.loc["L1", "intensity"] < qk.loc["L2", "intensity"] < qk.loc["DRAM", "intensity"]
    assert qk["flops_per_s"].nunique() == 1
    assert counters.hierarchy_points([parse_raw_csv(attention_csv(l1=False))], 1.0) is None


def test_load_counters_degrades_with_a_note(capsys):
    assert lab02.load_counters(None, "ncu_matmul.csv") is None
    assert "No recorded ncu_matmul.csv" in capsys.readouterr().out
    store = FakeStore({"ncu_matmul.csv": matmul_csv()})
    assert set(lab02.load_counters(store, "ncu_matmul.csv")["config"]) == {
        "matmul size=256,256,256 fp16", "matmul size=1024,1024,1024 fp16", "matmul size=4096,4096,4096 fp16"}
    with pytest.raises(ValueError, match=re.escape("'ncu_other.csv'")):
        lab02.load_counters(store, "ncu_other.csv")


def test_ceilings_without_a_recording(capsys):
    assert lab02.ceilings_from(None) == (None, None)
    assert "No recorded ceilings" in capsys.readouterr().out


@pytest.mark.skipif(is_gpu(), reason="interpreter-mode behaviour; on a GPU the ceilings are measured live")
def test_no_live_ceilings_in_interpreter_mode():
    assert lab02.live_ceilings() == (None, None)


def test_what_moves_it_by_bound():
    assert "tiling" in counters.what_moves_it("memory", 0.9, "k")
    assert "coalescing" in counters.what_moves_it("memory", 0.3, "k")
    assert "tensor" in counters.what_moves_it("compute", 0.3, "k")
    assert "hide latency" in counters.what_moves_it("latency", 0.05, "k")
    assert "more blocks" in counters.what_moves_it("latency", 0.05, "k", "grid below one wave")


def test_check_kernels_passes_and_the_checker_catches_nan():
    import torch

    checks = lab02.check_kernels(seed=1)
    assert list(checks["kernel"]) == ["copy_strided", "copy_strided", "naive", "tiled", "tiled_fast"]
    assert checks["passed"].all(), checks[~checks["passed"]]
    good = torch.randn(5)
    bad = good.clone()
    bad[3] = float("nan")  # one element a kernel forgot to write
    assert matches(good, good.clone(), "exact")
    assert not matches(bad, good, torch.float32)


# ---------------------------------------------------------------- the real recorded CSVs (tests/data, H200)
DATA = __import__("pathlib").Path(__file__).parent / "data"


def _real(name):
    return parse_raw_csv((DATA / name).read_text())


def test_real_matmul_counters_tensor_instructions_are_not_flops():
    check = counters.tensor_op_check(_real("ncu_matmul.csv"))
    assert list(check["M"]) == [256, 512, 1024, 2048, 4096, 8192]
    assert (check["kernels"] == 1).all()
    # this recording has the tensor-path op counter: one unit per FLOP at the large sizes (cuBLAS pads
    # the small ones to its tile, 512³ reads 1.125), so the factor read off the evidence is 1
    big = check[check["M"] >= 1024]
    assert big["ops_over_2mnk"].median() == pytest.approx(1.0, rel=0.05) and counters.tensor_flops_per_op(check) == 1.0
    fpi = check.set_index("M")["flops_per_inst"]
    assert (check["flops_per_inst"] == 2.0 * check["M"] ** 3 / check["tensor_inst"]).all()
    assert fpi.max() / fpi.min() > 10  # FLOPs per instruction vary with the MMA shape
    assert "not a FLOP count" in NT.tensor_counter_sentence(1.0, check)


def test_real_attention_and_matmul_kernel_table():
    kt = counters.kernel_table([_real("ncu_attention.csv"), _real("ncu_matmul.csv")], CEIL, None).set_index("label")
    assert list(kt.index[:5]) == ["naive_qk", "naive_softmax", "naive_pv", "attn_fwd", "attn_fwd_fast"]
    # softmax runs on CUDA cores, so its FLOPs come from the counters; tensor kernels fall back to the model
    assert kt.loc["naive_softmax", "flops_source"] == "counters" and kt.loc["naive_softmax", "roof"] == "fp32 CUDA core"
    assert kt.loc["naive_qk", "flops_source"].startswith("nominal") and kt.loc["naive_qk", "roof"] == "fp16 tensor"
    assert kt.loc["naive_softmax", "intensity"] < 1 < kt.loc["naive_qk", "intensity"] < kt.loc["attn_fwd", "intensity"]
    # the tiled kernels read K and V from L2 after the first pass: far fewer DRAM bytes than the no-reuse bound
    assert kt.loc["attn_fwd", "dram_bytes"] < kt.loc["attn_fwd", "predicted_bytes"] / 2
    # the teaching kernel's grid (ceil(4096/BLOCK_M) x 64 heads = 2,048 programs) gives BLOCK_M = 128
    assert kt.loc["attn_fwd", "predicted_bytes"] == tr.attention_tiled_traffic(4, 16, 4096, 64, 2, 128).bytes
    assert kt.loc["matmul 256³", "bound"] == "latency"
    assert kt.loc["matmul 8192³", "bound"] == "compute"
    # one rule with lab 04, over every roof: the teaching kernel's SM unit (speed of light, 67%) binds although
    # its FLOP rate is under 60% of the tensor roof here
    assert kt.loc["attn_fwd", "bound"] == "compute" and kt.loc["attn_fwd", "bound_reasons"] == ""
    assert kt.loc["attn_fwd", "bound_text"].startswith("compute-bound: the SM's busiest unit")


def test_real_copies_read_amplification():
    ct = counters.copy_table(_real("ncu_copies.csv"), CEIL)
    assert list(ct["label"]) == ["copy_coalesced"] + [f"copy_strided ×{s}" for s in (1, 2, 4, 8, 16, 32)]
    amp = dict(zip(ct["stride"].where(ct["kernel"] == "copy_strided"), ct["read_amplification"], strict=True))
    for s in (1, 2, 4, 8):  # rel 10%: the model ignores part-used sectors at block edges and other DRAM traffic
        assert amp[s] == pytest.approx(s, rel=0.1)
    # beyond 32-byte spacing the model says 8x (one sector per element); DRAM moved about twice that
    assert amp[16] > 1.5 * 8 and amp[32] > 1.5 * 8
    assert (ct["bound"] == "memory").all()
    # two levels: 32-byte sectors (L1-L2) cap at 8x for fp32, 64-byte HBM fetches at 16x
    two = NT.with_dram_model(ct).set_index("label")
    assert list(two["predicted_dram_read_amplification"]) == [1, 1, 2, 4, 8, 16, 16]
    assert two.loc["copy_strided ×32", "predicted_read_amplification"] == 8
    assert ct.equals(counters.copy_table(_real("ncu_copies.csv"), CEIL))  # the input frame is not modified


def test_notes_are_read_off_the_evidence():
    kt = counters.kernel_table([_real("ncu_attention.csv"), _real("ncu_matmul.csv")], CEIL, None)
    notes = NT.kernel_notes(kt)
    assert any(n.startswith("attn_fwd: measured intensity") and "served by L2" in n for n in notes)
    assert notes[-1].startswith("Matmuls: 256³ latency (")
    cn = NT.copy_notes(NT.with_dram_model(counters.copy_table(_real("ncu_copies.csv"), CEIL)))
    # the 32-byte sector model misses strides 16 and 32; the 64-byte fetch model predicts all seven
    assert cn[0].startswith("The 32-byte sector (L1-L2) model predicts the DRAM bytes read within 25% for 5 of 7")
    assert "copy_strided ×16 (16x measured vs 8x)" in cn[0]
    assert cn[1] == "The 64-byte fetch (HBM-L2) model predicts the DRAM bytes read within 25% for 7 of 7 copies."
    assert NT.kernel_notes(pd.DataFrame()) == [] and NT.copy_notes(None) == []


@pytest.mark.parametrize("value, unit, expected", [
    (1.98, "cycle/nsecond", 1.98e9), (1.98e9, "cycle/second", 1.98e9), (1.98, "GHz", 1.98e9),
    (1980, "MHz", 1.98e9), (3.0, "Tbyte/second", 3e12), (1.98e6, "cycle/msecond", 1.98e9)])
def test_per_second_units(value, unit, expected):
    assert counters.per_second(value, unit) == pytest.approx(expected)


def test_per_cycle_units_and_errors():
    assert counters.per_cycle(5120, "byte/cycle") == 5120 and counters.per_cycle(5, "Kbyte/cycle") == 5000
    with pytest.raises(ValueError, match="'furlong/fortnight'"):
        counters.per_second(1, "furlong/fortnight")
    with pytest.raises(ValueError, match="'byte'"):
        counters.per_cycle(1, "byte")


def test_hierarchy_roofs_from_ncu_peaks():
    text = ncu_block("matmul size=1024,1024,1024 fp16", [("gemm", {
        "l1tex__t_bytes.sum.peak_sustained": 16896, "lts__t_bytes.sum.peak_sustained": 5632,
        "sm__cycles_elapsed.avg.per_second": 1755, "lts__cycles_elapsed.avg.per_second": 1755})],
        units={"l1tex__t_bytes.sum.peak_sustained": "byte/cycle", "lts__t_bytes.sum.peak_sustained": "byte/cycle",
               "sm__cycles_elapsed.avg.per_second": "cycle/usecond", "lts__cycles_elapsed.avg.per_second": "cycle/usecond"})
    df = parse_raw_csv(text)
    roofs = {r.label: r for r in lab02.hierarchy_roofs([df])}
    assert roofs["L1 (ncu peak)"].value == pytest.approx(16896 * 1755e6)
    assert roofs["L2 (ncu peak)"].value == pytest.approx(5632 * 1755e6)
    assert all(r.style == "peak" and r.kind == "memory" for r in roofs.values())
    assert lab02.hierarchy_roofs([parse_raw_csv(matmul_csv())]) == []


def test_hierarchy_drops_l1_for_kernels_that_bypass_it():
    text = ncu_block("matmul size=1024,1024,1024 fp16", [("gemm", _launch(7000, 4e6, 1e5, tensor=2 * 1024 ** 3,
                                                                          l1=1e3, l2=3e7))])
    pts = counters.hierarchy_points([parse_raw_csv(text)], 1.0)
    assert list(pts["group"]) == ["L2", "DRAM"] and pts.attrs["l1_bypass"] == ["matmul 1024³"]


def test_bank_questions_are_answerable_from_the_tables_the_lab_shows():
    from infralens_lab.quiz import judge, question

    kt = counters.kernel_table([_real("ncu_attention.csv"), _real("ncu_matmul.csv")], CEIL, 1.0)
    row = kt.set_index("label").loc["attn_fwd"]
    assert judge(question("lab02.ex1"), row["intensity"], evidence=kt)[0] == "correct"
    # exercise 2 is a function: the kernel table's fraction is its reference on the table's own columns
    from infralens_lab.quiz.keys.lab02 import fraction_of_roof
    args = (row["flops"], row["dram_bytes"], row["time_us"] * 1e-6, row["roof_TFLOPs"] * 1e12, CEIL.copy_bw)
    assert fraction_of_roof(*args) == pytest.approx(row["fraction_of_roof"], rel=1e-9)
    from infralens_lab.quiz.keys.lab02 import busiest_pct  # exercise 3 too: the table's decided_pct, SM % for attn_fwd
    assert busiest_pct(row["fraction_of_roof"], row["sm_pct"], row["memory_pct"]) == row["decided_pct"] == row["sm_pct"]
    assert judge(question("lab02.q3"), 600 / 3.0, evidence=CEIL.versus_datasheet())[0] == "correct"
    assert judge(question("lab02.q2"), 5 / 6)[0] == "correct"


def test_kernel_source_is_the_triton_function():
    src = lab02.kernel_source("attn_fwd")
    assert src.startswith("@triton.jit\ndef attn_fwd(") and "for start_n in range(0, hi, BLOCK_N):" in src
    assert "def copy_coalesced(" in lab02.kernel_source("copy_coalesced")
    with pytest.raises(ValueError, match="no Triton kernel 'attention_tiled'"):
        lab02.kernel_source("attention_tiled")  # a launch wrapper, not a kernel


def test_hierarchy_notes():
    pts = counters.hierarchy_points([parse_raw_csv(attention_csv(l1=True))], 1.0)
    notes = NT.hierarchy_notes(pts)
    assert notes[0] == "naive_qk: bytes per DRAM byte: L2 1.5x, L1 3x"
    assert NT.hierarchy_notes(None) == []


def test_flop_split_on_the_recorded_attention():
    split = counters.flop_split(_real("ncu_attention.csv"), 1.0).set_index("kernel")
    assert split.loc["naive_softmax", "cuda_core_pct"] == 100  # no tensor work in the softmax
    assert split.loc["naive_pv", "cuda_core_pct"] == 0  # P @ V: all tl.dot
    # the flash kernels: softmax arithmetic on CUDA cores is a few percent of the FLOPs
    assert 0 < split.loc["attn_fwd_fast", "cuda_core_pct"] < split.loc["attn_fwd", "cuda_core_pct"] < 5
    assert (split["flops"] == split["cuda_core_flops"] + split["tensor_flops"]).all()
    unknown = counters.flop_split(_real("ncu_attention.csv"), None).set_index("kernel")
    assert unknown["cuda_core_pct"].isna().all()  # tensor unit unknown: no share claimed
