"""torch_trace attribution: the array version of ``Trace._attribute`` (nesting by
:func:`enclosing_parent`, correlation ids by merges) against the row-by-row stack walk it replaced,
kept below as the reference, on the recorded GPU traces, the test fixtures, and random nested
and partly overlapping events on several threads. Equal means equal: same keys in the same
order, same lists, same floats."""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import helpers
import numpy as np
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import ddp_run, distributed
from infralens_lab.parse.ranks import recorded_run
from infralens_lab.parse.trace import CPU_CATS, GPU_CATS, RUNTIME_CATS, Trace, enclosing_parent, step_gpu_work, trim

ROOT = Path(__file__).resolve().parents[1]
RECORDED = sorted((ROOT / "data" / "recorded").glob("*/trace_*.json"))
RECORDED = [p for p in RECORDED if p.name in ("trace_bubble.json", "trace_fixed.json")]


def _id(correlation, from_flow):
    for v in (correlation, from_flow):
        if v is not None and v == v:  # NaN != NaN: pandas fills missing args with NaN
            return int(v)
    return None


def reference_attribute(tr: Trace) -> tuple[dict, dict, dict]:
    """The row loop ``Trace._attribute`` was until issue 12, verbatim but for returning its three
    dicts (``enclosing``, ``self_us``, ``launcher``) and reading the flows from ``tr.data``."""
    flows: dict = {}
    for e in tr.data["traceEvents"]:
        if e.get("cat") == "ac2g" and e.get("ph") in ("s", "f"):
            flows.setdefault(e.get("id"), {})[e["ph"]] = (e.get("pid"), e.get("tid"), round(float(e["ts"]), 3))
    ev = tr.events
    gpu = ev[ev["cat"].isin(GPU_CATS)]
    cpu = ev[ev["cat"].isin(CPU_CATS)].sort_values(["pid", "tid", "start_us", "end_us"], ascending=[True, True, True, False])
    runtime_by_corr: dict = {}
    flow_src = {v["s"]: k for k, v in flows.items() if "s" in v}
    enclosing: dict[int, list[int]] = {}
    self_us: dict[int, float] = {}
    stack: list[int] = []
    key = None
    for i, r in zip(cpu.index, cpu.itertuples(index=False), strict=True):
        if (r.pid, r.tid) != key:
            key, stack = (r.pid, r.tid), []
        while stack and ev.at[stack[-1], "end_us"] <= r.start_us:
            stack.pop()
        self_us[i] = r.dur
        if stack:
            self_us[stack[-1]] -= min(r.dur, ev.at[stack[-1], "end_us"] - r.start_us)
        if r.cat in RUNTIME_CATS:
            enclosing[i] = list(stack)
            corr = _id(r.correlation, flow_src.get((r.pid, r.tid, round(r.ts, 3))))
            if corr is not None:
                runtime_by_corr[corr] = i
        stack.append(i)
    flow_dst = {v["f"]: k for k, v in flows.items() if "f" in v}
    launcher = {}
    for i, r in zip(gpu.index, gpu.itertuples(index=False), strict=True):
        corr = _id(r.correlation, flow_dst.get((r.pid, r.tid, round(r.ts, 3))))
        if corr in runtime_by_corr:
            launcher[i] = runtime_by_corr[corr]
    return enclosing, self_us, launcher


def assert_same_attribution(tr: Trace) -> None:
    enclosing, self_us, launcher = reference_attribute(tr)
    for name, want, got in (("enclosing", enclosing, tr.enclosing), ("self_us", self_us, tr.self_us),
                            ("launcher", launcher, tr.launcher)):
        assert list(got) == list(want), f"{name}: keys or their order differ"
        bad = [k for k in want if got[k] != want[k]]  # exact: lists element by element, floats bit for bit
        assert not bad, f"{name}: {len(bad)} rows differ, first {bad[0]}: got {got[bad[0]]!r}, expected {want[bad[0]]!r}"


