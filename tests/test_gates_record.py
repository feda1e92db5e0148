"""The recorder's gates step (measure.gates_record) and the A/A timing helpers (measure.gates), on a CPU: the A/A
pair in fresh processes, ResNet-50's variants table, and a shared slowdown injected into an A/A run."""
from __future__ import annotations

import pytest
import torch

from infralens_lab.measure import gates
from infralens_lab.measure import gates_record as GR
from infralens_lab.parse.trace import Trace

TINY = dict(batch=2, seq=8, width=16)


def test_aa_pairs_in_fresh_processes():
    got = GR.aa_processes("cpu", TINY, processes=2, rounds=2, timeout_s=240)
    assert len(got) == 2 and got[0]["pid"] != got[1]["pid"]  # each its own process
    for p in got:
        assert len(p["a_ms"]) == len(p["b_ms"]) == 2 and min(p["a_ms"] + p["b_ms"]) > 0


def test_a_failing_child_names_its_error(monkeypatch):
    monkeypatch.setattr(GR, "_AA_CHILD", "raise SystemExit('boom in the child')")
    with pytest.raises(RuntimeError, match="boom in the child"):
        GR.aa_processes("cpu", TINY, processes=1, rounds=1)


def test_resnet_variants_dry_run_on_cpu():
    v = GR.resnet_variants(1, 32, torch.float32, "cpu", repeats=1, compile_mode=None)
    assert [r["variant"] for r in v["rows"]] == ["eager"] and v["memory_format"] == "channels_last"
    r = v["rows"][0]
    assert r["steps"] == 2 and r["kernels"] == [0, 0] and r["period_us"] is None  # a CPU trace has no GPU work


def test_variant_summary_counts_each_forward_by_the_attribution_rule():
    def X(name, cat, ts, dur, pid=1, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    ev = []
    for s in range(2):
        t0 = 100 * s
        ev += [X(f"ProfilerStep#{s}", "user_annotation", t0, 100),
               X("cudaLaunchKernel", "cuda_runtime", t0 + 1, 2, correlation=2 * s + 1),
               X("cudaLaunchKernel", "cuda_runtime", t0 + 4, 2, correlation=2 * s + 2),
               X("k", "kernel", t0 + 10, 20, pid=0, tid=7, correlation=2 * s + 1),
               X("k", "kernel", t0 + 40, 10, pid=0, tid=7, correlation=2 * s + 2)]
    ev.append(X("k", "kernel", 205, 5, pid=0, tid=7, correlation=999))  # a leftover no profiled step launched
    s = GR._variant_summary(Trace({"traceEvents": ev}))
    assert s["kernels"] == [2, 2] and s["launch_calls"] == [2, 2] and s["kernel_us"] == 30.0 and s["period_us"] == 100.0


def test_aa_timings_injects_a_shared_slowdown():
    calls = []
    t = gates.aa_timings(lambda: calls.append("a"), lambda: calls.append("b"), rounds=4, steps=2, slow_every=2, stall_ms=2.0)
    assert list(t["state"]) == ["as is", "as is", "slowed", "slowed"] and len(calls) == 2 * 2 * (4 + 1)
    slowed, quiet = t[t["state"] == "slowed"], t[t["state"] == "as is"]
    assert (slowed["a_ms"] >= 4.0).all() and (slowed["b_ms"] >= 4.0).all()  # two 2 ms stalls per timing, both sides
    assert (t["ratio"] == t["a_ms"] / t["b_ms"]).all() and len(quiet) == 2
    with pytest.raises(ValueError, match="positive"):
        gates.aa_timings(lambda: None, lambda: None, rounds=0)
    with pytest.raises(ValueError, match="stall"):
        gates.aa_timings(lambda: None, lambda: None, rounds=2, slow_every=1, stall_ms=0.0)


def test_regression_counts_on_this_machine():
    t = gates.regression_counts(device="cpu", **TINY).set_index("regression")
    assert list(t.index) == ["intended", "item", "noncontig", "lost_fusion", "fp32_matmul"]
    assert t.loc["item", "syncs_per_step"] == 1 and t.loc["lost_fusion", "graph_breaks"] == 1
    assert t.loc["noncontig", "peak_bytes"] > t.loc["intended", "peak_bytes"]
