"""Kernel benchmark: copies and attention against torch, in one run on one GPU.

``python -m infralens_lab bench [--quick] [--out DIR] [--json PATH]`` measures, after a
correctness check on the very inputs it times:

* **copies** (1 GiB input, so nothing is served from the 50-60 MB L2): torch ``copy_``, the
  Triton ``copy_coalesced`` kernel and ``copy_strided`` for every stride in ``STRIDES``.
  Bandwidth is *useful* bytes (bytes read that end up in the output + bytes written) per
  second; for strided copies the sector model's predicted fraction of the coalesced
  bandwidth (at the DRAM level: 64-byte fetches between L2 and HBM, ``analysis.traffic``) is
  printed next to the measured fraction.
* **attention** forward, TFLOP/s = ``4*B*H*N^2*D / time`` (halved when causal), for naive,
  tiled, tiled_fast, torch SDPA with its default choice and with each backend that runs, and
  ``naive_torch``: the three lines of eager PyTorch a learner writes first
  (``softmax(q @ k.T * scale) @ v``, every intermediate in HBM in the input dtype).
  The relative error (Frobenius) of each output against SDPA's default is printed.
* **the naive floor**: naive attention must move the bytes of S and P through HBM
  (``analysis.traffic.attention_naive_traffic``); at the torch ``copy_`` bandwidth measured
  in the same run that takes at least ``bytes / bandwidth``. The table prints that floor over
  tiled_fast's time: the largest ``tiled_fast / naive`` ratio any bandwidth-efficient naive
  allows on this GPU.

``--cases issue31`` times only what issue 31's goal is stated in: the attention shapes of the issue
(``ATTN_CASES_ISSUE31``) with SDPA's default, flash (FA2) and cuDNN paths and tiled_fast, no copies, in
a fraction of the full run's time (``tools/bench_three.py`` runs it in three processes).

Times are medians of CUDA-event timings after warm-up (``triton.testing.do_bench``, which
also flushes L2 between repeats), taken in ``ROUNDS`` interleaved rounds: every variant of a case runs once
(correctness, and the autotuner's tuning) before any is timed; then each round times every variant once,
starting one variant later than the round before; a row's time is the median over the rounds. Timed once
each, one after the other, a kernel's time moved by up to 19 % with its place in the order on an H100 at
its power cap (SDPA at (4,16,4096,128): 0.918 ms timed first, 1.089 ms timed last; docs/kernels_notes.md,
run 10). It prints ONE table, titled with the GPU name, and can
write the result as JSON or as the recorded evidence ``bench``. In interpreter mode it
refuses (exit code 2): a Python interpreter's timings say nothing about a GPU.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .analysis.traffic import attention_flops, attention_naive_traffic, sector_model
from .device import facts, is_gpu
from .evidence import EvidenceWriter
from .kernels.reference import naive_torch
from .units import GiB, dtype_bytes

COPY_BYTES = GiB
COPY_BYTES_QUICK = 1 << 26
ATTN_CASES = [  # (B, H, N, D), dtype name, causal
    ((4, 16, 4096, 64), "float16", False),
    ((4, 16, 4096, 128), "float16", False),
    ((1, 16, 16384, 128), "float16", False),
    ((4, 16, 4096, 128), "bfloat16", False),
    ((4, 16, 4096, 128), "float16", True),
]
ATTN_CASES_QUICK = [((2, 8, 1024, 64), "float16", False), ((2, 8, 1024, 64), "float16", True)]
ATTN_CASES_ISSUE31 = [  # issue 31's table and goal: D = 64 at >= 1.0x SDPA default, D = 128, 16k and causal at >= 0.95x
    ((4, 16, 4096, 64), "float16", False),
    ((4, 16, 4096, 128), "float16", False),
    ((1, 16, 16384, 128), "float16", False),
    ((8, 16, 8192, 128), "float16", False),
    ((4, 16, 4096, 64), "float16", True),
    ((4, 16, 4096, 64), "bfloat16", False),
    ((4, 16, 4096, 128), "bfloat16", False),  # the full set's bf16 and causal D = 128 cases, for the same goal
    ((4, 16, 4096, 128), "float16", True),
]
SDPA_BACKENDS = ("flash", "efficient", "cudnn")
ROUNDS = 3  # interleaved timing rounds per case (time_interleaved)
TIMING = ("triton.testing.do_bench median (CUDA events, L2 flushed between repeats); each row the median over "
          "interleaved rounds, every variant of a case checked once before any is timed")


class CaseSet(NamedTuple):
    """What one bench run times: the copies or not, the attention cases, the attention variants (None: all)."""

    copies: bool
    attention: list
    variants: tuple | None


CASE_SETS = {
    "full": CaseSet(True, ATTN_CASES, None),
    "issue31": CaseSet(False, ATTN_CASES_ISSUE31, ("sdpa_default", "sdpa_flash", "sdpa_cudnn", "tiled_fast", "gluon")),
}
# Variants timed only when a case set names them (the full set, which the recorder records and the labs read, keeps
# its rows): ``gluon`` is kernels.attention_gluon's FA3-style Gluon forward, Hopper only (issue 42); on any other
# GPU its row is skipped with the kernel's own refusal as the reason.
OPT_IN_VARIANTS = ("gluon",)
TARGETS = {"coalesced / copy_": 0.97, "tiled_fast / sdpa": 0.85, "tiled_fast / naive": 8.0}
REL_ERR_OK = {"float16": 1e-2, "bfloat16": 3e-2}  # Frobenius error vs SDPA counted as a pass
INTERPRETER_MESSAGE = ("bench: refusing to run in interpreter mode. Kernels there run in Triton's "
                       "interpreter (Python on the CPU), so their timings mean nothing about a GPU. "
                       "Run it on a machine with an NVIDIA GPU, or read the recorded evidence "
                       "(infralens_lab.evidence.load('bench')).")


def _ms(fn) -> float:
    """Median milliseconds of ``fn`` over ~100 ms of repeats after ~25 ms of warm-up."""
    import triton.testing  # heavy: triton, only when a benchmark runs

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def _check_rounds(rounds) -> None:
    if not (isinstance(rounds, int) and rounds >= 1):
        raise ValueError(f"bench: rounds = {rounds!r}, expected an int >= 1")


def time_interleaved(fns: dict[str, Callable], rounds: int = ROUNDS, timer: Callable | None = None) -> dict[str, list[float]]:
    """``{name: [ms per round]}``: each round times every fn once with ``timer`` (default :func:`_ms`), and
    round r starts r variants further along the list, so no variant is always the one timed first (after a
    pause, or right after a tuning burst). Rows take the median over the rounds (:func:`_median`)."""
    _check_rounds(rounds)
    timer = timer or _ms
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names) if names else 0
        for n in names[k:] + names[:k]:
            times[n].append(timer(fns[n]))
    return times


def _median(ms: list[float]) -> float:
    return float(statistics.median(ms))


# --------------------------------------------------------------------------- copies
def bench_copies(n_bytes: int = COPY_BYTES, rounds: int = ROUNDS) -> list[dict]:
    """Rows for torch copy_, copy_coalesced and copy_strided (every stride), fp32 and fp16; per dtype every
    copy is checked once, then all are timed in ``rounds`` interleaved rounds (:func:`time_interleaved`)."""
    from .kernels import copies  # lazy: defines Triton kernels / models only when this runs

    rows = []
    for dtype in (torch.float32, torch.float16):
        e = torch.tensor([], dtype=dtype).element_size()
        name = str(dtype).replace("torch.", "")
        x = torch.randn(n_bytes // e, device="cuda").to(dtype)
        n = x.numel()
        dst = torch.empty_like(x)
        fns = {("torch_copy_", 1): partial(dst.copy_, x), ("coalesced", 1): partial(copies.copy, x, out=dst)}
        ok = {("torch_copy_", 1): True, ("coalesced", 1): torch.equal(copies.copy(x, out=dst), x)}
        outs = {}
        for s in copies.STRIDES:
            outs[s] = torch.empty(copies.strided_len(n, s), dtype=dtype, device="cuda")
            ok[("strided", s)] = torch.equal(copies.copy_strided(x, s, out=outs[s]), x[::s])
            fns[("strided", s)] = partial(copies.copy_strided, x, s, out=outs[s])
        times = time_interleaved(fns, rounds)
        for (variant, s), ts in times.items():
            n_out = outs[s].numel() if variant == "strided" else n
            rows.append(_copy_row(variant, name, s, n, n_out, e, ts, ok[(variant, s)]))
        coalesced = next(r for r in rows if r["variant"] == "coalesced" and r["dtype"] == name)
        for r in rows:
            if r["dtype"] == name and r["variant"] == "strided":
                r["measured_fraction"] = r["useful_tbps"] / coalesced["useful_tbps"]
        x = dst = outs = fns = None  # free the buffers before the next dtype
        torch.cuda.empty_cache()
    return rows


def _copy_row(variant, dtype, stride, n_in, n_out, e, round_ms: list[float], ok) -> dict:
    useful = 2 * n_out * e  # read-and-kept + written
    m = sector_model(stride, e)
    ms = _median(round_ms)
    return {"variant": variant, "dtype": dtype, "stride": stride, "n_in": n_in, "n_out": n_out,
            "useful_bytes": useful, "median_ms": ms, "round_ms": list(round_ms),
            "useful_tbps": useful / (ms * 1e-3) / 1e12,
            # the model at the level the benchmark stresses: 1 GiB copies stream from HBM in 64-byte fetches
            "predicted_fraction": m.dram_useful_fraction if variant == "strided" else None,
            "measured_fraction": None, "model_sectors_per_request": m.sectors_per_request, "correct": bool(ok)}


# --------------------------------------------------------------------------- attention
def _sdpa(backend):
    if backend is None:
        return lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    which = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]

    def run(q, k, v, causal):
        with sdpa_kernel([which]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def _rel_err(o, ref) -> float:
    d = (o.float() - ref.float()).norm().item()
    return d / max(ref.float().norm().item(), 1e-30)


def _gluon(q, k, v, causal):
    from .kernels.attention_gluon import attention_gluon  # lazy: Gluon kernels only when this runs

    return attention_gluon(q, k, v, causal=causal)


def kernel_of(name: str) -> str:
    """Which kernel a bench row's variant ran, in words (recorded in every attention row as ``kernel``)."""
    if name == "gluon":
        from .kernels.attention_gluon import DEFAULT_VARIANT, schedule

        parts = schedule(DEFAULT_VARIANT)
        return (f"attn_fwd_gluon ({DEFAULT_VARIANT}: " + ", ".join(f"{p['name']} {p['warps']} warps" for p in parts)
                + f"; {parts[0]['stages']} K/V stages of {parts[0]['block_n']} keys)")
    if name.startswith("sdpa_"):
        b = name.removeprefix("sdpa_")
        return "torch SDPA, the backend torch picks" if b == "default" else f"torch SDPA, {b} backend only"
    return {"naive": "naive_qk + naive_softmax + naive_pv (Triton)", "tiled": "attn_fwd (Triton, teaching kernel)",
            "tiled_fast": "attn_fwd_fast (Triton tl, autotuned; see config)",
            "naive_torch": "eager torch: matmul, softmax, matmul"}.get(name, name)


