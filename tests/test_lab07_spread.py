"""Issue 37 items 5 and 7 in lab 07: the host-bound rule with the forward's spread (one rule, a borderline verdict
with both numbers, flips between GPUs explained), the q5 key on steady kernel sums, and the wall-clock sentence
worded from the signs of the numbers, refused when a wall time is too wide. By hand, then on every committed
recorded set that holds lab 07's evidence (each GPU from its own recording)."""
from __future__ import annotations

import pytest

from infralens_lab import evidence
from infralens_lab.analysis import formats, overlap
from infralens_lab.labs_support import lab07
from infralens_lab.parse.trace import load_trace
from infralens_lab.quiz import check, question
from infralens_lab.stats import SPREAD_LIMIT, Spread, SpreadTooWide

FORMATS = ("channels_first", "channels_last")


def _sets() -> list[str]:
    out = []
    for slug in evidence.recordings():
        names = set(evidence.reference(slug).names())
        if {"gates_gpu", *(f"resnet_trace_{f}" for f in FORMATS)} <= names:
            out.append(slug)
    return out


SETS = _sets()


@pytest.fixture(scope="module", params=SETS)
def recorded(request):
    st = evidence.reference(request.param)
    gev = st.load("gates_gpu")
    return st, {f: (load_trace(st.load(f"resnet_trace_{f}")), None) for f in FORMATS}, gev


def test_both_gpus_are_committed():
    assert {"nvidia-h100-80gb-hbm3", "nvidia-h200"} <= set(SETS), SETS


# ---------------------------------------------------------------- the rule, by hand
def test_host_pace_calls_a_share_clear_of_the_threshold_and_flags_one_within_the_spread():
    assert overlap.host_pace(2.0, Spread(8.0, 7.9, 8.1, 30)).verdict == "host-bound"  # 24.7-25.3 %
    assert overlap.host_pace(6.0, Spread(8.0, 7.9, 8.1, 30)).verdict == "not host-bound"  # 74-76 %
    v = overlap.host_pace(2.697, Spread(5.391, 4.973, 6.287, 30))  # H100 channels_last as recorded, issue 37
    assert v.verdict == "borderline" and v.busy == pytest.approx(0.50026, abs=1e-4)
    assert v.low == pytest.approx(2.697 / 6.287) and v.high == pytest.approx(2.697 / 4.973)
    s = v.sentence()
    assert s.startswith("borderline") and "50.0%" in s and "42.9-54.2%" in s and "threshold, 50%" in s
    assert v.short() == "borderline (busy 50.0%, 42.9-54.2% over the forward's p10-p90; threshold 50%)"
    assert overlap.host_pace(3.0, Spread(4.0, 2.0, 5.0, 9)).high == 1.0  # a share never exceeds the whole


@pytest.mark.parametrize("busy, fwd, match", [
    (0.0, Spread(8.0, 7.0, 9.0, 5), "expected positive times"),
    (1.0, Spread(8.0, 9.0, 7.0, 5), "p10 <= median <= p90"),
    (9.0, Spread(8.0, 7.0, 9.0, 5), "exceeds the forward's median"),
])
def test_host_pace_refuses_bad_input_naming_it(busy, fwd, match):
    with pytest.raises(ValueError, match=match):
        overlap.host_pace(busy, fwd)


def test_a_flip_is_traced_to_the_part_that_moved():
    h100 = overlap.host_pace(2.70, Spread(5.39, 4.97, 6.29, 30))  # borderline
    h200 = overlap.host_pace(2.40, Spread(8.05, 7.95, 8.14, 30))  # host-bound
    why = overlap.pace_flip_reason(h100, h200, "A", "B")
    assert "on the A the forward's own spread (4.97-6.29 ms)" in why and "wall time differs more (+49%" in why
    assert "host machine, not the GPU" in why
    kern = overlap.pace_flip_reason(overlap.host_pace(2.0, Spread(8.0, 7.9, 8.1, 5)),
                                    overlap.host_pace(6.0, Spread(8.2, 8.1, 8.3, 5)), "A", "B")
    assert "busy time differs more (+200%" in kern and "moved with the kernels" in kern
    spread_only = overlap.pace_flip_reason(overlap.host_pace(4.02, Spread(9.65, 5.71, 14.96, 30)),
                                           overlap.host_pace(3.72, Spread(8.88, 8.71, 9.01, 30)), "A", "B")
    assert "both forwards sit below the threshold (41.7% on the A, 41.9% on the B)" in spread_only
    assert "not because the share moved" in spread_only
    with pytest.raises(ValueError, match="a flip needs two different verdicts"):
        overlap.pace_flip_reason(h200, h200, "A", "B")


