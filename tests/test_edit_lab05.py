"""Lab 05's edit-and-measure exercise (issue 38): a learner's ``prefetch(step, i)`` swapped into the double-buffered
step, replayed on this CPU with torch.cuda's streams and events recorded (measure.stream_record), judged for races
and modelled with two engines from the recorded copy and matmul times (analysis.stream_order), beside the recorded
steps (labs_support.lab05.edit_and_measure). Fresh random batches of an odd shape in every replay."""
from __future__ import annotations

import json

import pytest
import torch
from conftest import ROOT

from infralens_lab import device
from infralens_lab.analysis import overlap_tables, stream_order
from infralens_lab.labs_support import lab05
from infralens_lab.measure import stream_record
from infralens_lab.quiz.cells import EDIT_KEY, TAG_EXERCISE, TAG_SOLUTION, _tags, output_folded
from infralens_lab.workloads import overlap as workloads_overlap


def side_stream(step, i):  # the worked edit (the package's own CopyComputeStep._prefetch, as a function)
    slot = i % 2
    with torch.cuda.stream(step.side):
        step.side.wait_event(step.freed[slot])
        step.buf[slot].copy_(step.host[i % len(step.host)], non_blocking=True)
        step.copied[slot].record(step.side)


def side_stream_wait_stream(step, i):  # another safe edit: wait for the whole compute stream, not one event
    slot = i % 2
    step.side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(step.side):
        step.buf[slot].copy_(step.host[i % len(step.host)], non_blocking=True)
    step.copied[slot].record(step.side)


def no_freed_wait(step, i):
    slot = i % 2
    with torch.cuda.stream(step.side):
        step.buf[slot].copy_(step.host[i % len(step.host)], non_blocking=True)
        step.copied[slot].record(step.side)


def copied_on_compute(step, i):
    slot = i % 2
    with torch.cuda.stream(step.side):
        step.side.wait_event(step.freed[slot])
        step.buf[slot].copy_(step.host[i % len(step.host)], non_blocking=True)
    step.copied[slot].record(torch.cuda.current_stream())


def synced(step, i):  # safe, but the host waits for everything each time: nothing left to overlap
    side_stream(step, i)
    torch.cuda.synchronize()


def other_batch(step, i):
    slot = i % 2
    step.buf[slot].copy_(step.host[(i + 1) % len(step.host)], non_blocking=True)
    step.copied[slot].record(torch.cuda.current_stream())


@pytest.fixture(scope="module")
def recorded():
    copy_trs = lab05.copy_traces(lab05.store())
    copies = overlap_tables.copy_table({m: tr for m, (tr, _) in copy_trs.items()}, lab05.COPY_BYTES)
    return copies, copy_trs


def _judge(fn, recorded):
    pin = recorded[0].set_index("mode").loc["pinned"]
    return stream_order.judge(stream_record.replay_prefetch(fn), pin["copy_ms"], pin["kernel_ms"])


def test_the_original_is_safe_and_serial_and_the_edit_hides_the_copy(recorded):
    pin = recorded[0].set_index("mode").loc["pinned"]
    orig = _judge(workloads_overlap.same_stream_prefetch, recorded)
    edit = _judge(side_stream, recorded)
    assert (orig["order"], orig["copy_streams"], orig["kernel_streams"]) == ("safe", "compute", "compute")
    assert (edit["order"], edit["copy_streams"], edit["kernel_streams"]) == ("safe", "side", "compute")
    # the model's own arithmetic: in line, copy + matmuls; beside each other, the longer of the two
    assert orig["period_ms"] == pytest.approx(pin["copy_ms"] + pin["kernel_ms"], rel=1e-9)
    assert edit["period_ms"] == pytest.approx(max(pin["copy_ms"], pin["kernel_ms"]), rel=1e-9)
    assert orig["hidden_fraction"] == 0 and edit["hidden_fraction"] == pytest.approx(1.0)
    also = _judge(side_stream_wait_stream, recorded)
    assert also["order"] == "safe" and also["period_ms"] == pytest.approx(edit["period_ms"])