def recorded(path: Path) -> dict:
    return json.loads(path.read_text())["values"]


def test_the_recorded_traces_are_there():
    assert {p.parent.name for p in RECORDED} >= {"nvidia-h200", "nvidia-h100-80gb-hbm3"} and len(RECORDED) >= 4


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_same_as_the_row_loop_on_recorded_traces(path):
    tr = Trace(recorded(path))
    assert len(tr.launcher) > 500 and max(map(len, tr.enclosing.values())) >= 3  # a real, nested GPU trace
    assert_same_attribution(tr)


def test_same_as_the_row_loop_on_fixtures():
    from test_torch_trace import synthetic

    datas = [synthetic(), synthetic(flows=True), trim(synthetic(), max_depth=1),
             json.loads((ROOT / "tests" / "data" / "trace_bubble_excerpt.json").read_text()),
             {"traceEvents": []}, {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,
                                                    "ts": 1.0, "dur": 2.0}]}]
    for data in datas:
        assert_same_attribution(Trace(data))


def random_trace(seed: int) -> dict:
    """Nested ops and ranges on several threads of two processes, with ties, zero durations, partial
    overlaps, runtime calls launching GPU work by correlation arg or by ac2g flow (some missing,
    some ids reused), GPU events on two streams."""
    rng = random.Random(seed)
    ev, corr = [], 0
    for pid in (1, 2):
        for tid in rng.sample(range(1, 50), 3):
            t = rng.choice([0.0, 0.5, 1000.25])

            def block(t0, t1, depth, pid=pid, tid=tid):
                nonlocal corr
                t = t0
                while t < t1 and rng.random() < 0.8:
                    a = t + rng.choice([0.0, 0.0, 1.0, round(rng.uniform(0, 5), 3)])
                    b = min(t1, a + rng.choice([0.0, 1.0, round(rng.uniform(0, 30), 3)]))
                    if rng.random() < 0.1:  # partial overlap: runs past its parent's end
                        b = t1 + rng.choice([0.5, 3.0])
                    if depth < 5 and rng.random() < 0.5:
                        cat = rng.choice(["cpu_op", "cpu_op", "user_annotation"])
                        ev.append({"ph": "X", "cat": cat, "name": f"op{depth}", "pid": pid, "tid": tid, "ts": a, "dur": b - a, "args": {}})
                        block(a, b, depth + 1)
                    else:
                        corr += 1
                        c = corr if rng.random() < 0.9 else rng.randint(1, corr)  # some ids reused
                        how = rng.choice(["arg", "arg", "flow", "none"])
                        args = {"correlation": c} if how == "arg" else {}
                        ev.append({"ph": "X", "cat": rng.choice(RUNTIME_CATS), "name": "cudaLaunchKernel", "pid": pid,
                                   "tid": tid, "ts": a, "dur": b - a, "args": args})
                        g0 = b + rng.uniform(0, 20)
                        gargs = {"stream": 7 + c % 2} | ({"correlation": c} if how == "arg" else {})
                        ev.append({"ph": "X", "cat": rng.choice(GPU_CATS), "name": f"k{c % 5}", "pid": 0, "tid": 7 + c % 2,
                                   "ts": g0, "dur": rng.uniform(0, 50), "args": gargs})
                        if how == "flow":
                            ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": c, "pid": pid, "tid": tid, "ts": a})
                            ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": c, "pid": 0, "tid": 7 + c % 2,
                                       "ts": g0, "bp": "e"})
                    t = max(t, b if rng.random() < 0.7 else a)

            block(t, t + 500, 0)
    rng.shuffle(ev)
    return {"traceEvents": ev}


@pytest.mark.parametrize("seed", range(30))
def test_same_as_the_row_loop_on_random_nested_events(seed):
    tr = Trace(random_trace(seed))
    assert len(tr.events) > 5
    assert_same_attribution(tr)


