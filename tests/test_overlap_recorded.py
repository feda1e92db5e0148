"""analysis.overlap on real recorded GPU traces (lab 01's trace_bubble/trace_fixed, recorded on an H200)
and glue on the lab 05 records captured on an H200 during development (tests/data/lab05_h200_*.json:
written by `python -m infralens_lab record --only device,overlap` on the lent H200, torch 2.11; the
provenance block inside each file says so). Expected numbers are recomputed here by independent means."""
import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import overlap, overlap_tables
from infralens_lab.parse.trace import load_trace, step_gpu_work

DATA = Path(__file__).parent / "data"


def _ref_trace(name):
    try:
        st = evidence.reference()
    except evidence.EvidenceError as exc:
        pytest.skip(f"no recorded set: {exc}")
    if name not in st.names():
        pytest.skip(f"recorded set has no {name}")
    return load_trace(st.load(name))


def _record(name):
    d = json.loads((DATA / f"lab05_h200_{name}.json").read_text())
    assert d["provenance"]["gpu"] == "NVIDIA H200" and d["provenance"]["source"] == "recorded"
    return SimpleNamespace(values=d["values"], name=name)


def _sweep_hidden(copies, kernels):
    """Independent check: walk the sorted boundary points and add up copy time with a kernel running."""
    pts = sorted({p for iv in copies + kernels for p in iv})
    hidden = 0.0
    for a, b in itertools.pairwise(pts):
        mid = (a + b) / 2
        if any(s <= mid < e for s, e in copies) and any(s <= mid < e for s, e in kernels):
            hidden += b - a
    return hidden


@pytest.mark.parametrize("name", ["trace_bubble", "trace_fixed"])
def test_copy_overlap_on_recorded_trace(name):
    tr = _ref_trace(name)
    ev = tr.events
    # the copies the profiled steps launched, found the plain way: the launch call with the copy's correlation id
    # lies inside a ProfilerStep range
    steps = ev[(ev["cat"] == "user_annotation") & ev["name"].str.startswith("ProfilerStep")]
    calls = ev[ev["cat"].isin(("cuda_runtime", "cuda_driver")) & ev["correlation"].notna()]
    launched = {c for c, t in zip(calls["correlation"], calls["start_us"], strict=True)
                if ((steps["start_us"] <= t) & (t < steps["end_us"])).any()}
    cp = ev[(ev["cat"] == "gpu_memcpy") & ev["name"].str.contains("HtoD") & ev["correlation"].isin(launched)]
    k = ev[ev["cat"] == "kernel"]
    copies = list(zip(cp["start_us"], cp["end_us"], strict=True))
    kernels = list(zip(k["start_us"], k["end_us"], strict=True))
    c = overlap.copy_overlap(tr)
    assert c["copies"] == len(cp) > 0 and c["steps"] == len(steps) == 3
    assert c["copy_us"] == pytest.approx(sum(e - s for s, e in copies))
    assert c["hidden_us"] == pytest.approx(_sweep_hidden(copies, kernels), abs=1e-6)
    # lab 01's steps copy on the compute stream (pageable, or pinned + non_blocking): nothing is hidden
    assert c["fraction"] == pytest.approx(0.0)


@pytest.mark.parametrize("name", ["trace_bubble", "trace_fixed"])
def test_launches_per_step_on_recorded_trace(name):
    tr = _ref_trace(name)
    t = overlap.launches_per_step(tr)
    w = step_gpu_work(tr)
    ev = tr.events
    assert list(t["step"]) == list(w["step"])
    for row, st in zip(t.itertuples(), w.itertuples(), strict=True):
        calls = ev[ev["name"].isin(overlap.LAUNCH_CALLS) & (ev["start_us"] >= st.cpu_start_us) & (ev["start_us"] < st.cpu_end_us)]
        assert row.launch_calls == len(calls) > 100  # a TinyGPT training step: hundreds of kernels
        # every GPU op the step launched (kernels, memcpys, memsets): the same count as lab 01's, one rule,
        # found here the plain way from the launch calls' correlation ids
        rt = ev[ev["cat"].isin(("cuda_runtime", "cuda_driver"))]
        mine = {c for c, t in zip(rt["correlation"], rt["start_us"], strict=True) if c == c and st.cpu_start_us <= t < st.cpu_end_us}
        gpu = ev[ev["cat"].isin(("kernel", "gpu_memcpy", "gpu_memset"))]
        assert row.gpu_events == st.gpu_ops == int(gpu["correlation"].isin(mine).sum())
        assert row.gpu_busy_us <= st.gpu_work_us + 1e-6  # union of intervals never exceeds their sum


