"""analysis.sass: opcode classes, the producer of a consumer's operands, where each stall reason's samples sit,
the executed-instruction mix, and the sentences, on SYNTHETIC source rows (tests/source_fixture.py) with answers
worked out by hand from the fixture."""
from __future__ import annotations

import pandas as pd
import pytest
import source_fixture

from infralens_lab.analysis import sass
from infralens_lab.parse import ncu

STRIDED = "copy_strided stride=8 n=67108864 fp32"
COALESCED = "copy n=67108864 fp32"


@pytest.fixture(scope="module")
def rows():
    return ncu.parse_source_csv(source_fixture.recorded_text())


def test_opcode_classes():
    assert sass.opcode_class("LDG.E.128") == "global load" and sass.opcode_class("STG") == "global store"
    assert sass.opcode_class("S2R") == sass.opcode_class("S2UR") == "special register"
    assert sass.opcode_class("MUFU.EX2") == "special math" and sass.opcode_class("LDS.U") == "shared memory"
    assert sass.opcode_class("EXIT") == "control" and sass.opcode_class("ULDC.64") == "constant load"
    assert sass.opcode_class("UFOO") == "uniform datapath" and sass.opcode_class("XYZ") == "other"
    assert set(sass.MIO_CLASSES) <= set(sass.CLASSES)
    with pytest.raises(TypeError, match="expected a str"):
        sass.opcode_class(None)


def test_operands_written_and_read():
    assert sass._operands("S2R R0, SR_TID.X") == ({"R0"}, set())
    assert sass._operands("@!P0 LDG.E R4, desc[UR6][R2.64]") == ({"R4"}, {"UR6", "R2", "P0"})
    assert sass._operands("STG.E.128 desc[UR6][R6.64], R4") == (set(), {"UR6", "R6", "R4"})
    assert sass._operands("ISETP.GE.AND P0, PT, R0, UR5, PT") == ({"P0"}, {"R0", "UR5"})
    assert sass._operands("EXIT") == (set(), set())


def test_producer_is_the_nearest_earlier_writer(rows):
    s = rows[rows["config"] == STRIDED]
    imad = s.index[s["sass"].str.startswith("IMAD.SHL")][0]
    stg = s.index[s["op"] == "STG"][0]
    assert rows.at[sass.producer(rows, imad), "sass"] == "S2R R0, SR_TID.X"
    assert rows.at[sass.producer(rows, stg), "op"] == "LDG"  # R4 comes from the load, not from the coalesced block
    assert sass.producer(rows, s.index[s["op"] == "EXIT"][0]) is None
    assert sass.producer(rows, s.index[0]) is None  # the first instruction has nothing before it


def test_reason_sites_attribute_each_reason(rows):
    sb = sass.reason_sites(rows, "short_scoreboard").set_index("config")
    assert sb.at[STRIDED, "samples"] == 120 and sb.at[STRIDED, "op"] == "IMAD"
    assert sb.at[STRIDED, "producer_class"] == "special register"
    assert sb.at[STRIDED, "by_producer_class"] == {"special register": 1.0}
    mio = sass.reason_sites(rows, "mio_throttle").set_index("config")
    assert mio.at[STRIDED, "site_share"] == pytest.approx(40 / 50)
    assert mio.at[STRIDED, "by_site_class"] == {"special register": 1.0}
    assert mio.at[COALESCED, "samples"] == 0 and pd.isna(mio.at[COALESCED, "sass"])
    drain = sass.reason_sites(rows, "drain").set_index("config")
    assert drain.at[STRIDED, "op"] == "EXIT" and drain.at[STRIDED, "site_share"] == 1.0
    with pytest.raises(ValueError, match="no column 'coffee'"):
        sass.reason_sites(rows, "coffee")


def test_instruction_mix_sums_executions_by_class(rows):
    mix = sass.instruction_mix(rows)
    s = mix[mix["config"] == STRIDED].set_index("op_class")
    assert s.at["global load", "executed"] == 4000 and s.at["special register", "executed"] == 2000
    assert s.at["integer / address", "executed"] == 3000 and s["share"].sum() == pytest.approx(1.0)
    total = rows.groupby("config")["inst_executed"].sum()
    assert mix.groupby("config")["executed"].sum().to_dict() == total.to_dict()


def test_top_instructions_sorted_with_shares(rows):
    t = sass.top_instructions(rows, STRIDED, n=3)
    assert t["sass"].tolist() == ["STG.E.128 desc[UR6][R6.64], R4", "EXIT", "IMAD.SHL.U32 R0, R0, 0x4, RZ"]
    assert t["pc"].tolist() == ["0x0060", "0x0070", "0x0020"]
    total = sum(sum(st.values()) for _, _, st in source_fixture.STRIDED)
    assert t["share"].tolist() == pytest.approx([401 / total, 200 / total, 121 / total])
    assert {"short_scoreboard", "mio_throttle", "drain"} <= set(t.columns)
    with pytest.raises(ValueError, match="no source rows for config 'x'"):
        sass.top_instructions(rows, "x")
    with pytest.raises(ValueError, match="parse_source_csv"):
        sass.top_instructions(pd.DataFrame({"a": [1]}), STRIDED)


