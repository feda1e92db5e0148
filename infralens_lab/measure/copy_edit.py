"""Run an edit of the strided copy beside the original (lab 04's "Edit and measure"): the output checked against
torch, then what can be measured here. The workload: ``x`` holds ``n_out`` records of ``stride`` fp32 values (an
array of structs) and the copy writes each record's first value contiguously, ``out = x[::stride]``, so any kernel
with the lab's signature ``(x_ptr, out_ptr, n_out, STRIDE: tl.constexpr, BLOCK: tl.constexpr)`` can do it.

* In interpreter mode (no GPU) the kernel runs in Triton's interpreter on an odd record count and every
  ``tl.load`` is recorded as it happens: the byte offsets from ``x``'s first byte that the pointer tensor held
  (the interpreter's own numpy arrays) and which lanes the mask let through, per program (:func:`record_loads`).
  These are real addresses; grouping them into warp-wide requests is a model
  (:func:`infralens_lab.analysis.copy_edit.warp_requests`). No time is measured: the interpreter is Python on a CPU.
* On a GPU the kernel is compiled and timed with CUDA events (:func:`infralens_lab.measure.timing.time_fn`) while
  :class:`~infralens_lab.measure.clocks.ClockSampler` reads the SM clock through NVML; where ncu runs,
  :func:`ncu_sectors` profiles the kernel in its own process (``python -m infralens_lab target --kernel
  copy_edit --source FILE``) for the global-load sectors and requests in L1TEX.

A wrong kernel is not an exception: :class:`EditRun` says what differed (``problem``), and a kernel that failed to
run says how, in one line; :class:`CopyEditError` is for inputs that are not a kernel run at all.
"""
from __future__ import annotations

import inspect
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .. import device as device_mod  # the module: its mode is decided (and patched in tests) at run time
from ..errors import InfraLensError
from ..kernels import copies
from ..parse import ncu as ncu_csv
from ..units import MiB
from . import ncu as ncu_run
from .timing import Timing, not_meaningful, time_fn

SIGNATURE = ("x_ptr", "out_ptr", "n_out", "STRIDE", "BLOCK")
STRIDES = copies.STRIDES  # power-of-two strides (a record of STRIDE values can be one tl.arange)
ELEM_BYTES = 4  # fp32, as the lab's recorded copies
COUNT_N_OUT = 5_001  # interpreter: records (odd: the last program runs with a partial mask); 160 KB of x at stride 8
TIME_N_OUT = 64 * MiB // ELEM_BYTES + 1  # GPU: records, 64 MiB of useful fp32 (> L2), 512 MiB of x at stride 8; odd


class CopyEditError(InfraLensError, ValueError):
    """The thing handed in is not a kernel with the lab's signature, or the stride is not one of :data:`STRIDES`."""


@dataclass(frozen=True)
class Load:
    """One ``tl.load`` of ``x`` by one program: byte offsets from ``x``'s first byte in the pointer tensor's
    row-major order, and the lanes its mask let through."""

    program: int
    offsets: np.ndarray
    active: np.ndarray


@dataclass(frozen=True)
class EditRun:
    """One kernel run on the copy's workload: ``ok`` (output equal to ``x[::stride]`` bit for bit) or ``problem``
    (one line); the loads of ``x`` (interpreter), the timing, SM clock and ncu counters (GPU)."""

    name: str
    stride: int
    n_out: int
    mode: str
    ok: bool
    problem: str = ""
    loads: tuple[Load, ...] = ()
    timing: Timing = field(default_factory=not_meaningful)
    clock: object | None = None  # measure.clocks.ClockSummary
    gpu: str = ""
    ncu: dict | None = None  # {"sectors", "requests"} of the timed kernel, from ncu
    ncu_note: str = ""


def check_kernel(kernel, stride) -> str:
    """The kernel's name, after checking that ``kernel`` is a ``@triton.jit`` function with the lab's signature and
    ``stride`` one of :data:`STRIDES`; :class:`CopyEditError` naming what was seen otherwise."""
    fn = getattr(kernel, "fn", None)
    if fn is None or not callable(fn) or not hasattr(kernel, "__getitem__"):
        raise CopyEditError(f"kernel is {type(kernel).__name__} {kernel!r:.60}; expected a @triton.jit kernel "
                            f"taking {', '.join(SIGNATURE)}")
    params = tuple(inspect.signature(fn).parameters)
    if params != SIGNATURE:
        raise CopyEditError(f"{fn.__name__} takes ({', '.join(params)}); expected ({', '.join(SIGNATURE)}), the "
                            "strided copy's signature (keep it; change the body)")
    if isinstance(stride, bool) or stride not in STRIDES:
        raise CopyEditError(f"stride is {stride!r}; expected one of {STRIDES} (a power of two the lab recorded)")
    return fn.__name__


