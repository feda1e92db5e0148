"""A small decoder-only transformer (GPT style) the labs profile and measure.

Small enough to train a step on a laptop CPU in well under a second, shaped like the real
thing (pre-norm blocks, causal self-attention with optional grouped KV heads, GELU MLP,
untied embedding and LM head) so that the memory ledger's formulas apply to it term by term.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    """Shape of the model. ``n_kv_head`` < ``n_head`` gives grouped-query attention."""

    n_layer: int = 2
    n_head: int = 4
    n_kv_head: int = 4
    n_embd: int = 128
    ffn: int = 512
    vocab: int = 512
    block_size: int = 128

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_kv_head", "n_embd", "ffn", "vocab", "block_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"GPTConfig.{name} = {v!r}; expected a positive int")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} is not divisible by n_kv_head={self.n_kv_head}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class Attention(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.c = c
        kv = c.n_kv_head * c.head_dim
        self.q = nn.Linear(c.n_embd, c.n_embd, bias=False)
        self.kv = nn.Linear(c.n_embd, 2 * kv, bias=False)
        self.proj = nn.Linear(c.n_embd, c.n_embd, bias=False)

    def forward(self, x, cache: dict | None = None):
        B, T, _ = x.shape
        c = self.c
        q = self.q(x).view(B, T, c.n_head, c.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(B, T, 2, c.n_kv_head, c.head_dim).permute(2, 0, 3, 1, 4)
        if cache is not None:  # inference with a KV cache: append, then attend to everything so far
            pos = cache["pos"]
            cache["k"][:, :, pos:pos + T] = k
            cache["v"][:, :, pos:pos + T] = v
            k, v = cache["k"][:, :, :pos + T], cache["v"][:, :, :pos + T]
        rep = c.n_head // c.n_kv_head
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        causal = cache is None or T > 1
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal and k.shape[2] == T)
        return self.proj(y.transpose(1, 2).reshape(B, T, c.n_embd))


class Block(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.n_embd)
        self.attn = Attention(c)
        self.ln2 = nn.LayerNorm(c.n_embd)
        self.fc = nn.Linear(c.n_embd, c.ffn)
        self.out = nn.Linear(c.ffn, c.n_embd)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, c: GPTConfig = GPTConfig()):
        super().__init__()
        self.config = c
        self.tok = nn.Embedding(c.vocab, c.n_embd)
        self.pos = nn.Embedding(c.block_size, c.n_embd)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.head = nn.Linear(c.n_embd, c.vocab, bias=False)

    def forward(self, idx, targets=None, caches: list | None = None):
        _, T = idx.shape
        start = caches[0]["pos"] if caches else 0
        if start + T > self.config.block_size:
            raise ValueError(f"sequence end {start + T} exceeds block_size={self.config.block_size}")
        x = self.tok(idx) + self.pos(torch.arange(start, start + T, device=idx.device))
        for i, blk in enumerate(self.blocks):
            x = blk(x, caches[i] if caches else None)
        if caches:
            for cache in caches:
                cache["pos"] += T
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def new_kv_cache(self, batch: int, max_len: int | None = None, dtype=None, device=None) -> list[dict]:
        """Preallocated K and V per layer: (batch, n_kv_head, max_len, head_dim) each."""
        c = self.config
        max_len = max_len or c.block_size
        p = next(self.parameters())
        dtype, device = dtype or p.dtype, device or p.device
        shape = (batch, c.n_kv_head, max_len, c.head_dim)
        return [{"k": torch.empty(shape, dtype=dtype, device=device),
                 "v": torch.empty(shape, dtype=dtype, device=device), "pos": 0} for _ in range(c.n_layer)]
