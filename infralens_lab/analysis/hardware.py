"""Peak specifications of a few GPUs, and the ceilings measured on the one in use.

:data:`PEAKS` holds vendor datasheet peaks, **dense** (no 2:4 sparsity), in SI units
(FLOP/s, byte/s): FP32 on CUDA cores, TF32 / FP16 / BF16 on tensor cores with FP32
accumulation (what PyTorch uses), and DRAM bandwidth. Sources: NVIDIA H100 Tensor Core GPU
datasheet (SXM5 and PCIe columns; the datasheet's tensor numbers are "with sparsity", halved
here), NVIDIA H200 Tensor Core GPU datasheet (SXM), NVIDIA A100 Tensor Core GPU datasheet
(40GB and 80GB SXM), NVIDIA L4 Tensor Core GPU datasheet, and the NVIDIA Ada GPU
Architecture whitepaper, Appendix A (GeForce RTX 4090, FP16/BF16 with FP32 accumulate).
Datasheet peaks are upper bounds that real kernels do not reach; the labs put the measured
:class:`Ceilings` (recorder step ``ceilings``: torch ``copy_`` bandwidth and cuBLAS matmul
rates at 8192³) next to them and use the measured ones for rooflines.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pandas as pd

from ..errors import InfraLensError

T = 1e12


@dataclass(frozen=True)
class Peaks:
    """Datasheet peaks for one GPU, dense. Rates in FLOP/s, bandwidth in byte/s, memory in bytes."""

    name: str
    fp32: float
    tf32: float
    fp16: float
    bf16: float
    bandwidth: float
    memory_bytes: float
    memory_kind: str
    source: str

    def as_dict(self) -> dict:
        return asdict(self)


_H100 = "NVIDIA H100 Tensor Core GPU datasheet"
PEAKS: dict[str, Peaks] = {
    "H100 SXM5": Peaks("H100 SXM5", 67 * T, 494.5 * T, 989.5 * T, 989.5 * T, 3.35 * T, 80e9, "HBM3", _H100),
    "H100 PCIe": Peaks("H100 PCIe", 51 * T, 378 * T, 756.5 * T, 756.5 * T, 2.0 * T, 80e9, "HBM2e", _H100),
    "H200": Peaks("H200", 67 * T, 494.5 * T, 989.5 * T, 989.5 * T, 4.8 * T, 141e9, "HBM3e",
                  "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
    "A100 40GB SXM": Peaks("A100 40GB SXM", 19.5 * T, 156 * T, 312 * T, 312 * T, 1.555 * T, 40e9, "HBM2",
                           "NVIDIA A100 Tensor Core GPU datasheet"),
    "A100 80GB SXM": Peaks("A100 80GB SXM", 19.5 * T, 156 * T, 312 * T, 312 * T, 2.039 * T, 80e9, "HBM2e",
                           "NVIDIA A100 Tensor Core GPU datasheet"),
    "L4": Peaks("L4", 30.3 * T, 60 * T, 121 * T, 121 * T, 0.3 * T, 24e9, "GDDR6",
                "NVIDIA L4 Tensor Core GPU datasheet"),
    "RTX 4090": Peaks("RTX 4090", 82.6 * T, 82.6 * T, 165.2 * T, 165.2 * T, 1.008 * T, 24e9, "GDDR6X",
                      "NVIDIA Ada GPU Architecture whitepaper, Appendix A"),
}

# device names as torch reports them -> PEAKS key; first match wins, so specific before general
_NAME_PATTERNS = [
    (r"h200", "H200"),
    (r"h100.*pcie", "H100 PCIe"),
    (r"h100", "H100 SXM5"),  # "NVIDIA H100 80GB HBM3" is the SXM5 part
    (r"a100.*40\s*gb|a100-sxm4-40gb", "A100 40GB SXM"),
    (r"a100", "A100 80GB SXM"),
    (r"\bl4\b", "L4"),
    (r"rtx\s*4090", "RTX 4090"),
]


def peaks_for(gpu_name: str) -> Peaks | None:
    """Datasheet peaks for a GPU by its name as torch/nvidia-smi print it (``'NVIDIA H100 80GB HBM3'``),
    or ``None`` for a GPU not in the table."""
    if not isinstance(gpu_name, str):
        raise TypeError(f"gpu_name is {type(gpu_name).__name__}; expected a str such as 'NVIDIA H100 80GB HBM3'")
    low = gpu_name.lower()
    for pattern, key in _NAME_PATTERNS:
        if re.search(pattern, low):
            return PEAKS[key]
    return None


# Dense FLOP per SM per cycle, by compute capability: the most one SM's units can do in one cycle (fp32 on the CUDA
# cores, the others on tensor cores with fp32 accumulation, no 2:4 sparsity). Each is a datasheet's dense peak divided
# by (SM count x the boost clock it is quoted at), rounded to the power of two the architecture's units give:
# sm_90 H100 SXM5 989.5 TFLOP/s fp16 / (132 x 1.83 GHz) = 4,096, tf32 494.5 -> 2,048, fp32 67 -> 256 (with the
# FMA counted as 2); sm_80 A100 312 / (108 x 1.41 GHz) = 2,048, tf32 1,024, fp32 128; sm_75 T4 65 / (40 x 1.59 GHz)
# = 1,024 (no bf16, no tf32); sm_86 / sm_89 / sm_120 the fastest accumulate mode of the family's whitepapers (RTX
# 3090 fp16 71 TFLOP/s / (82 x 1.695 GHz) = 512; L40S 362 / (142 x 2.52 GHz) = 1,024); sm_100 B200 2.25 PFLOP/s
# fp16 dense / (148 x 1.965 GHz) ~ 7,740 -> 8,192. Used as an upper bound (physics), never as an expected rate.
PEAK_PER_CYCLE: dict[str, dict[str, int]] = {
    "7.5": {"fp32": 128, "fp16": 1024},
    "8.0": {"fp32": 128, "tf32": 1024, "fp16": 2048, "bf16": 2048},
    "8.6": {"fp32": 256, "tf32": 256, "fp16": 512, "bf16": 512},
    "8.9": {"fp32": 256, "tf32": 512, "fp16": 1024, "bf16": 1024},
    "9.0": {"fp32": 256, "tf32": 2048, "fp16": 4096, "bf16": 4096},
    "10.0": {"fp32": 256, "tf32": 4096, "fp16": 8192, "bf16": 8192},
    "12.0": {"fp32": 256, "tf32": 512, "fp16": 1024, "bf16": 1024},
}
PEAK_PER_CYCLE_SOURCE = ("dense datasheet peak / (SM count x quoted boost clock), rounded to the unit's power of two "
                         "(analysis.hardware.PEAK_PER_CYCLE)")


def peak_per_cycle(compute_capability: str, dtype: str) -> int | None:
    """Dense FLOP per SM per cycle for ``dtype`` (``fp32``, ``tf32``, ``fp16``, ``bf16``) on a GPU of
    ``compute_capability`` (``'9.0'``); None where the table has no such unit (bf16 on sm_75) or no such GPU."""
    if not isinstance(compute_capability, str) or not isinstance(dtype, str):
        raise TypeError(f"peak_per_cycle({compute_capability!r}, {dtype!r}); expected strings like ('9.0', 'fp16')")
    return PEAK_PER_CYCLE.get(compute_capability, {}).get(dtype)


# fp8 tensor cores (e4m3 / e5m2) arrive with Ada (sm_89) and Hopper (sm_90): NVIDIA Ada GPU Architecture whitepaper
# ("Fourth-Generation Tensor Cores", FP8) and NVIDIA H100 Tensor Core GPU Architecture whitepaper; none on sm_75,
# sm_80 or sm_86.
FP8_FROM = (8, 9)


def has_fp8(compute_capability: str | None) -> bool | None:
    """Whether a GPU of ``compute_capability`` (``'8.9'``) has fp8 tensor cores (:data:`FP8_FROM`); None if unknown."""
    if not compute_capability:
        return None
    major, _, minor = str(compute_capability).partition(".")
    if not major.isdigit() or not minor.isdigit():
        raise ValueError(f"compute_capability={compute_capability!r}; expected a string like '8.9'")
    return (int(major), int(minor)) >= FP8_FROM


def memory_word(gpu_name: str | None) -> str:
    """What a sentence calls the GPU's DRAM: ``HBM`` for a GPU :data:`PEAKS` lists with HBM memory (H100, H200,
    A100), else the neutral ``DRAM`` (GDDR parts, and GPUs the table does not know)."""
    p = peaks_for(gpu_name) if isinstance(gpu_name, str) else None
    return "HBM" if p is not None and p.memory_kind.startswith("HBM") else "DRAM"


class PhysicsError(InfraLensError, ValueError):
    """A measured rate above what the GPU's SMs can do at the clock recorded beside it."""


