"""Predicted DRAM traffic and FLOPs per kernel, to hold against Nsight Compute's counters.

Each model returns a :class:`Traffic` (bytes read from and written to DRAM, FLOPs executed,
and the assumptions as a sentence a lab can print). Bytes are bytes, FLOPs count a
multiply-add as two. These are predictions: ncu's ``dram__bytes_read.sum`` /
``dram__bytes_write.sum`` are the measurement, and where the two differ the assumptions say
which one to doubt (usually an L2 reuse the model did or did not count).

Copies use a **two-level sector model**. Between L1 and L2 the unit is the 32-byte sector: a load
pays for every sector it touches, so with elements ``stride * elem_bytes`` apart each useful
element costs ``min(stride * elem_bytes, 32)`` bytes, an amplification of ``min(stride, 32 / elem_bytes)``
(``read_amplification``, what ``l1tex__t_sectors_*`` counts). Between L2 and HBM on H100/H200 the
unit is larger: DRAM is read in 64-byte sector pairs (:data:`DRAM_FETCH_BYTES`), so the amplification
there is ``min(stride, 64 / elem_bytes)`` (``dram_read_amplification``, what ``dram__bytes_read.sum``
measures once the working set is well above L2). The recorded H200 counters for fp32 strides 1..32 read
1, 2, 4, 8, 16, 16: the 32-byte model's 8 at strides 16 and 32 is the L1/L2 number, not the DRAM one.
Triton gives each thread a 16-byte vector of consecutive elements, so a warp's coalesced load is
32 x 16 B = 512 B = 16 sectors per request; once ``stride >= 2`` neighbouring threads are
``16 * stride >= 32`` bytes apart and every thread lands in its own sector: 32 sectors per request.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

SECTOR_BYTES = 32  # L1 <-> L2 transfer unit
DRAM_FETCH_BYTES = 64  # L2 <-> HBM fetch unit on H100/H200 (sector pairs), from the recorded dram__bytes_read
WARP_THREADS = 32
VECTOR_BYTES = 16  # what one thread loads per instruction in Triton's 128-bit loads


@dataclass(frozen=True)
class Traffic:
    """Predicted DRAM bytes and FLOPs of one kernel launch.

    ``useful_bytes_read`` is what the algorithm needs (equal to ``bytes_read`` unless the
    access pattern wastes part of each sector, as strided copies do).
    """

    kernel: str
    bytes_read: int
    bytes_written: int
    flops: int
    assumptions: str
    useful_bytes_read: int | None = None

    @property
    def bytes(self) -> int:
        """DRAM bytes read plus written."""
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per DRAM byte (0 for a pure copy)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "bytes": self.bytes, "flops": self.flops, "intensity": self.intensity,
                "useful_bytes_read": self.useful_bytes_read if self.useful_bytes_read is not None
                else self.bytes_read, "assumptions": self.assumptions}


def _pos_int(name: str, v, minimum: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} is {v!r} ({type(v).__name__}), expected an int")
    if v < minimum:
        raise ValueError(f"{name} is {v}, expected an int >= {minimum}")
    return v


def _elem(elem_bytes) -> int:
    _pos_int("elem_bytes", elem_bytes)
    if elem_bytes not in (1, 2, 4, 8):
        raise ValueError(f"elem_bytes is {elem_bytes}, expected 1, 2, 4 or 8")
    return elem_bytes


# --------------------------------------------------------------------------- copies
@dataclass(frozen=True)
class SectorModel:
    """What the two-level sector model predicts for a copy reading every ``stride``-th element.

    ``read_amplification``: bytes moved per useful byte in 32-byte sectors (L1 <-> L2).
    ``sectors_per_request``: L1 sectors one warp-wide load instruction touches.
    ``useful_fraction``: useful bytes (read + written) over bytes moved at that level.
    ``dram_read_amplification`` / ``dram_useful_fraction``: the same at the L2 <-> HBM level, in
    :data:`DRAM_FETCH_BYTES` fetches: the predicted useful bandwidth as a fraction of a coalesced
    copy's on the same GPU when the working set does not fit in L2.
    """

    stride: int
    elem_bytes: int
    read_amplification: float
    sectors_per_request: int
    useful_fraction: float
    dram_read_amplification: float = math.nan
    dram_useful_fraction: float = math.nan


def sector_model(stride: int, elem_bytes: int) -> SectorModel:
    """The sector model for one copy (see the module docstring for the reasoning)."""
    _pos_int("stride", stride)
    e = _elem(elem_bytes)
    amp = min(stride, SECTOR_BYTES / e)
    per_thread_gap = VECTOR_BYTES * stride  # bytes between neighbouring threads' first elements
    if stride == 1:
        sectors = WARP_THREADS * VECTOR_BYTES // SECTOR_BYTES  # 16: the warp reads 512 contiguous bytes
    elif per_thread_gap >= SECTOR_BYTES:
        sectors = WARP_THREADS  # every thread in its own sector
    else:  # pragma: no cover - cannot happen with 16-byte vectors, kept for other VECTOR_BYTES
        sectors = math.ceil(WARP_THREADS * per_thread_gap / SECTOR_BYTES)
    # One byte read usefully costs `amp` bytes; one byte written costs one.
    dram = min(stride, DRAM_FETCH_BYTES / e)
    return SectorModel(stride, e, amp, sectors, 2.0 / (amp + 1.0), dram, 2.0 / (dram + 1.0))



def sector_table(elem_bytes: int = 4, strides=(1, 2, 4, 8, 16, 32)) -> pd.DataFrame:
    """:func:`sector_model` per stride: bytes between neighbouring elements, sectors per warp load
    (``pred_sectors_per_req``), DRAM bytes read per useful byte (``pred_read_x``) and the useful
    bandwidth as a fraction of the coalesced copy's (``pred_useful_fraction``)."""
    rows = []
    for s in strides:
        m = sector_model(s, elem_bytes)
        rows.append({"stride": s, "bytes_apart": s * elem_bytes, "pred_sectors_per_req": m.sectors_per_request,
                     "pred_read_x": m.read_amplification, "pred_useful_fraction": m.useful_fraction,
                     "pred_dram_read_x": m.dram_read_amplification,
                     "pred_dram_useful_fraction": m.dram_useful_fraction})
    return pd.DataFrame(rows)


