"""Lab 04's glue and the analysis it calls: sector predictions, live copy and attention checks, the copy-family
(analysis.copies) and attention (analysis.attention) tables on hand-computed ncu CSVs, stall mixes, before/after,
errors; and the same tables on the real recorded files (recomputed from the raw counters), the grading keys
(quiz/keys/lab04.py) and the quiz derivations."""
from __future__ import annotations

import math

import helpers
import pandas as pd
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import attention as attn
from infralens_lab.analysis import copies as copy_info
from infralens_lab.analysis import joins, traffic
from infralens_lab.analysis import roofline as rl
from infralens_lab.labs_support import lab04
from infralens_lab.parse import ncu
from infralens_lab.present import attention as present_attention
from infralens_lab.present import stalls as present_stalls
from infralens_lab.present import tables


def _block(label: str, rows: list[tuple[str, dict]]) -> str:
    """One ncu --csv --page raw block after the recorder's config line (tests/helpers.py)."""
    return helpers.ncu_block(label, rows, chatter=False)


N_OUT = 1_000_000  # useful fp32 elements: 4 MB useful read
COUNTERS = {
    # label: (kernel, dram read bytes, sectors, requests, time ns, achieved occupancy %)
    "copy n=1000000 fp32": ("copy_coalesced", 4_100_000, 500_000, 31_250, 4_000, 60.0),
    "copy_strided stride=8 n=1000000 fp32": ("copy_strided", 33_000_000, 1_000_000, 31_250, 20_000, 80.0),
}
STALL_SAMPLES = {
    "copy n=1000000 fp32": {"long_scoreboard": 60, "selected": 30, "wait": 10},
    "copy_strided stride=8 n=1000000 fp32": {"long_scoreboard": 50, "lg_throttle": 30, "selected": 20},
}


def _copy_csvs():
    counters, stalls = [], []
    for label, (k, rd, sec, req, t, occ) in COUNTERS.items():
        counters.append(_block(label, [(k, {"dram__bytes_read.sum": rd, "dram__bytes_write.sum": N_OUT * 4,
                                            ncu.SECTORS[0]: sec, ncu.SECTORS[1]: req, "gpu__time_duration.sum": t,
                                            ncu.OCCUPANCY[0]: occ, ncu.OCCUPANCY[1]: 100.0, ncu.SOL[0]: 10.0,
                                            ncu.SOL[1]: 90.0})]))
        stalls.append(_block(label, [(k, {"gpu__time_duration.sum": t, **{
            f"smsp__pcsamp_warps_issue_stalled_{r}": v for r, v in STALL_SAMPLES[label].items()}})]))
    return "".join(counters), "".join(stalls)


BENCH = [{"variant": "coalesced", "dtype": "float32", "stride": 1, "useful_tbps": 3.0, "measured_fraction": None},
         {"variant": "strided", "dtype": "float32", "stride": 8, "useful_tbps": 0.6, "measured_fraction": 0.2}]


# ------------------------------------------------------------------ predictions and live checks
def test_sector_predictions_follow_the_32_byte_model():
    p = traffic.sector_table(4).set_index("stride")  # the notebook's prediction table
    assert p.loc[1, "pred_sectors_per_req"] == 16 and p.loc[2, "pred_sectors_per_req"] == 32
    assert p["pred_read_x"].tolist() == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]  # min(stride, 32 / 4)
    assert p.loc[8, "pred_useful_fraction"] == pytest.approx(2 / 9)
    assert p["bytes_apart"].tolist() == [4, 8, 16, 32, 64, 128]


def test_copies_correctness_passes_and_catches_a_wrong_kernel(monkeypatch, capsys):
    table, ev = lab04.copies_correctness(n_in=9_001, seed=3)
    assert table["equals_torch"].all() and len(table) == 7 and ev.source == "live"
    assert table[(table["kernel"] == "copy_strided") & (table["stride"] == 32)]["n_out"].item() == 282  # ceil(9001/32)
    from infralens_lab.kernels import copies

    real = copies.copy_strided
    monkeypatch.setattr(copies, "copy_strided", lambda x, s, out=None: real(x, s, out=out).roll(1))
    bad, _ = lab04.copies_correctness(n_in=9_001, seed=3)
    assert not bad[bad["kernel"] == "copy_strided"]["equals_torch"].any()
    lab04.print_checks(bad, "equals_torch", "copy")
    out = capsys.readouterr().out
    assert out.count("FAIL") == 6 and out.count("PASS") == 1


def test_attention_correctness_runs_every_variant_and_flags_wrong_output(monkeypatch):
    table, _ = lab04.attention_correctness(shapes=((1, 1, 19, 16, True),), seed=1)
    assert set(table["variant"]) == {"naive", "tiled", "tiled_fast"} and table["within_tol"].all()
    from infralens_lab.kernels import attention

    monkeypatch.setitem(attention.VARIANTS, "tiled", lambda q, k, v, causal, out: out.zero_())
    bad, _ = lab04.attention_correctness(shapes=((1, 1, 19, 16, False),), seed=1)
    assert bad.set_index("variant")["within_tol"].to_dict() == {"naive": True, "tiled": False, "tiled_fast": True}