class OutOfBounds(CopyEditError):
    """An active lane of a load or a store points outside the tensors the copy was handed (the interpreter would
    read or write whatever memory is there; a GPU would fault or corrupt another allocation)."""


def _bounds(t: torch.Tensor) -> tuple[int, int]:
    return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()


def record_loads(launch, x: torch.Tensor, out: torch.Tensor) -> list[Load]:
    """Run ``launch()`` (a kernel launch, interpreter mode) and return every load of ``x`` it made, per program.
    The interpreter's ``create_masked_load`` and ``create_masked_store`` (which ``tl.load`` and ``tl.store``, masked
    or not, reach) are wrapped for the run only; a load outside ``x`` and ``out`` or a store outside ``out`` raises
    :class:`OutOfBounds` before it touches memory. Loads of ``out`` are left out of the record."""
    from triton.runtime import interpreter  # lazy: only interpreter mode reaches here, after TRITON_INTERPRET=1

    builder, (x0, x1), (o0, o1) = interpreter.interpreter_builder, _bounds(x), _bounds(out)
    load, store, loads = builder.create_masked_load, builder.create_masked_store, []

    def active(ptrs, mask) -> tuple[np.ndarray, np.ndarray]:
        addr = ptrs.data.astype(np.int64).ravel()
        return addr, np.broadcast_to(mask.data, ptrs.data.shape).ravel().copy()

    def outside(addr, lo, hi, what: str) -> None:
        bad = (addr < lo) | (addr >= hi)
        if bad.any():
            raise OutOfBounds(f"{what} at byte offset {int(addr[bad][0]) - lo:,} from its start; it holds "
                              f"{hi - lo:,} bytes (a mask that lets lanes past the end through?)")

    def recording_load(ptrs, mask, *rest):
        addr, on = active(ptrs, mask)
        used = addr[on]
        if used.size and ((used >= x0) & (used < x1)).all():
            loads.append(Load(int(builder.grid_idx[0]), addr - x0, on))
        elif used.size and not ((used >= o0) & (used < o1)).all():
            outside(used, x0, x1, "a load reads outside x")
        return load(ptrs, mask, *rest)

    def checked_store(ptrs, value, mask, *rest):
        addr, on = active(ptrs, mask)
        outside(addr[on], o0, o1, "a store writes outside out")
        return store(ptrs, value, mask, *rest)

    builder.create_masked_load, builder.create_masked_store = recording_load, checked_store
    try:
        launch()
    finally:
        del builder.create_masked_load, builder.create_masked_store  # the class's methods again
    return loads


def _problem(out: torch.Tensor, want: torch.Tensor) -> str:
    bad = ~((out == want) | (out.isnan() & want.isnan()))
    if not bad.any():
        return ""
    i = int(bad.nonzero()[0])
    return (f"{int(bad.sum()):,} of {want.numel():,} outputs differ from x[::STRIDE] (first: output {i} is "
            f"{out[i].item():.6g}, expected {want[i].item():.6g}{'; NaN = never written' if out[i].isnan() else ''})")


