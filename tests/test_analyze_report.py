"""What `python -m infralens_lab analyze` prints (issue 40): kernel names of any width shortened in the text while
the report keeps them whole; a folder of rank traces led by a one-line straggler verdict and its alignment table
capped; `analyze A B`, what changed between two traces of one program. Expected numbers come from the committed
traces and records, computed here from their events."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from infralens_lab import evidence
from infralens_lab.analysis import distributed
from infralens_lab.analysis import trace_diff as TD
from infralens_lab.analyze import ALIGN_ROWS_SHOWN, ALIGN_TABLE, DIFF_TABLES, analyze, diff, main
from infralens_lab.parse.trace import TraceError, load_trace, step_gpu_work
from infralens_lab.present import KERNEL_NAME_MAX_CHARS, kernel_name_short, kernel_names_short, shorten_names

H100 = "nvidia-h100-80gb-hbm3"
NCCL_SET = "2x-nvidia-h100-80gb-hbm3"
GLOO_RUN = Path(__file__).parent / "data" / "ddp_gloo_run.json"


def _write(tmp_path: Path, name: str, gpu: str = H100) -> Path:
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(evidence.reference(gpu).load(name).values))
    return p


def _spaced(name: str) -> bool:
    return name.replace(", ", ",").count(" ") > 2  # what present's tables take for prose, and leave whole


# ---------------------------------------------------------------- 5. kernel names of any width
def test_kernel_names_with_spaces_are_shortened_distinct_and_kept_whole(tmp_path):
    path = _write(tmp_path, "resnet_trace_channels_first")
    names = sorted(load_trace(json.loads(path.read_text())).kernels()["name"])
    spaced = [n for n in names if _spaced(n) and ("const" in n or "(anonymous namespace)" in n)]
    assert max(map(len, spaced)) > 1000  # the trace holds the case: names a thousand characters wide, with spaces
    assert shorten_names(spaced) == spaced  # what the notebooks show is unchanged: prose to shorten_names
    short = kernel_names_short(names)
    assert max(map(len, short)) <= KERNEL_NAME_MAX_CHARS
    assert len(set(short)) == len(set(names))  # distinct names stay distinct
    assert all(kernel_name_short(n) == n for n in names if len(n) <= 48)  # short names untouched

    rep = analyze(path)
    hot = rep.tables["hot kernels (launched in the profiled steps)"]
    wide = [n for n in hot["kernel"] if len(n) > 200 and _spaced(n)]
    assert wide, "expected a hot kernel with a long spaced name in this trace"
    text = rep.text()
    assert max(len(line) for line in text.splitlines()) < 400
    assert not any(n in text for n in wide)
    printed, _ = rep.shown("hot kernels (launched in the profiled steps)")
    assert all(len(n) <= KERNEL_NAME_MAX_CHARS for n in printed["kernel"])
    assert printed["kernel"].nunique() == hot["kernel"].nunique()
    kept = {r["kernel"] for r in rep.to_json()["tables"]["hot kernels (launched in the profiled steps)"]}
    assert set(wide) <= kept  # the full name is recoverable: the report and its JSON keep it


def test_names_alike_at_the_widest_cut_get_a_hash():
    base = "void f<" + ", ".join(f"float const* a{i}" for i in range(60))
    names = [base + f", int{i}>(int)" for i in range(3)] + ["k" * 30]
    short = kernel_names_short(names)
    assert len(set(short)) == 4 and max(map(len, short)) <= KERNEL_NAME_MAX_CHARS and short[-1] == "k" * 30


# ---------------------------------------------------------------- 6. a folder of rank traces: the verdict
def _gloo_folder(tmp_path: Path, label: str) -> tuple[Path, int]:
    run = json.loads(GLOO_RUN.read_text())
    for r in run:
        cfg = next(c for c in r["configs"] if c["label"] == label)
        (tmp_path / f"rank{r['rank']}.json").write_text(json.dumps(cfg["trace"]))
    return tmp_path, len(run)


def _nccl_folder(tmp_path: Path, label: str) -> Path:
    st = evidence.reference(NCCL_SET)
    for r in range(st.load("ddp_meta").values["world"]):
        cfg = next(c for c in st.load(f"ddp_rank{r}").values["configs"] if c["label"] == label)
        (tmp_path / f"rank{r}.json").write_text(json.dumps(cfg["trace"]))
    return tmp_path


def _planted() -> tuple[int, float]:
    """The NCCL record's planted straggler: measure.distributed makes the last rank (world - 1) sleep
    ``straggle_ms`` before each step; ddp_meta states the world and each config's straggle_ms."""
    meta = evidence.reference(NCCL_SET).load("ddp_meta").values
    m = re.search(r"DDPConfig\(label='straggler',[^()]*model=MLPConfig\([^()]*\), straggle_ms=([0-9.]+)\)", meta["spec"])
    assert m, "ddp_meta's spec names no straggler config"
    return meta["world"] - 1, float(m.group(1))


