"""SASS opcode counts (analysis.sass.opcode_counts, hgmma_ops_per_warp) on cuobjdump-shaped text, and the attention
compile's refusals (measure.sass_compile). The compile itself (about 10 s, Triton + ptxas for sm_90) runs in lab 04,
not here."""
from __future__ import annotations

import json
import subprocess

import pytest

from infralens_lab.analysis import sass
from infralens_lab.measure import sass_compile

SASS = """Function:attn_fwd
--:-:1:-:8\tLDC R1, c[0x0][0x28];
--:-:-:-:1\tHGMMA.64x64x16.F32 R24, gdesc[UR8], RZ, !UPT;
--:-:-:-:1\tHGMMA.64x128x16.F32 R24, gdesc[UR8], R24;
--:2:-:-:1\t@UP3 UTMALDG.2D [UR8], [UR12];
02:-:-:Y:6\t@!P1 LDGSTS.E.BYPASS.128 [R43], desc[UR16][R18.64], P1;
LBB1:
"""


def test_opcode_counts_reads_predicated_and_suffixed_instructions():
    got = sass.opcode_counts(SASS)
    assert got.to_dict() == {"HGMMA": 2, "LDC": 1, "UTMALDG": 1, "LDGSTS": 1}  # labels and the header are not counted
    assert sass.hgmma_ops_per_warp(SASS) == (2 * 64 * 64 * 16 / 4 + 2 * 64 * 128 * 16 / 4) / 2
    assert sass.hgmma_ops_per_warp("--:-:1:-:8\tLDC R1, c[0x0][0x28];") is None


def test_opcode_counts_refuses_text_without_sass():
    with pytest.raises(ValueError, match=r"no SASS instruction line in 11 characters; expected cuobjdump -sass"):
        sass.opcode_counts("LBB1:\nEXIT;")


def test_compile_spec_refuses_a_block_no_candidate_has():
    with pytest.raises(sass_compile.SassCompileError, match="no attn_fwd_fast candidate with BLOCK_M=96 and 4 warps"):
        sass_compile._spec_args("fp16", 64, 96, 4)


def test_a_compile_is_kept_and_a_changed_or_spoiled_one_compiled_again(tmp_path, monkeypatch):
    """compiled_sass runs its child once per key: a second call reads the cache; another head_dim, or a cache file
    that is not the two kernels' SASS, compiles again (the child is faked here: the real one takes ~10 s)."""
    monkeypatch.setenv(sass_compile.CACHE_ENV, str(tmp_path))
    calls = []

    def child(cmd, **kw):
        calls.append(cmd[-4:])
        out = {k: {"config": "c", "sass": f"{k} HGMMA {cmd[-3]}", "triton": "x"} for k in sass_compile.KERNELS}
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(out), stderr="")
    monkeypatch.setattr(sass_compile.subprocess, "run", child)
    first = sass_compile.compiled_sass(head_dim=64)
    assert sass_compile.compiled_sass(head_dim=64) == first and len(calls) == 1
    assert sass_compile.compiled_sass(head_dim=128)["attn_fwd"]["sass"] == "attn_fwd HGMMA 128" and len(calls) == 2
    (cached,) = tmp_path.glob(f"sass-{sass_compile.cache_key(90, 'fp16', 64, 128, 4)}.json")
    cached.write_text('{"attn_fwd": {"sass": ""}}')  # spoiled: compiled again, and the cache mended
    assert sass_compile.compiled_sass(head_dim=64) == first and len(calls) == 3
    assert json.loads(cached.read_text()) == first


def test_a_failed_compile_names_the_childs_last_lines(tmp_path, monkeypatch):
    monkeypatch.setenv(sass_compile.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(sass_compile.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, stdout="", stderr="line 1\nptxas fatal: unknown target sm_42"))
    with pytest.raises(sass_compile.SassCompileError, match=r"sm_42 failed \(exit 1\): line 1\nptxas fatal"):
        sass_compile.compiled_sass(cc=42)
    assert not list(tmp_path.glob("*.json"))  # nothing kept from a failure