def physics_rows(values: dict, sm_count: int, compute_capability: str) -> list[dict]:
    """The physics check of a ``ceilings`` record: per matmul ceiling, the FLOP per SM per cycle its rate needs at
    its recorded clock (``rate / (sm_count x sm_clock_hz)``) against the unit's peak per cycle
    (:data:`~infralens_lab.analysis.hardware.PEAK_PER_CYCLE`), ``min_clock_ghz`` (the lowest clock at which the
    rate is possible: ``rate / (sm_count x peak)``) and ``ok`` (None where the record has no clock or the table no
    peak). A row with ``ok`` False names a clock that cannot be the one the timing ran at."""
    if not isinstance(values, dict) or not isinstance(values.get("matmul"), list):
        seen = sorted(values) if isinstance(values, dict) else type(values).__name__
        raise ValueError(f"ceilings values have {seen}; expected a dict with a 'matmul' list")
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 1:
        raise ValueError(f"sm_count={sm_count!r}; expected the GPU's SM count, a positive int")
    rows = []
    for r in values["matmul"]:
        dtype, rate, clock = r.get("dtype"), r.get("flops_per_s"), r.get("sm_clock_hz")
        peak = peak_per_cycle(compute_capability, dtype) if isinstance(dtype, str) else None
        need = rate / (sm_count * clock) if rate and clock else None
        rows.append({"ceiling": f"{dtype} matmul", "rate_TFLOPs": rate / 1e12 if rate else None,
                     "clock_ghz": clock / 1e9 if clock else None, "flop_per_sm_cycle": need,
                     "peak_per_sm_cycle": peak,
                     "min_clock_ghz": rate / (sm_count * peak) / 1e9 if rate and peak else None,
                     "ok": None if need is None or peak is None else bool(need <= peak)})
    return rows


