"""Per-rank gloo traces made by the package's own DDP measurement (tests/data/ddp_gloo_run.json, see its README and
tests/data/refresh_ddp.py): parsed through parse.trace, counted and checked against the raw JSON independently."""
import json
from pathlib import Path

import pytest

from infralens_lab.analysis import distributed
from infralens_lab.parse.ranks import recorded_run
from infralens_lab.parse.trace import load_trace

RUN = json.loads((Path(__file__).parent / "data" / "ddp_gloo_run.json").read_text())
LAYER = 4 * (256 * 256 + 256)  # one Linear(256, 256) of fp32 gradients
# DDP's rebuilt buckets per config, from the bucket rule by hand: whole layers (bias, weight), caps as named
EXPECTED = {"cap 0.25 MiB": [LAYER] * 8, "cap 25 MiB": [8 * LAYER], "default cap": [4 * LAYER, 4 * LAYER],
            "cap 25 MiB, bucket view": [8 * LAYER], "straggler": [LAYER] * 8,
            "mystery": [4 * (64 * 64 + 64)] * 8, "reference": [8 * 4 * (64 * 64 + 64)]}


def _cfg(r, label):
    return next(c for c in r["configs"] if c["label"] == label)


def _traces(label):
    return [load_trace(_cfg(r, label)["trace"]) for r in RUN]


def _raw(trace_dict):
    """Independent of the package: ProfilerStep windows, c10d::allreduce_ call starts and gloo ranges, from JSON."""
    ev = trace_dict["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name", "").startswith("ProfilerStep"))
    calls = sorted(e["ts"] for e in ev if e.get("name") == "c10d::allreduce_")
    comm = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name") == "gloo:all_reduce")
    return steps, calls, comm


def test_the_run_is_two_gloo_ranks():
    assert [r["rank"] for r in RUN] == [0, 1]
    assert {r["backend"] for r in RUN} == {"gloo"} and {r["world"] for r in RUN} == {2}


@pytest.mark.parametrize("label", sorted(EXPECTED))
def test_allreduce_calls_match_ddp_buckets(label):
    buckets = EXPECTED[label]
    for r in RUN:
        assert _cfg(r, label)["bucket_bytes"] == buckets
    t = distributed.overlap_table(_traces(label))
    assert len(t) == 2 * 4  # 2 ranks x 4 profiled steps
    assert set(t["allreduce_calls"]) == {len(buckets)}
    assert distributed.invariant_violations(t, buckets=len(buckets)) == []
    for r in RUN:  # the raw count: c10d calls (the enqueuing side) inside each step's CPU range
        steps, calls, _ = _raw(_cfg(r, label)["trace"])
        assert [sum(a <= c < b for c in calls) for a, b in steps] == [len(buckets)] * 4


def test_comm_time_is_the_raw_union_clipped_to_the_step():
    trs = _traces("cap 0.25 MiB")
    t = distributed.overlap_table(trs)
    for rank, r in enumerate(RUN):
        steps, calls, comm = _raw(_cfg(r, "cap 0.25 MiB")["trace"])
        comm = comm[len(comm) - len(calls):]  # ranges of work enqueued before the profiler have no call
        per_step = [[iv for c, iv in zip(calls, comm, strict=True) if a <= c < b] for a, b in steps]
        for i, ((a, b), mine) in enumerate(zip(steps, per_step, strict=True)):
            union, end = 0.0, -1.0
            for s, e in sorted((max(s, a), min(e, b)) for s, e in mine):  # clipped, then a plain sweep
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
        t = distributed.overlap_table(_traces(label))
        assert t["hidden_fraction"].between(0, 1).all()
        assert (t["hta_overlap"] >= t["hidden_fraction"] - 1e-9).all()  # 'all compute' contains backward
        assert (t["exposed_us"] <= t["comm_us"] + 1e-9).all()


def test_ranks_share_one_host_clock():
    al = distributed.align(_traces("cap 0.25 MiB"))
    assert len(al) == 2 * 4 * 8 and al.attrs["violations"] == 0  # no collective ends before the other rank entered it
    assert (al.groupby(["step", "seq"])["wait_us"].min() == 0).all()


def test_no_sync_sends_once_per_optimizer_step():
    accum = RUN[0]["no_sync"]["accum"]
    plain = distributed.overlap_table([load_trace(r["no_sync"]["plain"]["trace"]) for r in RUN])
    nosync = distributed.overlap_table([load_trace(r["no_sync"]["no_sync"]["trace"]) for r in RUN])
    assert set(plain["allreduce_calls"]) == {accum * 8}
    assert set(nosync["allreduce_calls"]) == {8}


def test_bucket_view_puts_grads_in_buckets():
    by = {c["label"]: c for c in RUN[0]["configs"]}
    assert by["cap 25 MiB"]["grad_storages"] == by["cap 25 MiB"]["param_tensors"] == 16
    assert by["cap 25 MiB, bucket view"]["grad_storages"] == 1


def test_the_recorded_nccl_set_keeps_every_invariant():
    """The committed NCCL set (recorder step `distributed`, written only when these hold): exposed <= comm <= step on
    every rank, calls per step = DDP's buckets, kernels per step whole and equal, speedup within its bound, and
    no collective ending before every GPU entered it (beyond the stated tolerance for GPU timers)."""
    from infralens_lab.analysis import ddp_run

    run = recorded_run()
    if run is None:
        pytest.skip("no recorded NCCL set in this checkout (python -m infralens_lab record --only device,distributed)")
    assert run.backend == "nccl" and run.world >= 2
    assert ddp_run.run_violations(run) == []
    for label in run.labels():
        t = ddp_run.table(run, label)
        assert set(t["allreduce_calls"]) == {len(run.config(label)["bucket_bytes"])}
        assert t["kernels"].notna().all() and t.groupby("rank")["kernels"].nunique().eq(1).all()
        al = distributed.align(run.traces(label))
        assert al.attrs["violations"] == 0, (label, al.attrs)


def test_runs_read_from_one_recording_share_their_parse_but_not_their_dicts():
    """parse.ranks keeps each recorded set's parsed traces and tables for the process (keyed by the set and its
    files' checksums): a second read parses nothing again, and still hands out rank dicts of its own."""
    from infralens_lab.parse import ranks

    a, b = ranks.recorded_run(), ranks.recorded_run()
    if a is None:
        pytest.skip("no recorded NCCL set in this checkout")
    label = a.labels()[0]
    assert a.traces(label) is b.traces(label) and a._traces is b._traces
    assert a.ranks is not b.ranks and a.ranks[0] is not b.ranks[0] and a.ranks == b.ranks
    assert a.config(label)["trace"] is not b.config(label)["trace"]
