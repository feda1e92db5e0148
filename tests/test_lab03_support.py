"""Lab 03 glue: reconciliation tables, step moments, what-if and scaling tables, the KV crossover,
and the stderr filter, on small synthetic ledgers (no measurement runs here except the filter)."""
from __future__ import annotations

import math
import os

import pandas as pd
import pytest

from infralens_lab.analysis import ledger
from infralens_lab.analysis import ledger_views as views
from infralens_lab.labs_support import lab03
from infralens_lab.measure.torch_trace import quiet_profiler_chatter
from infralens_lab.units import MiB

MEASURED = pd.DataFrame({"category": ["weights", "gradients", "optimizer states", "activations",
                                      "temporary buffers", "communication buckets",
                                      "activations (live after forward)", "peak"],
                         "bytes": [1000, 1000, 2012, 9000, 500, 0, 9500, 13000],
                         "how": ["x"] * 8})
PREDICTED = pd.DataFrame({"category": list(ledger.CATEGORIES),
                          "bytes": [1000, 1000, 2000, 8800, 400, 0, 0],
                          "formula": ["f"] * 7, "source": ["s"] * 7})


def test_reconcile_in_mib_with_differences():
    rec = lab03.reconcile(PREDICTED, MEASURED)
    assert list(rec.columns) == ["category", "predicted_MiB", "measured_MiB", "difference_MiB", "gap_pct",
                                 "explanation"]
    row = rec.set_index("category").loc["optimizer states"]
    assert row["difference_MiB"] * MiB == pytest.approx(12)
    assert row["gap_pct"] == pytest.approx(0.6)
    # measured-only rows (peak) have no prediction
    assert math.isnan(rec.set_index("category").loc["peak", "predicted_MiB"])


def test_step_moments_and_ratio():
    stacks, peaks = views.step_moments(MEASURED)
    assert stacks["between steps"] == {"weights": 1000, "optimizer states": 2012}
    assert stacks["end of forward"]["activations"] == 9500
    assert stacks["after backward"]["gradients"] == 1000
    assert peaks == {"end of forward": 13000}
    m = views.moments_table(MEASURED)
    assert list(m["moment"]) == ["between steps", "end of forward", "after backward", "peak"]
    assert list(m["bytes"]) == [3012, 12512, 4012, 13000]
    assert views.peak_over_steady(MEASURED) == pytest.approx(13000 / 3012)


def test_step_moments_names_a_missing_row():
    with pytest.raises(ValueError, match="'peak'"):
        views.step_moments(MEASURED[MEASURED["category"] != "peak"])


def test_ledger_rows_keeps_only_ledger_categories():
    rows = views.ledger_rows(MEASURED)
    assert set(rows["category"]) <= set(ledger.CATEGORIES)
    assert "peak" not in set(rows["category"]) and len(rows) == 6


def test_in_mib_converts_and_rejects_unknown_columns():
    out = views.in_mib(pd.DataFrame({"category": ["a"], "bytes": [3 * MiB]}))
    assert list(out.columns) == ["category", "MiB"] and out["MiB"].iloc[0] == 3.0
    with pytest.raises(ValueError, match="no column 'size'"):
        views.in_mib(out, ("size",))


def test_what_if_rows_follow_the_ledger():
    wi = views.what_if("llama2-7b", batch=1, seq=4096, dp=8).set_index("option")
    base = wi.iloc[0]
    assert base["saves_GB"] == 0
    # a smaller DDP bucket changes nothing: DDP buckets hold every gradient whatever their size
    assert wi.loc["smaller DDP bucket (5 MiB)", "total_GB"] == pytest.approx(base["total_GB"])
    assert wi.loc["gradient_as_bucket_view", "buckets_GB"] == 0
    assert wi.loc["ZeRO-1 (shard optimizer states)", "optimizer_GB"] == pytest.approx(
        base["optimizer_GB"] / 8, rel=1e-6)
    assert wi.loc["full recomputation", "activations_GB"] < wi.loc["selective recomputation", "activations_GB"]
    assert (wi["saves_GB"] >= 0).all()


