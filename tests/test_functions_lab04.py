"""Lab 04's function exercises (issue 38): ex1 (sectors per request from one copy's raw counters) and ex3 (the
dominant stall reason's share of a kernel's samples). Each reference is the lab's own analysis on the recorded
data; a typed constant fails; a half-right function (the DRAM bytes for the sectors, all L1TEX bytes, the row order
for the dominant reason, `selected` not left out, `selected` left out of the total too) fails on a named case."""
from __future__ import annotations

import pandas as pd
import pytest

from infralens_lab.analysis import copies as copy_info
from infralens_lab.analysis import stalls
from infralens_lab.parse import ncu
from infralens_lab.quiz import check
from infralens_lab.quiz import functions as fx
from infralens_lab.quiz.check import GRADE_ENV
from infralens_lab.quiz.derive import derive
from infralens_lab.quiz.keys import lab04 as keys

SECTORS, REQUESTS = ncu.SECTORS


@pytest.fixture(autouse=True)
def learner(monkeypatch):
    monkeypatch.delenv(GRADE_ENV, raising=False)


@pytest.fixture(scope="module")
def cases():
    """``{qid: [Case]}``, built once (the providers parse the recorded CSVs)."""
    got = {"lab04.ex1": fx.cases("infralens_lab.quiz.keys.lab04:counter_row_cases"),
           "lab04.ex3": fx.cases("infralens_lab.quiz.keys.lab04:stall_cases")}
    if any(v is None for v in got.values()):
        pytest.skip("no recorded copy counters in this checkout")
    return got


def _failed_on(qid, fn) -> str:
    r = check(qid, fn)
    assert r.status == "wrong", f"{qid}: {fn} passed every case"
    return r.message.splitlines()[0]


# ---------------------------------------------------------------- ex1: sectors per request
def test_ex1_reference_is_the_labs_table_on_every_recorded_copy(cases):
    """Invariant on the real data: the reference on each lab case equals the copy table's sectors_per_req (the
    package's parse.ncu.sectors_per_request), and the counter rows hold exactly the CSV's `.sum` metrics."""
    st = keys.evidence.reference_holding(*keys.COPY_FILES)
    fam = copy_info.family(st.text(keys.COPY_FILES[0]))
    raw = ncu.parse_raw_csv(st.text(keys.COPY_FILES[0]))
    rows = copy_info.counter_rows(raw, fam.labels())
    table = fam.table.set_index("label")["sectors_per_req"]
    assert set(rows) == set(table.index)
    for label, row in rows.items():
        assert keys.sectors_per_request(row) == pytest.approx(table[label], rel=1e-12), label
        assert set(row) == {m for m in raw["metric"].unique() if m.endswith(".sum")}
    own = [c for c in cases["lab04.ex1"] if not c.held_out]
    assert [keys.sectors_per_request(*c.args) for c in own] == [16.0, 16.0, 32.0, 32.0]  # exact counts


def test_ex1_a_half_right_function_fails_on_the_case_it_gets_wrong(cases):
    assert check("lab04.ex1", lambda r: r[SECTORS] / r[REQUESTS]).status == "correct"
    dram = _failed_on("lab04.ex1", lambda r: r["dram__bytes_read.sum"] / 32 / r[REQUESTS])  # DRAM's 64-byte reads
    assert "stride 32 copy" in dram and "(this lab)" in dram
    every = _failed_on("lab04.ex1", lambda r: r["l1tex__t_bytes.sum"] / 32 / r[REQUESTS])  # stores counted too
    assert "coalesced copy" in every
    inverted = _failed_on("lab04.ex1", lambda r: r[REQUESTS] / r[SECTORS])
    assert "coalesced copy" in inverted
    constant = _failed_on("lab04.ex1", lambda r: 32.0)  # the stride-8 value the old exercise asked for, typed in
    assert "coalesced copy" in constant
    vectors = _failed_on("lab04.ex1", lambda r: 16.0 if r[SECTORS] < 1e7 else 32.0)  # right on every recorded row
    assert "scalars" in vectors and "held out" in vectors


