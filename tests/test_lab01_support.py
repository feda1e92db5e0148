"""Lab 01: its glue (labs_support.lab01), the rules its sentences come from (analysis.bottleneck), its grading keys
(quiz.keys.lab01) and its exercises' derivations: the before/after table, idle time by cause and the bottleneck
statement on hand-built traces (every number computed by hand below), the live CPU-only trace, the ncu/nsys
command lines, missing records; and, on the recorded traces, the same tables, the keys and the derivations."""
from __future__ import annotations

from types import SimpleNamespace

import helpers
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import bottleneck, variants
from infralens_lab.analysis.joins import idle_budget
from infralens_lab.analysis.overlap import step_bound
from infralens_lab.device import is_gpu
from infralens_lab.labs_support import lab01
from infralens_lab.parse.ncu import demangled_regex
from infralens_lab.parse.trace import Trace, idle_by_cause, step_gpu_work
from infralens_lab.present.trace_tables import gap_view, hot_kernel_name, hot_kernels, ops_by_count, ranges_view
from infralens_lab.quiz.derive import derive
from infralens_lab.quiz.keys import lab01 as keys


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _bubble() -> Trace:
    """Two 1000 µs steps. Each: data 0-400 (aten::to inside), forward 400-500 launching one 200 µs kernel at
    +420, log 500-1000 waiting in aten::item 505-995. GPU busy [420, 620] and [1420, 1620]: one 800 µs gap."""
    ev = []
    for i, t in enumerate((0, 1000)):
        ev += [_x("user_annotation", f"ProfilerStep#{i + 1}", t, 1000),
               _x("user_annotation", "data", t, 400), _x("cpu_op", "aten::to", t + 10, 380),
               _x("user_annotation", "forward", t + 400, 100),
               _x("cuda_runtime", "cudaLaunchKernel", t + 410, 5, correlation=i + 1),
               _x("kernel", "gemm_kernel", t + 420, 200, pid=0, tid=7, correlation=i + 1, stream=7),
               _x("user_annotation", "log", t + 500, 500), _x("cpu_op", "aten::item", t + 505, 490)]
    return Trace({"traceEvents": ev})


