"""labs_support.lab05 (glue) and measure.overlap on the CPU: tables from synthetic traces checked by
hand, clear notes instead of crashes, the recorder step refusing without a GPU, and the compile study's
counts with a code-generation-free backend."""
import pandas as pd
import pytest

from infralens_lab.device import is_gpu
from infralens_lab.labs_support import lab05
from infralens_lab.measure import overlap as M
from infralens_lab.parse.trace import Trace
from infralens_lab.workloads.overlap import NeedsGpu


def X(name, cat, ts, dur, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _copy_steps(hidden: bool):
    """Two 1000 µs steps; each launches a 200 µs H2D copy and a 600 µs kernel. ``hidden``: the copy
    runs under the kernel (on another stream), else before it."""
    ev, corr = [], 0
    for s, t0 in enumerate((0.0, 1000.0)):
        ev.append(X(f"ProfilerStep#{s}", "user_annotation", t0, 1000))
        for name, cat, start, dur in (("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", t0 + 100 if hidden else t0 + 10, 200),
                                      ("gemm", "kernel", t0 + 10 if hidden else t0 + 210, 600)):
            corr += 1
            call = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel"
            ev.append(X(call, "cuda_runtime", t0 + corr, 1, correlation=corr))
            ev.append(X(name, cat, start, dur, pid=0, tid=7, correlation=corr))
    return Trace({"traceEvents": ev})


def test_copy_table_by_hand():
    t = lab05.copy_table({"exposed": (_copy_steps(False), None), "hidden": (_copy_steps(True), None)}).set_index("mode")
    assert t.loc["exposed", "hidden_fraction"] == 0.0
    assert t.loc["exposed", "exposed_copy_ms_per_step"] == pytest.approx(0.2)
    assert t.loc["hidden", "hidden_fraction"] == 1.0
    assert t.loc["hidden", "exposed_copy_ms_per_step"] == 0.0
    assert t.loc["exposed", "period_ms"] == pytest.approx(1.0)  # GPU-work ends 810 and 1810 µs apart by 1 ms
    assert t.loc["hidden", "copy_ms_per_step"] == pytest.approx(0.2)


def _pipe_trace(s0, s1, period, n=5):
    ev = []
    for i in range(n):
        a = i * period
        ev.append(X("stage0", "user_annotation", a, s0, tid=2))
        ev.append(X("stage1", "user_annotation", a + s0, s1, tid=1))
    return Trace({"traceEvents": ev})


def test_pipeline_table_by_hand():
    t = lab05.pipeline_table({1: _pipe_trace(2000, 3000, 5000), 2: _pipe_trace(2000, 3000, 3000)}).set_index("depth")
    assert t.loc[1, "period_ms"] == pytest.approx(5.0) and t.loc[1, "verdict"] == "serialised"
    assert t.loc[2, "period_ms"] == pytest.approx(3.0) and t.loc[2, "overlap_score"] == 1.0
    assert (t["sum_ms"] == 5.0).all() and (t["max_ms"] == 3.0).all()


def test_amdahl_table_by_hand():
    copies = pd.DataFrame({"mode": ["pinned", "double_buffered"], "period_ms": [2.0, 1.5],
                           "exposed_copy_ms_per_step": [0.5, 0.0]})
    pipe = pd.DataFrame({"depth": [1, 2], "stage0_ms": [2.0, 2.0], "stage1_ms": [3.0, 3.0], "period_ms": [5.0, 2.0]})
    launches = pd.DataFrame({"variant": ["eager", "graph"], "step_ms": [4.0, 1.0], "gpu_busy_ms_per_step": [1.0, 0.9]})
    t = lab05.amdahl_table(copies, pipe, launches, None).set_index("fix")
    assert t.loc["side stream + 2nd buffer", "amdahl_bound"] == pytest.approx(1 / (1 - 0.25))
    assert t.loc["side stream + 2nd buffer", "measured_speedup"] == pytest.approx(2.0 / 1.5)
    assert bool(t.loc["side stream + 2nd buffer", "within_bound"])
    # pipeline: 2 of 5 ms are off the slower stage -> bound 5/3; measured 2.5x is above it
    assert t.loc["second pipeline buffer", "amdahl_bound"] == pytest.approx(5 / 3)
    assert not bool(t.loc["second pipeline buffer", "within_bound"])
    assert t.loc["CUDA graph", "attacked_share"] == pytest.approx(0.75)
    assert t.loc["CUDA graph", "amdahl_bound"] == pytest.approx(4.0)
    assert lab05.amdahl_table(None, None, None, None) is None


def test_amdahl_evidence_matches_q7_formula():
    copies = pd.DataFrame({"mode": ["pinned"], "period_ms": [4.0], "exposed_copy_ms_per_step": [1.0]})
    assert lab05.amdahl_evidence(copies) == {"f": 0.25, "bound": pytest.approx(4 / 3)}
    assert lab05.amdahl_evidence(None) is None


def test_explain_error_prints_instead_of_raising(capsys):
    def needs():
        raise NeedsGpu("Thing", "Because reasons.")

    assert lab05.explain_error(needs) is None
    out = capsys.readouterr().out
    assert "Thing: not available here. Because reasons." in out and "Fix:" in out
    assert lab05.explain_error(lambda: 7) == 7
    with pytest.raises(ZeroDivisionError):  # other errors are not swallowed
        lab05.explain_error(lambda: 1 / 0)


class _Store:
    gpu = "Test GPU"

    def names(self):
        return ["device"]


def test_missing_records_print_a_note(capsys):
    assert lab05.recorded(None, "fusion") is None
    assert lab05.recorded(_Store(), "fusion") is None
    assert "`fusion`: not in the recorded set (Test GPU) yet" in capsys.readouterr().out
    assert lab05.copy_traces(_Store()) is None


def test_ask_prints_the_question(capsys):
    lab05.ask("lab05.q2")  # derived, evidence not at hand: the text only
    out = capsys.readouterr().out
    assert out.startswith("lab05.q2") and "hidden under kernels" in out
    lab05.ask("lab05.q1")
    assert "B) Copy, then matmuls" in capsys.readouterr().out


def test_live_cpu_paths():
    d = lab05.live_dispatches(ops=10)
    assert (d["cpu_ops"] == 10).all()
    if not is_gpu():
        assert (d["launch_calls"] == 0).all() and lab05.live_copies() is None and lab05.live_launches() is None
    trs = lab05.live_pipeline(items=3, stage_ms=(2.0, 3.0))
    assert set(trs) == {1, 2}
    for tr in trs.values():  # structure only: tests never assert speed
        assert len(lab05.A.range_intervals(tr, "stage0")) == 3 == len(lab05.A.range_intervals(tr, "stage1"))


def test_compile_study_counts_with_eager_backend():
    v = M.compile_study("cpu", width=8, blocks=3, batch=2, repeats=2, backend="eager")
    c = lab05.compile_counts(v).set_index("variant")
    assert c.loc["compiled", "graph_calls_per_forward"] == 1
    assert c.loc["compiled_breaks", "graph_calls_per_forward"] == 3  # one graph per block
    assert v["new_shape"]["batch"] == 3
    assert v["explain_breaks"].get("break_reasons") or "error" in v["explain_breaks"]
    with pytest.raises(ValueError, match="inner backend"):
        M.CountingBackend("cudagraphs")


def test_wall_rejects_bad_counts():
    with pytest.raises(ValueError, match="positive ints"):
        M.wall(lambda: None, repeats=0)


@pytest.mark.skipif(is_gpu(), reason="checks the refusal on a machine without a GPU")
def test_record_into_without_gpu_fails_every_part_and_writes_nothing():
    written = []

    class W:
        def write(self, name, *a, **k):
            written.append(name)

    logs = []
    with pytest.raises(RuntimeError, match="every overlap part failed"):
        M.record_into(W(), quick=True, log=logs.append)
    assert written == []
    assert any("NeedsGpu" in line for line in logs)
    with pytest.raises(NeedsGpu):
        M.h2d_bandwidth()
    with pytest.raises(NeedsGpu):
        M.launch_study()


def test_recorder_knows_the_overlap_step():
    from infralens_lab import record

    assert "overlap" in record.STEPS and hasattr(record.Recorder, "step_overlap")
    assert set(M.RECORDS) >= {"overlap_h2d", "trace_pipeline_d2", "compile_study", "fusion"}


def test_derived_questions_mark_against_the_notebooks_evidence():
    from infralens_lab.quiz import check

    copies = lab05.copy_table({"exposed": (_copy_steps(False), None), "double_buffered": (_copy_steps(True), None)})
    assert check("lab05.q2", 1.0, evidence=copies).correct
    assert not check("lab05.q2", 0.5, evidence=copies).correct
    pipe = lab05.pipeline_table({1: _pipe_trace(2000, 3000, 5000), 2: _pipe_trace(2000, 3000, 3500)})
    assert check("lab05.q4", 0.75, evidence=pipe).correct  # (5 - 3.5) / 2
    assert not check("lab05.q4", 0.2, evidence=pipe).correct
    counts = pd.DataFrame({"variant": ["compiled", "compiled_breaks"], "graph_calls_per_forward": [1, 6]})
    assert check("lab05.q6", 6, evidence=counts).correct and not check("lab05.q6", 1, evidence=counts).correct
    ev = lab05.amdahl_evidence(pd.DataFrame({"mode": ["pinned"], "period_ms": [1.0], "exposed_copy_ms_per_step": [0.6]}))
    assert check("lab05.q7", 2.5, evidence=ev).correct and not check("lab05.q7", 1.6, evidence=ev).correct


def test_grader_rebuilds_the_notebooks_copy_evidence(monkeypatch):
    """The grader's providers for q2 and q7 (quiz.grading_evidence) build the notebook's copy table and
    Amdahl evidence from the recorded copy traces (here synthetic ones, in place of the recorded set)."""
    from infralens_lab.quiz import grader as G
    from infralens_lab.quiz import question

    trs = {"exposed": (_copy_steps(False), None), "double_buffered": (_copy_steps(True), None),
           "pinned": (_copy_steps(False), None)}
    monkeypatch.setattr(lab05, "store", lambda: _Store())
    monkeypatch.setattr(lab05, "copy_traces", lambda st: trs)
    G.grader_evidence.cache_clear()
    try:
        assert G.expected_for_grading(question("lab05.q2")) == pytest.approx(1.0)  # every copy under a kernel
        f = lab05.amdahl_evidence(lab05.copy_table(trs))["f"]
        assert 0 < f < 1 and G.expected_for_grading(question("lab05.q7")) == pytest.approx(1 / (1 - f))
    finally:
        G.grader_evidence.cache_clear()
