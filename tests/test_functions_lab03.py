"""Lab 03's function exercises (issue 38): Adam's states (ex1) and the KV cache (ex2), written as functions of the
setup and checked on the live step, the recorded GPU steps of both GPUs and setups the lab does not run.

The old ex1 was answered by the constant 8 (bytes per parameter): here a function that keeps K = 8 whatever the
precision and optimizer fails, on a named mixed-precision case. The references are the ledger's own formulas; on the
recorded data they give the recorded prediction's lines, the measured KV cache to the byte, and the measured
optimizer states less AdamW's 4-byte step counter per parameter tensor. On fresh random models they match the bytes
torch's own optimizers and tensors hold.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from infralens_lab.analysis import ledger
from infralens_lab.analysis import ledger_views as views
from infralens_lab.measure.memory import from_evidence
from infralens_lab.quiz import check
from infralens_lab.quiz import functions as fx
from infralens_lab.quiz.check import GRADE_ENV
from infralens_lab.quiz.keys import lab03 as key


@pytest.fixture(autouse=True)
def learner(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)


@pytest.fixture(scope="module")
def opt_cases():
    got = key.optimizer_cases()
    if got is None:
        pytest.skip("no recorded memory_train in this checkout")
    return got


@pytest.fixture(scope="module")
def kv_cases():
    got = key.kv_cases()
    if got is None:
        pytest.skip("no recorded memory_infer in this checkout")
    return got


def _opt_right(params, precision, optimizer):
    """The learner's function, written as the hint says."""
    K = {"adam": 8, "adamw": 8, "sgd_momentum": 4, "sgd": 0}[optimizer]
    return (K + (4 if precision in ("bf16_mixed", "fp16_mixed") else 0)) * params


def _kv_right(n_layer, n_head, n_kv_head, n_embd, batch, context, dtype):
    return 2 * n_layer * batch * context * n_kv_head * (n_embd // n_head) * {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}[dtype]


def _first_line(r) -> str:
    return r.message.splitlines()[0]


# ---------------------------------------------------------------- ex1: the optimizer states
def test_ex1_cases_hold_several_bytes_per_parameter(opt_cases):
    """The 'answer is the constant 8' problem: the cases need K = 8, 12, 4 (and the lab's own first, not held out)."""
    ks = {key.optimizer_bytes(*c.args) / c.args[0] for c in opt_cases}
    assert ks >= {4.0, 8.0, 12.0} and not opt_cases[0].held_out and sum(c.held_out for c in opt_cases) >= 4
    assert any("H200" in c.name for c in opt_cases) and any("H100" in c.name for c in opt_cases)


def test_ex1_right_function_passes_and_the_reference_too(opt_cases, capsys):
    assert check("lab03.ex1", _opt_right).status == "correct"
    assert "called the grader's key" in check("lab03.ex1", key.optimizer_bytes).message  # the reference itself: refused
    assert f"right on all {len(opt_cases)} cases" in capsys.readouterr().out


@pytest.mark.parametrize("fn, case, says", [
    (lambda p, prec, opt: 8 * p, "Llama-2-7B, bf16 mixed precision", "your function gave"),  # the old constant K = 8
    (lambda p, prec, opt: 4345856, "recorded training step, fp32 adamw", "your function gave"),  # the lab's value typed in
    (lambda p, prec, opt: {"sgd_momentum": 4, "sgd": 0}.get(opt, 8) * p, "Llama-2-7B", "master copy"),  # no master copy
    (lambda p, prec, opt: (12 if prec != "fp32" else 8) * p, "recorded training step, amp_bf16", "autocast keep none"),
    (lambda p, prec, opt: (12 if "mixed" in prec else 8) * p, "live TinyGPT, fp32, sgd with momentum", "gave"),
], ids=["constant K=8", "typed value", "no master copy", "master under autocast", "Adam's K for every optimizer"])
def test_ex1_a_half_right_function_fails_on_a_named_case(fn, case, says, opt_cases):
    r = check("lab03.ex1", fn)
    assert r.status == "wrong" and f"not right on '{case}" in _first_line(r), r.message
    assert says in r.message


def test_ex1_reference_is_the_ledgers_line_on_the_recorded_steps(opt_cases):
    """On each recorded step the reference is the recorded prediction's optimizer-states row, and the measured row is
    that plus AdamW's 4-byte step counter per parameter tensor (the lab's Question 8), to the byte."""
    from infralens_lab import evidence

    st = evidence.reference_holding("memory_train.json")
    ev = st.load("memory_train")
    seen = 0
    for prec in dict.fromkeys(r["precision"] for r in ev.values["rows"]):
        df = from_evidence(ev, prec)
        meta = df.attrs["meta"]
        case = next(c for c in opt_cases if c.name.startswith(f"recorded training step, {prec} ") and not c.held_out)
        want = key.optimizer_bytes(*case.args)
        pred = ledger.predict_for(meta)
        assert want == pred.loc[pred["category"] == "optimizer states", "bytes"].iloc[0]
        measured = int(df.loc[df["category"] == "optimizer states", "bytes"].iloc[0])
        tensors = len(ledger.param_tensors(ledger.Model.from_gpt_config(meta["config"])))
        assert measured - want == 4 * tensors, (prec, measured, want, tensors)
        seen += 1
    assert seen >= 2
    live = ledger.predict_training(ledger.Model.from_gpt_config(views.live_config()), views.live_training())
    assert key.optimizer_bytes(*opt_cases[0].args) == live.loc[live["category"] == "optimizer states", "bytes"].iloc[0]


@pytest.mark.parametrize("optimizer, make", [
    ("adamw", lambda ps: torch.optim.AdamW(ps, lr=1e-3)),
    ("adam", lambda ps: torch.optim.Adam(ps, lr=1e-3, foreach=False)),
    ("sgd_momentum", lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9)),
    ("sgd", lambda ps: torch.optim.SGD(ps, lr=1e-3)),
])
def test_ex1_reference_matches_the_bytes_torchs_optimizer_keeps_on_a_random_model(optimizer, make):
    """A fresh fp32 model of random odd widths, one step: the state tensors torch keeps (scalar step counters left
    out) hold exactly what the reference says."""
    rng = np.random.default_rng()
    widths = [int(w) for w in rng.integers(3, 97, size=int(rng.integers(2, 5)))]
    model = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in itertools.pairwise(widths)])
    params = sum(p.numel() for p in model.parameters())
    opt = make(list(model.parameters()))
    model(torch.randn(2, widths[0])).sum().backward()
    opt.step()
    held = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
               if torch.is_tensor(t) and t.dim() > 0)
    assert held == key.optimizer_bytes(params, "fp32", optimizer), (widths, optimizer)


