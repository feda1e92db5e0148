"""The launcher for real: two gloo processes, a DDP measurement end to end, and every way a launch can go wrong
(a rank that dies or raises, a busy port, NCCL without GPUs, more ranks than GPUs) ending in a clear error, not a hang."""
import re
import socket
import time

import pytest

from infralens_lab.measure import distributed
from infralens_lab.workloads import ddp

TINY = distributed.RunSpec(configs=(distributed.DDPConfig("cap 0.25 MiB", 0.25, False, ddp.MLPConfig(width=256, depth=2, batch=4)),),
                 active=1, timed=1, accum=2, bench_mib=(0.25,), bench_reps=1)


@pytest.fixture(scope="module")
def tiny_run():
    """One DDP measurement of TINY on two gloo ranks (``distributed.run``): (ranks, seconds). Read by the end-to-end test
    and replayed to both recorder calls of test_record_into_refuses_a_run_that_breaks_an_invariant."""
    t0 = time.monotonic()
    ranks = distributed.run(TINY, world=2, backend="gloo", timeout_s=60)
    return ranks, time.monotonic() - t0


def test_two_gloo_ranks_run_ddp_end_to_end(tiny_run):
    ranks, took = tiny_run
    assert took < 60
    assert [r["rank"] for r in ranks] == [0, 1] and {r["backend"] for r in ranks} == {"gloo"}
    c = ranks[0]["configs"][0]
    assert c["bucket_bytes"] == [4 * (256 * 256 + 256)] * 2  # one Linear per 0.25 MiB bucket
    names = {e["name"] for e in c["trace"]["traceEvents"]}
    assert "gloo:all_reduce" in names and any(n.startswith("ProfilerStep") for n in names)
    assert ranks[0]["single"]["step_s"] > 0 and "single" not in ranks[1]
    steps = sum(e["name"].startswith("ProfilerStep") for e in ranks[0]["single"]["trace"]["traceEvents"])
    assert steps == max(TINY.active, 5)  # the one-rank baseline: a median over at least 5 profiled steps
    assert sorted(c["grad_ready_order"]) == [0, 1, 2, 3] and c["param_bytes"] == [4 * 256 * 256, 4 * 256] * 2
    assert ranks[0]["bench"][0]["bytes"] == 2 ** 18
    # gloo on a CPU: host-timed, one call per timing, and the row says so (analysis.scaling.TIMINGS)
    assert {(b["timing"], b["calls_per_timing"]) for b in ranks[0]["bench"]} == {("host", 1)}


def test_a_rank_that_dies_stops_the_others():
    t0 = time.monotonic()
    with pytest.raises(ddp.RankFailed, match=r"^rank 1 exited with code 3 without a result \(it died\)"):
        ddp.launch(ddp.job_die, world=2, args=(1, "exit"), timeout_s=60, collective_timeout_s=30)
    assert time.monotonic() - t0 < 30  # well before the collective timeout: the parent does not wait on it


def test_a_rank_that_raises_is_named_with_its_error():
    with pytest.raises(ddp.RankFailed, match=r"(?s)^rank 0 raised:.*planted failure on rank 0.*nothing is left running"):
        ddp.launch(ddp.job_die, world=2, args=(0, "raise"), timeout_s=60, collective_timeout_s=30)


def test_a_rank_that_hangs_is_stopped_at_the_job_timeout():
    t0 = time.monotonic()
    with pytest.raises(ddp.RankFailed, match=r"(?s)ran past timeout_s=6 s.*had not finished and were stopped"):
        ddp.launch(ddp.job_die, world=2, args=(1, "hang"), timeout_s=6, collective_timeout_s=120)
    assert time.monotonic() - t0 < 30


def test_busy_port_is_refused_before_anything_starts():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} on 127.0.0.1 is already in use.*port=None"):
            ddp.launch(ddp.job_echo, world=2, port=port)


def test_free_port_and_bad_port():
    assert ddp.check_port(ddp.free_port()) > 0
    with pytest.raises(ValueError, match="port=70000"):
        ddp.check_port(70000)


def test_world_size_and_backend_checks():
    assert ddp.resolve_world(2, "gloo") == 2
    assert ddp.resolve_world(2, "nccl", gpus=4) == 2
    with pytest.raises(ValueError, match="world size 4 is larger than the 2 GPU"):
        ddp.resolve_world(4, "nccl", gpus=2)
    with pytest.raises(ValueError, match=r"needs CUDA GPUs and this machine has none.*gloo"):
        ddp.resolve_world(2, "nccl", gpus=0)
    with pytest.raises(ValueError, match="world size 0"):
        ddp.resolve_world(0, "gloo")
    with pytest.raises(ValueError, match="backend='mpi'"):
        ddp.launch(ddp.job_echo, world=2, backend="mpi")
    if ddp.gpu_count() == 0:
        with pytest.raises(ValueError, match="needs CUDA GPUs"):
            ddp.launch(ddp.job_echo, world=2, backend="nccl")