def physics_violations(values: dict, sm_count: int, compute_capability: str) -> list[str]:
    """One sentence per matmul ceiling whose recorded clock is impossible (``ok`` False in :func:`physics_rows`):
    the rate, the clock, the FLOP per SM-cycle it would need, the peak and the lowest possible clock."""
    return [f"{r['ceiling']}: {r['rate_TFLOPs']:.1f} TFLOP/s at the recorded {r['clock_ghz']:.3f} GHz needs "
            f"{r['flop_per_sm_cycle']:,.0f} FLOP per SM-cycle on {sm_count} SMs, above the {r['peak_per_sm_cycle']:,} "
            f"the unit can do ({PEAK_PER_CYCLE_SOURCE}); the timing ran at {r['min_clock_ghz']:.3f} GHz or faster"
            for r in physics_rows(values, sm_count, compute_capability) if r["ok"] is False]


def check_physics(values: dict, sm_count: int, compute_capability: str) -> None:
    """:class:`PhysicsError` listing every impossible ceiling clock (see :func:`physics_violations`); the
    recorder calls it before it writes a ``ceilings`` record."""
    bad = physics_violations(values, sm_count, compute_capability)
    if bad:
        raise PhysicsError("ceilings above SMs x peak-per-cycle x clock: " + "; ".join(bad))


