"""Lab 06's function exercises (issue 38): busbw of a benchmark table's largest all-reduce (ex1) and the exposed-
communication share of per-rank steps (ex3), each checked on the lab's recorded NCCL run, the other recorded sets
(held out: two H200 and four H200) and perturbed copies of the lab's own evidence.

Per exercise: the reference passes every case and equals the lab's own analysis on the recorded data; a typed constant
fails; a half-right function (the ring factor left out, the last row for the largest, overlapping kernels subtracted
one by one, a mean of per-step shares, backward for all compute) fails, and the feedback names the case that shows it.
Also: ex2's answer is not printed above ex2 in gpu mode (the bucket tables come after it), and the per-rank traces
are exported as one chrome-trace file whose rows and times are the recorded ones."""
from __future__ import annotations

import json
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import ROOT

from infralens_lab.analysis import ddp_run
from infralens_lab.analysis.buckets import bucket_count
from infralens_lab.analysis.distributed import exposed_share
from infralens_lab.analysis.intervals import length, subtract, union
from infralens_lab.labs_support import lab06
from infralens_lab.measure.distributed import GPU_MODEL
from infralens_lab.parse.ranks import PID_STRIDE, export_ranks_chrome_trace, ranks_chrome_trace
from infralens_lab.parse.trace import load_trace
from infralens_lab.quiz import check, question
from infralens_lab.quiz import functions as fx
from infralens_lab.quiz.cells import TAG_EXERCISE, _qid, _tags, reveals
from infralens_lab.quiz.check import GRADE_ENV
from infralens_lab.quiz.keys import lab06 as keys

LAB = ROOT / "labs" / "06_distributed_ddp.ipynb"


@pytest.fixture(autouse=True)
def learner(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)


@pytest.fixture(scope="module")
def expected():
    """``{qid: [(case, right value)]}`` for ex1 and ex3, built once (the cases load every recorded NCCL set)."""
    got = {qid: fx.reference_values(question(qid)) for qid in ("lab06.ex1", "lab06.ex3")}
    if any(v is None for v in got.values()):
        pytest.skip("no recorded NCCL run in this checkout")
    return got


def _first_failed(r) -> str:
    assert r.status == "wrong", r.message
    return r.message.splitlines()[0]


# ---------------------------------------------------------------- both exercises
@pytest.mark.parametrize("qid", ["lab06.ex1", "lab06.ex3"])
def test_function_exercise_with_held_out_sets_and_perturbed_copies(qid, expected):
    q = question(qid)
    cases = expected[qid]
    assert q.kind == "function" and q.points == 2
    names = [c.name for c, _ in cases]
    assert not cases[0][0].held_out and "(this lab)" in names[0]
    assert {"2x-nvidia-h200", "4x-nvidia-h200"} <= {n.split(", ")[1].split(" (")[0] for n in names if "(held out)" in n
                                                      and n.startswith(("all-reduce benchmark, ", "steady steps, "))}
    assert sum("(perturbed, held out)" in n for n in names) >= 4
    # the reference itself is the grader's key: refused (its values on every case: test_quiz_functions' generic test)
    assert "called the grader's key" in check(qid, fx.load(q.reference, "reference")).message
    for c, v in cases[:3]:  # a typed constant, the right value of a recorded case, fails on another case, named
        said = _first_failed(check(qid, lambda *a, _v=v: _v))
        assert c.name not in said and any(d.name in said for d, _ in cases)
    assert "asks for a function" in check(qid, cases[0][1]).message


# ---------------------------------------------------------------- ex1: busbw of the largest all-reduce
def _busbw(bench):
    row = bench.loc[bench["bytes"].idxmax()]
    n = bench.attrs["ranks"]
    return row["bytes"] / row["seconds"] / 1e9 * 2 * (n - 1) / n


def test_ex1_reference_is_the_labs_busbw_on_every_recorded_set(expected):
    """The right value of each recorded case is the busbw the lab's tables show (ddp_run.bench's largest row, and
    ring_table's column), and the perturbed copies scale by the ring factor they claim."""
    got = {c.name: v for c, v in expected["lab06.ex1"]}
    ring = ddp_run.ring_table(list(keys._runs())).set_index("set")
    for name, run in keys._runs():
        case = next(k for k in got if k.startswith(f"all-reduce benchmark, {name} ("))
        full = ddp_run.bench(run)
        assert got[case] == pytest.approx(full.loc[full["bytes"].idxmax(), "busbw_GBps"], rel=1e-12)
        assert got[case] == pytest.approx(ring.loc[name, "busbw_GBps"], rel=1e-12)
    own = expected["lab06.ex1"][0][1]
    n0 = keys._runs()[0][1].world
    for n in (4, 8):
        v = next(v for k, v in got.items() if k.endswith(f"read as {n} ranks (perturbed, held out)"))
        assert v == pytest.approx(own / (2 * (n0 - 1) / n0) * 2 * (n - 1) / n, rel=1e-12)
    assert check("lab06.ex1", _busbw).status == "correct"


