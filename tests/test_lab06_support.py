"""Lab 06's tables (analysis/ddp_run), glue (labs_support/lab06) and grading keys (quiz/keys/lab06) on the committed
two-rank gloo run (tests/data/ddp_gloo_run.json): every table the notebook shows, the backend's words, the
recorded set found in any recorded folder, and each derived question and exercise marked by its own formula."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import bounds, buckets, ddp_run, scaling
from infralens_lab.analysis import distributed as analysis_distributed
from infralens_lab.labs_support import lab06
from infralens_lab.measure import distributed as measure_distributed
from infralens_lab.parse.ranks import RankRun, recorded_run
from infralens_lab.present import distributed as present_distributed
from infralens_lab.quiz import check
from infralens_lab.quiz.derive import DerivationError, derive
from infralens_lab.quiz.keys import lab06 as keys_lab06

RANKS = json.loads((Path(__file__).parent / "data" / "ddp_gloo_run.json").read_text())
RUN = RankRun(RANKS, evidence.live("ddp_test", {}, command="tests"))


def test_sweep_counts_are_the_buckets_ddp_built():
    c = ddp_run.sweep_counts(RUN).set_index("config")
    assert (c["calls_per_step"] == c["buckets"]).all()
    assert c.loc["cap 0.25 MiB", "buckets"] == 8 and c.loc["cap 25 MiB", "buckets"] == 1
    assert c.loc["default cap", "buckets"] == 2  # the 1 MiB first bucket, only with the default cap
    assert c.loc["mystery", "calls_per_step"] == 8 and c.loc["reference", "calls_per_step"] == 1
    assert c.loc["cap 25 MiB", "grad_storages"] == 16 and c.loc["cap 25 MiB, bucket view", "grad_storages"] == 1
    assert c.loc["cap 25 MiB", "bucket_MiB"] == pytest.approx(8 * (256 * 256 + 256) * 4 / 2 ** 20)


def test_bucket_table_the_rule_against_ddp_and_the_ledger():
    b = ddp_run.bucket_table(RUN).set_index("config")
    assert (b["ddp_buckets"] == b["rule_buckets"]).all() and (b["ddp_MiB"] == b["rule_MiB"]).all()
    assert (b["ledger_copy_MiB"] == b["measured_copy_MiB"]).all()
    assert b.loc["cap 25 MiB, bucket view", "ledger_copy_MiB"] == 0
    assert "in 7 of 7 setups" in lab06.bucket_sentence(b) and "sizes in 7 of 7" in lab06.bucket_sentence(b)


def test_the_run_keeps_every_invariant_the_recorder_checks():
    assert ddp_run.run_violations(RUN) == []
    assert ddp_run.run_violations(RANKS) == []
    for label in RUN.labels():
        t = ddp_run.table(RUN, label)
        assert (t["exposed_us"] <= t["comm_us"] + 1e-6).all() and (t["comm_us"] <= t["step_us"] + 1e-6).all()


def test_no_sync_bench_and_scaling_tables():
    ns = ddp_run.no_sync_counts(RUN).set_index("accumulation")
    assert ns.loc["plain", "allreduce_calls_per_optimizer_step"] == 2 * 8
    assert ns.loc["no_sync", "allreduce_calls_per_optimizer_step"] == 8
    bench = ddp_run.bench(RUN)
    assert list(bench["MiB"]) == [0.25, 1.0] and (bench["busbw_GBps"] == bench["algbw_GBps"]).all()  # n = 2
    s = ddp_run.scaling_table(RUN).set_index("basis")
    assert s.loc["profiled", "weak_scaling_bound"] == pytest.approx(2 * (1 - s.loc["profiled", "exposed_fraction"]))
    assert s.loc["profiled", "speedup"] <= s.loc["profiled", "weak_scaling_bound"] * ddp_run.BOUND_SLACK
    iv = analysis_distributed.steady_step_intervals(RUN.traces(ddp_run.SCALING_CONFIG))
    assert analysis_distributed.exposed_share(iv) == pytest.approx(s.loc["profiled", "exposed_fraction"])  # f and step from the same steps
    assert pd.isna(s.loc["timed", "exposed_fraction"])
    p = s.loc["profiled"]
    rest = p["ddp_step_ms"] * (1 - p["exposed_fraction"])  # the DDP step less its exposed all-reduce
    assert p["ddp_overhead_ms"] == pytest.approx(rest - p["one_rank_step_ms"]) and pd.isna(s.loc["timed", "ddp_overhead_ms"])
    said = lab06.scaling_sentence(p)
    c = bounds.bound_check(p["speedup"], p["weak_scaling_bound"], p["speedup_low"], p["speedup_high"])
    assert p["speedup_low"] <= p["speedup"] <= p["speedup_high"]
    assert said.endswith({"holds": f"{p['ddp_overhead_ms']:+.1f} ms the bound does not see.",
                          "undecided": "cannot tell whether the bound holds.",
                          "BEATEN": "how much the exposed communication cost."}[c.verdict])
    if c.verdict == "holds":
        assert "within the bound" in said and f"is {rest:.1f} ms against one rank alone's" in said


def _scaling_sets():
    """Every committed NCCL set (one RankRun per recorded set holding ddp_meta), each from its own recording."""
    out = []
    for st in evidence.load_all_sets():
        if "ddp_meta" in st.names():
            evs = [st.load(f"ddp_rank{r}") for r in range(st.load("ddp_meta").values["world"])]
            out.append(RankRun([e.values for e in evs], evs[0]))
    if not out:
        pytest.skip("no recorded NCCL set")
    return out


def test_scaling_sentence_prints_the_arithmetic_it_does_on_every_recorded_set():
    """The printed n x (1 - f) equals the printed bound (f = 0.045 prints as 0.045, never 0.04), the verdict word
    is bound_check's on the profiled row, and the tolerance is printed with it."""
    for run in _scaling_sets():
        p = ddp_run.scaling_table(run).set_index("basis").loc["profiled"]
        said = lab06.scaling_sentence(p)
        m = re.search(r"n\(1 - f\) = (\d+) x \(1 - ([0-9.]+)\) = ([0-9.]+)x", said)
        assert m, said
        n, f_shown, bound_shown = int(m.group(1)), m.group(2), m.group(3)
        d = len(bound_shown.split(".")[1])
        assert f"{n * (1 - float(f_shown)):.{d}f}" == bound_shown, said
        assert abs(float(f_shown) - p["exposed_fraction"]) <= 0.5 * 10 ** -len(f_shown.split(".")[1])
        c = bounds.bound_check(p["speedup"], p["weak_scaling_bound"], p["speedup_low"], p["speedup_high"])
        assert f"x {bounds.BOUND_SLACK:g} = " in said and ({"holds": "within the bound", "BEATEN": "ABOVE the bound",
                                                             "undecided": "undecided"}[c.verdict] in said)
        assert ddp_run.run_violations(run) == []  # the recorder's gate on the medians agrees with a committed set


