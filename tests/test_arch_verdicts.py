"""The labs' verdicts and roof sentences on a fake device of each architecture class: no Hopper-only sentence.

The recorded H200 set's counters (``ncu_attention.csv``, ``ncu_matmul.csv``, ``ncu_copies.csv``) and ceilings are
moved to a fake GPU of each class in :data:`infralens_lab.kernels.arch.ARCHS`: its SM count in
``launch__sm_count``, waves rescaled to it, every duration and every measured rate scaled by the fake's
SMs x peak-per-cycle over the H200's (so the physics check holds as it held on the H200), and its own compute
capability and L2 size in the device facts. The analysis the labs run (:func:`~infralens_lab.analysis.counters.
kernel_table` and its sentences, the roofline notes, the copy table and its notes, the clock and physics sentences,
the stall card) must then judge against that architecture's peak per cycle and never name a Hopper-only unit,
size or link. The fake's SM counts and L2 sizes are inputs (one GPU of each class), not claims the package makes.
"""
from __future__ import annotations

import copy
import re

import pandas as pd
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import counters, hardware, launches, roofline_notes, stalls
from infralens_lab.kernels.arch import ARCHS
from infralens_lab.parse.ncu import parse_raw_csv
from infralens_lab.units import MiB

# cc -> (name, SMs, L2 bytes) of one GPU of the class: T4, A100 80GB, RTX 3090, L4, H100 SXM, B200, RTX 5090
FAKE = {75: ("Tesla T4", 40, 4 * MiB), 80: ("NVIDIA A100-SXM4-80GB", 108, 40 * MiB),
        86: ("NVIDIA GeForce RTX 3090", 82, 6 * MiB), 89: ("NVIDIA L4", 58, 48 * MiB),
        90: ("NVIDIA H100 80GB HBM3", 132, 50 * MiB), 100: ("NVIDIA B200", 148, 126 * MiB),
        120: ("NVIDIA GeForce RTX 5090", 170, 96 * MiB)}
# Hopper-only words and sizes a sentence about another GPU must not carry (HGMMA / wgmma instructions, the H100's
# 132 SMs and 50 MiB L2, the H200's 60 MiB, NVLink 4, TMA, the GPUs' names)
HOPPER_ONLY = re.compile(r"HGMMA|wgmma|gmma|\b132\b|\b50 MiB|\b60 MiB|NVLink|TMA|Hopper|H100|H200|sm_90|\b9\.0\b",
                         re.IGNORECASE)
SOURCE = "nvidia-h200"


@pytest.fixture(scope="module")
def recorded():
    st = evidence.RecordedStore(evidence.data_root() / SOURCE)
    dev = st.load("device").values
    frames = {n: parse_raw_csv(st.text(f"ncu_{n}.csv")) for n in ("attention", "matmul", "copies")}
    return {"device": dev, "frames": frames, "ceilings": st.load("ceilings").values,
            "text": st.text("ncu_matmul.csv")}


def _ratio(src_dev, cc, dtype):
    """The fake's SMs x peak-per-cycle over the source GPU's, for ``dtype`` (None: the fake has no such unit)."""
    ppc_src = hardware.peak_per_cycle(src_dev["compute_capability"], dtype)
    ppc = hardware.peak_per_cycle(f"{cc // 10}.{cc % 10}", dtype)
    return None if not ppc or not ppc_src else FAKE[cc][1] * ppc / (src_dev["sm_count"] * ppc_src)


def _fake_frame(df: pd.DataFrame, sms_src: int, sms: int, r: float) -> pd.DataFrame:
    df = df.copy()
    m = df["metric"]
    df.loc[m == "launch__sm_count", "value"] = float(sms)
    df.loc[m == "launch__waves_per_multiprocessor", "value"] *= sms_src / sms
    df.loc[m.str.startswith("gpu__time_duration"), "value"] /= r
    df.loc[m.str.contains(r"^dram__bytes_(?:read|write)\.sum\.per_second$"), "value"] *= r
    return df


def _fake(recorded, cc):
    src = recorded["device"]
    name, sms, l2 = FAKE[cc]
    r = _ratio(src, cc, "fp16")
    values = copy.deepcopy(recorded["ceilings"])
    values["copy"]["bandwidth_bytes_per_s"] *= r
    kept = []
    for row in values["matmul"]:
        rd = _ratio(src, cc, row["dtype"])
        if rd is not None:  # sm_75 has no bf16 or tf32 unit: no such ceiling there
            kept.append({**row, "flops_per_s": row["flops_per_s"] * rd})
    values["matmul"] = kept
    for row in values.get("sweep") or ():
        row["median_ms"] = row["median_ms"] / r
    dev = {**src, "name": name, "sm_count": sms, "l2_bytes": l2, "compute_capability": f"{cc // 10}.{cc % 10}"}
    ceil = hardware.Ceilings.from_evidence(type("Ev", (), {"values": values,
                                                           "provenance": type("P", (), {"gpu": name})()})(), dev)
    frames = {k: _fake_frame(v, src["sm_count"], sms, r) for k, v in recorded["frames"].items()}
    return dev, ceil, frames, values


