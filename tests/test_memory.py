"""Measured memory of TinyGPT on the CPU against the ledger's predictions, the compare table,
bad inputs, and the recorder path (run on the CPU into a temporary folder)."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from infralens_lab.analysis import ledger
from infralens_lab.evidence import EvidenceWriter, Provenance, RecordedStore
from infralens_lab.measure import memory
from infralens_lab.workloads.pipeline import cpu_threads
from infralens_lab.workloads.tiny_gpt import GPTConfig, TinyGPT

# Small, odd-sized, grouped-query (4 heads, 2 KV heads) so every term of the ledger is exercised.
CFG = GPTConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn=192, vocab=160, block_size=48)


# CPU kernels that allocate scratch per thread (SDPA's backward among them) make a phase's transient grow with the
# thread count: on the 32-core two-GPU host (torch 2.11) the fp32 step's temporary buffers measured 65 % above the
# estimate and the bf16 one 8x; at 16 threads torch 2.13's bf16 step measures 2.7x; at 1 or 2 threads both sit on
# it. Two threads, as on CI, keep the assertions about the model, not the machine.
@pytest.fixture(scope="module")
def train_fp32():
    with cpu_threads(2):
        return memory.measure_training_step(CFG, batch=3, seq=40, precision="fp32", device="cpu")


@pytest.fixture(scope="module")
def train_amp():
    with cpu_threads(2):
        return memory.measure_training_step(CFG, batch=3, seq=40, precision="amp_bf16", device="cpu")


def _by_cat(df, col="bytes"):
    return df.set_index("category")[col]


def test_storage_bytes_counts_each_storage_once():
    x = torch.randn(10, 7)
    assert memory.storage_bytes([x, x[2:], x.t(), None]) == 10 * 7 * 4
    assert memory.storage_bytes([x, torch.zeros(3, dtype=torch.bfloat16)]) == 280 + 6


def test_model_states_exact(train_fp32):
    psi = ledger.param_count(ledger.Model.from_gpt_config(CFG))
    got = _by_cat(train_fp32)
    assert got["weights"] == 4 * psi and got["gradients"] == 4 * psi
    n_tensors = len(list(TinyGPT(CFG).parameters()))  # 11 per block + tok, pos, ln_f × 2, head = 27
    assert n_tensors == 27
    assert got["optimizer states"] == 8 * psi + 4 * n_tensors  # exp_avg, exp_avg_sq + a 4-byte step each


def test_predicted_vs_measured_fp32(train_fp32):
    cmp = memory.compare(ledger.predict_for(train_fp32.attrs["meta"]), train_fp32).set_index("category")
    # Weights, gradients and optimizer states: within 5% (the brief's bound; only AdamW's
    # 4-byte step counters are unmodelled, 0.01% here).
    for cat in ("weights", "gradients", "optimizer states"):
        assert abs(cmp.loc[cat, "gap_pct"]) < 5, cmp.loc[cat]
    # Activations: within 2%. The formula counts every O(s·b·h) tensor autograd keeps for this
    # layout; what it leaves out is O(s·b): LayerNorm mean/rstd (8 B/token/norm), token ids,
    # the 0-dim loss. Measured is never below predicted.
    assert 0 <= cmp.loc["activations", "gap_pct"] < 2, cmp.loc["activations"]
    # Temporary buffers: the loss-backward term 2·4·s·b·v wins here and the CPU profiler sees
    # exactly those two fp32 tensors; 10% leaves room for allocator-side extras.
    assert abs(cmp.loc["temporary buffers", "gap_pct"]) < 10, cmp.loc["temporary buffers"]
    assert (cmp["explanation"].str.len() > 20).all()


def test_predicted_vs_measured_amp_bf16(train_amp):
    cmp = memory.compare(ledger.predict_for(train_amp.attrs["meta"]), train_amp).set_index("category")
    m = ledger.Model.from_gpt_config(CFG)
    # fp32 master weights plus the bf16 copies autocast keeps for backward: exact.
    assert cmp.loc["weights", "measured_bytes"] == 4 * ledger.param_count(m) + 2 * ledger.matmul_weight_params(m)
    assert cmp.loc["gradients", "gap_pct"] == 0
    # Activations: within 10%. Autocast casts the same LayerNorm output once per Linear (q and
    # kv are separate Linears in TinyGPT), an extra 2·s·b·h per block the formula does not count.
    assert 0 <= cmp.loc["activations", "gap_pct"] < 10, cmp.loc["activations"]
    assert "autocast" in cmp.loc["activations", "explanation"]


def test_training_rows_are_sane(train_fp32):
    got = _by_cat(train_fp32)
    assert got["communication buckets"] == 0
    assert got["activations (live after forward)"] >= got["activations"]  # + logits and loss
    assert got["peak"] >= got["weights"] + got["optimizer states"] + got["activations"]
    assert train_fp32.attrs["meta"]["optimizer_impl"] == "forloop"
    assert list(train_fp32.columns) == ["category", "bytes", "how"]


@pytest.fixture
def two_threads():
    # SDPA's CPU kernel allocates scratch per thread: with 16 threads (torch 2.11, a 16-core
    # machine) this prefill peaked 25% above the estimate, with 1 to 4 threads exactly on it.
    # Two threads, as on CI, keep the assertion about the model and not about the machine.
    with cpu_threads(2):
        yield


def test_inference_cpu(two_threads):
    df = memory.measure_inference(CFG, batch=3, context=40, new_tokens=3, dtype="fp32", device="cpu")
    meta = df.attrs["meta"]
    assert meta["prompt"] == 37 and meta["cpu_threads"] == 2
    got = _by_cat(df)
    assert got["KV cache"] == ledger.kv_cache_bytes(CFG.n_layer, 3, 40, CFG.n_kv_head, CFG.head_dim, 4)
    cmp = memory.compare(ledger.predict_for(meta), df).set_index("category")
    assert cmp.loc["weights", "gap_pct"] == 0 and cmp.loc["KV cache", "gap_pct"] == 0
    # Prefill working set: the estimate names the tensors live together in the MLP; 10% leaves
    # room for allocations the count leaves out (SDPA scratch, index tensors).
    assert abs(cmp.loc["activations", "gap_pct"]) < 10, cmp.loc["activations"]
    assert "(2 threads here)" in cmp.loc["activations", "explanation"]
    assert 0 < got["activations (decode step)"] < got["activations"]


def test_compare_arithmetic_and_order():
    pred = pd.DataFrame({"category": ["weights", "KV cache", "total"], "bytes": [200, 0, 200],
                         "formula": ["", "", ""], "source": ["", "", ""]})
    meas = pd.DataFrame({"category": ["peak", "weights"], "bytes": [500, 210], "how": ["", ""]})
    out = memory.compare(pred, meas)
    assert list(out["category"]) == ["weights", "peak"]  # KV cache 0 and unmeasured: dropped
    assert out.loc[0, "gap_pct"] == pytest.approx(5.0)
    assert math.isnan(out.loc[1, "gap_pct"])
    with pytest.raises(TypeError, match="expected a DataFrame with 'category' and 'bytes'"):
        memory.compare(pred, [1, 2])


@pytest.mark.parametrize("kwargs, message", [
    (dict(precision="fp16"), "precision = 'fp16'; expected one of"),
    (dict(seq=49), "seq = 49 exceeds block_size = 48"),
    (dict(batch=0), "batch = 0; expected a positive int"),
    (dict(device="meta"), "device 'meta'; expected 'cpu' or 'cuda'"),
])
def test_bad_training_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        memory.measure_training_step(CFG, **{"batch": 1, "seq": 8, "device": "cpu", **kwargs})


def test_bad_inference_arguments():
    with pytest.raises(ValueError, match=r"prompt \+ new_tokens = 41, context = 40"):
        memory.measure_inference(CFG, batch=1, context=40, prompt=38, new_tokens=3, device="cpu")
    with pytest.raises(ValueError, match="dtype = 'int8'; expected one of"):
        memory.measure_inference(CFG, dtype="int8", device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"torch.cuda.is_available.. is False"):
            memory.measure_inference(CFG, device="cuda")


def test_record_into_cpu(tmp_path):
    prov = Provenance(source="recorded", gpu="Test CPU", gpu_slug="test-cpu", driver=None, cuda=None,
                      torch=torch.__version__, triton="3.6.0", ncu=None, date_utc="2026-01-01T00:00:00Z",
                      command="pytest", package_version="0.1.0", mode="interpreter")
    writer = EvidenceWriter(tmp_path, "pytest", provenance=prov)
    paths = memory.record_into(writer, device="cpu", config=CFG, batch=2, seq=24)
    writer.close()
    assert sorted(p.name for p in paths) == ["memory_infer.json", "memory_train.json"]
    store = RecordedStore(tmp_path)
    store.verify()
    train = memory.from_evidence(store.load("memory_train"), "fp32")
    assert train.attrs["meta"]["config"]["n_embd"] == CFG.n_embd
    pred = ledger.predict_for(train.attrs["meta"])  # predictions recompute from the recorded config
    assert _by_cat(pred)["weights"] == _by_cat(train)["weights"]
    infer = memory.from_evidence(store.load("memory_infer"), "fp32")
    assert _by_cat(infer)["KV cache"] == _by_cat(ledger.predict_for(infer.attrs["meta"]))["KV cache"]
    with pytest.raises(ValueError, match="no run with precision = 'amp_bf16'; recorded: \\['fp32'\\]"):
        memory.from_evidence(store.load("memory_train"), "amp_bf16")


def test_isolate_is_safe_on_a_cpu():
    import torch

    from infralens_lab.measure.memory import isolate

    assert isolate(torch.device("cpu")) is None
