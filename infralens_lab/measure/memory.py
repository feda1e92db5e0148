"""Measured memory per category for TinyGPT: one training step and one generation with a KV cache.

What each number means (bytes):

* weights, gradients, optimizer states, KV cache: exact, read from the tensors themselves (the sum
  of ``untyped_storage().nbytes()`` over distinct storages of the parameters, their ``.grad``,
  every tensor in ``optimizer.state`` (AdamW: exp_avg, exp_avg_sq and a 4-byte step), the cache's
  K and V). Under torch.autocast, ``weights`` also counts the 16-bit copies of matmul weights
  that autograd keeps from forward to backward.
* activations: the bytes autograd saved for backward during the forward (a
  ``torch.autograd.graph.saved_tensors_hooks`` pack hook sees every saved tensor; storages are
  counted once, parameters are left out). The same definition on CPU and GPU.
* temporary buffers: the largest transient: in each phase (forward, backward, optimizer step)
  the peak of live bytes above the larger of the phase's start and end states.
* peak: weights + optimizer states + the highest excess reached during the step.

Live bytes come from the CUDA caching allocator on a GPU (``memory_allocated`` and
``max_memory_allocated``, blocks rounded up to 512 B) and, on a CPU, from the allocation
events of ``torch.profiler`` with ``profile_memory=True``. Inference runs under
``torch.inference_mode`` with the model cast to ``dtype``; its activations are the prefill's
peak transient. Results are DataFrames ``(category, bytes, how)`` whose ``attrs['meta']``
holds the configuration, so :func:`infralens_lab.analysis.ledger.predict_for` can predict
the same step.
"""
from __future__ import annotations

import gc
from dataclasses import asdict
from functools import partial

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

from ..device import torch_device
from ..workloads.tiny_gpt import GPTConfig, TinyGPT
from .torch_trace import chrome_trace_of

