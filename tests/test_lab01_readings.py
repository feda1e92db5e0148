"""Lab 01's readings that a senior engineer checked against the evidence beside them: the two runs' baselines
(``variants.baseline_notes``), an expectation tested by the spread rule (``variants.expectation_notes``), a
measured lever held against its bound (``bottleneck.lever_outcome``) and the ceilings' clock
(``hardware.matmul_rate_table``). Each on the real recorded set and on inputs that make the other branch fire."""
from __future__ import annotations

import math

import helpers
import pandas as pd
import pytest

from infralens_lab.analysis import bottleneck, variants
from infralens_lab.analysis.hardware import matmul_rate_table
from infralens_lab.analysis.overlap import step_bound
from infralens_lab.labs_support import lab01
from infralens_lab.quiz.cells import question_markdown


def test_within_spread_is_the_rule_effect_words_words():
    assert variants.noise_pct(1.0) == variants.NOISE_FLOOR_PCT and variants.noise_pct(6.0, 4.0) == pytest.approx(5.0)
    assert variants.noise_pct(6.0, float("nan")) == pytest.approx(3.0)
    for speedup, w, wb in ((1.01, 1.5, math.nan), (1.129, 15.1, 13.9), (1.16, 15.1, 13.9), (0.85, 2.5, 4.0)):
        assert variants.within_spread(speedup, w, wb) == variants.effect_words(speedup, w, wb).startswith("no change")
    assert variants.within_spread(1.129, 15.1, 13.9) and not variants.within_spread(1.16, 15.1, 13.9)
    assert variants.effect_words(1.006, 1.85).endswith("±0.9%: under the 2% floor below which no change counts)")


def _recorded():
    st = helpers.recorded_set("trace_bubble", "trace_fixed", variants.RECORD)
    cmp = lab01.compare(lab01.recorded_traces(st))
    return st, cmp, variants.one_change_table(st.load(variants.RECORD).values)


def test_baseline_notes_on_the_recording_follow_the_rule():
    _, cmp, one = _recorded()
    lines = variants.baseline_notes(cmp, one)
    tr, t = cmp.set_index("version"), one.set_index("variant")
    for name, line in zip(("bubble", "fixed"), lines[:2], strict=True):
        p0, p1 = tr.loc[name, "period_ms"], t.loc[name, "period_ms"]
        assert f"{p1:.1f} ms per step in the one-change run against {p0:.1f} ms" in line
        same = variants.within_spread(p0 / p1, t.loc[name, "spread_pct"])
        assert ("the same step twice" in line) == same and ("; beyond the run-to-run spread (" in line) == (not same)
    r0 = tr.loc["bubble", "period_ms"] / tr.loc["fixed", "period_ms"]
    r1 = t.loc["bubble", "period_ms"] / t.loc["fixed", "period_ms"]
    assert f"{r0:.2f}x against the trace run's bubble and {r1:.2f}x" in lines[2]
    di = tr.loc["bubble", "idle_ms_per_step"] - t.loc["bubble", "idle_ms_per_step"]
    dg = tr.loc["bubble", "gpu_work_ms"] - t.loc["bubble", "gpu_work_ms"]
    assert ("is idle time" in lines[3]) == (abs(di) >= abs(dg))


def test_baseline_notes_call_equal_runs_the_same_step():
    traced = pd.DataFrame([{"version": "bubble", "period_ms": 25.0, "gpu_work_ms": 19.0, "idle_ms_per_step": 5.0},
                           {"version": "fixed", "period_ms": 19.7, "gpu_work_ms": 19.0, "idle_ms_per_step": 0.0}])
    one = pd.DataFrame([{"variant": "bubble", "period_ms": 24.8, "spread_pct": 4.0, "idle_ms_per_step": 4.8,
                         "gpu_work_ms": 19.0, "median_ms": float("nan")},
                        {"variant": "fixed", "period_ms": 19.6, "spread_pct": 2.0, "idle_ms_per_step": 0.0,
                         "gpu_work_ms": 19.0, "median_ms": float("nan")}])
    lines = variants.baseline_notes(traced, one)
    assert "the same step twice" in lines[0] and "the same gain within the spread" in lines[2]
    assert len(lines) == 4  # no untraced median: no sentence about it