def test_fusion_table_on_h200_record():
    t = overlap_tables.fusion_table(_record("fusion").values).set_index("variant")
    v = _record("fusion").values
    eager_bytes = 2 * 8 * v["numel"] * 4  # 8 ops, each reading and writing every fp32 element
    assert t.loc["eager", "model_mb"] == pytest.approx(eager_bytes / 1e6)
    assert t.loc["compiled", "model_mb"] == pytest.approx(eager_bytes / 8 / 1e6)
    ms = {r["variant"]: r["median_ms"] for r in v["rows"]}
    assert t.loc["eager", "implied_tb_per_s"] == pytest.approx(eager_bytes / (ms["eager"] * 1e-3) / 1e12)
    assert t["kernels_per_call"].isna().all()  # no traces passed: counts are unknown, not invented


def test_compile_tables_on_h200_record():
    v = _record("compile_study").values
    counts = overlap_tables.compile_counts(v).set_index("variant")
    assert counts.loc["compiled_breaks", "graph_calls_per_forward"] == v["blocks"]  # one graph per block
    assert counts.loc["compiled", "graph_calls_per_forward"] == 1
    assert counts.loc["eager", "graphs_compiled"] == 0
    times = overlap_tables.compile_times(v).set_index("variant")
    assert times.loc["eager", "vs_eager"] == 1.0
    med = {r["variant"]: r["median_ms"] for r in v["rows"]}
    assert times.loc["compiled_breaks", "vs_eager"] == pytest.approx(med["compiled_breaks"] / med["eager"])
    assert (times["first_ms"] > times["median_ms"]).all()  # the first call pays warm-up (and compile)


def test_graph_limits_record_names_the_errors():
    v = _record("graph_limits").values
    assert "capture" in v["host_sync_in_capture"]
    assert "size of tensor" in v["new_shape"]


def test_launch_table_joins_trace_counts():
    ev = _record("launch_overhead")
    tr = load_trace(str(DATA / "trace_bubble_excerpt.json"))  # any real trace with ProfilerSteps stands in
    t = overlap_tables.launch_table(ev.values, {"eager": tr}).set_index("variant")
    s = overlap.launches_per_step(tr)
    assert t.loc["eager", "launch_calls"] == s["launch_calls"].mean()
    assert pd.isna(t.loc["graph", "launch_calls"])  # no trace given for it
    # one basis: the busy share divides the trace's busy time by the same trace's period, never the unprofiled step_ms
    assert t.loc["eager", "gpu_busy_pct"] == pytest.approx(100 * s["gpu_busy_us"].mean() / 1e3 / t.loc["eager", "period_ms"])


def test_engines_and_compiled_regions_on_the_recorded_traces():
    """The copy step's engines add up (either engine busy is at most copy + kernels, at least the larger), and the
    compiled BlockNet with a break per block runs one compiled graph per block, one distinct graph."""
    for mode in ("pageable", "pinned", "double_buffered"):
        e = overlap.engine_busy(_ref_trace(f"trace_copy_{mode}"))
        assert max(e["copy_us"], e["kernel_us"]) - 1e-6 <= e["any_us"] <= e["copy_us"] + e["kernel_us"] + 1e-6
        assert e["any_us"] <= e["period_us"] + 1e-6
    st = evidence.reference()
    blocks = st.load("compile_study").values["blocks"]
    r = overlap.compiled_regions(_ref_trace("trace_compile_breaks"))
    assert (r["regions"] == blocks).all() and (r["distinct"] == 1).all()
    assert (overlap.compiled_regions(_ref_trace("trace_compile_whole"))["regions"] == 1).all()
