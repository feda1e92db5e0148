"""N ranks under torchrun (issue 32): `torchrun --nproc_per_node=4 -m infralens_lab.profile_ddp` on 4 gloo ranks
of this CPU, read back as a folder of rank traces; a learner's own model as module:function; the entry point
refuses to run outside torchrun."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infralens_lab import profile_ddp
from infralens_lab.analysis import distributed
from infralens_lab.analysis.buckets import bucket_plan
from infralens_lab.analyze import analyze, ranks

ROOT = Path(__file__).resolve().parents[1]


def _torchrun(n: int, out: Path, *args: str, pythonpath: str = str(ROOT)) -> subprocess.CompletedProcess:
    # gloo on purpose: the tests are about N CPU ranks, whatever GPUs the machine has (a 1-GPU machine chose NCCL for
    # rank 0 alone once, and the group hung)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
           "-m", "infralens_lab.profile_ddp", "--out", str(out), "--backend", "gloo", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": pythonpath})


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks4")
    r = _torchrun(4, out, "--width", "128", "--depth", "4", "--batch", "8", "--bucket-cap-mb", "0.05", "--steps", "3")
    assert r.returncode == 0, r.stderr[-3000:]
    return out, r.stdout


def test_four_gloo_ranks_write_one_trace_each(four):
    out, stdout = four
    assert sorted(p.name for p in out.iterdir()) == [f"rank{i}.json" for i in range(4)]
    _, _, datas = ranks(out, cpu_ok=True)
    assert [d["distributedInfo"] for d in datas] == [{"backend": "gloo", "rank": i, "world_size": 4} for i in range(4)]
    prov = datas[0]["infralens"]["provenance"]
    assert prov["torch"] and prov["command"].startswith("torchrun") and prov["width"] == 128 and prov["local_rank"] == 0
    assert "invariants: exposed <= comm <= step and calls = buckets hold" in stdout


def test_the_folder_reads_as_n_ranks_with_every_invariant(four):
    out, _ = four
    traces, _, datas = ranks(out, cpu_ok=True)
    ddp = datas[0]["infralens"]["ddp"]
    ready = [ddp["param_bytes"][i] for i in ddp["grad_ready_order"]]
    assert bucket_plan(ready, 0.05) == ddp["bucket_bytes"] and len(ddp["bucket_bytes"]) == 4
    t = distributed.overlap_table(traces)
    assert sorted(set(t["rank"])) == [0, 1, 2, 3] and len(t) == 12
    assert distributed.invariant_violations(t, buckets=4) == []
    al = distributed.align(traces)
    assert len(al) == 4 * 3 * 4 and al.attrs["violations"] == 0
    assert (al.groupby(["step", "seq"])["wait_us"].min() == 0).all()  # at every collective someone arrived last
    rep = analyze(out, cpu_ok=True)
    assert "collectives aligned across ranks" in rep.tables


def test_a_learners_model_as_module_function(tmp_path):
    (tmp_path / "mymodel.py").write_text(
        "import torch\n"
        "def build(rank, device):\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))\n"
        "    def loss_fn(m, step):\n"
        "        g = torch.Generator().manual_seed(100 * step + rank)\n"
        "        return m(torch.randn(8, 32, generator=g).to(device)).square().mean()\n"
        "    return model, loss_fn\n")
    out = tmp_path / "out"
    r = _torchrun(2, out, "--model", "mymodel:build", "--steps", "2", pythonpath=f"{ROOT}{os.pathsep}{tmp_path}")
    assert r.returncode == 0, r.stderr[-3000:]
    traces, _, datas = ranks(out, cpu_ok=True)
    assert datas[1]["infralens"]["provenance"]["model"] == "mymodel:build"
    t = distributed.overlap_table(traces)
    assert set(t["allreduce_calls"]) == {len(datas[0]["infralens"]["ddp"]["bucket_bytes"])}


def test_outside_torchrun_it_says_how_to_start_it(monkeypatch, tmp_path):
    for k in profile_ddp.ENV:
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(SystemExit, match=r"RANK, WORLD_SIZE, LOCAL_RANK not set.*torchrun --nproc_per_node=N"):
        profile_ddp.main(["--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="RANK=4, WORLD_SIZE=4"):
        profile_ddp.rank_env({"RANK": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "0"})
    with pytest.raises(SystemExit, match=re.escape("--model 'nocolon'; expected package.module:function")):
        profile_ddp.load_model_fn("nocolon")
    with pytest.raises(SystemExit, match="cannot be loaded"):
        profile_ddp.load_model_fn("no_such_module_xyz:build")
    assert profile_ddp.rank_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (1, 4, 1)
    json.dumps(profile_ddp.parser().parse_args(["--out", "x"]).__dict__)  # every default is plain data


@pytest.mark.parametrize("requested,cuda,gpus,local_world,want", [
    ("auto", True, 1, 4, "gloo"),   # four ranks, one GPU: every rank takes gloo (never NCCL for rank 0 alone)
    ("auto", True, 4, 4, "nccl"), ("auto", True, 8, 2, "nccl"), ("auto", False, 0, 2, "gloo"),
    ("gloo", True, 8, 2, "gloo"), ("nccl", False, 0, 2, "nccl")])
def test_the_backend_is_one_per_node(requested, cuda, gpus, local_world, want):
    assert profile_ddp.node_backend(requested, cuda, gpus, local_world) == want