def _fixed() -> Trace:
    """Two 500 µs steps, each launching one 460 µs kernel at +20: gaps of 40 µs only (under the 50 µs floor)."""
    ev = []
    for i, t in enumerate((0, 500)):
        ev += [_x("user_annotation", f"ProfilerStep#{i + 1}", t, 500),
               _x("user_annotation", "forward", t, 100),
               _x("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=i + 1),
               _x("kernel", "void at::native::elementwise_kernel<128, 4>(int, Foo)", t + 20, 460, pid=0, tid=7,
                  correlation=i + 1, stream=7)]
    return Trace({"traceEvents": ev})


def _traces():
    return {"bubble": (_bubble(), None), "fixed": (_fixed(), None)}


def test_idle_by_cause_hand_computed():
    c = idle_by_cause(_bubble()).set_index("cause")
    # gap 620-1420: aten::item 620-995 = 375 sync; launch 1410-1415 = 5; host: log 995-1000 (5) +
    # data 1000-1400 (400) + forward 1400-1420 less the launch (15) = 420; nothing unaccounted
    assert c["idle_us"].to_dict() == pytest.approx({"host": 420.0, "sync": 375.0, "launch": 5.0, "memcpy": 0.0,
                                                    "unaccounted": 0.0})
    assert list(c.index[:2]) == ["host", "sync"] and c["share"].sum() == pytest.approx(1.0)
    assert derive("argmax", idle_by_cause(_bubble()), column="idle_us", label="cause") == "host"
    empty = idle_by_cause(_fixed())
    assert empty["idle_us"].sum() == 0.0


def test_compare_hand_computed():
    cmp = lab01.compare(_traces()).set_index("version")
    assert cmp.loc["bubble", "period_ms"] == pytest.approx(1.0)  # GPU work ends at 620 and 1620
    assert cmp.loc["fixed", "period_ms"] == pytest.approx(0.5)  # GPU work ends at 480 and 980
    assert cmp.loc["bubble", "gpu_work_ms"] == pytest.approx(0.2) and cmp.loc["fixed", "gpu_work_ms"] == pytest.approx(0.46)
    assert cmp.loc["bubble", "cpu_step_ms"] == pytest.approx(1.0)
    assert cmp.loc["bubble", "gpu_util_pct"] == pytest.approx(20.0)  # 400 µs busy in 2000
    assert cmp.loc["fixed", "gpu_util_pct"] == pytest.approx(92.0)  # 920 / 1000
    # idle over the period's window (GPU ends 620 -> 1620): the one 800 µs gap, in one period
    assert cmp.loc["bubble", "idle_ms_per_step"] == pytest.approx(0.8) and cmp.loc["bubble", "largest_gap_ms"] == 0.8
    assert cmp.loc["bubble", "idle_gaps_per_step"] == 1.0
    assert cmp.loc["fixed", "idle_gaps_per_step"] == 0 and cmp.loc["fixed", "main_idle_cause"] == "none"
    assert cmp.loc["bubble", "main_idle_cause"] == "host"
    assert derive("ratio", cmp.reset_index(), num={"column": "period_ms", "where": {"version": "bubble"}},
                  den={"column": "period_ms", "where": {"version": "fixed"}}) == pytest.approx(2.0)


def test_step_gpu_work_skips_work_queued_before_the_window():
    tr = _fixed()
    tr2 = Trace({"traceEvents": tr.data["traceEvents"] + [
        _x("kernel", "left_over", -300, 250, pid=0, tid=7, correlation=99, stream=7)]})  # no launch in the window
    w = step_gpu_work(tr2)
    # times count from the first event, now the left-over kernel at -300 µs
    assert w["gpu_ops"].tolist() == [1, 1] and w["gpu_end_us"].tolist() == [780.0, 1280.0]
    assert w["gpu_work_us"].tolist() == [460.0, 460.0]


def test_hot_kernels_keep_the_whole_name_for_the_table_to_shorten():
    # A cut at 70 characters lost the end of a CUTLASS name (its tile and layout) and left the
    # table's hover showing the cut name; the presenter shortens for display and keeps the whole.
    name = "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)"
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 500),
          _x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),  # launched inside the profiled step
          _x("kernel", name, 20, 460, pid=0, tid=7, correlation=1, stream=7)]
    hot = hot_kernels(Trace({"traceEvents": ev}))
    assert hot["kernel"].tolist() == [name] and len(name) > 70


def test_gap_view_hot_kernels_and_statement():
    g = gap_view(_bubble())
    assert g[["start_ms", "gap_ms", "cause"]].values.tolist() == [[0.62, 0.8, "host"]]
    assert "aten::item" in g["cpu_ops"].iloc[0] and "data" in g["cpu_ranges"].iloc[0]
    tr = _fixed()
    hot = hot_kernels(tr)
    assert hot["launches"].tolist() == [2] and hot["total_ms"].tolist() == [pytest.approx(0.92)]
    assert hot["pct_of_kernel_time"].tolist() == [100.0]
    assert hot_kernel_name(tr) == "void at::native::elementwise_kernel<128, 4>(int, Foo)"
    lever = step_bound(0.5, 0.46, 0.1, 0.75, 8.0)  # GPU floor 0.46 * (0.25 + 0.75 / 8) = 0.158 ms over the CPU's 0.1
    text = bottleneck.bottleneck_statement(lab01.compare(_traces()), idle_by_cause(_bubble()), hot,
                                           {"sm_pct": 30.0, "memory_pct": 80.0, "dominant_stall": "long_scoreboard",
                                            "sm_clock_ghz": 1.755}, lever)
    assert "busy 20% of each 1.0 ms step" in text and "0.8 ms per step sit in idle gaps over 50 µs" in text
    assert "52% of that idle time while the CPU was in 'host' work" in text  # 420 / 800 = 52.5%, printed with .0f
    assert "at most 5.00x faster (Amdahl)" in text  # 100 / 20% busy
    # 1.0 / 0.5 ms = 2x; gain 1 of the possible 4 (5x - 1) = 25%; three edits, so no single cause is claimed
    assert "takes 0.5 ms per step: 2.00x, 100% more steps per second, 25% of the possible gain" in text
    assert "three edits at once" in text and "one-change table" in text and "bounded the step" not in text
    # 0.5 / 0.158 = 3.16x; the GPU floor decides (the CPU's 0.1 ms is lower), so the GPU-only bound is the same
    assert ("The next lever, TF32, is bounded at 3.16x with both floors: the GPU work left (0.2 ms) and the CPU's time "
            "per step (0.1 ms); the GPU work left decides (the GPU floor alone would allow 3.2x)") in text
    assert "80% of peak memory throughput, 30% of SM throughput at an SM clock of 1.75 GHz)" in text
    assert "reads memory-bound: 80% of its peak" in text and "'long_scoreboard' (waiting on a scoreboard dependency on an L1TEX" in text
    cpu_led = bottleneck.bottleneck_statement(lab01.compare(_traces()), idle_by_cause(_bubble()), None, None,
                                              step_bound(0.5, 0.46, 0.3, 0.75, 8.0))
    assert "bounded at 1.67x with both floors" in cpu_led and "the CPU's time per step decides" in cpu_led