def attention_variants(variants: tuple | None = None) -> list[tuple[str, object]]:
    """(name, fn(q, k, v, causal)) in table order: SDPA default, each SDPA backend, our kernels, naive_torch;
    only those in ``variants`` (and sdpa_default, every row's reference) when it is given, which may also name
    :data:`OPT_IN_VARIANTS` (``gluon``, after the rest)."""
    from .kernels import attention  # lazy: defines Triton kernels / models only when this runs

    todo = [("sdpa_default", _sdpa(None))] + [(f"sdpa_{b}", _sdpa(b)) for b in SDPA_BACKENDS]
    todo += [(name, fn) for name, fn in attention.VARIANTS.items()] + [("naive_torch", naive_torch)]
    if variants is None:
        return todo
    todo.append(("gluon", _gluon))  # OPT_IN_VARIANTS: only when named
    unknown = sorted(set(variants) - {n for n, _ in todo})
    if unknown:
        raise ValueError(f"bench: attention variants {unknown} are unknown, expected names from "
                         f"{[n for n, _ in todo]}")
    return [(n, f) for n, f in todo if n == "sdpa_default" or n in variants]


def bench_attention(cases=ATTN_CASES, variants: tuple | None = None,
                    rounds: int = ROUNDS) -> tuple[list[dict], list[dict]]:
    """Rows (and skipped variants with reasons) for every attention variant and SDPA backend, or for the
    ``variants`` named (``sdpa_default`` always runs: it is every row's reference). Per case every variant
    runs once (its error against SDPA; tiled_fast tunes here), then all are timed in ``rounds``
    interleaved rounds (:func:`time_interleaved`)."""
    from .kernels import attention, attention_fast  # lazy: defines Triton kernels / models only when this runs

    rows, skipped = [], []
    for shape, dtype_name, causal in cases:
        B, H, N, D = shape
        dtype = getattr(torch, dtype_name)
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3))
        flops = attention_flops(B, H, N, D, causal)
        ref = _sdpa(None)(q, k, v, causal)
        checked, fns = [], {}
        for name, fn in attention_variants(variants):
            case = {"shape": list(shape), "dtype": dtype_name, "causal": causal, "variant": name,
                    "kernel": kernel_of(name)}
            if name in ("naive", "naive_torch"):
                e = q.element_size()
                # naive: S in float32 and P; naive_torch: up to three N x N tensors alive at once
                need = B * H * N * N * ((4 + e) if name == "naive" else 3 * e) + 4 * q.numel() * e
                free = torch.cuda.mem_get_info()[0]
                if need > 0.9 * free:
                    skipped.append({**case, "reason": f"needs {need / GiB:.1f} GiB for S and P, "
                                                      f"{free / GiB:.1f} GiB free"})
                    continue
            try:
                o = fn(q, k, v, causal)
            except RuntimeError as exc:  # an SDPA backend that does not support this case
                skipped.append({**case, "reason": str(exc).strip().splitlines()[0][:160]})
                continue
            err = _rel_err(o, ref)
            o = None  # free the output before timing
            row = {**case, "rel_err": err, "correct": err <= REL_ERR_OK[dtype_name], "config": None}
            if name == "tiled":
                c = attention.tiled_config(D)
                row["config"] = {"block_m": c["BLOCK_M"], "block_n": c["BLOCK_N"], "num_warps": c["num_warps"],
                                 "num_stages": c["num_stages"]}
            elif name == "tiled_fast":
                row["config"] = attention_fast.last_config()
                row["tuning_ms"] = attention_fast.tuning_timings()
            checked.append(row)
            fns[name] = partial(fn, q, k, v, causal)
            torch.cuda.empty_cache()
        times = time_interleaved(fns, rounds)
        for row in checked:
            ms = _median(times[row["variant"]])
            rows.append({**row, "median_ms": ms, "round_ms": times[row["variant"]],
                         "tflops": flops / (ms * 1e-3) / 1e12})
        q = k = v = ref = fns = None  # free the inputs before the next shape
        torch.cuda.empty_cache()
    return rows, skipped


