"""A TinyGPT training step with an input-pipeline bubble, and the same step with the bubble fixed.

``bubble``: each step prepares its batch on the host in Python and numpy (a toy character
tokenizer: about a millisecond or more of interpreter work), copies it to the device from
ordinary pageable memory (the copy is synchronous for the CPU), and reads ``loss.item()``
(a device->host sync) at the end. While the host tokenizes, the GPU has nothing queued: on a
fast GPU the step is mostly idle time.

``fixed``: the same batches are tokenized by DataLoader worker processes while the GPU works
(:class:`TokenBatches`, the same :func:`tokenize_batch` on the same per-batch seeds, so both versions
train on the same data and compute the same losses), handed over in pinned (page-locked) host memory;
each step starts an asynchronous copy (``non_blocking=True``) and never synchronises: the loss is
summed on the device and read once at the end (:meth:`Pipeline.mean_loss`). The host runs ahead and
keeps the GPU fed, and the tokenizer's time is hidden behind the GPU's work, not skipped.

Both wrap their phases in ranges ``data``, ``forward``, ``backward``, ``optimizer`` (and
``log`` for the bubble's ``loss.item()``), visible in torch.profiler and, on a GPU, in NVTX.
Sizes (:func:`default_sizes`): on a CPU the default TinyGPT (2 layers, width 128) on 8 × 128
tokens, well under 0.5 s a step; on a GPU a wider one (4 layers, width 512, vocab 4096) on
32 × 256 tokens, so that a step's GPU work (tens of ms at fp32) outlasts the CPU time to
launch it and the tokenizer's gap stands out.

**One change at a time** (:data:`VARIANTS`, :func:`make_variant`): the same step built from four
orthogonal switches (:class:`Variant`), so each edit of the fix can be profiled on its own.
``prefetch``: each step's batch is tokenized ahead by ``workers`` DataLoader worker processes (up to ``depth``
batches in flight) instead of in the step: the same work, overlapped with the GPU's, not skipped.
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

import itertools
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils.data

from .. import device as device_mod  # the module: its mode is decided (and patched in tests) at run time
from ..annotate import annotate
from .tiny_gpt import GPTConfig, TinyGPT

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


def batch_rng(seed: int, index: int) -> np.random.Generator:
    """The random stream of batch ``index`` of a run seeded ``seed``: every variant tokenizes batch ``i`` from
    the same stream, in the step or in a worker process, so all of them train on the same data."""
    return np.random.default_rng([seed, index])


class TokenBatches(torch.utils.data.Dataset):
    """Batch ``i`` = :func:`tokenize_batch` on :func:`batch_rng` ``(seed, i)``, as an int64 tensor: the work a
    prefetching variant hands to DataLoader worker processes (picklable, so spawned workers can rebuild it)."""

    def __init__(self, seed: int, batch: int, seq: int, vocab: int):
        self.seed, self.batch, self.seq, self.vocab = seed, batch, seq, vocab

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(tokenize_batch(batch_rng(self.seed, index), self.batch, self.seq, self.vocab))


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
def torch_setting(get: Callable[[], Any], set_: Callable[[Any], Any], value):
    """One of torch's process-wide settings at ``value`` for the duration of the block, restored afterwards (also
    after an exception), so nothing outside the block sees it."""
    old = get()
    set_(value)
    try:
        yield
    finally:
        set_(old)


def matmul_precision(p: str):
    """``torch.set_float32_matmul_precision(p)`` for the block. ``'high'`` lets fp32 matmuls use TF32 (it is what
    ``torch.backends.cuda.matmul.allow_tf32 = True`` sets), ``'highest'`` keeps them in full fp32."""
    return torch_setting(torch.get_float32_matmul_precision, torch.set_float32_matmul_precision, p)


def cpu_threads(n: int):
    """``torch.set_num_threads(n)`` for the block: CPU kernels that split work (and scratch) per thread measure
    the same on any machine at a fixed count."""
    return torch_setting(torch.get_num_threads, torch.set_num_threads, n)


class Pipeline:
    """One training step per call. ``version`` is a name in :data:`VARIANTS` (``'bubble'``, ``'fixed'``,
    ...) or a :class:`Variant`. A prefetching variant starts ``workers`` DataLoader worker processes when it is
    built; they tokenize the batches the steps will use, up to ``depth`` ahead (:meth:`close` stops them)."""

    def __init__(self, version: str | Variant, device: str | None = None, config: GPTConfig | None = None,
                 batch: int | None = None, seq: int | None = None, depth: int = 4, seed: int = 0,
                 workers: int = 2):
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
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers={workers!r}; expected a positive int (DataLoader worker processes)")
        self.batch, self.seed = batch, seed
        torch.manual_seed(seed)
        self.model = TinyGPT(self.config).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.losses: list[float] = []  # per step, read with .item() (sync_every_step)
        self._curve: list[torch.Tensor] = []  # per step, left on the device (no sync until loss_curve())
        self.loss_sum = torch.zeros((), device=self.device)
        self.steps = 0
        kind = torch.device(self.device).type
        self.pins = self.variant.pinned and kind != "cpu"  # pinning needs a device to copy to (module doc)
        v = self.variant
        self.tf32 = (lambda: matmul_precision("high")) if v.precision == "tf32" else nullcontext
        self.autocast = (lambda: torch.autocast(kind, torch.bfloat16)) if v.precision == "bf16" else nullcontext
        self.data = TokenBatches(seed, batch, self.seq, self.config.vocab)
        self._ahead = None
        if v.prefetch:  # worker processes tokenize the steps' batches, as a training script's DataLoader does
            self.workers = workers
            self._ahead = iter(torch.utils.data.DataLoader(
                self.data, batch_size=None, sampler=itertools.count(), num_workers=workers,
                prefetch_factor=max(1, depth // workers), pin_memory=self.pins))
        else:
            self.workers = 0

    def _batch(self):
        if self.variant.prefetch:
            if self._ahead is None:
                raise RuntimeError("this pipeline was closed (its DataLoader workers are stopped); build a new one")
            host = next(self._ahead)  # batch number self.steps, tokenized by a worker (pinned by the loader)
        else:
            host = self.data[self.steps]  # the same batch, tokenized here, in the step
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
            kept = loss.detach()
            self.loss_sum += kept  # stays on the device; no sync
            self._curve.append(kept)
        self.steps += 1

    def loss_curve(self) -> list[float]:
        """The loss of every step run so far, in order (one sync when the losses stayed on the device)."""
        if self.variant.sync_every_step:
            return list(self.losses)
        return torch.stack(self._curve).tolist() if self._curve else []

    def mean_loss(self) -> float:
        """Mean loss over the steps run so far (one sync when the loss was summed on the device)."""
        if not self.steps:
            raise ValueError("no step has run yet; call the pipeline first")
        if self.variant.sync_every_step:
            return float(np.mean(self.losses))
        return float(self.loss_sum.item()) / self.steps

    def close(self) -> None:
        """Stop the DataLoader worker processes of a prefetching variant (a no-op otherwise); the pipeline
        cannot step after it."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead._shutdown_workers()  # what the iterator's own __del__ calls: joins the workers now


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