def test_record_into_skips_without_two_gpus():
    if ddp.gpu_count() >= 2:
        pytest.skip("this machine has 2 GPUs: the recorder step would run")
    with pytest.raises(distributed.NotEnoughGPUs, match=r"needs 2 GPUs .* has \d"):
        distributed.record_into(writer=None, check=lambda ranks: [])


def test_record_into_refuses_a_run_that_breaks_an_invariant(tmp_path, tiny_run, monkeypatch):
    """The recorder's path on two gloo ranks: a check that finds a broken invariant stops the step before
    anything is written; with every invariant holding, every rank and the meta record are written. Both calls
    get the one measurement of ``tiny_run`` (distributed.run asked for with the same spec, world and backend)."""
    from infralens_lab.evidence import EvidenceWriter, RecordedStore

    asked = []

    def measured(spec, world, backend, timeout_s):
        asked.append((spec, world, backend))
        return tiny_run[0]

    monkeypatch.setattr(distributed, "run", measured)
    seen = []

    def broken(ranks):
        seen.append(len(ranks))
        return ["cap 0.25 MiB: rank 0 step 0: exposed 9.0 µs, comm 8.0 µs, step 7.0 µs; expected exposed <= comm <= step"]

    w = EvidenceWriter(tmp_path / "bad", "test")
    with pytest.raises(distributed.InvariantBroken, match=r"1 invariant\(s\) broken, nothing written:\ncap 0.25 MiB"):
        distributed.record_into(w, check=broken, gpus=2, spec=TINY, backend="gloo")
    assert seen == [2] and not list((tmp_path / "bad").iterdir())
    w = EvidenceWriter(tmp_path / "good", "test")
    assert "invariants hold" in distributed.record_into(w, check=lambda ranks: [], gpus=2, spec=TINY, backend="gloo")
    w.close()
    assert RecordedStore(tmp_path / "good").names() == ["ddp_meta", "ddp_rank0", "ddp_rank1"]
    assert asked == [(TINY, 2, "gloo")] * 2


def test_recorder_step_is_skipped_with_its_reason(tmp_path):
    from infralens_lab import record
    from infralens_lab.evidence import EvidenceWriter

    if ddp.gpu_count() >= 2:
        pytest.skip("this machine has 2 GPUs: the recorder step would run")
    assert "distributed" in record.STEPS
    rec = record.Recorder(EvidenceWriter(tmp_path / "rec", "test"), log=lambda m: None)
    rec.run("distributed")
    assert rec.entries[0]["status"] == "skipped"
    assert "the distributed step needs 2 GPUs" in rec.entries[0]["detail"]


def test_spec_validation():
    with pytest.raises(ValueError, match="bucket_cap_mb = 0"):
        distributed.DDPConfig("x", 0)
    with pytest.raises(ValueError, match="straggle_ms = -1"):
        distributed.DDPConfig("x", None, straggle_ms=-1)
    assert distributed.DDPConfig("default", None).bucket_cap_mb is None
    assert distributed.spec_for("gloo") is distributed.CPU_SPEC and distributed.spec_for("nccl") is distributed.LIVE_GPU_SPEC
    with pytest.raises(ValueError, match="backend='mpi'"):
        distributed.spec_for("mpi")
    with pytest.raises(ValueError, match=re.escape("RunSpec.active = 0")):
        distributed.RunSpec(active=0)
    with pytest.raises(ValueError, match=re.escape("MLPConfig.width = -1")):
        ddp.MLPConfig(width=-1)
    with pytest.raises(TypeError, match="expected a RunSpec"):
        distributed.run("fast")


def test_child_env_keeps_nvlink_multicast_off():
    assert ddp.CHILD_ENV == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                           "NVSHMEM_DISABLE_NVLS": "1"}


def test_a_plain_script_without_a_main_guard_is_not_rerun_by_the_ranks(tmp_path):
    """A lab converted to a script calls the launcher at top level. spawn used to re-run that script in
    every rank, which then died (lab 06 on the lent H100); now the ranks start without it, and the
    parent's __main__ is left as it was."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "lab_as_script.py"
    script.write_text(
        "import __main__\n"
        "from infralens_lab.workloads import ddp as W\n"
        "print('top level ran')\n"
        "out = W.launch(W.job_echo, world=2, args=(2.5,), backend='gloo', timeout_s=60)\n"
        "print('values', [r['sum'] for r in out])\n"
        "print('main kept', __main__.__file__ == __file__ and __main__.__spec__ is None)\n")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("top level ran") == 1
    assert "values [7.5, 7.5]" in r.stdout and "main kept True" in r.stdout


@pytest.mark.parametrize("module", ["infralens_lab.workloads.ddp", "infralens_lab.measure.distributed",
                                    "infralens_lab.analysis.distributed"])
def test_modules_without_a_command_line_say_what_to_run(module):
    """Under `python -m` (or torchrun -m) a module of the DDP path that has no command line exits non-zero and
    names the entry point, instead of exiting 0 having done nothing (issue 32)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert r.returncode == 1
    assert f"{module} has no command line" in r.stderr and "-m infralens_lab.profile_ddp --out DIR" in r.stderr
