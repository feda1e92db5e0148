"""Fixed-answer questions whose premise is a fact of the recorded reference set: when a new recording
changes the fact, these fail and name the question to re-word (answers are sealed in the banks)."""
from __future__ import annotations

from infralens_lab import evidence
from infralens_lab.analysis import traffic
from infralens_lab.labs_support import lab04


def test_lab04_q8_premise_attn_fwd_launches_fewer_blocks_than_sms():
    st = evidence.reference()
    att = lab04.recorded_attention(st)
    sms = st.load("device").values["sm_count"]
    grid = att.kernels.set_index("kernel").loc["attn_fwd", "grid_blocks"]
    assert grid < sms, (f"the recorded attn_fwd has {grid} blocks on {sms} SMs: lab04.q8's answer (fewer blocks "
                        "than SMs) no longer holds for this recording; re-word lab04.q8")


def test_lab04_q9_premise_dram_reads_stop_at_16x():
    fam = lab04.recorded_copy_family(evidence.reference())
    t = fam.table.set_index("stride")
    for s in (16, 32):
        assert abs(t.loc[s, "read_x"] - traffic.sector_model(s, 4).dram_read_amplification) < 0.1 * 16, \
            f"stride {s}: read_x {t.loc[s, 'read_x']:.2f} is not the 64-byte fetch model's 16; re-word lab04.q9"
    assert traffic.sector_model(16, 4).read_amplification == 8  # the 32-byte model's cap the question contrasts


def test_lab01_q9_q10_premises_fp32_gemms_and_a_fix_near_its_bound():
    from infralens_lab.labs_support import lab01

    st = evidence.reference()
    traces = lab01.recorded_traces(st)
    k = traces["fixed"][0].kernels()  # full names, most GPU time first
    hot = k["name"].head(3)
    assert hot.str.contains(lab01.FP32_GEMM).all(), \
        f"the hot kernels {list(hot)} are not all fp32 SIMT GEMMs: re-word lab01.q9 and q10 (option C)"
    share = k.loc[k["name"].str.contains(lab01.FP32_GEMM), "pct"].sum() / 100
    rate = lab01.matmul_ceilings(st)[0].set_index("dtype")["rate_TFLOPs"]
    assert share > 0.5 and rate["tf32"] / rate["fp32"] > 4, \
        f"fp32 GEMMs {share:.0%} of kernel time, tf32/fp32 ceilings {rate['tf32'] / rate['fp32']:.1f}x: re-word lab01.q10"
    cmp = lab01.compare(traces).set_index("version")
    bound = 100 / cmp.loc["bubble", "gpu_util_pct"]
    r = cmp.loc["bubble", "period_ms"] / cmp.loc["fixed", "period_ms"]
    assert 0.75 <= (r - 1) / (bound - 1) <= 1.05, \
        f"the fix bought {r:.2f}x of a {bound:.2f}x bound: 'took most of it' (lab01.q10, C) no longer holds"