def test_ranges_view_and_notes():
    r = ranges_view(_bubble()).set_index("range")
    assert list(r.index) == ["data", "forward", "log"]
    assert r.loc["forward", "gpu_ops_launched"] == 1.0 and r.loc["forward", "gpu_ms_per_step"] == pytest.approx(0.2)
    assert r.loc["log", "cpu_ms_per_step"] == pytest.approx(0.5)
    notes = bottleneck.range_notes(ranges_view(_bubble(), with_times=True), "bubble")
    assert any("'log' holds the CPU for 0.5 ms per step for 0.0 ms of GPU work" in n for n in notes)
    assert any("'data' holds the CPU for 0.4 ms per step for 0.0 ms of GPU work" in n for n in notes)
    assert not any("'forward'" in n for n in notes)  # 0.1 ms CPU vs 0.2 ms GPU: within a factor 2


def _live(version="bubble"):
    """The notebook's profiler cell, in short (torch_trace.profile runs the same schedule)."""
    tr = lab01.profile(lab01.live_step(version), wait=1, warmup=1, active=3)
    return tr, evidence.live(f"trace_{version}_live", {"summary": tr.summary()}, "test")


def test_idle_budget_hand_computed_and_on_the_recording():
    b = idle_budget(_bubble())  # window 620 -> 1620: busy 1420-1620, one 800 µs gap
    assert b == pytest.approx({"period_ms": 1.0, "busy_ms": 0.2, "idle_over_ms": 0.8, "idle_under_ms": 0.0,
                               "gaps_over_per_step": 1.0, "min_gap_us": 50.0})
    f = idle_budget(_fixed())  # window 480 -> 980: gap 480-520 (40 µs, under the threshold), busy 520-980
    assert f == pytest.approx({"period_ms": 0.5, "busy_ms": 0.46, "idle_over_ms": 0.0, "idle_under_ms": 0.04,
                               "gaps_over_per_step": 0.0, "min_gap_us": 50.0})
    assert idle_budget(_fixed(), min_gap_us=30)["idle_over_ms"] == pytest.approx(0.04)
    st = helpers.recorded_set("trace_bubble", "trace_fixed")
    for v, (tr, _) in lab01.recorded_traces(st).items():
        b = idle_budget(tr)
        # the split is exact: period = busy + gaps over + gaps under (float sums of ~1000 intervals)
        assert b["busy_ms"] + b["idle_over_ms"] + b["idle_under_ms"] == pytest.approx(b["period_ms"], rel=1e-9)
        assert b["idle_over_ms"] == pytest.approx(lab01.compare({v: (tr, None)})["idle_ms_per_step"].iloc[0])


