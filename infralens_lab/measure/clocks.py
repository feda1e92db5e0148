"""The SM and memory clocks a GPU ran at *while* timed work ran on it, read through NVML for the very device torch uses.

Why NVML by PCI bus id: ``nvidia-smi -i N`` numbers GPUs by its own index, which ignores ``CUDA_VISIBLE_DEVICES``;
with ``CUDA_VISIBLE_DEVICES=1`` torch's device 0 is nvidia-smi's GPU 1, and a recording once read the idle GPU 0's
345 MHz for every ceiling (issue 37). :func:`bus_id` takes the PCI address from torch's own device properties, NVML
opens that address (``nvmlDeviceGetHandleByPciBusId_v2``), and :class:`ClockSampler` checks that the UUID NVML
returns is torch's UUID before it trusts a reading.

:class:`ClockSampler` is a context manager: a background thread reads ``nvmlDeviceGetClockInfo`` (SM and memory
clocks, MHz) every ``interval_s`` while the ``with`` block runs the timed repetitions, so the clock is the one the
timing saw, not one sampled afterwards in a separate loop. ``summary()`` gives the median and the range in Hz.
NVML is loaded with ctypes from the driver's ``libnvidia-ml.so.1`` (no Python package needed); the clocks are the
GPU's own choice (boost, power, heat): nothing here sets or locks a clock.
"""
from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass

from ..errors import InfraLensError
from ..stats import percentile

NVML_CLOCK_SM = 1  # nvmlClockType_t: NVML_CLOCK_GRAPHICS 0, NVML_CLOCK_SM 1, NVML_CLOCK_MEM 2
NVML_CLOCK_MEM = 2
INTERVAL_S = 0.01  # 10 ms between readings: ~50 readings over a half-second timed loop; one reading costs ~20 µs
SOURCE = "NVML nvmlDeviceGetClockInfo (SM, MEM) by PCI bus id, sampled during the timed repetitions"


class ClockError(InfraLensError, RuntimeError):
    """NVML could not be loaded, could not open the device, or opened a device that is not torch's."""


def bus_id(props) -> str:
    """The PCI address NVML expects (``'00000000:1B:00.0'``) from torch's device properties
    (``pci_domain_id``, ``pci_bus_id``, ``pci_device_id``). ValueError naming what is missing."""
    try:
        dom, bus, dev = int(props.pci_domain_id), int(props.pci_bus_id), int(props.pci_device_id)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"device properties {props!r} lack pci_domain_id/pci_bus_id/pci_device_id ({exc}); "
                         "expected torch.cuda.get_device_properties(i)") from exc
    return f"{dom:08X}:{bus:02X}:{dev:02X}.0"


def _norm_uuid(u) -> str | None:
    """A UUID as NVML and torch both can write it, lower case without NVML's ``GPU-`` prefix."""
    return str(u).lower().removeprefix("gpu-") if u is not None else None


class Nvml:
    """The four NVML calls the sampler needs, over ctypes. ClockError when the library or the device is missing."""

    def __init__(self, lib: str = "libnvidia-ml.so.1"):
        try:
            self.lib = ctypes.CDLL(lib)
        except OSError as exc:
            raise ClockError(f"cannot load {lib} ({exc}); expected the NVIDIA driver's NVML library "
                             "(installed with the driver)") from exc
        self._check(self.lib.nvmlInit_v2(), "nvmlInit_v2")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise ClockError(f"{what} returned NVML error {rc}; expected 0 (NVML_SUCCESS)")

    def handle(self, pci: str) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        self._check(self.lib.nvmlDeviceGetHandleByPciBusId_v2(pci.encode(), ctypes.byref(h)),
                    f"nvmlDeviceGetHandleByPciBusId_v2({pci!r})")
        return h

    def uuid(self, h) -> str:
        buf = ctypes.create_string_buffer(96)
        self._check(self.lib.nvmlDeviceGetUUID(h, buf, 96), "nvmlDeviceGetUUID")
        return buf.value.decode()

    def clock_mhz(self, h, kind: int) -> int:
        v = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetClockInfo(h, kind, ctypes.byref(v)), "nvmlDeviceGetClockInfo")
        return int(v.value)

    def close(self) -> None:
        self.lib.nvmlShutdown()


@dataclass(frozen=True)
class ClockSummary:
    """What a :class:`ClockSampler` saw: SM and memory clock median and range (Hz), the reading count, the device."""

    sm_clock_hz: float
    sm_clock_min_hz: float
    sm_clock_max_hz: float
    mem_clock_hz: float
    samples: int
    pci_bus_id: str
    source: str = SOURCE

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def summarize(sm_mhz: list[int], mem_mhz: list[int], pci: str) -> ClockSummary:
    """A :class:`ClockSummary` from raw readings (MHz). ValueError when there are none or a reading is not
    positive (NVML reports 0 for a clock it cannot read)."""
    if not sm_mhz or not mem_mhz:
        raise ValueError(f"clock readings: {len(sm_mhz)} SM, {len(mem_mhz)} memory; expected at least one of each "
                         "(time the work for longer than one sampling interval)")
    if min(sm_mhz) <= 0 or min(mem_mhz) <= 0:
        raise ValueError(f"clock readings include {min(min(sm_mhz), min(mem_mhz))} MHz; expected positive clocks")
    return ClockSummary(percentile(sm_mhz, 50) * 1e6, min(sm_mhz) * 1e6, max(sm_mhz) * 1e6,
                        percentile(mem_mhz, 50) * 1e6, len(sm_mhz), pci)


class ClockSampler:
    """``with ClockSampler(props) as s: <timed repetitions>`` then ``s.summary()``. ``props`` is
    ``torch.cuda.get_device_properties(i)`` of the device that runs the work. ClockError when NVML opens a device
    whose UUID is not torch's (the wrong GPU) or cannot open it at all."""

    def __init__(self, props, interval_s: float = INTERVAL_S, nvml: Nvml | None = None):
        self.pci = bus_id(props)
        self.nvml = nvml or Nvml()
        self.h = self.nvml.handle(self.pci)
        want, got = _norm_uuid(getattr(props, "uuid", None)), _norm_uuid(self.nvml.uuid(self.h))
        if want is not None and want != got:
            raise ClockError(f"NVML device at {self.pci} has UUID {got}; expected torch's {want} (wrong GPU)")
        self.interval_s, self.sm, self.mem = interval_s, [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> None:
        self.sm.append(self.nvml.clock_mhz(self.h, NVML_CLOCK_SM))
        self.mem.append(self.nvml.clock_mhz(self.h, NVML_CLOCK_MEM))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            time.sleep(self.interval_s)

    def __enter__(self) -> ClockSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._read()  # one reading at the end, so a block shorter than an interval still has two

    def summary(self) -> ClockSummary:
        return summarize(self.sm, self.mem, self.pci)