# ---------------------------------------------------------------- q5 and the wall-clock sentence, by hand
def test_family_saving_and_its_spread_rule():
    fams = {"channels_first": {"layout transform": 600.0, "gemm": 300.0, "conv": 3100.0},
            "channels_last": {"conv": 2700.0}}
    g = formats.family_saving(fams, samples={"channels_first": [4000.0], "channels_last": [2700.0, 2701.0]})
    assert g["kernel_saved_us"] == 1300.0 and g["share"] == pytest.approx(600 / 1300)
    assert g["kernel_spread"]["channels_last"].n == 2
    with pytest.raises(SpreadTooWide, match="channels_last kernel time per forward"):
        formats.family_saving(fams, samples={"channels_first": [4000.0], "channels_last": [2000.0, 2700.0, 3400.0]})
    with pytest.raises(ValueError, match="saved none"):
        formats.family_saving({"channels_first": {"a": 1.0}, "channels_last": {"a": 2.0}})
    with pytest.raises(ValueError, match=r"formats \['channels_last'\] not in"):
        formats.family_saving({"channels_first": {"a": 1.0}})


@pytest.mark.parametrize("wall_last, words", [
    (Spread(8.5, 8.45, 8.55, 30), "only part of it reached the wall clock"),  # 0.5 of 1.0 ms saved
    (Spread(7.0, 6.95, 7.05, 30), "the wall time fell more than the kernel time"),  # 2.0 of 1.0
    (Spread(8.0, 7.8, 8.2, 30), "within the spread, all of it"),  # 1.0 (0.7-1.3)
    (Spread(9.5, 9.45, 9.55, 30), "it rose"),
    (Spread(9.0, 8.7, 9.3, 30), "holds no change at all"),  # 0 (-0.35 to 0.35)
])
def test_the_wall_sentence_follows_the_sign_of_the_numbers(wall_last, words):
    g = formats.saving_on_wall({"channels_first": 3.0, "channels_last": 2.0},
                               {"channels_first": Spread(9.0, 8.95, 9.05, 30), "channels_last": wall_last})
    assert g["steady"] and words in formats.saving_sentence(g)


def test_the_wall_sentence_refuses_a_wide_wall_time():
    g = formats.saving_on_wall({"channels_first": 4.0, "channels_last": 2.7},
                               {"channels_first": Spread(9.65, 5.71, 14.96, 30),
                                "channels_last": Spread(5.39, 4.97, 6.29, 30)})
    assert not g["steady"] and "share" not in g
    s = formats.saving_sentence(g)
    assert "channels_first's p10-p90 (5.71-14.96 ms) spans 96%" in s and "cannot say" in s


# ---------------------------------------------------------------- on each committed recorded set
def test_one_verdict_per_forward_with_its_numbers(recorded):
    st, traces, gev = recorded
    busy = lab07.busy_table(traces, gev).set_index("format")
    pace = lab07.pace_verdicts(traces, gev)
    for f, v in pace.items():
        assert busy.loc[f, "verdict"] == v.verdict  # the table and the sentence: one rule, one verdict
        assert busy.loc[f, "busy_pct"] == pytest.approx(100 * v.busy)
        inside = v.low < overlap.HOST_BOUND_BELOW <= v.high
        assert (v.verdict == "borderline") == inside, (st.gpu, f, v)
        assert f"{100 * v.busy:.1f}%" in v.sentence() and f"{100 * overlap.HOST_BOUND_BELOW:.0f}%" in v.sentence()