# --------------------------------------------------------------------------- ratios and table
def _find(rows, **want):
    for r in rows:
        if all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def compute_ratios(copy_rows: list[dict], attn_rows: list[dict]) -> list[dict]:
    """The ratios the targets are stated in, from rows measured in the same run."""
    out = []

    def add(name, num, den, key, target):
        if num is None or den is None:
            return
        value = num[key] / den[key]
        out.append({"name": name, "value": value, "target": target,
                    "met": None if target is None else bool(value >= target)})

    for dt in ("float32", "float16"):
        add(f"coalesced / copy_ ({dt})", _find(copy_rows, variant="coalesced", dtype=dt),
            _find(copy_rows, variant="torch_copy_", dtype=dt), "useful_tbps", TARGETS["coalesced / copy_"])
    seen = []
    for r in attn_rows:
        key = (tuple(r["shape"]), r["dtype"], r["causal"])
        if key not in seen:
            seen.append(key)
    for shape, dt, causal in seen:
        sel = dict(shape=list(shape), dtype=dt, causal=causal)
        label = "x".join(map(str, shape)) + f" {dt}" + (" causal" if causal else "")
        main = shape[2] == 4096 and dt == "float16" and not causal
        sdpa = _find(attn_rows, variant="sdpa_default", **sel)
        for v in ("tiled_fast", "tiled", "gluon"):
            target = TARGETS["tiled_fast / sdpa"] if (v == "tiled_fast" and main) else None
            add(f"{v} / sdpa_default @ {label}", _find(attn_rows, variant=v, **sel), sdpa, "tflops", target)
        if shape == (4, 16, 4096, 64) and dt == "float16" and not causal:
            fast = _find(attn_rows, variant="tiled_fast", **sel)
            for naive in ("naive", "naive_torch"):
                add(f"tiled_fast / {naive} @ {label}", fast, _find(attn_rows, variant=naive, **sel), "tflops",
                    TARGETS["tiled_fast / naive"])
            floor = naive_floor(shape, dt, causal, copy_rows)
            if fast is not None and floor is not None:
                out.append({"name": f"naive floor / tiled_fast @ {label}", "value": floor["ms"] / fast["median_ms"],
                            "target": None, "met": None, "note": floor["note"]})
    return out


