"""The Gluon FA3-style attention forward (kernels.attention_gluon).

Gluon has no interpreter, so on a CPU the kernel is compiled for Hopper (sm_90) with Triton's own ptxas
(tools/gluon_compile_check.py, as tools/attn_compile_check.py does for attn_fwd_fast) and the compiler's
report is checked against the kernel's own constants and its schedule(): partitions and their warps, the
registers each worker asks for, no spills, wgmma and TMA in the PTX and SASS. The wrapper's refusals are
checked on any machine. On a Hopper GPU the outputs are checked like tiled_fast's: fresh torch.randn inputs,
NaN-poisoned outputs, ragged N, both dtypes, causal and not, against the float32 reference.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from infralens_lab.kernels import attention_gluon as ag
from infralens_lab.kernels.check import TOLERANCES
from infralens_lab.kernels.reference import attention_ref

ROOT = Path(__file__).resolve().parents[1]


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


# --------------------------------------------------------------------------- compile for sm_90 (CPU)
@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The default (ping-pong) variant at D = 128 fp16, causal: one compile, in one subprocess (Triton with TRITON_INTERPRET=0, whatever mode this session runs in; a fresh cache)."""
    specs = {ag.DEFAULT_VARIANT: f"{ag.DEFAULT_VARIANT}:128:1"}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_CACHE_DIR": str(tmp_path_factory.mktemp("triton"))}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gluon_compile_check.py"), "--json", *specs.values()],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = json.loads(proc.stdout.strip().splitlines()[-1])
    return {v: reports[spec] for v, spec in specs.items()}


def test_partitions_match_schedule(compiled):
    sched = ag.schedule(ag.DEFAULT_VARIANT)
    r = compiled[ag.DEFAULT_VARIANT]
    assert r["partition_warps"] == [p["warps"] for p in sched]  # default consumer, worker consumer, producer
    assert r["worker_regs"] == [p["regs"] for p in sched[1:]]
    assert [p["role"] for p in sched] == ["consumer", "consumer", "producer"]
    assert sched[-1]["warps"] == ag.PRODUCER_WARPS and sched[-1]["regs"] == ag.PRODUCER_REGS
    # setmaxnreg moves registers: the producer gives up to PRODUCER_REGS, the worker consumer takes CONSUMER_REGS
    assert f"dec{ag.PRODUCER_REGS}" in r["setmaxnreg"] and f"inc{ag.CONSUMER_REGS}" in r["setmaxnreg"]


def test_no_spills_wgmma_tma(compiled):
    variant = ag.DEFAULT_VARIANT
    r = compiled[variant]
    assert r["stack"] == 0 and r["local"] == 0, f"{variant}: spills ({r['stack']} stack bytes, LDL/STL {r['local']})"
    assert r["wgmma_ptx"] > 0 and r["hgmma"] > 0, f"{variant}: no wgmma/HGMMA"
    assert r["tma_ptx"] > 0 and r["utmaldg"] > 0, f"{variant}: no TMA load"
    assert r["shared"] <= 227 * 1024


def test_schedule_constants():
    for name, v in ag.VARIANTS.items():
        sched = ag.schedule(name)
        cons = [p for p in sched if p["role"] == "consumer"]
        assert len(cons) == v.consumers and all(p["stages"] == ag.STAGES and p["block_n"] == ag.BLOCK_N for p in sched)
        assert [p["rows"] for p in cons] == [(i * ag.BLOCK_M_WG, (i + 1) * ag.BLOCK_M_WG) for i in range(v.consumers)]
        assert ag.kernel_constants(name)["block_m"] == cons[-1]["rows"][1]
        assert any(p["role"] == "producer" for p in sched) == v.producer
        assert [p["turn_order"] for p in cons] == ([0, 1] if v.pingpong else [None] * v.consumers)
    with pytest.raises(ValueError, match="variant 'nope', expected one of"):
        ag.schedule("nope")


# --------------------------------------------------------------------------- bad input (any machine)
def _qkv(shape=(1, 2, 40, 128), dtype=torch.float16, device="cpu"):
    return [torch.randn(shape, device=device).to(dtype) for _ in range(3)]


def test_cpu_tensors_refused():
    with pytest.raises(ag.GluonUnavailableError, match="q is on device 'cpu', expected a CUDA tensor on a Hopper"):
        ag.attention_gluon(*_qkv())


def test_wrong_head_dim():
    with pytest.raises(ValueError, match=r"head dim D=32 is not supported, expected one of \(64, 128\)"):
        ag.attention_gluon(*_qkv((1, 2, 40, 32)))


def test_dtype_mismatch_and_float32():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="q, k, v have dtypes float16, bfloat16, float16, expected one dtype"):
        ag.attention_gluon(q, k.to(torch.bfloat16), v)
    with pytest.raises(TypeError, match="q has dtype float32, expected float16 or bfloat16"):
        ag.attention_gluon(*(t.float() for t in (q, k, v)))


def test_shape_and_args():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"k has shape \(2, 40, 128\) \(rank 3\), expected rank 4"):
        ag.attention_gluon(q, k[0], v)
    with pytest.raises(ValueError, match="expected one shape"):
        ag.attention_gluon(q, k[:, :, :20], v)
    with pytest.raises(TypeError, match=r"causal is 1 \(int\), expected True or False"):
        ag.attention_gluon(q, k, v, causal=1)
    with pytest.raises(ValueError, match=r"sm_scale is -1\.0, expected a finite number > 0"):
        ag.attention_gluon(q, k, v, sm_scale=-1.0)


# --------------------------------------------------------------------------- on a Hopper GPU
GPU_SHAPES = [(1, 3, 777, 128), (2, 5, 1000, 128), (1, 2, 1, 128), (2, 3, 777, 64), (1, 1, 4096, 128)]


@pytest.mark.skipif(not _hopper(), reason="the Gluon kernel runs on a Hopper GPU only (no interpreter)")
@pytest.mark.parametrize("variant", list(ag.VARIANTS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_outputs_gpu(variant, dtype, causal):
    for shape in GPU_SHAPES:
        q, k, v = _qkv(shape, dtype, "cuda")
        out = torch.full_like(q, float("nan"))
        got = ag.attention_gluon(q, k, v, causal=causal, variant=variant, out=out)
        assert got is out
        ref = attention_ref(q.float(), k.float(), v.float(), causal=causal)
        torch.testing.assert_close(got.float(), ref, **TOLERANCES[dtype], msg=lambda m, s=shape: f"{s}: {m}")


@pytest.mark.skipif(not torch.cuda.is_available() or _hopper(), reason="needs a non-Hopper CUDA GPU")
def test_non_hopper_refused_by_name():
    with pytest.raises(ag.GluonUnavailableError, match=torch.cuda.get_device_name()):
        ag.attention_gluon(*_qkv(device="cuda"))
