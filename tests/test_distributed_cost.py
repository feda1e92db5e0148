"""Lab 06's sweep moves its buckets, "overlapped is not free" per cap, busbw timed with CUDA events and the alpha-beta
fit that feeds the multi-node model (issue 39, items 1 and 3), on every recorded NCCL set and the gloo fixture run."""
from __future__ import annotations

import json
import random
from itertools import pairwise
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist

from infralens_lab.analysis import buckets, ddp_cost, ddp_run, scaling
from infralens_lab.measure import distributed
from infralens_lab.parse.ranks import RankRun, recorded_runs
from infralens_lab.units import MiB

GLOO = Path(__file__).resolve().parent / "data" / "ddp_gloo_run.json"
NCCL_SETS = ("2x-nvidia-h100-80gb-hbm3", "2x-nvidia-h200", "4x-nvidia-h200")


@pytest.fixture(scope="module")
def runs() -> dict[str, RankRun]:
    got = dict(recorded_runs())
    assert set(NCCL_SETS) <= set(got), sorted(got)
    return got | {"gloo": RankRun(json.loads(GLOO.read_text()))}


# ---------------------------------------------------------------- item 1: the sweep sweeps
def _torch_bucket_counts(model, caps) -> list[int]:
    """DDP's own assignment (torch's compute_bucket_assignment_by_size, what its Reducer rebuilds with) on meta
    tensors of the model's gradients in ready order (bias before weight, last layer first: tested on real DDP in
    tests/test_distributed_buckets.py)."""
    ts = [torch.empty(n, device="meta") for n in reversed(model.param_sizes())]
    return [len(dist._compute_bucket_assignment_by_size(ts, [int(c * MiB)], [False] * len(ts))[0]) for c in caps]


@pytest.mark.parametrize("model, caps", [(distributed.GPU_MODEL, distributed.GPU_CAPS_MB),
                                         (distributed.CPU_MODEL, distributed.CPU_CAPS_MB)])
def test_every_cap_of_the_sweep_gives_its_own_bucket_count(model, caps):
    plan = [buckets.bucket_count(**ddp_run.plan_inputs(model, c)) for c in caps]
    assert plan == _torch_bucket_counts(model, caps)
    assert all(a > b for a, b in pairwise(plan)), dict(zip(caps, plan, strict=True))  # strictly fewer at every larger cap
    labels = [c.label for c in distributed.sweep_configs(model, caps)]
    assert "cap 1 MiB" in labels and ddp_run.SCALING_CONFIG in labels  # the straggler's cap, the scaling table's


def test_the_gpu_sweep_is_64_32_10_3_buckets():
    """64 x Linear(2048): 16 MiB weights, 8 KiB biases; 1 MiB: one layer a bucket; 25: two; 100: seven (112 MiB);
    400: twenty-five; bytes / cap would say 1025, 41, 11, 3."""
    assert _torch_bucket_counts(distributed.GPU_MODEL, distributed.GPU_CAPS_MB) == [64, 32, 10, 3]


OLD_MODEL = {"width": 4096, "depth": 16, "batch": 256}  # the sets committed before issue 39's model change


def _old(run: RankRun) -> bool:
    return run.config("cap 1 MiB")["model"] == OLD_MODEL


@pytest.mark.parametrize("name", NCCL_SETS)
def test_each_set_says_whether_its_caps_change_the_buckets(runs, name):
    note = ddp_cost.sweep_note(name, runs[name])
    if _old(runs[name]):  # 64 MiB weights: every cap up to 64 MiB makes one bucket per weight
        assert "caps 1, 5, 25 MiB all give 16" in note and "64.00 MiB" in note and "100 MiB: 8" in note
    else:  # re-recorded with GPU_MODEL and GPU_CAPS_MB
        assert "1 MiB: 64, 25 MiB: 32, 100 MiB: 10, 400 MiB: 3: every cap changes the buckets" in note


def test_a_sweep_that_moves_says_so(runs):
    assert "every cap changes the buckets" in ddp_cost.sweep_note("gloo", runs["gloo"])