def test_kv_crossover_matches_the_formulas():
    for name, batch in (("llama2-7b", 8), ("llama2-70b", 3)):
        m = ledger.Model.preset(name)
        ctx = views.kv_crossover_context(name, batch)
        kv = ledger.kv_cache_bytes(m.n_layer, batch, round(ctx), m.n_kv_head, m.head_dim, 2)
        assert kv == pytest.approx(ledger.param_count(m) * 2, rel=1e-3)
    with pytest.raises(ValueError, match="batch = 0"):
        views.kv_crossover_context("llama2-7b", 0)


def test_inference_scaling_dominant_is_the_largest_column():
    t = views.inference_scaling(models=("llama2-7b",), contexts=(1024, 4096), batches=(1, 64))
    cols = {"weights_GB": "weights", "KV_cache_GB": "KV cache", "activations_GB": "activations"}
    for _, r in t.iterrows():
        assert r["dominant"] == cols[max(cols, key=lambda c: r[c])]
    assert set(t["dominant"]) == {"weights", "KV cache"}


def test_scaling_view_shares():
    table = views.scaling(zero_stages=(0, 3))
    view = views.scaling_view(table)
    assert len(view) == 12 and (view["dominant_pct"] <= 100).all()
    parts = view[[c for c in view.columns if c.endswith("_GB") and c != "total_GB"]].sum(axis=1)
    assert list(parts) == pytest.approx(list(view["total_GB"]))
    assert set(view.columns) == {"model", "zero_stage", "params_B", "weights_GB", "grads_GB", "optimizer_GB",
                                 "activations_GB", "other_GB", "total_GB", "dominant", "dominant_pct"}


def test_recorded_memory_without_a_store_says_so(capsys):
    ev, runs = lab03.recorded_memory(None, "train")
    assert ev is None and runs == {}
    assert "No recorded memory_train" in capsys.readouterr().out
    with pytest.raises(ValueError, match="'gpu'"):
        lab03.recorded_memory(None, "gpu")


def test_quiet_profiler_chatter_drops_only_usdt_lines(capfd):
    with quiet_profiler_chatter():
        os.write(2, b"USDT:2026-01-01 00:00:00 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a real warning\n")
    err = capfd.readouterr().err
    assert "a real warning" in err
    assert "USDT" not in err


def test_allocator_slack_needs_the_reserved_row():
    with_reserved = pd.concat([MEASURED, pd.DataFrame({"category": [views.RESERVED], "bytes": [16000],
                                                       "how": ["x"]})], ignore_index=True)
    t = views.allocator_slack({"fp32": with_reserved, "bf16": MEASURED})
    assert list(t["run"]) == ["fp32"]
    assert t["slack_MiB"].iloc[0] * MiB == pytest.approx(3000)
    assert t["slack_pct_of_allocated"].iloc[0] == pytest.approx(100 * 3000 / 13000)
    assert views.allocator_slack({"fp32": MEASURED}) is None


def test_bank_questions_are_answerable_from_the_tables_the_lab_shows():
    from infralens_lab.quiz import judge, question

    table = views.scaling()
    assert judge(question("lab03.q5"), 1, evidence=table)[0] == "correct"
    assert judge(question("lab03.q5"), 0, evidence=table)[0] == "wrong"
    moments = views.moments_table(MEASURED)
    assert judge(question("lab03.q3"), 13000 / 3012, evidence=moments)[0] == "correct"
    assert judge(question("lab03.q2"), "activations", evidence=views.ledger_rows(MEASURED))[0] == "correct"
    assert judge(question("lab03.q2"), "weights", evidence=views.ledger_rows(MEASURED))[0] == "wrong"
    assert judge(question("lab03.q6"), round(views.kv_crossover_context("llama2-7b", 8)))[0] == "correct"
    # q1: ZeRO-1 model states per rank, the ledger's own formula (2Ψ + 2Ψ + 12Ψ/8) on the prompt's 6.74e9 parameters
    states = ledger.model_states(6.74e9, "bf16_mixed", "adamw", dp=8, zero_stage=1)
    assert judge(question("lab03.q1"), sum(b for b, _ in states.values()) / 1e9)[0] == "correct"
    assert judge(question("lab03.q1"), 16 * 6.74e9 / 1e9)[0] == "wrong"  # unsharded