def test_a_host_sync_is_safe_and_hides_nothing(recorded):
    j = _judge(synced, recorded)
    assert j["order"] == "safe" and j["hidden_fraction"] == 0


@pytest.mark.parametrize("fn, says", [
    (no_freed_wait, ["race: the copy of batch", "may overwrite it while step", "step.freed[slot]"]),
    (copied_on_compute, ["race: step 0's matmuls (compute stream) read buffer 0 without waiting for its copy",
                         "side stream", "step.copied[slot]"]),
])
def test_a_missing_wait_is_named_as_a_race(fn, says, recorded):
    j = _judge(fn, recorded)
    assert j["order"] == "race" and j["period_ms"] is None
    for s in says:
        assert s in j["problems"][0]


def test_wrong_data_and_errors_are_named_without_a_traceback(recorded, capsys):
    j = _judge(other_batch, recorded)
    assert j["order"] == "wrong data" and "step 0 should compute on host batch 0; it computed on batch 1" in j["problems"][0]
    r = stream_record.replay_prefetch(lambda step, i: step.nope)
    assert r["wrong"].startswith("it raised AttributeError") and r["ops"] == []
    lab05.edit_and_measure(lambda step, i: 1 / 0, *recorded)
    out = capsys.readouterr().out
    assert "it raised ZeroDivisionError" in out and "Traceback" not in out


def test_the_lab_view_on_the_recording(recorded, capsys):
    copies, copy_trs = recorded
    lab05.edit_and_measure(side_stream, copies, copy_trs)
    out = capsys.readouterr().out
    gpu = copy_trs["pinned"][1].provenance.gpu
    if device.is_gpu():  # gpu mode: the edit is profiled and timed live, beside the recorded steps of this GPU's set
        assert "in the profiled trace" in out and f"Recorded double_buffered on {gpu}" in out, out
        assert "Model, not a measurement" not in out
        return
    assert "Model, not a measurement" in out and f"recorded on {gpu}" in out and "no timing" in out
    replays = {"as given": stream_record.replay_prefetch(workloads_overlap.same_stream_prefetch),
               "yours": stream_record.replay_prefetch(side_stream)}
    table, _ = stream_order.edit_view(copies, replays, gpu)
    rec = copies.set_index("mode")
    t = table.set_index("prefetch")
    assert t.loc[stream_order.RECORDED_ROWS["double_buffered"], "period_ms"] == rec.loc["double_buffered", "period_ms"]
    assert t.loc["yours", "evidence"].startswith("model") and "timed_ms" not in t.columns


def test_bad_input_is_refused_with_what_was_seen(recorded):
    with pytest.raises(stream_record.PrefetchError, match="prefetch is int; expected a function"):
        stream_record.replay_prefetch(3)
    with pytest.raises(ValueError, match="steps=1; expected an int >= 2"):
        stream_record.replay_prefetch(side_stream, steps=1)
    with pytest.raises(ValueError, match="copy_ms=0; expected a positive time"):
        stream_order.model([], 0, 1.0)
    with pytest.raises(ValueError, match=r"ops\[0\] is .*expected a dict with kind"):
        stream_order.races([{"kind": "launch", "stream": 0}])
    with pytest.raises(ValueError, match="expected also"):
        stream_order.edit_view(recorded[0][recorded[0]["mode"] == "pinned"], {}, "gpu")
    with pytest.raises(ValueError, match="only with mode 'double_buffered'"):
        workloads_overlap.CopyComputeStep("pinned", prefetch=side_stream)


def test_the_recorder_restores_torch_cuda():
    before = (torch.cuda.Stream, torch.cuda.Event, torch.cuda.stream, torch.cuda.current_stream, torch.cuda.synchronize)
    stream_record.replay_prefetch(lambda step, i: 1 / 0)
    stream_record.replay_prefetch(side_stream)
    assert before == (torch.cuda.Stream, torch.cuda.Event, torch.cuda.stream, torch.cuda.current_stream,
                      torch.cuda.synchronize)


