"""Ledger figures on synthetic ledgers: bars, peak stack and scaling panels, and clear errors."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from infralens_lab.present.ledger import DOMINANT_LABEL, MiB, ledger_bars, peak_figure, scaling_figure

PRED = pd.DataFrame({"category": ["weights", "activations", "KV cache"], "bytes": [2 * MiB, 8 * MiB, 0]})
MEAS = pd.DataFrame({"category": ["weights", "activations", "peak"], "bytes": [2 * MiB, 9 * MiB, 12 * MiB]})


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_ledger_bars_labels_each_value():
    fig = ledger_bars({"predicted": PRED, "measured": MEAS}, title="t")
    try:
        texts = _texts(fig)
        assert "8  (predicted)" in texts and "9  (measured)" in texts
        # KV cache is zero in every ledger and left out; peak is not in the first ledger
        ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        assert ticks == ["weights", "activations"]
    finally:
        plt.close(fig)


def test_ledger_bars_marks_a_missing_category():
    fig = ledger_bars({"predicted": PRED, "measured": MEAS}, categories=["weights", "peak"])
    try:
        assert "—  (predicted)" in _texts(fig) and "12  (measured)" in _texts(fig)
    finally:
        plt.close(fig)


def test_peak_figure_totals_and_peak_marker():
    fig = peak_figure({"rest": {"weights": 2 * MiB}, "mid": {"weights": 2 * MiB, "activations": 6 * MiB}},
                      peak={"mid": 10 * MiB})
    try:
        texts = _texts(fig)
        assert "2 MiB" in texts and "8 MiB" in texts and "peak 10 MiB" in texts
    finally:
        plt.close(fig)


def test_scaling_figure_panels_and_dominant_labels():
    table = pd.DataFrame({"model": ["s", "l", "s", "l"], "zero_stage": [0, 0, 3, 3],
                          "weights": [1, 10, 1, 1], "optimizer states": [2, 80, 1, 10],
                          "activations": [50, 20, 50, 20]})
    fig = scaling_figure(table)
    try:
        visible = [ax for ax in fig.axes if ax.get_visible()]
        assert [ax.get_title() for ax in visible] == ["zero_stage = 0", "zero_stage = 3"]
        ticks = [t.get_text() for ax in visible for t in ax.get_xticklabels()]
        assert ticks == ["s", "l", "s", "l"]
        # each bar's dominant term is outlined: (panel, bar) -> share of that term, in %
        outlined = [[(round(r.get_y(), 6), round(r.get_height(), 6)) for r in ax.patches if not r.get_fill()]
                    for ax in visible]
        # stage 0: s is 50/53 activations (above weights+optimizer), l is 80/110 optimizer states (above weights)
        assert outlined[0] == [(round(300 / 53, 6), round(5000 / 53, 6)), (round(1000 / 110, 6), round(8000 / 110, 6))]
        assert [t.get_text() for t in visible[-1].get_legend().get_texts()][-1] == DOMINANT_LABEL
        # every word on the figure is at least 9 pt, and the figure is shown at its own size
        sizes = [t.get_fontsize() for ax in visible for t in [*ax.get_xticklabels(), *ax.get_yticklabels(),
                                                              *ax.texts, ax.title]] + [t.get_fontsize() for t in fig.texts]
        assert min(sizes) >= 9, sizes
        assert fig.get_size_inches()[0] * fig.dpi <= 960  # shown at >= 0.85 of its size at 1280 px
    finally:
        plt.close(fig)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="non-empty mapping"):
        ledger_bars({})
    with pytest.raises(ValueError, match="unit 'KB'"):
        ledger_bars({"p": PRED}, unit="KB")
    with pytest.raises(ValueError, match="lacks columns \\['bytes'\\]"):
        ledger_bars({"p": PRED[["category"]]})
    with pytest.raises(TypeError, match="DataFrame"):
        ledger_bars({"p": [1, 2]})
    with pytest.raises(ValueError, match="negative"):
        peak_figure({"x": {"weights": -1}})
    with pytest.raises(TypeError, match="mapping category"):
        peak_figure({"x": 5})
    with pytest.raises(ValueError, match="facet column 'zero_stage'"):
        scaling_figure(pd.DataFrame({"model": ["a"], "weights": [1]}))
    with pytest.raises(ValueError, match="category columns \\['KV cache'\\]"):
        scaling_figure(pd.DataFrame({"model": ["a"], "weights": [1]}), categories=["KV cache"], facet=None)