def test_reading_names_sites_and_says_when_evidence_is_split(rows):
    lines = sass.reading(rows)
    assert any(ln.startswith(STRIDED + ": short_scoreboard 120 samples") and "special register result" in ln
               for ln in lines)
    assert any("mio_throttle 50 samples" in ln and "special register instructions waiting" in ln for ln in lines)
    assert any("drain 200 samples" in ln and "at EXIT" in ln for ln in lines)
    # move half of the short-scoreboard samples onto an instruction fed by the load: no class reaches 60%, and
    # that half has no MIO producer to wait for (a short scoreboard waits on MIO work only), so it reads "none"
    split = rows.copy()
    stg = split.index[(split["config"] == STRIDED) & (split["op"] == "STG")][0]
    split.loc[stg, "short_scoreboard"] = 120.0
    line = next(ln for ln in sass.reading(split, reasons=("short_scoreboard",), threshold=0.6) if ln.startswith(STRIDED))
    assert "split: " in line and "special register 50%" in line and "none 50%" in line


def test_census_agreement_holds_source_sums_against_the_opcode_census(rows):
    census = pd.DataFrame({"config": [STRIDED] * 3, "opcode": ["IMAD", "LDG", "S2R"],
                           "executed": [2000.0, 4000.0, 990.0]})
    a = sass.census_agreement(rows[rows["config"] == STRIDED], census).set_index("op")
    assert a.at["IMAD", "from_source"] == 2000 and a.loc["IMAD", "agree"] and a.loc["LDG", "agree"]
    assert not a.loc["S2R", "agree"]  # 1000 against 990: 1% off
    assert a.at["EXIT", "from_census"] == 0 and not a.loc["EXIT", "agree"]  # absent from the census
    with pytest.raises(ValueError, match="opcode_census"):
        sass.census_agreement(rows, pd.DataFrame({"x": [1]}))


def test_a_store_waits_on_its_loaded_data_not_on_its_address():
    """On the recorded strided copy, STG reads an address (LEA, written just before it) and data (the loads'
    registers): a long scoreboard waits on an L1TEX operation, so its producer is a load, not the nearer LEA."""
    from infralens_lab import evidence
    from infralens_lab.parse import ncu
    st = evidence.reference()
    if "ncu_copies_source.csv" not in st.files():
        pytest.skip("the reference set has no ncu_copies_source.csv")
    real = ncu.parse_source_csv(st.text("ncu_copies_source.csv"))
    cfg = next(c for c in real["config"].unique() if "stride=8" in c)
    stg = real.index[(real["config"] == cfg) & (real["op"] == "STG")][0]
    assert sass.opcode_class(real.at[sass.producer(real, stg), "op"]) == "integer / address"  # the nearest writer
    assert sass.opcode_class(real.at[sass.producer(real, stg, sass.L1TEX_CLASSES), "op"]) == "global load"
    line = next(ln for ln in sass.reading(real, reasons=("long_scoreboard",)) if ln.startswith(cfg))
    assert "global load result" in line


def test_drain_sits_on_the_self_branch_after_exit_in_the_recording():
    """Issue 26 item 16: the recorded drain samples sit on the BRA after EXIT (a branch to its own address, executed
    0 times), and the reading says so instead of 'at EXIT'."""
    from infralens_lab import evidence
    from infralens_lab.parse import ncu

    rows = ncu.parse_source_csv(evidence.reference().text("ncu_copies_source.csv"))
    drain = sass.reason_sites(rows, "drain").set_index("config")
    for cfg, r in drain.iterrows():
        site = rows[(rows["config"] == cfg) & (rows["sass"] == r["sass"])].iloc[0]
        assert r["op"] == "BRA" and site["inst_executed"] == 0 and sass.self_branch(site["sass"], site["address"])
    lines = [ln for ln in sass.reading(rows, reasons=("drain",))]
    assert lines and all("on the instruction after EXIT, a branch to itself, executed 0 times" in ln for ln in lines)
    assert not any("at EXIT" in ln for ln in lines)


def test_self_branch():
    assert sass.self_branch("BRA 0x7fadcb7a2a10", 0x7fadcb7a2a10)
    assert not sass.self_branch("BRA 0x7fadcb7a2a10", 0x7fadcb7a2a00)
    assert not sass.self_branch("EXIT", 0x10) and not sass.self_branch("BRA 0x10", None)
