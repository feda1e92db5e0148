"""Lab 04's edit-and-measure (issue 38): the lab's strided copy and the notebook's worked edit run under Triton's
interpreter on fresh random records, their loads recorded and counted as warp requests and 32-byte sectors
(measure.copy_edit, analysis.copy_edit); the count model held to the recorded ncu counters of the lab's copies; a
wrong edit named without a traceback; bad input refused with what was seen; the GPU row's columns and the ncu
target of an edit, on CPU."""
from __future__ import annotations

import importlib.util
import json
import random

import numpy as np
import pytest
from conftest import ROOT

from infralens_lab import device
from infralens_lab.analysis import copies as copy_info
from infralens_lab.analysis import copy_edit as edit_info
from infralens_lab.kernels import copies
from infralens_lab.labs_support import lab04
from infralens_lab.measure import copy_edit, target
from infralens_lab.measure.clocks import ClockSummary
from infralens_lab.measure.timing import summarize
from infralens_lab.parse import ncu

interpreter_only = pytest.mark.skipif(device.is_gpu(), reason="counts loads in Triton's interpreter (interpreter mode)")
LAB = ROOT / "labs" / "04_warp_stalls.ipynb"
SEED = random.randrange(2**31)  # fresh records every run; printed in a failure's message
ORIGINAL = copies.KERNELS["copy_strided"]


def _kernel_module(tmp_path, source: str, name: str = "edit_mod"):
    """A module file holding ``source`` (Triton's JIT reads a kernel's source from its file)."""
    path = tmp_path / f"{name}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, path


@pytest.fixture(scope="module")
def worked(tmp_path_factory):
    """The notebook's worked edit (its solution cell after the edit exercise), as a kernel."""
    cells = json.loads(LAB.read_text())["cells"]
    at = next(i for i, c in enumerate(cells) if c["metadata"].get("infralens", {}).get("edit") == "lab04.edit1")
    source = "".join(cells[at + 2]["source"]).split("\n\n\nfor ")[0]  # the kernel, not the loop that measures it
    mod, _ = _kernel_module(tmp_path_factory.mktemp("worked"), source, "worked_edit")
    return mod.copy_strided_rows


@pytest.fixture(scope="module")
def recorded():
    st = lab04.store()
    fam = lab04.recorded_copy_family(st)
    return fam, copy_info.counter_rows(ncu.parse_raw_csv(st.text(lab04.COPY_FILES[0])), fam.labels())


@interpreter_only
def test_original_and_worked_edit_at_stride_8(worked):
    runs = copy_edit.beside_original(worked, 8, seed=SEED)
    table = edit_info.edit_table(runs).set_index("kernel")
    orig, edit = table.loc["original: copy_strided"], table.loc["edit: copy_strided_rows"]
    assert (orig["output"], edit["output"]) == ("PASS", "PASS"), f"seed {SEED}"
    assert orig["records"] % 2 == 1 and orig["records"] % copies.BLOCK  # odd, the last program partly masked
    assert (orig[edit_info.SPR], edit[edit_info.SPR]) == (32, 16)  # scalar loads 128 B apart; 16-byte vectors
    assert orig[edit_info.PER_USEFUL] == edit[edit_info.PER_USEFUL] == 8  # one useful value per sector either way
    assert edit["requests"] > orig["requests"]  # the same sectors in more, fuller requests
    assert "32 -> 16" in edit_info.reading(edit_info.edit_table(runs))


@interpreter_only
def test_worked_edit_at_stride_2_reads_each_sector_once(worked):
    r = copy_edit.run(worked, 2, seed=SEED)
    req = edit_info.run_requests(r.loads)
    assert r.ok and req.sectors * 32 == pytest.approx(r.n_out * 4 * 2, rel=0.01)  # read x of the 32-byte model: 2


@interpreter_only
@pytest.mark.parametrize("stride", copies.STRIDES)
def test_model_counts_equal_the_recorded_ncu_counts_of_the_lab_copies(stride, recorded):
    """Real addresses, modelled grouping: the original's sectors per request and sector bytes per useful byte equal
    what ncu counted on the recorded 64 Mi-output copies (partly masked requests left out of the first)."""
    fam, rows = recorded
    r = copy_edit.run(ORIGINAL, stride, seed=SEED)
    want = edit_info.recorded_view(fam.table, rows, stride).set_index("copy").loc[f"stride {stride}"]
    req = edit_info.run_requests(r.loads)
    assert req.sectors_per_request == want[edit_info.SPR]
    # all requests of an odd-sized run, the last partial ones included: within 1% of the recorded ratio
    assert req.sectors * 32 / (r.n_out * 4) == pytest.approx(want[edit_info.PER_USEFUL], rel=0.01)