def test_matmul_ceilings_and_q9_derivation(capsys):
    assert lab01.matmul_ceilings(None) is None and "no `ceilings` record" in capsys.readouterr().out
    st = helpers.recorded_set("ceilings")
    t, cap = lab01.matmul_ceilings(st)
    assert {"fp32", "tf32", "bf16"} <= set(t["dtype"]) and (t["rate_TFLOPs"] > 0).all() and st.gpu in cap
    want = t.set_index("dtype")["rate_TFLOPs"]
    got = derive("ratio", t, num={"column": "rate_TFLOPs", "where": {"dtype": "tf32"}},
                 den={"column": "rate_TFLOPs", "where": {"dtype": "fp32"}})
    assert got == pytest.approx(want["tf32"] / want["fp32"]) and got > 1


@pytest.mark.skipif(is_gpu(), reason="interpreter-mode behaviour; on a GPU see test_live_gpu_trace_has_kernels")
def test_live_cpu_trace_has_ranges_and_no_kernels():
    tr, ev = _live("bubble")
    assert not tr.has_gpu and ev.source == "live"
    r = ranges_view(tr)
    assert {"data", "forward", "backward", "optimizer", "log"} <= set(r["range"])
    assert "cpu_ms_per_step" not in r.columns  # CPU-only: no timings shown
    assert (r["per_step"] == 1.0).all() and (r["gpu_ops_launched"] == 0).all()
    ops = ops_by_count(tr)
    assert len(ops) == 8 and ops["op"].str.startswith("aten::").all()
    assert hot_kernel_name(tr) is None and hot_kernels(tr).empty
    with pytest.raises(ValueError, match="version 'slow'"):
        lab01.live_step("slow")


@pytest.mark.skipif(not is_gpu(), reason="needs a GPU")
def test_live_gpu_trace_has_kernels():
    tr, ev = _live("bubble")
    assert tr.has_gpu and ev.source == "live"
    assert hot_kernel_name(tr) and not hot_kernels(tr).empty
    r = ranges_view(tr)
    assert {"data", "forward", "backward", "optimizer", "log"} <= set(r["range"])
    assert (r.set_index("range").loc[["forward", "backward"], "gpu_ops_launched"] > 0).all()


@pytest.mark.skipif(is_gpu(), reason="interpreter-mode behaviour; on a GPU time_step really times")
def test_time_step_declines_in_interpreter_mode():
    t = lab01.time_step("fixed")
    assert not t.meaningful and t.median_ms is None and "interpreter" in t.note


def _check_timed_range_notes(r, version):
    """range_notes on a trace with a GPU side: one sentence per phase whose CPU time and GPU work are a factor
    apart, naming the phase and both numbers as the table has them, or the one sentence that says none is."""
    notes = bottleneck.range_notes(r, version)
    rows = {row.range: row for row in r.itertuples(index=False) if row.range in bottleneck.PHASES}
    assert notes and all(n.startswith(f"{version}: ") for n in notes)
    for n in notes:
        named = [p for p in rows if f"'{p}'" in n]
        if not named:
            assert "within a factor" in n and len(notes) == 1
            continue
        row = rows[named[0]]
        assert f"{row.cpu_ms_per_step:.1f} ms" in n and f"{row.gpu_ms_per_step:.1f} ms" in n
        apart = max(row.cpu_ms_per_step, row.gpu_ms_per_step) / max(min(row.cpu_ms_per_step, row.gpu_ms_per_step), 1e-9)
        assert apart > bottleneck.FACTOR, (n, row)


def test_range_notes_follow_the_trace_they_are_given():
    r = ranges_view(_live()[0])
    cpu_only = r.drop(columns=[c for c in ("gpu_ms_per_step", "cpu_ms_per_step") if c in r.columns])
    assert bottleneck.range_notes(cpu_only, "live") == ["live: CPU-only trace, so there is no GPU time to hold the "
                                                        "ranges against."]
    if "gpu_ms_per_step" in r.columns:  # a GPU machine: the live trace has a GPU side
        _check_timed_range_notes(r, "live")
    else:
        assert bottleneck.range_notes(r, "live") == bottleneck.range_notes(cpu_only, "live")
    for v, (tr, _) in lab01.recorded_traces(helpers.recorded_set("trace_bubble", "trace_fixed")).items():
        rv = ranges_view(tr, with_times=True)
        assert "gpu_ms_per_step" in rv.columns
        _check_timed_range_notes(rv, v)