def naive_floor(shape, dtype_name: str, causal: bool, copy_rows: list[dict]) -> dict | None:
    """Least time naive attention can take: its modelled HBM bytes at this run's copy_ bandwidth.

    Bytes from :func:`analysis.traffic.attention_naive_traffic` (S written and read as float32,
    P written and read in the input dtype, Q, K, V read, O written); bandwidth = torch
    ``copy_``'s useful TB/s for the same dtype measured in this run. None without that row.
    """
    copy = _find(copy_rows, variant="torch_copy_", dtype=dtype_name)
    if copy is None:
        return None
    e = dtype_bytes(dtype_name)
    nbytes = sum(t.bytes for t in attention_naive_traffic(*shape, e, causal=causal))
    ms = nbytes / (copy["useful_tbps"] * 1e12) * 1e3
    return {"ms": ms, "bytes": nbytes,
            "note": f"{nbytes / 1e9:.1f} GB at copy_'s {copy['useful_tbps']:.2f} TB/s = {ms:.2f} ms: "
                    f"the most any bandwidth-efficient naive allows"}


def run_benchmark(quick: bool = False, cases: str = "full", rounds: int = ROUNDS) -> dict:
    """Run the case set ``cases`` (a key of CASE_SETS; ``quick``: small sizes) on the GPU, each case's variants
    timed in ``rounds`` interleaved rounds, and return the JSON-shaped result (see module docstring)."""
    if cases not in CASE_SETS:
        raise ValueError(f"bench: cases {cases!r} is not a case set, expected one of {sorted(CASE_SETS)}")
    _check_rounds(rounds)  # before the GPU check, so a bad count is named on any machine
    if not is_gpu():
        raise RuntimeError(INTERPRETER_MESSAGE)
    chosen = CASE_SETS[cases]
    f = facts()
    if chosen.variants is None or "tiled_fast" in chosen.variants:
        from .kernels import attention_fast  # lazy: defines Triton kernels only when this runs
        variant = attention_fast.live_variant()
    else:
        variant = None
    copies = bench_copies(COPY_BYTES_QUICK if quick else COPY_BYTES, rounds) if chosen.copies else []
    attn, skipped = bench_attention(ATTN_CASES_QUICK if quick else chosen.attention, chosen.variants, rounds)
    return {
        "meta": {"gpu": f.name, "driver": f.driver, "cuda": f.cuda, "torch": f.torch, "triton": f.triton,
                 "date_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "quick": quick, "cases": cases,
                 "copy_bytes": (COPY_BYTES_QUICK if quick else COPY_BYTES) if chosen.copies else 0,
                 "rounds": rounds, "timing": TIMING,
                 **({"fast_variant": variant[0], "fast_variant_reason": variant[1]} if variant else {})},
        "copies": copies,
        "attention": attn,
        "skipped": skipped,
        "ratios": compute_ratios(copies, attn),
    }


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def _spread(r: dict) -> str:
    """"spread x%": (max - min) / median of the row's round times, if it has two or more."""
    ts = r.get("round_ms") or []
    return f"spread {(max(ts) - min(ts)) / r['median_ms']:.1%}" if len(ts) > 1 and r["median_ms"] else ""