@interpreter_only
def test_wrong_edits_are_named_without_a_traceback(tmp_path, capsys, recorded):
    mod, _ = _kernel_module(tmp_path, '''
@triton.jit
def contiguous(x_ptr, out_ptr, n_out, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n_out), mask=offs < n_out)


@triton.jit
def unmasked(x_ptr, out_ptr, n_out, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * STRIDE))


@triton.jit
def stores_past(x_ptr, out_ptr, n_out, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * STRIDE, mask=offs < n_out))


@triton.jit
def crashes(x_ptr, out_ptr, n_out, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs[:, None] + tl.arange(0, 3)[None, :]), mask=offs < n_out)
''')
    wrong = copy_edit.run(mod.contiguous, 4, seed=SEED)
    assert not wrong.ok and "outputs differ from x[::STRIDE]" in wrong.problem and "first: output 1" in wrong.problem
    crash = copy_edit.run(mod.crashes, 4, seed=SEED)
    assert not crash.ok and crash.problem.startswith("did not run: ")
    past = copy_edit.run(mod.unmasked, 4, n_out=1001, seed=SEED)  # the last program reads past x and writes past out
    assert not past.ok and past.problem.startswith("did not run: OutOfBounds: a load reads outside x at byte offset")
    assert "it holds 16,016 bytes" in past.problem
    store = copy_edit.run(mod.stores_past, 4, n_out=1001, seed=SEED)
    assert "OutOfBounds: a store writes outside out at byte offset 4,004 from its start" in store.problem
    fam, rows = recorded
    table = lab04.edit_and_measure(mod.contiguous, stride=4, fam=fam, rows=rows)
    out = capsys.readouterr().out
    assert list(table["output"]) == ["PASS", "FAIL"] and "FAIL edit: contiguous: " in out and "Traceback" not in out
    assert "its output is wrong" in out and "NVIDIA H" in out  # the reading says so; the recorded caption names the GPU


def test_bad_input_is_refused_with_what_was_seen(tmp_path):
    with pytest.raises(copy_edit.CopyEditError, match=r"kernel is function .*expected a @triton.jit kernel"):
        copy_edit.run(lambda x: x, 8)
    mod, _ = _kernel_module(tmp_path, '''
@triton.jit
def renamed(src_ptr, out_ptr, n_out, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    pass
''', "renamed_mod")
    with pytest.raises(copy_edit.CopyEditError, match=r"renamed takes \(src_ptr, .*expected \(x_ptr, out_ptr"):
        copy_edit.run(mod.renamed, 8)
    for bad in (3, 0, 64, True, "8"):
        with pytest.raises(copy_edit.CopyEditError, match=rf"stride is {bad!r}; expected one of \(1, 2, 4"):
            copy_edit.beside_original(ORIGINAL, bad)
    with pytest.raises(ValueError, match="offsets has 3 positions and active 2"):
        edit_info.warp_requests([0, 4, 8], [True, True])
    with pytest.raises(ValueError, match="elem_bytes is 3"):
        edit_info.warp_requests([0], [True], elem_bytes=3)
    with pytest.raises(ValueError, match="expected the original and at least one edit"):
        edit_info.reading(edit_info.edit_table([]))


def test_warp_requests_on_random_addresses():
    """Random sector-aligned gathers: each lane in its own sector unless two lanes drew the same one."""
    rng = np.random.default_rng(SEED)
    sectors = rng.integers(0, 10**6, size=(7, 128))
    offsets = (sectors * 32 + 4 * rng.integers(0, 8, size=sectors.shape)).ravel()  # 4-byte elements in those sectors
    r = edit_info.warp_requests(offsets, np.ones(offsets.size, bool))
    per = sectors.reshape(7, 32, 4).transpose(0, 2, 1).reshape(-1, 32)  # lane l's j-th element: one request per j
    assert (r.requests, r.sectors) == (28, sum(len(set(row)) for row in per.tolist()))
    half = np.arange(offsets.size) % 128 < 64  # the last 16 lanes of every warp masked off
    masked = edit_info.warp_requests(offsets, half)
    assert masked.requests == 28 and masked.full_requests == 0 and np.isnan(masked.sectors_per_request)
    assert edit_info.warp_requests(np.arange(0, 4 * 1000, 4), np.arange(1000) < 999).full_sectors == 7 * 16