@pytest.mark.parametrize("fn, case", [
    (lambda b: b.loc[b["bytes"].idxmax(), "bytes"] / b.loc[b["bytes"].idxmax(), "seconds"] / 1e9,
     "all-reduce benchmark, 4x-nvidia-h200 (held out)"),                        # the ring factor left out
    (lambda b: b["bytes"].iloc[-1] / b["seconds"].iloc[-1] / 1e9 * 2 * (b.attrs["ranks"] - 1) / b.attrs["ranks"],
     "rows shuffled"),                                                           # the last row taken as the largest
    (lambda b: (b["bytes"] / b["seconds"] / 1e9 * 2 * (b.attrs["ranks"] - 1) / b.attrs["ranks"]).max(),
     "largest all-reduce 4x slower"),                                            # the fastest row, not the largest
])
def test_ex1_a_half_right_function_fails_on_the_case_that_shows_it(fn, case, expected):
    assert case in _first_failed(check("lab06.ex1", fn))


def test_ex1_slips_read_as_slips(expected):
    gib = check("lab06.ex1", lambda b: _busbw(b) * 1e9 / 2**30)  # GiB/s for GB/s: 7 % low on the lab's own case
    assert "(this lab)' (case 1 of" in gib.message and "Too low" in gib.message
    ms = check("lab06.ex1", lambda b: _busbw(b) / 1e3)  # seconds read as ms
    assert ms.status == "wrong" and "(this lab)' (case 1 of" in ms.message


# ---------------------------------------------------------------- ex3: exposed communication from intervals
def _naive(iv):
    """Half right: each compute kernel's overlap with the merged all-reduces subtracted one by one."""
    exposed = 0.0
    for s in (s for r in iv for s in r):
        comm = union(s["comm"])
        exposed += length(comm) - sum(length(comm) - length(subtract(comm, [k])) for k in s["compute"])
    return exposed / sum(s["window"][1] - s["window"][0] for r in iv for s in r)


def _mean_of_shares(iv):
    f = [length(subtract(union(s["comm"]), s["compute"])) / (s["window"][1] - s["window"][0]) for r in iv for s in r]
    return sum(f) / len(f)


def _backward_only(iv):
    exposed = sum(length(subtract(union(s["comm"]), s["backward"])) for r in iv for s in r)
    return exposed / sum(s["window"][1] - s["window"][0] for r in iv for s in r)


def _right(iv):
    exposed = sum(length(subtract(union(s["comm"]), s["compute"])) for r in iv for s in r)
    return exposed / sum(s["window"][1] - s["window"][0] for r in iv for s in r)


@pytest.mark.parametrize("fn, case", [
    (_naive, "compute as overlapping kernels (perturbed, held out)"),
    (_mean_of_shares, "twice as long, idle tail (perturbed, held out)"),
    (_backward_only, "every all-reduce under compute (perturbed, held out)"),
    (lambda iv: _right([iv[0]]), "(this lab)' (case 1 of"),                  # rank 0 only
])
def test_ex3_a_half_right_function_fails_on_the_case_that_shows_it(fn, case, expected):
    assert case in _first_failed(check("lab06.ex3", fn))


def test_ex3_reference_is_the_scaling_tables_f_and_the_perturbed_cases_hold_their_invariants(expected):
    cases = expected["lab06.ex3"]
    own = cases[0][1]
    run = keys._runs()[0][1]
    scale = ddp_run.scaling_table(run).set_index("basis")
    assert own == pytest.approx(scale.loc["profiled", "exposed_fraction"], rel=1e-9)  # the f the bound uses
    assert check("lab06.ex3", _right).status == "correct"
    got = {c.name: (c, v) for c, v in cases}
    pick = {k: next(v for n, v in got.items() if k in n) for k in
            ("every all-reduce under compute", "no compute at all", "intervals shuffled", "overlapping kernels")}
    assert pick["every all-reduce under compute"][1] == 0
    assert pick["intervals shuffled"][1] == pytest.approx(own, abs=1e-12)
    assert pick["overlapping kernels"][1] == pytest.approx(own, abs=1e-12)
    c, v = pick["no compute at all"]
    (iv,) = c.args
    comm = sum(length(union(s["comm"])) for r in iv for s in r)
    assert v == pytest.approx(comm / sum(s["window"][1] - s["window"][0] for r in iv for s in r), rel=1e-12)
    for c, v in cases:  # a part never exceeds its whole: 0 <= exposed share <= 1
        assert 0 <= v <= 1, c.name
    percent = check("lab06.ex3", lambda iv: 100 * _right(iv))
    assert percent.status == "wrong" and "looks like a percent" in percent.message


