"""What `python -m infralens_lab analyze PATH` accepts (issue 40): the package's own recorded evidence files, traces
of older PyTorch (1.8/1.9 category names), a folder of gloo (CPU) rank traces without --cpu; a clear message for
JSON that holds a trace deeper inside; and a start that never imports torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from infralens_lab import evidence
from infralens_lab.analyze import analyze, gloo_rank, main
from infralens_lab.parse.trace import (
    TraceError,
    category,
    load_trace,
    read_trace_file,
    read_trace_record,
    step_gpu_work,
    trim,
)

ROOT = Path(__file__).resolve().parents[1]
GPU = "nvidia-h100-80gb-hbm3"
RECORDED = evidence.data_root() / GPU / "trace_fixed.json"  # a committed evidence record: provenance + values
GLOO_RUN = Path(__file__).parent / "data" / "ddp_gloo_run.json"


@pytest.fixture(scope="module")
def fixed() -> dict:
    """trace_fixed of the H100 set: 3 profiled training steps, as the recorder trimmed them."""
    return evidence.reference(GPU).load("trace_fixed").values


# ---------------------------------------------------------------- 1. the package's own recorded files
def test_a_recorded_evidence_file_is_read_as_its_trace(fixed, capsys):
    assert main([str(RECORDED)]) == 0
    out = capsys.readouterr().out
    assert "Evidence: recorded evidence file · trace_fixed.json" in out and "NVIDIA H100 80GB HBM3" in out
    rep, ref = analyze(RECORDED), analyze(fixed)
    pd.testing.assert_frame_equal(rep.tables["steps"], ref.tables["steps"])
    assert rep.tables["steps"]["gpu_ops"].tolist() == step_gpu_work(load_trace(fixed))["gpu_ops"].tolist()
    assert rep.provenance.startswith("Evidence: recorded evidence file")
    assert "record 'trace_fixed': recorded · NVIDIA H100 80GB HBM3" in rep.provenance
    data, record = read_trace_record(RECORDED)
    assert data == fixed and record["provenance"]["gpu_slug"] == GPU and "values" not in record
    assert read_trace_file(RECORDED) == fixed and load_trace(RECORDED).steps()["name"].tolist() == \
        load_trace(fixed).steps()["name"].tolist()


def test_json_that_is_neither_says_where_the_trace_sits(fixed, tmp_path, capsys):
    """A dict holding a trace under ``values`` without a record's provenance, and the gloo run's list of ranks,
    are refused with what was seen and where the trace sits."""
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"name": "x", "values": fixed}))
    with pytest.raises(TraceError, match=r"top level: \['name', 'values'\]\); the trace sits under \['values'\]"):
        analyze(bare)
    other = tmp_path / "other_schema.json"
    other.write_text(json.dumps({"schema": "someone.else/2", "provenance": {}, "values": fixed}))
    with pytest.raises(TraceError, match=r"the trace sits under \['values'\]"):
        analyze(other)
    with pytest.raises(TraceError, match=r"a list of 2 items\); the trace sits under \[0\]\['single'\]\['trace'\]"):
        analyze(GLOO_RUN)
    nothing = tmp_path / "nothing.json"
    nothing.write_text(json.dumps({"events": [], "meta": {"a": 1}}))
    with pytest.raises(TraceError) as exc:
        analyze(nothing)
    assert "top level: ['events', 'meta']" in str(exc.value) and "sits under" not in str(exc.value)
    assert main([str(bare)]) == 2 and "Traceback" not in capsys.readouterr().err


# ---------------------------------------------------------------- 2. older PyTorch's category names
# PyTorch 1.8 (early kineto) wrote every CPU event, record_function ranges and ProfilerStep#N included, as
# ``Operator``; 1.9 kept ``user_annotation`` for the ranges. Runtime calls were ``Runtime``, GPU work ``Kernel``,
# ``Memcpy``, ``Memset``; ``external id`` was lower case, and a ``Trace`` span and ``python_function`` events came
# along. Case variations (``CUDA_Driver``) are read too.
LEGACY_18 = {"cpu_op": "Operator", "user_annotation": "Operator", "cuda_runtime": "Runtime",
             "cuda_driver": "CUDA_Driver", "kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}
LEGACY_19 = {**LEGACY_18, "user_annotation": "user_annotation"}


def _legacy(values: dict, names: dict[str, str]) -> dict:
    """``values`` as an older PyTorch would have written it (see above)."""
    events = []
    for e in values["traceEvents"]:
        e = {**e, "args": dict(e.get("args") or {})}
        if "cat" in e:
            e["cat"] = names.get(e["cat"], e["cat"])
        if "External id" in e["args"]:
            e["args"]["external id"] = e["args"].pop("External id")
        events.append(e)
    xs = [e for e in events if e.get("ph") == "X"]
    t0, t1 = min(e["ts"] for e in xs), max(e["ts"] + e.get("dur", 0) for e in xs)
    pid, tid = xs[0]["pid"], xs[0]["tid"]
    events.insert(0, {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": pid, "tid": tid,
                      "ts": t0, "dur": t1 - t0, "args": {}})
    events.append({"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": pid, "tid": tid,
                   "ts": t0, "dur": t1 - t0, "args": {}})
    return {**values, "traceEvents": events}


@pytest.mark.parametrize("names", [LEGACY_18, LEGACY_19], ids=["torch-1.8", "torch-1.9"])
def test_older_pytorch_categories_give_the_same_report(fixed, names, tmp_path):
    old = _legacy(fixed, names)
    assert {e.get("cat") for e in old["traceEvents"]} >= {"Operator", "Runtime", "Kernel", "Memset", "Trace"}
    path = tmp_path / "torch18.json"
    path.write_text(json.dumps(old))
    a, b = analyze(path), analyze(fixed)
    pd.testing.assert_frame_equal(a.tables["steps"], b.tables["steps"])
    ta, tb = load_trace(old), load_trace(fixed)
    assert ta.steps()["name"].tolist() == tb.steps()["name"].tolist() == [f"ProfilerStep#{i}" for i in (3, 4, 5)]
    sa, sb = ta.summary(), tb.summary()
    assert sa["kernels"] == sb["kernels"] and sa["gpu_busy_us"] == pytest.approx(sb["gpu_busy_us"])
    assert sa["gpu_utilization"] == pytest.approx(sb["gpu_utilization"])
    assert ta.kernels()[["name", "count"]].equals(tb.kernels()[["name", "count"]])
    assert ta.events["external_id"].notna().sum() == tb.events["external_id"].notna().sum()
    if names is LEGACY_19:  # a 1:1 renaming: trim writes the modern names back, event for event
        assert trim(old) == trim(fixed)
    else:  # every CPU event an Operator: the step ranges are still ranges, the rest ops
        kept = trim(old)["traceEvents"]
        assert sorted(e["name"] for e in kept if e["cat"] == "user_annotation") == \
            [f"ProfilerStep#{i}" for i in (3, 4, 5)]
        assert load_trace(trim(old)).steps()["name"].tolist() == tb.steps()["name"].tolist()


def test_a_profiler_step_carried_as_an_operator_is_the_step_range():
    step = {"ph": "X", "cat": "Operator", "name": "ProfilerStep#7", "pid": 1, "tid": 1, "ts": 0, "dur": 10}
    assert category(step) == "user_annotation"
    assert category({**step, "cat": "cpu_op"}) == "user_annotation"
    assert category({**step, "name": "aten::mm"}) == "cpu_op"
    assert category({**step, "cat": "CUDA_RUNTIME", "name": "cudaLaunchKernel"}) == "cuda_runtime"
    assert category({**step, "cat": "Trace"}) is None and category({"ph": "X", "name": "no cat"}) is None


# ---------------------------------------------------------------- 6. a folder of gloo (CPU) ranks
def _gloo_folder(folder: Path, rename: dict[str, str] | None = None) -> Path:
    for r in json.loads(GLOO_RUN.read_text()):
        trace = next(c for c in r["configs"] if c["label"] == "cap 25 MiB")["trace"]
        for e in trace["traceEvents"]:
            e["name"] = (rename or {}).get(e["name"], e["name"])
        (folder / f"rank{r['rank']}.json").write_text(json.dumps(trace))
    return folder


def test_a_folder_of_gloo_ranks_needs_no_cpu_flag(tmp_path, capsys):
    folder = _gloo_folder(tmp_path)
    rep = analyze(folder)
    assert any(n.startswith("2 CPU ranks (gloo)") for n in rep.notes)
    per = rep.tables["per rank and step: communication, compute, exposed"]
    assert sorted(set(per["rank"])) == [0, 1]
    assert all(gloo_rank(load_trace(p)) for p in sorted(folder.iterdir()))
    assert main([str(folder)]) == 0 and "CPU ranks (gloo)" in capsys.readouterr().out
    one = analyze(folder / "rank0.json")  # one rank of the job on its own
    assert any(n.startswith("a CPU rank (gloo)") for n in one.notes) and len(one.tables["steps (CPU)"]) == 4


def test_cpu_traces_that_are_not_gloo_ranks_still_need_the_cpu_flag(tmp_path):
    """An NCCL job profiled without CUDA activity has NCCL ranges and no GPU side: still the fix, not a report."""
    folder = _gloo_folder(tmp_path, {"gloo:all_reduce": "nccl:all_reduce"})
    with pytest.raises(TraceError, match="profiled without CUDA activity"):
        analyze(folder)
    plain = json.loads((folder / "rank0.json").read_text())
    plain["traceEvents"] = [e for e in plain["traceEvents"] if not e["name"].startswith(("nccl:", "c10d::"))]
    (tmp_path / "single.json").write_text(json.dumps(plain))
    assert not gloo_rank(load_trace(plain))
    with pytest.raises(TraceError, match="profiled without CUDA activity"):
        analyze(tmp_path / "single.json")



def test_cpu_ranks_whose_collectives_cannot_be_paired_keep_the_rest_of_the_report(tmp_path):
    """With --cpu, NCCL ranges on CPU-only ranks have no work to pair with their c10d calls: the per-step
    communication table is left out with the reason (a note), and the steps of every rank are still reported."""
    folder = _gloo_folder(tmp_path, {"gloo:all_reduce": "nccl:all_reduce"})
    rep = analyze(folder, cpu_ok=True)
    assert any(n.startswith("communication per step not computed:") and "c10d::allreduce_" in n for n in rep.notes)
    assert "per rank and step: communication, compute, exposed" not in rep.tables
    assert {"rank0.json: steps", "rank1.json: steps"} <= set(rep.tables)
    assert main([str(folder), "--cpu"]) == 0

# ---------------------------------------------------------------- 7. no torch on the way
def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "INFRALENS_MODE"}
    return subprocess.run([sys.executable, *args, "-c", code] if code else [sys.executable, *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_analyze_never_imports_torch():
    r = _python("import sys, infralens_lab.analyze as a\n"
                f"rc = a.main([{str(RECORDED)!r}])\n"
                "assert rc == 0, rc\n"
                "assert 'torch' not in sys.modules and 'triton' not in sys.modules, 'torch was imported'\n")
    assert r.returncode == 0, r.stderr[-2000:]
    r = _python("", "-X", "importtime", "-m", "infralens_lab", "analyze", str(RECORDED))
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
    assert "torch" not in imported and "infralens_lab.parse.trace" in imported


def test_the_kernels_package_still_decides_the_mode_before_its_kernels():
    r = _python("import os, infralens_lab.device as d\n"
                "assert d._decided.cache_info().currsize == 0, 'decided at the package import'\n"
                "import infralens_lab.kernels\n"
                "assert d._decided.cache_info().currsize == 1, 'the kernels package did not decide'\n"
                "assert (os.environ.get('TRITON_INTERPRET') == '1') == (d.mode() == 'interpreter')\n")
    assert r.returncode == 0, r.stderr[-2000:]
    forced = subprocess.run([sys.executable, "-c", "import os, sys, infralens_lab\n"
                             "assert os.environ.get('TRITON_INTERPRET') == '1' and 'torch' not in sys.modules"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={**os.environ, "INFRALENS_MODE": "interpreter"})
    assert forced.returncode == 0, forced.stderr[-2000:]
