"""Run ``attn_fwd`` at tiles a learner chooses (lab 02's edit-and-measure exercise): check it, and time it on a GPU.

:func:`check_tiles` refuses a tile set Triton could not compile (each value named, with what it may be).
:func:`correctness` runs the kernel on fresh random fp16 inputs whose length N is odd and a multiple of neither tile,
output poisoned with NaN, against :func:`~infralens_lab.kernels.reference.attention_ref` within the float16 tolerance
of :data:`~infralens_lab.kernels.check.TOLERANCES`: in Triton's interpreter on a CPU, compiled on a GPU.
:func:`time_tiles` (GPU only) times each tile set at one shape with CUDA events while NVML samples the SM clock
(:func:`~infralens_lab.measure.ceilings.clocked`: median, p10 and p90 of at least 20 calls and half a second).
What the compiler gives the kernel (registers, spills, shared memory) is :func:`.sass_compile.attn_fwd_resources`.
"""
from __future__ import annotations

import secrets

import torch
import triton

from ..device import is_gpu, torch_device
from ..errors import InfraLensError
from ..kernels import attention, reference
from ..kernels.check import tolerance

KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
POWERS_OF_TWO = {"BLOCK_M": (16, 256), "BLOCK_N": (16, 256), "num_warps": (1, 16)}  # tl.dot needs tiles >= 16
STAGES = range(1, 7)
HEAD_DIM = 64  # the recorded attn_fwd's head dim (lab 02's shape, 4, 16, 4096, 64)
TIMED_SHAPE = (4, 16, 4096, 64)  # B, H, N, D: the shape the recorder profiled attn_fwd at
ROUNDS = 2  # timed rounds per tile set, the order reversed each round (docs/kernels_notes.md, run 10: order effects)


class TileError(InfraLensError, ValueError):
    """A tile set attn_fwd cannot take: the message names the value seen and what it may be."""


def check_tiles(tiles) -> dict:
    """``tiles`` as a plain dict of :data:`KEYS`, or :class:`TileError` naming what is wrong: BLOCK_M, BLOCK_N
    powers of two from 16 to 256, num_warps a power of two from 1 to 16, num_stages 1 to 6."""
    if not isinstance(tiles, dict):
        raise TileError(f"tiles is a {type(tiles).__name__}; expected a dict with keys {', '.join(KEYS)}")
    missing, extra = [k for k in KEYS if k not in tiles], sorted(set(tiles) - set(KEYS))
    if missing or extra:
        raise TileError(f"tiles has keys {sorted(tiles)}; expected exactly {list(KEYS)}"
                        + (f" (missing {missing})" if missing else "") + (f" (unknown {extra})" if extra else ""))
    for k in KEYS:
        v = tiles[k]
        if isinstance(v, bool) or not isinstance(v, int):
            raise TileError(f"{k} is {v!r} ({type(v).__name__}); expected an int")
        if k in POWERS_OF_TWO:
            lo, hi = POWERS_OF_TWO[k]
            if not lo <= v <= hi or v & (v - 1):
                raise TileError(f"{k} is {v}; expected a power of two from {lo} to {hi}")
        elif v not in STAGES:
            raise TileError(f"{k} is {v}; expected {STAGES.start} to {STAGES.stop - 1}")
    return {k: tiles[k] for k in KEYS}


def launch(q, k, v, out, tiles: dict, kernel=None) -> torch.Tensor:
    """``kernel`` (default ``attn_fwd``; any ``@triton.jit`` kernel with its signature) on contiguous q, k, v of one
    (B, H, N, D) shape at ``tiles``, non-causal, writing ``out``; the grid and arguments of
    :func:`~infralens_lab.kernels.attention.attention_tiled`."""
    B, H, N, D = q.shape
    t = check_tiles(tiles)
    kernel = attention.attn_fwd if kernel is None else kernel
    grid = (triton.cdiv(N, t["BLOCK_M"]), B * H)
    kernel[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), H, N, D ** -0.5,
                 HEAD_DIM=D, BLOCK_M=t["BLOCK_M"], BLOCK_N=t["BLOCK_N"], CAUSAL=False,
                 num_warps=t["num_warps"], num_stages=t["num_stages"])
    return out


def check_length(tiles: dict) -> int:
    """The N :func:`correctness` uses: odd, a multiple of neither tile, with a partial last tile of each."""
    t = check_tiles(tiles)
    return t["BLOCK_M"] + t["BLOCK_N"] // 2 + 1


