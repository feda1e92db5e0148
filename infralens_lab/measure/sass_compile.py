"""Compile the two tiled attention kernels for one GPU architecture and read their SASS, with or without a GPU.

:func:`compiled_sass` runs this module in a fresh Python process (``python -m infralens_lab.measure.sass_compile``):
Triton must be imported with ``TRITON_INTERPRET=0`` to compile, and a lab's process (interpreter mode on a CPU)
imported it otherwise. The child compiles ``attn_fwd`` (the teaching kernel, its GPU config from
:func:`infralens_lab.kernels.attention.tiled_config`) and ``attn_fwd_fast`` (the first autotuner candidate whose
BLOCK_M and warps are given) for ``GPUTarget("cuda", cc, 32)`` with the ptxas of Triton's wheel, and disassembles
each cubin with the wheel's ``cuobjdump -sass`` (Triton's ``asm["sass"]``). Nothing is launched or timed: the SASS
is what would run, its instruction counts are static (each instruction once, not how often it executed).
tools/arch_compile_check.py compiles every kernel for every architecture the same way.

:func:`attn_fwd_resources` compiles ``attn_fwd`` alone at tiles the caller chooses (lab 02's edit-and-measure
exercise) and reads what the compiler gave each thread and block: ``cuobjdump -res-usage`` (registers, stack, local
memory) and Triton's shared-memory allocation, the numbers ncu reports as ``launch__registers_per_thread`` and
``launch__shared_mem_per_block_dynamic``.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from ..errors import InfraLensError


class SassCompileError(InfraLensError, RuntimeError):
    """The compile child failed; the message holds its last lines."""


def _attn_fwd_spec(dtype: str, head_dim: int, tc: dict):
    """``attn_fwd``'s compile spec at the tiles of ``tc`` (``BLOCK_M``, ``BLOCK_N``, ``num_warps``, ``num_stages``), as
    its wrapper launches it on contiguous tensors (unit last strides, 16-divisible pointers, strides and lengths)."""
    from ..kernels import attention

    p = f"*{dtype}"
    names = attention.attn_fwd.arg_names
    sig, const = {}, {"HEAD_DIM": head_dim, "BLOCK_M": tc["BLOCK_M"], "BLOCK_N": tc["BLOCK_N"], "CAUSAL": False}
    for n in names:
        if n in const:
            sig[n] = "constexpr"
        elif n.endswith("_ptr"):
            sig[n] = p
        elif n.startswith("stride_") and n.endswith("d"):
            sig[n], const[n] = "constexpr", 1
        else:
            sig[n] = "fp32" if n == "sm_scale" else "i32"
    aligned = [n for n in names if n.endswith("_ptr") or (n.startswith("stride_") and not n.endswith("d"))
               or n in ("H", "N_CTX")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    opts = {"num_warps": tc["num_warps"], "num_stages": tc["num_stages"]}
    return ("attn_fwd", attention.attn_fwd, sig, const, opts, attrs,
            f"BLOCK_M={tc['BLOCK_M']} BLOCK_N={tc['BLOCK_N']} warps={tc['num_warps']} stages={tc['num_stages']}")


def _spec_args(dtype: str, head_dim: int, block_m: int, warps: int):
    """``[(kernel name, fn, signature, constexprs, options, attrs, config label)]`` of the two kernels, as their
    wrappers launch them on contiguous tensors (unit last strides, 16-divisible pointers, strides and lengths)."""
    from ..kernels import attention
    from ..kernels import attention_fast as af

    out = [_attn_fwd_spec(dtype, head_dim, attention.tiled_config(head_dim, gpu=True))]
    p = f"*{dtype}"
    cands = [c for c in af.candidates_for("small_d" if head_dim <= 64 else "d128", 90, head_dim, 2, prune=False)
             if c.block_m == block_m and c.num_warps == warps and not c.ws]
    if not cands:
        raise SassCompileError(f"no attn_fwd_fast candidate with BLOCK_M={block_m} and {warps} warps for D={head_dim}")
    c, half, fnames = cands[0], cands[0].block_m // 2, af.attn_fwd_fast.arg_names
    sig = {"desc_q": f"tensordesc<{dtype}[{half},{head_dim}]>", "desc_k": f"tensordesc<{dtype}[{c.block_n},{head_dim}]>",
           "desc_v": f"tensordesc<{dtype}[{c.block_n},{head_dim}]>", "desc_o": f"tensordesc<{dtype}[{half},{head_dim}]>",
           "q_ptr": p, "k_ptr": p, "v_ptr": p, "o_ptr": p, "N_CTX": "i32", "qk_scale": "fp32"}
    const = {"HEAD_DIM": head_dim, "BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "CAUSAL": False, "EVEN_M": True,
             "EVEN_N": True, "WS": c.ws}
    sig.update({n: "constexpr" for n in const})
    attrs = {(fnames.index(n),): [["tt.divisibility", 16]] for n in ("q_ptr", "k_ptr", "v_ptr", "o_ptr", "N_CTX")}
    opts = {"num_warps": c.num_warps, "num_stages": c.num_stages, **({"maxnreg": c.maxnreg} if c.maxnreg else {})}
    out.append(("attn_fwd_fast", af.attn_fwd_fast, sig, const, opts, attrs, af._name(c)))
    return out


def _child(cc: int, dtype: str, head_dim: int, block_m: int, warps: int) -> dict:
    import triton  # heavy: only in the child, after TRITON_INTERPRET=0
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out = {}
    for name, fn, sig, const, opts, attrs, label in _spec_args(dtype, head_dim, block_m, warps):
        k = triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", cc, 32), options=opts)
        out[name] = {"config": label, "sass": k.asm["sass"],
                     "triton": triton.__version__}
    return out


def _child_resources(cc: int, dtype: str, head_dim: int, block_m: int, block_n: int, warps: int, stages: int) -> dict:
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.tools.disasm import path_to_cuobjdump

    tc = {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
    _, fn, sig, const, opts, attrs, label = _attn_fwd_spec(dtype, head_dim, tc)
    k = triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", cc, 32), options=opts)
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "attn_fwd.cubin"
        cubin.write_bytes(k.asm["cubin"])
        usage = subprocess.run([path_to_cuobjdump(), "-res-usage", str(cubin)], capture_output=True, text=True,
                               check=True).stdout
    got = dict(re.findall(r"\b(REG|STACK|LOCAL):(\d+)", usage))
    return {"config": label, "registers": int(got["REG"]), "stack_bytes": int(got["STACK"]),
            "local_bytes": int(got["LOCAL"]), "shared_bytes": int(k.metadata.shared), "threads": 32 * warps,
            "sm": cc, "triton": triton.__version__}


KERNELS = ("attn_fwd", "attn_fwd_fast")
CACHE_ENV = "INFRALENS_CACHE"  # folder of the compile cache; default $XDG_CACHE_HOME/infralens_lab or ~/.cache/...


def cache_dir() -> Path:
    """Where compiled SASS is kept between runs: ``$INFRALENS_CACHE``, else ``$XDG_CACHE_HOME/infralens_lab``, else
    ``~/.cache/infralens_lab``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "infralens_lab"