@interpreter_only
def test_record_loads_leaves_the_interpreter_as_it_was(worked):
    from triton.runtime import interpreter

    copy_edit.run(worked, 8, n_out=101, seed=SEED)
    assert not {"create_masked_load", "create_masked_store"} & set(vars(interpreter.interpreter_builder))
    with pytest.raises(copy_edit.CopyEditError):  # refused before the wrap
        copy_edit.run(worked, 5)
    assert "create_masked_load" not in vars(interpreter.interpreter_builder)


def test_gpu_row_columns_and_conditions():
    """What a GPU run's row shows (built from a measured-looking run: no GPU here): time, spread, useful rate,
    the SM clock and ncu's sectors per request; the caption names the GPU, CUDA events and the clock's source."""
    t = summarize([0.9, 1.0, 1.1, 1.0, 1.05, 0.95, 1.0, 1.2, 0.98, 1.01], "cuda_events")
    clk = ClockSummary(1.98e9, 1.9e9, 1.99e9, 3.2e9, 40, "0000:00:00.0")
    base = dict(stride=8, n_out=2**20 + 1, mode="gpu", ok=True, timing=t, clock=clk, gpu="NVIDIA H200")
    runs = [copy_edit.EditRun(name="original: copy_strided", ncu={"sectors": 3.2e7, "requests": 1e6}, **base),
            copy_edit.EditRun(name="edit: rows", ncu={"sectors": 1.6e7, "requests": 1e6}, **base)]
    row = edit_info.edit_table(runs).iloc[1]
    assert row["time (µs)"] == 1000.0 and row["p10-p90 (µs)"].count("-") == 1 and row["SM clock (GHz)"] == 1.98
    assert row["sectors/req (ncu)"] == 16 and row["useful GB/s (read + written)"] == pytest.approx(8.4, abs=0.1)
    assert "sectors per request (ncu) 32 -> 16" in edit_info.reading(edit_info.edit_table(runs))
    cond = edit_info.conditions(runs)
    assert "NVIDIA H200" in cond and "10 runs" in cond and "NVML" in cond
    assert edit_info.conditions([copy_edit.EditRun("a", 8, 1, "interpreter", True)]).startswith("interpreter: counts")


@interpreter_only
def test_edit_target_runs_a_kernel_from_its_file_and_ncu_says_why_not(tmp_path, worked, monkeypatch):
    cells = json.loads(LAB.read_text())["cells"]
    at = next(i for i, c in enumerate(cells) if c["metadata"].get("infralens", {}).get("edit") == "lab04.edit1")
    _, path = _kernel_module(tmp_path, "".join(cells[at + 2]["source"]).split("\n\n\nfor ")[0], "target_mod")
    assert target.main(["--kernel", "copy_edit", "--source", str(path), "--name", "copy_strided_rows",
                        "--stride", "8", "--n", "1001"]) == 0
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu on PATH
    monkeypatch.delenv("INFRALENS_NCU", raising=False)
    counters, line = copy_edit.ncu_sectors(worked, 8, n_out=1001)
    assert counters is None and line.startswith("ncu: ") and "not on PATH" in line


@pytest.mark.skipif(not device.is_gpu(), reason="the live path: CUDA events, NVML clock and ncu need a GPU")
def test_live_path_on_a_gpu(worked, capsys):
    """``pytest tests/test_edit_lab04.py -k live -s`` on a GPU: the original and the worked edit timed (CUDA events,
    the SM clock read during the runs) and, where ncu can read counters, their sectors per request."""
    for stride in (8, 2):
        runs = copy_edit.beside_original(worked, stride, profile=True)
        table = edit_info.edit_table(runs)
        with capsys.disabled():
            print("", table.to_string(), edit_info.conditions(runs), *edit_info.notes(runs), edit_info.reading(table),
                  sep="\n")
        assert all(r.ok and r.timing.meaningful and r.timing.n >= 10 and r.clock is not None for r in runs)
        assert all(0.2e9 < r.clock.sm_clock_hz < 3.5e9 for r in runs)  # a clock a GPU runs at, read by NVML
        if all(r.ncu for r in runs):
            orig, edit = (r.ncu["sectors"] / r.ncu["requests"] for r in runs)
            assert orig == pytest.approx(32, rel=0.02) and edit < orig  # the recorded 32; vectors pack requests