def predicted_useful_fraction(stride: int, elem_bytes: int) -> float:
    """Predicted useful bandwidth of a strided copy as a fraction of the coalesced copy's.

    Useful bytes = read useful + written (equal); DRAM bytes = read x amplification +
    written. Same DRAM bandwidth for both, so the fraction is ``2 / (amplification + 1)``.
    """
    return sector_model(stride, elem_bytes).useful_fraction


def copy_traffic(n_out: int, elem_bytes: int, stride: int = 1) -> Traffic:
    """Traffic of a copy writing ``n_out`` elements read at element ``stride``, its reads counted in the 32-byte
    sectors L1 and L2 move (:attr:`SectorModel.read_amplification`). HBM fetches 64-byte sector pairs on
    H100/H200, so at strides of 16 fp32 elements and more the DRAM counters read twice this model; lab 02 shows
    both levels beside ``dram__bytes_read.sum`` (:attr:`SectorModel.dram_read_amplification`)."""
    _pos_int("n_out", n_out)
    m = sector_model(stride, elem_bytes)
    useful = n_out * m.elem_bytes
    name = "copy_coalesced" if stride == 1 else "copy_strided"
    return Traffic(
        kernel=name,
        bytes_read=round(useful * m.read_amplification),
        bytes_written=useful,
        flops=0,
        useful_bytes_read=useful,
        assumptions=(f"{n_out} elements of {m.elem_bytes} B read {stride} apart and written contiguously; "
                     f"L1 and L2 move whole {SECTOR_BYTES}-byte sectors, so each useful byte read costs "
                     f"min(stride, {SECTOR_BYTES}/elem_bytes) = {m.read_amplification:g} bytes there (HBM fetches "
                     f"{DRAM_FETCH_BYTES}-byte sector pairs: {m.dram_read_amplification:g} bytes); writes are "
                     f"full sectors; no reuse through L2; {m.sectors_per_request} sectors per warp request "
                     f"(16-byte vector loads)"),
    )


# --------------------------------------------------------------------------- attention
def attention_flops(B: int, H: int, N: int, D: int, causal: bool = False) -> float:
    """Nominal attention-forward FLOPs ``4*B*H*N^2*D`` (two matmuls), halved when causal.

    The convention every benchmark uses for TFLOP/s; softmax work is not counted.
    """
    for name, v in (("B", B), ("H", H), ("N", N), ("D", D)):
        _pos_int(name, v)
    f = 4.0 * B * H * N * N * D
    return f / 2 if causal else f


def attention_naive_traffic(B: int, H: int, N: int, D: int, elem_bytes: int, causal: bool = False) -> list[Traffic]:
    """DRAM traffic of the three naive kernels (``naive_qk``, ``naive_softmax``, ``naive_pv``).

    S is float32 (4 bytes), P is in the input dtype. The naive kernels compute every tile,
    causal or not: causal only zeroes probabilities, so bytes and FLOPs do not change.
    """
    for name, v in (("B", B), ("H", H), ("N", N), ("D", D)):
        _pos_int(name, v)
    e = _elem(elem_bytes)
    heads = B * H
    nd = heads * N * D * e  # one of Q, K, V or O
    nn = heads * N * N  # elements of S or P
    mask = " (causal only changes values: every tile is still computed and stored)" if causal else ""
    return [
        Traffic("naive_qk", 2 * nd, nn * 4, 2 * nn * D,
                f"reads Q and K once each from DRAM (one head's Q and K, 2*N*D*{e} B, stay in L2 while its "
                f"tiles run), writes S = scale*QK^T as float32: {heads}*N^2*4 B{mask}"),
        Traffic("naive_softmax", nn * 4, nn * e, 5 * nn,
                f"reads every float32 score once (a whole row sits in registers) and writes P once in "
                f"{e}-byte elements; FLOPs counted as 5 per score (max, subtract, exp, sum, divide){mask}"),
        Traffic("naive_pv", nn * e + nd, nd, 2 * nn * D,
                f"reads P once and V once (a head's V, N*D*{e} B, stays in L2), writes O once{mask}"),
    ]