@dataclass(frozen=True)
class Ceilings:
    """Ceilings measured on one GPU by the recorder's ``ceilings`` step. SI units (byte/s, FLOP/s).

    ``copy_bw`` counts bytes read plus bytes written by torch ``copy_`` of a 1 GiB tensor;
    ``fp32`` is a matmul with TF32 off, the others are cuBLAS matmuls at 8192³. ``launch_floor_s``:
    the timed floor of a tiny launch, the per-call time of the smallest matmul of the fp16 sweep called back to
    back (one CUDA-event pair around many calls, ``batched_ms``; the median of an event pair around each call in
    recordings without it), in seconds; None without a sweep. ``clock_hz``: the SM clock (Hz) each ceiling ran at,
    keyed ``copy``, ``fp32`` ... ``bf16`` (recorded from 2026-11-24 on; empty for older recordings).
    """

    gpu: str
    copy_bw: float
    fp32: float | None = None
    tf32: float | None = None
    fp16: float | None = None
    bf16: float | None = None
    launch_floor_s: float | None = None
    clock_hz: dict = field(default_factory=dict)
    compute_capability: str | None = None
    sm_count: int | None = None
    values: dict | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_values(cls, values: dict[str, Any], gpu: str = "") -> Ceilings:
        """Build from the ``ceilings`` record's values (``{'copy': {...}, 'matmul': [...]}``)."""
        if not isinstance(values, dict) or "copy" not in values or "matmul" not in values:
            seen = sorted(values) if isinstance(values, dict) else type(values).__name__
            raise ValueError(f"ceilings values have {seen}; expected a dict with 'copy' and 'matmul'")
        bw = values["copy"].get("bandwidth_bytes_per_s")
        if not bw:
            raise ValueError(f"ceilings copy entry {values['copy']!r} lacks 'bandwidth_bytes_per_s'")
        rates, clocks = {}, {}
        if values["copy"].get("sm_clock_hz"):
            clocks["copy"] = float(values["copy"]["sm_clock_hz"])
        for row in values["matmul"]:
            if row.get("dtype") in ("fp32", "tf32", "fp16", "bf16") and row.get("flops_per_s"):
                rates[row["dtype"]] = float(row["flops_per_s"])
                if row.get("sm_clock_hz"):
                    clocks[row["dtype"]] = float(row["sm_clock_hz"])
        sweep = [r for r in values.get("sweep") or () if r.get("median_ms")]
        smallest = min(sweep, key=lambda r: r.get("M", 0)) if sweep else None
        # per call back to back (one event pair around many calls) when recorded, as lab 02's host-gap table reads
        # it; an event pair around each single call also times the events themselves (33.9 against 20.5 µs, H100)
        floor = (smallest.get("batched_ms") or smallest["median_ms"]) * 1e-3 if smallest else None
        return cls(gpu=gpu, copy_bw=float(bw), **rates, launch_floor_s=floor, clock_hz=clocks, values=values)

    @classmethod
    def from_evidence(cls, ev, device: dict | None = None) -> Ceilings:
        """Build from an :class:`~infralens_lab.evidence.Evidence` named ``ceilings``; ``device``: the same set's
        (or the live GPU's) device facts (``compute_capability``, ``sm_count``), which the physics check and the
        per-cycle roofs need."""
        c = cls.from_values(ev.values, gpu=ev.provenance.gpu)
        if device:
            sms = device.get("sm_count")
            c = replace(c, compute_capability=device.get("compute_capability"),
                        sm_count=int(sms) if sms else None)
        return c

    @classmethod
    def from_store(cls, store) -> Ceilings:
        """:meth:`from_evidence` of a recorded set's ``ceilings`` record with the set's own ``device`` record."""
        dev = store.load("device").values if "device" in store.names() else None
        return cls.from_evidence(store.load("ceilings"), dev)

    def clock_checks(self) -> list[dict]:
        """:func:`physics_rows` of this record (empty without the device facts or the raw values)."""
        if not self.values or not self.compute_capability or not self.sm_count:
            return []
        return physics_rows(self.values, self.sm_count, self.compute_capability)

    def trusted_clock_hz(self) -> dict:
        """``clock_hz`` without the clocks the physics check refutes (a matmul rate above SMs x peak-per-cycle x its
        recorded clock): the ones a per-cycle figure may use."""
        bad = {r["ceiling"].split()[0] for r in self.clock_checks() if r["ok"] is False}
        return {k: v for k, v in self.clock_hz.items() if k not in bad}

    def rate(self, dtype: str) -> float:
        """Measured matmul rate for ``dtype`` in FLOP/s; ValueError if it was not measured."""
        v = getattr(self, dtype, None) if dtype in ("fp32", "tf32", "fp16", "bf16") else None
        if v is None:
            raise ValueError(f"no measured matmul ceiling for dtype {dtype!r}; have "
                             f"{[d for d in ('fp32', 'tf32', 'fp16', 'bf16') if getattr(self, d)]}")
        return v

    def _clock_read(self, key: str, trusted: dict) -> str:
        """How the clock of ceiling ``key`` (``copy``, ``fp32`` ... ``bf16``) was read; see :meth:`versus_datasheet`."""
        if key in self.clock_hz and key not in trusted:
            return "impossible (physics)"
        if key not in trusted:
            return "not recorded"
        if not self.values:
            return "after the timing"
        rows = [self.values["copy"]] if key == "copy" else [r for r in self.values["matmul"] if r.get("dtype") == key]
        return "during the timing" if rows and rows[0].get("clock_samples") else "after the timing"

    def versus_datasheet(self):
        """DataFrame: measured ceiling, datasheet peak, their ratio and the SM clock the ceiling ran at (GHz; None
        where not recorded or where the physics check refutes it), and ``clock_read``: ``during the timing`` (NVML
        readings of the timed repetitions), ``after the timing`` (an older recorder's separate loop),
        ``impossible (physics)`` or ``not recorded``."""
        p = peaks_for(self.gpu)
        trusted = self.trusted_clock_hz()
        rows = [("copy bandwidth", "TB/s", self.copy_bw, p.bandwidth if p else None, "copy")]
        rows += [(f"{d} matmul", "TFLOP/s", getattr(self, d), getattr(p, d) if p else None, d)
                 for d in ("fp32", "tf32", "fp16", "bf16")]
        out = []
        for what, unit, meas, peak, key in rows:
            clock = trusted.get(key)
            check = self._clock_read(key, trusted)
            out.append({"quantity": what, "unit": unit, "measured": meas / T if meas else None,
                        "datasheet": peak / T if peak else None,
                        "measured_over_datasheet": meas / peak if meas and peak else None,
                        "clock_GHz": clock / 1e9 if clock else None, "clock_read": check})
        return pd.DataFrame(out)