def format_table(result: dict) -> str:
    """The whole result as ONE fixed-width text table, titled with the GPU name."""
    meta = result.get("meta", {})
    rounds = f" over {meta['rounds']} interleaved rounds" if meta.get("rounds") else ""
    title = (f"InfraLens bench on {meta.get('gpu', '?')} (torch {meta.get('torch', '?')}, "
             f"triton {meta.get('triton', '?')}, {str(meta.get('date_utc', ''))[:10]}; medians{rounds})")
    lines = []
    for r in result.get("copies", []):
        e = r["useful_bytes"] // (2 * r["n_out"]) if r["n_out"] else 0
        case = f"{r['dtype']} {_gib(r['n_in'] * e)} in"
        variant = {"torch_copy_": "torch copy_", "coalesced": "copy_coalesced"}.get(
            r["variant"], f"copy_strided s={r['stride']}")
        note = "" if r["correct"] else "WRONG OUTPUT"
        if r["variant"] == "strided" and r.get("measured_fraction") is not None:
            note = (f"{r['measured_fraction']:.2f}x coalesced (model {r['predicted_fraction']:.2f}x) " + note).strip()
        note = "; ".join(x for x in (note, _spread(r)) if x)
        lines.append(("copy", case, variant, f"{r['median_ms']:.3f}", f"{r['useful_tbps']:.2f} TB/s", note))
    for r in result.get("attention", []):
        case = "x".join(map(str, r["shape"])) + f" {r['dtype']}" + (" causal" if r["causal"] else "")
        note = f"rel err {r['rel_err']:.1e}" + ("" if r["correct"] else " WRONG OUTPUT")
        note += f"; {_spread(r)}" if _spread(r) else ""
        cfg = r.get("config")
        if r["variant"] in ("tiled", "tiled_fast") and cfg:
            note += f"; BM{cfg['block_m']} BN{cfg['block_n']} w{cfg['num_warps']} s{cfg['num_stages']}"
            note += f" maxnreg {cfg['maxnreg']}" if cfg.get("maxnreg") else ""
            note += " ws" if cfg.get("ws") else ""  # warp-specialized K/V loop (attention_fast.Cand.ws)
        if r["variant"] == "gluon" and r.get("kernel"):
            note += f"; {r['kernel']}"
        lines.append(("attn", case, r["variant"], f"{r['median_ms']:.3f}", f"{r['tflops']:.1f} TFLOP/s", note))
    for r in result.get("skipped", []):
        case = "x".join(map(str, r["shape"])) + f" {r['dtype']}" + (" causal" if r["causal"] else "")
        lines.append(("attn", case, r["variant"], "-", "skipped", r["reason"]))
    for r in result.get("ratios", []):
        note = r.get("note") or ""
        if r["target"] is not None:
            note = f"target >= {r['target']:g}: " + ("met" if r["met"] else "NOT met")
        lines.append(("ratio", r["name"], "", "", f"{r['value']:.2f}x", note))
    head = ("section", "case", "variant", "median ms", "rate", "note")
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [title]
    if meta.get("fast_variant"):  # kernels.arch.attention_variant of the GPU that ran: which fast kernel, and why
        out.append(f"tiled_fast variant {meta['fast_variant']}: {meta.get('fast_variant_reason', '')}")
    out += [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*row).rstrip() for row in lines]
    return "\n".join(out)