@pytest.mark.parametrize("name", [*NCCL_SETS, "gloo"])
def test_overlapped_is_not_free_table_adds_up(runs, name):
    run = runs[name]
    t = ddp_cost.cost_table(run)
    assert list(t["config"]) == ddp_cost.cap_labels(run) and len(t) >= 2
    assert list(t["buckets"]) == [len(run.config(c)["bucket_bytes"]) for c in t["config"]]
    parts = t["one_rank_ms"] + t["extra_compute_ms"] + t["exposed_ms"]
    assert list(parts) == pytest.approx(list(t["step_ms"]), rel=1e-12)
    assert ((t["hidden_share"] >= 0) & (t["hidden_share"] <= 1)).all() and (t["exposed_ms"] >= 0).all()
    # one owner: the extra compute at the scaling config is the scaling table's ddp_overhead_ms
    s = ddp_run.scaling_table(run).iloc[0]
    assert t.set_index("config").loc[ddp_run.SCALING_CONFIG, "extra_compute_ms"] == pytest.approx(s["ddp_overhead_ms"])
    said = ddp_cost.cost_sentence(t)
    fast, slow = t.loc[t["step_ms"].idxmin()], t.loc[t["step_ms"].idxmax()]
    assert f"Fastest step: {fast.config}" in said and f"{slow.step_ms - fast.step_ms:.2f} ms between them" in said
    x = t["extra_compute_ms"]
    assert f"extra compute from {x.min():.2f} to {x.max():.2f} ms" in said  # a range, even from below zero
    assert ("Below zero at" in said) == bool((x < 0).any())


@pytest.mark.parametrize("name", NCCL_SETS)
def test_on_gpus_hiding_more_is_not_faster(runs, name):
    """The issue's finding, on every recorded set: the fastest cap is not the one that hides the most, and DDP's extra
    compute (NCCL kernels sharing the SMs, bucket copies) exceeds the exposed all-reduce at every cap."""
    if not _old(runs[name]):
        pytest.skip(f"{name} was re-recorded with the split model: the finding was made on the 16 x Linear(4096) sets")
    t = ddp_cost.cost_table(runs[name])
    assert t.loc[t["step_ms"].idxmin(), "config"] != t.loc[t["hidden_share"].idxmax(), "config"]
    assert (t["extra_compute_ms"] > t["exposed_ms"]).all() and (t["extra_compute_ms"] > 0).all()
    assert "is not the fastest" in ddp_cost.cost_sentence(t)


# ---------------------------------------------------------------- item 3: busbw as nccl-tests times it, and the fit
def test_fit_recovers_alpha_and_beta_from_a_noisy_curve():
    rng = random.Random()
    alpha, beta, n = rng.uniform(5e-6, 50e-6), rng.uniform(50, 400), rng.choice([2, 4, 8])
    sizes = [8 * 1024 * 4 ** k for k in range(10)]
    t = pd.DataFrame({"bytes": sizes, "seconds": [(alpha + b * 2 * (n - 1) / n / (beta * 1e9)) * rng.uniform(0.98, 1.02)
                                                  for b in sizes]})
    t.attrs["ranks"] = n
    fit = scaling.fit_alpha_beta(t.sample(frac=1.0))  # row order does not matter
    assert fit["alpha_s"] == pytest.approx(alpha, rel=0.1) and fit["beta_gbs"] == pytest.approx(beta, rel=0.05)
    assert fit["max_residual"] < 0.05 and fit["points"] == 10 and fit["timing"] == "host"  # no column: host-timed
    assert f"alpha = {1e6 * fit['alpha_s']:.1f} µs" in scaling.fit_sentence(fit)


def test_fit_refuses_what_it_cannot_fit():
    few = pd.DataFrame({"bytes": [1024, 2048], "seconds": [1e-5, 2e-5]})
    with pytest.raises(ValueError, match=r"at least 3 distinct sizes; got 2"):
        scaling.fit_alpha_beta(few, 2)
    falling = pd.DataFrame({"bytes": [1e3, 1e6, 1e9], "seconds": [1e-2, 1e-3, 1e-4]})
    with pytest.raises(ValueError, match=r"expected alpha >= 0 and beta > 0"):
        scaling.fit_alpha_beta(falling, 2)
    with pytest.raises(ValueError, match=r"timing='wallclock'; expected one of \['cuda_events', 'host'\]"):
        scaling.bench_table([{"bytes": 8, "seconds": 1.0, "timing": "wallclock"}], 2)


