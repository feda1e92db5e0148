"""Lab 04 prints the tiled attention kernels' FLOP rate beside the verdict line: both come from one kernel table
(``counters.store_kernel_table``, counter FLOPs, as lab 02), so the same ncu run shows one rate and one share."""
from __future__ import annotations

import helpers
import pytest

from infralens_lab.analysis import counters


def test_the_rate_lab_04_prints_is_the_verdicts():
    cell = next(c for c in helpers.code_cells_of("04") if "instructions issued" in c)
    assert 'rate = k.loc[name, "flops_per_s"]' in cell
    st = helpers.recorded_set("ceilings", files=("ncu_matmul.csv", "ncu_attention.csv"))
    k = counters.store_kernel_table(st).set_index("label")
    for name in ("attn_fwd", "attn_fwd_fast"):
        r = k.loc[name]
        # lab 04's cell prints the table's own rate (the verdict's), which is counter FLOPs over the ncu time
        assert r["flops_per_s"] == pytest.approx(r["flops"] / (r["time_us"] * 1e-6), rel=1e-12)
        assert f"{r['fraction_of_roof']:.0%}" in r["bound_text"] or r["decided_by"] != "FLOP/s roof"
        assert r["flops_source"] == "counters"  # the count lab 04 names in its sentence