TRAIN_PRECISIONS = ("fp32", "amp_bf16")
INFER_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
GPU_CONFIG = GPTConfig(n_layer=4, n_head=8, n_kv_head=8, n_embd=512, ffn=2048, vocab=8192, block_size=512)
_16BIT = (torch.float16, torch.bfloat16)


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (``None`` entries skipped)."""
    seen = {}
    for t in tensors:
        if t is not None:
            st = t.untyped_storage()
            seen[(t.device, st.data_ptr())] = st.nbytes()
    return sum(seen.values())


def _device(device) -> torch.device:
    if device is None:
        device = torch_device()
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}; expected 'cpu' or 'cuda'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch.cuda.is_available() is False; expected 'cpu'")
    return dev


def _cpu_events(prof) -> list[int]:
    """Signed byte counts of the CPU allocation events of a finished profiler, in time order (ties: allocations first)."""
    events = chrome_trace_of(prof)["traceEvents"]
    mem = [e for e in events if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == 0]
    # Time order; at equal timestamps (a microsecond clock), allocations before frees, so the peak is the same
    # on every run instead of depending on how the profiler happened to order a tie.
    mem.sort(key=lambda e: (e["ts"], -int(e["args"]["Bytes"])))
    return [int(e["args"]["Bytes"]) for e in mem]


def isolate(device: torch.device) -> None:
    """Start a measurement from a clean allocator: on a GPU, free the cached blocks earlier work left
    (``empty_cache``) and reset the peak counters, so peaks and reserved bytes are this measurement's,
    not the process's history. Nothing to do on a CPU."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def run_phase(fn, device: torch.device):
    """Run ``fn()`` and return ``(result, end, peak)``: live bytes at the end and at the peak,
    both relative to the start (CUDA allocator on a GPU, profiler allocation events on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = fn()
        torch.cuda.synchronize(device)
        return out, torch.cuda.memory_allocated(device) - base, torch.cuda.max_memory_allocated(device) - base

    # Python's cyclic garbage collector frees leftovers of earlier work at moments of its choosing; a free
    # landing inside the window would move the peak from run to run. Collect first, then keep it off.
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = fn()
    finally:
        if was_enabled:
            gc.enable()
    live = peak = 0
    for nbytes in _cpu_events(prof):
        live += nbytes
        peak = max(peak, live)
    return out, live, peak


class SavedTensors:
    """Context manager counting what autograd saves for backward: ``activations`` (bytes of
    distinct storages, parameters excluded) and ``weight_copies`` (16-bit casts of parameters
    made by autocast). Holds no references, so it changes no lifetimes."""

    def __init__(self, params):
        self.params = list(params)
        self._param_ptrs = {p.untyped_storage().data_ptr() for p in self.params}
        self._seen: dict[int, tuple[int, str]] = {}

    def _pack(self, t):
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in self._param_ptrs and key not in self._seen:
            self._seen[key] = (st.nbytes(), "copy" if self._is_weight_copy(t) else "act")
        return t

    def _is_weight_copy(self, t) -> bool:
        base = t if t._base is None else t._base
        if base.dtype not in _16BIT:
            return False
        return any(p.dtype != base.dtype and p.shape == base.shape and torch.equal(p.detach().to(base.dtype), base)
                   for p in self.params)

    def __enter__(self):
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)

    @property
    def activations(self) -> int:
        return sum(n for n, kind in self._seen.values() if kind == "act")

    @property
    def weight_copies(self) -> int:
        return sum(n for n, kind in self._seen.values() if kind == "copy")


def _frame(rows, meta) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["category", "bytes", "how"])
    df["bytes"] = df["bytes"].astype("int64")
    df.attrs["meta"] = meta
    return df


def measure_training_step(config: GPTConfig | None = None, batch: int = 8, seq: int | None = None,
                          precision: str = "fp32", device=None, seed: int = 0, lr: float = 1e-3) -> pd.DataFrame:
    """Bytes per category of one AdamW training step of ``TinyGPT(config)`` on random tokens,
    after one warm-up step (which creates the optimizer states and library workspaces).
    ``precision`` is ``fp32`` or ``amp_bf16`` (torch.autocast around the forward)."""
    cfg = config or GPTConfig()
    dev = _device(device)
    seq = cfg.block_size if seq is None else seq
    for name, v in (("batch", batch), ("seq", seq)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} = {v!r}; expected a positive int")
    if seq > cfg.block_size:
        raise ValueError(f"seq = {seq} exceeds block_size = {cfg.block_size}; expected seq <= block_size")
    if precision not in TRAIN_PRECISIONS:
        raise ValueError(f"precision = {precision!r}; expected one of {TRAIN_PRECISIONS}")
    isolate(dev)
    torch.manual_seed(seed)
    model = TinyGPT(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    x = torch.randint(0, cfg.vocab, (batch, seq), device=dev)
    y = torch.randint(0, cfg.vocab, (batch, seq), device=dev)

    def forward():
        if precision == "amp_bf16":
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                return model(x, y)
        return model(x, y)

    opt.zero_grad(set_to_none=True)  # warm-up step
    forward()[1].backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    params = list(model.parameters())
    reserved = []  # CUDA only: the caching allocator's peak reserved segments, per phase

    def phase(fn):
        out = run_phase(fn, dev)
        if dev.type == "cuda":
            reserved.append(torch.cuda.max_memory_reserved(dev))
        return out

    with SavedTensors(params) as saved:
        (logits, loss), f_end, f_peak = phase(forward)
    _, b_end, b_peak = phase(loss.backward)
    grads = storage_bytes(p.grad for p in params)
    _, s_end, s_peak = phase(opt.step)
    del logits, loss
    weights = storage_bytes(params)
    states = storage_bytes(v for st in opt.state.values() for v in st.values() if torch.is_tensor(v))
    temp = max(f_peak - max(0, f_end), b_peak - max(0, b_end), s_peak - max(0, s_end))
    excess = max(f_peak, f_end + b_peak, f_end + b_end + s_peak)
    live = "CUDA allocator" if dev.type == "cuda" else "profiler allocation events"
    rows = [
        ("weights", weights + saved.weight_copies, "parameter storages" +
         (f" + autocast 16-bit copies saved for backward ({saved.weight_copies} B)" if saved.weight_copies else "")),
        ("gradients", grads, ".grad storages after backward"),
        ("optimizer states", states, "optimizer.state tensors after the step (exp_avg, exp_avg_sq, step)"),
        ("activations", saved.activations, "saved for backward (saved_tensors_hooks, distinct storages)"),
        ("temporary buffers", temp, f"largest phase peak above its start/end ({live})"),
        ("communication buckets", 0, "single process: no DDP buckets"),
        ("activations (live after forward)", f_end, f"live bytes after forward ({live}); includes logits"),
        ("peak", weights + states + excess, f"weights + optimizer states + highest excess in the step ({live})"),
    ]
    if reserved:
        rows.append(("reserved (peak)", max(reserved), "torch.cuda.max_memory_reserved over the step's phases: "
                                                      "segments the caching allocator held, free or not"))
    meta = {"kind": "train", "config": asdict(cfg), "batch": batch, "seq": seq, "precision": precision,
            "optimizer": "adamw", "optimizer_impl": "foreach" if dev.type == "cuda" else "forloop",
            "device": dev.type}
    return _frame(rows, meta)


def measure_inference(config: GPTConfig | None = None, batch: int = 4, context: int | None = None,
                      prompt: int | None = None, new_tokens: int = 4, dtype: str = "fp32", device=None,
                      seed: int = 0) -> pd.DataFrame:
    """Bytes per category of generation with a preallocated KV cache of ``context`` tokens:
    a prefill of ``prompt`` tokens (default ``context - new_tokens``), then ``new_tokens``
    single-token decode steps, weights and cache in ``dtype``, after a warm-up generation."""
    cfg = config or GPTConfig()
    dev = _device(device)
    if dtype not in INFER_DTYPES:
        raise ValueError(f"dtype = {dtype!r}; expected one of {tuple(INFER_DTYPES)}")
    context = cfg.block_size if context is None else context
    prompt = context - new_tokens if prompt is None else prompt
    for name, v in (("batch", batch), ("context", context), ("prompt", prompt), ("new_tokens", new_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} = {v!r}; expected a positive int")
    if context > cfg.block_size or prompt + new_tokens > context:
        raise ValueError(f"prompt + new_tokens = {prompt + new_tokens}, context = {context}, block_size = "
                         f"{cfg.block_size}; expected prompt + new_tokens <= context <= block_size")
    isolate(dev)
    torch.manual_seed(seed)
    model = TinyGPT(cfg).to(dev, INFER_DTYPES[dtype]).eval()
    idx = torch.randint(0, cfg.vocab, (batch, prompt), device=dev)

    def generate(cache):
        """Prefill then decode; returns the prefill peak and the largest decode-step peak."""
        (logits, _), _, prefill = run_phase(lambda: model(idx, caches=cache), dev)
        decode = 0
        for _ in range(new_tokens):
            nxt = logits[:, -1:].argmax(-1)
            del logits
            (logits, _), _, peak = run_phase(partial(model, nxt, caches=cache), dev)  # noqa: RUF059 (the next step reads logits)
            decode = max(decode, peak)
        return prefill, decode

    with torch.inference_mode():
        generate(model.new_kv_cache(batch, context))  # warm-up: library workspaces, first-call caches
        cache = model.new_kv_cache(batch, context)
        prefill, decode = generate(cache)
    live = "CUDA allocator" if dev.type == "cuda" else "profiler allocation events"
    rows = [
        ("weights", storage_bytes(model.parameters()), f"parameter storages ({dtype})"),
        ("KV cache", storage_bytes(t for c in cache for t in (c["k"], c["v"])), "K and V cache storages"),
        ("activations", prefill, f"peak live bytes above the start during the prefill of {prompt} tokens ({live})"),
        ("activations (decode step)", decode, f"largest peak of a one-token decode step ({live})"),
    ]
    meta = {"kind": "infer", "config": asdict(cfg), "batch": batch, "context": context, "prompt": prompt,
            "new_tokens": new_tokens, "dtype": dtype, "device": dev.type}
    if dev.type == "cpu":  # SDPA's CPU kernel takes scratch per thread: the prefill peak depends on it
        meta["cpu_threads"] = torch.get_num_threads()
    return _frame(rows, meta)


_WHY = {
    "weights": "exact on both sides: parameter storages; a gap means the shape fields disagree",
    "gradients": "exact: one gradient per parameter, in the parameter's dtype",
    "optimizer states": "AdamW keeps exp_avg and exp_avg_sq (8 B/param) plus a 4-byte step per tensor, "
                        "which the formula leaves out",
    "activations": "the formula counts Korthikanti's tensors; autograd also keeps LayerNorm mean/rstd "
                   "(4 B/token each), token ids and SDPA's logsumexp",
    "temporary buffers": "estimate: the largest single transient (loss gradient or optimizer scratch); "
                         "real phases also hold partly freed activations and allocator slack",
    "communication buckets": "single process: no DDP, so no buckets",
    "KV cache": "exact: the preallocated K and V tensors, 2·L·b·ctx·kv_heads·head_dim·bytes",
}


def _explain(category: str, meta: dict) -> str:
    why = _WHY.get(category, "measured only; the ledger has no formula for it")
    if category == "weights" and meta.get("precision", "").startswith("amp"):
        why += "; includes autocast's 16-bit copies of matmul weights, held from forward to backward"
    if category == "activations" and meta.get("kind") == "infer":
        why = ("estimate: the largest set of tensors an eager forward holds at once during the prefill "
               "(no activations are kept for backward in inference)")
        if meta.get("cpu_threads"):
            why += (f"; on a CPU, SDPA's attention kernel also allocates scratch per thread "
                    f"({meta['cpu_threads']} threads here), so the measured peak grows with the thread count")
    elif category == "activations" and meta.get("precision", "").startswith("amp"):
        why += ("; under autocast the residual stream and LayerNorm inputs stay fp32 (4 B) while matmul "
                "inputs are 16-bit (2 B), and the same LayerNorm output is cast once per Linear (q and kv)")
    elif category == "activations":
        why += "; fp32 activations are 4 B/element where the paper's 34·sbh assumes 2"
    sixteen = meta.get("dtype") in ("bf16", "fp16") or meta.get("precision", "").startswith("amp")
    if meta.get("device") == "cpu" and sixteen and category in ("activations", "temporary buffers"):
        why += "; on a CPU a 16-bit matmul computes into an fp32 scratch buffer twice the size of its output"
    if meta.get("device") == "cuda" and category in ("activations", "temporary buffers", "peak"):
        why += "; the CUDA allocator rounds every block up to 512 B and keeps library workspaces"
    return why


def compare(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Predicted vs measured bytes per category with the gap in percent of the prediction
    ((measured − predicted) / predicted · 100; NaN where nothing was predicted) and a short
    explanation of where a gap comes from. Categories predicted as 0 and not measured are dropped."""
    for name, df in (("predicted", predicted), ("measured", measured)):
        if not isinstance(df, pd.DataFrame) or not {"category", "bytes"} <= set(df.columns):
            raise TypeError(f"compare(): {name} is {type(df).__name__}; expected a DataFrame with "
                            f"'category' and 'bytes' columns")
    p = predicted[predicted["category"] != "total"][["category", "bytes"]].rename(columns={"bytes": "predicted_bytes"})
    m = measured[["category", "bytes"]].rename(columns={"bytes": "measured_bytes"})
    out = p.merge(m, on="category", how="outer")
    order = list(p["category"]) + [c for c in m["category"] if c not in set(p["category"])]
    out = out.set_index("category").loc[order].reset_index()
    out = out[~((out["predicted_bytes"] == 0) & out["measured_bytes"].isna())].reset_index(drop=True)
    pred = out["predicted_bytes"].where(out["predicted_bytes"] > 0)
    out["gap_pct"] = (out["measured_bytes"] - pred) / pred * 100
    meta = measured.attrs.get("meta", {})
    out["explanation"] = [_explain(c, meta) for c in out["category"]]
    return out


