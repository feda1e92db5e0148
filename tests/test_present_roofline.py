"""The roofline figure on synthetic points: axes, roofs, labels, and clear errors for bad input."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import itertools
import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from infralens_lab.analysis.hardware import Ceilings, peaks_for
from infralens_lab.present.roofline import Roof, ridge_points, roofline_figure, roofs_from, si

T = 1e12


def _roofs():
    return [Roof("DRAM (copy)", 3.0 * T, "memory"), Roof("HBM3 datasheet", 3.35 * T, "memory", "peak"),
            Roof("fp16 matmul", 600 * T, "compute"), Roof("fp32 matmul", 50 * T, "compute")]


def _points():
    return pd.DataFrame([
        dict(label="copy", intensity=0.1, flops_per_s=0.25 * T, group="copies"),
        dict(label="softmax", intensity=1.5, flops_per_s=1.0 * T, group="attention", predicted_intensity=2.0),
        dict(label="mm 4096", intensity=900.0, flops_per_s=500 * T, group="matmul", predicted_intensity=float("nan")),
    ])


def _texts(fig):
    ax = fig.axes[0]
    return [t.get_text() for t in ax.texts]


def test_si_prefixes():
    assert si(3.21e12, "B/s") == "3.21 TB/s"
    assert si(663e12, "FLOP/s") == "663 TFLOP/s"
    assert si(5.0, "B") == "5 B"
    assert si(2.5e9, "B/s") == "2.5 GB/s"


def test_figure_is_log_log_with_labelled_roofs_and_points():
    fig = roofline_figure(_points(), _roofs(), title="synthetic")
    try:
        ax = fig.axes[0]
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        texts = "\n".join(_texts(fig))
        # every roof's value appears on the figure, in SI units
        for expected in ("3 TB/s", "3.35 TB/s", "600 TFLOP/s", "50 TFLOP/s"):
            assert expected in texts, (expected, texts)
        for label in ("copy", "softmax", "mm 4096"):
            assert label in _texts(fig)
        # the measured ridge: 600e12 / 3e12 = 200 FLOP/B
        assert "ridge 200 FLOP/B (measured)" in texts
        # every point lies inside the axes
        x0, x1 = ax.get_xlim()
        y0, y1 = ax.get_ylim()
        for _, r in _points().iterrows():
            assert x0 < r.intensity < x1 and y0 < r.flops_per_s < y1
        assert ax.get_title() == "synthetic"
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["copies", "attention", "matmul"]
    finally:
        plt.close(fig)


def test_point_labels_do_not_overlap():
    # ten points on a tight diagonal: the placer must find non-overlapping spots for their labels
    pts = pd.DataFrame([dict(label=f"kernel {i}", intensity=10 ** (i / 10), flops_per_s=10 ** (12 + i / 10))
                        for i in range(10)])
    fig = roofline_figure(pts, _roofs())
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        boxes = [t.get_window_extent() for t in ax.texts if t.get_text().startswith("kernel")]
        assert len(boxes) == 10
        overlaps = [(i, j) for i in range(10) for j in range(i + 1, 10) if boxes[i].overlaps(boxes[j])]
        assert overlaps == []
    finally:
        plt.close(fig)


def test_series_points_are_joined_and_empty_labels_skipped():
    pts = pd.DataFrame([
        dict(label="", intensity=0.5, flops_per_s=1 * T, group="L1", series="k"),
        dict(label="", intensity=2.0, flops_per_s=1 * T, group="L2", series="k"),
        dict(label="k", intensity=8.0, flops_per_s=1 * T, group="DRAM", series="k"),
    ])
    fig = roofline_figure(pts, _roofs())
    try:
        ax = fig.axes[0]
        joined = [ln for ln in ax.lines if list(ln.get_xdata()) == [0.5, 2.0, 8.0]]
        assert len(joined) == 1
        assert [t for t in _texts(fig) if t == "k"] == ["k"]
    finally:
        plt.close(fig)


def test_ridge_points_pairs_every_memory_and_compute_roof():
    got = {(m, c): v for m, c, v in ridge_points(_roofs())}
    assert len(got) == 4
    assert math.isclose(got[("DRAM (copy)", "fp16 matmul")], 200.0)
    assert math.isclose(got[("HBM3 datasheet", "fp32 matmul")], 50 / 3.35)


def test_roofs_from_ceilings_and_peaks():
    c = Ceilings(gpu="NVIDIA H100 80GB HBM3", copy_bw=3.0 * T, fp32=50 * T, tf32=None, fp16=600 * T)
    roofs = roofs_from(c, peaks_for(c.gpu), dtypes=("fp32", "tf32", "fp16"))
    measured = [(r.kind, r.value) for r in roofs if r.style == "measured"]
    assert measured == [("memory", 3.0 * T), ("compute", 50 * T), ("compute", 600 * T)]  # tf32 not measured
    peaks = [r for r in roofs if r.style == "peak"]
    assert {r.kind for r in peaks} == {"memory", "compute"} and len(peaks) == 4
    with pytest.raises(ValueError, match="neither"):
        roofs_from(None, None)
    with pytest.raises(ValueError, match="fp8"):
        roofs_from(c, dtypes=("fp8",))


@pytest.mark.parametrize("kw, err, match", [
    (dict(label="x", value=0.0, kind="memory"), ValueError, "positive"),
    (dict(label="x", value=-1.0, kind="compute"), ValueError, "positive"),
    (dict(label="x", value=float("inf"), kind="compute"), ValueError, "finite"),
    (dict(label="x", value=1.0, kind="cache"), ValueError, "kind 'cache'"),
    (dict(label="x", value=1.0, kind="memory", style="guess"), ValueError, "style 'guess'"),
    (dict(label="x", value=True, kind="memory"), ValueError, "True"),
])
def test_roof_rejects_bad_values(kw, err, match):
    with pytest.raises(err, match=match):
        Roof(**kw)


def test_figure_rejects_bad_points_and_roofs():
    with pytest.raises(TypeError, match="DataFrame"):
        roofline_figure([{"label": "a"}], _roofs())
    with pytest.raises(ValueError, match="lacks columns \\['flops_per_s'\\]"):
        roofline_figure(pd.DataFrame({"label": ["a"], "intensity": [1.0]}), _roofs())
    bad = _points()
    bad.loc[0, "intensity"] = 0.0
    with pytest.raises(ValueError, match=r"log-log.*'copy'"):
        roofline_figure(bad, _roofs())
    with pytest.raises(ValueError, match="at least one memory and one compute"):
        roofline_figure(_points(), [r for r in _roofs() if r.kind == "memory"])
    with pytest.raises(TypeError, match="Roof objects"):
        roofline_figure(_points(), [("DRAM", 3e12)])


def test_figure_with_roofs_only():
    fig = roofline_figure(None, _roofs())
    try:
        assert fig.axes[0].get_xscale() == "log"
    finally:
        plt.close(fig)


def test_bandwidth_figure_for_copies():
    from infralens_lab.present.roofline import bandwidth_figure

    rows = pd.DataFrame({"label": ["stride 1", "stride 8"], "dram_TBps": [2.7, 2.5], "useful_TBps": [2.7, 0.55]})
    fig = bandwidth_figure(rows, [r for r in _roofs() if r.kind == "memory"])
    try:
        texts = _texts(fig)
        assert "2.7" in texts and "0.55" in texts
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert any("3 TB/s (measured)" in t for t in legend) and any("3.35 TB/s (peak)" in t for t in legend)
        assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["stride 1", "stride 8"]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="dram_TBps"):
        bandwidth_figure(pd.DataFrame({"label": ["a"]}))
    with pytest.raises(TypeError, match="memory Roof"):
        bandwidth_figure(rows, _roofs())


def test_point_labels_keep_off_the_roof_lines():
    # points right under the fp16 roof, as the large matmuls sit in the recorded H200 set: each label
    # must find a spot that no roof line (nor any other line) crosses
    pts = pd.DataFrame([dict(label=f"matmul {n}³", intensity=i, flops_per_s=f * 600 * T, group="matmul")
                        for n, i, f in [(2048, 700.0, 0.99), (4096, 1000.0, 0.97), (8192, 1400.0, 0.995)]])
    fig = roofline_figure(pts, _roofs())
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        r = fig.canvas.get_renderer()
        boxes = {t.get_text(): t.get_window_extent(r) for t in ax.texts if t.get_text().startswith("matmul")}
        assert len(boxes) == 3
        for ln in ax.lines:
            xy = ax.transData.transform(ln.get_xydata())
            for (x0, y0), (x1, y1) in itertools.pairwise(xy):
                for k in range(201):
                    px, py = x0 + (x1 - x0) * k / 200, y0 + (y1 - y0) * k / 200
                    for text, bb in boxes.items():
                        assert not (bb.x0 < px < bb.x1 and bb.y0 < py < bb.y1), f"{text!r} sits on a line"
    finally:
        plt.close(fig)