def _kv_rows_read(N: int, block_m: int, causal: bool) -> int:
    """K (or V) rows one head's query blocks read in total."""
    n_blocks = -(-N // block_m)
    if not causal:
        return n_blocks * N
    # Query block i reads keys [0, min((i+1)*block_m, N)).
    return sum(min((i + 1) * block_m, N) for i in range(n_blocks))


def attention_tiled_traffic(B: int, H: int, N: int, D: int, elem_bytes: int, block_m: int,
                            causal: bool = False) -> Traffic:
    """DRAM traffic of the tiled (flash) kernels, ``attn_fwd`` and ``attn_fwd_fast``.

    Q read once, O written once; K and V read once per query block, i.e. ``ceil(N/block_m)``
    times (causal: query block i reads keys ``[0, min((i+1)*block_m, N))``). That counts no
    L2 reuse between query blocks running at the same time, so it is an upper bound on DRAM
    bytes and exact for L2 -> SM bytes. FLOPs are the nominal ``4*B*H*N^2*D`` (halved when
    causal).
    """
    for name, v in (("B", B), ("H", H), ("N", N), ("D", D), ("block_m", block_m)):
        _pos_int(name, v)
    e = _elem(elem_bytes)
    heads = B * H
    nd = heads * N * D * e
    kv_rows = _kv_rows_read(N, block_m, causal)
    n_blocks = -(-N // block_m)
    kv = 2 * heads * kv_rows * D * e
    how = (f"K and V rows read per head = sum over the {n_blocks} query blocks of min((i+1)*{block_m}, N) "
           f"= {kv_rows}" if causal else f"K and V each read ceil(N/{block_m}) = {n_blocks} times")
    return Traffic(
        "attn_fwd", nd + kv, nd, int(attention_flops(B, H, N, D, causal)),
        f"Q read once, O written once, {how}; no L2 reuse between query blocks counted (an upper bound "
        f"on DRAM bytes, exact for L2->SM bytes); S and P never leave the chip; nominal FLOPs "
        f"4*B*H*N^2*D{' / 2' if causal else ''}",
    )


def kv_passes(bytes_read: float, B: int, H: int, N: int, D: int, elem_bytes: int) -> float:
    """How many times a tiled attention forward read K and V, from the bytes it read at one level (DRAM's
    ``dram__bytes_read.sum``, or L2's): ``(bytes_read - Q) / (K + V)``, with Q read once and Q, K, V each
    ``B*H*N*D*elem_bytes`` bytes. The traffic model's answer is ``ceil(N / BLOCK_M)`` (every query block reads
    all of K and V); a measured DRAM value near 1 says L2 served the re-reads."""
    for name, v in (("B", B), ("H", H), ("N", N), ("D", D)):
        _pos_int(name, v)
    one = B * H * N * D * _elem(elem_bytes)
    if not bytes_read >= 0:
        raise ValueError(f"bytes_read is {bytes_read!r}; expected a number of bytes >= 0")
    return (bytes_read - one) / (2 * one)


def matmul_traffic(M: int, N: int, K: int, elem_bytes: int) -> Traffic:
    """An (M x K) @ (K x N) matmul with ideal reuse: A and B read once, C written once, 2*M*N*K FLOPs."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        _pos_int(name, v)
    e = _elem(elem_bytes)
    return Traffic("matmul", (M * K + K * N) * e, M * N * e, 2 * M * N * K,
                   f"each operand read from DRAM exactly once (tiles re-read hit L2), C written once in "
                   f"{e}-byte elements; 2*M*N*K FLOPs")


def two_level_table(measured: pd.DataFrame, elem_bytes: int = 4) -> pd.DataFrame:
    """Read amplification per stride under both units against a measurement: ``pred_L2_sector_x`` (32-byte
    sectors, the L1-L2 unit), ``pred_HBM_64B_x`` (64-byte fetches, the L2-HBM unit on H100/H200) and
    ``measured_dram_x`` (``read_x`` of ``measured``: dram__bytes_read.sum / useful bytes read).
    ``measured`` needs the columns ``stride`` and ``read_x`` (lab 04's copy family table)."""
    missing = [c for c in ("stride", "read_x") if c not in measured.columns]
    if missing:
        raise ValueError(f"measured table lacks {missing}; has {list(measured.columns)}")
    rows = []
    labels = measured["label"] if "label" in measured.columns else measured["stride"].map("stride {}".format)
    for lab, s, x in zip(labels, measured["stride"], measured["read_x"], strict=True):
        m = sector_model(int(s), elem_bytes)
        rows.append({"copy": lab, "stride": int(s), "bytes_apart": int(s) * elem_bytes, "pred_L2_sector_x": m.read_amplification,
                     "pred_HBM_64B_x": m.dram_read_amplification, "measured_dram_x": x})
    return pd.DataFrame(rows)