def matmul_rate_table(values: dict[str, Any], device: dict | None = None) -> pd.DataFrame:
    """The ``ceilings`` record's matmul rates, one row per precision as measured: ``dtype``, ``shape``
    (``MxNxK``), ``rate_TFLOPs`` (median of CUDA-event timings; ``fp32`` with TF32 off) and ``sm_clock_ghz``, the
    SM clock recorded with that matmul (NaN where the record has none). With the set's ``device`` facts
    (``sm_count``, ``compute_capability``) the physics check applies (:func:`physics_rows`): ``flop_per_sm_cycle``
    (the rate per SM per cycle at that clock), ``peak_per_sm_cycle`` and ``clock_check`` (``ok``, or ``impossible``
    with the clock set to NaN: a clock the rate refutes is never shown as the one it ran at)."""
    if not isinstance(values, dict) or not isinstance(values.get("matmul"), list):
        seen = sorted(values) if isinstance(values, dict) else type(values).__name__
        raise ValueError(f"ceilings values have {seen}; expected a dict with a 'matmul' list")
    out = pd.DataFrame([{"dtype": r["dtype"], "shape": f"{r['M']}x{r['N']}x{r['K']}", "rate_TFLOPs": r["flops_per_s"] / T,
                         "sm_clock_ghz": r["sm_clock_hz"] / 1e9 if r.get("sm_clock_hz") else float("nan")}
                        for r in values["matmul"]])
    if device and device.get("sm_count") and device.get("compute_capability"):
        phys = physics_rows(values, int(device["sm_count"]), str(device["compute_capability"]))
        ok = [r["ok"] for r in phys]
        out["flop_per_sm_cycle"] = [r["flop_per_sm_cycle"] if r["ok"] else float("nan") for r in phys]
        out["peak_per_sm_cycle"] = [r["peak_per_sm_cycle"] for r in phys]
        out["clock_check"] = ["ok" if o else "impossible" if o is False else "no clock" for o in ok]
        out.loc[[o is False for o in ok], "sm_clock_ghz"] = float("nan")
    return out


def clock_sentences(values: dict[str, Any], device: dict) -> list[str]:
    """What a lab says about the ceilings' clocks, from the physics check: one line per refuted clock (the rate, the
    clock it was recorded with, the FLOP per SM-cycle that would take, the peak, and the lowest clock the rate allows),
    then one line for the clocks that pass (each ceiling's share of its unit's peak per cycle, at its own clock)."""
    rows = physics_rows(values, int(device["sm_count"]), str(device["compute_capability"]))
    lines = [f"{r['ceiling']}: recorded at {r['clock_ghz']:.2f} GHz, but {r['rate_TFLOPs']:.0f} TFLOP/s at that clock "
             f"needs {r['flop_per_sm_cycle']:,.0f} FLOP per SM-cycle, above the {r['peak_per_sm_cycle']:,} its units "
             f"can do: that clock was not the one the timing ran at (it ran at {r['min_clock_ghz']:.2f} GHz or faster)"
             for r in rows if r["ok"] is False]
    good = [r for r in rows if r["ok"]]
    if good:
        lines.append("clocks that hold: " + "; ".join(
            f"{r['ceiling']} {r['rate_TFLOPs']:.0f} TFLOP/s at {r['clock_ghz']:.2f} GHz = {r['flop_per_sm_cycle']:,.0f} "
            f"FLOP per SM-cycle, {r['flop_per_sm_cycle'] / r['peak_per_sm_cycle']:.0%} of its units' "
            f"{r['peak_per_sm_cycle']:,}" for r in good))
    return lines
