"""timing: no invented numbers in interpreter mode, percentiles by hand, CPU wall clock, rotation."""
from __future__ import annotations

import pytest

from infralens_lab.device import is_gpu
from infralens_lab.measure.timing import (
    INTERPRETER_NOTE,
    Timing,
    percentile,
    rotation_count,
    summarize,
    throughput,
    time_fn,
)


@pytest.mark.skipif(is_gpu(), reason="interpreter-mode behaviour")
def test_interpreter_mode_measures_nothing():
    calls = []
    t = time_fn(lambda: calls.append(1))
    assert t.meaningful is False and t.median_ms is None and t.p10_ms is None and t.n == 0
    assert "interpreter" in t.note and t.note == INTERPRETER_NOTE
    assert calls == []  # nothing was run just to be thrown away
    assert "not meaningful" in str(t)
    assert throughput(1e9, t) is None
    with pytest.raises(RuntimeError, match="needs a GPU"):
        time_fn(lambda: None, clock="cuda")


@pytest.mark.skipif(not is_gpu(), reason="needs a GPU")
def test_gpu_mode_uses_cuda_events():
    import torch

    a = torch.randn(512, 512, device="cuda")
    t = time_fn(lambda: a @ a, warmup=2, repeats=5, flush=True)
    assert t.meaningful and t.clock == "cuda_events" and t.n == 5
    assert 0 < t.p10_ms <= t.median_ms <= t.p90_ms
    assert "L2 flushed" in t.note


def test_percentiles_by_hand():
    s = [4.0, 1.0, 3.0, 2.0]
    assert percentile(s, 50) == 2.5  # midway between 2 and 3
    assert percentile(s, 10) == pytest.approx(1.3)  # position 0.3 between 1 and 2
    assert percentile(s, 90) == pytest.approx(3.7)
    assert percentile([7.0], 90) == 7.0
    t = summarize(s, "cpu_wall")
    assert (t.median_ms, t.n, t.samples_ms) == (2.5, 4, (4.0, 1.0, 3.0, 2.0))
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        percentile(s, 101)
    with pytest.raises(ValueError, match="no samples"):
        summarize([], "cpu_wall")


def test_cpu_wall_clock_counts_calls_and_rotates_inputs():
    seen = []
    t = time_fn(lambda x: seen.append(x), warmup=2, repeats=5, rotate=[10, 20, 30], clock="cpu")
    assert seen == [10, 20, 30, 10, 20, 30, 10]  # warm-up calls then repeats, one cycle through the sets
    assert t.meaningful and t.clock == "cpu_wall" and t.n == 5 and "wall clock" in t.note
    assert t.p10_ms <= t.median_ms <= t.p90_ms
    pairs = []
    time_fn(lambda a, b: pairs.append((a, b)), warmup=0, repeats=2, rotate=[(1, 2), (3, 4)], clock="cpu")
    assert pairs == [(1, 2), (3, 4)]


def test_rotation_count():
    mib = 2**20
    assert rotation_count(10 * mib, l2_bytes=50 * mib) == 10  # 2 x 50 MiB / 10 MiB
    assert rotation_count(7 * mib, l2_bytes=50 * mib) == 15  # ceil(100 / 7)
    assert rotation_count(200 * mib, l2_bytes=50 * mib) == 1
    assert rotation_count(1, l2_bytes=50 * mib) == 64  # capped
    assert rotation_count(mib, l2_bytes=0) == 1  # unknown L2
    with pytest.raises(ValueError, match="positive int"):
        rotation_count(0, l2_bytes=mib)


def test_throughput_at_the_median():
    t = Timing(1.0, 0.9, 1.1, 3, True, "", "cuda_events")
    assert throughput(4e9, t) == pytest.approx(4.0)  # 4 GB in 1 ms = 4 TB/s
    assert throughput(4e9, t, per=1e9) == pytest.approx(4000.0)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(fn=42), TypeError, "expected a callable"),
    (dict(warmup=-1), ValueError, "warmup=-1"),
    (dict(repeats=0), ValueError, "repeats=0"),
    (dict(clock="wall"), ValueError, "clock='wall'"),
    (dict(rotate=[]), ValueError, "rotate is empty"),
])
def test_bad_arguments(kwargs, exc, match):
    args = dict(fn=lambda: None, clock="cpu")
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        time_fn(**args)


def test_time_steps_counts_and_refuses_bad_counts():
    from infralens_lab.measure.timing import time_steps

    calls = []
    out = time_steps(lambda: calls.append(1), synced=5, batched=3, skip=2, sync=lambda: None)
    assert len(calls) == 8 and len(out["per_step_sync_ms"]) == 5
    assert out["p10_ms"] <= out["median_ms"] <= out["p90_ms"] and out["throughput_ms_per_step"] >= 0
    with pytest.raises(ValueError, match="synced > skip"):
        time_steps(lambda: None, synced=2, skip=2)
