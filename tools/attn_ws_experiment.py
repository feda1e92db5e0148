"""Issue 31 in one GPU call: warp specialization on Hopper, the D = 128 knobs and the causal scheme, against cuDNN.

Usage, from the repo root, on a machine with an H100 or H200::

    python3 tools/attn_ws_experiment.py --out $OUT          # the GPU run, about 4-6 minutes, bounded by --budget
    python3 tools/attn_ws_experiment.py --interpret         # CPU: every variant in Triton's interpreter
    python3 tools/attn_compile_check.py                     # CPU: every variant compiled for sm_90

Variant families (labels in the tables; ``-ws`` = ``tl.range(..., warp_specialize=True)`` on the K/V loop):

* ``cur``: ``attn_fwd_fast`` as committed, every autotuner candidate of the head-dim group.
* ``ws``: ``attn_fwd_fast`` with ``Cand.ws``: the committed kernel (two half tiles) over on-device
  per-head descriptors, its K/V loop warp-specialized (1 producer + 2 consumer warpgroups), BLOCK_M = 256.
  Run past ``attention_tiled_fast``'s checks (``attention_fast._launch``): the wrapper refuses ws with
  3 stages or causal, which this experiment measured wrong on an H100 (docs/kernels_notes.md, run 9),
  and a later Triton is checked by running them again.
* ``t06``: a single-tile forward with the structure of Triton's tutorial 06 (one BLOCK_M x D accumulator,
  the STAGE scheme: an unmasked off-band loop, then the on-band loop with the mask), written here with
  switches so that one thing changes at a time: ``host``/``dev`` descriptors, ``ws``, and when causal the
  block order (``inorder`` as the tutorial, ``heavy`` = heaviest block first as ``attn_fwd_fast``) and the mask
  (``add``: ``qk*scale + where(keep, 0, -1e6)`` as the tutorial, ``inf``: ``where(keep, qk*scale, -inf)``).
  ``t06 ... host inorder add`` is the tutorial's Hopper path; ``t06 ... dev ws`` its Hopper
  warp-specialized path (Triton 3.6 warp-specializes on Hopper only with on-device descriptors, 4 warps).

Every variant is first checked on fresh ``torch.randn`` inputs with its output poisoned with NaN: at a ragged
shape (1, 2, 777, D) against the float32 reference with the package's tolerance, then at the case's shape
against SDPA's default (relative Frobenius error). Only variants that pass are timed: SDPA default (cuDNN),
SDPA flash and the variants interleaved, ``--rounds`` rounds, each a ``triton.testing.do_bench`` median (CUDA
events, L2 flushed); the table gives the median over rounds, the spread (max - min) / median, TFLOP/s and
speed against SDPA default (> 1 is faster).

The GPU run is a parent process that starts a child doing the work and watches it: a variant that fails
to compile is recorded with its error and skipped; one that hangs (no progress for ``--stall`` s) or kills
the CUDA context is recorded, and a fresh child goes on without it. The whole run stops at ``--budget``
seconds, printing what it has. Results: the table on stdout and in ``$OUT/attn_ws_experiment.txt``, all of
it in ``$OUT/attn_ws_experiment.json``. A tuning tool, not evidence: the labs use the recorder's numbers.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.tools.tensor_descriptor import TensorDescriptor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# after the path above: the package of this checkout
import infralens_lab  # noqa: E402, F401  (decides the mode first: without a GPU, Triton's interpreter)
from infralens_lab.device import is_gpu, synchronize  # noqa: E402  (after the path)
from infralens_lab.kernels import attention_fast as af  # noqa: E402  (after the path)
from infralens_lab.kernels.check import matches  # noqa: E402  (after the path)
from infralens_lab.kernels.reference import attention_ref  # noqa: E402  (after the path)

CASES = [  # (B, H, N, D, dtype, causal), most informative first: the budget may end the list early
    (4, 16, 4096, 128, "float16", False),
    (4, 16, 4096, 64, "float16", False),
    (4, 16, 4096, 64, "float16", True),
    (1, 16, 16384, 128, "float16", False),
    (8, 16, 8192, 128, "float16", False),
    (4, 16, 4096, 64, "bfloat16", False),
    (4, 16, 4096, 128, "float16", True),
]
RAGGED_N = 777  # not a multiple of 16, 64, 128 or 256: ragged query and key blocks for every config
MAX_REL_ERR = {"float16": 2e-3, "bfloat16": 1.6e-2}  # against SDPA, as tools/attn_ab.py

# Configs as (block_m, block_n, num_warps, num_stages), none of which spills (tools/attn_compile_check.py).
# WS: 4 warps (Triton 3.6 ignores warp_specialize with 8), one producer + two consumer warpgroups; with it
# num_stages is the number of K/V buffers. maxnreg is not a knob here: with WS the compiler sets the
# registers itself (setmaxnreg 232 for the consumers, 40 for the producer; maxnreg=168 compiles to the same
# code), and without WS shared memory, not registers, limits the programs per SM.
WS_CONFIGS = {  # attn_fwd_fast with two half tiles: BLOCK_M 256, so each consumer gets 64 rows of each half
    ("small_d", False): [(256, 128, 4, 2), (256, 128, 4, 3), (256, 64, 4, 2)],
    ("small_d", True): [(256, 64, 4, 2), (256, 64, 4, 3)],  # BLOCK_N 128 spills with the causal mask
    ("d128", False): [(256, 64, 4, 2), (256, 64, 4, 3)],  # BLOCK_N 128 spills (288 bytes)
    ("d128", True): [(256, 64, 4, 2)],  # spills 48 bytes: timed to see what the mask on every tile costs
}
T06_CONFIGS = {  # the single-tile kernel without WS: configs of the tutorial's Hopper list that do not spill
    "small_d": [(128, 128, 8, 3), (128, 64, 4, 3)],
    "d128": [(128, 128, 8, 2), (64, 64, 4, 3)],
}
T06_WS_CONFIGS = {  # the single-tile kernel with WS: BLOCK_M 128, 64 rows per consumer warpgroup
    "small_d": [(128, 128, 4, 2), (128, 128, 4, 3), (128, 64, 4, 2)],
    "d128": [(128, 64, 4, 2), (128, 64, 4, 3), (128, 128, 4, 2)],
}


# --------------------------------------------------------------------------- the single-tile kernel
@triton.jit
def _t06_loop(acc, l_i, m_i, q, d_k, d_v, row0, lo, hi, offs_m, N_CTX, qk_scale, BLOCK_N: tl.constexpr,
              DIAG: tl.constexpr, KEY_MASK: tl.constexpr, ADD_MASK: tl.constexpr, WS: tl.constexpr):
    # Keys [lo, hi) past one BLOCK_M x D query tile: the online softmax of FlashAttention-2.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k = d_k.load([row0 + start_n, 0])
        qk = tl.dot(q, k.T)
        if ADD_MASK and (DIAG or KEY_MASK):  # the tutorial's way: a large negative bias, scaled here
            if DIAG:
                keep = offs_m[:, None] >= cols[None, :]
                if KEY_MASK:
                    keep = keep & (cols[None, :] < N_CTX)
            else:
                keep = cols[None, :] < N_CTX
            qk = qk * qk_scale + tl.where(keep, 0.0, -1.0e6)
            # then attn_fwd_fast's update with nothing left to mask or scale (a scale of 1.0 is exact)
            p, m_i, l_i, acc = af._online_softmax(qk, m_i, l_i, acc, offs_m, cols, N_CTX, 1.0, False, False)
        else:  # attn_fwd_fast's way: where(keep, qk * scale, -inf), then the online-softmax update
            p, m_i, l_i, acc = af._online_softmax(qk, m_i, l_i, acc, offs_m, cols, N_CTX, qk_scale, DIAG, KEY_MASK)
        v = d_v.load([row0 + start_n, 0])
        acc = tl.dot(p.to(q.dtype), v, acc)
    return acc, l_i, m_i


@triton.jit
def t06_fwd(desc_q, desc_k, desc_v, desc_o, q_ptr, k_ptr, v_ptr, o_ptr, N_CTX, qk_scale,
            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
            EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, DEV_DESC: tl.constexpr, WS: tl.constexpr,
            HEAVY_FIRST: tl.constexpr, ADD_MASK: tl.constexpr):
    start_m = tl.program_id(0)
    if CAUSAL and HEAVY_FIRST:
        start_m = tl.num_programs(0) - 1 - start_m
    off_bh = tl.program_id(1)
    if DEV_DESC:  # per-head descriptors built on the device: TMA zero-fills and clips rows >= N
        head = off_bh.to(tl.int64) * N_CTX * HEAD_DIM
        d_q = af._head_desc(q_ptr + head, N_CTX, HEAD_DIM, BLOCK_M)
        d_k = af._head_desc(k_ptr + head, N_CTX, HEAD_DIM, BLOCK_N)
        d_v = af._head_desc(v_ptr + head, N_CTX, HEAD_DIM, BLOCK_N)
        d_o = af._head_desc(o_ptr + head, N_CTX, HEAD_DIM, BLOCK_M)
        row0 = 0
    else:  # host-side descriptors over all heads' (B*H*N, D) rows
        d_q, d_k, d_v, d_o = desc_q, desc_k, desc_v, desc_o
        row0 = off_bh * N_CTX
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    q = d_q.load([row0 + start_m * BLOCK_M, 0])
    if WS:  # Triton 3.6 warp-specializes one K/V loop per kernel: one loop, the masks on every tile
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX) if CAUSAL else N_CTX
        acc, l_i, m_i = _t06_loop(acc, l_i, m_i, q, d_k, d_v, row0, 0, hi, offs_m, N_CTX, qk_scale,
                                  BLOCK_N, CAUSAL, not EVEN_N, ADD_MASK, True)
    elif CAUSAL:  # the STAGE scheme: off-band without a mask, then the diagonal band with it
        acc, l_i, m_i = _t06_loop(acc, l_i, m_i, q, d_k, d_v, row0, 0, start_m * BLOCK_M, offs_m, N_CTX,
                                  qk_scale, BLOCK_N, False, False, ADD_MASK, False)
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
        acc, l_i, m_i = _t06_loop(acc, l_i, m_i, q, d_k, d_v, row0, start_m * BLOCK_M, hi, offs_m, N_CTX,
                                  qk_scale, BLOCK_N, True, not EVEN_N, ADD_MASK, False)
    else:
        n_full = N_CTX if EVEN_N else (N_CTX // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _t06_loop(acc, l_i, m_i, q, d_k, d_v, row0, 0, n_full, offs_m, N_CTX, qk_scale,
                                  BLOCK_N, False, False, ADD_MASK, False)
        if not EVEN_N:
            acc, l_i, m_i = _t06_loop(acc, l_i, m_i, q, d_k, d_v, row0, n_full, N_CTX, offs_m, N_CTX, qk_scale,
                                      BLOCK_N, False, True, ADD_MASK, False)
    # O = acc / l by TMA, or row by row for a ragged last block of host descriptors (attn_fwd_fast's store)
    af._store_half(d_o, o_ptr, acc, l_i, row0, start_m * BLOCK_M, offs_m, N_CTX, HEAD_DIM, EVEN_M or DEV_DESC)


_t06_flags = triton.heuristics({"EVEN_M": lambda a: a["N_CTX"] % a["BLOCK_M"] == 0,
                                "EVEN_N": lambda a: a["N_CTX"] % a["BLOCK_N"] == 0})(t06_fwd)


# --------------------------------------------------------------------------- variants
@dataclass(frozen=True)
class Variant:
    family: str  # "cur", "ws" (attn_fwd_fast) or "t06" (t06_fwd)
    cand: af.Cand  # block_m, block_n, num_warps, num_stages, maxnreg, ws: the config, as the autotuner's
    dev_desc: bool = False  # t06 only; attn_fwd_fast builds its descriptors on the device iff ws
    heavy_first: bool = False  # t06 causal only; attn_fwd_fast always goes heaviest first
    add_mask: bool = True  # t06 only

    @property
    def label(self) -> str:
        cfg = f"BM{self.cand.block_m}-BN{self.cand.block_n}-w{self.cand.num_warps}-s{self.cand.num_stages}"
        cfg += f"-r{self.cand.maxnreg}" if self.cand.maxnreg else ""
        if self.family != "t06":
            return f"{self.family} {cfg}"
        return f"t06 {cfg} {'dev' if self.dev_desc else 'host'}" + (" ws" if self.cand.ws else "")

    def label_for(self, causal: bool) -> str:
        if self.family == "t06" and causal:
            return f"{self.label} {'heavy' if self.heavy_first else 'inorder'} {'add' if self.add_mask else 'inf'}"
        return self.label


def _v(family, cfg, **kw) -> Variant:
    return Variant(family, af.Cand(*cfg[:4], cfg[4] if len(cfg) > 4 else None, kw.pop("ws", False)), **kw)


def variants_for(head_dim: int, causal: bool) -> list[Variant]:
    """Every variant timed for one (head dim, causal) family, in table order."""
    group = "d128" if head_dim >= 128 else "small_d"
    fits = (lambda c: c[0] % c[1] == 0) if causal else (lambda c: True)
    out = [_v("cur", c) for c in af.GPU_CANDIDATES[group] if fits(c)]
    out += [_v("ws", c, ws=True) for c in WS_CONFIGS[group, causal]]
    t06 = [c for c in T06_CONFIGS[group] if fits(c)]
    if causal:  # the tutorial's scheme, then one change at a time toward attn_fwd_fast's
        for heavy, add in ((False, True), (True, True), (False, False), (True, False)):
            out += [_v("t06", c, heavy_first=heavy, add_mask=add) for c in t06]
        out += [_v("t06", c, dev_desc=True, ws=True, heavy_first=True, add_mask=False)
                for c in T06_WS_CONFIGS[group][:1]]
    else:
        out += [_v("t06", c) for c in t06]
        out += [_v("t06", t06[0], dev_desc=True)]  # only the descriptors change
        out += [_v("t06", c, dev_desc=True, ws=True) for c in T06_WS_CONFIGS[group]]
    return out


def run_variant(var: Variant, q, k, v, causal: bool, out):
    """Run one variant on q, k, v (B, H, N, D) into ``out``."""
    if var.family == "cur":
        return af.attention_tiled_fast(q, k, v, causal=causal, out=out, config=var.cand)
    if var.family == "ws":  # past the wrapper, which refuses the ws configs run 9 measured wrong (3 stages, causal)
        return af._launch(q, k, v, causal, q.shape[-1] ** -0.5, out, var.cand)
    B, H, N, D = q.shape
    c = var.cand
    desc = [TensorDescriptor(t, shape=[B * H * N, D], strides=[D, 1], block_shape=[r, D])
            for t, r in ((q, c.block_m), (k, c.block_n), (v, c.block_n), (out, c.block_m))]
    if var.dev_desc and is_gpu():
        triton.set_allocator(af._scratch)
    extra = {"maxnreg": c.maxnreg} if c.maxnreg else {}
    _t06_flags[(triton.cdiv(N, c.block_m), B * H)](
        *desc, q, k, v, out, N, D ** -0.5 * af.LOG2E, HEAD_DIM=D, BLOCK_M=c.block_m, BLOCK_N=c.block_n,
        CAUSAL=causal, DEV_DESC=var.dev_desc, WS=c.ws, HEAVY_FIRST=var.heavy_first, ADD_MASK=var.add_mask,
        num_warps=c.num_warps, num_stages=c.num_stages, **extra)
    return out


def compile_args(var: Variant, head_dim: int, dtype: str, causal: bool, even: bool):
    """(kernel, signature, constexprs, options) for compiling ``var`` offline (tools/attn_compile_check.py),
    specialized as a launch with 16-byte-aligned tensors and N a multiple of 16 (``even``) or not."""
    c = var.cand
    half = c.block_m // 2 if var.family != "t06" else c.block_m
    sig = {"desc_q": f"tensordesc<{dtype}[{half},{head_dim}]>", "desc_k": f"tensordesc<{dtype}[{c.block_n},{head_dim}]>",
           "desc_v": f"tensordesc<{dtype}[{c.block_n},{head_dim}]>", "desc_o": f"tensordesc<{dtype}[{half},{head_dim}]>",
           "q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}", "o_ptr": f"*{dtype}",
           "N_CTX": "i32", "qk_scale": "fp32"}
    const = {"HEAD_DIM": head_dim, "BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "CAUSAL": causal,
             "EVEN_M": even, "EVEN_N": even}
    fn = af.attn_fwd_fast if var.family != "t06" else t06_fwd
    if var.family == "t06":
        const.update(DEV_DESC=var.dev_desc, WS=c.ws, HEAVY_FIRST=var.heavy_first, ADD_MASK=var.add_mask)
    else:
        const["WS"] = c.ws
    sig.update({name: "constexpr" for name in const})
    aligned = [fn.arg_names.index(n) for n in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")]
    aligned += [fn.arg_names.index("N_CTX")] if even else []
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    opts = {"num_warps": c.num_warps, "num_stages": c.num_stages}
    opts.update({"maxnreg": c.maxnreg} if c.maxnreg else {})
    return fn, sig, const, opts, attrs


# --------------------------------------------------------------------------- checks and timing (child)
def _case_key(case) -> str:
    B, H, N, D, dtype, causal = case
    return f"{B}x{H}x{N}x{D} {dtype}" + (" causal" if causal else "")


def check_variant(var: Variant, head_dim: int, dtype, causal: bool, full=None) -> dict:
    """Poisoned-output checks: ragged (1, 2, 777, D) against the float32 reference, then (if given) the
    case's own q, k, v and SDPA's output ``full = (q, k, v, ref)`` by relative Frobenius error."""
    dev = "cuda" if is_gpu() else "cpu"
    q, k, v = (torch.randn(1, 2, RAGGED_N, head_dim, device=dev).to(dtype) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    run_variant(var, q, k, v, causal, out)
    ref = attention_ref(q.float(), k.float(), v.float(), causal=causal)
    res = {"ragged_ok": matches(out, ref), "ragged_err": float((out.float() - ref).abs().max())}
    if full is not None:
        fq, fk, fv, fref = full
        out = torch.full_like(fq, float("nan"))
        run_variant(var, fq, fk, fv, causal, out)
        res["rel_err"] = float((out.float() - fref.float()).norm() / fref.float().norm())
        res["full_ok"] = bool(res["rel_err"] < MAX_REL_ERR[str(fq.dtype)[6:]])  # NaN fails too
    return res


def _emit(path: Path, **event) -> None:
    with path.open("a") as f:
        f.write(json.dumps(event) + "\n")


def _bench(fn) -> float:
    """One timing: the median of a ``triton.testing.do_bench`` run (ms; CUDA events, L2 flushed)."""
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def child(out: Path, deadline: float, rounds: int, skip: set[str], done: set[str]) -> None:
    """The worker: every case in CASES, its variants checked then timed; progress as events (JSON lines)."""
    events = out / "events.jsonl"
    gpu = is_gpu()
    dev = "cuda" if gpu else "cpu"  # the CPU path (interpreter, tiny cases) exists for the tests
    _emit(events, ev="env", gpu=torch.cuda.get_device_name() if gpu else "cpu (Triton interpreter)",
          torch=torch.__version__, triton=triton.__version__,
          sms=torch.cuda.get_device_properties(0).multi_processor_count if gpu else None)
    for case in CASES:
        key = _case_key(case)
        if key in done:
            continue
        if time.time() > deadline - 20:
            _emit(events, ev="skipped_case", case=key, reason="budget spent")
            continue
        B, H, N, D, dtype_name, causal = case
        dtype = getattr(torch, dtype_name)
        q, k, v = (torch.randn(B, H, N, D, device=dev, dtype=dtype) for _ in range(3))
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def flash(q=q, k=k, v=v, causal=causal):
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        fns = {"sdpa_default": partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)}
        errs = {"sdpa_default": 0.0}
        try:
            errs["sdpa_flash"] = float((flash().float() - ref.float()).norm() / ref.float().norm())
            fns["sdpa_flash"] = flash
        except RuntimeError as e:  # no flash kernel for this case (or on a CPU): the row is left out
            _emit(events, ev="note", case=key, text=f"sdpa_flash: {str(e)[:300]}")
        for var in variants_for(D, causal):
            label = var.label_for(causal)
            if label in skip or kin(label) in skip or time.time() > deadline - 30:
                continue
            _emit(events, ev="begin", case=key, variant=label)
            t0 = time.time()
            try:
                res = check_variant(var, D, dtype, causal, full=(q, k, v, ref))
                synchronize()
            except Exception as e:  # compile errors and the like: record, go on (KeyboardInterrupt still stops)
                text = f"{type(e).__name__}: {e}"
                _emit(events, ev="checked", case=key, variant=label, ok=False, error=text[-1500:],
                      seconds=time.time() - t0)
                if gpu and "CUDA" in text:  # the context may be broken: the parent starts a fresh worker
                    sys.exit(3)
                continue
            ok = res["ragged_ok"] and res["full_ok"]
            _emit(events, ev="checked", case=key, variant=label, ok=ok, seconds=time.time() - t0, **res)
            if ok:
                out_buf = torch.empty_like(q)
                fns[label] = partial(run_variant, var, q, k, v, causal, out_buf)
                errs[label] = res["rel_err"]
        _emit(events, ev="timing", case=key)
        times = {name: [] for name in fns}
        for r in range(rounds):  # interleaved: drift hits every variant alike
            if r >= 2 and time.time() > deadline - 10:
                break
            for name, fn in fns.items():
                times[name].append(_bench(fn))
            _emit(events, ev="round", case=key, round=r)  # a heartbeat for the parent
        flops = 4 * B * H * N * N * D / (2 if causal else 1)
        rows = []
        for name, ts in times.items():
            ts = sorted(ts)
            med = ts[len(ts) // 2]
            rows.append({"variant": name, "ms": med, "spread": (ts[-1] - ts[0]) / med, "rounds": len(ts),
                         "tflops": flops / (med * 1e-3) / 1e12, "rel_err": errs[name]})
        _emit(events, ev="case", case=key, rows=rows)
        q = k = v = ref = fns = None  # free the inputs before the next case (None, not del: closures name them)
        if gpu:
            torch.cuda.empty_cache()
    _emit(events, ev="done")


# --------------------------------------------------------------------------- parent: watch, restart, report
def _read(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def report(events: list[dict], notes: list[str]) -> tuple[str, dict]:
    env = next((e for e in events if e["ev"] == "env"), {})
    lines = [f"{env.get('gpu', '?')}  torch {env.get('torch', '?')}  triton {env.get('triton', '?')}  "
             f"SMs {env.get('sms', '?')}"]
    result = {"env": env, "cases": {}, "notes": notes}
    for case in CASES:
        key = _case_key(case)
        rows = next((e["rows"] for e in events if e["ev"] == "case" and e["case"] == key), None)
        checks = [e for e in events if e["ev"] == "checked" and e["case"] == key]
        failed = [e for e in checks if not e["ok"]]
        result["cases"][key] = {"rows": rows, "checks": checks}
        if rows is None and not checks:
            if any(e["ev"] == "skipped_case" and e["case"] == key for e in events):
                lines.append(f"\n{key}: not run (budget spent)")
            continue
        lines.append(f"\n{key}")
        if rows:
            sdpa = next(r["ms"] for r in rows if r["variant"] == "sdpa_default")
            lines.append(f"  {'variant':44} {'ms':>7} {'spread':>7} {'TFLOP/s':>8} {'/sdpa':>6} {'rel err':>8}")
            for r in rows:
                lines.append(f"  {r['variant']:44} {r['ms']:7.3f} {r['spread']:7.1%} {r['tflops']:8.1f} "
                             f"{sdpa / r['ms']:6.3f} {r['rel_err']:8.1e}")
            fams = {}
            for r in (r for r in rows if not r["variant"].startswith("sdpa")):
                fam = "t06 ws" if kin(r["variant"]) == "t06 ws" else r["variant"].split()[0]
                fams[fam] = min(fams.get(fam, 1e9), r["ms"])
            lines.append("  best /sdpa: " + ", ".join(f"{f} {sdpa / ms:.3f}x" for f, ms in fams.items()))
        else:
            lines.append("  not timed (budget or crash)")
        for e in failed:
            why = e.get("error") or f"ragged ok {e.get('ragged_ok')} (max err {e.get('ragged_err', 0):.1e}), " \
                                    f"rel err {e.get('rel_err', float('nan')):.1e}"
            lines.append(f"  FAILED {e['variant']}: {why.strip().splitlines()[-1][:160]}")
    notes = notes + [f"{e['case']}: {e['text']}" for e in events if e["ev"] == "note"]
    result["notes"] = notes
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines), result


def kin(label: str) -> str:
    """What a hang is blamed on: every warp-specialized variant of one family hangs alike (same compiler
    pass, same barriers), so one hang skips them all; any other variant is skipped alone."""
    if label.startswith("ws "):
        return "ws"
    return "t06 ws" if label.startswith("t06 ") and " ws" in label else label


def child_command(out: Path, deadline: float, rounds: int, skip: set[str], done: set[str]) -> list[str]:
    return [sys.executable, __file__, "--child", "--out", str(out), "--deadline", str(deadline), "--rounds",
            str(rounds), "--skip", json.dumps(sorted(skip)), "--done", json.dumps(sorted(done))]


def parent(out: Path, budget: float, rounds: int, stall: float, command=child_command) -> dict:
    """Run children until the cases are done or the budget is spent; write and print the report."""
    out.mkdir(parents=True, exist_ok=True)
    events_path, log_path = out / "events.jsonl", out / "child.log"
    events_path.unlink(missing_ok=True)
    start = time.time()
    deadline = start + budget
    skip, notes = set(), []
    while time.time() < deadline - 30:
        events = _read(events_path)
        done = {e["case"] for e in events if e["ev"] in ("case", "case_failed")}
        with log_path.open("a") as log:  # a file, not a pipe: compile errors print pages of MLIR
            proc = subprocess.Popen(command(out, deadline, rounds, skip, done), stdout=log, stderr=subprocess.STDOUT)
            seen, last_change = len(events), time.time()
            try:
                while proc.poll() is None:
                    time.sleep(0.5)
                    n = len(_read(events_path))
                    if n != seen:
                        seen, last_change = n, time.time()
                    if time.time() - last_change > stall or time.time() > deadline:
                        proc.kill()
                        proc.wait()
            except KeyboardInterrupt:
                proc.kill()
                raise
        events = _read(events_path)
        if events and events[-1]["ev"] == "done":
            break
        hung = time.time() - last_change > stall
        why = f"no progress for {stall:.0f} s" if hung else f"exit code {proc.returncode}"
        tail = log_path.read_text(errors="replace")[-600:] if log_path.exists() else ""
        last = events[-1] if events else {}
        if last.get("ev") == "begin" or (last.get("ev") == "checked" and not last.get("ok")):
            blamed = kin(last["variant"]) if hung else last["variant"]
            skip.add(blamed)
            notes.append(f"{last['case']}: {last['variant']} stopped the child ({why}); {blamed!r} skipped from "
                         f"then on. Log tail: {tail!r}")
        elif last.get("ev") in ("timing", "round"):
            _emit(events_path, ev="case_failed", case=last["case"])
            notes.append(f"{last['case']}: the child stopped while timing ({why}); case dropped. Log tail: {tail!r}")
        elif time.time() < deadline - 30:
            notes.append(f"the child stopped ({why}) after {last.get('ev')!r}; log tail: {tail!r}")
            if last.get("ev") in (None, "env"):
                break  # it fails before doing anything: a restart would fail the same way
    text, result = report(_read(events_path), notes)
    result["seconds"] = time.time() - start
    (out / "attn_ws_experiment.txt").write_text(text + "\n")
    (out / "attn_ws_experiment.json").write_text(json.dumps(result, indent=1))
    if log_path.exists() and log_path.stat().st_size > 200_000:  # keep the end of the log only
        log_path.write_text(log_path.read_text(errors="replace")[-200_000:])
    print(text)
    print(f"\n{time.time() - start:.0f} s; results in {out}/attn_ws_experiment.json")
    return result


# --------------------------------------------------------------------------- CPU: the interpreter check
def interpret_check(head_dims=(64, 128), dtypes=("float16", "float32")) -> list[dict]:
    """Every variant of every family in Triton's interpreter at the ragged shape, poisoned output, against
    the float32 reference. WS changes nothing there (the interpreter runs the loop as written), so this
    checks each variant's descriptors, masks, block order and stores, not the warp specialization."""
    rows = []
    for head_dim in head_dims:
        for causal in (False, True):
            for var in variants_for(head_dim, causal):
                for dtype in dtypes:
                    res = check_variant(var, head_dim, getattr(torch, dtype), causal)
                    rows.append({"variant": var.label_for(causal), "D": head_dim, "causal": causal, "dtype": dtype,
                                 **res})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("attn_ws_out"))
    ap.add_argument("--budget", type=float, default=400, help="seconds for the whole GPU run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stall", type=float, default=45, help="seconds without progress before a child is killed")
    ap.add_argument("--interpret", action="store_true", help="CPU check of every variant in the interpreter")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--skip", default="[]", help=argparse.SUPPRESS)
    ap.add_argument("--done", default="[]", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.interpret:
        if is_gpu():
            raise SystemExit("--interpret is the CPU check; run it where no GPU is used (INFRALENS_MODE=interpreter)")
        rows = interpret_check()
        bad = [r for r in rows if not r["ragged_ok"]]
        for r in rows:
            print(f"{r['variant']:46} D{r['D']:<4} {r['dtype']:8} {'causal' if r['causal'] else '':6} "
                  f"max err {r['ragged_err']:.1e} {'ok' if r['ragged_ok'] else 'WRONG'}")
        print(f"{len(rows) - len(bad)}/{len(rows)} within tolerance")
        raise SystemExit(1 if bad else 0)
    if not is_gpu():
        raise SystemExit("the experiment times kernels on a GPU; this machine runs Triton's interpreter "
                         "(use --interpret here, or tools/attn_compile_check.py)")
    if a.child:
        child(a.out, a.deadline, a.rounds, set(json.loads(a.skip)), set(json.loads(a.done)))
    else:
        parent(a.out, a.budget, a.rounds, a.stall)


if __name__ == "__main__":
    main()