def test_enclosing_parent_by_hand():
    # sorted by (thread, start, end desc): A[0,10] B[2,5] C[5,5] D[5,8] E[8,15] F[12,14] | G[0,4] on a new thread
    s = [0, 2, 5, 5, 8, 12, 0]
    e = [10, 5, 5, 8, 15, 14, 4]
    new = [True, False, False, False, False, False, True]
    # B in A; C at B's end: not in B; D in A; E starts at D's end, runs past A: in A; F: E is still open
    assert enclosing_parent(new, s, e).tolist() == [-1, 0, 0, 0, 0, 4, -1]
    assert enclosing_parent([], [], []).tolist() == []


def test_enclosing_parent_matches_a_stack_walk_on_long_random_input():
    rng = np.random.default_rng(0)
    n = 5000
    s = np.sort(rng.integers(0, 3000, n)).astype(float)
    e = s + rng.choice([0.0, 1.0, 5.0, 50.0, 400.0], n)
    new = rng.random(n) < 0.01
    new[0] = True
    order = np.lexsort((-e, s, np.cumsum(new)))  # within each group: start, then end descending
    s, e = s[order], e[order]
    want, stack = [], []
    for j in range(n):
        if new[j]:
            stack = []
        while stack and e[stack[-1]] <= s[j]:
            stack.pop()
        want.append(stack[-1] if stack else -1)
        stack.append(j)
    assert enclosing_parent(new, s, e).tolist() == want


def test_gap_tables_are_cached_and_summary_reuses_them(monkeypatch):
    from test_torch_trace import synthetic

    from infralens_lab.parse import trace

    calls = {"union": 0, "gaps": 0, "summary": 0}

    def counting(name, real):
        def f(*a, **k):
            calls[name] += 1
            return real(*a, **k)
        return f

    monkeypatch.setattr(trace, "union", counting("union", trace.union))
    monkeypatch.setattr(trace.Trace, "_idle_gaps", counting("gaps", trace.Trace._idle_gaps))
    monkeypatch.setattr(trace.Trace, "_summary", counting("summary", trace.Trace._summary))
    tr = Trace(synthetic())
    s1 = tr.summary()
    assert calls == {"union": 1 + 4, "gaps": 1, "summary": 1}  # busy once, causes up to each of 4 ranks once
    s1["idle_by_cause_us"]["sync"] = -1.0  # a caller editing its copy does not change the trace's
    assert tr.summary()["idle_by_cause_us"]["sync"] == 15
    tr.idle_gaps(), tr.busy(), tr.causes(), tr.summary(min_gap_us=50.0)
    assert calls == {"union": 5, "gaps": 1, "summary": 1}  # nothing recomputed for a threshold already asked for
    s40 = tr.summary(min_gap_us=40)
    assert calls == {"union": 5, "gaps": 2, "summary": 2}  # a new threshold: its gaps, from the cached intervals
    assert s40["idle_gaps"] == 4 and tr.idle_gaps(40)["gap_us"].tolist() == [45, 350, 60, 75]
    c = tr.causes()
    c.loc[:, "start_us"] = -1.0
    assert (tr.causes()["start_us"] >= 0).all()


def reference_names_in_gaps(ev, g0, g1):
    """``Trace._names_in_gaps`` as it was until issue 12: a loop over the gaps."""
    ev = ev[ev["cat"].isin(("user_annotation", "cpu_op"))].sort_values(
        ["rank", "start_us", "end_us", "name", "cat"], kind="stable")
    s, e = ev["start_us"].to_numpy(), ev["end_us"].to_numpy()
    ranges, ops = [], []
    for a, b in zip(g0, g1, strict=True):
        hit = (s < b) & (e > a)
        sub = ev[hit].assign(overlap=np.minimum(e[hit], b) - np.maximum(s[hit], a))
        names = {}
        for cat in ("user_annotation", "cpu_op"):
            per = sub[sub["cat"] == cat].groupby("name", sort=False)["overlap"].sum()
            names[cat] = sorted(per.index, key=per.get, reverse=True)
        ranges.append(", ".join(names["user_annotation"]))
        ops.append(", ".join(names["cpu_op"][:3]))
    return ranges, ops