# ------------------------------------------------------------------ tables on hand-computed CSVs
def test_copy_family_hand_computed():
    counters, stalls = _copy_csvs()
    t = tables.copy_family(ncu.parse_raw_csv(counters), ncu.parse_raw_csv(stalls), BENCH).set_index("label")
    assert list(t.index) == ["coalesced", "stride 8"]
    assert t.loc["coalesced", "sectors_per_req"] == 16.0 and t.loc["stride 8", "sectors_per_req"] == 32.0
    assert t.loc["stride 8", "read_x"] == pytest.approx(33_000_000 / 4_000_000)
    assert t.loc["stride 8", "pred_read_x"] == 8.0 and t.loc["stride 8", "pred_dram_read_mb"] == pytest.approx(32.0)
    # (33 MB read + 4 MB written) / 20 µs = 1.85 TB/s
    assert t.loc["stride 8", "dram_tbps"] == pytest.approx(37_000_000 / 20e-6 / 1e12)
    assert t.loc["stride 8", "long_scoreboard_pct"] == pytest.approx(50.0)
    assert t.loc["stride 8", "dominant_stall"] == "long_scoreboard"  # selected is not a stall
    assert t.loc["coalesced", "dominant_stall_pct"] == pytest.approx(60.0)
    assert t.loc["stride 8", "useful_fraction"] == 0.2 and t.loc["coalesced", "useful_fraction"] == 1.0
    assert t.loc["stride 8", "useful_tbps"] == 0.6 and t.loc["stride 8", "time_us"] == 20.0


def test_copy_family_object_and_quiz_evidence(capsys):
    counters, stalls = _copy_csvs()
    fam = copy_info.family(counters, stalls, BENCH)
    s8 = fam.stalls_for("stride 8")
    assert s8["reason"].tolist() == ["long_scoreboard", "lg_throttle", "selected"]
    assert s8["share"].sum() == pytest.approx(1.0)
    assert fam.commands["stride 8"] == "ncu --csv --page raw --fake copy_strided"
    from infralens_lab.quiz.derive import derive

    assert derive("dominant_stall", s8) == "long_scoreboard"
    assert derive("value", fam.table, column="read_x", where={"label": "stride 8"}) == pytest.approx(8.25)
    gaps = copy_info.gap_lines(fam.table)
    assert gaps[0] == "sectors per request: every row matches the model"
    assert gaps[1] == "DRAM read per useful byte: within 15% of the 32-byte model at stride 8"  # 8.25 vs 8
    with pytest.raises(ValueError, match="no copy config labelled 'stride 4'"):
        fam.stalls_for("stride 4")
    # 60/30/10 -> 50/30(lg_throttle)/20: long scoreboard tops both, lg_throttle grew from nothing
    assert copy_info.shift_lines(fam) == [
        "long_scoreboard is the largest reason in every copy: 60% of samples at coalesced, 50% at stride 8",
        "grew most from coalesced to stride 8: lg_throttle (0% to 30%)"]
    occ = joins.occupancy_table(fam.table, None)
    assert occ["kernel"].tolist() == ["copy coalesced", "copy stride 8"]


def _attention_csv(block_grid: int):
    shape = "1,2,256,64"
    base = {ncu.SOL[0]: 20.0, ncu.SOL[1]: 70.0, ncu.HIT_RATES[0]: 50.0, ncu.OCCUPANCY[0]: 40.0, ncu.OCCUPANCY[1]: 50.0}
    naive = [(k, {**base, "gpu__time_duration.sum": t, "dram__bytes_read.sum": r, "dram__bytes_write.sum": w,
                  "launch__grid_size": 64, "smsp__pcsamp_warps_issue_stalled_long_scoreboard": ls,
                  "smsp__pcsamp_warps_issue_stalled_selected": 10})
             for k, t, r, w, ls in (("naive_qk", 3000, 1e5, 5e5, 70), ("naive_softmax", 2000, 5e5, 2.6e5, 80),
                                    ("naive_pv", 1000, 3e5, 6e4, 40))]
    tiled = [("attn_fwd", {**base, ncu.SOL[0]: 60.0, "gpu__time_duration.sum": 2000, "dram__bytes_read.sum": 2e5,
                           "dram__bytes_write.sum": 6e4, "launch__grid_size": block_grid,
                           "smsp__pcsamp_warps_issue_stalled_long_scoreboard": 5,
                           "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle": 30,
                           "smsp__pcsamp_warps_issue_stalled_selected": 20})]
    return _block(f"naive shape={shape} fp16", naive) + _block(f"tiled shape={shape} fp16", tiled)