def test_h100_channels_last_is_borderline_not_a_clean_no():
    """Issue 37.7: 50.02 % busy with the forward's p10-p90 putting it at 42.9-54.2 %."""
    st = evidence.reference("nvidia-h100-80gb-hbm3")
    traces = {f: (load_trace(st.load(f"resnet_trace_{f}")), None) for f in FORMATS}
    v = lab07.pace_verdicts(traces, st.load("gates_gpu"))["channels_last"]
    assert v.verdict == "borderline" and v.low < 0.5 < v.high


def test_gpus_side_by_side_and_every_flip_explained():
    table, verdicts = lab07.pace_by_gpu()
    assert set(table["gpu"]) == set(verdicts) and len(verdicts) == len(SETS)
    flips = overlap.pace_flips(verdicts)
    differ = [f for f in FORMATS if len({verdicts[g][f].verdict for g in verdicts}) > 1]
    assert {line.split(":")[0] for line in flips} == set(differ)
    assert all("Why:" in line for line in flips)


def test_q5_key_is_steady_and_the_check_accepts_it(recorded):
    _, traces, gev = recorded
    g = lab07.layout_saving(traces, gev)
    assert all(s.rel <= SPREAD_LIMIT for s in g["kernel_spread"].values())
    cmp = lab07.format_compare(traces).set_index("family")  # the table the learner reads the answer from
    d = cmp["channels_first_us"] - cmp["channels_last_us"]
    by_table = d["layout transform"] / d["all kernels"]
    assert g["share"] == pytest.approx(by_table)
    assert check("lab07.q5", round(by_table, 2), evidence=g).correct
    # a learner who divides by channels_first's whole kernel time is told so, not told to convert units
    wrong = check("lab07.q5", d["layout transform"] / cmp.loc["all kernels", "channels_first_us"], evidence=g)
    assert not wrong.correct and "not by channels_first's whole kernel time" in wrong.message
    assert "convert" not in question("lab07.q5").feedback.get("low", "")


def test_the_wall_sentence_on_each_set_matches_its_spread(recorded):
    st, traces, gev = recorded
    g = lab07.layout_saving(traces, gev)
    w = formats.saving_on_wall({f: us / 1e3 for f, us in g["kernel_us"].items()},
                               {f: formats.forward_spread(gev.values, f) for f in FORMATS})
    wide = [f for f in FORMATS if formats.forward_spread(gev.values, f).rel > SPREAD_LIMIT]
    s = formats.saving_sentence(w)
    assert ("cannot say" in s) == bool(wide), (st.gpu, s)
    if st.gpu.startswith("NVIDIA H100"):
        assert wide == ["channels_first", "channels_last"]  # 96 % and 24 % of their medians, issue 37.5


def test_the_graph_sentence_follows_the_sign_of_its_speedup():
    def rows(eager, graph):
        return {"rows": [{"variant": v, "median_ms": m, "p10_ms": lo, "p90_ms": hi, "n": 30, "kernels": [282, 282],
                          "kernel_us": 2700.0} for v, (m, lo, hi) in (("eager", eager), ("cuda_graph", graph))]}
    fast = formats.graph_gain(rows((5.05, 4.94, 6.13), (2.78, 2.77, 2.78)))  # the H100's channels_last, issue 37
    assert "1.82x faster (1.78-2.21x" in fast and "2.27 of its 5.05 ms were the host's launches" in fast
    assert "got slower" in formats.graph_gain(rows((2.0, 1.99, 2.01), (3.0, 2.99, 3.01)))
    assert "no change beyond the spread" in formats.graph_gain(rows((3.0, 2.8, 3.2), (3.0, 2.8, 3.2)))


def test_kernel_spread_lines_say_when_one_forward_is_all_there_is():
    g = formats.family_saving({"channels_first": {"x": 2.0}, "channels_last": {"x": 1.0}},
                              samples={"channels_first": [2.0], "channels_last": [1.0, 1.001]})
    first, last = formats.kernel_spread_lines(g)
    assert "one profiled forward" in first and "not in this recording" in first
    assert "n=2" in last and "the spread rule allows 10%" in last
