"""The one DDP bucket rule (analysis/buckets.py) by hand, against the buckets torch's Reducer really builds on
several models (two gloo ranks), and in the memory ledger that counts them."""
import pytest

from infralens_lab.analysis import buckets, ledger
from infralens_lab.units import MiB
from infralens_lab.workloads import ddp


def test_whole_tensors_and_caps_by_hand():
    layer = [2048, MiB]  # bias then weight, in gradient-ready order
    assert buckets.bucket_plan(layer * 4, 1) == [MiB + 2048] * 4          # explicit cap: the first bucket is capped at 1 MiB too
    assert buckets.bucket_plan(layer * 4, 5) == [4 * (MiB + 2048)]
    assert buckets.bucket_plan(layer * 4) == [MiB + 2048, 3 * (MiB + 2048)]  # the default: 1 MiB first, then 25 MiB
    assert buckets.bucket_plan([300_000] * 10, 2) == [2_100_000, 900_000]    # 7 x 300 kB reaches 2 MiB; the rest
    assert buckets.bucket_plan([64 * MiB] * 3, 1) == [64 * MiB] * 3          # a tensor above the cap is never split
    assert buckets.bucket_plan([], 1) == [] and buckets.bucket_count(layer * 4) == 2
    assert buckets.bucket_caps() == (MiB, 25 * MiB) and buckets.bucket_caps(0.25) == (MiB // 4, MiB // 4)
    assert "first bucket 1 MiB, then 25 MiB" in buckets.rule_text() and "every bucket 5 MiB" in buckets.rule_text(5)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="bucket_cap_mb=0; expected a positive number of MiB"):
        buckets.bucket_plan([1], 0)
    with pytest.raises(ValueError, match=r"gradient sizes \[-1\] are not byte counts"):
        buckets.bucket_plan([4, -1], 1)


def test_the_gpu_model_of_issue_25():
    """16 x Linear(4096) in fp32: DDP made 16/16/16/8 buckets at caps 1/5/25/100 MiB; bytes / cap gave 1025/206/42/12."""
    ready = [4 * n for n in reversed([n for _ in range(16) for n in (4096 * 4096, 4096)])]
    assert [buckets.bucket_count(ready, c) for c in (1, 5, 25, 100)] == [16, 16, 16, 8]


CASES = tuple((m, c) for m in ("mlp", "embedding", "conv", "odd") for c in (None, 0.05, 0.25, 1, 25))


@pytest.fixture(scope="module")
def reducer():
    return ddp.launch(ddp.job_buckets, world=2, args=(CASES,), timeout_s=120)[0]


def test_the_rule_gives_the_reducers_buckets(reducer):
    assert len(reducer) == len(CASES)
    distinct = set()
    for r in reducer:
        ready = [r["param_bytes"][i] for i in r["ready_order"]]
        assert sorted(r["ready_order"]) == list(range(len(r["param_bytes"])))
        assert buckets.bucket_plan(ready, r["cap"]) == r["bucket_bytes"], (r["model"], r["cap"])
        distinct.add(len(r["bucket_bytes"]))
    assert len(distinct) >= 3  # the cases exercise one bucket, a few, and one per layer


def test_ready_order_is_not_always_reverse_registration(reducer):
    """Conv weights are ready before their biases, Linear biases before their weights: the rule takes the order
    DDP saw (its logging data), and reverse registration is only the default guess."""
    conv = next(r for r in reducer if r["model"] == "conv")
    assert conv["ready_order"] != list(range(len(conv["param_bytes"])))[::-1]


def test_the_ledger_counts_buckets_with_the_rule():
    m = ledger.Model.preset("gpt2-125m")
    assert sum(ledger.param_tensors(m)) == ledger.param_count(m)
    grads = [2 * n for n in reversed(ledger.param_tensors(m))]
    for cap in (None, 5, 25):
        t = ledger.Training(4, 512, dp=8, bucket_mb=cap)
        nbytes, formula = ledger.bucket_term(t, ledger.param_count(m), m)
        assert nbytes == 2 * ledger.param_count(m) and f"in {buckets.bucket_count(grads, cap)} buckets" in formula
    assert ledger.bucket_term(ledger.Training(4, 512, dp=8, grad_as_bucket_view=True), 1, m)[0] == 0


def test_an_mlp_is_ready_in_reverse_registration_order(reducer):
    """The plan exercise's evidence (ddp_run.plan_inputs) assumes it: DDP saw the MLP's gradients last layer first."""
    from infralens_lab.analysis.ddp_run import plan_inputs

    mlp = [r for r in reducer if r["model"] == "mlp"]
    assert all(r["ready_order"] == list(range(12))[::-1] for r in mlp)
    ev = plan_inputs(ddp.MLPConfig(width=256, depth=6), 0.25)
    assert ev["grad_bytes_ready_order"] == [mlp[0]["param_bytes"][i] for i in mlp[0]["ready_order"]]
    assert buckets.bucket_count(**ev) == 6
