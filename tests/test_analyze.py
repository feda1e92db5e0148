"""`python -m infralens_lab analyze PATH`: what the labs show, for any torch.profiler trace, on every committed
trace, on a trace of a model profiled here, on a folder of per-rank traces, and with a clear message for each
kind of bad trace."""
from __future__ import annotations

import gzip
import json

import pytest

from infralens_lab import evidence
from infralens_lab.analyze import IDLE_TABLE, analyze, main
from infralens_lab.parse.trace import TraceError, load_trace, step_gpu_work

SETS = ("nvidia-h200", "nvidia-h100-80gb-hbm3")


def _step_traces():
    out = []
    for gpu in SETS:
        st = evidence.reference(gpu)
        for name in st.names():
            if name.startswith(("trace_", "resnet_trace_")) and name not in ("trace_summary",) \
                    and "pipeline" not in name:  # the threaded pipeline traces have no ProfilerStep: tested below
                out.append(pytest.param(gpu, name, id=f"{gpu}-{name}"))
    return out


@pytest.mark.parametrize("gpu,name", _step_traces())
def test_every_committed_trace(gpu, name, tmp_path, capsys):
    values = evidence.reference(gpu).load(name).values
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(values))
    rep = analyze(path)
    tr = load_trace(values)
    w = step_gpu_work(tr)
    steps = rep.tables["steps"]
    assert steps["gpu_ops"].tolist() == w["gpu_ops"].tolist()  # the same rule as the labs
    hot = rep.tables["hot kernels (launched in the profiled steps)"]
    assert hot["kernel"].iloc[0] == tr.kernels()["name"].iloc[0]
    assert rep.provenance.startswith("Evidence: your trace") and name in rep.provenance
    idle = rep.tables[IDLE_TABLE]  # ALL idle time of the window: the gaps over 50 µs by cause, the short ones
    s = tr.summary()
    assert idle["idle_ms"].sum() == pytest.approx((s["window_us"] - s["gpu_busy_us"]) / 1e3)
    gaps = tr.idle_gaps()
    a, b = (tr.steady_window() or (tr.busy()[0][0], tr.busy()[-1][1]))[:2]
    over = idle["cause"] != "short gaps under 50 µs (back-to-back launches)"
    assert idle.loc[over, "idle_ms"].sum() == pytest.approx(
        gaps[(gaps["start_us"] >= a) & (gaps["end_us"] <= b)]["gap_us"].sum() / 1e3, abs=1e-9)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "steps" in out and "hot kernels" in out


def test_a_gzipped_trace_reads_like_the_plain_one(tmp_path):
    values = evidence.reference().load("trace_fixed").values
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(json.dumps(values).encode()))
    (tmp_path / "t.json").write_text(json.dumps(values))
    a, b = analyze(tmp_path / "t.json.gz"), analyze(tmp_path / "t.json")
    assert a.tables["steps"].equals(b.tables["steps"])


def test_a_model_profiled_here(tmp_path):
    """The learner's own model on this machine: a CPU trace has no GPU events, which analyze refuses with the fix
    unless the CPU side is asked for."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    x = torch.randn(32, 64)
    path = tmp_path / "mine.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3)) as prof:
        for _ in range(5):
            model(x).sum().backward()
            prof.step()
    prof.export_chrome_trace(str(path))
    with pytest.raises(TraceError, match="profiled without CUDA activity"):
        analyze(path)
    assert main([str(path)]) == 2
    rep = analyze(path, cpu_ok=True)
    assert len(rep.tables["steps (CPU)"]) == 3 and "aten::addmm" in set(rep.tables["top ops (CPU time)"]["name"])


def test_a_folder_of_rank_traces(tmp_path):
    run = json.loads((__import__("pathlib").Path(__file__).parent / "data" / "ddp_gloo_run.json").read_text())
    for r in run:
        cfg = next(c for c in r["configs"] if c["label"] == "cap 25 MiB")
        (tmp_path / f"rank{r['rank']}.json").write_text(json.dumps(cfg["trace"]))
    rep = analyze(tmp_path, cpu_ok=True)
    per = rep.tables["per rank and step: communication, compute, exposed"]
    assert sorted(set(per["rank"])) == [0, 1]
    assert "collectives aligned across ranks" in rep.tables or any("not aligned" in n for n in rep.notes)
    plain = analyze(tmp_path)  # gloo ranks ran on a CPU: read as such without cpu_ok (tests/test_analyze_inputs.py)
    assert any("CPU ranks (gloo)" in n for n in plain.notes)


@pytest.mark.parametrize("content,match", [
    (b"not json at all", "not JSON"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2', "truncated"),
    (b'{"schemaVersion": 1, "events": []}', "without a 'traceEvents' list"),
    (b'[1, 2, 3]', "without a 'traceEvents' list"),
    (gzip.compress(b"{}")[:-6], "does not decompress"),
], ids=["not-json", "truncated", "no-traceEvents", "a-list", "broken-gzip"])
def test_bad_files_get_one_clear_message(tmp_path, capsys, content, match):
    p = tmp_path / ("bad.json.gz" if content[:2] == b"\x1f\x8b" else "bad.json")
    p.write_bytes(content)
    with pytest.raises(TraceError, match=match):
        analyze(p)
    assert main([str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("analyze: ") and "Traceback" not in err


def test_a_trace_without_steps_asks_for_a_schedule(tmp_path):
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"stream": 7}}]
    p = tmp_path / "nosched.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    with pytest.raises(TraceError, match="use a schedule"):
        analyze(p)


def test_missing_paths_and_empty_folders(tmp_path):
    assert main([str(tmp_path / "nowhere.json")]) == 2
    with pytest.raises(TraceError, match="no trace files"):
        analyze(tmp_path)