def run(kernel, stride: int = 8, n_out: int | None = None, seed: int = 0, label: str = "",
        block: int = copies.BLOCK, repeats: int = 200, profile: bool = False) -> EditRun:
    """``kernel`` on fresh seeded random records (``n_out`` of them, default :data:`COUNT_N_OUT` in interpreter
    mode, :data:`TIME_N_OUT` on a GPU), output poisoned with NaN, compared with ``x[::stride]``. Interpreter: the
    loads of ``x`` (:func:`record_loads`). GPU and correct: ``repeats`` CUDA-event timings after 5 warm-up calls
    (200 of a stride-8 copy of 64 MiB useful last tens of ms: several NVML readings), the SM clock sampled during them, the device name and, with ``profile``, :func:`ncu_sectors`. ``label``
    prefixes the kernel's name in ``name`` (``"edit: copy_strided"``)."""
    kname = check_kernel(kernel, stride)
    name = f"{label}: {kname}" if label else kname
    mode = device_mod.mode()
    n_out = n_out or (TIME_N_OUT if mode == "gpu" else COUNT_N_OUT)
    dev = device_mod.torch_device()
    x = torch.randn(n_out * stride, generator=torch.Generator(device=dev).manual_seed(seed), device=dev)
    out = torch.full((n_out,), float("nan"), device=x.device)
    grid = (-(-n_out // block),)

    def launch():
        kernel[grid](x, out, n_out, STRIDE=stride, BLOCK=block, num_warps=copies.NUM_WARPS)

    base = dict(name=name, stride=stride, n_out=n_out, mode=mode)
    try:
        if mode == "interpreter":
            loads = tuple(record_loads(launch, x, out))
        else:  # on a GPU: one launch to check the output (then timed below)
            launch()
            loads = ()
        device_mod.synchronize()
    except Exception as exc:  # a kernel that does not run: one line, no traceback (its message names the cause)
        cause = exc.__cause__ if isinstance(exc.__cause__, OutOfBounds) else exc  # the interpreter wraps it
        msg = str(cause).strip().splitlines()
        return EditRun(**base, ok=False, problem=f"did not run: {type(cause).__name__}: {msg[-1] if msg else ''}"[:400])
    problem = _problem(out, x[::stride])  # on the device that ran it
    if problem or mode == "interpreter":
        return EditRun(**base, ok=not problem, problem=problem, loads=loads)
    from .clocks import ClockSampler  # lazy: NVML is loaded only on a GPU

    props = torch.cuda.get_device_properties(x.device)
    with ClockSampler(props) as sampler:
        timing = time_fn(launch, warmup=5, repeats=repeats)
    counters, note = ncu_sectors(kernel, stride, n_out) if profile else (None, "")
    return EditRun(**base, ok=True, timing=timing, clock=sampler.summary(), gpu=props.name, ncu=counters,
                   ncu_note=note if counters is None else "")


def beside_original(kernel, stride: int = 8, **kwargs) -> list[EditRun]:
    """``[original, edit]``: :func:`run` of the lab's ``copy_strided`` and of ``kernel`` on the same workload (the
    same seed), labelled ``original`` and ``edit``; ``kwargs`` go to both."""
    check_kernel(kernel, stride)  # a bad kernel or stride is refused before anything runs
    return [run(copies.KERNELS["copy_strided"], stride, label="original", **kwargs),
            run(kernel, stride, label="edit", **kwargs)]


def ncu_sectors(kernel, stride: int = 8, n_out: int = TIME_N_OUT) -> tuple[dict | None, str]:
    """``({"sectors", "requests"}, command)`` of ``kernel`` profiled by ncu in its own process (its source written
    to a temporary module; a kernel that needs names defined elsewhere in the notebook cannot run there), or
    ``(None, one line)`` saying why not (no ncu, no permission, or the kernel did not run). On a GPU only."""
    kname = check_kernel(kernel, stride)
    try:
        source = inspect.getsource(kernel.fn)
    except (OSError, TypeError) as exc:
        return None, f"ncu: the kernel's source cannot be read ({exc})"
    with tempfile.TemporaryDirectory(prefix="infralens_edit_") as tmp:
        path = Path(tmp) / "edit_kernel.py"
        path.write_text("import triton\nimport triton.language as tl\n\n\n" + source)
        target = ["--kernel", "copy_edit", "--source", str(path), "--name", kname, "--stride", str(stride),
                  "--n", str(n_out), "--warmup", "1", "--iters", "1"]
        # the name as a regex: only this kernel launches inside the target's NVTX range
        command = ncu_run.command_line(target, kname, metrics=ncu_csv.SECTORS)
        try:
            text = ncu_run.run_ncu(target, kname, metrics=ncu_csv.SECTORS)
        except ncu_csv.NcuError as exc:
            return None, f"ncu: {str(exc).splitlines()[0]}"
    row = ncu_csv.sectors_per_request(ncu_csv.parse_raw_csv(text)).iloc[0]
    return {"sectors": float(row["sectors"]), "requests": float(row["requests"])}, command