def test_kernel_regex_and_commands():
    assert lab01.kernel_regex("void at::native::elementwise_kernel<128, 4>(int, Foo)") == "elementwise_kernel"
    assert lab01.kernel_regex("sm90_xmma_gemm_f32f32_tf32f32") == "sm90_xmma_gemm_f32f32_tf32f32"
    assert lab01.kernel_regex("ampere_sgemm_128x64_nn") == "ampere_sgemm_128x64_nn"
    with pytest.raises(ValueError, match="non-empty"):
        lab01.kernel_regex(" ")
    cmds = lab01.commands("void at::native::elementwise_kernel<128, 4>(int, Foo)")
    sol, full = cmds["ncu (speed of light of the hot kernel)"], cmds["ncu (everything, once the SOL says where to look)"]
    assert "--kernel-name-base demangled --kernel-name 'regex:^at::native::elementwise_kernel<128,\\ 4>'" in sol
    assert "--section SpeedOfLight" in sol
    assert demangled_regex("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)") \
        == "^cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
    assert demangled_regex("sm90_xmma_gemm_f32f32") == "^sm90_xmma_gemm_f32f32"
    assert demangled_regex("void f<(anonymous namespace)::Op>(int)") == "^f<\\(anonymous\\ namespace\\)::Op>"
    assert "--set full" in full and "--section" not in full and "--launch-count 1" in full
    assert sol.endswith("python -m infralens_lab target --kernel train_step --warmup 2 --iters 1")
    assert cmds["nsys (timeline)"].startswith("nsys profile --trace cuda,nvtx,osrt")


@pytest.mark.skipif(is_gpu(), reason="interpreter-mode behaviour; on a GPU the hot kernel is profiled live")
def test_missing_records_give_notes(capsys):
    assert lab01.recorded_traces(None) is None
    assert lab01.hot_kernel_ncu(None, "gemm") is None
    assert "no ncu_train_step.csv recorded and no ncu here" in capsys.readouterr().out
    assert lab01.recorded_timings(None) is None and lab01.matmul_ceilings(None) is None
    with pytest.raises(ValueError, match="no ProfilerStep"):
        step_gpu_work(Trace({"traceEvents": [_x("cpu_op", "aten::mm", 0, 5)]}))


# ------------------------------------------------------------------ the real recording, when there is one
def test_recorded_traces_before_after():
    st = helpers.recorded_set("trace_bubble", "trace_fixed")
    traces = lab01.recorded_traces(st)
    tr_b, tr_f = traces["bubble"][0], traces["fixed"][0]
    assert tr_b.has_gpu and tr_f.has_gpu
    cmp = lab01.compare(traces).set_index("version")
    for v in ("bubble", "fixed"):
        assert cmp.loc[v, "steps"] == 3 and cmp.loc[v, "period_ms"] > 0
        assert 0 < cmp.loc[v, "gpu_util_pct"] <= 100
        # the period is never shorter than the GPU busy time per step
        # a step cannot finish faster than its own GPU work runs, up to step-to-step variation
        assert cmp.loc[v, "period_ms"] >= 0.9 * cmp.loc[v, "gpu_work_ms"]
    causes = idle_by_cause(tr_b)
    assert derive("argmax", causes, column="idle_us", label="cause") in {"sync", "memcpy", "launch", "host", "unaccounted"}
    assert hot_kernel_name(tr_f) is not None
    assert lab01.kernel_regex(hot_kernel_name(tr_f))


