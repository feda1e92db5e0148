"""present.show's tables: escaped text, readable numbers, units in headers, shortened kernel
names with the full name on hover, one-row tables on their side, a scrolling box; cards
without emoji; and the plain-python3 text path."""
from __future__ import annotations

import math
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from infralens_lab import present
from infralens_lab.present import format_number, header_label, shorten_name, table_html, table_text

CUTLASS = "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)"
XMMA = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"


class _Cells(HTMLParser):
    """Text and attributes of every th/td, in order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cells: list[dict] = []
        self._in = None

    def handle_starttag(self, tag, attrs):
        if tag in ("th", "td"):
            self._in = {"tag": tag, "text": "", **dict(attrs)}
            self.cells.append(self._in)
        elif tag == "abbr" and self._in is not None:
            self._in["abbr"] = dict(attrs)["title"]

    def handle_endtag(self, tag):
        if tag in ("th", "td"):
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            self._in["text"] += data


def cells(page: str) -> list[dict]:
    p = _Cells()
    p.feed(page)
    return p.cells


@pytest.mark.parametrize("value, shown", [
    (33554432, "33,554,432"), (np.int64(98437), "98,437"), (8566.7, "8,567"), (8570.0, "8,570"),
    (0.00615, "0.00615"), (12.345, "12.3"), (0.912, "0.912"), (3.6, "3.6"), (0.0, "0"),
    (1024.0, "1,024"), (33554432.0, "33,554,432"), (9.95e13, "99.5 T"), (4.33e9 + 0.5, "4.33 G"),
    (float("nan"), "—"), (None, "—"), (True, "True"), ("x", "x"), (-0.5, "-0.5"),
    # zeros that are measured digits stay (3.004 TB/s is not "3", which reads as a count)
    (3.004, "3.00"), (0.90012, "0.900"), (12.04, "12.0"), (2.5, "2.5"), (-3.0041, "-3.00"),
])
def test_format_number_reads_like_a_person_writes(value, shown):
    assert format_number(value) == shown


def test_format_number_never_uses_e_notation_in_the_usual_range():
    rng = np.random.default_rng(7)
    for x in 10 ** rng.uniform(-5, 14, size=500):
        s = format_number(float(x))
        assert "e" not in s, (x, s)
        assert math.isclose(float(re.sub(r"[ ,]|[MGTP]$", "", s.replace(" M", "e6").replace(" G", "e9")
                                         .replace(" T", "e12").replace(",", ""))), x, rel_tol=6e-3)


def test_header_units_and_names_kept_on_hover():
    assert header_label("time_us") == "time (µs)"
    assert header_label("dram_tbps") == "dram (TB/s)"
    assert header_label("gpu_util_pct") == "gpu util (%)"
    assert header_label("sm_clock_ghz") == "sm clock (GHz)"
    assert header_label("MiB") == "MiB" and header_label("weights GB") == "weights GB"
    th = [c for c in cells(table_html(pd.DataFrame({"k": ["a", "b"], "time_us": [1.0, 2.0]}))) if c["tag"] == "th"]
    assert [(c["text"], c["title"]) for c in th] == [("k", "k"), ("time (µs)", "time_us")]


def test_template_arguments_are_escaped_not_tags():
    df = pd.DataFrame({"kernel": ["void f<int>(x)", "<b>bold</b>"], "launches": [1, 2]})
    page = table_html(df)
    assert "<int>" not in page and "<b>bold" not in page
    assert [c["text"] for c in cells(page) if c["tag"] == "td"][::2] == ["void f<int>(x)", "<b>bold</b>"]


def test_long_kernel_names_are_shortened_with_full_name_on_hover():
    df = pd.DataFrame({"kernel": [CUTLASS, XMMA, "short"], "total_ms": [14.2, 1.5, 0.1]})
    td = [c for c in cells(table_html(df)) if c["tag"] == "td"][::2]
    assert td[0]["abbr"] == CUTLASS and td[1]["abbr"] == XMMA and "abbr" not in td[2]
    assert len(td[0]["text"]) <= present.NAME_MAX_CHARS and "…" in td[0]["text"]
    assert "nn_align1" in td[0]["text"] and td[0]["text"] != td[1]["text"]
    assert shorten_name("short") == "short"


def test_names_that_differ_stay_different_once_shortened():
    # Two cuBLAS kernels that share their first 28 and last 19 characters (tn 128x128 against nn 256x128).
    nn = XMMA.replace("_tn_n_tilesize128x128x8", "_nn_n_tilesize256x128x8")
    df = pd.DataFrame({"kernel": [XMMA, nn], "total_ms": [14.3, 8.9]})
    html_names = [c["text"] for c in cells(table_html(df)) if c["tag"] == "td"][::2]
    text_names = [line.split()[0] for line in table_text(df).splitlines()[1:]]
    assert html_names == text_names and html_names[0] != html_names[1]
    assert all("…" in n and len(n) < len(XMMA) for n in html_names)
    assert shorten_name(XMMA) == shorten_name(nn)  # at the default cut they collide; the column widens it
    assert present.shorten_names([XMMA, nn, 3.5, "short"]) == [*html_names, 3.5, "short"]  # what sentences use


def test_plain_text_shows_the_names_the_html_shows():
    df = pd.DataFrame({"kernel": [CUTLASS, "short"], "total_ms": [14.2, 0.1]})
    shown = [c["text"] for c in cells(table_html(df)) if c["tag"] == "td"][::2]
    lines = table_text(df).splitlines()[1:]
    assert [line.split()[0] for line in lines] == shown and CUTLASS not in table_text(df)
    sentence = "fusion: a tiled kernel computes QK tile by tile on chip and never writes S to DRAM at all"
    assert sentence in table_text(pd.DataFrame({"why": [sentence]}))  # prose is not a name: kept whole


def test_text_left_numbers_right_and_sentences_wrap():
    sentence = "fusion: a tiled kernel computes QK tile by tile on chip and never writes S to DRAM at all"
    df = pd.DataFrame({"label": ["naive_qk", "tiled"], "intensity": [38.8, 181.0], "why": [sentence, "x"]})
    td = [c for c in cells(table_html(df)) if c["tag"] == "td"]
    assert "text-align:left" in td[0]["style"] and "text-align:right" in td[1]["style"]
    assert "white-space:normal" in td[2]["style"] and "abbr" not in td[2]


def test_one_row_table_is_transposed():
    df = pd.DataFrame([{"kernel": XMMA, "time_us": 215.0, "sm_pct": 81.3, "dominant_stall": "not_selected"}])
    c = cells(table_html(df))
    assert [x["text"] for x in c if x["tag"] == "th"] == ["kernel", "time (µs)", "sm (%)", "dominant_stall"]
    assert [x["text"] for x in c if x["tag"] == "td"][1:] == ["215", "81.3", "not_selected"]
    assert table_text(df).splitlines()[1].split() == ["time", "(µs)", "215"]


def test_wide_table_scrolls_in_its_own_box():
    page = table_html(pd.DataFrame({f"col_{i}_pct": [1.0, 2.0] for i in range(30)}))
    assert re.search(r'<div class="infralens-table" style="[^"]*overflow-x:auto', page)


def test_named_index_becomes_a_column():
    df = pd.DataFrame({"v": [1.5, 2.5]}, index=pd.Index(["a", "b"], name="what"))
    assert [c["text"] for c in cells(table_html(df)) if c["tag"] == "th"] == ["what", "v"]


def test_show_prints_text_without_ipython(capsys):
    present.show(pd.DataFrame({"bytes": [33554432, 1], "t_ms": [8566.7, 0.5]}), caption="Evidence: test")
    out = capsys.readouterr().out
    assert "33,554,432" in out and "8,567" in out and "t (ms)" in out and "e+03" not in out
    assert out.strip().endswith("Evidence: test")


def test_show_refuses_a_table_without_caption():
    with pytest.raises(ValueError, match="needs a caption"):
        present.show(pd.DataFrame({"a": [1]}))


def test_card_has_no_emoji_and_refuses_unknown_kinds(capsys):
    present.card("What to notice", "- one\n- two")
    out = capsys.readouterr().out
    assert "What to notice" in out and not re.search("[\U0001F300-\U0001FAFF\u2600-\u27BF]", out)
    with pytest.raises(ValueError, match="not one of"):
        present.card("t", "b", kind="bogus")


def test_long_headers_wrap_between_words():
    page = table_html(pd.DataFrame({"pred_dram_read_mb": [1.0, 2.0], "achieved_occupancy_pct": [3.0, 4.0]}))
    assert ">pred dram<br>read (MB)</th>" in page and ">achieved<br>occupancy<br>(%)</th>" in page


def test_a_column_of_counts_is_written_exactly_throughout():
    df = pd.DataFrame({"flops": [33554432.0, 1.37438953472e12], "rate": [9.95e13 + 0.25, 3.2e9 + 0.5]})
    td = [c["text"] for c in cells(table_html(df)) if c["tag"] == "td"]
    assert td == ["33,554,432", "99.5 T", "1,374,389,534,720", "3.2 G"]


def test_row_positions_left_by_a_sort_do_not_leak_as_a_column():
    """Issue 29: ``df.sort_values(...).head()`` keeps the old row numbers as its index; they are not data."""
    df = pd.DataFrame({"op": ["a", "b", "c"], "self_us": [1.0, 3.0, 2.0]}).sort_values("self_us", ascending=False)
    heads = [c["text"] for c in cells(table_html(df)) if c["tag"] == "th"]
    assert heads == ["op", "self (µs)"]
    assert table_text(df).splitlines()[0].split() == ["op", "self", "(µs)"]
    labels = pd.DataFrame({"v": [1.5, 2.5]}, index=["first", "second"])  # unnamed labels are data: kept
    assert [c["text"] for c in cells(table_html(labels)) if c["tag"] == "th"] == ["", "v"]
    assert "first" in table_text(labels)


def test_a_wide_table_carries_a_visible_scroll_cue_a_narrow_one_does_not():
    wide = table_html(pd.DataFrame({f"col_{i}_pct": [1.0, 2.0] for i in range(30)}))
    assert f'class="{present.SCROLL_CUE_CLASS}"' in wide and "30 columns" in wide
    assert wide.index(present.SCROLL_CUE_CLASS) < wide.index("<table")  # seen before the cut-off
    narrow = table_html(pd.DataFrame({"kernel": ["copy"], "time_us": [1.0], "x": [2]}))
    assert present.SCROLL_CUE_CLASS not in narrow
    assert present.SCROLL_CUE_CLASS not in table_html(pd.DataFrame({"a": [1, 2], "b": [3, 4]}))
    assert "scroll" not in table_text(pd.DataFrame({f"col_{i}_pct": [1.0, 2.0] for i in range(30)}))
    # every table's box ends with the strip that fades a cut edge out, stuck to the box's right edge
    for page in (wide, narrow):
        assert re.search(rf'</table><div class="{present.SCROLL_FADE_CLASS}"[^>]*style="position:sticky;right:0;', page)
        assert page.endswith("</div></div>")


def test_figure_alt_is_read_from_the_figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2)
    a.loglog([1, 2, 4], [1, 4, 16], label="measured")
    a.loglog([1, 2, 4], [2, 4, 8], label="roof")
    a.legend()
    a.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="TFLOP/s", title="Roofline")
    b.bar(["naive", "tiled"], [3.0, 1.0])
    b.set(ylabel="time (ms)", title="Per variant")
    fig.suptitle("Attention on an H100")
    alt = present.figure_alt(fig, point="The tiled kernel is three times faster")
    plt.close(fig)
    assert alt == ('Attention on an H100. 2 panels. Line chart "Roofline": TFLOP/s (log scale) against arithmetic '
                   'intensity (FLOP/byte) (log scale); series: measured, roof. Bar chart "Per variant": time (ms) '
                   "against the categories naive, tiled. The tiled kernel is three times faster.")


def test_show_puts_the_alt_text_in_the_figure_output(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = []
    monkeypatch.setattr(present, "_ipython_display", lambda: (lambda obj, **kw: shown.append((obj, kw)), str))
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    ax.set(xlabel="stride", ylabel="sectors per request")
    present.show(fig, caption="Evidence: test", point="Sectors grow with the stride")
    alt = shown[0][1]["metadata"]["image/png"]["alt"]
    assert alt == "Line chart: sectors per request against stride. Sectors grow with the stride."


def test_a_figure_is_not_drawn_while_grading(monkeypatch):
    """make grade reads no figure: under $INFRALENS_GRADE a figure is closed undrawn and one line says so; its
    caption is still shown (and still required)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from infralens_lab.notebook_guard import GRADE_ENV

    shown = []
    monkeypatch.setattr(present, "_ipython_display", lambda: (lambda obj, **kw: shown.append((obj, kw)), str))
    monkeypatch.setenv(GRADE_ENV, "1")
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    present.show(fig, caption="Evidence: test")
    assert [o for o, _ in shown] == ["*(figure not drawn while grading)*", "<sub>Evidence: test</sub>"]
    assert not plt.fignum_exists(fig.number)  # closed: nothing left for the inline backend to draw
    with pytest.raises(ValueError, match="needs a caption"):
        present.show(plt.subplots()[0])
    monkeypatch.setenv(GRADE_ENV, "0")
    shown.clear()
    present.show(plt.subplots()[0], caption="Evidence: test")
    assert "image/png" in shown[0][1]["metadata"]


def test_rate_units_written_with_underscores_move_into_the_header():
    """Lab 02's per-GPU table (analysis.compare.ceilings) names its units copy_TB_s, fp32_TFLOP_s, ..."""
    assert [header_label(n) for n in ("copy_TB_s", "fp32_TFLOP_s", "ridge_bf16_FLOP_per_B", "implied_tb_per_s")] == \
        ["copy (TB/s)", "fp32 (TFLOP/s)", "ridge bf16 (FLOP/B)", "implied (TB/s)"]


def test_a_header_longer_than_a_line_may_break_after_its_underscores():
    page = table_html(pd.DataFrame({"pred_sectors_per_req": [16.0, 32.0], "stride": [1, 2]}))
    assert ">pred_<wbr>sectors_<wbr>per_<wbr>req</th>" in page and ">stride</th>" in page
    heads = [c["text"] for c in cells(page) if c["tag"] == "th"]
    assert heads == ["pred_sectors_per_req", "stride"]  # the text a reader copies is the column's name
