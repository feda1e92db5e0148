"""Traffic and FLOP models against numbers worked out by hand."""
import pytest

from infralens_lab.analysis import traffic


@pytest.mark.parametrize("stride,elem,amp,sectors,fraction", [
    (1, 4, 1, 16, 1.0),          # coalesced: 32 threads x 16 B = 512 B = 16 sectors per request
    (2, 4, 2, 32, 2 / 3),        # every other float: half of each sector is waste
    (8, 4, 8, 32, 2 / 9),        # one float per 32-byte sector
    (16, 4, 8, 32, 2 / 9),       # past 32 bytes apart a sector cannot get any worse
    (4, 2, 4, 32, 2 / 5),
    (32, 2, 16, 32, 2 / 17),     # one half per sector: 16x
])
def test_sector_model(stride, elem, amp, sectors, fraction):
    m = traffic.sector_model(stride, elem)
    assert m.read_amplification == amp
    assert m.sectors_per_request == sectors
    assert m.useful_fraction == pytest.approx(fraction)
    assert traffic.predicted_useful_fraction(stride, elem) == pytest.approx(fraction)


def test_copy_traffic():
    t = traffic.copy_traffic(1000, 4, 8)
    assert (t.kernel, t.bytes_read, t.bytes_written, t.useful_bytes_read, t.flops) == ("copy_strided", 32000, 4000,
                                                                                     4000, 0)
    assert t.bytes == 36000 and t.intensity == 0.0
    c = traffic.copy_traffic(1000, 2)
    assert (c.kernel, c.bytes_read, c.bytes_written) == ("copy_coalesced", 2000, 2000)
    assert "32-byte sectors" in c.assumptions
    # the text names each level's unit: 32 B between L1 and L2, 64 B pairs from HBM (16x at fp32 stride 16)
    s16 = traffic.copy_traffic(1000, 4, 16).assumptions
    assert "L1 and L2 move whole 32-byte sectors" in s16 and "= 8 bytes there" in s16
    assert "HBM fetches 64-byte sector pairs: 16 bytes" in s16 and "DRAM moves whole 32" not in s16
    assert c.as_dict()["useful_bytes_read"] == 2000


def test_attention_flops():
    assert traffic.attention_flops(4, 16, 4096, 64) == 274_877_906_944  # 4 * 4 * 16 * 4096**2 * 64
    assert traffic.attention_flops(4, 16, 4096, 64, causal=True) == 137_438_953_472


def test_naive_traffic_by_hand():
    # B=1, H=2, N=8, D=16, fp16: Q (or K, V, O) = 2*8*16*2 = 512 B; S, P have 2*64 = 128 elements.
    qk, sm, pv = traffic.attention_naive_traffic(1, 2, 8, 16, 2)
    assert (qk.kernel, qk.bytes_read, qk.bytes_written, qk.flops) == ("naive_qk", 1024, 512, 4096)
    assert (sm.kernel, sm.bytes_read, sm.bytes_written, sm.flops) == ("naive_softmax", 512, 256, 640)
    assert (pv.kernel, pv.bytes_read, pv.bytes_written, pv.flops) == ("naive_pv", 768, 512, 4096)
    causal = traffic.attention_naive_traffic(1, 2, 8, 16, 2, causal=True)
    assert [c.bytes for c in causal] == [qk.bytes, sm.bytes, pv.bytes]  # naive computes every tile anyway
    assert "float32" in qk.assumptions


def test_tiled_traffic_by_hand():
    # B=H=1, N=10, D=16, fp16, block_m=4: 3 query blocks; Q = O = 10*16*2 = 320 B.
    t = traffic.attention_tiled_traffic(1, 1, 10, 16, 2, block_m=4)
    assert (t.bytes_read, t.bytes_written, t.flops) == (320 + 2 * 30 * 16 * 2, 320, 6400)  # K, V read 3x
    c = traffic.attention_tiled_traffic(1, 1, 10, 16, 2, block_m=4, causal=True)
    # causal: the blocks read 4, 8 and 10 key rows -> 22 rows of K and of V
    assert (c.bytes_read, c.bytes_written, c.flops) == (320 + 2 * 22 * 16 * 2, 320, 3200)
    assert "22" in c.assumptions and "ceil(N/4) = 3" in t.assumptions
    assert t.intensity == pytest.approx(6400 / (320 + 1920 + 320))


