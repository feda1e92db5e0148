"""Fixed-answer questions whose premise is a fact of the recorded reference set: when a new recording
changes the fact, these fail and name the question to re-word (answers are sealed in the banks)."""
from __future__ import annotations

from infralens_lab import evidence
from infralens_lab.analysis import traffic
from infralens_lab.labs_support import lab02, lab04


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


def test_lab02_q6_premise_tiled_traffic_nearly_quadruples_when_n_doubles():
    # d = 64, BLOCK_M = 128, fp16: the K/V term (N/BLOCK_M re-reads) dominates, so bytes grow ~4x, not 2x
    small, big = (traffic.attention_tiled_traffic(1, 8, n, 64, 2, block_m=128).bytes for n in (2048, 4096))
    assert 3.5 < big / small < 4.0, f"model bytes grow {big / small:.2f}x when N doubles; re-word lab02.q6"


def test_lab02_q9_premise_recorded_attention_fits_in_l2():
    st = evidence.reference()
    attn = lab02.load_counters(st, "ncu_attention.csv")
    raw = attn[(attn["kernel"] == "attn_fwd") & (attn["launch"] == 0)].set_index("metric")["value"]
    cfg = lab02.parse_config(attn[attn["kernel"] == "attn_fwd"]["config"].iloc[0])
    one = cfg["B"] * cfg["H"] * cfg["N"] * cfg["D"] * cfg["elem_bytes"]  # one of Q, K, V, O
    assert (cfg["B"], cfg["H"], cfg["N"], cfg["D"]) == (1, 8, 2048, 64), "lab02.q9 names the shape (1, 8, 2048, 64)"
    assert 4 * one < st.load("device").values["l2_bytes"], "Q+K+V+O no longer fit in L2: re-word lab02.q9"
    assert raw["dram__bytes_write.sum"] == 0, "attn_fwd wrote to DRAM in this recording: re-word lab02.q9"
    # DRAM read Q, K and V about once (5%: a few stray lines of other traffic)
    assert abs(raw["dram__bytes_read.sum"] / (3 * one) - 1) < 0.05, "DRAM reads are not Q+K+V once: re-word lab02.q9"
    model = traffic.attention_tiled_traffic(1, 8, 2048, 64, 2, block_m=128).bytes
    assert raw["dram__bytes_read.sum"] < model / 8, "DRAM bytes no longer ~12x below the model's: re-word lab02.q9"