def test_idle_by_cause_on_a_real_h200_trace_excerpt():
    import json
    from pathlib import Path

    data = Path(__file__).parent / "data"
    tr = Trace(json.loads((data / "trace_bubble_excerpt.json").read_text()))
    want = json.loads((data / "trace_bubble_excerpt.expected.json").read_text())
    c = idle_by_cause(tr)
    assert c["idle_us"].sum() == pytest.approx(sum(want["gap_us"]), abs=1e-3)  # every gap charged once
    assert c["cause"].iloc[0] == "host"
    g = gap_view(tr, top=3)
    longest = sorted(want["gap_us"], reverse=True)[:3]
    in_time_order = [x / 1e3 for x in want["gap_us"] if x in longest]  # gap_view lists them by start time
    assert g["gap_ms"].tolist() == pytest.approx(in_time_order, abs=1e-5)
    assert hot_kernel_name(tr) is not None


def test_quiet_profiler_chatter_drops_only_the_profiler_lines(capfd):
    import os

    with lab01.quiet_profiler_chatter():
        os.write(2, b"USDT: 12:00:01 pid 4242 profiler_start\n")
        os.write(2, b"a real native warning\n")
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert "USDT" not in err and "a real native warning" in err and "after" in err


# ------------------------------------------------------------------ one change at a time (pipeline_variants)
def test_variants_record_absent_says_so_in_one_line(capsys):
    from pathlib import Path

    h100 = evidence.RecordedStore(Path(__file__).resolve().parents[1] / "data" / "recorded" / "nvidia-h100-80gb-hbm3")
    assert "pipeline_variants" in h100.names() and lab01.variants(h100).values["variants"]
    capsys.readouterr()
    # a set recorded before the variants step existed (as the H100 set was until its re-recording)
    older = SimpleNamespace(gpu=h100.gpu, names=lambda: [n for n in h100.names() if n != "pipeline_variants"],
                            load=lambda name: pytest.fail(f"loaded {name}"))
    assert lab01.variants(None) is None and lab01.variants(older) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "(NVIDIA H100 80GB HBM3) has no `pipeline_variants` record yet" in lines[1]
    assert "record --only variants" in lines[1]


def test_variants_tables_from_a_synthetic_recorded_set(tmp_path):
    """A recorded set written by EvidenceWriter holding a SYNTHETIC pipeline_variants record (made-up numbers,
    no GPU recording of `variants` exists yet): lab01 loads it and builds both tables and their notes."""
    from test_variants import synthetic_record  # tests/ is on sys.path

    w = evidence.EvidenceWriter(tmp_path / "set", "SYNTHETIC test set")
    w.write("pipeline_variants", synthetic_record(), notes="SYNTHETIC")
    w.close()
    ev = lab01.variants(evidence.RecordedStore(tmp_path / "set"))
    one = variants.one_change_table(ev.values)
    assert one["variant"].iloc[-1] == "fixed" and one["speedup"].iloc[-1] == pytest.approx(25 / 20)
    assert any("19% faster" in n for n in variants.one_change_notes(one))
    prec = variants.precision_table(ev.values, {"fp32": 51.3, "tf32": 417.0, "bf16": 801.0})
    assert list(prec["top_kind"]) == ["fp32 SIMT GEMM", "tensor-core kernel", "tensor-core kernel"]
    assert len(variants.precision_notes(prec, values=ev.values)) == 2 and variants.FP32_GEMM == "sgemm|ffma"
    # lab01.q6 is derived from this table: the one-change row with the smallest speedup (pinned, synthetic)
    from infralens_lab.quiz import check

    small = one[one["kind"] == "one change"].set_index("variant")["speedup"].idxmin()
    assert check("lab01.q6", small, evidence=one).status == "correct"
    other = next(v for v in ("bubble+prefetch", "bubble+no_sync", "bubble+pinned") if v != small)
    wrong = check("lab01.q6", other, evidence=one)
    assert wrong.status != "correct" and "compare its speedup" in wrong.message


def test_q11_key_follows_the_recorded_set(monkeypatch, tmp_path):
    from test_variants import synthetic_record

    monkeypatch.setattr(keys, "_store", lambda: None)
    assert keys.one_change() is None and keys.tf32_fix() is None  # no recording: the grader's row says so
    w = evidence.EvidenceWriter(tmp_path / "set", "SYNTHETIC test set")
    w.write("pipeline_variants", synthetic_record(), notes="SYNTHETIC")
    w.close()
    monkeypatch.setattr(keys, "_store", lambda: evidence.RecordedStore(tmp_path / "set"))
    assert list(keys.one_change()["kind"]) == ["baseline"] + ["one change"] * 3 + ["bundle"]