def test_expectation_notes_on_the_recording_say_held_or_failed_by_the_rule():
    _, _, one = _recorded()
    t = one.set_index("variant")
    lines = variants.expectation_notes(one, "bubble+pinned")
    w = (t.loc["bubble+pinned", "spread_pct"], t.loc["bubble", "spread_pct"])
    traced = variants.within_spread(t.loc["bubble", "period_ms"] / t.loc["bubble+pinned", "period_ms"], *w)
    plain = variants.within_spread(t.loc["bubble", "median_ms"] / t.loc["bubble+pinned", "median_ms"], *w)
    assert lines[1].startswith("Traced period") and lines[1].endswith(f"{'held' if traced else 'failed'} there.")
    assert lines[2].startswith("Untraced") and lines[2].endswith(f"{'held' if plain else 'failed'} there.")
    assert ("disagree" in lines[3]) == (traced != plain)


def test_lever_outcome_names_the_floor_that_failed():
    lever = step_bound(20.0, 19.0, 15.0, fraction=0.75, speedup=8.0)  # CPU floor 15 ms decides: 1.33x
    assert lever.limited_by == "cpu"
    past = bottleneck.lever_outcome(lever, "TF32", 20.0, 13.5, cpu_ms=13.8, plain_speedup=1.9)
    assert "past the bound" in past and "the CPU floor (15.0 ms" in past and "own CPU time under the profiler (13.8 ms)" in past
    assert "GPU floor" not in past and "1.90x" in past
    inside = bottleneck.lever_outcome(lever, "TF32", 20.0, 16.0)
    assert "within the bound" in inside and f"{100 * (20 / 16 - 1) / (lever.bound - 1):.0f}%" in inside


def test_the_statement_holds_tf32_against_its_bound_on_the_recording():
    st, cmp, _ = _recorded()
    ev = st.load(variants.RECORD)
    rate = matmul_rate_table(st.load("ceilings").values).set_index("dtype")["rate_TFLOPs"]
    fd = ev.values["variants"]["fixed"]["trace"]
    lever = variants.fix_bound(fd, fd["fp32_gemm_pct"] / 100, rate["tf32"] / rate["fp32"])
    p = variants.precision_table(ev.values, rate.to_dict()).set_index("variant")
    measured = {"base_period_ms": p.loc["fixed", "period_ms"], "period_ms": p.loc["fixed+tf32", "period_ms"],
                "cpu_ms": p.loc["fixed+tf32", "cpu_step_ms"]}
    causes = pd.DataFrame([{"cause": "host", "share": 0.9}])
    text = bottleneck.bottleneck_statement(cmp, causes, lever=lever, measured=measured)
    beaten = p.loc["fixed+tf32", "speedup"] > lever.bound
    assert ("past the bound" in text) == beaten and ("within the bound" in text) == (not beaten)
    assert f"was bounded at {lever.bound:.2f}x" in text


def test_ceilings_carry_their_clock_or_nan():
    st = helpers.recorded_set("ceilings")
    t = matmul_rate_table(st.load("ceilings").values)
    recorded = {r["dtype"]: r.get("sm_clock_hz") for r in st.load("ceilings").values["matmul"]}
    for r in t.itertuples():
        want = recorded[r.dtype]
        assert (math.isnan(r.sm_clock_ghz) if not want else r.sm_clock_ghz == pytest.approx(want / 1e9))


def test_q6_shows_the_tables_variant_names():
    text = question_markdown("lab01.q6")
    assert "`bubble+prefetch`, `bubble+pinned`, `bubble+no_sync`" in text and "bubble_prefetch" not in text
