"""workloads.pipeline's one-change variants: each switch really changes what the step does, on a CPU."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from infralens_lab.workloads import pipeline
from infralens_lab.workloads.pipeline import VARIANTS, Variant, cpu_threads, make_step, make_variant, matmul_precision
from infralens_lab.workloads.tiny_gpt import GPTConfig

SMALL = GPTConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=32, ffn=64, vocab=97, block_size=16)


def _run(name, steps=2, **kw):
    p = make_variant(name, device="cpu", config=SMALL, batch=2, **kw)
    for _ in range(steps):
        p()
    return p


def test_table_names_and_the_two_versions():
    assert list(VARIANTS)[:1] == ["bubble"] and {"fixed", "fixed+tf32", "fixed+bf16"} <= set(VARIANTS)
    assert VARIANTS["bubble"] == Variant(False, False, True, "fp32", None, VARIANTS["bubble"].changed)
    assert (VARIANTS["fixed"].prefetch, VARIANTS["fixed"].pinned, VARIANTS["fixed"].sync_every_step) == (True, True, False)
    # every bubble+X differs from the bubble in exactly one switch; fixed+X from fixed in precision only
    for name, v in VARIANTS.items():
        if v.base is None or name == "fixed":
            continue
        b = VARIANTS[v.base]
        diff = [f for f in ("prefetch", "pinned", "sync_every_step", "precision") if getattr(v, f) != getattr(b, f)]
        assert len(diff) == 1, (name, diff)
    assert make_step("bubble", device="cpu", config=SMALL).variant is VARIANTS["bubble"]


def test_sync_every_step_appends_losses_and_no_sync_sums_on_device():
    synced, summed = _run("bubble"), _run("bubble+no_sync")
    assert len(synced.losses) == 2 and summed.losses == [] and summed.loss_sum.item() != 0
    # same seed, same batches, same weights: the two ways of keeping the loss agree (fp32 rounding)
    torch.testing.assert_close(torch.tensor(summed.mean_loss()), torch.tensor(synced.mean_loss()), rtol=1e-5, atol=1e-6)


def test_prefetch_does_the_same_work_in_worker_processes(monkeypatch):
    """Issue 26.3: prefetching hides the tokenizer behind the GPU's work; it must not skip it. A prefetching
    variant's main process never tokenizes (its DataLoader workers do), and every variant trains on the same
    batches: the same loss curve as the bubble, step for step (same seed, same weights; fp32 on a CPU)."""
    calls = []
    real = pipeline.tokenize_batch
    monkeypatch.setattr(pipeline, "tokenize_batch", lambda *a, **k: calls.append(1) or real(*a, **k))
    curves = {}
    for name in ("bubble", "bubble+prefetch", "bubble+no_sync", "fixed"):
        before = len(calls)
        p = _run(name, steps=5, workers=1)
        curves[name] = p.loss_curve()
        assert len(curves[name]) == 5 and p.mean_loss() == pytest.approx(np.mean(curves[name]), rel=1e-6)
        # the bubble tokenizes one batch per step in this process; a prefetching variant none (the worker does)
        assert len(calls) - before == (0 if p.variant.prefetch else 5), name
        assert p.workers == (1 if p.variant.prefetch else 0)
        p.close()
    for name, curve in curves.items():
        # same batches, same arithmetic: equal to fp32 rounding (a ring of recycled batches fails here by ~1e-1)
        torch.testing.assert_close(torch.tensor(curve), torch.tensor(curves["bubble"]), rtol=1e-5, atol=1e-6,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_batches_are_a_function_of_seed_and_index():
    d = pipeline.TokenBatches(seed=3, batch=2, seq=5, vocab=97)
    assert torch.equal(d[4], d[4]) and not torch.equal(d[4], d[5])
    assert torch.equal(d[0], torch.from_numpy(pipeline.tokenize_batch(pipeline.batch_rng(3, 0), 2, 5, 97)))
    assert not torch.equal(d[0], pipeline.TokenBatches(seed=4, batch=2, seq=5, vocab=97)[0])


def test_a_closed_prefetching_pipeline_says_so():
    p = _run("bubble+prefetch", steps=1, workers=1)
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p()
    _run("bubble", steps=1).close()  # no workers: a no-op


def test_pinned_is_a_documented_no_op_on_cpu():
    p = _run("bubble+pinned")
    assert p.variant.pinned and p.pins is False and "no-op" in pipeline.__doc__
    assert np.isfinite(p.mean_loss())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_pinned_batches_are_pinned_on_a_gpu():
    p = make_variant("fixed", device="cuda", config=SMALL, batch=2)
    assert p.pins and next(p._ahead).is_pinned()  # the DataLoader pins what its workers tokenized
    q = make_variant("bubble+prefetch", device="cuda", config=SMALL, batch=2)
    assert not next(q._ahead).is_pinned()
    p.close()
    q.close()


def test_tf32_is_set_during_the_step_only(monkeypatch):
    seen = []
    p = make_variant("fixed+tf32", device="cpu", config=SMALL, batch=2)
    forward = p.model.forward
    monkeypatch.setattr(p.model, "forward", lambda *a, **k: seen.append(torch.backends.cuda.matmul.allow_tf32)
                        or forward(*a, **k))
    before = torch.backends.cuda.matmul.allow_tf32
    p()
    assert seen == [True] and torch.backends.cuda.matmul.allow_tf32 == before
    q = make_variant("fixed", device="cpu", config=SMALL, batch=2)
    f2 = q.model.forward
    monkeypatch.setattr(q.model, "forward", lambda *a, **k: seen.append(torch.backends.cuda.matmul.allow_tf32)
                        or f2(*a, **k))
    q()
    assert seen == [True, before]


def test_matmul_precision_restores_after_an_error():
    before = torch.backends.cuda.matmul.allow_tf32
    with pytest.raises(ZeroDivisionError), matmul_precision("highest" if before else "high"):
        assert torch.backends.cuda.matmul.allow_tf32 is (not before)
        raise ZeroDivisionError("inside the context")
    assert torch.backends.cuda.matmul.allow_tf32 is before


def test_bf16_runs_forward_under_autocast_on_cpu(monkeypatch):
    dtypes = []
    p = make_variant("fixed+bf16", device="cpu", config=SMALL, batch=2)
    p.model.head.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    p()
    p()
    assert dtypes == [torch.bfloat16, torch.bfloat16] and not torch.is_autocast_enabled("cpu")
    assert p.model.head.weight.dtype == torch.float32 and np.isfinite(p.mean_loss())  # weights stay fp32
    q = _run("fixed", steps=1)
    q.model.head.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    q()
    assert dtypes[-1] == torch.float32


@pytest.mark.parametrize("call, match", [
    (lambda: make_variant("bubble+magic", device="cpu", config=SMALL), "expected one of .*bubble\\+prefetch"),
    (lambda: make_step("fixed+tf32", device="cpu", config=SMALL), "make_variant"),
    (lambda: Variant(True, True, False, "fp16"), "precision 'fp16'; expected one of \\('fp32', 'tf32', 'bf16'\\)"),
    (lambda: pipeline.Pipeline("nope", device="cpu", config=SMALL), "or a Variant"),
    (lambda: make_variant("fixed", device="cpu", config=SMALL, workers=0), "workers=0; expected a positive int"),
])
def test_bad_names_and_precisions(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_switches_must_be_bools():
    with pytest.raises(TypeError, match=re.escape("Variant.pinned = 1; expected True or False")):
        Variant(True, 1, False)


def test_cpu_threads_holds_inside_the_block_and_restores_after_an_error():
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    with pytest.raises(ZeroDivisionError), cpu_threads(want):
        assert torch.get_num_threads() == want
        _ = 1 / 0
    assert torch.get_num_threads() == before
