"""The project's own count gates (marked ``gates``; they run in ``make test``): the package's workloads
against data/gates.json, a deliberately broken workload that makes a gate fail, the regressions each
count catches or misses, the Triton launch counter, and clear errors for bad threshold files."""
from __future__ import annotations

import json

import pytest

from infralens_lab import gates_cli
from infralens_lab.device import is_gpu
from infralens_lab.measure import gates
from infralens_lab.measure import gates_record as GR
from infralens_lab.workloads.gated import GATED, REGRESSIONS, MLPStep, make_gated

pytestmark = pytest.mark.gates
CPU_ONLY = ("the file's counts were measured on a CPU build; gpu mode is not where they run (`make gates-gpu` runs them "
            "in interpreter mode, the counts that differ by build keyed to it)")


@pytest.fixture(scope="module")
def thresholds():
    return gates.load_thresholds()


@pytest.mark.parametrize("workload", ["tinygpt_step", "copies", "attention_naive", "attention_tiled"])
def test_project_count_gates_pass(thresholds, workload):
    if is_gpu():
        pytest.skip(CPU_ONLY)
    verdicts = gates_cli.check_counts(thresholds, [workload])
    assert verdicts, f"no gates for {workload} in {thresholds['path']}"
    failed = [v.message for v in verdicts if not v.passed]
    assert not failed, failed


def test_broken_workload_fails_the_sync_gate(thresholds):
    """The bubble pipeline reads loss.item() every step: held to the fixed step's gates, it fails."""
    rules = thresholds["counts"]["tinygpt_step"]
    broken = {"path": "test", "counts": {"tinygpt_step_bubble": {"syncs_per_step": rules["syncs_per_step"]}}}
    (v,) = gates_cli.check_counts(broken)
    assert not v.passed and v.measured == 1 and v.metric == "syncs_per_step"


def test_triton_launch_counter_names_kernels():
    step = make_gated("attention_naive")
    step()
    with gates.triton_launches() as got:
        step()
        step()
    assert dict(got) == {"naive_qk": 2, "naive_softmax": 2, "naive_pv": 2}


def test_regressions_caught_and_missed():
    """Each injected regression against the intended step, counted on this machine."""
    def counts(reg):
        s = MLPStep(reg, device="cpu")
        c = gates.count_step(s)
        return c, gates.graph_breaks(s.chain, *s.chain_args()).breaks

    base, base_breaks = counts(None)
    assert (base.syncs_per_step, base_breaks) == (0, 0)
    item, _ = counts("item")
    assert item.syncs_per_step == 1 and item.ops["aten::_local_scalar_dense"] == 1
    nc, _ = counts("noncontig")
    assert nc.ops.get("aten::clone") == 1 and "aten::clone" not in base.ops  # reshape copied the input
    assert nc.peak_bytes > base.peak_bytes
    _, lf_breaks = counts("lost_fusion")
    assert lf_breaks == 1
    fp32, fp32_breaks = counts("fp32_matmul")  # nothing a count sees: only time (on a GPU) can catch it
    assert (fp32.ops, fp32.syncs_per_step, fp32.peak_bytes, fp32_breaks) == \
        (base.ops, base.syncs_per_step, base.peak_bytes, base_breaks)


def test_optimizer_step_counter_is_not_a_sync():
    """AdamW reads its host-resident step counter with .item(): not a device sync, not counted."""
    c = gates.count_step(make_gated("tinygpt_step"), peak=False)
    assert c.ops.get("aten::_local_scalar_dense", 0) > 0 and c.syncs_per_step == 0


def _write(tmp_path, data) -> str:
    p = tmp_path / "gates.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


