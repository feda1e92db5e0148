"""The allocation timeline: phases from marker allocations, allocated bytes per event, peaks per phase.
Checked by hand on a synthetic allocator history (the recorded one comes from a GPU)."""
from __future__ import annotations

import pytest
import torch

from infralens_lab.measure import memory_timeline as mt

M = [mt.MARKER_BASE + 512 * i for i in range(4)]


def _history():
    """One step: forward allocs 100 then 50, frees 50; backward allocs 30, frees 100; optimizer allocs 7, frees 7."""
    ev = [["alloc", 999]]  # before the first marker: ignored
    ev += [["alloc", M[0]], ["free_completed", M[0]], ["segment_alloc", 2048], ["alloc", 100], ["alloc", 50],
           ["free_completed", 50]]
    ev += [["alloc", M[1]], ["free_completed", M[1]], ["alloc", 30], ["free_completed", 100]]
    ev += [["alloc", M[2]], ["free_completed", M[2]], ["alloc", 7], ["free_completed", 7]]
    ev += [["alloc", M[3]], ["free_completed", M[3]], ["alloc", 5]]  # after the last marker: ignored
    return ev


def test_timeline_by_hand():
    df = mt.timeline(_history(), baseline_bytes=1000, steps=1)
    assert list(df["phase"]) == ["forward"] * 4 + ["backward"] * 2 + ["optimizer"] * 2
    assert list(df["allocated_bytes"]) == [1000, 1100, 1150, 1100, 1130, 1030, 1037, 1030]
    assert df["reserved_bytes"].max() == 2048 and mt.MARKER_BASE not in set(df["size"])
    peaks = mt.phase_peaks(df).set_index("phase")
    assert peaks.loc["forward", ["start_bytes", "peak_bytes", "end_bytes"]].tolist() == [1000, 1150, 1100]
    assert peaks.loc["backward", ["start_bytes", "peak_bytes", "end_bytes"]].tolist() == [1100, 1130, 1030]
    assert peaks.loc["optimizer", "peak_bytes"] == 1037 and peaks.loc["forward", "peak_event"] == 2


def test_missing_markers_are_refused():
    truncated = [e for e in _history() if e != ["alloc", M[2]]]
    with pytest.raises(ValueError, match=r"found 2 of 4 phase markers.*raise max_entries"):
        mt.timeline(truncated, 0, steps=1)


def test_compact_keeps_allocator_events_of_one_device():
    snap = {"device_traces": [[{"action": "alloc", "size": 512, "addr": 1, "frames": []},
                               {"action": "free_requested", "size": 512},
                               {"action": "free_completed", "size": 512},
                               {"action": "snapshot"}]]}
    assert mt.compact(snap) == [["alloc", 512], ["free_completed", 512]]
    with pytest.raises(ValueError, match="expected a list with an entry for device 1"):
        mt.compact(snap, device_index=1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_needs_cuda():
    with pytest.raises(RuntimeError, match="CUDA caching allocator's history; no CUDA device"):
        mt.record_step_timeline()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_real_step_on_a_gpu():
    from infralens_lab.workloads.tiny_gpt import GPTConfig

    vals = mt.record_step_timeline(GPTConfig(n_layer=2, n_embd=128, n_head=4, n_kv_head=4, ffn=512, vocab=512,
                                             block_size=64), batch=4)
    df = mt.timeline(vals["events"], vals["baseline_bytes"], 1)
    peaks = mt.phase_peaks(df).set_index("phase")
    assert peaks.loc["forward", "end_bytes"] > peaks.loc["forward", "start_bytes"]  # activations kept for backward
    assert peaks["peak_bytes"].max() >= vals["baseline_bytes"]


def test_timeline_figure_draws_each_precision():
    import matplotlib

    matplotlib.use("Agg")
    from infralens_lab.present.allocations import timeline_figure

    df = mt.timeline(_history(), baseline_bytes=1000, steps=1)
    fig = timeline_figure({"fp32": df, "amp_bf16": df})
    assert len(fig.axes) == 2 and "fp32" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match="not a timeline DataFrame"):
        timeline_figure({"x": df.drop(columns=["phase"])})
