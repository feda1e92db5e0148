"""Lab 02's edit-and-measure exercise (issue 38): attn_fwd at the learner's tiles, checked on fresh random inputs at an
odd N, compiled for sm_90 on this CPU (registers, spills, shared memory: the numbers ncu recorded), read against the
traffic model; refusals name what they saw. The compiler's occupancy rule is held to every recorded kernel's
``launch__occupancy_limit_*``."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import triton
import triton.language as tl

from infralens_lab import device, evidence
from infralens_lab.analysis import hardware, tile_edit
from infralens_lab.kernels import attention
from infralens_lab.labs_support import lab02
from infralens_lab.measure import sass_compile, tile_runs
from infralens_lab.parse.ncu import parse_raw_csv

LAB = Path(__file__).resolve().parents[1] / "labs" / "02_roofline.ipynb"
LAB_TILES = attention.tiled_config(64, gpu=True)
WORKED = dict(LAB_TILES, BLOCK_M=256)


@triton.jit
def _q_as_output(q_ptr, k_ptr, v_ptr, o_ptr,
                 stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
                 stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh, stride_om, stride_od,
                 H, N_CTX, sm_scale,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # A wrong edit: every output row is its query row (the loop over K and V deleted), all rows written.
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    offs_m, offs_d = pid_m * BLOCK_M + tl.arange(0, BLOCK_M), tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < N_CTX, other=0.0)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od, q,
             mask=offs_m[:, None] < N_CTX)


@pytest.fixture(scope="module")
def checks():
    """correctness of the lab's tiles and of the worked edit, each on fresh inputs (about 1.5 s in the interpreter)."""
    return {"lab's tiles": tile_runs.correctness(LAB_TILES), "your edit": tile_runs.correctness(WORKED)}


def _cell(tag: str) -> dict:
    nb = json.loads(LAB.read_text())
    (cell,) = [c for c in nb["cells"] if tag in c["metadata"].get("tags", []) and "edit_and_measure" in "".join(c["source"])]
    return cell


def _tiles_in(cell: dict) -> dict:
    """The ``dict(...)`` the cell hands to edit_and_measure, read from its source (the cell is not run)."""
    call = next(n for n in ast.walk(ast.parse("".join(cell["source"]))) if isinstance(n, ast.Call)
                and getattr(n.func, "id", None) == "dict")
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}


def test_the_exercise_starts_from_the_labs_tiles_and_the_worked_edit_changes_one():
    ex, sol = _cell("exercise"), _cell("solution")
    assert ex["metadata"]["infralens"] == {"edit": "lab02.edit1"} and "question" not in ex["metadata"]["infralens"]
    assert _tiles_in(ex) == LAB_TILES, "the exercise must start from attn_fwd's GPU tiles (attention.tiled_config)"
    assert _tiles_in(sol) == WORKED and sol["metadata"]["jupyter"] == {"source_hidden": True, "outputs_hidden": True}


def test_both_tile_sets_match_torch_on_fresh_inputs_at_an_odd_length(checks):
    for label, c in checks.items():
        n = c["shape"][2]
        assert c["passed"] and not c["note"], f"{label}: {c}"
        assert n % 2 == 1 and n % LAB_TILES["BLOCK_N"] and n % (256 if label == "your edit" else 128), n
    assert checks["lab's tiles"]["seed"] != tile_runs.correctness(LAB_TILES)["seed"]  # fresh inputs each call


def test_a_wrong_edit_is_named_with_its_error_and_seed():
    c = tile_runs.correctness(LAB_TILES, kernel=_q_as_output)
    assert not c["passed"] and c["max_abs_err"] > 0.1 and not c["note"]
    rows = [{"config": "your edit", "check": c}]
    (note,) = tile_edit.edit_notes(rows)
    assert note.startswith("your edit: output differs from torch by up to") and f"seed {c['seed']}" in note
    refused = tile_runs.correctness(LAB_TILES, kernel=object())  # not a kernel at all: a note, no traceback
    assert not refused["passed"] and refused["note"].startswith("TypeError:")
    assert tile_edit.edit_notes([{"config": "your edit", "check": refused}])[0].startswith("your edit: Triton refused it")


@pytest.mark.parametrize("tiles, said", [
    ([128, 64], r"tiles is a list; expected a dict with keys BLOCK_M, BLOCK_N, num_warps, num_stages"),
    (dict(BLOCK_M=128, BLOCK_N=64, num_warps=8), r"\(missing \['num_stages'\]\)"),
    (dict(LAB_TILES, BLOCK_K=32), r"\(unknown \['BLOCK_K'\]\)"),
    (dict(LAB_TILES, BLOCK_M=100), r"BLOCK_M is 100; expected a power of two from 16 to 256"),
    (dict(LAB_TILES, BLOCK_N=8), r"BLOCK_N is 8; expected a power of two from 16 to 256"),
    (dict(LAB_TILES, num_warps=True), r"num_warps is True \(bool\); expected an int"),
    (dict(LAB_TILES, num_stages=0), r"num_stages is 0; expected 1 to 6"),
])
def test_tiles_that_cannot_run_are_refused_by_name(tiles, said):
    with pytest.raises(tile_runs.TileError, match=said):
        tile_runs.check_tiles(tiles)


