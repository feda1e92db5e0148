"""Every kernel the labs launch compiles for every architecture class a learner may have (sm_75 ... sm_120), on CPU.

One subprocess (``tools/arch_compile_check.py``, Triton with ``TRITON_INTERPRET=0``) compiles each kernel with the
configs its wrapper launches on a GPU, for each target and each dtype the target runs, once per session; the tests
below read its rows. Most rows stop after TTGIR and shared-memory allocation (what this checks); the small kernels
go through ptxas on every target (so the wheel's ptxas is asked about each), and the fast attention kernel through
PTX on one target per variant, where the PTX must say what the TTGIR said. The fast kernel's variant per target
(:func:`infralens_lab.kernels.arch.attention_variant`) is checked against what the compiler made, and its
autotuner's shared-memory pruning against what Triton allocated.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infralens_lab.analysis.hardware import PEAK_PER_CYCLE
from infralens_lab.kernels import arch
from infralens_lab.kernels.arch import ARCHS, UnknownArchError

ROOT = Path(__file__).resolve().parents[1]
KERNELS = {"add_kernel", "copy_coalesced", "copy_strided", "naive_softmax", "naive_qk", "naive_pv", "attn_fwd",
           "attn_fwd_fast"}
ELEMENTWISE = {"add_kernel", "copy_coalesced", "copy_strided"}  # the only kernels that also run fp32
# Targets Triton refuses outright, by name, with the reason: (kernel, cc) -> the error text it must show. Triton 3.6
# (its ptxas and ptxas-blackwell) compiles every kernel for every target here, so the table is empty; a Triton that
# drops a target (sm_75 has no tensor-core path left in 3.6) fails test_refusals_are_the_named_ones until the
# refusal is named here and the package's variant table says what runs instead.
EXPECTED_REFUSALS: dict[tuple[str, int], str] = {}


@pytest.fixture(scope="session")
def report(tmp_path_factory):
    """The compile report of every kernel x target x dtype (one subprocess, a fresh Triton cache: the tool's own, made
    in its temporary folder, here ``tmp``, and removed when it exits)."""
    tmp = tmp_path_factory.mktemp("arch_compile")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_CACHE_DIR"} | {"PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "arch_compile_check.py"), "--json", str(tmp / "r.json")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((tmp / "r.json").read_text())
    out["left_in_tmp"] = sorted(p.name for p in tmp.iterdir() if p.name != "r.json")
    print(f"arch compile matrix: {len(out['rows'])} compiles in {time.perf_counter() - t0:.1f} s")
    return out


def _rows(report, cc, kernel=None):
    return [r for r in report["rows"] if r["cc"] == cc and (kernel is None or r["kernel"] == kernel)]


def test_the_tools_own_triton_cache_is_removed_when_it_exits(report):
    """Run without TRITON_CACHE_DIR, the tool compiles into a fresh cache of its own in the temporary folder and
    removes it at exit (it used to leave one folder in /tmp per run, and one more per run that set the variable)."""
    assert report["rows"] and report["left_in_tmp"] == [], report["left_in_tmp"]


@pytest.mark.parametrize("cc", ARCHS)
def test_every_kernel_compiles_in_every_dtype_of_the_target(report, cc):
    rows = _rows(report, cc)
    have = {(r["kernel"], r["dtype"]) for r in rows}
    want = {(k, d) for k in KERNELS for d in arch.kernel_dtypes(cc) if d != "fp32" or k in ELEMENTWISE}
    assert have == want, f"sm_{cc}: missing {sorted(want - have)}, unexpected {sorted(have - want)}"
    failed = {(r["kernel"], r["dtype"], r["config"]): r["error"] for r in rows
              if not r["ok"] and (r["kernel"], cc) not in EXPECTED_REFUSALS}
    assert not failed, f"sm_{cc}: compile errors {failed}"


def test_refusals_are_the_named_ones(report):
    refused = {(r["kernel"], r["cc"]): r["error"] for r in report["rows"] if not r["ok"]}
    assert set(refused) == set(EXPECTED_REFUSALS), (
        f"Triton {report['triton']} refused {sorted(refused)}; the named refusals are {sorted(EXPECTED_REFUSALS)}")
    for key, text in EXPECTED_REFUSALS.items():
        assert text in refused[key], f"{key}: refused with {refused[key]!r}, expected the reason {text!r}"


@pytest.mark.parametrize("cc", ARCHS)
def test_ptxas_takes_every_target(report, cc):
    """The small kernels went through ptxas (ptxas-blackwell from sm_100 on) for this target."""
    done = {r["kernel"] for r in _rows(report, cc) if r["ok"] and r["stage"] == "cubin"}
    assert {"add_kernel", "copy_coalesced", "copy_strided", "naive_softmax"} <= done, f"sm_{cc}: cubins of {done}"


@pytest.mark.parametrize("cc", ARCHS)
def test_fast_attention_variant_is_what_the_compiler_made(report, cc):
    v = arch.attention_variant_info(cc)
    rows = _rows(report, cc, "attn_fwd_fast")
    assert rows
    for r in rows:
        made = ("tma" if r["tma"] else "loads", r["mma"])
        assert made == (v.copies, v.mma), f"sm_{cc} {r['dtype']} {r['config']}: compiled to {made}, variant says {v.name}"
        assert not r["ws"], f"sm_{cc} {r['config']}: warp-specialized, but no candidate asks for it"
        if v.copies == "loads":  # the variant's reason says the rewritten loads are not made asynchronous
            assert not r["cp_async"], f"sm_{cc} {r['config']}: cp.async in a loads variant; update the reason"
    name, reason = arch.attention_variant(cc)
    assert name == v.name and f"sm_{cc}" in reason and ARCHS[cc].name in reason


def test_the_ttgir_reading_matches_the_ptx(report):
    """Where a row went on to PTX, the PTX shows the same copies and MMA instruction as the TTGIR; one target per
    fast-attention variant is among them."""
    full = [r for r in report["rows"] if r["ok"] and r["stage"] == "cubin"]
    for r in full:
        ttgir = {k: r[k] for k in r["ptx"]}
        assert r["ptx"] == ttgir, f"sm_{r['cc']} {r['kernel']} {r['config']}: PTX {r['ptx']} vs TTGIR {ttgir}"
    variants = {arch.attention_variant(r["cc"])[0] for r in full if r["kernel"] == "attn_fwd_fast"}
    assert variants == {arch.attention_variant(cc)[0] for cc in ARCHS}


@pytest.mark.parametrize("cc", ARCHS)
def test_shared_memory_fits_or_the_tuner_prunes_it(report, cc):
    """Fixed-config kernels fit the target's shared memory; the fast kernel's pruning keeps only candidates that
    fit (its estimate bounds what Triton allocated) and drops every one that does not."""
    limit = ARCHS[cc].max_shared_per_block
    for r in _rows(report, cc):
        if r["kernel"] != "attn_fwd_fast":
            assert r["shared"] <= limit, f"sm_{cc} {r['kernel']} {r['config']}: {r['shared']} B > {limit} B"
    from infralens_lab.kernels import attention_fast as af
    for r in _rows(report, cc, "attn_fwd_fast"):
        c = next(c for c in af.candidates_for(r["group"], cc, 64 if r["group"] == "small_d" else 128, 2, prune=False)
                 if r["config"].startswith(af._name(c) + " "))
        d = 64 if r["group"] == "small_d" else 128
        est = arch.shared_estimate(c.block_m, c.block_n, d, c.num_stages, 2, cc)
        assert r["shared"] <= est, f"sm_{cc} {r['config']}: Triton allocated {r['shared']} B, estimate {est} B"
        kept = c in af.candidates_for(r["group"], cc, d, 2)
        if r["shared"] > limit:
            assert not kept, f"sm_{cc} {r['config']}: needs {r['shared']} B > {limit} B, yet the tuner keeps it"
        if kept:
            assert r["shared"] <= limit


def test_the_pruning_is_not_idle(report):
    """Some candidate really needs more shared memory than some target has (sm_120's 99 KiB), and is dropped."""
    from infralens_lab.kernels import attention_fast as af
    over = [r for r in report["rows"] if r["kernel"] == "attn_fwd_fast" and r["shared"] > ARCHS[r["cc"]].max_shared_per_block]
    assert over, "no candidate exceeds any target's shared memory: the pruning check above tests nothing"
    assert {r["cc"] for r in over} == {120}
    assert len(af.candidates_for("d128", 120, 128, 2)) < len(af.candidates_for("d128", 120, 128, 2, prune=False))


# ----------------------------------------------------------------------------- the tables, without the compiler
@pytest.mark.parametrize("cc", ARCHS)
def test_dtypes_agree_with_the_peak_table(cc):
    peaks = PEAK_PER_CYCLE[f"{cc // 10}.{cc % 10}"]
    assert set(arch.kernel_dtypes(cc)) == {d for d in ("fp32", "fp16", "bf16") if d in peaks}


@pytest.mark.parametrize("given, name", [(90, "tma-wgmma"), ("9.0", "tma-wgmma"), ((9, 0), "tma-wgmma"),
                                         ("sm_90", "tma-wgmma"), ((8, 7), "loads-mma.sync"), (89, "loads-mma.sync"),
                                         ((7, 5), "loads-fma"), ((10, 3), "tma-tcgen05"), ("12.1", "tma-mma.sync")])
def test_attention_variant_by_capability(given, name):
    assert arch.attention_variant(given)[0] == name


@pytest.mark.parametrize("bad", [70, (6, 1), "13.0", 130, "abc", True, None, 9.0, (9,)])
def test_unknown_capability_is_refused_by_name(bad):
    with pytest.raises(UnknownArchError, match="compute capability") as e:
        arch.attention_variant(bad)
    assert "expected" in str(e.value)


def test_candidates_for_names_a_bad_group():
    from infralens_lab.kernels import attention_fast as af
    with pytest.raises(ValueError, match=r"'d256'.*expected one of"):
        af.candidates_for("d256", 90, 256, 2)
    assert af.candidates_for("small_d", 75, 64, 2) == af.FMA_CANDIDATES  # no tensor-core path on sm_75


def test_live_variant_in_the_interpreter():
    from infralens_lab.device import is_gpu
    from infralens_lab.kernels import attention_fast as af
    if is_gpu():
        pytest.skip("on a GPU the live variant is the GPU's (covered by the table tests)")
    name, reason = af.live_variant()
    assert name == "interpreter" and "BM32-BN16" in reason


def test_readme_table_is_the_packages():
    text = (ROOT / "README.md").read_text()
    start, end = text.index("<!-- arch-table"), text.index("<!-- /arch-table -->")
    table = text[start:end].split("-->", 1)[1].strip()
    assert table == arch.support_markdown(), "README's architecture table drifted: paste arch.support_markdown()"
    for cc in ARCHS:
        assert f"`{arch.attention_variant(cc)[0]}`" in table.splitlines()[2 + list(ARCHS).index(cc)]


@pytest.mark.parametrize("cap, kept", [((12, 0), {"BM128-BN64-w4-s2"}), ((9, 0), {"BM128-BN64-w4-s2", "BM256-BN64-w8-s3",
                                                                                   "BM256-BN64-w8-s4"}),
                                       ((7, 5), {"BM64-BN32-w4-s2"}), ((7, 0), {"BM128-BN64-w4-s2", "BM256-BN64-w8-s3",
                                                                                "BM256-BN64-w8-s4"})])
def test_the_autotuner_prunes_by_the_gpu(monkeypatch, cap, kept):
    """What the autotuner tries for D = 128 fp16 at N = 4096 on a GPU of capability ``cap``: sm_120 drops the
    configs it has no shared memory for, sm_75 gets the FMA config, a GPU outside the table the tuned list."""
    import torch

    from infralens_lab.kernels import attention_fast as af
    monkeypatch.setattr(af, "_capability", lambda dev: cap)
    q = torch.empty(1, dtype=torch.float16)
    got = af._prune(af.CONFIGS, {"N_CTX": 4096, "HEAD_DIM": 128, "CAUSAL": False, "q_ptr": q})
    assert {af._name(af._cand_of(c)) for c in got} == kept
