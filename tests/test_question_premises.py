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