def test_the_lab_prints_a_refused_edit_in_one_line(capsys):
    lab02.edit_and_measure(dict(LAB_TILES, BLOCK_M=96))
    assert capsys.readouterr().out == "Your edit cannot run: BLOCK_M is 96; expected a power of two from 16 to 256\n"


def test_the_compile_gives_what_ncu_recorded_for_the_labs_tiles():
    """Compiled here for sm_90 (a child process, cached), attn_fwd at the lab's tiles has the registers and dynamic
    shared memory the recorder's ncu read on the H100 and the H200."""
    got = sass_compile.attn_fwd_resources(LAB_TILES["BLOCK_M"], LAB_TILES["BLOCK_N"], LAB_TILES["num_warps"],
                                          LAB_TILES["num_stages"])
    for slug in ("nvidia-h100-80gb-hbm3", "nvidia-h200"):
        rec = tile_edit.recorded_original(parse_raw_csv(evidence.reference(slug).text("ncu_attention.csv"))).iloc[0]
        assert (got["registers"], got["shared_bytes"] / 1024, got["threads"] // 32) == \
            (rec["regs/thread"], rec["shared KiB"], rec["warps"]), slug
        assert got["stack_bytes"] == got["local_bytes"] == 0
        assert rec["SM-side MiB (L1)"] == pytest.approx(rec["MiB (model)"], rel=0.02)  # the model is the L1 bytes


def _recorded_launches():
    for slug in evidence.recordings():
        st = evidence.reference(slug)
        for name in ("ncu_attention.csv", "ncu_matmul.csv", "ncu_copies.csv"):
            if name in st.files():
                f = parse_raw_csv(st.text(name))
                yield from ((slug, k, g.set_index("metric")["value"]) for k, g in f[f["launch"] == 0].groupby(
                    ["config", "kernel"]))


def test_resident_blocks_gives_ncus_occupancy_limits_for_every_recorded_kernel():
    n = 0
    for slug, kernel, raw in _recorded_launches():
        shared = int(raw["launch__shared_mem_per_block_dynamic"] + raw["launch__shared_mem_per_block_static"])
        got = tile_edit.resident_blocks(int(raw["launch__registers_per_thread"]), int(raw["launch__block_size"]),
                                        shared, int(raw["launch__shared_mem_config_size"]))
        want = {f"by_{k}": int(raw[f"launch__occupancy_limit_{k}"]) for k in ("registers", "warps", "blocks")}
        want["by_shared"] = int(raw["launch__occupancy_limit_shared_mem"])
        assert {k: got[k] for k in want} == want, (slug, kernel)
        n += 1
    assert n >= 20
    with pytest.raises(ValueError, match=r"registers=300, threads=256; expected at most 255"):
        tile_edit.resident_blocks(300, 256, 0)


def _rows(checks, timing=None):
    res = {"lab's tiles": dict(registers=126, stack_bytes=0, local_bytes=0, shared_bytes=65536, threads=256, sm=90, triton="x"),
           "your edit": dict(registers=218, stack_bytes=0, local_bytes=0, shared_bytes=81920, threads=256, sm=90, triton="x")}
    tiles = {"lab's tiles": LAB_TILES, "your edit": WORKED}
    return [{"config": c, "tiles": tiles[c], "shape": tile_runs.TIMED_SHAPE, "check": checks[c], "resources": res[c],
             "timing": timing and timing[c]} for c in tiles]


def test_the_reading_interpreter_and_gpu(checks):
    table = tile_edit.edit_table(_rows(checks))
    assert list(table["K/V passes (model)"]) == [32, 16] and list(table["blocks/SM"]) == [2, 1]
    assert table["MiB (model)"][1] / table["MiB (model)"][0] == pytest.approx(0.515, abs=0.001)  # Q+O stay
    said = tile_edit.edit_reading(table)
    assert said.startswith("Your edit reads K and V 16 times instead of 32 (model: 0.52x the bytes")
    assert "8 warps resident per SM (1 block, limited by registers) against 16" in said
    assert said.endswith("interpreter: counts and a model, no timing.")
    timed = {c: dict(median_ms=ms, p10_ms=ms * 0.99, p90_ms=ms * 1.02, n=40, rounds=2, sm_clock_hz=1.755e9, gpu="NVIDIA H200",
                     shape=tile_runs.TIMED_SHAPE, sms=132, cc="9.0") for c, ms in (("lab's tiles", 0.8), ("your edit", 0.9))}
    t2 = tile_edit.edit_table(_rows(checks, timed))
    assert t2["TFLOP/s"][0] == pytest.approx(4 * 4 * 16 * 4096 ** 2 * 64 / 0.8e-3 / 1e12)
    assert "timed here: 305 TFLOP/s at 1.75 GHz against 344 at 1.75 GHz" in tile_edit.edit_reading(t2)
    assert "live · NVIDIA H200 · CUDA events" in tile_edit.edit_caption(_rows(checks, timed))
    fast = {c: dict(v, median_ms=0.1) for c, v in timed.items()}  # 2.7 PFLOP/s: above 132 SMs x 4096 x 1.755 GHz
    with pytest.raises(hardware.PhysicsError, match="above 132 SMs x 4096 FLOP/cycle x the clock"):
        tile_edit.edit_table(_rows(checks, fast))
    same = tile_edit.edit_table(_rows({"lab's tiles": checks["lab's tiles"], "your edit": checks["lab's tiles"]})[:1] * 2)
    assert tile_edit.edit_reading(same).startswith("Your tiles are the lab's")


def test_a_tile_set_too_big_for_shared_memory_is_said_to_not_launch(checks):
    rows = _rows(checks)
    rows[1]["resources"] = dict(rows[1]["resources"], shared_bytes=240 * 1024)
    table = tile_edit.edit_table(rows)
    assert table["blocks/SM"][1] == 0
    assert tile_edit.edit_reading(table).startswith("Your edit cannot launch on sm_90: 240 KiB of shared memory per "
                                                    "block, above the 227 KiB one block may have")


@pytest.mark.skipif(device.is_gpu(), reason="interpreter mode only: a GPU times the tiles (next test)")
def test_no_timing_in_the_interpreter():
    assert tile_runs.time_tiles({"lab's tiles": LAB_TILES}) is None


def test_time_tiles_alternates_the_order_and_pools_the_rounds(monkeypatch):
    """The GPU path's bookkeeping, on the CPU: CUDA events and NVML faked (each call of the kernel runs for real, in
    the interpreter, at a small shape), the rounds' order alternated and their samples and clocks pooled."""
    from infralens_lab.measure import ceilings, timing

    order, ms = [], iter(range(1, 100))

    def fake_clocked(fn, pairs, warmup, repeats):
        fn()
        order.append(len(order))
        t = timing.summarize([next(ms) for _ in range(repeats)], "cuda_events")
        return t, {"sm_clock_hz": 1.7e9 + 1e7 * len(order), "sm_clock_min_hz": 1.6e9, "sm_clock_max_hz": 1.9e9}
    props = type("P", (), {"name": "Fake GPU", "multi_processor_count": 132, "major": 9, "minor": 0})()
    monkeypatch.setattr(tile_runs, "is_gpu", lambda: True)
    monkeypatch.setattr(ceilings, "clocked", lambda fn, pairs, warmup, repeats: fake_clocked(fn, pairs, warmup, repeats))
    monkeypatch.setattr(tile_runs.torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(tile_runs.torch.cuda, "current_device", lambda: 0)
    got = tile_runs.time_tiles({"a": dict(LAB_TILES, BLOCK_M=32), "b": dict(LAB_TILES, BLOCK_M=16)},
                               shape=(1, 1, 48, 64))
    # round 1: a then b (calls 1, 2); round 2: b then a (calls 3, 4): each pools 20 + 20 samples and its two clocks
    assert got["a"]["n"] == got["b"]["n"] == 40 and got["a"]["rounds"] == tile_runs.ROUNDS == 2
    assert got["a"]["median_ms"] == pytest.approx((20 + 61) / 2) and got["b"]["median_ms"] == pytest.approx((40 + 41) / 2)
    assert got["a"]["sm_clock_hz"] == pytest.approx(1.725e9) and got["b"]["sm_clock_hz"] == pytest.approx(1.725e9)
    assert (got["a"]["gpu"], got["a"]["sms"], got["a"]["cc"]) == ("Fake GPU", 132, "9.0")


@pytest.mark.skipif(not device.is_gpu(), reason="needs a GPU: times both tile sets with CUDA events and NVML clocks")
def test_a_gpu_times_both_tile_sets_with_their_clock():
    rows = tile_runs.measure_edit(WORKED, LAB_TILES)
    table = tile_edit.edit_table(rows)  # raises PhysicsError for a rate above SMs x peak x clock
    for r in rows:
        tm = r["timing"]
        assert tm["n"] >= 40 and tm["rounds"] == 2 and tm["p10_ms"] <= tm["median_ms"] <= tm["p90_ms"], tm
        assert tm["sm_clock_hz"], f"no SM clock sampled during the timing: {tm.get('clock_note')}"
    assert (table["TFLOP/s"] > 0).all() and "timed here:" in tile_edit.edit_reading(table)
    print(table.to_string(), tile_edit.edit_reading(table), sep="\n")