def assert_same_gap_names(tr: Trace, thresholds=(0.0, 1.0, 10.0, 50.0)) -> int:
    n = 0
    for th in thresholds:
        gaps = tr.idle_gaps(th)
        if gaps.empty:
            continue
        g0, g1 = gaps["start_us"].to_numpy(), gaps["end_us"].to_numpy()
        want = reference_names_in_gaps(tr.causes(), g0, g1)
        assert (gaps["ranges"].tolist(), gaps["ops"].tolist()) == want, f"gap names differ at min_gap_us={th}"
        n += len(gaps)
    # gaps where nothing overlaps, and none at all
    assert Trace._names_in_gaps(tr.causes(), np.array([-10.0]), np.array([-5.0])) == ([""], [""])
    assert Trace._names_in_gaps(tr.causes(), np.empty(0), np.empty(0)) == ([], [])
    return n


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_gap_names_same_as_the_loop_on_recorded_traces(path):
    assert assert_same_gap_names(Trace(recorded(path)), thresholds=(0.0, 50.0)) > 500  # every hole, and the default


def test_gap_names_same_as_the_loop_on_random_and_fixture_traces():
    from test_torch_trace import synthetic

    n = assert_same_gap_names(Trace(synthetic()))
    for seed in range(20):
        n += assert_same_gap_names(Trace(random_trace(seed)))
    assert n > 100


def test_trim_drops_the_flows_only_where_the_args_carry_every_correlation():
    """On recorded traces (every launch and GPU event has its correlation arg) the ac2g flows are dropped and every
    reading the labs make is unchanged; a trace whose runtime calls lack the arg keeps its flows. Sets recorded
    since the recorder trims (the H100 set of 2026-11-25 21:02) carry no flows: for those, trimming again changes
    nothing and every GPU event and runtime call has the arg the join reads."""
    helpers.recorded_set("trace_fixed", "trace_bubble")
    with_flows = trimmed = 0
    for st in evidence.load_all_sets():
        for name in ("trace_fixed", "trace_bubble"):
            if name not in st.names():
                continue
            data = st.load(name).values
            if not any(e.get("cat") == "ac2g" for e in data["traceEvents"]):
                trimmed += 1
                joined = [e for e in data["traceEvents"] if e.get("cat") in GPU_CATS + RUNTIME_CATS]
                assert joined and all("correlation" in e.get("args", {}) for e in joined), (st.folder, name)
                assert trim(data)["traceEvents"] == data["traceEvents"], (st.folder, name)
                continue
            with_flows += 1
            slim = trim(data)
            assert not any(e.get("cat") == "ac2g" for e in slim["traceEvents"])
            a, b = Trace(data), Trace(slim)
            assert a.gpu_step().equals(b.gpu_step())
            assert step_gpu_work(a).equals(step_gpu_work(b))
            assert a.kernels(scope="all").equals(b.kernels(scope="all")) and a.summary() == b.summary()
            bare = copy.deepcopy(data)
            for e in bare["traceEvents"]:
                if e.get("cat") == "cuda_runtime":
                    e.get("args", {}).pop("correlation", None)
            kept = trim(bare)
            assert any(e.get("cat") == "ac2g" for e in kept["traceEvents"])
            assert Trace(kept).gpu_step().equals(a.gpu_step())  # the flows still join launches to kernels
    assert with_flows + trimmed >= 2
    run = recorded_run()
    if run is not None:  # the DDP tables read the same from slimmed traces
        label = ddp_run.SCALING_CONFIG
        full = [tr.data for tr in run.traces(label)]
        assert distributed.overlap_table([Trace(d) for d in full]).equals(distributed.overlap_table([Trace(trim(d)) for d in full]))