def test_clocks_follow_cuda_ordering_rules():
    ops = [{"kind": "copy", "stream": 1, "step": 0, "slot": 0, "batch": 0},
           {"kind": "wait", "stream": 0, "step": 0, "event": 0},  # waits on an event not yet recorded: nothing
           {"kind": "kernel", "stream": 0, "step": 0, "slot": 0},
           {"kind": "record", "stream": 1, "step": 0, "event": 0},
           {"kind": "wait", "stream": 0, "step": 1, "event": 0},
           {"kind": "kernel", "stream": 0, "step": 1, "slot": 0}]
    got = stream_order.races(ops)
    assert len(got) == 1 and "step 0's matmuls" in got[0]  # step 1's kernel waited; step 0's did not
    m = stream_order.model(ops + [{"kind": "kernel", "stream": 0, "step": s, "slot": None} for s in (2, 3, 4)],
                           1.0, 2.0, skip=1)
    assert m["period_ms"] == pytest.approx(2.0)


def test_the_lab_cell_is_the_package_original():
    """The exercise cell's unedited prefetch does what workloads.overlap.same_stream_prefetch does (the view's 'as
    given'); it sits under its '### Edit and measure' markdown, and a hint fold and a folded solution follow."""
    cells = json.loads((ROOT / "labs" / "05_overlap_launch.ipynb").read_text())["cells"]
    at = [i for i, c in enumerate(cells) if c["metadata"].get("infralens", {}).get(EDIT_KEY) == "lab05.edit1"]
    assert len(at) == 1 and TAG_EXERCISE in _tags(cells[at[0]]) and "question" not in cells[at[0]]["metadata"]["infralens"]
    i = at[0]
    assert "".join(cells[i - 1]["source"]).startswith("### Edit and measure")
    src = "".join(cells[i]["source"])
    ns = {"torch": torch}
    exec(src.split("lab05.edit_and_measure(")[0], ns)  # the function as the learner gets it
    assert stream_record.replay_prefetch(ns["prefetch"], seed=5) == \
        stream_record.replay_prefetch(workloads_overlap.same_stream_prefetch, seed=5)
    assert cells[i + 1]["metadata"]["infralens"]["hint"] == "lab05.edit1"
    sol = cells[i + 2]
    assert TAG_SOLUTION in _tags(sol) and output_folded(sol) and "lab05.edit_and_measure(" in "".join(sol["source"])
    shown = "".join("".join(o.get("text", "")) for o in cells[i]["outputs"])
    assert "copies on the compute stream" in shown and "Model, not a measurement" in shown


def test_the_live_view_shape_on_recorded_traces(recorded):
    """The GPU path's table and reading, fed recorded traces in place of live ones (the timing and clock dicts are
    stand-ins for what live_prefetch returns; only the shape of the view is checked here, not a measurement)."""
    copies, copy_trs = recorded
    replays = {"as given": stream_record.replay_prefetch(workloads_overlap.same_stream_prefetch),
               "yours": stream_record.replay_prefetch(side_stream)}
    live = {n: {"trace": copy_trs[m][0], "gpu": "GPU X", "clock": {"sm_clock_hz": 1.5e9},
                "timing": {"median_ms": p, "p10_ms": p * 0.9, "p90_ms": p * 1.1, "n": 20}}
            for n, m, p in (("as given", "pinned", 2.0), ("yours", "double_buffered", 1.0))}
    table, reading = stream_order.edit_view(copies, replays, "GPU R", live, lab05.COPY_BYTES)
    t = table.set_index("prefetch")
    assert t.loc["yours", "evidence"] == "live, GPU X" and t.loc["yours", "timed_ms"] == 1.0
    assert t.loc["yours", "hidden_fraction"] == copies.set_index("mode").loc["double_buffered", "hidden_fraction"]
    assert "Live on GPU X" in reading and "SM clock 1.50 GHz" in reading and "median of 20" in reading
    live["yours"]["clock"] = {"sm_clock_hz": None, "clock_note": "no NVML"}
    assert "SM clock not read" in stream_order.edit_view(copies, replays, "GPU R", live, lab05.COPY_BYTES)[1]
