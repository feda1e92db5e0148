"""The predicted memory ledger against numbers worked by hand from the papers and from the
published model shapes. Pure arithmetic: every comparison is exact unless a comment says why."""
from __future__ import annotations

import pytest
import torch

from infralens_lab.analysis import ledger
from infralens_lab.workloads.tiny_gpt import GPTConfig, TinyGPT


# ---------------------------------------------------------------- ZeRO (Rajbhandari et al. 2020)
@pytest.mark.parametrize("stage, expected_bytes, paper_gb", [
    # Ψ = 7.5e9, K = 12, N_d = 64 (ZeRO §5, Figure 1):
    (0, 16 * 7_500_000_000, 120.0),                                   # (2 + 2 + 12)Ψ = 120 GB
    (1, 4 * 7_500_000_000 + 12 * 7_500_000_000 // 64, 31.4),         # 4Ψ + 12Ψ/64 = 30 + 1.40625
    (2, 2 * 7_500_000_000 + 14 * 7_500_000_000 // 64, 16.6),         # 2Ψ + 14Ψ/64 = 15 + 1.640625
    (3, 16 * 7_500_000_000 // 64, 1.88),                              # 16Ψ/64 = 1.875
])
def test_zero_paper_example(stage, expected_bytes, paper_gb):
    states = ledger.model_states(7_500_000_000, "fp16_mixed", "adam", dp=64, zero_stage=stage)
    got = sum(b for b, _ in states.values())
    assert got == expected_bytes
    assert round(got / 1e9, 2 if paper_gb < 2 else 1) == paper_gb  # the paper prints GB = 1e9 B


def test_zero_fp32_and_sgd_have_no_master_copy():
    psi = 1000
    assert ledger.model_states(psi, "fp32", "sgd")["optimizer states"][0] == 0
    assert ledger.model_states(psi, "fp32", "sgd_momentum")["optimizer states"][0] == 4 * psi
    assert ledger.model_states(psi, "bf16_mixed", "sgd")["optimizer states"][0] == 4 * psi      # master only
    assert ledger.model_states(psi, "fp32", "adamw")["weights"][0] == 4 * psi
    amp = ledger.model_states(psi, "amp_bf16", "adamw", matmul_params=600)
    assert amp["weights"][0] == 4 * psi + 2 * 600 and amp["gradients"][0] == 4 * psi


# ---------------------------------------------------------------- activations (Korthikanti et al. 2022)
def _megatron(h, a, L_=1):
    return ledger.Model("megatron", L_, h, a, a, 4 * h, 1000, dropout=True)


@pytest.mark.parametrize("s, b, h, a, expected", [
    # s·b·h·(34 + 5as/h): sbh = 2048·1·4096 = 8_388_608; 34·sbh = 285_212_672;
    # 5·a·s²·b = 5·32·2048²·1 = 671_088_640; sum 956_301_312 B (≈ 0.89 GiB per layer).
    (2048, 1, 4096, 32, 956_301_312),
    # sbh = 512·4·1024 = 2_097_152; 34·sbh = 71_303_168; 5·16·512²·4 = 83_886_080; sum 155_189_248.
    (512, 4, 1024, 16, 155_189_248),
])
def test_korthikanti_per_layer(s, b, h, a, expected):
    got, _ = ledger.activation_bytes_per_layer(_megatron(h, a), b, s, "bf16_mixed", "none", "materialized")
    assert got == expected == s * b * h * (34 + 5 * a * s // h)
    sel, _ = ledger.activation_bytes_per_layer(_megatron(h, a), b, s, "bf16_mixed", "selective")
    assert sel == 34 * s * b * h
    full, _ = ledger.activation_bytes_per_layer(_megatron(h, a), b, s, "bf16_mixed", "full")
    assert full == 2 * s * b * h


def test_flash_attention_drops_the_s2_term():
    m = _megatron(1024, 16)
    flash, _ = ledger.activation_bytes_per_layer(m, 4, 512, "bf16_mixed", "none", "flash")
    assert flash == 34 * 512 * 4 * 1024 + 4 * 16 * 512 * 4  # linear terms + fp32 logsumexp


def test_recomputation_orders_activation_bytes():
    m = ledger.Model.preset("llama2-7b")
    got = [ledger.predict_training(m, ledger.Training(1, 4096, recompute=r)).set_index("category").loc["activations", "bytes"]
           for r in ledger.RECOMPUTE]
    assert got[0] > got[1] > got[2]


# ---------------------------------------------------------------- KV cache
def test_kv_cache_llama2_7b_is_2_gib():
    df = ledger.predict_inference(ledger.Model.preset("llama2-7b"), ledger.Inference(1, 4096, "fp16"))
    # 2 · 32 layers · 1 · 4096 · 32 heads · 128 · 2 B = 2_147_483_648 = 2 GiB
    assert df.set_index("category").loc["KV cache", "bytes"] == 2 * 2 ** 30
    # GQA: Llama 2 70B keeps 8 KV heads: 2 · 80 · 1 · 4096 · 8 · 128 · 2 = 1.25 GiB
    df70 = ledger.predict_inference(ledger.Model.preset("llama2-70b"), ledger.Inference(1, 4096, "bf16"))
    assert df70.set_index("category").loc["KV cache", "bytes"] == 1.25 * 2 ** 30


# ---------------------------------------------------------------- parameter counts
@pytest.mark.parametrize("cfg", [
    GPTConfig(),
    GPTConfig(n_layer=3, n_head=6, n_kv_head=2, n_embd=96, ffn=200, vocab=333, block_size=37),
    GPTConfig(n_layer=1, n_head=1, n_kv_head=1, n_embd=8, ffn=8, vocab=5, block_size=3),
])
def test_tiny_gpt_param_count_exact(cfg):
    model = TinyGPT(cfg)
    m = ledger.Model.from_gpt_config(cfg)
    assert ledger.param_count(m) == model.num_params()
    linear_weights = sum(mod.weight.numel() for mod in model.modules() if isinstance(mod, torch.nn.Linear))
    assert ledger.matmul_weight_params(m) == linear_weights


@pytest.mark.parametrize("name, published", [
    ("gpt2-125m", 124_439_808), ("gpt2-350m", 354_823_168), ("gpt2-1.5b", 1_557_611_200),
    ("llama2-7b", 6_738_415_616), ("llama2-13b", 13_015_864_320), ("llama2-70b", 68_976_648_192),
])
def test_preset_param_counts_match_published(name, published):
    assert ledger.param_count(ledger.Model.preset(name)) == published


@pytest.mark.parametrize("name", ["gpt2-125m", "gpt2-350m", "gpt2-1.5b"])
def test_closed_form_matches_gpt2_layout(name):
    m = ledger.Model.preset(name)
    assert ledger.gpt_params_closed_form(m.n_layer, m.hidden, m.vocab, m.n_positions) == ledger.param_count(m)


# ---------------------------------------------------------------- whole ledger
def test_predict_training_rows_and_helpers():
    df = ledger.predict_training(ledger.Model.preset("gpt2-125m"), ledger.Training(8, 1024, dp=1))
    assert list(df["category"]) == list(ledger.CATEGORIES)
    assert set(df.columns) == {"category", "bytes", "formula", "source"}
    assert ledger.total(df) == df["bytes"].sum() == ledger.total(ledger.with_total(df))
    assert ledger.with_total(df)["category"].iloc[-1] == "total"
    assert ledger.dominant(df) == "activations"  # 12 layers at s=1024, b=8 with s² scores: tens of GB
    big = ledger.predict_training(ledger.Model.preset("llama2-70b"), ledger.Training(1, 512, dp=1))
    assert ledger.dominant(big) == "optimizer states"  # 12Ψ ≈ 828 GB
    assert ledger.predict(ledger.Model.preset("gpt2-125m"), ledger.Training(8, 1024)).equals(df)


def test_communication_buckets():
    m = ledger.Model.preset("gpt2-125m")
    psi = ledger.param_count(m)
    def get(**kw):
        return ledger.predict_training(m, ledger.Training(4, 512, **kw)).set_index("category").loc["communication buckets", "bytes"]
    assert get(dp=1) == 0
    assert get(dp=8) == 2 * psi          # DDP's flat buckets copy every 16-bit gradient
    assert get(dp=8, grad_as_bucket_view=True) == 0
    assert get(dp=8, zero_stage=2, bucket_mb=50) == 2 * 50 * 2 ** 20


def test_zero_with_one_rank_is_noted_not_refused():
    df = ledger.predict_training(ledger.Model.preset("gpt2-125m"), ledger.Training(1, 128, zero_stage=2, dp=1))
    assert any("no effect" in n for n in df.attrs["notes"])
    base = ledger.predict_training(ledger.Model.preset("gpt2-125m"), ledger.Training(1, 128, dp=1))
    assert df["bytes"].tolist() == base["bytes"].tolist()


def test_scaling_table():
    t = ledger.scaling_table(seqs=(1024, 8192), batches=(1, 4), zero_stages=(0, 3), dp=8)
    assert len(t) == 6 * 2 * 2 * 2
    assert set(ledger.CATEGORIES) | {"model", "total", "dominant"} <= set(t.columns)
    for _, row in t.iterrows():
        assert row["dominant"] == max(ledger.CATEGORIES, key=lambda c: row[c])
    s0 = t[(t.model == "llama2-70b") & (t.zero_stage == 0)].iloc[0]
    s3 = t[(t.model == "llama2-70b") & (t.zero_stage == 3)].iloc[0]
    assert s3["weights"] * 8 == pytest.approx(s0["weights"], abs=8)  # rounding of Ψ·2/8 to whole bytes


# ---------------------------------------------------------------- bad configurations
@pytest.mark.parametrize("kwargs, message", [
    (dict(hidden=100, n_head=3), "hidden = 100 is not divisible by n_head = 3"),
    (dict(n_head=4, n_kv_head=3), "n_head = 4 is not divisible by n_kv_head = 3"),
    (dict(n_layer=0), "n_layer = 0; expected an int >= 1"),
    (dict(vocab=-5), "vocab = -5; expected an int >= 1"),
    (dict(hidden=True), "hidden = True"),
    (dict(norm="batchnorm"), "norm = 'batchnorm'; expected one of"),
])
def test_bad_model(kwargs, message):
    base = dict(name="x", n_layer=2, hidden=64, n_head=4, n_kv_head=4, ffn=256, vocab=100)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        ledger.Model(**{**base, **kwargs})


@pytest.mark.parametrize("kwargs, message", [
    (dict(zero_stage=4), "zero_stage = 4; expected one of 0, 1, 2, 3"),
    (dict(zero_stage=-1), "zero_stage = -1; expected one of 0, 1, 2, 3"),
    (dict(dp=0), "dp = 0; expected an int >= 1"),
    (dict(batch=0), "batch = 0; expected an int >= 1"),
    (dict(seq=-3), "seq = -3; expected an int >= 1"),
    (dict(precision="fp8"), "precision = 'fp8'; expected one of"),
    (dict(optimizer="lion"), "optimizer = 'lion'; expected one of"),
    (dict(recompute="some"), "recompute = 'some'; expected one of"),
    (dict(bucket_mb=0), "bucket_mb = 0; expected a positive number of MiB"),
])
def test_bad_training(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ledger.Training(**{"batch": 1, "seq": 8, **kwargs})


def test_bad_inference_preset_and_sizes():
    with pytest.raises(ValueError, match="prompt = 9 exceeds context = 8"):
        ledger.Inference(1, 8, "bf16", prompt=9)
    with pytest.raises(ValueError, match="dtype = 'fp64'; expected one of"):
        ledger.Inference(1, 8, "fp64")
    with pytest.raises(ValueError, match="unknown preset 'gpt5'"):
        ledger.Model.preset("gpt5")
    with pytest.raises(ValueError, match="seq = 2048 exceeds the model's n_positions = 1024"):
        ledger.predict_training(ledger.Model.preset("gpt2-125m"), ledger.Training(1, 2048))
    with pytest.raises(ValueError, match="params = 0; expected a positive, finite parameter count"):
        ledger.model_states(0)
    with pytest.raises(ValueError, match="context = 0; expected an int >= 1"):
        ledger.kv_cache_bytes(2, 1, 0, 8, 128, 2)
    with pytest.raises(TypeError, match="expected Model, Training"):
        ledger.predict_training("gpt2-125m", ledger.Training(1, 8))