def test_exercises_are_marked_against_the_ledger_and_the_live_step():
    """ex3 is a value marked against the live step; ex1 and ex2 are function exercises (tests/test_functions_lab03.py)."""
    from infralens_lab.quiz import judge, question

    assert question("lab03.ex1").kind == question("lab03.ex2").kind == "function"
    gaps = lab03.compare(PREDICTED, MEASURED)
    want = float(gaps.loc[gaps["category"] == "activations", "gap_pct"].iloc[0])
    assert judge(question("lab03.ex3"), want, evidence=gaps)[0] == "correct"
    assert judge(question("lab03.ex3"), want + 0.1, evidence=gaps)[0] == "wrong"


class _Store:
    """A stand-in for evidence.RecordedStore holding one in-memory record."""

    def __init__(self, values):
        self._values = values

    def names(self):
        return [] if self._values is None else [lab03.TIMELINE]

    def load(self, name):
        assert name == lab03.TIMELINE
        return type("Ev", (), {"values": self._values})()


def _history():
    from infralens_lab.measure import memory_timeline as mt
    m = [mt.MARKER_BASE + 512 * i for i in range(4)]
    return [["alloc", m[0]], ["free_completed", m[0]], ["alloc", 300], ["alloc", 200], ["free_completed", 200],
            ["alloc", m[1]], ["free_completed", m[1]], ["alloc", 100], ["free_completed", 300],
            ["alloc", m[2]], ["free_completed", m[2]], ["alloc", 64], ["free_completed", 64],
            ["alloc", m[3]], ["free_completed", m[3]]]


def test_recorded_timeline_absent_and_present():
    assert lab03.recorded_timeline(None) == (None, {})
    assert lab03.recorded_timeline(_Store(None)) == (None, {})
    rec = {p: {"meta": {"steps": 1}, "baseline_bytes": 1000, "events": _history()} for p in ("fp32", "amp_bf16")}
    _, tls = lab03.recorded_timeline(_Store(rec))
    assert set(tls) == {"fp32", "amp_bf16"}
    assert tls["fp32"]["allocated_bytes"].max() == 1500  # 1000 held + 300 + 200 at the forward's peak
    assert list(tls["amp_bf16"]["phase"].unique()) == ["forward", "backward", "optimizer"]
    from infralens_lab.measure.memory_timeline import phase_peaks
    peaks = views.in_mib(phase_peaks(tls["fp32"]), ("start_bytes", "peak_bytes", "end_bytes")).set_index("phase")
    assert peaks.loc["forward", "peak_MiB"] * MiB == 1500 and peaks.loc["backward", "end_MiB"] * MiB == 1100


def test_recorded_timeline_refuses_a_malformed_record():
    with pytest.raises(ValueError, match=r"lacks \['baseline_bytes'\].*re-record"):
        lab03.recorded_timeline(_Store({"fp32": {"meta": {"steps": 1}, "events": []}}))


def test_slack_isolated_by_recording_date():
    def ev(date):
        return type("Ev", (), {"provenance": type("P", (), {"date_utc": date})()})()
    assert not views.slack_isolated(ev("2026-11-22T23:35:15Z"))
    assert views.slack_isolated(ev("2026-11-24T08:00:00Z"))
    with pytest.raises(ValueError, match="no provenance date_utc"):
        views.slack_isolated(ev(""))
