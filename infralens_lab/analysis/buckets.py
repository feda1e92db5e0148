"""DDP's gradient buckets: the one rule for how many all-reduces a step makes and what each carries.

``torch.nn.parallel.DistributedDataParallel`` packs gradients into flat buckets and all-reduces each bucket
once its last gradient is ready. After the first iteration its ``Reducer`` rebuilds the buckets in the order
the gradients became ready (``_get_ddp_logging_data()``: ``prev_iteration_grad_ready_order_indices``,
``rebuilt_bucket_sizes``), with torch's ``compute_bucket_assignment_by_size``:

- **whole tensors**: a tensor is never split across buckets, so one tensor larger than the cap is a bucket
  of its own (with whatever was already waiting in the open bucket);
- a bucket **closes as soon as it holds at least its cap**;
- the **first** bucket's cap is 1 MiB (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``) only when
  ``bucket_cap_mb`` is left at its default (None → 25 MiB); an explicit ``bucket_cap_mb`` caps every bucket,
  the first included;
- gradients of different dtypes or devices never share a bucket (the sizes here are one dtype's).

Tested against the rebuilt bucket sizes DDP reports on several models (tests/test_distributed_buckets.py).
Bytes are bytes; MiB = 2**20 B (``units``).
"""
from __future__ import annotations

from ..units import MiB

DEFAULT_CAP_MB = 25.0             # torch's _DEFAULT_BUCKET_CAP_MB, used when bucket_cap_mb is None
FIRST_BUCKET_BYTES = 1 * MiB      # torch's _DEFAULT_FIRST_BUCKET_BYTES, only with the default cap


def bucket_caps(bucket_cap_mb: float | None = None) -> tuple[int, int]:
    """``(first_cap_bytes, cap_bytes)``: ``(1 MiB, 25 MiB)`` for DDP's default (``None``), ``(c, c)`` for an
    explicit ``bucket_cap_mb = c`` (MiB, bytes rounded down as torch does: ``int(c * 2**20)``)."""
    if bucket_cap_mb is None:
        return FIRST_BUCKET_BYTES, int(DEFAULT_CAP_MB * MiB)
    if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) or bucket_cap_mb <= 0:
        raise ValueError(f"bucket_cap_mb={bucket_cap_mb!r}; expected a positive number of MiB, or None for "
                         f"DDP's default ({DEFAULT_CAP_MB:g} MiB, first bucket 1 MiB)")
    cap = int(bucket_cap_mb * MiB)
    if cap < 1:
        raise ValueError(f"bucket_cap_mb={bucket_cap_mb!r} is below one byte; expected a positive size")
    return cap, cap


def bucket_plan(grad_bytes_ready_order: list[int], bucket_cap_mb: float | None = None) -> list[int]:
    """Bytes per bucket, in the order DDP reduces them: the gradients (bytes, one dtype) in the order they
    become ready in backward (for a plain stack of layers: last layer first), packed whole, each bucket
    closed once it holds at least its cap (see the module doc for the caps)."""
    sizes = list(grad_bytes_ready_order)
    bad = [s for s in sizes if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad:
        raise ValueError(f"gradient sizes {bad[:3]} are not byte counts; expected non-negative ints")
    first, cap = bucket_caps(bucket_cap_mb)
    buckets, cur, limit = [], 0, first
    for b in sizes:
        cur += b
        if cur >= limit:
            buckets.append(cur)
            cur, limit = 0, cap
    if cur:
        buckets.append(cur)
    return buckets


def bucket_count(grad_bytes_ready_order: list[int], bucket_cap_mb: float | None = None) -> int:
    """How many buckets (all-reduce calls per synchronised backward): ``len(bucket_plan(...))``."""
    return len(bucket_plan(grad_bytes_ready_order, bucket_cap_mb))


def rule_text(bucket_cap_mb: float | None = None) -> str:
    """The rule in one line, with the caps it uses (for captions and formulas)."""
    first, cap = bucket_caps(bucket_cap_mb)
    head = f"first bucket {first / MiB:g} MiB, then {cap / MiB:g} MiB" if first != cap else f"every bucket {cap / MiB:g} MiB"
    return f"whole tensors in gradient-ready order, a bucket closes once it holds at least its cap ({head})"
