"""Lab 02's small-matmul readings follow the verdict table's own rule, size by size: the lever
(``counters.what_moves_it``), the idle-SM sentences (``roofline_notes.idle_sm_notes``) and the card's summary
(``roofline_notes.small_matmul_summary``), on the recorded set and on a table that makes each branch fire."""
from __future__ import annotations

import helpers
import pandas as pd

from infralens_lab.analysis import counters, launches
from infralens_lab.analysis import roofline as rl
from infralens_lab.analysis import roofline_notes as NT
from infralens_lab.parse.ncu import parse_raw_csv


def test_the_lever_says_how_much_of_the_gpu_the_grid_fills():
    assert "fills 73% of the GPU's block slots" in counters.what_moves_it("latency", 0.07, "matmul", "latency not hidden", 0.73)
    assert "though the grid fills the GPU" in counters.what_moves_it("latency", 0.07, "matmul", "latency not hidden", 1.0)
    assert "fills the GPU" not in counters.what_moves_it("latency", 0.07, "matmul", "latency not hidden", None)
    assert "more blocks" in counters.what_moves_it("latency", 0.02, "matmul", "grid below one wave", 0.36)


def _recorded():
    st = helpers.recorded_set("ceilings", files=("ncu_matmul.csv", "ncu_attention.csv"))
    kt = counters.store_kernel_table(st)
    mm = parse_raw_csv(st.text("ncu_matmul.csv"))
    factor = counters.tensor_flops_per_op(counters.tensor_op_check(mm)) or 1.0
    mt = launches.matmul_launches(mm, st.load("ceilings").values.get("sweep"),
                                  launches.tensor_peak_per_sm_cycle(mm, factor), factor)
    return kt, mt


def test_no_lever_says_the_grid_fills_the_gpu_below_one_wave():
    kt, _ = _recorded()
    for r in kt.itertuples():
        if r.bound == "latency" and r.waves < 1:
            assert "though the grid fills the GPU" not in r.what_would_move_it, r.label
            assert ("more blocks" in r.what_would_move_it) == (r.waves < rl.BOUND_THRESHOLD)


def test_idle_sm_notes_follow_the_verdict_per_size():
    kt, mt = _recorded()
    small = kt[(kt["group"] == "matmul fp16") & (kt["bound"] == "latency")]
    lines = NT.idle_sm_notes(kt, mt)
    assert len(lines) == len(small)
    for r, line in zip(small.itertuples(), lines, strict=True):
        assert line.startswith(f"{r.label}: {r.waves:.2f} waves")
        assert ("idle SMs come first" in line) == ("grid below one wave" in r.bound_reasons)
        occ = mt.set_index("size").loc[int(r.size), "occupancy_pct"]
        assert f"achieved occupancy {occ:.0f}%" in line
    summary = NT.small_matmul_summary(kt, mt)
    for r in small.itertuples():
        assert f"{r.label.split()[-1]} ({r.waves:.2f} waves)" in summary


def test_idle_sm_notes_on_a_table_with_both_reasons():
    kt = pd.DataFrame([
        {"label": "matmul 256³", "group": "matmul fp16", "bound": "latency", "size": 256, "waves": 0.36,
         "bound_reasons": "grid below one wave", "decided_by": "Memory %", "decided_pct": 9.0},
        {"label": "matmul 512³", "group": "matmul fp16", "bound": "latency", "size": 512, "waves": 0.73,
         "bound_reasons": "latency not hidden", "decided_by": "Memory %", "decided_pct": 12.0},
        {"label": "matmul 8192³", "group": "matmul fp16", "bound": "compute", "size": 8192, "waves": 1.0,
         "bound_reasons": "", "decided_by": "FLOP/s roof", "decided_pct": 99.0}])
    a, b = NT.idle_sm_notes(kt)
    assert "64% of the GPU's block slots empty" in a and "idle SMs come first" in a
    assert "fill 73% of the GPU's block slots (27% empty)" in b and "at most 1.37x" in b and "inside the kernel" in b
    s = NT.small_matmul_summary(kt)
    assert "256³ (0.36 waves) runs a grid below one wave" in s and "512³ (0.73 waves) fills more of the GPU" in s
    assert NT.small_matmul_summary(kt[kt["bound"] != "latency"]).startswith("No matmul size")