def correctness(tiles, kernel=None, seed: int | None = None) -> dict:
    """``kernel`` at ``tiles`` against torch on fresh random fp16 (1, 2, N, 64) inputs, N from :func:`check_length`
    (``seed`` None draws a new one each call). ``passed``, ``max_abs_err``, ``shape``, ``seed``, ``atol``, ``rtol``
    and ``note`` (what Triton said, when it refused the launch; empty otherwise)."""
    t = check_tiles(tiles)
    seed = secrets.randbits(31) if seed is None else seed
    gen = torch.Generator().manual_seed(seed)
    n = check_length(t)
    q, k, v = (torch.randn(1, 2, n, HEAD_DIM, generator=gen).to(torch_device(), torch.float16) for _ in range(3))
    want = reference.attention_ref(q.float(), k.float(), v.float())
    out, tol = torch.full_like(q, float("nan")), tolerance(torch.float16)
    row = {"shape": (1, 2, n, HEAD_DIM), "seed": seed, **tol, "note": ""}
    try:
        launch(q, k, v, out, t, kernel)
    except Exception as exc:  # a learner's edit Triton refuses is a result to report, not a traceback
        said = str(exc).strip().splitlines()[-1][:160] if str(exc).strip() else ""
        return row | {"passed": False, "max_abs_err": float("nan"), "note": f"{type(exc).__name__}: {said}"}
    err = (out.float() - want).abs()
    ok = bool(torch.isfinite(out).all() and (err <= tol["atol"] + tol["rtol"] * want.abs()).all())
    return row | {"passed": ok, "max_abs_err": float(err.nan_to_num(float("inf")).max())}


def time_tiles(configs: dict, shape=TIMED_SHAPE, kernel=None, seed: int = 0) -> dict | None:
    """``{label: {"median_ms", "p10_ms", "p90_ms", "n", "sm_clock_hz", ..., "gpu", "sms", "cc"}}`` for each tile set
    of ``configs`` (``{label: tiles}``) at ``shape`` fp16, timed with CUDA events while NVML samples the SM clock, in
    :data:`ROUNDS` rounds whose order alternates (median and p10-p90 over every call of every round; the SM clock the
    median of the rounds'); None in interpreter mode, where no time means anything about a GPU."""
    if not is_gpu():
        return None
    from ..stats import percentile
    from .ceilings import clocked
    from .timing import summarize

    tiles = {label: check_tiles(t) for label, t in configs.items()}
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*shape, generator=gen).to(torch_device(), torch.float16) for _ in range(3))
    out = torch.empty_like(q)
    props, runs = torch.cuda.get_device_properties(torch.cuda.current_device()), {label: [] for label in tiles}
    for r in range(ROUNDS):  # the order alternates: a kernel's time can move with its place in the order
        for label in (list(tiles) if r % 2 == 0 else list(tiles)[::-1]):
            runs[label].append(clocked(lambda t=tiles[label]: launch(q, k, v, out, t, kernel), None, warmup=10,
                                       repeats=20))
    got = {}
    for label, pairs in runs.items():
        clocks = [c for _, c in pairs if c.get("sm_clock_hz")]
        hz = {key: [c[key] for c in clocks] for key in ("sm_clock_hz", "sm_clock_min_hz", "sm_clock_max_hz")}
        got[label] = {**summarize([x for t, _ in pairs for x in t.samples_ms], "cuda_events").as_dict(),
                      "sm_clock_hz": percentile(hz["sm_clock_hz"], 50) if clocks else None,
                      "sm_clock_min_hz": min(hz["sm_clock_min_hz"], default=None),
                      "sm_clock_max_hz": max(hz["sm_clock_max_hz"], default=None),
                      "clock_note": pairs[-1][1].get("clock_note", ""), "rounds": ROUNDS,
                      "shape": tuple(shape), "gpu": props.name, "sms": props.multi_processor_count,
                      "cc": f"{props.major}.{props.minor}"}
    return got


def measure_edit(tiles, original: dict) -> list[dict]:
    """``[{"config", "tiles", "shape", "check", "resources", "timing"}]`` for ``original`` (``"lab's tiles"``) and
    ``tiles`` (``"your edit"``): :func:`correctness` on fresh inputs, what the compiler gives each for sm_90
    (:func:`.sass_compile.attn_fwd_resources`) and, on a GPU, :func:`time_tiles` at ``shape`` for those that passed
    (``timing`` None otherwise).
    :class:`TileError` for a tile set that cannot run."""
    from .sass_compile import attn_fwd_resources

    configs = {"lab's tiles": check_tiles(original), "your edit": check_tiles(tiles)}
    rows = [{"config": c, "tiles": t, "shape": TIMED_SHAPE, "check": correctness(t),
             "resources": attn_fwd_resources(t["BLOCK_M"], t["BLOCK_N"], t["num_warps"], t["num_stages"])}
            for c, t in configs.items()]
    timed = time_tiles({r["config"]: r["tiles"] for r in rows if r["check"]["passed"]}) or {}  # a wrong one: untimed
    return [r | {"timing": timed.get(r["config"])} for r in rows]