def test_times_are_fractions_and_parts_of_their_wholes():
    t = ddp_run.sweep_times(RUN)
    for col in ("hidden_under_backward", "hta_overlap", "ddp_reducer_overlap"):
        assert t[col].between(0, 1).all(), col
    assert (t["exposed_ms"] <= t["comm_ms"] + 1e-9).all() and (t["comm_ms"] <= t["step_ms"] + 1e-9).all()
    assert "Fastest profiled step" in lab06.sweep_sentence(t)
    assert lab06.reducer_sentence(t).count(", reducer ") == len(t)


def test_the_straggler_is_seen_as_wait():
    starts = ddp_run.straggler_starts(RUN)
    assert list(starts.columns) == ["step", "seq", "rank", "start_us", "end_us"]
    slept = RUN.config("straggler")["straggle_ms"] * 1e3
    assert analysis_distributed.wait_at(starts, 0) > 0.5 * slept and analysis_distributed.wait_at(starts, 1) < 0.5 * slept  # rank 1 sleeps: rank 0 waits
    w = analysis_distributed.overlap_table(RUN.traces("straggler")).groupby("rank")["wait_us"].mean()
    assert w[0] > w[1]


def test_timeline_and_busbw_figures():
    trs = RUN.traces("cap 0.25 MiB")
    p = analysis_distributed.phase_intervals(trs[0], step=1)
    assert len(p["forward"]) == 1 and len(p["optimizer"]) == 1 and len(p["all-reduce"]) >= 1
    assert p["forward"][0][1] <= p["backward compute"][0][0]  # forward ends before backward starts
    fig = present_distributed.timeline_figure(trs)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["rank 0", "rank 1"]
    fig = present_distributed.busbw_figure(ddp_run.bench(RUN), 450.0, "NVLink 4")
    assert fig.axes[0].get_ylabel() == "busbw (GB/s)" and len(fig.axes[0].lines) == 2