def test_attention_tables_against_the_traffic_model():
    df = ncu.parse_raw_csv(_attention_csv(block_grid=2 * 2))  # ceil(256 / 128) * B * H
    k = tables.attention_kernels(df).set_index("kernel")
    naive = {t.kernel: t for t in traffic.attention_naive_traffic(1, 2, 256, 64, 2)}
    assert k.loc["naive_qk", "pred_dram_write_mb"] == pytest.approx(naive["naive_qk"].bytes_written / 1e6)
    assert k.loc["attn_fwd", "block_m"] == 128
    tiled = traffic.attention_tiled_traffic(1, 2, 256, 64, 2, 128)
    assert k.loc["attn_fwd", "pred_dram_mb"] == pytest.approx(tiled.bytes / 1e6)
    assert k.loc["attn_fwd", "dominant_stall"] == "math_pipe_throttle"
    v = tables.attention_variants(k.reset_index(), df).set_index("variant")
    assert v.loc["naive", "time_us"] == 6.0 and v.loc["naive", "kernels"] == 3
    assert v.loc["naive", "dram_mb"] == pytest.approx((9e5 + 8.2e5) / 1e6)
    assert v.loc["naive", "long_scoreboard_pct"] == pytest.approx(100 * 190 / 220)  # samples summed over kernels
    att = attn.AttentionProfile(k.reset_index(), v.reset_index(), (1, 2, 256, 64), "fp16", ncu.stall_breakdown(df), df)
    ba = present_attention.attention_before_after(att.variants, att.shape).set_index("metric")
    assert ba.loc["kernel time (ncu, sum over kernels)", "tiled / naive"] == pytest.approx(2000 / 6000)
    assert ba.loc["kernel time (ncu, sum over kernels)", "why"].startswith("3.0x faster")
    assert ba.loc["SM throughput, % of peak (SOL)", "tiled"] == 60.0
    from infralens_lab.quiz.derive import derive

    assert derive("ratio", att.variants, num={"column": "dram_mb", "where": {"variant": "naive"}},
                  den={"column": "dram_mb", "where": {"variant": "tiled"}}) == pytest.approx(1.72e6 / 2.6e5)


def test_block_m_from_grid_and_bad_grids():
    assert tables.block_m_from_grid(16 * 8, 1, 8, 2048) == 128
    assert tables.block_m_from_grid(3 * 2, 1, 2, 37) == 16  # ceil(37 / 16) = 3
    with pytest.raises(ValueError, match="not ceil"):
        tables.block_m_from_grid(7, 1, 2, 256)
    with pytest.raises(ValueError, match="positive number of blocks"):
        tables.block_m_from_grid(float("nan"), 1, 1, 64)


def test_config_fields_and_errors():
    f = tables.config_fields("copy_strided stride=8 n=16777216 fp32")
    assert {k: f[k] for k in ("family", "stride", "n", "dtype", "elem_bytes")} == {
        "family": "copy_strided", "stride": 8, "n": 16777216, "dtype": "fp32", "elem_bytes": 4}
    assert tables.config_fields("naive shape=1,8,2048,64 fp16 causal")["shape"] == (1, 8, 2048, 64)
    assert tables.config_fields("naive shape=1,8,2048,64 fp16 causal")["causal"] is True
    with pytest.raises(ValueError, match="config label"):
        tables.config_fields("  ")
    with pytest.raises(TypeError, match="expected the DataFrame"):
        tables.copy_family([1, 2])
    with pytest.raises(ValueError, match="no copy_coalesced/copy_strided launches"):
        tables.copy_family(ncu.parse_raw_csv(_attention_csv(4)))
    with pytest.raises(ValueError, match="lacks \\['shape'\\]"):
        tables.attention_kernels(ncu.parse_raw_csv(_block("naive fp16", [("naive_qk", {"gpu__time_duration.sum": 1})])))


def test_stall_mix_sums_to_one_and_folds_small_reasons():
    b = pd.DataFrame({"config": ["a"] * 4 + ["b"] * 2, "reason": ["x", "y", "z", "w", "x", "y"],
                      "samples": [50, 30, 15, 5, 1, 3]})
    m = present_stalls.stall_mix(b, top=2)
    assert list(m.columns) == ["x", "y", "other"] and list(m.index) == ["a", "b"]
    assert m.loc["a", "other"] == pytest.approx(0.2) and m.loc["b", "y"] == pytest.approx(0.75)
    assert m.sum(axis=1).tolist() == pytest.approx([1.0, 1.0])
    assert list(present_stalls.stall_mix(b, order=["b", "a"]).index) == ["b", "a"]
    with pytest.raises(ValueError, match="lacks columns"):
        present_stalls.stall_mix(b.drop(columns="samples"))
    with pytest.raises(ValueError, match="no stall samples"):
        present_stalls.stall_mix(b.assign(samples=0))
    with pytest.raises(ValueError, match="top=0"):
        present_stalls.stall_mix(b, top=0)
    with pytest.raises(TypeError, match="expected a pandas DataFrame"):
        present_stalls.stall_mix({"reason": 1})


def test_figures_build_without_ipython():
    import matplotlib

    matplotlib.use("Agg")
    counters, stalls = _copy_csvs()
    fam = copy_info.family(counters, stalls, BENCH)
    f1 = present_stalls.copy_family_figure(fam.table)
    assert len(f1.axes) == 3  # bench present: the useful-bandwidth panel is drawn
    f2 = present_stalls.stall_bars(fam.breakdown, order=fam.order(), labels=fam.labels())
    assert [t.get_text() for t in f2.axes[0].get_yticklabels()] == ["coalesced", "stride 8"]
    with pytest.raises(ValueError, match="empty"):
        present_stalls.copy_family_figure(fam.table.iloc[:0])


def test_before_after_ratio_text_and_bad_metric():
    t = tables.before_after({"t": 10.0, "s": "a"}, {"t": 4.0, "s": "b"},
                       [("t", "time", "µs", lambda b, a: f"{b / a:.1f}x"), ("s", "stall", "", "text")])
    assert t["after / before"].iloc[0] == pytest.approx(0.4) and t["why"].tolist() == ["2.5x", "text"]
    assert math.isnan(t["after / before"].iloc[1])
    with pytest.raises(ValueError, match="expected \\(key, label, unit, why\\)"):
        tables.before_after({}, {}, [("t", "time")])


