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

**One change at a time** (:data:`VARIANTS`, :func:`make_variant`): the same step built from four
orthogonal switches (:class:`Variant`), so each edit of the fix can be profiled on its own.
``prefetch``: batches prepared ahead (a ring of ``depth`` batches) instead of tokenized in the step.
``pinned``: the host batch sits in pinned memory and is copied with ``non_blocking=True``; without
``prefetch`` the freshly tokenized batch is pinned every step, which costs a host copy into pinned memory
per step (``pin_memory()`` takes the block from PyTorch's caching host allocator, so the page-locking
itself is paid only in the first steps). On a CPU there is no host-to-device copy, so ``pinned`` is a documented no-op there
(:attr:`Pipeline.pins` is False). ``sync_every_step``: ``loss.item()`` each step, or the loss summed
on the device. ``precision``: ``"fp32"`` (as is; torch leaves TF32 off for matmuls), ``"tf32"``
(:func:`matmul_precision` ``'high'``, which sets ``torch.backends.cuda.matmul.allow_tf32``, during the step
only and restored after it, so it never leaks into another measurement; a CPU ignores the flag), ``"bf16"`` (``torch.autocast`` with
bfloat16 around forward and loss, on ``"cuda"`` or ``"cpu"``). ``bubble`` and ``fixed`` are two rows
of that table.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from ..annotate import annotate
from .tiny_gpt import GPTConfig, TinyGPT
from .. import device as device_mod  # the module: its mode is decided (and patched in tests) at run time

VERSIONS = ("bubble", "fixed")  # the two versions the recorded traces and make_step use
PRECISIONS = ("fp32", "tf32", "bf16")
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


@dataclass(frozen=True)
class Variant:
    """The switches of one pipeline variant (see module doc). ``base`` is the variant it differs from
    and ``changed`` says, in words, the one thing changed against it (tables print both)."""

    prefetch: bool
    pinned: bool
    sync_every_step: bool
    precision: str = "fp32"
    base: str | None = None
    changed: str = ""

    def __post_init__(self):
        for name in ("prefetch", "pinned", "sync_every_step"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Variant.{name} = {getattr(self, name)!r}; expected True or False")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r}; expected one of {PRECISIONS}")


VARIANTS = {
    "bubble": Variant(False, False, True, "fp32", None, "nothing: the baseline"),
    "bubble+prefetch": Variant(True, False, True, "fp32", "bubble", "batches tokenized ahead (pageable copy)"),
    "bubble+pinned": Variant(False, True, True, "fp32", "bubble", "pinned batch + non_blocking copy (pinned each step)"),
    "bubble+no_sync": Variant(False, False, False, "fp32", "bubble", "no per-step loss.item() (loss summed on device)"),
    "fixed": Variant(True, True, False, "fp32", "bubble", "all three edits at once"),
    "fixed+tf32": Variant(True, True, False, "tf32", "fixed", "TF32 matmuls (allow_tf32 during the step)"),
    "fixed+bf16": Variant(True, True, False, "bf16", "fixed", "bf16 autocast around forward and loss"),
}


