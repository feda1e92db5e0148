"""Glue for lab 02 (the roofline): which recorded files to load, the live checks, the roofs, captions, the edit.

The arithmetic is in the notebook; the rules and sentences it prints are analysis (``analysis.counters`` for counters →
FLOPs and bytes, ``roofline`` the one bound rule, ``launches`` waves and the host gap, ``clocks``, ``roofline_notes``
the sentences, ``tile_edit`` the edit-and-measure reading). SI units.
"""
from __future__ import annotations

import inspect

import pandas as pd
import torch

from .. import evidence
from ..analysis import tile_edit
from ..analysis.counters import ncu_peak_bandwidths, store_kernel_table
from ..analysis.hardware import Ceilings
from ..device import facts, is_gpu, torch_device
from ..kernels import attention, copies, reference
from ..kernels.check import matches, tolerance
from ..measure import ceilings as measure_ceilings
from ..measure import sass_compile, tile_runs
from ..parse.ncu import parse_raw_csv
from ..present import show
from ..present.roofline import Roof, roofs_from

CSV_FILES = ("ncu_copies.csv", "ncu_attention.csv", "ncu_matmul.csv")


def load_counters(store, filename: str):
    """Tidy ncu frame of one recorded CSV, or None (with a printed note) when the set lacks it."""
    if filename not in CSV_FILES:
        raise ValueError(f"filename {filename!r}; expected one of {CSV_FILES}")
    if store is None or filename not in store.files():
        print(f"No recorded {filename} in this checkout yet: its kernels appear here once the recorder "
              f"(`python -m infralens_lab record`) has run on a GPU.")
        return None
    return parse_raw_csv(store.text(filename))


def ceilings_from(store):
    """``(evidence, Ceilings)`` of the recorded ``ceilings`` record, or ``(None, None)`` with a note."""
    if store is None or "ceilings" not in store.names():
        print("No recorded ceilings in this checkout yet: they appear here once the recorder has run on a GPU.")
        return None, None
    ev = store.load("ceilings")
    return ev, Ceilings.from_store(store)


def live_ceilings():
    """On a GPU: the ceilings measured now (:func:`infralens_lab.measure.ceilings.measure`, quick), as live
    evidence and Ceilings; ``(None, None)`` in interpreter mode or if measuring fails (the recorded ones follow)."""
    if not is_gpu():
        return None, None
    try:
        values, units, notes = measure_ceilings.measure(quick=True)
    except Exception as exc:  # a live measurement must not stop the notebook: the recorded ceilings follow
        print(f"Measuring the ceilings live failed ({type(exc).__name__}: {exc}); showing the recorded ones.")
        return None, None
    ev = evidence.live("ceilings", values, command="infralens_lab.measure.ceilings.measure(quick=True)",
                       units=units, notes=notes)
    return ev, Ceilings.from_evidence(ev, facts().as_dict())


def check_kernels(seed: int = 0) -> pd.DataFrame:
    """Run the kernels this lab places on the chart on tiny inputs (Triton's interpreter on a CPU, the GPU in gpu
    mode) against the torch references: seeded random inputs, an odd length for the copies, outputs poisoned with
    NaN so an element a kernel skips cannot pass; tolerances from :data:`infralens_lab.kernels.check.TOLERANCES`.
    One row per check: kernel, shape, dtype, atol, rtol, passed, note."""
    dev = torch_device()
    gen = torch.Generator().manual_seed(seed)
    rows = []
    x = torch.randn(4099, generator=gen).to(dev)  # odd length: the last block is partly masked
    for stride in (1, 8):
        out = torch.full((copies.strided_len(x.numel(), stride),), float("nan"), device=dev)
        copies.copy_strided(x, stride, out=out)
        rows.append({"kernel": "copy_strided", "shape": f"n={x.numel()}, stride={stride}", "dtype": "fp32",
                     **tolerance("exact"), "passed": matches(out, reference.copy_strided_ref(x, stride), "exact"),
                     "note": ""})
    B, H, N, D = 1, 2, 48, 32  # N not a multiple of the 32-row tiles: masks matter
    q, k, v = (torch.randn(B, H, N, D, generator=gen).to(dev, torch.float16) for _ in range(3))
    ref = reference.attention_ref(q.float(), k.float(), v.float())
    for name, fn in attention.VARIANTS.items():
        out, note = torch.full_like(q, float("nan")), ""
        try:
            fn(q, k, v, out=out)
        except Exception as exc:  # e.g. tiled_fast's TMA descriptors on a GPU older than Hopper
            note = f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        rows.append({"kernel": name, "shape": f"B,H,N,D={B},{H},{N},{D}", "dtype": "fp16", **tolerance(torch.float16),
                     "passed": not note and matches(out, ref, torch.float16), "note": note})
    return pd.DataFrame(rows)