def from_evidence(evidence, which: str) -> pd.DataFrame:
    """The measured DataFrame of one run inside a recorded ``memory_train`` (``which`` = a
    precision) or ``memory_infer`` (``which`` = a dtype) record, with ``attrs['meta']`` set."""
    values = evidence.values
    key = "precision" if values["meta"]["kind"] == "train" else "dtype"
    rows = [r for r in values["rows"] if r[key] == which]
    if not rows:
        have = sorted({r[key] for r in values["rows"]})
        raise ValueError(f"{evidence.name} has no run with {key} = {which!r}; recorded: {have}")
    return _frame([(r["category"], r["bytes"], r["how"]) for r in rows], {**values["meta"], key: which})


def record_into(writer, device=None, config: GPTConfig | None = None, batch: int | None = None,
                seq: int | None = None, precisions=None, dtypes=None) -> list:
    """Measure and write records ``memory_train`` and ``memory_infer`` with ``writer`` (an
    :class:`~infralens_lab.evidence.EvidenceWriter`). On a GPU: :data:`GPU_CONFIG`, batch 8,
    seq 512, fp32 and amp_bf16 training, fp32 and bf16 inference; on a CPU the default TinyGPT,
    fp32 only. Each record holds ``meta`` (config, shapes) so predictions can be recomputed."""
    dev = _device(device)
    gpu = dev.type == "cuda"
    cfg = config or (GPU_CONFIG if gpu else GPTConfig())
    batch = batch or (8 if gpu else 4)
    seq = seq or (cfg.block_size if gpu else min(64, cfg.block_size))
    precisions = precisions or (TRAIN_PRECISIONS if gpu else ("fp32",))
    dtypes = dtypes or (("fp32", "bf16") if gpu else ("fp32",))
    units = {"bytes": "B"}
    paths, rows, meta = [], [], None
    for prec in precisions:
        df = measure_training_step(cfg, batch, seq, prec, dev)
        meta = {k: v for k, v in df.attrs["meta"].items() if k != "precision"}
        rows += [{"precision": prec, **r} for r in df.to_dict("records")]
    paths.append(writer.write("memory_train", {"meta": meta, "rows": rows}, units,
                              notes="one AdamW step of TinyGPT; categories as in infralens_lab.measure.memory"))
    rows = []
    for dt in dtypes:
        df = measure_inference(cfg, batch, context=seq, dtype=dt, device=dev)
        meta = {k: v for k, v in df.attrs["meta"].items() if k != "dtype"}
        rows += [{"dtype": dt, **r} for r in df.to_dict("records")]
    paths.append(writer.write("memory_infer", {"meta": meta, "rows": rows}, units,
                              notes="prefill + decode with a preallocated KV cache"))
    return paths