def test_missing_record_prints_a_note(capsys):
    assert lab04.recorded_copy_family(None) is None
    assert "ncu_copies.csv" in capsys.readouterr().out
    assert lab04.check_on("lab04.q4", "wait", None) is None
    assert "cannot be marked" in capsys.readouterr().out


# ------------------------------------------------------------------ the real recording, when there is one
def test_recorded_copy_family_matches_raw_counters():
    st = helpers.recorded_set(files=("ncu_copies.csv", "ncu_copies_stalls.csv"))
    fam = lab04.recorded_copy_family(st)
    raw = ncu.parse_raw_csv(st.text("ncu_copies.csv"))
    t = fam.table
    assert set(t["stride"]) >= {1, 8, 32} and "coalesced" in set(t["label"])
    for r in t.itertuples():
        f = tables.config_fields(r.config)
        rd = raw[(raw["config"] == r.config) & (raw["metric"] == "dram__bytes_read.sum")]["value"].mean()
        assert r.read_x == pytest.approx(rd / (f["n"] * 4))  # recomputed from the raw CSV
        m = traffic.sector_model(r.stride, 4)
        assert (r.pred_read_x, r.pred_sectors_per_req) == (m.read_amplification, m.sectors_per_request)
        assert r.time_us > 0 and r.dram_read_mb > 0
    s8 = fam.stalls_for("stride 8")
    from infralens_lab.quiz.derive import derive

    assert derive("dominant_stall", s8) == t.set_index("label").loc["stride 8", "dominant_stall"]


def test_recorded_attention_before_after():
    st = helpers.recorded_set(files=("ncu_attention.csv",))
    att, cap = lab04.recorded_attention(st)
    assert "ncu_attention.csv" in cap and att.shape == (4, 16, 4096, 64) and att.dtype == "fp16"
    assert {"naive", "tiled"} <= set(att.variants["variant"])
    assert set(att.kernels[att.kernels["variant"] == "naive"]["kernel"]) == {"naive_qk", "naive_softmax", "naive_pv"}
    ba = present_attention.attention_before_after(att.variants, att.shape, st.load("bench").values["attention"])
    assert ba["why"].map(len).min() > 0
    # the bench row is the profiled shape itself (issue 26 item 8: no "larger shape" that is not there)
    assert ba["why"].iloc[-1].startswith("the profiled shape, timed without a profiler")
    assert ba.set_index("metric").loc["SM clock (time-weighted)", "naive"] == pytest.approx(
        (att.kernels["clock_ghz"] * att.kernels["time_us"])[att.kernels["variant"] == "naive"].sum()
        / att.kernels.loc[att.kernels["variant"] == "naive", "time_us"].sum())
    v = att.variants.set_index("variant")
    assert v.loc["naive", "pred_dram_mb"] > v.loc["tiled", "pred_dram_mb"]  # the model: S and P cost bytes


# ------------------------------------------------------------------ real H200 files kept as test data
DATA = __import__("pathlib").Path(__file__).parent / "data"


def test_tables_on_real_h200_csvs():
    counters, stalls = (DATA / "ncu_copies.csv").read_text(), (DATA / "ncu_copies_stalls.csv").read_text()
    fam = copy_info.family(counters, stalls)
    raw = ncu.parse_raw_csv(counters)
    t = fam.table
    assert t["label"].tolist() == ["coalesced"] + [f"stride {s}" for s in (1, 2, 4, 8, 16, 32)]
    for r in t.itertuples():
        sel = raw[raw["config"] == r.config].set_index("metric")["value"]
        assert r.sectors_per_req == sel[ncu.SECTORS[0]] / sel[ncu.SECTORS[1]]
        n_useful = int(__import__("re").search(r"n=(\d+)", r.config).group(1))  # the label's n: useful fp32 elements
        assert r.read_x == pytest.approx(sel["dram__bytes_read.sum"] / (n_useful * 4))
        assert r.time_us == pytest.approx(sel["gpu__time_duration.sum"] / 1e3)
        assert r.pred_read_x == traffic.sector_model(r.stride, 4).read_amplification
    from infralens_lab.quiz.derive import derive

    for label in t["label"]:
        s = fam.stalls_for(label)
        assert s["share"].sum() == pytest.approx(1.0)
        assert derive("dominant_stall", s) == t.set_index("label").loc[label, "dominant_stall"]
    # In this recording long_scoreboard tops every copy, and its share falls as the strides grow: the
    # sentence names it with both shares, which the samples give.
    shift = copy_info.shift_lines(fam)
    assert set(t["dominant_stall"]) == {"long_scoreboard"}
    first, last = fam.stalls_for("coalesced").set_index("reason")["share"], fam.stalls_for("stride 32").set_index("reason")["share"]
    assert shift[0] == (f"long_scoreboard is the largest reason in every copy: {first['long_scoreboard']:.0%} of samples "
                        f"at coalesced, {last['long_scoreboard']:.0%} at stride 32")
    assert shift[1].startswith("grew most from coalesced to stride 32: ")
    gaps = copy_info.gap_lines(fam.table)
    assert gaps[0] == "sectors per request: every row matches the model"
    assert any(g.startswith("DRAM read per useful byte: twice the 32-byte model (within 0.2) at stride 16, stride 32")
               for g in gaps)
    df = ncu.parse_raw_csv((DATA / "ncu_attention.csv").read_text())
    k = tables.attention_kernels(df)
    assert sorted(k["kernel"]) == ["attn_fwd", "attn_fwd_fast", "naive_pv", "naive_qk", "naive_softmax"]
    # (4, 16, 4096, 64): grid = ceil(4096 / BLOCK_M) x 64 heads, so BLOCK_M = 4096 / (grid / 64)
    assert k.set_index("kernel").loc["attn_fwd", "block_m"] == 4096 // (k.set_index("kernel").loc["attn_fwd", "grid_blocks"] / 64)
    v = tables.attention_variants(k, df)
    att = attn.AttentionProfile(k, v, (1, 8, 2048, 64), "fp16", ncu.stall_breakdown(df), df)
    assert len(attn.sol_lines(att)) == 3 and len(present_attention.traffic_notes(att.kernels)) == 5
    ba = present_attention.attention_before_after(att.variants, att.shape).set_index("metric")
    assert ba.loc["DRAM bytes measured (read + write)", "naive"] == pytest.approx(v.set_index("variant").loc["naive", "dram_mb"])


