"""Ratio gates: which reference they are held to, and how the threshold file's tolerance and k are chosen."""
import json
import random
from types import SimpleNamespace

import pytest

from infralens_lab import evidence, gates_cli
from infralens_lab.analysis import gates as analysis_gates
from infralens_lab.measure import gates as measure_gates
from infralens_lab.measure.timing import percentile


def _noisy(centre, rel_sd, n=15, seed=0):
    rng = random.Random(seed)
    return [centre * (1 + rng.gauss(0, rel_sd)) for _ in range(n)]


def test_choose_gate_tight_samples_take_the_smallest_step():
    assert analysis_gates.choose_gate([_noisy(1.0, 0.001)]) == (analysis_gates.TOLERANCES[0], 3)


def test_choose_gate_widens_with_noise_and_takes_the_largest_k():
    tight, noisy = _noisy(1.0, 0.001, seed=1), _noisy(0.7, 0.06, seed=2)  # spreads ~0.3% and ~10%
    tol, k = analysis_gates.choose_gate([tight, noisy])
    low = analysis_gates.TOLERANCES[0]
    assert analysis_gates.runs_needed(analysis_gates.spread(noisy), low) > 9, "premise: at the lowest step this sample needs more than k_max runs"
    assert tol > low, "a ratio whose median of 9 runs still spreads past the lowest step must not be gated there"
    assert k >= analysis_gates.runs_needed(analysis_gates.spread(noisy), tol) and k >= 3
    assert analysis_gates.false_alarm_rate(noisy, k, tol) <= 0.01
    # the tight set alone would have been allowed the smallest step: the gate follows the noisier GPU
    assert analysis_gates.choose_gate([tight])[0] < tol


def test_choose_gate_takes_more_runs_to_outvote_a_lone_outlier():
    """One slow run in 15 (as in the recorded tiled_fast / sdpa samples): at k = 3 two draws of it fail a gate
    about 2% of the time; the smallest k that keeps false alarms at 1% or under is larger, at the same step."""
    xs = [1.0 + 0.001 * i for i in range(14)] + [0.94]
    assert analysis_gates.runs_needed(analysis_gates.spread(xs), analysis_gates.TOLERANCES[0]) <= 3 and analysis_gates.false_alarm_rate(xs, 3, analysis_gates.TOLERANCES[0]) > 0.01
    tol, k = analysis_gates.choose_gate([xs])
    assert tol == analysis_gates.TOLERANCES[0] and k > 3 and analysis_gates.false_alarm_rate(xs, k, tol) <= 0.01


def test_choose_gate_refuses_a_ratio_too_noisy_to_gate():
    with pytest.raises(ValueError, match=r"no tolerance in \[0.03, 0.05, 0.08, 0.1\].*spreads"):
        analysis_gates.choose_gate([_noisy(1.0, 0.4, seed=3)])
    with pytest.raises(ValueError, match="lengths \\[1\\]"):
        analysis_gates.choose_gate([[1.0]])


def test_threshold_file_is_what_the_recordings_call_for():
    """data/gates.json's ratio tolerances and k come from `gates --suggest` on the committed sets: a new
    recording that calls for other values fails here, naming the gate."""
    rules = measure_gates.load_thresholds()["ratios"]
    rows = analysis_gates.suggest(evidence.load_all_sets())
    assert {r["ratio"] for r in rows} == set(rules)
    for r in rows:
        assert (rules[r["ratio"]]["tolerance"], rules[r["ratio"]]["k"]) == (r["tolerance"], r["k"]), r
        assert len(r["sets"]) >= 2, "every committed set with gates_gpu takes part"


def test_every_named_ratio_gate_has_its_pair_and_no_other():
    """One list of ratio gates (issue 41): the names a threshold file may use are the ones the GPU step can time,
    and every gate the threshold file names is among them."""
    from infralens_lab.parse.gates import RATIO_GATE_NAMES

    assert list(measure_gates.RATIO_GATES) == list(RATIO_GATE_NAMES)
    assert set(measure_gates.load_thresholds()["ratios"]) <= set(RATIO_GATE_NAMES)


def test_gates_are_held_to_their_own_procedure():
    st = evidence.reference()
    ref = measure_gates.gate_references(st)
    samples = st.load("gates_gpu").values["ratio_gates"]
    for name, xs in samples.items():
        assert ref[name] == (pytest.approx(percentile(xs, 50)), "gates_gpu")
    bench = measure_gates.reference_ratios(st)
    assert set(bench) >= set(samples)


def test_a_set_without_gates_gpu_falls_back_to_the_bench():
    st = evidence.reference()
    bench = st.load("bench")
    fake = SimpleNamespace(names=lambda: ["bench"], load=lambda name: bench)
    ref = measure_gates.gate_references(fake)
    assert ref and all(src == "bench" for _, src in ref.values())
    first = bench.values["ratios"][0]
    assert ref[first["name"]][0] == pytest.approx(first["value"])


def test_suggest_command_prints_one_line_per_gate(capsys):
    assert gates_cli.main(["--suggest"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    rules = measure_gates.load_thresholds()["ratios"]
    assert len(out) == len(rules)
    for line in out:
        name = line.split('": {')[0].strip('"')
        assert json.loads(line[line.index("{"):line.index("}") + 1]) == rules[name]


def test_count_gates_are_refused_in_gpu_mode(monkeypatch, capsys):
    """`make gates-gpu` runs the count gates in interpreter mode (keyed to that build), so the command run in gpu
    mode says how to run them instead of running them."""
    import infralens_lab.device as device

    monkeypatch.setattr(device, "is_gpu", lambda: True)
    monkeypatch.setattr(device, "numpy_interpreter_problem", lambda: None)  # the lent GPU's own numpy is 2.5
    assert gates_cli.main(["--counts"]) == 2
    err = capsys.readouterr().err
    assert "refusing the count gates in gpu mode" in err and "INFRALENS_MODE=interpreter" in err


def test_numpy_too_new_for_the_interpreter_is_explained(monkeypatch, capsys):
    """Seen on the lent GPU machine's own Python (numpy 2.4): the count gates' interpreter run failed deep in
    Triton. The version check says why, and the gates command refuses with the fix."""
    import infralens_lab.device as device

    assert device.numpy_interpreter_problem("2.3.5") is None and device.numpy_interpreter_problem("1.26.4") is None
    msg = device.numpy_interpreter_problem("2.4.0")
    assert "numpy 2.4.0 is installed, expected numpy < 2.4" in msg and "make install" in msg
    monkeypatch.setattr(device, "numpy_interpreter_problem", lambda: msg)
    assert gates_cli.main(["--counts"]) == 2
    assert "numpy 2.4.0 is installed" in capsys.readouterr().err
