"""A TinyGPT training step with an input-pipeline bubble, and the same step with the bubble fixed.

``bubble``: each step prepares its batch on the host in Python and numpy (a toy character
tokenizer: about a millisecond or more of interpreter work), copies it to the device from
ordinary pageable memory (the copy is synchronous for the CPU), and reads ``loss.item()``
(a device->host sync) at the end. While the host tokenizes, the GPU has nothing queued: on a
fast GPU the step is mostly idle time.

``fixed``: batches are prepared ahead into pinned (page-locked) host memory, standing in for
DataLoader worker processes; each step starts an asynchronous copy (``non_blocking=True``)
and never synchronises: the loss is summed on the device and read once at the end
(:meth:`Pipeline.mean_loss`). The host runs ahead and keeps the GPU fed.

Both wrap their phases in ranges ``data``, ``forward``, ``backward``, ``optimizer`` (and
``log`` for the bubble's ``loss.item()``), visible in torch.profiler and, on a GPU, in NVTX.
Sizes (:func:`default_sizes`): on a CPU the default TinyGPT (2 layers, width 128) on 8 × 128
tokens, well under 0.5 s a step; on a GPU a wider one (4 layers, width 512, vocab 4096) on
32 × 256 tokens, so that a step's GPU work (tens of ms at fp32) outlasts the CPU time to
launch it and the tokenizer's gap stands out.
"""
from __future__ import annotations

import numpy as np
import torch

from ..annotate import annotate
from .tiny_gpt import GPTConfig, TinyGPT
from .. import device as device_mod  # the module: its mode is decided (and patched in tests) at run time

VERSIONS = ("bubble", "fixed")
CHARS_PER_TOKEN = 4  # the toy tokenizer folds this many characters into one token


def tokenize_batch(rng: np.random.Generator, batch: int, seq: int, vocab: int) -> np.ndarray:
    """Host work standing in for real input processing: make random "text" and fold every
    :data:`CHARS_PER_TOKEN` characters into a token in a Python loop. Returns int64 (batch, seq + 1)."""
    out = np.empty((batch, seq + 1), dtype=np.int64)
    for b in range(batch):
        text = rng.integers(32, 127, size=(seq + 1) * CHARS_PER_TOKEN).tolist()
        toks = []
        for i in range(0, len(text), CHARS_PER_TOKEN):
            h = 0
            for c in text[i:i + CHARS_PER_TOKEN]:
                h = (h * 131 + c) % 1_000_003
            toks.append(h % vocab)
        out[b] = toks
    return out


GPU_CONFIG = GPTConfig(n_layer=4, n_head=8, n_kv_head=8, n_embd=512, ffn=2048, vocab=4096, block_size=256)


def default_sizes(device: str) -> tuple[GPTConfig, int]:
    """``(config, batch)`` for a device: small on ``'cpu'``, larger on ``'cuda'`` (see module doc)."""
    return (GPTConfig(), 8) if device == "cpu" else (GPU_CONFIG, 32)


class Pipeline:
    """One training step per call. ``version`` is ``'bubble'`` or ``'fixed'`` (see module doc)."""

    def __init__(self, version: str, device: str | None = None, config: GPTConfig | None = None,
                 batch: int | None = None, seq: int | None = None, prefetch: int = 4, seed: int = 0):
        if version not in VERSIONS:
            raise ValueError(f"pipeline version {version!r}; expected one of {VERSIONS}")

        self.version = version
        self.device = device or device_mod.torch_device()
        cfg, default_batch = default_sizes(self.device)
        self.config = config or cfg
        batch = default_batch if batch is None else batch
        self.seq = seq or self.config.block_size
        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch={batch!r}; expected a positive int")
        if not isinstance(self.seq, int) or not 1 <= self.seq <= self.config.block_size:
            raise ValueError(f"seq={self.seq!r}; expected an int in [1, block_size={self.config.block_size}]")
        if not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch={prefetch!r}; expected a positive int")
        self.batch = batch
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.model = TinyGPT(self.config).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.losses: list[float] = []
        self.loss_sum = torch.zeros((), device=self.device)
        self.steps = 0
        self.ready: list[torch.Tensor] = []
        if version == "fixed":
            pin = self.device != "cpu"
            for _ in range(prefetch):  # prepared ahead, as DataLoader workers would
                t = torch.from_numpy(tokenize_batch(self.rng, batch, self.seq, self.config.vocab))
                self.ready.append(t.pin_memory() if pin else t)

    def _batch(self):
        if self.version == "bubble":
            host = torch.from_numpy(tokenize_batch(self.rng, self.batch, self.seq, self.config.vocab))
            dev = host.to(self.device)  # pageable memory: the CPU waits for this copy
        else:
            host = self.ready[self.steps % len(self.ready)]
            dev = host.to(self.device, non_blocking=True)  # pinned: an asynchronous DMA
        return dev[:, :-1], dev[:, 1:].contiguous()

    def __call__(self) -> None:
        with annotate("data"):
            x, y = self._batch()
        with annotate("forward"):
            _, loss = self.model(x, y)
        with annotate("backward"):
            loss.backward()
        with annotate("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        if self.version == "bubble":
            with annotate("log"):
                self.losses.append(loss.item())  # device -> host sync, every step
        else:
            self.loss_sum += loss.detach()  # stays on the device; no sync
        self.steps += 1

    def mean_loss(self) -> float:
        """Mean loss over the steps run so far (one sync for the fixed version)."""
        if not self.steps:
            raise ValueError("no step has run yet; call the pipeline first")
        if self.version == "bubble":
            return float(np.mean(self.losses))
        return float(self.loss_sum.item()) / self.steps


def make_step(version: str, device: str | None = None, **kwargs) -> Pipeline:
    """A :class:`Pipeline` (call it to run one step); keyword arguments as for the class."""
    return Pipeline(version, device=device, **kwargs)