def kernel_source(name: str) -> str:
    """The Python source of a Triton kernel the lab profiles (``attn_fwd``, ``copy_coalesced``, ...), as written
    in :mod:`infralens_lab.kernels`."""
    for mod in (attention, copies):
        fn = getattr(mod, name, None)
        if fn is not None and hasattr(fn, "fn"):  # a triton.jit kernel keeps the Python function in .fn
            return inspect.getsource(fn.fn)
    raise ValueError(f"no Triton kernel {name!r} in infralens_lab.kernels.attention or .copies")


def chart_roofs(ceilings, peaks=None):
    """The roofs lab 02 draws: the measured copy bandwidth and fp32 / tf32 / fp16 matmul rates, plus the
    datasheet's DRAM bandwidth and fp16 tensor peak (dashed) when ``peaks`` is given."""
    roofs = roofs_from(ceilings, None, ("fp32", "tf32", "fp16"))
    if peaks is not None:
        roofs += [Roof(f"{peaks.memory_kind} datasheet", peaks.bandwidth, "memory", "peak"),
                  Roof("fp16 datasheet", peaks.fp16, "compute", "peak")]
    return roofs


def hierarchy_roofs(frames: list) -> list:
    """L1 and L2 roofs from the peaks Nsight Compute reports with the recorded matmuls, drawn as ``peak``: ncu's
    peaks at the clocks the kernels ran at, not measured bandwidths. Empty when the recording lacks them."""
    return [Roof(f"{level} (ncu peak)", bw, "memory", "peak") for level, bw in ncu_peak_bandwidths(frames)]


def counters_caption(store, *files: str) -> str:
    """Provenance line for values computed from recorded ncu CSVs: the set's caption plus the files."""
    return store.provenance.caption() + " · counters: recorded " + ", ".join(files)


def kernel_tables_by_gpu() -> dict[str, pd.DataFrame]:
    """The kernel table of every recorded set that has one (a set of DDP traces has none), keyed by GPU name
    without the vendor prefix, each with its set's caption in ``attrs['caption']``: the input of
    :func:`infralens_lab.analysis.compare.placement`."""
    out = {}
    for slug in evidence.recordings():
        st = evidence.reference(slug)
        kt = store_kernel_table(st)
        if kt is not None:
            kt.attrs["caption"] = st.provenance.caption()
            out[st.gpu.removeprefix("NVIDIA ")] = kt
    return out


def edit_and_measure(tiles, store=None) -> None:
    """Lab 02's edit and measure: attn_fwd at the lab's tiles and at ``tiles``, a reading, the recorded original."""
    try:
        rows = tile_runs.measure_edit(tiles, attention.tiled_config(64, gpu=True))
    except (tile_runs.TileError, sass_compile.SassCompileError) as exc:
        return print(f"Your edit cannot run: {exc}")
    show(table := tile_edit.edit_table(rows), caption=tile_edit.edit_caption(rows),
         title="attn_fwd: the lab's tiles and your edit")
    print(*tile_edit.edit_notes(rows), tile_edit.edit_reading(table), sep="\n")
    if (frame := load_counters(store, "ncu_attention.csv")) is not None:
        show(tile_edit.recorded_original(frame), title="The lab's tiles, recorded (ncu)",
             caption=counters_caption(store, "ncu_attention.csv") + "; TFLOP/s from 4·B·H·N²·D")
