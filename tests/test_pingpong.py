"""Lab 04's Hopper section (analysis.pingpong, present.pingpong): the schedule picture drawn from
attention_gluon.schedule(), the per-pipe view of ncu_gluon.csv on a synthetic file built in the layout of the real
H200 ncu_attention.csv (its tiled_fast block, relabelled and perturbed with fresh random factors), and a partial
recorded set (device + ncu_gluon.csv only) beside the committed sets, which nothing that iterates sets trips on."""
from __future__ import annotations

import csv
import io
import math
import random
import shutil

import pytest

from infralens_lab import evidence
from infralens_lab.analysis import counters, pingpong
from infralens_lab.kernels import attention_gluon as ag
from infralens_lab.parse import ncu

H200 = evidence.data_root() / "nvidia-h200"


# ---------------------------------------------------------------- the schedule
def test_timeline_pingpong_takes_turns():
    seg = pingpong.timeline(ag.schedule("pingpong"), tiles=5)
    gemm = seg[seg["unit"] == "tensor cores"]
    for t in range(int(gemm["start"].min()), int(gemm["end"].max())):  # exactly one warpgroup per turn
        assert ((gemm["start"] <= t) & (gemm["end"] > t)).sum() == 1, t
    for c in ("consumer0", "consumer1"):  # each softmax runs while the other warpgroup's GEMMs hold the tensor cores
        other = gemm[gemm["partition"] != c]
        for r in seg[(seg["partition"] == c) & (seg["unit"] == "CUDA cores")].itertuples():
            assert ((other["start"] == r.start) | (r.start >= other["end"].max())).any(), r
    assert pingpong.tensor_busy_share(seg) == 1.0
    one = pingpong.timeline(ag.schedule("ws"), tiles=5)
    assert pingpong.tensor_busy_share(one) == pytest.approx(5 / 9)  # GEMM, softmax, GEMM, ...: towards one half


def test_producer_never_overwrites_a_stage_in_use():
    seg = pingpong.timeline(ag.schedule("pingpong"), tiles=6)
    tma = seg[seg["unit"] == "TMA"].set_index("what")
    gemm = seg[seg["unit"] == "tensor cores"]
    for j in range(6):
        first_use_k = gemm[gemm["what"].str.startswith(f"S{j}")]["start"].min()
        assert tma.loc[f"K{j}", "end"] <= first_use_k
        if j >= ag.STAGES:  # K_{j-S}'s last reader is done before K_j lands in its stage
            assert gemm[gemm["what"].str.startswith(f"S{j - ag.STAGES}")]["end"].max() <= tma.loc[f"K{j}", "start"]
    assert list(tma["start"]) == sorted(tma["start"])  # one producer warp: copies issued in order


@pytest.mark.parametrize("bad", [[], [{"name": "x"}], "pingpong"])
def test_timeline_bad_input(bad):
    with pytest.raises(ValueError, match=r"expected attention_gluon\.schedule"):
        pingpong.timeline(bad)
    with pytest.raises(ValueError, match="tiles is 0"):
        pingpong.timeline(ag.schedule(), tiles=0)


def test_schedule_figure_rows_and_errors():
    from infralens_lab.present import figure_alt
    from infralens_lab.present import pingpong as figs

    fig = figs.schedule_figure(pingpong.timeline(ag.schedule(), tiles=2))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["producer", "consumer1", "consumer0"]
    assert "tensor cores" in figure_alt(fig) or "tensor" in ax.get_title()
    with pytest.raises(ValueError, match="expected the columns"):
        figs.schedule_figure(pingpong.timeline(ag.schedule()).iloc[:0])


# ---------------------------------------------------------------- ncu_gluon.csv, synthetic in the real layout
def _tiled_fast_block() -> list[str]:
    lines = (H200 / "ncu_attention.csv").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(ncu.CONFIG_MARK + " tiled_fast"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(ncu.CONFIG_MARK)), len(lines))
    return lines[start:end]


def synthetic_gluon_csv(rng: random.Random, pipes: bool = True) -> str:
    """Two blocks as the recorder writes ncu_gluon.csv: gluon and tiled_fast at D = 128, from the H200's real
    tiled_fast block (header, units row, one launch), times scaled by fresh factors, PIPES columns appended."""
    out = []
    for kind, kernel in (("gluon", "attn_fwd_gluon"), ("tiled_fast", "attn_fwd_fast")):
        block = _tiled_fast_block()
        head = [ln for ln in block if not ln.startswith('"')]
        rows = list(csv.reader(io.StringIO("\n".join(ln for ln in block if ln.startswith('"')))))
        header, units, data = rows[0], rows[1], rows[2]
        data[header.index("Kernel Name")] = kernel
        t = header.index("gpu__time_duration.sum")
        data[t] = f"{float(data[t].replace(',', '')) * rng.uniform(1.5, 2.5):.0f}"
        if pipes:
            for m in ncu.PIPES:
                header.append(m)
                units.append("%" if m.endswith("pct_of_peak_sustained_active") else "inst")
                data.append(f"{rng.uniform(1, 100) if units[-1] == '%' else rng.randint(10**6, 10**9)}")
        buf = io.StringIO()
        csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([header, units, data])
        head[0] = f"{ncu.CONFIG_MARK} {kind} shape=4,16,4096,128 fp16"
        head[1] = head[1].replace("regex:attn_fwd_fast", f"regex:{kernel}")
        out.append("\n".join(head) + "\n" + buf.getvalue())
    return "".join(out)


@pytest.fixture(scope="module")
def rng():
    return random.Random()  # fresh each run