def test_sol_verdict():
    assert rl.sol_verdict(20.0, 72.0) == "memory-bound: 72% of its peak"
    assert rl.sol_verdict(85.0, 40.0) == "compute (SM)-bound: 85% of its peak"
    assert rl.sol_verdict(24.0, 12.0).startswith("latency-bound: neither memory (12%) nor SM (24%)")


def test_stall_shift_when_the_top_reason_changes():
    counters, _ = _copy_csvs()
    samples = {"copy n=1000000 fp32": {"long_scoreboard": 80, "selected": 20},
               "copy_strided stride=8 n=1000000 fp32": {"lg_throttle": 50, "long_scoreboard": 40, "selected": 10}}
    stalls = "".join(_block(label, [(k, {"gpu__time_duration.sum": t, **{
        f"smsp__pcsamp_warps_issue_stalled_{r}": v for r, v in samples[label].items()}})])
        for label, (k, _rd, _sec, _req, t, _occ) in COUNTERS.items())
    fam = copy_info.family(counters, stalls)
    assert copy_info.shift_lines(fam) == [
        "the largest reason changes along the family: coalesced long_scoreboard, stride 8 lg_throttle",
        "grew most from coalesced to stride 8: lg_throttle (0% to 50%)"]
    assert copy_info.shift_lines(copy_info.family(counters)) == []


# ------------------------------------------------------------------ analysis.copies and present.attention
def test_share_shift_hand_computed_and_absent_reasons_count_zero():
    from infralens_lab.analysis import copies as analysis_copies

    bd = pd.DataFrame([("a", "k", "long_scoreboard", 90), ("a", "k", "drain", 10),
                       ("b", "k", "long_scoreboard", 40), ("b", "k", "drain", 30), ("b", "k", "mio_throttle", 30)],
                      columns=["config", "kernel", "reason", "samples"])
    first, last = analysis_copies.reason_shares(bd, "a"), analysis_copies.reason_shares(bd, "b")
    assert first["share"].tolist() == [0.9, 0.1] and last["reason"].tolist() == ["long_scoreboard", "drain", "mio_throttle"]
    sh = analysis_copies.share_shift(first, last).set_index("reason")
    assert sh.index[0] == "mio_throttle"  # 0 -> 0.3 grew more than drain (0.1 -> 0.3)
    assert sh.loc["mio_throttle", "first"] == 0.0 and sh.loc["mio_throttle", "change"] == pytest.approx(0.3)
    assert sh.loc["drain", "change"] == pytest.approx(0.2) and sh.loc["long_scoreboard", "change"] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="no stall samples for config 'c'"):
        analysis_copies.reason_shares(bd, "c")


def test_model_agreement_sorts_rows_into_near_doubled_and_other():
    from infralens_lab.analysis import copies as analysis_copies

    t = pd.DataFrame({"label": ["coalesced", "stride 2", "stride 16", "stride 32"],
                      "sectors_per_req": [16, 32, 32, 30], "pred_sectors_per_req": [16, 32, 32, 32],
                      "read_x": [1.0, 2.1, 16.0, 12.0], "pred_read_x": [1.0, 2.0, 8.0, 8.0],
                      "useful_fraction": [1.0, 0.5, 0.1, None], "pred_useful_fraction": [1.0, 0.67, 0.22, 0.22]})
    g = analysis_copies.model_agreement(t)
    assert g["sectors_off"] == ["stride 32"] and g["near"] == ["stride 2"] and g["doubled"] == ["stride 16"]
    assert g["other"] == ["stride 32"] and g["below_fraction"] == ["stride 2", "stride 16"] and g["with_fraction"] == 2