def test_words_follow_the_backend():
    assert RUN.backend == "gloo" and "gloo" in lab06.WORDS[RUN.backend]["comm"]
    assert "NCCL" in lab06.WORDS["nccl"]["comm"] and "gloo" not in lab06.WORDS["nccl"]["note"]
    assert lab06.link_peak(RUN) == (None, "")
    nccl = RankRun([dict(r, backend="nccl") for r in RANKS])
    assert lab06.link_peak(nccl)[0] == scaling.NVLINK4_GBS
    run, why = lab06.exercise_run(RUN, None)
    assert run is RUN and "live gloo run" in why
    assert lab06.exercise_run(RUN, nccl) == (nccl, "Evidence: the recorded NCCL run (2 ranks).")
    assert "16 gradient tensors (8 of 1 KiB, 8 of 256 KiB)" in lab06.gradient_summary(RUN.config("cap 25 MiB"))


def test_recorded_run_is_found_in_any_recorded_set(tmp_path, monkeypatch):
    root = tmp_path / "recorded"
    for name, have in (("nvidia-h200", False), ("2x-nvidia-h200", True)):
        w = evidence.EvidenceWriter(root / name, "test")
        w.write("device", {})
        if have:
            for r in RANKS:
                w.write(f"ddp_rank{r['rank']}", r)
            w.write("ddp_meta", {"world": 2, "backend": "gloo"})
        w.close()
    (root / "DEFAULT").write_text("nvidia-h200\n")
    monkeypatch.setenv("INFRALENS_DATA", str(root))
    rec = lab06.recorded_run()
    assert rec is not None and rec.world == 2 and ddp_run.sweep_counts(rec).equals(ddp_run.sweep_counts(RUN))
    assert lab06.recorded_status(rec).startswith("Recorded NCCL run: present, 2 ranks")
    keys_lab06._runs.cache_clear()
    try:
        bench = keys_lab06.bench_cases()
        assert bench[0].args[0]["bytes"].tolist() == ddp_run.bench_inputs(RUN)["bytes"].tolist()
        assert not bench[0].held_out and all(c.held_out for c in bench[1:])  # one set: its own, then perturbed copies
        assert keys_lab06.exposed_cases() is not None and keys_lab06.recorded_straggler() is not None
    finally:
        keys_lab06._runs.cache_clear()


def test_missing_recording_is_said_plainly(monkeypatch, tmp_path):
    monkeypatch.setenv("INFRALENS_DATA", str(tmp_path / "none"))
    assert lab06.recorded_run() is None
    assert "not in this checkout yet" in lab06.recorded_status(None) and "--only device,distributed" in lab06.recorded_status(None)
    keys_lab06._runs.cache_clear()
    try:
        assert keys_lab06.bench_cases() is None and keys_lab06.exposed_cases() is None and keys_lab06.recorded_straggler() is None
        assert lab06.held_out_run(RUN)[0] is RUN
    finally:
        keys_lab06._runs.cache_clear()


def test_model_inputs_without_a_recording_are_labelled_assumptions():
    mi = lab06.model_inputs(None)
    assert mi["grad_bytes"] == 4 * mi["params"] and mi["backward_s"] == pytest.approx(mi["compute_s"] * 2 / 3)
    assert mi["intra_busbw_gbs"] is None and mi["source"].startswith("assumed")
    df = scaling.multinode_model(mi["compute_s"], mi["backward_s"], mi["grad_bytes"], mi["hidden_fraction"])
    assert df["efficiency"].is_monotonic_decreasing and (df["step_ms"] >= df["comm_ms"]).all()
    assert mi["ddp_overhead_s"] == 0 and "not modelled" in df.attrs["label"]
    measured = lab06.model_inputs(RUN)  # any run with the tables the model reads
    assert measured["source"].startswith("measured") and measured["backward_s"] <= measured["compute_s"]
    assert measured["ddp_overhead_s"] >= 0


