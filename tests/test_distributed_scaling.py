"""analysis.scaling: the bandwidth conventions, the weak-scaling bound n(1-f) and the multi-node MODEL, by hand."""
import re

import pandas as pd
import pytest

from infralens_lab.analysis import scaling


def test_bandwidth_conventions():
    assert scaling.algbw(1e9, 0.5) == pytest.approx(2.0)
    assert scaling.busbw(100.0, 2) == pytest.approx(100.0)  # 2(n-1)/n = 1 at n = 2
    assert scaling.busbw(100.0, 8) == pytest.approx(175.0)
    assert scaling.busbw(100.0, 1) == 0
    with pytest.raises(ValueError, match="seconds=0"):
        scaling.algbw(1, 0)
    with pytest.raises(ValueError, match="n=0"):
        scaling.busbw(1.0, 0)


def test_bench_table_and_largest_busbw():
    t = scaling.bench_table([{"bytes": 2 ** 20, "seconds": 1e-4}, {"bytes": 2 ** 30, "seconds": 4e-3}], n=4)
    assert list(t["MiB"]) == [1.0, 1024.0] and t.attrs["ranks"] == 4
    assert t["busbw_GBps"].iloc[1] == pytest.approx(2 ** 30 / 4e-3 / 1e9 * 1.5)
    assert scaling.largest_busbw(t) == pytest.approx(t["busbw_GBps"].iloc[1])
    with pytest.raises(ValueError, match="needs rows with 'bytes' and 'seconds'"):
        scaling.largest_busbw(pd.DataFrame({"MiB": [1.0]}), 2)


def test_weak_scaling_identity_and_bound():
    s = scaling.scaling(t1_step_s=0.010, tn_step_s=0.0125, n=2)
    assert s["speedup"] == pytest.approx(1.6) and s["efficiency"] == pytest.approx(0.8)
    # identity: with the rest of the step as long as one rank alone (t1 = tn - exposed), speedup = n(1 - f)
    tn, exposed = 0.0125, 0.0025
    assert scaling.scaling(tn - exposed, tn, 2)["speedup"] == pytest.approx(scaling.weak_scaling_bound(exposed / tn, 2))
    assert scaling.weak_scaling_bound(0.0, 8) == 8
    with pytest.raises(ValueError, match=re.escape("exposed_fraction=1.5")):
        scaling.weak_scaling_bound(1.5, 2)


def test_ring_and_multinode_model():
    # 1 GB over 8 ranks at 100 GB/s bus bandwidth: 2·7/8 · 1e9 / 1e11 = 17.5 ms
    assert scaling.ring_allreduce_s(1e9, 8, 100.0) == pytest.approx(0.0175)
    assert scaling.ring_allreduce_s(1e9, 8, 100.0, latency_s=1e-5) == pytest.approx(0.0175 + 14e-5)
    df = scaling.multinode_model(compute_s=0.010, backward_s=0.006, grad_bytes=1e9, hidden_fraction=0.5, gpus=(1, 8, 64),
                           achievable=1.0, latency_s=0.0)
    assert "MODEL" in df.attrs["label"] and "assumed" in df.attrs["label"]
    assert list(df["link"]) == ["none", "NVLink (one node)", "network (across nodes)"]
    assert df["step_ms"].iloc[0] == pytest.approx(10.0)
    assert df["comm_ms"].iloc[1] == pytest.approx(1e3 * 2 * 7 / 8 * 1e9 / 450e9)
    assert df["hidden_ms"].iloc[1] == pytest.approx(0.5 * df["comm_ms"].iloc[1])  # half of it fits under backward
    assert df["comm_ms"].iloc[2] == pytest.approx(1e3 * 2 * 63 / 64 * 1e9 / 50e9)
    assert df["hidden_ms"].iloc[2] == pytest.approx(6.0)  # capped by the 6 ms of backward it can hide under
    assert df["step_ms"].iloc[2] == pytest.approx(10.0 + df["comm_ms"].iloc[2] - 6.0)
    assert (df["step_ms"] >= df["comm_ms"]).all() and (df["step_ms"] >= 10.0).all()
    with pytest.raises(ValueError, match="hidden_fraction=2"):
        scaling.multinode_model(0.01, 0.005, 1e9, 2)
    with pytest.raises(ValueError, match=re.escape("backward_s=0.02 with compute_s=0.01")):
        scaling.multinode_model(0.01, 0.02, 1e9, 0.5)


def test_multinode_model_takes_the_measured_busbw():
    df = scaling.multinode_model(0.010, 0.006, 1e9, 0.5, intra_busbw_gbs=316.0, gpus=(2, 64), busbw_source="measured, 1 GiB")
    assert df["busbw_GBps"].iloc[0] == 316.0 and df["busbw_GBps"].iloc[1] == pytest.approx(40.0)
    assert "316 GB/s in a node (measured, 1 GiB)" in df.attrs["label"]
    slow = scaling.multinode_model(0.010, 0.006, 1e9, 0.5, intra_busbw_gbs=20.0, gpus=(64,))
    assert slow["busbw_GBps"].iloc[0] == 20.0  # the network never beats the node's own measured rate


def test_multinode_model_adds_ddps_own_overhead_from_two_gpus_on():
    base = scaling.multinode_model(0.010, 0.006, 1e9, 0.5, gpus=(1, 2, 64), achievable=1.0, latency_s=0.0)
    over = scaling.multinode_model(0.010, 0.006, 1e9, 0.5, gpus=(1, 2, 64), achievable=1.0, latency_s=0.0,
                             ddp_overhead_s=0.004)
    assert over["step_ms"].iloc[0] == base["step_ms"].iloc[0] == pytest.approx(10.0)  # one GPU alone: no DDP
    assert list(over["step_ms"].iloc[1:] - base["step_ms"].iloc[1:]) == pytest.approx([4.0, 4.0])
    assert list(over["efficiency"]) == pytest.approx(list(10.0 / over["step_ms"]))
    assert "4.0 ms longer than one GPU alone" in over.attrs["label"] and "not modelled" in base.attrs["label"]
    with pytest.raises(ValueError, match=re.escape("ddp_overhead_s=-0.001; expected seconds >= 0")):
        scaling.multinode_model(0.01, 0.005, 1e9, 0.5, ddp_overhead_s=-0.001)