UNITS = {"median_ms": "ms", "useful_tbps": "TB/s (1e12 B/s), useful bytes read + written",
         "tflops": "TFLOP/s (1e12), 4*B*H*N^2*D per forward, halved when causal",
         "useful_bytes": "bytes", "rel_err": "Frobenius norm of (out - sdpa_default) / norm of sdpa_default"}


def record_into(writer, quick: bool = False, result: dict | None = None) -> dict:
    """Run the benchmark (unless ``result`` is given) and write it as record ``bench``."""
    result = run_benchmark(quick) if result is None else result
    writer.write("bench", result, units=UNITS,
                 notes="python -m infralens_lab bench; medians via triton.testing.do_bench over interleaved rounds; "
                       "ratios from one run")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infralens_lab bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test, not a measurement")
    ap.add_argument("--out", metavar="DIR", help="also write the result as recorded evidence into DIR")
    ap.add_argument("--json", metavar="PATH", help="also write the result as plain JSON to PATH")
    ap.add_argument("--cases", choices=sorted(CASE_SETS), default="full",
                    help="full: copies and every attention case and variant (what the recorder records); "
                         "issue31: issue 31's attention shapes, SDPA default/flash/cuDNN and tiled_fast only")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help=f"interleaved timing rounds per case (default {ROUNDS}); a row is the median over them")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        print(f"bench: --rounds {args.rounds}, expected an int >= 1", file=sys.stderr)
        return 2
    if args.out and args.cases != "full":
        print(f"bench: --out writes the recorded evidence 'bench', which the labs read whole (copies and every "
              f"attention case); --cases {args.cases} times a part of it. Use --json for a partial run.",
              file=sys.stderr)
        return 2
    if not is_gpu():
        print(INTERPRETER_MESSAGE, file=sys.stderr)
        return 2
    result = run_benchmark(args.quick, args.cases, args.rounds)
    print(format_table(result))
    if args.json:
        with Path(args.json).open("w") as fh:
            json.dump(result, fh, indent=1)
    if args.out:
        cmd = "python -m infralens_lab bench" + ("" if argv is None else " " + " ".join(argv))
        w = EvidenceWriter(args.out, command=cmd.strip())
        record_into(w, result=result)
        w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