@pytest.mark.parametrize("data, match", [
    ('{"schema": 1, "counts": {', "not valid JSON"),
    ({"schema": 2}, "schema 2"),
    ({"schema": 1, "cuonts": {}}, "unknown keys"),
    ({"schema": 1, "counts": {"resnet": {"syncs_per_step": {"max": 0}}}}, "unknown workload 'resnet'"),
    ({"schema": 1, "counts": {"copies": {"kernels_per_step": {"max": 0}}}}, "unknown metric 'kernels_per_step'"),
    ({"schema": 1, "counts": {"copies": {"syncs_per_step": {"max": "0"}}}}, "expected {\"max\": number}"),
    ({"schema": 1, "counts": {"copies": {"syncs_per_step": {"atmost": 0}}}}, "expected {\"max\": number}"),
    ({"schema": 1, "ratios": {"copy": {"tolerance": 0.05, "k": 5}}}, "unknown ratio 'copy'"),
    ({"schema": 1, "ratios": {"coalesced / copy_ (float32)": {"tolerance": 5, "k": 5}}}, "fraction in"),
    ({"schema": 1, "counts_build": "gpu"}, "counts_build 'gpu'; expected one of"),
    ({"schema": 1, "build_dependent": {"kernels": "why"}}, "build_dependent = "),
    ({"schema": 1, "build_dependent": {"peak_bytes": "why"}, "counts_by_build": {"rocm": {}}}, "builds among"),
    ({"schema": 1, "counts": {"copies": {"syncs_per_step": {"max": 0}}}, "build_dependent": {"peak_bytes": "why"},
      "counts_by_build": {"cuda-gpu": {"copies": {"syncs_per_step": {"max": 0}}}}}, "only for the build-dependent"),
    ({"schema": 1, "counts": {"copies": {"peak_bytes": {"max": 1}}}, "build_dependent": {"peak_bytes": "why"},
      "counts_by_build": {"cuda-gpu": {"copies": {"peak_bytes": {"below": 1}}}}}, "counts_by_build\\['cuda-gpu'\\]"),
])
def test_bad_threshold_files(tmp_path, data, match):
    with pytest.raises(gates.ThresholdError, match=match):
        gates.load_thresholds(_write(tmp_path, data))


def test_missing_threshold_file_and_cli(tmp_path, capsys):
    with pytest.raises(gates.ThresholdError, match="no threshold file at"):
        gates.load_thresholds(tmp_path / "nope.json")
    assert gates_cli.main(["--thresholds", str(tmp_path / "nope.json")]) == 2
    assert "no threshold file" in capsys.readouterr().err


def test_unknown_metric_when_measuring():
    with pytest.raises(gates.ThresholdError, match="unknown metric"):
        gates.measure_counts("copies", ["kernels_per_step"])
    with pytest.raises(ValueError, match="unknown gated workload"):
        make_gated("resnet")
    assert "tinygpt_step_bubble" in GATED and set(REGRESSIONS) == {"item", "noncontig", "lost_fusion", "fp32_matmul"}


def test_cli_counts_pass_and_fail(tmp_path, capsys):
    if is_gpu():
        pytest.skip(CPU_ONLY)
    ok = {"schema": 1, "counts": {"copies": {"launches_per_step": {"equals": 2}}}}
    assert gates_cli.main(["--thresholds", _write(tmp_path, ok), "--json", str(tmp_path / "v.json")]) == 0
    assert json.loads((tmp_path / "v.json").read_text())[0]["passed"] is True
    bad = {"schema": 1, "counts": {"copies": {"launches_per_step": {"equals": 1}}}}
    assert gates_cli.main(["--thresholds", _write(tmp_path, bad)]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_ratio_gates_refuse_without_gpu(capsys):
    if is_gpu():
        pytest.skip("this test is about interpreter mode")
    assert gates_cli.main(["--ratios"]) == 2
    assert "interpreter mode" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="need a GPU"):
        gates.ratio_samples(lambda: None, lambda: None, 1)


def test_recorder_regressions_dry_run_on_cpu():
    """The recorder's regression part, run on a CPU at tiny sizes with k=1 (compiled rows use dynamo's
    eager backend there): every row is present and the counts match the live table's story."""
    rows = GR._regressions(1, "cpu", dict(batch=2, seq=8, width=16))
    assert [(r["regression"], r["compiled"]) for r in rows] == \
        [(r, c) for c in (False, True) for r in ("intended", *REGRESSIONS)]
    eager = {r["regression"]: r for r in rows if not r["compiled"]}
    assert eager["item"]["syncs_per_step"] == 1 and eager["intended"]["syncs_per_step"] == 0
    assert eager["lost_fusion"]["graph_breaks"] == 1
    assert all(len(r["ratio_samples"]) == 1 and r["ratio_samples"][0] > 0 for r in rows)


def test_gates_command_is_wired(tmp_path, capsys):
    from infralens_lab.__main__ import main as cli

    assert cli(["gates", "--thresholds", str(tmp_path / "nope.json")]) == 2
    assert "no threshold file" in capsys.readouterr().err