# ---------------------------------------------------------------- ex2: the KV cache
def test_ex2_cases_cover_gqa_mqa_and_every_width_of_element(kv_cases):
    assert {c.args[6] for c in kv_cases} >= {"fp32", "bf16", "fp8"}
    assert any(c.args[2] < c.args[1] for c in kv_cases if c.held_out)  # fewer KV heads than query heads
    assert not kv_cases[0].held_out and sum(c.held_out for c in kv_cases) >= 4


def test_ex2_right_function_passes_and_the_reference_too(kv_cases):
    assert check("lab03.ex2", _kv_right).status == "correct"
    assert "called the grader's key" in check("lab03.ex2", key.kv_bytes).message  # the reference itself: refused


@pytest.mark.parametrize("fn, case, says", [
    (lambda L, h, kv, e, b, c, d: 1048576, "recorded generation, fp32, H", "your function gave"),  # the lab's value
    (lambda L, h, kv, e, b, c, d: _kv_right(L, h, h, e, b, c, d), "Llama-2-70B (GQA", "not per query head"),  # MHA count
    (lambda L, h, kv, e, b, c, d: _kv_right(L, h, kv, e, b, c, "fp32"), "recorded generation, bf16", "gave"),  # 4 B always
    (lambda L, h, kv, e, b, c, d: _kv_right(L, h, kv, e, b, c, d) / 2, "live TinyGPT generation", "the factor 2"),  # K only
    (lambda L, h, kv, e, b, c, d: _kv_right(L, kv, kv, e, b, c, d), "Llama-2-70B (GQA", "head_dim is n_embd / n_head"),
], ids=["typed value", "per query head", "fp32 always", "K only", "head_dim from KV heads"])
def test_ex2_a_half_right_function_fails_on_a_named_case(fn, case, says, kv_cases):
    r = check("lab03.ex2", fn)
    assert r.status == "wrong" and f"not right on '{case}" in _first_line(r), r.message
    assert says in r.message


def test_ex2_reference_is_the_measured_cache_on_the_recorded_generations(kv_cases):
    """The recorder measured each preallocated cache's bytes: the reference equals them to the byte, and the recorded
    prediction's KV-cache row."""
    from infralens_lab import evidence

    st = evidence.reference_holding("memory_infer.json")
    ev = st.load("memory_infer")
    seen = 0
    for dtype in dict.fromkeys(r["dtype"] for r in ev.values["rows"]):
        df = from_evidence(ev, dtype)
        case = next(c for c in kv_cases if c.name.startswith(f"recorded generation, {dtype},") and not c.held_out)
        want = key.kv_bytes(*case.args)
        assert want == int(df.loc[df["category"] == "KV cache", "bytes"].iloc[0])
        pred = ledger.predict_for(df.attrs["meta"])
        assert want == pred.loc[pred["category"] == "KV cache", "bytes"].iloc[0]
        seen += 1
    assert seen >= 2


def test_ex2_reference_matches_a_preallocated_cache_of_random_shape():
    """Fresh random shapes (odd ones included): the reference equals the bytes of the K and V tensors a decoder
    would preallocate, (batch, kv_heads, context, head_dim) per layer, in the dtype."""
    rng = np.random.default_rng()
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    for _ in range(5):
        kv = int(rng.integers(1, 5))
        h = kv * int(rng.integers(1, 4))
        e = h * int(rng.integers(1, 9))
        L, b, ctx = (int(x) for x in rng.integers(1, 7, size=3))
        d = str(rng.choice(list(torch_dtype)))
        cache = [torch.empty(b, kv, ctx, e // h, dtype=torch_dtype[d]) for _ in range(2 * L)]
        assert key.kv_bytes(L, h, kv, e, b, ctx, d) == sum(t.numel() * t.element_size() for t in cache)


def test_exercises_run_their_own_first_case_in_the_notebooks_terms():
    """The first case of each is the lab's own: TinyGPT's live step and generation (no recording needed for its args)."""
    cfg, t = views.live_config(), views.live_training()
    psi = ledger.param_count(ledger.Model.from_gpt_config(cfg))
    assert fx.cases("infralens_lab.quiz.keys.lab03:optimizer_cases")[0].args == (psi, t.precision, t.optimizer)
    assert fx.cases("infralens_lab.quiz.keys.lab03:kv_cases")[0].args == (
        cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.n_embd, key.LIVE_INFER_BATCH, cfg.block_size, "fp32")
