"""measure.clocks and measure.ceilings' clock fields, without a GPU: NVML is faked at its four calls, so the device
address, the UUID check, the background readings and their summary are exercised here; the timed parts need a GPU
(the recorder, `make gates-gpu`)."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from infralens_lab.errors import InfraLensError
from infralens_lab.measure import ceilings, clocks

UUID = "3f1c2a9e-0000-4e5b-9a44-1234567890ab"


def props(uuid=UUID, bus=0x1B):
    return SimpleNamespace(pci_domain_id=0, pci_bus_id=bus, pci_device_id=0, uuid=uuid)


class FakeNvml:
    """The four NVML calls, over a table of devices by PCI address; SM clock readings step through ``sm``."""

    def __init__(self, devices, sm=(1755, 1980, 1965), mem=(2619,)):
        self.devices, self.sm, self.mem, self.reads = devices, list(sm), list(mem), 0
        self.opened = []

    def handle(self, pci):
        if pci not in self.devices:
            raise clocks.ClockError(f"nvmlDeviceGetHandleByPciBusId_v2({pci!r}) returned NVML error 6")
        self.opened.append(pci)
        return pci

    def uuid(self, h):
        return self.devices[h]

    def clock_mhz(self, h, kind):
        self.reads += 1
        seq = self.sm if kind == clocks.NVML_CLOCK_SM else self.mem
        return seq[(self.reads // 2) % len(seq)]


def test_bus_id_is_nvml_s_pci_address_of_torch_s_device_and_names_what_is_missing():
    assert clocks.bus_id(props(bus=0x1B)) == "00000000:1B:00.0"
    assert clocks.bus_id(SimpleNamespace(pci_domain_id=1, pci_bus_id=0xC3, pci_device_id=2)) == "00000001:C3:02.0"
    with pytest.raises(ValueError, match="lack pci_domain_id"):
        clocks.bus_id(SimpleNamespace(name="NVIDIA H200"))


def test_the_sampler_reads_the_device_torch_uses_during_the_block_and_summarises_median_and_range():
    fake = FakeNvml({"00000000:1B:00.0": "gpu-" + UUID, "00000000:2A:00.0": "gpu-other"})
    with clocks.ClockSampler(props(uuid=UUID.upper()), interval_s=0.001, nvml=fake) as s:
        time.sleep(0.05)
    assert fake.opened == ["00000000:1B:00.0"]  # by bus id, never by an index
    summ = s.summary()
    assert summ.samples == len(s.sm) >= 3
    assert summ.sm_clock_min_hz == 1755e6 and summ.sm_clock_max_hz == 1980e6
    assert summ.sm_clock_min_hz <= summ.sm_clock_hz <= summ.sm_clock_max_hz
    assert summ.mem_clock_hz == 2619e6 and summ.pci_bus_id == "00000000:1B:00.0"
    assert "during the timed repetitions" in summ.source


def test_a_device_whose_uuid_is_not_torch_s_is_refused_as_the_wrong_gpu():
    fake = FakeNvml({"00000000:1B:00.0": "GPU-some-other-gpu"})
    with pytest.raises(clocks.ClockError, match=r"UUID some-other-gpu; expected torch's 3f1c2a9e") as err:
        clocks.ClockSampler(props(), nvml=fake)
    assert isinstance(err.value, InfraLensError)


def test_no_nvml_library_is_a_clock_error_naming_the_library():
    with pytest.raises(clocks.ClockError, match=r"cannot load libnot-nvml\.so.*NVML library"):
        clocks.Nvml("libnot-nvml.so")


def test_summarize_refuses_no_readings_and_zero_clocks():
    with pytest.raises(ValueError, match="0 SM, 0 memory; expected at least one"):
        clocks.summarize([], [], "x")
    with pytest.raises(ValueError, match="include 0 MHz"):
        clocks.summarize([1980, 0], [2619], "x")


def test_the_recorded_units_and_notes_name_the_clock_fields_and_how_they_were_taken():
    for field in ("sm_clock_hz", "sm_clock_min_hz", "sm_clock_max_hz", "mem_clock_hz", "batched_ms", "cpu_issue_ms"):
        assert field in ceilings.UNITS and field in ceilings.NOTES
    assert "PCI bus id" in ceilings.NOTES and "during the timed repetitions" in ceilings.NOTES
