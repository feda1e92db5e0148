"""workloads.pipeline: the bubble and the fixed step train the same model on the same first batch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from infralens_lab.workloads.pipeline import CHARS_PER_TOKEN, GPU_CONFIG, default_sizes, make_step, tokenize_batch
from infralens_lab.workloads.tiny_gpt import GPTConfig

SMALL = GPTConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=32, ffn=64, vocab=97, block_size=16)


def test_tokenizer_is_deterministic_and_in_range():
    a = tokenize_batch(np.random.default_rng(3), batch=3, seq=5, vocab=97)
    b = tokenize_batch(np.random.default_rng(3), batch=3, seq=5, vocab=97)
    assert a.shape == (3, 6) and a.dtype == np.int64 and (a == b).all()
    assert a.min() >= 0 and a.max() < 97
    # hand-check the first token: fold CHARS_PER_TOKEN characters with h = (h*131 + c) % 1_000_003
    text = np.random.default_rng(3).integers(32, 127, size=6 * CHARS_PER_TOKEN).tolist()
    h = 0
    for c in text[:CHARS_PER_TOKEN]:
        h = (h * 131 + c) % 1_000_003
    assert a[0, 0] == h % 97


def test_bubble_and_fixed_agree_on_the_first_step():
    bubble, fixed = make_step("bubble", config=SMALL, batch=2), make_step("fixed", config=SMALL, batch=2)
    bubble()
    fixed()
    # same seed, same first batch, same initial weights: the first losses agree to float32 rounding
    torch.testing.assert_close(torch.tensor(fixed.mean_loss()), torch.tensor(bubble.mean_loss()), rtol=1e-5, atol=1e-6)
    assert bubble.losses and fixed.losses == []  # the fixed step never synchronises per step
    for _ in range(2):
        fixed()
    assert fixed.steps == 3 and np.isfinite(fixed.mean_loss())


def test_sizes_by_device():
    assert default_sizes("cpu") == (GPTConfig(), 8)
    assert default_sizes("cuda") == (GPU_CONFIG, 32)


@pytest.mark.parametrize("kwargs, match", [
    (dict(version="slow"), "expected one of"),
    (dict(version="fixed", batch=0), "batch=0"),
    (dict(version="fixed", seq=17), "seq=17"),
    (dict(version="fixed", depth=0), "depth=0"),
])
def test_bad_arguments(kwargs, match):
    version = kwargs.pop("version")
    with pytest.raises(ValueError, match=match):
        make_step(version, config=SMALL, **kwargs)


def test_mean_loss_before_any_step():
    with pytest.raises(ValueError, match="no step has run"):
        make_step("bubble", config=SMALL).mean_loss()
