"""Every recorded ncu launch row holds together, in every committed set.

One raw-page row is one launch, so its duration's avg, min, max and sum are one value; and two different kernels of
one file never share every launch statistic and duration (a synthetic set written over a real one through a linked
test folder once made two kernels' rows identical: docs/kernels_notes.md, run 12b)."""
from __future__ import annotations

import pytest

from infralens_lab import evidence
from infralens_lab.parse import ncu

TIME = "gpu__time_duration"
SAME_IF_COPIED = ("gpu__time_duration.sum", "launch__registers_per_thread", "launch__block_size",
                  "sm__cycles_elapsed.avg.per_second")


def _ncu_files():
    for name in evidence.recordings():
        folder = evidence.data_root() / name
        for f in sorted(folder.glob("ncu_*.csv")):
            if "source" not in f.name:
                yield pytest.param(f, id=f"{name}/{f.name}")


FILES = list(_ncu_files())


def test_the_recorded_ncu_files_are_found():
    names = {p.values[0].parent.name for p in FILES}
    assert {"nvidia-h200", "nvidia-h100-80gb-hbm3", "nvidia-h200-gluon"} <= names


@pytest.mark.parametrize("path", FILES)
def test_one_launch_has_one_duration_and_kernels_differ(path):
    df = ncu.parse_raw_csv(path.read_text())
    t = df[df["metric"].str.startswith(TIME + ".")]
    assert len(t), f"{path}: no {TIME} row"
    for key, g in t.groupby(["config", "kernel", "launch"]):
        values = set(g["value"].round(3))
        assert len(values) == 1, f"{path} {key}: {TIME} avg/min/max/sum differ within one launch: {sorted(values)}"
    w = df[df["metric"].isin(SAME_IF_COPIED)].pivot_table(index=["config", "kernel", "launch"], columns="metric",
                                                          values="value", aggfunc="first")
    w = w.dropna()
    for kernel_a, ra in w.groupby(level="kernel"):
        for kernel_b, rb in w.groupby(level="kernel"):
            if kernel_a < kernel_b:
                shared = set(map(tuple, ra.to_numpy().round(3))) & set(map(tuple, rb.to_numpy().round(3)))
                assert not shared, f"{path}: {kernel_a} and {kernel_b} share every launch statistic: {shared}"


def test_a_set_written_from_another_kernels_row_is_refused(tmp_path):
    """The check fails on test_pingpong's synthetic set, whose rows are copied from attn_fwd_fast's D = 64 row."""
    import random

    from test_pingpong import synthetic_gluon_csv

    f = tmp_path / "ncu_gluon.csv"
    f.write_text(synthetic_gluon_csv(random.Random()))
    with pytest.raises(AssertionError, match=r"differ within one launch|share every launch statistic"):
        test_one_launch_has_one_duration_and_kernels_differ(f)