# ---------------------------------------------------------------- counts keyed to the build (issue 37.8)
def test_the_committed_file_keys_peak_bytes_to_each_build(thresholds):
    """On the build the counts were measured on every rule holds; the CUDA builds hold peak bytes to their own
    limits (recorded on an H200 with `gates --record-counts`, 2026-12-03), so nothing is left out on any of the
    three builds; a build without an entry leaves exactly the build-dependent counts out and keeps the rest."""
    assert thresholds["counts_build"] == "cpu" and set(thresholds["build_dependent"]) == {"peak_bytes"}
    for build in ("cpu", "cuda-interpreter", "cuda-gpu"):
        assert all(not left for _, left in gates_cli.count_rules(thresholds, build).values()), build
    for wl, limits in thresholds["counts_by_build"]["cuda-gpu"].items():
        assert set(limits) == {"peak_bytes"} and limits["peak_bytes"]["max"] > 0, wl
    unkeyed = dict(thresholds, counts_by_build={})
    for build in ("cuda-interpreter", "cuda-gpu"):
        for wl, (held, left) in gates_cli.count_rules(unkeyed, build).items():
            rules = thresholds["counts"][wl]
            assert set(left) == {"peak_bytes"} & set(rules) and set(held) == set(rules) - {"peak_bytes"}, (build, wl)


def test_count_build_names_this_machine():
    import torch

    assert gates.count_build() == ("cpu" if torch.version.cuda is None else f"cuda-{'gpu' if is_gpu() else 'interpreter'}")
    assert gates.count_build() in gates.BUILDS


def test_on_another_build_peak_bytes_is_skipped_with_its_reason(thresholds):
    if is_gpu():
        pytest.skip(CPU_ONLY)
    # the committed file keys both CUDA builds (recorded on an H200, 2026-12-03); a build it does not key skips
    assert set(thresholds["counts_by_build"]) == {"cuda-interpreter", "cuda-gpu"}
    unkeyed = dict(thresholds, counts_by_build={})
    vs = {v.metric: v for v in gates_cli.check_counts(unkeyed, ["attention_tiled"], build="cuda-gpu")}
    assert all(v.passed for v in vs.values()) and [m for m, v in vs.items() if v.skipped] == ["peak_bytes"]
    msg = vs["peak_bytes"].message
    assert "not gated on this build (cuda-gpu)" in msg and "measured on cpu" in msg and "allocator" in msg
    assert "--record-counts" in msg and vs["peak_bytes"].as_dict()["skipped"] is True


def test_a_build_keyed_limit_is_held_not_skipped(tmp_path, thresholds):
    if is_gpu():
        pytest.skip(CPU_ONLY)
    data = {"schema": 1, "counts": {"attention_tiled": thresholds["counts"]["attention_tiled"]},
            "build_dependent": thresholds["build_dependent"],
            "counts_by_build": {"cuda-gpu": {"attention_tiled": {"peak_bytes": {"max": 1}}}}}
    th = gates.load_thresholds(_write(tmp_path, data))
    (v,) = [v for v in gates_cli.check_counts(th, build="cuda-gpu") if v.metric == "peak_bytes"]
    assert not v.skipped and not v.passed and v.limit == 1


def test_record_counts_writes_this_builds_entry_and_the_cli_prints_skips(tmp_path, thresholds, capsys, monkeypatch):
    if is_gpu():
        pytest.skip(CPU_ONLY)
    data = {"schema": 1, "counts": {"attention_tiled": thresholds["counts"]["attention_tiled"]},
            "build_dependent": thresholds["build_dependent"]}
    path = _write(tmp_path, data)
    out = tmp_path / "counts.json"
    assert gates_cli.main(["--thresholds", path, "--record-counts", str(out)]) == 0
    rec = json.loads(out.read_text())
    entry = rec["counts_by_build"][rec["build"]]["attention_tiled"]
    assert list(entry) == ["peak_bytes"] and entry["peak_bytes"]["max"] == thresholds["counts"]["attention_tiled"]["peak_bytes"]["max"]
    assert entry["peak_bytes"]["slack"] == 0.05 and "counts_by_build" in capsys.readouterr().out
    monkeypatch.setattr(gates, "count_build", lambda: "cuda-interpreter")
    assert gates_cli.main(["--thresholds", path, "--counts"]) == 0
    text = capsys.readouterr().out
    assert "SKIP  attention_tiled" in text and "1 skipped on this build" in text and "measured on cpu" in text