def test_matmul_traffic():
    t = traffic.matmul_traffic(2, 3, 4, 2)
    assert (t.bytes_read, t.bytes_written, t.flops) == ((8 + 12) * 2, 12, 48)
    assert t.intensity == pytest.approx(48 / 52)


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: traffic.sector_model(0, 4), ValueError, "stride is 0, expected an int >= 1"),
    (lambda: traffic.sector_model(1.5, 4), TypeError, r"stride is 1.5 \(float\)"),
    (lambda: traffic.sector_model(2, 3), ValueError, "elem_bytes is 3, expected 1, 2, 4 or 8"),
    (lambda: traffic.copy_traffic(0, 4), ValueError, "n_out is 0"),
    (lambda: traffic.attention_tiled_traffic(1, 1, 8, 16, 2, block_m=0), ValueError, "block_m is 0"),
    (lambda: traffic.attention_flops(1, 1, True, 16), TypeError, "N is True"),
])
def test_bad_arguments(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


def test_two_level_model_matches_the_recorded_dram_reads():
    """The recorded H200 copies (16 Mi useful fp32, 64 MiB read at stride 1): DRAM bytes read per useful
    byte are 1, 2, 4, 8, 16, 16 for strides 1..32, which the 64-byte DRAM fetch predicts and the
    32-byte sector (the L1/L2 unit) does not beyond stride 8."""
    from pathlib import Path

    from infralens_lab.parse import ncu
    from infralens_lab.parse.runs import RunConfig

    df = ncu.parse_raw_csv((Path(__file__).parent / "data" / "ncu_copies.csv").read_text())
    reads = ncu.dram_bytes(df).groupby("config")["read_bytes"].mean()
    seen = {}
    for label, rd in reads.items():
        cfg = RunConfig.parse(label)
        if cfg.kind == "copy_strided":
            seen[cfg.stride] = rd / (cfg.n * cfg.elem_bytes)
    strides = sorted(seen)
    assert strides == [1, 2, 4, 8, 16, 32]
    dram = [traffic.sector_model(s, 4).dram_read_amplification for s in strides]
    l2 = [traffic.sector_model(s, 4).read_amplification for s in strides]
    assert dram == [1, 2, 4, 8, 16, 16] and l2 == [1, 2, 4, 8, 8, 8]
    for s, want in zip(strides, dram, strict=True):  # rel 12%: part-used fetches at block edges and other DRAM traffic
        assert seen[s] == pytest.approx(want, rel=0.12), (s, seen[s])
    assert traffic.sector_model(32, 4).dram_useful_fraction == pytest.approx(2 / 17)
    assert traffic.DRAM_FETCH_BYTES == 2 * traffic.SECTOR_BYTES


def test_two_level_table_on_the_recorded_copies():
    from infralens_lab import evidence
    from infralens_lab.labs_support import lab04

    fam = lab04.recorded_copy_family(evidence.reference())
    t = traffic.two_level_table(fam.table)
    t = t[t["copy"].str.startswith("stride")].set_index("stride")
    assert list(t["pred_L2_sector_x"]) == [1, 2, 4, 8, 8, 8]
    assert list(t["pred_HBM_64B_x"]) == [1, 2, 4, 8, 16, 16]
    # the recorded DRAM reads follow the 64-byte unit, not the 32-byte one, from stride 2 on
    for s in (2, 4, 8, 16, 32):
        assert abs(t.loc[s, "measured_dram_x"] / t.loc[s, "pred_HBM_64B_x"] - 1) < 0.1, t
    with pytest.raises(ValueError, match=r"lacks \['read_x'\]"):
        traffic.two_level_table(fam.table.drop(columns=["read_x"]))