def test_the_model_on_the_recorded_nccl_run_meets_its_own_two_gpu_measurement():
    """Fed the recorded run, the model's 2-GPU row lands near the profiled DDP step it was measured from (its comm
    is alpha + beta fitted on the benchmark for every bucket, not the traced all-reduce with its waits): within 15 %.
    Every NCCL set: tests/test_distributed_cost.py."""
    rec = lab06.recorded_run()
    if rec is None or rec.backend != "nccl":
        pytest.skip("no recorded NCCL set in this checkout")
    mi = lab06.model_inputs(rec)
    df = scaling.multinode_model(**ddp_run.model_kwargs(mi))
    row = ddp_run.scaling_table(rec).iloc[0]
    assert df["step_ms"].iloc[0] == pytest.approx(row["one_rank_step_ms"])
    assert df.set_index("gpus").loc[2, "step_ms"] == pytest.approx(row["ddp_step_ms"], rel=0.15)
    assert mi["ddp_overhead_s"] > 0  # on GPUs a DDP rank computes longer than one GPU alone
    assert f"alpha = {1e6 * mi['alpha_s']:.1f} µs a call" in df.attrs["label"]


def test_derived_questions_mark_against_the_tables():
    counts = ddp_run.sweep_counts(RUN)
    assert check("lab06.q3", 8, evidence=counts.assign(config=counts["config"].replace("cap 0.25 MiB", "cap 1 MiB"))).correct
    ns = ddp_run.no_sync_counts(RUN)
    assert check("lab06.q5", 8, evidence=ns).correct and not check("lab06.q5", 16, evidence=ns).correct


def test_exercises_are_marked_by_the_formulas_the_tables_use():
    bench = ddp_run.bench_inputs(RUN)  # ex1 and ex3 ask for functions (tests/test_functions_lab06.py): a value is refused
    right = scaling.busbw(scaling.algbw(float(bench["bytes"].iloc[-1]), float(bench["seconds"].iloc[-1])), 2)
    assert "asks for a function" in check("lab06.ex1", right).message
    plan = keys_lab06.gpu_model_plan()
    assert plan == ddp_run.plan_inputs(measure_distributed.GPU_MODEL, 100)
    # 64 x Linear(2048) at 100 MiB: 7 layers (112 MiB) a bucket, 10 buckets; bytes / cap would say 11
    assert check("lab06.ex2", 10, evidence=plan).correct and not check("lab06.ex2", 11, evidence=plan).correct
    iv = analysis_distributed.steady_step_intervals(RUN.traces(ddp_run.SCALING_CONFIG))
    assert "asks for a function" in check("lab06.ex3", analysis_distributed.exposed_share(iv)).message
    starts = ddp_run.straggler_starts(RUN)
    assert check("lab06.ex4", analysis_distributed.wait_at(starts, 0) / 1e3, evidence=starts).correct
    assert not check("lab06.ex4", analysis_distributed.wait_at(starts, 0), evidence=starts).correct  # µs, not ms


def test_unanswered_exercises_say_so(capsys):
    assert check("lab06.ex2", ..., evidence=keys_lab06.gpu_model_plan()).status == "unanswered"
    assert "not answered yet" in capsys.readouterr().out


def test_worked_questions_agree_with_the_package_arithmetic():
    """q2, q6 and q9 give their numbers in the prompt: their stored answers are the package's own arithmetic."""
    o = analysis_distributed.overlap([(0.0, 4.0), (6.0, 10.0)], [(2.0, 7.0)])
    assert check("lab06.q2", o["hidden_fraction"]).correct and o["hidden_fraction"] == pytest.approx(0.375)
    assert check("lab06.q6", scaling.weak_scaling_bound(0.30, 2)).correct and not check("lab06.q6", 0.7).correct
    assert check("lab06.q9", 3.0 + 1.0).correct and not check("lab06.q9", 1.0).correct
    assert buckets.bucket_count(**keys_lab06.gpu_model_plan()) == 10  # 64 x Linear(2048) at 100 MiB: 7 layers a bucket


