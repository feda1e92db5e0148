"""analysis.clocks: the SM clock each kernel ran at under ncu, read from real recorded CSVs."""
from __future__ import annotations

import pytest

from infralens_lab import evidence
from infralens_lab.analysis.clocks import CLOCK_METRIC, has_clock, kernel_clock_ghz
from infralens_lab.parse import ncu as N


def test_kernel_clock_of_the_recorded_attention_kernels():
    st = evidence.reference()
    df = N.parse_raw_csv(st.text("ncu_attention.csv"))
    ghz = kernel_clock_ghz(df)
    rows = df[df["metric"] == CLOCK_METRIC]
    # one value per kernel, the mean of its launches' sm__cycles_elapsed.avg.per_second (Hz) in GHz
    for kernel, got in ghz.items():
        assert got == pytest.approx(rows.loc[rows["kernel"] == kernel, "value"].mean() / 1e9)
    assert set(ghz.index) == set(rows["kernel"]) and ((ghz > 0.5) & (ghz < 3.0)).all()  # a GPU clock, in GHz
    assert kernel_clock_ghz(df, by=["config", "kernel"]).index.nlevels == 2 and has_clock(df)


def test_a_csv_without_the_clock_says_which_metric_is_missing():
    st = evidence.reference()
    df = N.parse_raw_csv(st.text("ncu_attention.csv"))
    without = df[df["metric"] != CLOCK_METRIC]
    assert not has_clock(without)
    with pytest.raises(ValueError, match="no sm__cycles_elapsed.avg.per_second in this ncu data"):
        kernel_clock_ghz(without)
    with pytest.raises(TypeError, match="expected the tidy ncu frame"):
        kernel_clock_ghz([1, 2])