def test_keys_are_what_the_notebook_computes_on_the_recording():
    """The grader's keys rebuild the notebook's evidence with the same functions: the derivations give the
    notebook's numbers (computed here the notebook's way), and the exercises' keys are the package's formulas."""
    st = helpers.recorded_set("trace_bubble", "trace_fixed", "pipeline_variants", "ceilings")
    traces = lab01.recorded_traces(st)
    tr_b, tr_f = traces["bubble"][0], traces["fixed"][0]
    cmp = lab01.compare(traces)
    assert keys.before_after().equals(cmp) and keys.bubble_row().equals(lab01.compare({"bubble": traces["bubble"]}))
    assert keys.idle_causes().equals(idle_by_cause(tr_b))
    assert keys.matmul_ceilings().equals(lab01.matmul_ceilings(st)[0])
    # exercise 1: 1 - busy/window over the steady window, as the worked solution computes it from the intervals
    a, b, _ = tr_b.steady_window()
    import numpy as np
    busy = np.array(tr_b.busy())
    inside = float((np.clip(busy[:, 1], a, b) - np.clip(busy[:, 0], a, b)).sum())
    assert derive("trace_idle_share", keys.bubble_trace()) == pytest.approx(1 - inside / (b - a))
    assert 100 * (1 - derive("trace_idle_share", tr_b)) == pytest.approx(cmp.set_index("version").loc["bubble", "gpu_util_pct"])
    # exercise 2: the spacing of the steps' GPU ends, the before/after table's period
    w = step_gpu_work(tr_b)
    ends = w["gpu_end_us"].to_numpy()
    assert derive("trace_period_ms", tr_b) == pytest.approx((ends[-1] - ends[0]) / (len(ends) - 1) / 1e3)
    assert derive("trace_period_ms", tr_b) == pytest.approx(cmp.set_index("version").loc["bubble", "period_ms"])
    # exercise 3: the hottest kernel's share, from the events the profiled steps launched
    ev = tr_f.gpu_events(scope="steps")
    k = ev[ev["cat"] == "kernel"].groupby("name")["dur_us"].sum()
    assert derive("hot_kernel_pct", keys.fixed_trace()) == pytest.approx(100 * k.max() / k.sum())
    assert k.idxmax() == hot_kernel_name(tr_f)
    # exercise 4: both floors on the untraced basis (issue 37.3); the CPU's decides on the recording, under Amdahl's
    fix = keys.tf32_fix()
    got = derive("step_bound", fix)
    g = fix["gpu_ms"] * ((1 - fix["fraction"]) + fix["fraction"] / fix["speedup"])
    assert got == pytest.approx(fix["period_ms"] / max(g, fix["cpu_ms"]))
    assert step_bound(**fix).limited_by == "cpu" and got < step_bound(**fix).gpu_only


def test_derivations_refuse_the_wrong_evidence():
    from infralens_lab.quiz.derive import DerivationError

    for name in ("trace_idle_share", "trace_period_ms", "hot_kernel_pct"):
        with pytest.raises(DerivationError, match="needs a parsed trace"):
            derive(name, {"not": "a trace"})
    with pytest.raises(DerivationError, match="step_bound needs a dict with"):
        derive("step_bound", {"period_ms": 1.0})
    with pytest.raises(DerivationError, match="no kernels"):
        derive("hot_kernel_pct", Trace({"traceEvents": []}))


def test_hot_kernel_ncu_reads_the_recorded_hot_kernel():
    st = helpers.recorded_set("trace_fixed")
    if is_gpu():
        pytest.skip("on a GPU the hot kernel is profiled live")
    hot = hot_kernel_name(lab01.recorded_traces(st)["fixed"][0])
    got = lab01.hot_kernel_ncu(st, hot)
    assert got is not None and set(got[0]["kernel"]) == {lab01.kernel_regex(hot)} and st.gpu in got[1]