def test_recorded_sectors_per_request_by_hand_and_the_lab_questions_evidence():
    """The notebook's by-hand division of the raw counters equals the table; q10/q11 evidence on the recording."""
    st = helpers.recorded_set(files=("ncu_copies.csv", "ncu_copies_stalls.csv", "ncu_attention.csv"))
    fam = lab04.recorded_copy_family(st)
    raw = ncu.parse_raw_csv(st.text("ncu_copies.csv"))
    per = raw[raw["metric"].isin(ncu.SECTORS)].pivot_table(index="config", columns="metric", values="value", aggfunc="sum")
    by_hand = per[ncu.SECTORS[0]] / per[ncu.SECTORS[1]]
    assert (by_hand.reindex(fam.table["config"]).to_numpy() == fam.table["sectors_per_req"].to_numpy()).all()
    sh = copy_info.shift_table(fam)
    assert sh["change"].is_monotonic_decreasing and sh["change"].sum() == pytest.approx(0.0, abs=1e-9)  # shares sum to 1
    att, _ = lab04.recorded_attention(st)
    ev = attn.sol_pairs(att.variants).set_index("variant")
    assert (ev["busiest_pct"] >= ev[["sm_pct", "memory_pct"]].max(axis=1) - 1e-12).all()
    lines = attn.sol_lines(att, 4.0e12)
    naive = att.variants.set_index("variant").loc["naive"]
    assert f"DRAM {naive['dram_mb'] / naive['time_us']:.2f} TB/s" in lines[0] and "of the measured copy ceiling (4.00 TB/s)" in lines[0]
    assert lab04.copy_ceiling(st) is None or lab04.copy_ceiling(st) > 1e12  # bytes/s


def test_attention_before_after_dram_rate_row_and_bad_variants():
    from infralens_lab.present import attention as present_attention

    df = ncu.parse_raw_csv((DATA / "ncu_attention.csv").read_text())
    v = tables.attention_variants(tables.attention_kernels(df), df)
    ba = present_attention.attention_before_after(v, (1, 8, 2048, 64)).set_index("metric")
    row = ba.loc["DRAM throughput (bytes / kernel time)"]
    vv = v.set_index("variant")
    assert row["naive"] == pytest.approx(vv.loc["naive", "dram_mb"] / vv.loc["naive", "time_us"])  # MB/µs = TB/s
    with pytest.raises(ValueError, match="variants 'naive' and 'flash' needed"):
        present_attention.attention_before_after(v, (1, 8, 2048, 64), after="flash")
    voc = present_attention.vocabulary_table()
    assert {"drain", "short_scoreboard", "mio_throttle"} <= set(voc["reason"]) and voc["meaning"].map(len).min() > 10


# ------------------------------------------------------------------ per-instruction stalls (SYNTHETIC source page)
def test_recorded_source_absent_prints_a_note_and_synthetic_tables_render(tmp_path, capsys):
    import source_fixture

    from infralens_lab import present
    from infralens_lab.analysis import sass as sass_info

    assert lab04.recorded_source(None) is None
    assert "ncu_copies_source.csv" in capsys.readouterr().out
    w = evidence.EvidenceWriter(tmp_path / "rec", "test")
    w.write_text(lab04.SOURCE_FILE, source_fixture.recorded_text())
    cell = "12,000 (S2R: 1,000; S2UR: 1,000; IMAD: 2,000; LOP3: 1,000; LDG: 4,000; STG: 1,000; EXIT: 1,000; BRA: 0)"
    w.write_text("ncu_copies_source_instances.csv", ncu.config_block(
        "copy_strided stride=8 n=67108864 fp32", "ncu --import R --page raw --print-metric-instances details",
        f'"ID","Kernel Name","{ncu.OPCODE_MIX}"\n"","","inst"\n"0","copy_strided","{cell}"\n'))
    w.close()
    st = evidence.RecordedStore(tmp_path / "rec")
    src = lab04.recorded_source(st)
    cap = lab04.file_caption(st, lab04.SOURCE_FILE)
    assert "ncu_copies_source.csv" in cap
    for cfg in src["config"].unique():  # what the notebook cell does
        present.show(sass_info.top_instructions(src, cfg, n=6), caption=cap, title=cfg)
    present.show(sass_info.instruction_mix(src), caption=cap, title="mix")
    census = ncu.opcode_census(ncu.parse_raw_csv(st.text("ncu_copies_source_instances.csv")))
    agree = sass_info.census_agreement(src[src["config"] == census["config"].iloc[0]], census)
    assert agree["agree"].all() and len(agree) == 8  # the fixture's per-opcode sums, BRA's 0 included
    out = capsys.readouterr().out
    assert "STG.E.128 desc[UR6][R6.64], R4" in out and "special register" in out and "ncu_copies_source.csv" in out