@contextmanager
def matmul_precision(p: str):
    """``torch.set_float32_matmul_precision(p)`` for the duration of the block, restored afterwards (also after
    an exception), so nothing outside the block sees it. ``'high'`` lets fp32 matmuls use TF32 (it is what
    ``torch.backends.cuda.matmul.allow_tf32 = True`` sets), ``'highest'`` keeps them in full fp32."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(p)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


class Pipeline:
    """One training step per call. ``version`` is a name in :data:`VARIANTS` (``'bubble'``, ``'fixed'``,
    ...) or a :class:`Variant`; ``depth`` batches are prepared ahead when the variant prefetches."""

    def __init__(self, version: str | Variant, device: str | None = None, config: GPTConfig | None = None,
                 batch: int | None = None, seq: int | None = None, depth: int = 4, seed: int = 0):
        if isinstance(version, Variant):
            self.variant, self.version = version, "custom"
        elif version in VARIANTS:
            self.variant, self.version = VARIANTS[version], version
        else:
            raise ValueError(f"pipeline version {version!r}; expected one of {tuple(VARIANTS)} or a Variant")
        self.device = device or device_mod.torch_device()
        cfg, default_batch = default_sizes(self.device)
        self.config = config or cfg
        batch = default_batch if batch is None else batch
        self.seq = seq or self.config.block_size
        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch={batch!r}; expected a positive int")
        if not isinstance(self.seq, int) or not 1 <= self.seq <= self.config.block_size:
            raise ValueError(f"seq={self.seq!r}; expected an int in [1, block_size={self.config.block_size}]")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth={depth!r}; expected a positive int (batches prepared ahead)")
        self.batch = batch
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.model = TinyGPT(self.config).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.losses: list[float] = []
        self.loss_sum = torch.zeros((), device=self.device)
        self.steps = 0
        kind = torch.device(self.device).type
        self.pins = self.variant.pinned and kind != "cpu"  # pinning needs a device to copy to (module doc)
        v = self.variant
        self.tf32 = (lambda: matmul_precision("high")) if v.precision == "tf32" else nullcontext
        self.autocast = (lambda: torch.autocast(kind, torch.bfloat16)) if v.precision == "bf16" else nullcontext
        self.ready: list[torch.Tensor] = []
        if v.prefetch:
            for _ in range(depth):  # prepared ahead, as DataLoader workers would
                t = torch.from_numpy(tokenize_batch(self.rng, batch, self.seq, self.config.vocab))
                self.ready.append(t.pin_memory() if self.pins else t)

    def _batch(self):
        if self.variant.prefetch:
            host = self.ready[self.steps % len(self.ready)]
        else:
            host = torch.from_numpy(tokenize_batch(self.rng, self.batch, self.seq, self.config.vocab))
            if self.pins:
                host = host.pin_memory()  # one more host copy per step, into a pinned block
        # pinned: an asynchronous DMA; pageable: the CPU waits for this copy
        dev = host.to(self.device, non_blocking=self.pins)
        return dev[:, :-1], dev[:, 1:].contiguous()

    def __call__(self) -> None:
        with annotate("data"):
            x, y = self._batch()
        with self.tf32():  # precision "tf32": TF32 matmuls for this step only (forward and backward)
            with annotate("forward"), self.autocast():  # precision "bf16": forward and loss in bf16
                _, loss = self.model(x, y)
            with annotate("backward"):
                loss.backward()
        with annotate("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        if self.variant.sync_every_step:
            with annotate("log"):
                self.losses.append(loss.item())  # device -> host sync, every step
        else:
            self.loss_sum += loss.detach()  # stays on the device; no sync
        self.steps += 1

    def mean_loss(self) -> float:
        """Mean loss over the steps run so far (one sync when the loss was summed on the device)."""
        if not self.steps:
            raise ValueError("no step has run yet; call the pipeline first")
        if self.variant.sync_every_step:
            return float(np.mean(self.losses))
        return float(self.loss_sum.item()) / self.steps


def make_step(version: str, device: str | None = None, **kwargs) -> Pipeline:
    """A :class:`Pipeline` of one of :data:`VERSIONS` (call it to run one step); keyword arguments as
    for the class."""
    if version not in VERSIONS:
        raise ValueError(f"pipeline version {version!r}; expected one of {VERSIONS} "
                         f"(the other variants: make_variant)")
    return Pipeline(version, device=device, **kwargs)


def make_variant(name: str, device: str | None = None, **kwargs) -> Pipeline:
    """A :class:`Pipeline` of the variant ``name`` in :data:`VARIANTS`; keyword arguments as for the class."""
    if name not in VARIANTS:
        raise ValueError(f"pipeline variant {name!r}; expected one of {tuple(VARIANTS)}")
    return Pipeline(name, device=device, **kwargs)
