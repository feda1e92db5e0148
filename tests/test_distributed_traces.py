"""Per-rank gloo traces made by the package's own DDP measurement (tests/data/ddp_gloo_run.json, see its README):
parsed through torch_trace, counted and checked against the raw JSON independently."""
import json
from pathlib import Path

import pytest

from infralens_lab.analysis import distributed as A
from infralens_lab.parse.trace import load_trace

RUN = json.loads((Path(__file__).parent / "data" / "ddp_gloo_run.json").read_text())
# read off the file once: DDP's rebuilt buckets per config, all-reduces per profiled step
EXPECTED = {"cap 0.25 MiB": (4, [263168] * 4), "cap 25 MiB": (1, [1052672]), "cap 25 MiB, bucket view": (1, [1052672]),
            "mystery": (8, [16640] * 8), "reference": (1, [133120])}


def _traces(label):
    return [load_trace(next(c for c in r["configs"] if c["label"] == label)["trace"]) for r in RUN]


def _raw_comm(trace_dict):
    """Independent of the package: gloo all-reduce (ts, end) pairs inside ProfilerStep windows, straight from JSON."""
    ev = trace_dict["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name", "").startswith("ProfilerStep")]
    comm = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name") == "gloo:all_reduce")
    return steps, comm


def test_the_run_is_two_gloo_ranks():
    assert [r["rank"] for r in RUN] == [0, 1]
    assert {r["backend"] for r in RUN} == {"gloo"} and {r["world"] for r in RUN} == {2}


@pytest.mark.parametrize("label", sorted(EXPECTED))
def test_allreduce_calls_match_ddp_buckets(label):
    calls, buckets = EXPECTED[label]
    for r in RUN:
        cfg = next(c for c in r["configs"] if c["label"] == label)
        assert cfg["bucket_bytes"] == buckets
    t = A.overlap_table(_traces(label))
    assert len(t) == 4  # 2 ranks x 2 profiled steps
    assert set(t["allreduce_calls"]) == {calls}
    for r in RUN:
        steps, comm = _raw_comm(next(c for c in r["configs"] if c["label"] == label)["trace"])
        assert len(steps) == 2
        assert [sum(a <= s < b for s, _ in comm) for a, b in steps] == [calls, calls]


def test_comm_time_matches_raw_union():
    trs = _traces("cap 0.25 MiB")
    t = A.overlap_table(trs)
    for rank, r in enumerate(RUN):
        steps, comm = _raw_comm(r["configs"][0]["trace"])
        for i, (a, b) in enumerate(steps):
            mine = [(s, e) for s, e in comm if a <= s < b]
            union, end = 0.0, -1.0
            for s, e in mine:  # sorted by start: a plain sweep
                if s > end:
                    union += e - s
                    end = e
                elif e > end:
                    union += e - end
                    end = e
            got = t[(t["rank"] == rank) & (t["step"] == i)]["comm_us"].iloc[0]
            assert got == pytest.approx(union, abs=1e-3)  # timestamps were rounded to 1 ns by trim


def test_fractions_are_fractions_and_hta_counts_at_least_backward():
    for label in EXPECTED:
        t = A.overlap_table(_traces(label))
        assert t["hidden_fraction"].between(0, 1).all()
        assert (t["hta_overlap"] >= t["hidden_fraction"] - 1e-9).all()  # 'all compute' contains backward
        assert (t["exposed_us"] <= t["comm_us"] + 1e-9).all()


def test_ranks_share_one_host_clock():
    al = A.align(_traces("cap 0.25 MiB"))
    assert len(al) == 8
    assert al.attrs["violations"] == 0  # no collective ends on one rank before the other started it


def test_no_sync_sends_once_per_optimizer_step():
    accum = RUN[0]["no_sync"]["accum"]
    plain = A.overlap_table([load_trace(r["no_sync"]["plain"]["trace"]) for r in RUN])
    nosync = A.overlap_table([load_trace(r["no_sync"]["no_sync"]["trace"]) for r in RUN])
    assert set(plain["allreduce_calls"]) == {accum * 4}
    assert set(nosync["allreduce_calls"]) == {4}


def test_bucket_view_puts_grads_in_buckets():
    by = {c["label"]: c for c in RUN[0]["configs"]}
    assert by["cap 25 MiB"]["grad_storages"] == by["cap 25 MiB"]["param_tensors"] == 8
    assert by["cap 25 MiB, bucket view"]["grad_storages"] == 1
