"""The workloads the project's count gates check, and a step with regressions to inject.

:data:`GATED` names each workload the threshold file (``data/gates.json``) speaks of; each entry
builds a step (a callable, one step per call). On a CPU they are small enough for CI: the TinyGPT
training step (the fixed step's own work: no ``.item()``, batches tokenized in the step), the copies and the attention kernels (one
launch each of ``copy_coalesced`` and ``copy_strided``; naive attention's three kernels or the
tiled kernel's one, in Triton's interpreter on a CPU).

:class:`MLPStep` is an inference step written the intended way (a contiguous input reshaped as a
view, a bias-GELU-scale chain that ``torch.compile`` fuses into one kernel, TF32 matmuls, nothing
read back to the host), with one regression switched on by name (:data:`REGRESSIONS`):

* ``item``: logs ``y.mean().item()`` every step: a device-to-host sync;
* ``noncontig``: the input arrives as a transposed view, so ``reshape`` silently copies it;
* ``lost_fusion``: a graph break in the middle of the elementwise chain, so a compiled step runs it
  as two fused kernels instead of one (eager runs are unchanged: eager never fused it);
* ``fp32_matmul``: the matmuls run in full fp32 (``set_float32_matmul_precision('highest')``)
  where TF32 (``'high'``) was intended: the same ops, slower tensor-core-free GEMM kernels on a GPU.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..device import is_gpu, torch_device
from .pipeline import make_variant, matmul_precision
from .tiny_gpt import GPTConfig

CI_CONFIG = GPTConfig(n_layer=1, n_head=2, n_kv_head=2, n_embd=64, ffn=128, vocab=256, block_size=32)
CI_BATCH = 2
REGRESSIONS = ("item", "noncontig", "lost_fusion", "fp32_matmul")
INTENDED_PRECISION = "high"  # TF32 matmuls on a GPU (ignored by CPU matmuls)


GATED_TINYGPT = {"fixed": "bubble+no_sync", "bubble": "bubble"}  # gate name -> pipeline variant it counts


def tinygpt_step(version: str = "fixed") -> Callable[[], None]:
    """A TinyGPT training step on the CPU at CI sizes. ``"bubble"`` is :mod:`.pipeline`'s bubble step (a
    ``loss.item()`` every step); ``"fixed"`` counts the fixed step's own work: no host sync, batches tokenized in
    the step (the ``bubble+no_sync`` variant). The fixed pipeline's DataLoader workers are left out on purpose:
    where the main process unpickles a prefetched batch (an ``aten::empty`` and an ``aten::set_``) depends on when
    the worker delivered it, so its aten ops per step came out 322, 323 or 324 run to run, and a count gate must
    not flake. On a CPU ``pinned``, the fixed step's third edit, changes nothing.

    ``.compile_target()`` returns ``(model, (idx, targets))``: the forward whose graph breaks count (a
    whole training step always breaks at ``backward`` and the optimizer)."""
    if version not in GATED_TINYGPT:
        raise ValueError(f"TinyGPT gate version {version!r}; expected one of {sorted(GATED_TINYGPT)}")
    step = make_variant(GATED_TINYGPT[version], device="cpu", config=CI_CONFIG, batch=CI_BATCH)
    idx = torch.randint(0, CI_CONFIG.vocab, (CI_BATCH, CI_CONFIG.block_size), generator=torch.Generator().manual_seed(0))
    step.compile_target = lambda: (step.model, (idx, idx))  # the forward torch.compile would see
    return step


def copies_step(n: int = 4096) -> Callable[[], None]:
    """One coalesced and one stride-8 Triton copy of ``n`` fp32 elements (2 launches a step)."""
    from ..kernels import copies  # heavy: kernels.copies imports triton

    x = torch.randn(n, device=torch_device())

    def step():
        copies.copy(x)
        copies.copy_strided(x, 8)

    return step


def attention_step(variant: str, shape=(1, 1, 32, 16)) -> Callable[[], None]:
    """One forward of an attention ``variant`` (``naive``, ``tiled``) on (B, H, N, D) inputs: fp32 in the
    interpreter, fp16 on a GPU (the kernels take fp16/bf16 there)."""
    from ..kernels import attention  # heavy: kernels.attention imports triton

    if variant not in attention.VARIANTS:
        raise ValueError(f"attention variant {variant!r}; expected one of {sorted(attention.VARIANTS)}")
    torch.manual_seed(0)
    dtype = torch.float16 if is_gpu() else torch.float32
    q, k, v = (torch.randn(shape, device=torch_device(), dtype=dtype) for _ in range(3))
    fn = attention.VARIANTS[variant]
    return lambda: fn(q, k, v)


GATED: dict[str, Callable[[], Callable[[], None]]] = {
    "tinygpt_step": tinygpt_step,
    "tinygpt_step_bubble": lambda: tinygpt_step("bubble"),  # the broken variant: .item() every step
    "copies": copies_step,
    "attention_naive": lambda: attention_step("naive"),
    "attention_tiled": lambda: attention_step("tiled"),
}


def make_gated(name: str) -> Callable[[], None]:
    """The step of gated workload ``name`` (see :data:`GATED`)."""
    if name not in GATED:
        raise ValueError(f"unknown gated workload {name!r}; expected one of {sorted(GATED)}")
    return GATED[name]()


def _chain(h, b, scale, brk: bool):
    h = h + b
    if brk:
        torch._dynamo.graph_break()  # a no-op in eager; splits the compiled graph in two
    return F.gelu(h) * scale


class MLPStep:
    """One inference step ``y = (gelu(x @ w1 + b) * s) @ w2`` with at most one regression (module doc).

    ``batch``, ``seq``, ``width``: the input is (batch, seq, width), fp32. ``compiled``: run the
    block through ``torch.compile`` (the fusion the ``lost_fusion`` regression loses exists only
    there; ``backend='eager'`` traces without generating code, for quick tests). Calling the object
    runs one step and returns ``y``.
    """

    def __init__(self, regression: str | None = None, batch: int = 4, seq: int = 32, width: int = 64,
                 compiled: bool = False, device: str | None = None, seed: int = 0, backend: str = "inductor"):
        if regression is not None and regression not in REGRESSIONS:
            raise ValueError(f"regression {regression!r}; expected None or one of {REGRESSIONS}")
        for name, v in (("batch", batch), ("seq", seq), ("width", width)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r}; expected a positive int")
        self.regression, self.compiled = regression, compiled
        self.device = device or torch_device()
        g = torch.Generator().manual_seed(seed)
        w = width
        self.w1 = (torch.randn(w, 4 * w, generator=g) / w ** 0.5).to(self.device)
        self.b = torch.randn(4 * w, generator=g).to(self.device)
        self.w2 = (torch.randn(4 * w, w, generator=g) / (4 * w) ** 0.5).to(self.device)
        self.scale = 0.5
        x = torch.randn(batch, seq, w, generator=g).to(self.device)
        # noncontig: the same values, stored seq-major (as after a permute upstream): a strided view
        self.x = x.transpose(0, 1).contiguous().transpose(0, 1) if regression == "noncontig" else x
        self.logged: list[float] = []
        brk = regression == "lost_fusion"
        self.chain = lambda h, b, s: _chain(h, b, s, brk)  # what torch.compile sees
        self._chain = torch.compile(self.chain, backend=backend) if compiled else self.chain

    def chain_args(self) -> tuple:
        """Arguments for :attr:`chain` of this step's shapes (for counting graph breaks)."""
        x2 = self.x.reshape(-1, self.x.shape[-1])
        return (x2 @ self.w1, self.b, self.scale)

    def __call__(self):
        prec = "highest" if self.regression == "fp32_matmul" else INTENDED_PRECISION
        with matmul_precision(prec):
            x2 = self.x.reshape(-1, self.x.shape[-1])  # a view when x is contiguous, else a copy
            h = self._chain(x2 @ self.w1, self.b, self.scale)
            y = h @ self.w2
        if self.regression == "item":
            self.logged.append(y.mean().item())  # "just logging": a device-to-host sync every step
        return y