def test_pipe_table_reads_both_kernels(rng):
    text = synthetic_gluon_csv(rng)
    tab = pingpong.pipe_table(text).set_index("kernel")
    assert list(tab.index) == list(pingpong.KERNELS)
    raw = ncu.wide(ncu.parse_raw_csv(text)).set_index("kernel")
    for k in pingpong.KERNELS:
        assert tab.loc[k, "time_us"] == pytest.approx(raw.loc[k, "gpu__time_duration.sum"] / 1e3)
        assert tab.loc[k, "xu_inst"] == raw.loc[k, ncu.PIPES[2]]
        assert 0 < tab.loc[k, "clock_ghz"] < 3 and tab.loc[k, "top_stall"] not in (None, "selected")
        assert 0 < tab.loc[k, "top_stall_share"] < 1
    assert tab.loc["attn_fwd_gluon", "config"] == "gluon shape=4,16,4096,128 fp16"


def test_pipe_table_without_pipe_metrics_and_missing_kernel(rng):
    tab = pingpong.pipe_table(synthetic_gluon_csv(rng, pipes=False))
    assert tab[["fma_inst", "xu_inst", "tensor_active_pct"]].isna().all().all()  # dropped by ncu: NaN, not 0
    assert not math.isnan(tab["tensor_inst"].iloc[0])
    only_fast = synthetic_gluon_csv(rng).split(ncu.CONFIG_MARK + " tiled_fast")[1]
    with pytest.raises(ValueError, match=r"missing \['attn_fwd_gluon'\]"):
        pingpong.pipe_table(ncu.CONFIG_MARK + " tiled_fast" + only_fast)


def test_bench_rows():
    assert pingpong.bench_rows({"H200": {"attention": [{"variant": "tiled_fast"}]}}) == {}
    rows = pingpong.bench_rows({"H200": {"attention": [{"variant": "gluon", "tflops": 1.0}]}, "H100": {}})
    assert list(rows) == ["H200"]


# ---------------------------------------------------------------- a partial set beside the committed ones
@pytest.fixture(scope="module")
def root_with_partial(tmp_path_factory):
    """data/recorded as committed (linked) plus nvidia-h200-gluon: device + ncu_gluon.csv, written by the recorder's
    writer with the H200 set's own provenance (as `record --only device,ncu_gluon` on that GPU would)."""
    root = tmp_path_factory.mktemp("recorded")
    for p in evidence.data_root().iterdir():
        if p.name != "nvidia-h200-gluon":   # the committed one; a synthetic one stands in for it here
            (root / p.name).symlink_to(p)
    h200 = evidence.RecordedStore(H200)
    w = evidence.EvidenceWriter(root / "nvidia-h200-gluon", "python -m infralens_lab record --only device,ncu_gluon",
                                provenance=h200.provenance)
    w.write("device", h200.load("device").values)
    w.write_text("ncu_gluon.csv", synthetic_gluon_csv(random.Random()))
    w.close()
    yield root
    shutil.rmtree(root / "nvidia-h200-gluon")


def test_partial_set_is_found_and_harmless(root_with_partial, monkeypatch):
    before = evidence.default_reference()[0]   # the H100 set on a CPU, the GPU's own set on an H200
    monkeypatch.setenv("INFRALENS_DATA", str(root_with_partial))
    have = evidence.recordings()
    assert "nvidia-h200-gluon" in have and evidence.default_reference()[0] == before != "nvidia-h200-gluon"
    ref = evidence.reference()
    st = pingpong.recorded_set(ref)
    assert st is not None and st.folder.name == "nvidia-h200-gluon" and st.gpu == "NVIDIA H200"
    assert pingpong.recorded_set(evidence.reference("nvidia-h200")).folder.name == "nvidia-h200-gluon"
    assert evidence.own_set("NVIDIA H200").folder.name == "nvidia-h200"  # the one-GPU set stays the H200's own
    assert counters.store_kernel_table(st) is None  # no ncu_attention.csv: no kernel table, no verdicts
    assert "ncu_attention.csv" in evidence.load_all_sets()[0].files()  # the default reference still leads
    tables = {evidence.reference(s).gpu: counters.store_kernel_table(evidence.reference(s)) for s in have}
    assert tables["NVIDIA H200"] is None  # why views keyed by GPU must skip None (lab02.kernel_tables_by_gpu does)
    from infralens_lab.labs_support import lab02

    assert {"H100 80GB HBM3", "H200"} <= set(lab02.kernel_tables_by_gpu())


def test_no_recording_is_none(tmp_path):
    assert pingpong.recorded_set(root=tmp_path) is None


def test_lab04_q11_premise_from_the_kernels_layout():
    """lab04.q11 (answer D): the consumers take turns (turn orders 0 and 1), each issues both GEMMs and loads only
    its Q, the producer alone copies K and V (option A's premise is false), each consumer owns its own 64 rows (B),
    and the turn passes inside the tile loop while O is stored once after it (C)."""
    import inspect

    parts = {p["name"]: p for p in ag.schedule("pingpong")}
    assert [parts[c]["turn_order"] for c in ("consumer0", "consumer1")] == [0, 1]
    assert parts["producer"]["loads"] == ["K", "V"] and all(parts[c]["loads"] == ["Q"] for c in ("consumer0", "consumer1"))
    assert parts["consumer0"]["rows"] != parts["consumer1"]["rows"]
    src = inspect.getsource(ag._consumer.fn)
    loop, after = src.split("for j in range(1, n_tiles):")[1].split("# The last P V.")
    assert "mbarrier.arrive(turn.index(1 - cid))" in loop and "_softmax_tile" in loop and "gl.store" in after
