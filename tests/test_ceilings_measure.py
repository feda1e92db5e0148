"""measure.ceilings' additions that run without a GPU: reading nvidia-smi's clock samples, and no clock at all
(rather than a crash) where nvidia-smi is absent. The timed parts need a GPU (make gates-gpu / the recorder)."""
from __future__ import annotations

import pytest

from infralens_lab.measure import ceilings


def test_clock_samples_skip_the_first_and_ignore_junk():
    text = "1980\n1980\n1545\n[N/A]\n1550\n\n1560\nerror: x\n"
    assert ceilings.parse_clock_samples(text) == pytest.approx(1550e6)  # median of 1545, 1550, 1560
    assert ceilings.parse_clock_samples("1700\n") == pytest.approx(1700e6)  # too few to skip: keep them
    assert ceilings.parse_clock_samples("") is None and ceilings.parse_clock_samples("[N/A]\n") is None


def test_no_nvidia_smi_means_no_clock(monkeypatch):
    monkeypatch.setattr(ceilings.shutil, "which", lambda name: None)
    assert ceilings.sm_clock_under(lambda: None) is None


def test_the_recorded_units_and_notes_name_the_new_fields():
    for field in ("sm_clock_hz", "batched_ms", "cpu_issue_ms"):
        assert field in ceilings.UNITS and field in ceilings.NOTES