@pytest.mark.parametrize("name", NCCL_SETS)
def test_recorded_host_timed_curves_fit_and_the_model_meets_the_measured_step(runs, name):
    """The committed sets were recorded host-timed (1 MiB to 1 GiB, one call per timing). Their curve still fits
    alpha + bytes/beta within 12 % at every size (measured: 10 % at most), but that alpha (70-82 µs) holds the host's
    launch and synchronize, not NCCL's latency, and the label says so. The model's row at the set's own rank count
    is within 15 % of the measured steady step (the issue's bar; the step is partly the model's own input, one rank
    alone and DDP's overhead come from the same run), and its all-reduce alone (alpha and beta for each of the 16
    buckets, no waits) within 15 % of the traced one (measured: -12 % to +6 %; the traced one holds peer waits)."""
    run = runs[name]
    b = ddp_run.bench(run)
    fit = scaling.fit_alpha_beta(b)
    m = ddp_cost.model_check(run)
    assert m["within"] and abs(m["comm_error"]) < 0.15, m
    assert 0.5 < fit["beta_gbs"] / scaling.largest_busbw(b) < 1.2
    if set(b["timing"]) == {"host"}:
        assert fit["max_residual"] < 0.12 and fit["timing"] == "host"
        assert "host-timed: it holds the host's launch" in m["label"]
    else:  # re-recorded with CUDA events, 8 KiB to 1 GiB: NCCL switches protocol with size, so no residual bar is
        # claimed here; the fit's residuals are shown in the lab beside it
        assert set(b["timing"]) == {"cuda_events"} and fit["points"] >= 10 and "CUDA-event-timed" in m["label"]


class _FakeCuda:
    """Stands in for ``torch.cuda``'s streams and events on a CPU: an event records the host clock when recorded."""

    def __init__(self, clock):
        self.clock, self.streams, self.recorded = clock, [], 0
        fake = self

        class Stream:
            def __init__(self, device=None):
                fake.streams.append(self)

            def synchronize(self):
                pass

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing

            def record(self, stream):
                fake.recorded += 1
                self.t = fake.clock[0]

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return 1e3 * (end.t - self.t)  # ms, as torch's

        self.Stream, self.Event = Stream, Event

    def stream(self, s):
        import contextlib

        return contextlib.nullcontext(s)


def test_event_timing_times_many_calls_per_pair():
    clock, calls, met = [0.0], [], []
    step = random.uniform(1e-5, 1e-3)

    def call():
        calls.append(1)
        clock[0] += step

    fake = type("T", (), {})()
    fake.cuda = _FakeCuda(clock)
    row = distributed.event_timed(call, calls=20, reps=3, device="cuda:0", meet=lambda: met.append(1), torch_mod=fake)
    assert len(calls) == distributed.BENCH_WARMUP + 3 * 20 and len(met) == 3 and fake.cuda.recorded == 6
    assert row["seconds"] == pytest.approx(step) and row["calls_per_timing"] == 20 and row["timing"] == "cuda_events"
    assert row["timing"] in scaling.TIMINGS and len(fake.cuda.streams) == 1


def test_gpu_benchmark_spans_8_kib_to_1_gib():
    mib = distributed.GPU_SPEC.bench_mib
    assert min(mib) * MiB == 8 * 1024 and max(mib) == 1024 and distributed.GPU_SPEC.bench_calls == 20
    assert len(distributed.QUICK_GPU_SPEC.bench_mib) >= 3  # enough sizes to fit alpha and beta


def test_the_cost_sentence_reads_a_range_that_starts_below_zero():
    """A live CPU run can put a cap's DDP step minus its exposed all-reduce under one rank alone's median step: the
    sentence gives the range with words ("from -0.07 to 6.46 ms", never "-0.07-6.46") and says where and why."""
    import pandas as pd

    t = pd.DataFrame({"config": ["cap 1 MiB", "cap 2 MiB"], "cap_MiB": [1, 2], "buckets": [8, 4],
                      "hidden_share": [0.67, 0.60], "exposed_ms": [3.89, 3.78], "extra_compute_ms": [6.46, -0.07],
                      "step_ms": [27.0, 20.36], "one_rank_ms": [16.65, 16.65]})
    said = ddp_cost.cost_sentence(t)
    assert "extra compute from -0.07 to 6.46 ms, exposed from 3.78 to 3.89 ms" in said, said
    assert "Below zero at cap 2 MiB: its DDP step minus its exposed all-reduce came out 0.07 ms shorter than one " \
           "rank alone's median step (16.65 ms)" in said, said
    assert "-0.07-" not in said
