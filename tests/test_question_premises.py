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


def test_lab04_q11_premise_only_naive_reaches_the_rule_and_by_memory():
    """lab04.q11's explanation (and the notebook's text after it) say the variant closest to a roof is the only
    one at or over the rule's threshold, and that its busier unit is memory."""
    from infralens_lab.analysis import roofline

    ev = lab04.sol_evidence(lab04.recorded_attention(evidence.reference())).set_index("variant")
    over = ev.index[ev["busiest_pct"] >= 100 * roofline.BOUND_THRESHOLD].tolist()
    assert over == [ev["busiest_pct"].idxmax()], f"variants at or over the rule: {over}; re-word lab04.q11"
    top = ev.loc[ev["busiest_pct"].idxmax()]
    assert top["memory_pct"] > top["sm_pct"], "the closest variant's busier unit is no longer memory; re-word lab04.q11"


def test_lab04_profile_text_premises_tiled_attention_fits_l2_and_writes_no_dram():
    """The notebook says the profiled attention shape is (1, 8, 2048, 64), its Q/K/V/O fit in L2, tiled writes
    0 DRAM bytes and reads about Q, K and V once, and attn_fwd runs under one wave."""
    st = evidence.reference()
    att = lab04.recorded_attention(st)
    assert tuple(att.shape) == (1, 8, 2048, 64)
    B, H, N, D = att.shape
    tensor = B * H * N * D * 2  # fp16 bytes of one of Q, K, V, O
    assert 4 * tensor < st.load("device").values["l2_bytes"]
    k = att.kernels.set_index("kernel")
    assert k.loc["attn_fwd", "dram_write_mb"] == 0
    assert abs(k.loc["attn_fwd", "dram_read_mb"] * 1e6 / (3 * tensor) - 1) < 0.05  # Q, K, V read once each
    assert k.loc["attn_fwd", "waves"] < 1


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


def test_lab03_q9_premise_amp_reserves_more_while_allocating_less_unisolated():
    from infralens_lab.labs_support import lab03
    ev, runs = lab03.recorded_memory(evidence.reference(), "train")
    slack = lab03.allocator_slack(runs).set_index("run")
    assert not lab03.slack_isolated(ev), ("the reference memory_train now comes from a recorder that isolates each "
                                          "measurement: lab03.q9's premise (one process, cache not emptied) is gone; "
                                          "re-word lab03.q9 and the slack paragraph of lab 03")
    assert slack.loc["amp_bf16", "peak_allocated_MiB"] < slack.loc["fp32", "peak_allocated_MiB"] - 250
    assert slack.loc["amp_bf16", "peak_reserved_MiB"] > slack.loc["fp32", "peak_reserved_MiB"], \
        "amp_bf16 no longer reserves more than fp32 in the recording: re-word lab03.q9"


def test_lab03_q10_premise_amp_temporaries_are_one_fp32_logits_tensor():
    from infralens_lab.labs_support import lab03
    ev, runs = lab03.recorded_memory(evidence.reference(), "train")
    m = ev.values["meta"]
    sbv4 = 4 * m["batch"] * m["seq"] * m["config"]["vocab"]
    temp = {run: int(df.set_index("category").loc["temporary buffers", "bytes"]) for run, df in runs.items()}
    assert temp["fp32"] == 2 * sbv4, f"fp32 temporary buffers {temp['fp32']} B != 2 x 4·sbv: re-word lab03.q10"
    assert temp["amp_bf16"] == sbv4 + 512, f"amp_bf16 temporary buffers {temp['amp_bf16']} B != 4·sbv + 512: re-word lab03.q10"


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


def test_lab07_q1_q4_premises_convolutions_lead_by_op_and_batch_norm_by_family():
    """lab07.q1's explanation: by innermost op, cuDNN convolution takes the largest share (close to half) and
    batch norm comes second; lab07.q4's: batch norm is the top kernel family of the channels_first trace."""
    from infralens_lab.labs_support import lab07
    from infralens_lab.measure.top_ops import innermost_ops, kernel_families

    tr, _ = lab07.recorded_resnet(evidence.reference())["channels_first"]
    ops = innermost_ops(tr, top=3)
    assert list(ops["op"])[:2] == ["aten::cudnn_convolution", "aten::native_batch_norm"], \
        f"top ops now {list(ops['op'])}: re-word lab07.q1's explanation and feedback B"
    assert 40 <= float(ops["pct"].iloc[0]) <= 55, "convolution's share is no longer 'close to half': re-word lab07.q1"
    fam = kernel_families(tr).set_index("family")["total_us"]
    assert fam.idxmax() == "batch norm", f"top family now {fam.idxmax()}: re-word lab07.q4's explanation"