def test_the_formula_derivation_refuses_what_it_cannot_call():
    with pytest.raises(DerivationError, match=re.escape("expected 'module:function' of infralens_lab.analysis")):
        derive("formula", {}, fn="../etc:passwd")
    with pytest.raises(DerivationError, match="cannot be loaded"):
        derive("formula", {}, fn="buckets:no_such_function")
    with pytest.raises(DerivationError, match="on this evidence failed"):
        derive("formula", {"wrong": 1}, fn="buckets:bucket_count")
    assert derive("formula", {"grad_bytes_ready_order": [2 ** 20] * 3, "bucket_cap_mb": 1}, fn="buckets:bucket_count") == 3


def test_reducer_spans_mark_averages_no_steady_step_could_hold():
    sp = ddp_run.reducer_spans(RUN)
    assert list(sp.columns) == ["config", "rank", "comm_ms", "compute_ms", "step_ms", "longer_than_step"]
    assert len(sp) == RUN.world * len(RUN.ranks[0]["configs"])  # every config on every rank (gloo has the timers)
    assert (sp["longer_than_step"] == (sp[["comm_ms", "compute_ms"]].max(axis=1) > sp["step_ms"])).all()
    t = ddp_run.sweep_times(RUN)
    assert lab06.reducer_sentence(t, sp.assign(longer_than_step=False)) == lab06.reducer_sentence(t)
    rec = recorded_run()
    if rec is None:
        return
    rs = ddp_run.reducer_spans(rec)
    for r in rs.itertuples():  # the averages are DDP's own numbers, in ms
        tm = rec.ranks[r.rank]["configs"][[c["label"] for c in rec.ranks[r.rank]["configs"]].index(r.config)]["ddp_timers_ns"]
        assert r.comm_ms == pytest.approx(tm["avg_backward_comm_time"] / 1e6)
    # the recorded NCCL run: the sweep's first DDP model (cap 1 MiB) is the one whose averages no steady step holds,
    # which is why its reducer overlap (0.25) and the trace's (0.88) disagree while the other caps agree
    assert set(rs.loc[rs["longer_than_step"], "config"]) == {"cap 1 MiB"}
    assert rec.ranks[0]["configs"][0]["label"] == "cap 1 MiB"
    r0 = rs[(rs["config"] == "cap 1 MiB") & (rs["rank"] == 0)].iloc[0]
    said = lab06.reducer_sentence(ddp_run.sweep_times(rec), rs)
    assert (f"cap 1 MiB: rank 0's average communication span is {r0.comm_ms:.1f} ms against a steady step of "
            f"{r0.step_ms:.1f} ms") in said and said.count("No steady iteration spans more than its step") == 1


def test_scaling_by_set_gives_one_line_per_set_and_flags_a_flip():
    """One line per NCCL set, each from its own recording; FLIP exactly when the sets' verdicts differ (here the
    recorded set against the live gloo run of this file, as two sets); one set says there is no second to compare."""
    runs = [(name, run) for name, run in [("recorded", r) for r in _scaling_sets()[:1]] + [("gloo", RUN)]]
    lines = ddp_run.scaling_by_set(runs)
    verdicts = {bounds.bound_check(p["speedup"], p["weak_scaling_bound"], p["speedup_low"], p["speedup_high"]).verdict
                for p in (ddp_run.scaling_table(r).set_index("basis").loc["profiled"] for _, r in runs)}
    assert lines[0].startswith("recorded: Profiled steps") and lines[1].startswith("gloo: Profiled steps")
    assert (len(lines) == 3 and "FLIP" in lines[2]) == (len(verdicts) > 1) and len(lines) == 2 + (len(verdicts) > 1)
    assert "no second GPU to compare" in ddp_run.scaling_by_set(runs[:1])[0]