def test_the_nccl_record_names_its_planted_straggler(tmp_path, capsys):
    rank, straggle_ms = _planted()
    assert straggle_ms > 0
    folder = _nccl_folder(tmp_path, "straggler")
    rep = analyze(folder)
    verdict = rep.notes[0]
    assert verdict.startswith(f"straggler: rank {rank} arrives last")
    al = rep.tables[ALIGN_TABLE]
    st = distributed.stragglers(al)
    assert int(st["rank"].iloc[0]) == rank
    # two ranks: the wait the straggler causes is the other rank's whole wait, as the per-rank table has it
    per = rep.tables["per rank and step: communication, compute, exposed"]
    other = per[(per["rank"] != rank) & per["steady"]]
    assert st["caused_ms_per_step"].iloc[0] == pytest.approx(other["wait_us"].median() / 1e3, rel=1e-6)
    assert st["caused_ms_per_step"].iloc[0] >= straggle_ms  # it slept that long before each step
    assert f"{st['caused_ms_per_step'].iloc[0]:.3g} ms per step" in verdict
    # the sleep comes before the forward: the step's first all-reduce absorbs it
    assert st["worst_seq"].iloc[0] == 0 and "all-reduce #0" in verdict
    assert main([str(folder)]) == 0
    out = capsys.readouterr().out
    body = out.split(f"## {ALIGN_TABLE}\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(body) == 1 + ALIGN_ROWS_SHOWN + 1 and "--json has all" in body[-1]
    assert f"{len(al) - ALIGN_ROWS_SHOWN} of {len(al)} rows left out" in body[-1]
    assert len(rep.to_json()["tables"][ALIGN_TABLE]) == len(al)
    assert out.splitlines()[3] == f"- {verdict}"  # the verdict leads the notes


def test_a_calm_nccl_config_has_a_smaller_straggler(tmp_path):
    calm = distributed.stragglers(analyze(_nccl_folder(tmp_path, "cap 25 MiB")).tables[ALIGN_TABLE])
    _, straggle_ms = _planted()
    assert calm["caused_ms_per_step"].iloc[0] < straggle_ms


def test_the_gloo_folder_names_its_planted_straggler(tmp_path):
    folder, world = _gloo_folder(tmp_path, "straggler")
    rep = analyze(folder, cpu_ok=True)
    assert rep.notes[0].startswith(f"straggler: rank {world - 1} arrives last")
    st = distributed.stragglers(rep.tables[ALIGN_TABLE])
    assert st["caused_ms_per_step"].iloc[0] >= 10.0 and st["last_share"].iloc[0] > 0.5
    assert "rows left out" in rep.text()


def test_stragglers_by_hand():
    """Three ranks, two steps, two collectives a step: rank 2 starts last at both, rank 1 second."""
    rows = []
    for step in (0, 1):
        for seq, starts in enumerate(([0.0, 100.0, 400.0], [1000.0, 1100.0, 1150.0])):
            rows += [{"step": step, "seq": seq, "rank": r, "start_us": s + 5000 * step} for r, s in enumerate(starts)]
    st = distributed.stragglers(pd.DataFrame(rows))
    top = st.iloc[0]
    assert top["rank"] == 2 and top["last_at"] == 4 and top["collectives"] == 4
    assert top["caused_ms_per_step"] == pytest.approx((300 + 50) / 1e3)  # latest minus second latest, step 1
    assert top["worst_seq"] == 0 and top["worst_seq_ms"] == pytest.approx(0.3)
    assert set(st.loc[st["rank"] != 2, "caused_ms_per_step"]) == {0.0}
    with pytest.raises(ValueError, match="align"):
        distributed.stragglers(pd.DataFrame({"rank": [0]}))


# ---------------------------------------------------------------- analyze A B
def _expected(values: dict) -> dict:
    """From the trace's events: the steady period (spacing of the steps' GPU-work ends) and the GPU idle the
    host caused in that window per period (gaps over 50 µs, each gap's host time scaled to its part inside)."""
    tr = load_trace(values)
    ends = step_gpu_work(tr)["gpu_end_us"].to_numpy()
    a, b, n = ends[0], ends[-1], len(ends) - 1
    g = tr.idle_gaps()
    part = np.clip(g["end_us"], a, b) - np.clip(g["start_us"], a, b)
    host = float((g["host_us"] * part / g["gap_us"]).sum()) if len(g) else 0.0
    return {"period_ms": (b - a) / n / 1e3, "host_ms": host / n / 1e3}


def test_diff_of_the_bubble_and_its_fix(tmp_path, capsys):
    before, after = _write(tmp_path, "trace_bubble"), _write(tmp_path, "trace_fixed")
    exp_b, exp_a = (_expected(json.loads(p.read_text())) for p in (before, after))
    assert exp_a["period_ms"] < exp_b["period_ms"] and exp_a["host_ms"] < exp_b["host_ms"]  # the fix, in the events
    rep = diff(before, after)
    m = rep.tables[DIFF_TABLES[0]].set_index("metric")
    assert m.loc["period_ms", "before"] == pytest.approx(exp_b["period_ms"], rel=1e-9)
    assert m.loc["period_ms", "after"] == pytest.approx(exp_a["period_ms"], rel=1e-9)
    assert m.loc["period_ms", "change"] < 0 and m.loc["period_ms", "ratio"] < 1
    assert m.loc["gpu_busy_pct", "after"] > m.loc["gpu_busy_pct", "before"]
    idle = rep.tables[DIFF_TABLES[2]].set_index("cause")
    assert idle.loc["host", "before_ms"] == pytest.approx(exp_b["host_ms"], rel=1e-6)
    assert idle.loc["host", "after_ms"] == pytest.approx(exp_a["host_ms"], abs=1e-9)
    assert idle.loc["host", "change_ms"] < 0
    k = rep.tables[DIFF_TABLES[1]]
    assert set(k["status"]) <= set(TD.STATUSES)
    raw = load_trace(json.loads(before.read_text())).kernels()
    top = k.set_index("kernel").loc[raw["name"].iloc[0]]
    assert top["before_ms"] == pytest.approx(raw["total_us"].iloc[0] / len(step_gpu_work(load_trace(
        json.loads(before.read_text())))) / 1e3)
    assert any("steady period" in n for n in rep.notes)
    out_json = tmp_path / "diff.json"
    assert main([str(before), str(after), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "period_ms" in out and "host" in out and "before → after" in out
    assert len(json.loads(out_json.read_text())["tables"][DIFF_TABLES[1]]) == len(k)


def test_a_diff_of_two_programs_says_so(tmp_path, capsys):
    a, b = _write(tmp_path, "trace_bubble"), _write(tmp_path, "trace_launch_eager")
    with pytest.raises(TraceError, match=r"no kernel in common.*expected two traces of the same program"):
        diff(a, b)
    assert main([str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("analyze: trace_bubble.json and trace_launch_eager.json") and "Traceback" not in err


def test_diff_errors_name_what_was_seen(tmp_path):
    a = _write(tmp_path, "trace_bubble")
    folder = tmp_path / "ranks"
    folder.mkdir()
    with pytest.raises(TraceError, match="a folder; analyze A B compares two trace files"):
        diff(a, folder)
    assert main([str(a), str(tmp_path / "missing.json")]) == 2


def test_trace_diff_tables():
    b = pd.DataFrame({"kernel": ["gemm", "copy"], "ms": [2.0, 1.0], "launches": [1.0, 2.0]})
    a = pd.DataFrame({"kernel": ["gemm", "fill"], "ms": [1.0, 0.5], "launches": [1.0, 1.0]})
    t = TD.changes(b, a, "kernel", "ms", "launches").set_index("kernel")
    assert t.loc["gemm", "status"] == "both" and t.loc["gemm", "ratio"] == 0.5
    assert t.loc["copy", "status"] == "removed" and t.loc["copy", "after_ms"] == 0 and t.loc["copy", "ratio"] == 0
    assert t.loc["fill", "status"] == "added" and np.isnan(t.loc["fill", "ratio"])
    assert list(t.index) == ["copy", "gemm", "fill"]  # largest change first
    assert TD.common_share(t.reset_index(), "ms") == pytest.approx(3.0 / 4.5)
    c = TD.compare({"period_ms": 4.0, "x": 1.0}, {"period_ms": 3.0})
    assert c.to_dict("records") == [{"metric": "period_ms", "before": 4.0, "after": 3.0, "change": -1.0, "ratio": 0.75}]
    with pytest.raises(ValueError, match="expected"):
        TD.changes(b, a.drop(columns="ms"), "kernel", "ms")