def _sentences(recorded, cc) -> tuple[list[str], pd.DataFrame, dict]:
    dev, ceil, frames, values = _fake(recorded, cc)
    factor = counters.tensor_flops_per_op(counters.tensor_op_check(frames["matmul"]))
    kt = counters.kernel_table([frames["attention"], frames["matmul"]], ceil, factor)
    ct = counters.copy_table(frames["copies"], ceil)
    out = list(kt["bound_text"]) + list(kt["what_would_move_it"]) + list(kt["roof_basis"])
    out += roofline_notes.kernel_notes(kt) + roofline_notes.idle_sm_notes(kt)
    out += roofline_notes.copy_notes(ct) + roofline_notes.copy_over_ceiling(ct, ceil, dev["l2_bytes"])
    out += hardware.clock_sentences(values, dev) + hardware.physics_violations(values, dev["sm_count"],
                                                                               dev["compute_capability"])
    ppc = launches.tensor_peak_per_sm_cycle(frames["matmul"], factor or 1.0)
    out += roofline_notes.clock_notes([frames["attention"], frames["matmul"]], recorded["text"], None, ppc,
                                      dev["sm_count"])
    out.append(stalls.card({"long_scoreboard": 0.6, "mio_throttle": 0.2, "selected": 0.2}))
    return out, kt, dev


@pytest.mark.parametrize("cc", ARCHS)
def test_verdicts_use_the_architectures_peak_per_cycle(recorded, cc):
    _, kt, dev = _sentences(recorded, cc)
    sms = dev["sm_count"]
    for _, r in kt.iterrows():
        dtype = "fp16" if r["roof"] == "fp16 tensor" else "fp32"
        ppc = hardware.peak_per_cycle(dev["compute_capability"], dtype)
        assert r["roof_basis"].startswith(f"{sms} SMs x {ppc:,} FLOP/cycle ({dtype})"), (cc, r["label"], r["roof_basis"])
        # the roof in TFLOP/s is this arch's SMs x peak per cycle x the kernel's own clock (rounding of the GHz only)
        assert r["roof_TFLOPs"] == pytest.approx(sms * ppc * r["clock_ghz"] * 1e9 / 1e12, rel=1e-9)
    assert not hardware.physics_violations(_fake(recorded, cc)[3], sms, dev["compute_capability"])
    assert set(kt["bound"]) <= {"memory", "compute", "latency"}, set(kt["bound"])


NO_HBM = {75, 86, 89, 120}  # GDDR parts: T4, RTX 30, L4 and RTX 40, RTX 50
NO_FP8 = {75, 80, 86}  # fp8 tensor cores from sm_89 on (analysis.hardware.FP8_FROM)


@pytest.mark.parametrize("cc", [c for c in ARCHS if c != 90])
def test_no_hopper_only_sentence_on_another_architecture(recorded, cc):
    sentences, _, _ = _sentences(recorded, cc)
    assert len(sentences) > 20
    bad = [s for s in sentences if HOPPER_ONLY.search(s)]
    assert not bad, f"sm_{cc}: Hopper-only words in {bad[:3]}"
    if cc in NO_HBM:
        assert not [s for s in sentences if "HBM" in s], f"sm_{cc} ({FAKE[cc][0]}) has GDDR memory, not HBM"
    if cc in NO_FP8:
        assert not [s for s in sentences if re.search(r"\(fp8\)|precision \(fp8", s)], f"sm_{cc} has no fp8"


def test_the_hopper_check_can_fail(recorded):
    """The same sentences for the H100 fake name its 132 SMs, HBM and fp8: the patterns above are not blind."""
    sentences, _, _ = _sentences(recorded, 90)
    assert any(HOPPER_ONLY.search(s) for s in sentences)
    assert any("HBM" in s for s in sentences) and any("(fp8)" in s for s in sentences)


def test_fp8_and_memory_words():
    assert [hardware.has_fp8(c) for c in ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")] == \
        [False, False, False, True, True, True, True]
    assert hardware.has_fp8(None) is None
    with pytest.raises(ValueError, match=r"compute_capability='sm90'; expected a string like '8.9'"):
        hardware.has_fp8("sm90")
    assert [hardware.memory_word(n) for n in ("NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA L4", "Tesla T4", None)] \
        == ["HBM", "HBM", "DRAM", "DRAM", "DRAM"]


@pytest.mark.parametrize("gpu, peak", [("NVIDIA H200", 450.0), ("NVIDIA H100 80GB HBM3", 450.0),
                                       ("NVIDIA H100 PCIe", None), ("NVIDIA A100-SXM4-80GB", None),
                                       ("NVIDIA GeForce RTX 4090", None), ("NVIDIA B200", None)])
def test_link_peak_is_the_gpus(gpu, peak):
    """NCCL's link peak is NVLink 4 only on the GPUs that have it; any other GPU gets none, named, not Hopper's."""
    from infralens_lab.analysis import scaling
    label, gbs = scaling.link_peak("nccl", gpu)
    assert gbs == peak
    assert ("NVLink 4" in label) if peak else (gpu in label and "NVLink" not in label)
    assert scaling.link_peak("gloo", gpu) == ("", None)
    assert scaling.link_peak("nccl", None)[1] == scaling.NVLINK4_GBS  # bare rank dicts: assumed, and said so