# ------------------------------------------------------------------ launch and scheduler view (analysis.launches)
def test_launch_table_on_the_recorded_attention_and_a_clear_error_without_counters():
    import pytest

    from infralens_lab.analysis import launches, roofline

    st = evidence.reference()
    df = ncu.parse_raw_csv(st.text(lab04.ATTN_FILE))
    t = launches.launch_table(df, launch_floor_s=20e-6).set_index("kernel")
    w = ncu.wide(df).groupby("kernel").first()
    for k, r in t.iterrows():  # every column is the raw counter it names, or one division of them
        assert r["blocks"] == w.loc[k, "launch__grid_size"] and r["warps_per_block"] * 32 == w.loc[k, "launch__block_size"]
        # resident blocks × SMs × waves gives back the grid (1%: ncu prints waves to two decimals)
        assert abs(r["blocks_per_sm"] * r["sms"] * r["waves"] / r["blocks"] - 1) < 0.01
        assert r["issue_active_pct"] == w.loc[k, ncu.SCHEDULER[0]] and r["eligible_warps"] == w.loc[k, ncu.SCHEDULER[1]]
        assert r["verdict"] == roofline.sol_verdict(w.loc[k, ncu.SOL[0]], w.loc[k, ncu.SOL[1]], waves=r["waves"],
                                                     time_s=r["time_us"] * 1e-6, launch_floor_s=20e-6)
        assert r["below_one_wave"] == (r["waves"] < 1) and r["under_launch_floor"] == (r["time_us"] < 20)
    assert launches.launch_table(df)["under_launch_floor"].isna().all()  # no floor given: not judged
    with pytest.raises(ValueError, match="smsp__issue_active"):
        launches.launch_table(df[~df["metric"].str.startswith("smsp__issue_active")])


# ------------------------------------------------------------------ round 2: analysis, grading keys, the notebook's arithmetic
def test_kv_passes_hand_computed_and_errors():
    one = 1 * 2 * 256 * 64 * 2  # bytes of one of Q, K, V (fp16)
    assert traffic.kv_passes(one + 2 * one * 3, 1, 2, 256, 64, 2) == pytest.approx(3.0)  # Q once, K and V 3 times
    assert traffic.kv_passes(one, 1, 2, 256, 64, 2) == 0.0
    with pytest.raises(ValueError, match="bytes_read is -1"):
        traffic.kv_passes(-1, 1, 2, 256, 64, 2)
    with pytest.raises(ValueError, match="elem_bytes is 3"):
        traffic.kv_passes(one, 1, 2, 256, 64, 3)