def test_ex1_a_missing_metric_is_reported_with_the_case(cases):
    r = check("lab04.ex1", lambda r: r["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"] / r[REQUESTS])
    assert r.status == "wrong" and "KeyError" in r.message and "coalesced copy" in r.message


def test_counter_rows_refuses_a_table_that_is_not_parse_raw_csvs():
    with pytest.raises(ValueError, match=r"columns \['a'\]; expected the tidy frame of parse.ncu.parse_raw_csv"):
        copy_info.counter_rows(pd.DataFrame({"a": [1]}))


# ---------------------------------------------------------------- ex3: the dominant stall's share
def test_ex3_reference_is_the_series_rule_on_every_recorded_copy(cases):
    """Invariant on the real data: on every recorded copy the reference equals the bank's old derivation
    (quiz.derive.dominant_stall_share) and the share column of the dominant reason analysis.stalls names."""
    st = keys.evidence.reference_holding(*keys.COPY_FILES)
    fam = copy_info.family(st.text(keys.COPY_FILES[0]), st.text(keys.COPY_FILES[1]))
    for label in fam.table["label"]:
        s = fam.stalls_for(label)
        top = stalls.dominant(s[["reason", "samples"]])
        share = float(s.loc[s["reason"] == top, "samples"].iloc[0] / s["samples"].sum())
        assert keys.dominant_share(s) == pytest.approx(derive("dominant_stall_share", s), abs=1e-12)
        assert keys.dominant_share(s) == pytest.approx(share, abs=1e-12), label
        assert float(s.loc[s["reason"] == top, "share"].iloc[0]) == pytest.approx(share, abs=1e-9)


def test_ex3_a_half_right_function_fails_on_the_case_it_gets_wrong(cases):
    def right(s):
        st = s[s["reason"] != "selected"]
        return st["samples"].max() / s["samples"].sum()
    assert check("lab04.ex3", right).status == "correct"
    with_selected = _failed_on("lab04.ex3", lambda s: s["samples"].max() / s["samples"].sum())
    assert "selected at 2x" in with_selected
    total_without = _failed_on("lab04.ex3", lambda s: right(s[s["reason"] != "selected"]))
    # selected left out of the total too: wrong wherever selected has samples, so on the lab's own first case that
    # has them (on the H100 set the 'selected at 2x' copy; on the H200 set already its coalesced copy)
    assert "too high: the total includes every reason's samples, selected too" in total_without.lower()
    first_row = _failed_on("lab04.ex3", lambda s: s[s["reason"] != "selected"]["samples"].iloc[0] / s["samples"].sum())
    assert "shuffled order" in first_row
    always_lsb = _failed_on("lab04.ex3", lambda s: s.loc[s["reason"] == "long_scoreboard", "samples"].sum()
                            / s["samples"].sum())
    assert "drain at 1.5x" in always_lsb
    r = check("lab04.ex3", lambda s: 100 * right(s))
    assert r.status == "wrong" and "looks like a percent" in r.message


def test_ex3_cases_keep_the_recorded_tables_and_perturb_only_what_they_say(cases):
    got = {c.name: c.args[0] for c in cases["lab04.ex3"]}
    own = next(t for n, t in got.items() if n.startswith("stride 8 copy") and "this lab" in n)
    shuffled = next(t for n, t in got.items() if "shuffled" in n)
    assert list(shuffled.columns) == ["kernel", "reason", "samples"]
    assert sorted(map(tuple, shuffled.values.tolist())) == sorted(map(tuple, own.values.tolist()))
    assert list(shuffled["reason"]) != list(own["reason"])  # the order did change
    sel = next(t for n, t in got.items() if "selected at 2x" in n).set_index("reason")["samples"]
    assert sel.idxmax() == "selected" and (sel.drop("selected") == own.set_index("reason")["samples"]
                                            .drop("selected")).all()