def test_exposed_share_matches_a_brute_force_count_on_random_intervals():
    """Fresh random steps with overlapping, unsorted all-reduces and compute: the reference against a 1-µs grid."""
    rng = np.random.default_rng()
    iv = []
    for _ in range(int(rng.integers(1, 4))):
        steps = []
        for _ in range(int(rng.integers(1, 4))):
            a = float(rng.integers(0, 50))
            b = a + float(rng.integers(200, 400))

            def pairs(k, a=a, b=b):
                s = rng.integers(int(a) - 20, int(b), size=k)
                return [(float(x), float(x + rng.integers(1, 60))) for x in s]
            steps.append({"window": (a, b), "comm": [(max(x, a), min(y, b)) for x, y in pairs(9) if y > a and x < b],
                          "compute": pairs(12)})
        iv.append(steps)
    exposed = total = 0
    for s in (s for r in iv for s in r):
        t = np.arange(s["window"][0], s["window"][1]) + 0.5
        on = lambda ps, t=t: np.any([(t > x) & (t < y) for x, y in ps] or [np.zeros_like(t, bool)], axis=0)  # noqa: E731
        exposed += int((on(s["comm"]) & ~on(s["compute"])).sum())
        total += len(t)
    assert exposed_share(iv) == pytest.approx(exposed / total, abs=1e-12)


# ---------------------------------------------------------------- item 2: ex2's answer is not printed above it
def _cells():
    return json.loads(LAB.read_text())["cells"]


def test_gpu_mode_text_above_ex2_does_not_give_its_answer(expected):
    """In gpu mode `run` is the GPU-sized model, so the bucket tables (``sweep_counts``, ``bucket_table``) hold ex2's
    answer (DDP's buckets at 100 MiB): they sit below ex2's exercise cell and say so (``reveals``). What the cells above
    print about the gradients (``lab06.gradient_summary``), on the recorded NCCL run that stands in for gpu mode's,
    gives the sizes, not the count."""
    cells = _cells()
    ex2 = next(i for i, c in enumerate(cells) if TAG_EXERCISE in _tags(c) and _qid(c) == "lab06.ex2")
    shows = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
             and any(k in "".join(c["source"]) for k in ("present.show(counts", "bucket_table(run)"))]
    assert shows and all(i > ex2 and "lab06.ex2" in reveals(cells[i]) for i in shows), (ex2, shows)
    rec = keys._runs()[0][1]
    plan = ddp_run.plan_inputs(GPU_MODEL, keys.EX2_CAP_MB)
    c1 = rec.config("cap 1 MiB")
    answer = bucket_count(plan["grad_bytes_ready_order"], plan["bucket_cap_mb"])
    said = lab06.gradient_summary(c1)
    assert f"{answer} bucket" not in said and "bucket" not in said.lower()
    assert f"{len(c1['param_bytes'])} gradient tensors" in said
    if c1["model"] == asdict(GPU_MODEL):  # a set recorded with ex2's model: its tables below ex2 hold the answer
        assert ddp_run.ready_order_bytes(c1) == plan["grad_bytes_ready_order"]
        leak = f"cap {keys.EX2_CAP_MB} MiB"  # DDP's own buckets there: the tables below ex2 show this count
        assert len(rec.config(leak)["bucket_bytes"]) == answer and rec.config(leak)["bucket_cap_mb"] == keys.EX2_CAP_MB
    else:  # a set recorded before the model changed (16 x Linear(4096)): a different model, a different count
        assert ddp_run.ready_order_bytes(c1) != plan["grad_bytes_ready_order"]
    above = "".join("".join(c["source"]) for c in cells[:ex2] if c["cell_type"] == "code")
    assert "sweep_counts(run)" in above and "present.show(counts" not in above  # computed above, shown below


# ---------------------------------------------------------------- item 3: the per-rank traces, for Perfetto
def test_ranks_chrome_trace_keeps_every_event_and_names_the_rows(tmp_path, expected):
    run = keys._runs()[0][1]
    traces = run.traces("straggler")
    doc = ranks_chrome_trace(traces)
    ev = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    assert len(ev) == sum(len(t.data["traceEvents"]) for t in traces)
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    names = {e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert {f"rank {r} · GPU {r}" for r in range(run.world)} <= names
    threads = [e["args"]["name"] for e in meta if e["name"] == "thread_name"]
    assert sum("(NCCL)" in t for t in threads) == run.world and sum("(compute)" in t for t in threads) >= run.world
    for r, t in enumerate(traces):  # each rank's events keep their times, in their own pid range
        mine = [e for e in ev if (r + 1) * PID_STRIDE <= e["pid"] < (r + 2) * PID_STRIDE]
        assert sorted(e["ts"] for e in mine) == sorted(e["ts"] for e in t.data["traceEvents"])
    back = load_trace(json.loads(export_ranks_chrome_trace(traces, tmp_path / "ranks.json").read_text()))
    nccl = back.events[(back.events["cat"] == "kernel") & back.events["name"].str.contains("nccl", case=False)]
    assert nccl["pid"].nunique() == run.world  # one NCCL row per rank, on one clock


def test_ranks_chrome_trace_refuses_bad_input():
    with pytest.raises(ValueError, match="at least one rank; got none"):
        ranks_chrome_trace([])
    with pytest.raises(ValueError, match="rank 0's trace has no traceEvents"):
        ranks_chrome_trace([SimpleNamespace(data={"traceEvents": []})])