def cache_key(*args) -> str:
    """What a compile depends on: the arguments (``cc, dtype, head_dim, ...``), Triton's version and the bytes of
    the two kernels' sources and of this module (a changed kernel is compiled again)."""
    from ..kernels import __file__ as kernels_init

    h = hashlib.sha256(f"{' '.join(map(str, args))} triton {_triton_version()}".encode())
    for f in (Path(kernels_init).parent / "attention.py", Path(kernels_init).parent / "attention_fast.py",
              Path(__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()[:32]


def _triton_version() -> str:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _valid(got) -> bool:
    return (isinstance(got, dict) and set(got) == set(KERNELS)
            and all(isinstance(v, dict) and isinstance(v.get("sass"), str) and v["sass"] for v in got.values()))


def compiled_sass(cc: int = 90, dtype: str = "fp16", head_dim: int = 64, block_m: int = 128, warps: int = 4,
                  timeout_s: float = 600) -> dict:
    """``{kernel: {"config", "sass", "triton"}}`` for ``attn_fwd`` and ``attn_fwd_fast`` compiled for
    ``sm_<cc>`` (``dtype``, ``head_dim``; the fast kernel's candidate with ``block_m`` rows and ``warps`` warps,
    non-causal), in a child process (about 10 s on 2 cores), kept in :func:`cache_dir` under :func:`cache_key`, so a
    lab run again (or a class graded) compiles once. A cache file that does not read as the two kernels' SASS is
    compiled again. :class:`SassCompileError` with the child's last lines if the compile fails."""
    return _cached("sass", (cc, dtype, head_dim, block_m, warps), _valid, timeout_s,
                   f"compiling the attention kernels for sm_{cc}")


def attn_fwd_resources(block_m: int, block_n: int, warps: int, stages: int, cc: int = 90, dtype: str = "fp16",
                       head_dim: int = 64, timeout_s: float = 600) -> dict:
    """What the compiler gives ``attn_fwd`` at these tiles for ``sm_<cc>`` (non-causal, contiguous inputs, as
    :func:`~infralens_lab.kernels.attention.attention_tiled` launches it): ``registers`` per thread, ``stack_bytes``
    and ``local_bytes`` per thread (non-zero: registers spilled), ``shared_bytes`` per block (Triton's allocation,
    ncu's ``launch__shared_mem_per_block_dynamic``), ``threads`` per block, ``config``, ``sm``, ``triton``. Compiled
    in a child process (a few seconds, no GPU needed) and cached like :func:`compiled_sass`."""
    for name, v in (("block_m", block_m), ("block_n", block_n), ("warps", warps), ("stages", stages)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}; expected a positive int")
    return _cached("res", (cc, dtype, head_dim, block_m, block_n, warps, stages), _valid_resources, timeout_s,
                   f"compiling attn_fwd (BLOCK_M={block_m}, BLOCK_N={block_n}, {warps} warps, {stages} stages) "
                   f"for sm_{cc}")


def _valid_resources(got) -> bool:
    return isinstance(got, dict) and all(isinstance(got.get(k), int) for k in ("registers", "stack_bytes",
                                                                                "shared_bytes", "threads"))


def _cached(kind: str, args: tuple, valid, timeout_s: float, what: str) -> dict:
    """The child's JSON for ``kind`` (``sass`` or ``res``) and ``args``, from the cache when a valid file is there,
    else compiled in a child process (``TRITON_INTERPRET=0``) and kept."""
    path = cache_dir() / f"{'sass' if kind == 'sass' else 'res'}-{cache_key(*args)}.json"
    with contextlib.suppress(OSError, ValueError):
        got = json.loads(path.read_text())
        if valid(got):
            return got
    env = dict(os.environ, TRITON_INTERPRET="0", INFRALENS_MODE="gpu")
    cmd = [sys.executable, "-m", __name__, kind, *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        raise SassCompileError(f"{what} failed (exit {r.returncode}): {tail}")
    got = json.loads(r.stdout)
    with contextlib.suppress(OSError):  # a cache that cannot be written costs the next run a compile, nothing more
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(got))
        tmp.replace(path)
    return got


if __name__ == "__main__":
    kind, a = sys.argv[1], sys.argv[2:]
    child = _child if kind == "sass" else _child_resources
    json.dump(child(int(a[0]), a[1], *map(int, a[2:])), sys.stdout)