def test_recorded_profile_clocks_kv_reads_and_sol_pairs():
    st = helpers.recorded_set(files=("ncu_attention.csv",))
    att = attn.profile(st.text("ncu_attention.csv"))
    raw = ncu.parse_raw_csv(st.text("ncu_attention.csv"))
    k = att.kernels.set_index("kernel")
    for name in k.index:  # the clock column is the raw counter, in GHz
        hz = raw[(raw["kernel"] == name) & (raw["metric"] == "sm__cycles_elapsed.avg.per_second")]["value"].mean()
        assert k.loc[name, "clock_ghz"] == pytest.approx(hz / 1e9)
    kv = attn.kv_reads(att).set_index("kernel")
    B, H, n_ctx, D = att.shape
    one = B * H * n_ctx * D * 2
    for name in ("attn_fwd", "attn_fwd_fast"):
        assert kv.loc[name, "model_kv_passes"] == -(-n_ctx // int(k.loc[name, "block_m"]))
        assert kv.loc[name, "dram_kv_passes"] == pytest.approx((k.loc[name, "dram_read_mb"] * 1e6 - one) / (2 * one))
    # in this recording L2 served the re-reads: about one pass from DRAM against the model's 32 (the lab's ex4)
    assert kv.loc["attn_fwd", "dram_kv_passes"] < 1.2 and kv.loc["attn_fwd", "model_kv_passes"] >= 16
    with pytest.raises(ValueError, match="lacks \\['sm_pct'\\]"):
        attn.sol_pairs(att.variants.drop(columns=["sm_pct"]))
    lines = attn.sol_lines(att)
    assert all(" at an SM clock of " in line for line in lines)


def test_recorded_family_has_clocks_commands_and_no_captions_of_its_own():
    st = helpers.recorded_set(files=("ncu_copies.csv", "ncu_copies_stalls.csv"))
    fam = copy_info.family(st.text("ncu_copies.csv"), st.text("ncu_copies_stalls.csv"))
    assert fam.table["clock_ghz"].between(0.5, 3.0).all() and fam.clocks is not None
    assert set(fam.commands) == set(fam.table["label"]) and fam.caption == ""
    glued = lab04.recorded_copy_family(st)
    assert glued.caption.startswith(st.provenance.caption()) and "ncu_copies.csv" in glued.caption
    shown = lab04.columns(glued.table, lab04.COPY_COLUMNS)
    assert "SM clock (GHz)" in shown.columns and "read x" in shown.columns and len(shown.columns) <= 9


def test_grading_keys_rebuild_what_the_notebook_checks_against():
    """quiz/keys/lab04.py walks parse -> analysis only, and gives the same tables the notebook's cells build."""
    from infralens_lab.quiz.keys import lab04 as keys

    st = helpers.recorded_set(files=("ncu_copies.csv", "ncu_copies_stalls.csv", "ncu_attention.csv"))
    fam = lab04.recorded_copy_family(st)
    pd.testing.assert_frame_equal(keys.copy_family(), fam.table)
    pd.testing.assert_frame_equal(keys.stride8_stalls(), fam.stalls_for("stride 8"))
    pd.testing.assert_frame_equal(keys.stall_shift(), copy_info.shift_table(fam))
    att, _ = lab04.recorded_attention(st)
    pd.testing.assert_frame_equal(keys.attention_variants(), att.variants)
    pd.testing.assert_frame_equal(keys.sol_pairs(), attn.sol_pairs(att.variants))
    pd.testing.assert_frame_equal(keys.kv_reads(), attn.kv_reads(att))


def test_exercise_keys_are_the_by_hand_arithmetic_of_the_notebook():
    """Each exercise's key (the bank's derivation on the grader's evidence) equals the arithmetic its worked solution
    does on the raw counters, so a learner who does the step right is marked right."""
    from infralens_lab.quiz import question
    from infralens_lab.quiz.check import expected_answer
    from infralens_lab.quiz.keys import lab04 as keys

    st = helpers.recorded_set(files=("ncu_copies.csv", "ncu_copies_stalls.csv", "ncu_attention.csv"))
    raw = ncu.parse_raw_csv(st.text("ncu_copies.csv"))
    fam = lab04.recorded_copy_family(st)
    w = ncu.wide(raw, [*ncu.SECTORS, "dram__bytes_read.sum"]).assign(label=lambda d: d["config"].map(fam.labels()))
    w = w.set_index("label")
    rows = copy_info.counter_rows(raw, fam.labels())  # exercise 1 is a function of one copy's raw counters
    assert keys.sectors_per_request(rows["stride 8"]) == pytest.approx(
        w.loc["stride 8", ncu.SECTORS[0]] / w.loc["stride 8", ncu.SECTORS[1]])
    n16 = joins.config_fields(fam.table.set_index("label").loc["stride 16", "config"])["n"]
    assert expected_answer(question("lab04.ex2"), keys.copy_family()) == pytest.approx(
        w.loc["stride 16", "dram__bytes_read.sum"] / (n16 * 4))
    s8 = fam.stalls_for("stride 8")
    stalled = s8[s8["reason"] != "selected"]
    assert keys.dominant_share(keys.stride8_stalls()) == pytest.approx(  # exercise 3: a function of the table
        stalled["samples"].max() / s8["samples"].sum())
    att, _ = lab04.recorded_attention(st)
    B, H, n_ctx, D = att.shape
    one = B * H * n_ctx * D * 2
    dram = ncu.wide(att.raw, ["dram__bytes_read.sum"]).set_index("kernel").loc["attn_fwd", "dram__bytes_read.sum"]
    assert expected_answer(question("lab04.ex4"), keys.kv_reads()) == pytest.approx((dram - one) / (2 * one))


def test_dominant_stall_share_derivation_hand_computed_and_errors():
    from infralens_lab.quiz.derive import DerivationError, derive

    b = pd.DataFrame({"reason": ["selected", "long_scoreboard", "drain", "wait"], "samples": [50, 30, 15, 5]})
    assert derive("dominant_stall_share", b) == pytest.approx(0.30)  # selected left out of the choice, kept in the total
    tie = pd.DataFrame({"reason": ["wait", "drain"], "samples": [5, 5]})
    assert derive("dominant_stall_share", tie) == pytest.approx(0.5)
    with pytest.raises(DerivationError, match="'reason' and 'samples'"):
        derive("dominant_stall_share", b.rename(columns={"samples": "n"}))
    with pytest.raises(DerivationError, match="no samples"):
        derive("dominant_stall_share", b.assign(samples=0))
    with pytest.raises(DerivationError, match="only excluded"):
        derive("dominant_stall_share", b.iloc[:1])


def test_bench_shape_words():
    assert present_attention.bench_shape_words((4, 16, 4096, 64), (4, 16, 4096, 64)) == "the profiled shape"
    assert present_attention.bench_shape_words((1, 16, 16384, 128), (4, 16, 4096, 64)) == "a larger shape"
    assert present_attention.bench_shape_words((1, 8, 1024, 64), (4, 16, 4096, 64)) == "a smaller shape"
    assert present_attention.bench_shape_words((2, 16, 4096, 128), (4, 16, 4096, 64)) == "another shape"


def test_live_copy_family_on_a_gpu_path_with_ncu_stubbed(monkeypatch, capsys):
    """The GPU branch of live_copy_family (ncu run live), with ncu's output stood in by the recorded CSVs: it asks
    for the SM clock too, and returns a family whose table the notebook's copy view can show."""
    st = helpers.recorded_set(files=("ncu_copies.csv", "ncu_copies_stalls.csv"))
    asked = {}

    def fake_profile_runs(runs, parts):
        asked.update(parts)
        return {"counters": st.text("ncu_copies.csv"), "stalls": st.text("ncu_copies_stalls.csv")}

    monkeypatch.setattr(lab04, "is_gpu", lambda: True)
    monkeypatch.setattr(lab04.NR, "profile_runs", fake_profile_runs)
    fam = lab04.live_copy_family()
    assert ncu.CLOCK[0] in asked["counters"] and "smsp__pcsamp_sample_count" in asked["stalls"]
    assert fam.caption.startswith("Evidence: live") and fam.breakdown is not None
    shown = lab04.columns(fam.table, lab04.COPY_COLUMNS)
    assert {"sectors/req", "read x", "SM clock (GHz)"} <= set(shown.columns) and "useful fraction" not in shown.columns

    def failing(runs, parts):
        raise ncu.NcuError("ncu not found", "install Nsight Compute")

    monkeypatch.setattr(lab04.NR, "profile_runs", failing)
    assert lab04.live_copy_family() is None
    assert "ncu could not run here: ncu not found" in capsys.readouterr().out
