"""What a CUDA graph refuses, in one line per case (issue 29, item 5), on the recorded ``graph_limits``
of every committed set (data/recorded/*/graph_limits.json, written by the recorder on an H100 and an
H200): the line says what was done and why, the sizes come from the raw error itself, and the raw error
stays available (folded in HTML, ``.raw`` on the object) but out of the line."""
from __future__ import annotations

import re

import pytest

from infralens_lab import evidence
from infralens_lab.analysis.overlap import GRAPH_CASES, graph_refusals
from infralens_lab.present.refusals import refusals_html, refusals_text, show_refusals

RECORDED = evidence.load_all("graph_limits")


@pytest.mark.skipif(not RECORDED, reason="no recorded set holds graph_limits")
@pytest.mark.parametrize("gpu", sorted(RECORDED))
def test_each_recorded_refusal_becomes_one_line(gpu):
    ev = RECORDED[gpu]
    refusals = graph_refusals(ev.values)
    assert [r.case for r in refusals] == list(ev.values)
    for r in refusals:
        assert r.raw == ev.values[r.case].strip()
        assert "\n" not in r.line and r.line.startswith(r.done)
        assert r.raw not in r.line, "the raw error is on demand, not in the line"
        assert "AcceleratorError" not in r.line and "RuntimeError" not in r.line
    by_case = {r.case: r for r in refusals}
    sync = by_case["host_sync_in_capture"]
    assert sync.refused and ".item()" in sync.done and "capture" in sync.why
    shape = by_case["new_shape"]
    a, b = re.search(r"tensor a \((\d+)\).*tensor b \((\d+)\)", shape.raw).groups()
    assert shape.refused and f"{b} elements into its {a}-element static input" in shape.done


@pytest.mark.skipif(not RECORDED, reason="no recorded set holds graph_limits")
def test_html_folds_the_raw_error_and_text_leaves_it_out():
    refusals = graph_refusals(next(iter(RECORDED.values())).values)
    page = refusals_html(refusals)
    assert page.count("<details") == len(refusals) and page.count("<summary") == len(refusals)
    for r in refusals:
        assert re.search(r"<details[^>]*><summary[^>]*>raw error</summary><pre[^>]*>" + re.escape(r.raw.replace("'", "&#x27;")),
                         page), f"raw error of {r.case} not folded under its line"
    text = refusals_text(refusals)
    assert len(text.splitlines()) == len(refusals) and not any(r.raw in text for r in refusals)


def test_a_case_that_did_not_fail_says_so():
    r = graph_refusals({"host_sync_in_capture": "captured without error"})[0]
    assert not r.refused and "no error" in r.line


@pytest.mark.parametrize("values, seen", [({"unknown_case": "x"}, "unknown_case"), ({}, "{}"),
                                          ({"new_shape": ""}, "new_shape"), ("text", "text")])
def test_bad_input_is_named(values, seen):
    with pytest.raises(ValueError, match=re.escape(seen)):
        graph_refusals(values)


def test_show_refusals_needs_a_caption():
    with pytest.raises(ValueError, match="caption"):
        show_refusals(graph_refusals({"new_shape": "captured without error"}), caption=None)
    assert set(GRAPH_CASES) == {"host_sync_in_capture", "new_shape"}
