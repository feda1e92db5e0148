"""The recorder: measure everything the labs show on a real GPU and write it with provenance.

``python -m infralens_lab record --out data/recorded/<gpu-slug> [--quick] [--only step,...]
[--bundle PATH.tar.gz]`` runs each step below, logs its wall time, and writes through
:class:`~infralens_lab.evidence.EvidenceWriter` (JSON records, raw ncu CSVs, a manifest with
checksums). A step that fails is logged and the others go on; ``record_log`` lists what each
step wrote, how long it took and what failed. Without a GPU it refuses. ``--bundle`` also
writes the whole set (and the log) as one ``.tar.gz``. Plain python3: nothing on this import
path needs Jupyter or IPython.

Steps and the records they write: ``device`` (device facts); ``ceilings`` (torch ``copy_``
bandwidth at 1 GiB, matmul FLOP/s for fp32 (TF32 off), tf32, fp16, bf16 at 8192³, and an fp16
size sweep 256..8192); ``bench`` (:func:`infralens_lab.bench.record_into`); ``traces``
(``trace_bubble``, ``trace_fixed``: trimmed chrome traces of :mod:`infralens_lab.workloads.pipeline`,
and ``trace_summary``); ``step_times`` (wall-clock steps of both versions: synchronised per step
from the first, warm-up included, and back to back);
``variants`` (``pipeline_variants``: each of ``workloads.pipeline.VARIANTS``, one change at a time, timed as
in ``step_times`` and profiled for 3 steps, each trace reduced to ``analysis.variants.trace_digest``, with every
step's loss); ``traces``, ``step_times`` and ``variants`` mark their records ``prefetch_same_work: true``: the
prefetching versions tokenize every batch in DataLoader workers (``analysis.variants.same_work`` tells a record
made before that, whose prefetch recycled 4 batches);
``memory`` (``memory_train``, ``memory_infer`` via
:func:`infralens_lab.measure.memory.record_into`); ``ncu_copies``, ``ncu_copies_stalls``,
``ncu_attention``, ``ncu_matmul`` (raw ncu CSV, one ``==INFRALENS== config:`` block per run; L1/L2 byte
counters included for the hierarchical roofline), ``ncu_train_step`` (the top three kernels of one
fixed-pipeline training step, chosen from ``trace_fixed``); ``ncu_copies_source`` (``ncu_copies_source.csv``: ncu's
Source page, stall samples per SASS instruction, coalesced and stride 8, 32; its raw page, plain and with instance
values: ``ncu_copies_source_raw.csv``, ``ncu_copies_source_instances.csv``); ``distributed`` (``ddp_rank0`` … ``ddp_rank<N-1>``,
``ddp_meta``: :func:`infralens_lab.measure.distributed.record_into`, DDP through NCCL on every GPU, refused when a
run breaks an invariant; skipped with fewer than 2 GPUs: record it into its own set, e.g. ``--out
data/recorded/2x-nvidia-h200 --only device,distributed``); ``ncu_gluon`` (``ncu_gluon.csv``: ncu on the Gluon
kernel ``attn_fwd_gluon`` and on ``attn_fwd_fast`` at one D = 128 shape, the attention metrics plus per-pipe
instruction counts; skipped unless the GPU is Hopper, sm_90: record it into its own set, ``--out
data/recorded/nvidia-h200-gluon --only device,ncu_gluon``).
"""
from __future__ import annotations

import argparse
import importlib
import io
import json
import sys
import tarfile
import time
import traceback
from pathlib import Path

from . import device
from .analysis.ddp_run import run_violations
from .analysis.hardware import check_physics
from .analysis.variants import RECORD as VARIANTS_RECORD
from .analysis.variants import SAME_WORK, trace_digest
from .errors import InfraLensError
from .evidence import EvidenceError, EvidenceWriter
from .kernels.copies import STRIDES
from .measure import ceilings
from .measure import ncu as NR
from .measure.ceilings import MATMUL_SIZES
from .measure.target import LAUNCHES, REGEX, launch_window
from .measure.timing import time_steps
from .measure.torch_trace import profile
from .parse import ncu
from .parse.runs import ATTENTION_KINDS, RunConfig, copy_run, target_args
from .parse.trace import trim
from .units import MiB
from .workloads.pipeline import VARIANTS, make_step, make_variant

STEPS = ("device", "ceilings", "bench", "traces", "step_times", "variants", "memory", "ncu_copies",
         "ncu_copies_stalls", "ncu_copies_source", "ncu_attention", "ncu_matmul", "ncu_train_step", "overlap",
         "memory_timeline", "gates",
         "distributed", "ncu_gluon")
COPY_N = 256 * MiB // 4  # useful fp32 elements per copy: 256 MiB, over 4x the 50-60 MB L2, so DRAM numbers are DRAM's
ATTN_SHAPE = (4, 16, 4096, 64)  # the bench's first case: 2,048 tiled programs, many waves on 132 SMs
GLUON_SHAPE = (4, 16, 4096, 128)  # issue 42's first D = 128 case (bench issue31 set): 2,048 Gluon programs of 128 rows
GLUON_KERNELS = ("gluon", "tiled_fast")  # ncu_gluon.csv: attn_fwd_gluon beside attn_fwd_fast at the same shape
NCU_NOTES = ("ncu runs with --clock-control none: kernels run at the GPU's own clocks (boost), not locked base "
             "clocks, as in the timed benchmarks; the SM clock each launch saw is sm__cycles_elapsed.avg.per_second")
LAUNCH, HIERARCHY, HIERARCHY_PEAKS = ncu.LAUNCH, ncu.HIERARCHY, ncu.HIERARCHY_PEAKS
COPY_METRICS = ncu.TIME + ncu.DRAM + ncu.SECTORS + ["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"] \
    + ncu.HIT_RATES + ncu.SOL + ncu.OCCUPANCY + HIERARCHY + LAUNCH + ncu.CLOCK
ATTN_METRICS = ncu.TIME + ncu.DRAM + ncu.FLOPS + ncu.TENSOR + ncu.TENSOR_PCT + ncu.HIT_RATES[:1] + ncu.SOL + ncu.OCCUPANCY + ncu.STALLS + HIERARCHY \
    + LAUNCH + ncu.SCHEDULER + ncu.CLOCK
GLUON_METRICS = ATTN_METRICS + ncu.PIPES  # the attention metrics plus the per-pipe instruction counts
MATMUL_METRICS = ncu.TIME + ncu.DRAM + ncu.FLOPS + ncu.TENSOR + ncu.TENSOR_PCT + ncu.HIT_RATES[:1] + ncu.SOL + ncu.OCCUPANCY \
    + HIERARCHY + HIERARCHY_PEAKS + LAUNCH
TRAIN_STEP_METRICS = ncu.TIME + ncu.SOL + ncu.DRAM + ncu.OCCUPANCY + ncu.HIT_RATES[:1] + ncu.STALLS + LAUNCH + ncu.CLOCK
STEP_TIME_STEPS, STEP_TIME_BATCHED = 40, 30


class Recorder:
    """Runs steps into one :class:`EvidenceWriter`, keeping a log of times and failures."""

    def __init__(self, writer, quick: bool = False, log=print):
        self.w, self.quick, self.say = writer, quick, log
        self.entries: list[dict] = []
        self.lines: list[str] = []
        self.nvtx_ok: bool | None = None  # learned from the first ncu run: does NVTX filtering select kernels?
        self.top_kernels: list[str] = []  # the fixed pipeline's kernels by device time, from step_traces

    def log(self, msg: str) -> None:
        self.lines.append(msg)
        self.say(msg)

    def run(self, step: str) -> None:
        t0 = time.perf_counter()
        entry = {"step": step, "status": "ok", "detail": ""}
        self.log(f"[record] {step} ...")
        try:
            entry["detail"] = getattr(self, f"step_{step}")() or ""
        except _Skip as s:
            entry.update(status="skipped", detail=str(s))
        except Exception as exc:  # one failed step must not stop the others
            entry.update(status="failed", detail=f"{type(exc).__name__}: {exc}"[:2000])
            self.log(traceback.format_exc())
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        self.entries.append(entry)
        self.log(f"[record] {step}: {entry['status']} in {entry['seconds']:.1f} s {entry['detail'][:300]}")

    # ------------------------------------------------------------ steps
    def step_device(self):
        self.w.write("device", device.facts().as_dict(), units={"l2_bytes": "byte", "memory_bytes": "byte"})

    def step_ceilings(self):
        values, units, notes = ceilings.measure(self.quick)
        f = device.facts()
        check_physics(values, f.sm_count, f.compute_capability)  # an impossible clock is an error, not a record
        self.w.write("ceilings", values, units=units, notes=notes)
        clock = ", ".join(f"{r['dtype']} at {r['sm_clock_hz'] / 1e9:.2f} GHz" for r in values["matmul"]
                          if r.get("sm_clock_hz"))
        return (f"copy {values['copy']['bandwidth_bytes_per_s'] / 1e12:.2f} TB/s; " + ", ".join(
            f"{r['dtype']} {r['flops_per_s'] / 1e12:.0f} TFLOP/s" for r in values["matmul"])
                + f"; SM clocks during the timing (NVML): {clock or 'none'}")

    def step_bench(self):
        bench = _optional("infralens_lab.bench", "record_into")
        bench.record_into(self.w)

    def step_memory(self):
        memory = _optional("infralens_lab.measure.memory", "record_into")
        memory.record_into(self.w)

    def step_gates(self):
        return _optional("infralens_lab.measure.gates_record", "record_into").record_into(self.w, quick=self.quick)

    def step_traces(self):
        summary, sizes = {}, []
        for version in ("bubble", "fixed"):
            step = make_step(version)
            tr = profile(step, wait=1, warmup=2, active=3)
            step.close()
            for depth in (None, 4, 3, 2, 1):  # keep under ~2.5 MB of JSON: drop the deepest aten ops first
                data = trim(tr.data, max_depth=depth)
                if len(json.dumps(data)) < 2_500_000:
                    break
            path = self.w.write(f"trace_{version}", data, units={"ts": "us", "dur": "us"},
                                notes=f"torch.profiler chrome trace of 3 training steps, pipeline version "
                                      f"'{version}' (infralens_lab.workloads.pipeline), trimmed by "
                                      f"torch_trace.trim(max_depth={depth})")
            sizes.append(f"{version} {path.stat().st_size / 1e6:.2f} MB (op depth {depth or 'all'})")
            gaps = tr.idle_gaps()
            summary[version] = {**tr.summary(), SAME_WORK: True, "gaps": gaps.to_dict(orient="records"),
                                "ranges": tr.ranges().to_dict(orient="records"),
                                "top_kernels": tr.kernels(top=10).to_dict(orient="records")}
        self.top_kernels = [k["name"] for k in summary["fixed"]["top_kernels"]]
        self.w.write("trace_summary", summary, units={"_us": "us"},
                     notes="Trace.summary(), idle_gaps(min_gap_us=50), ranges() and kernels(top=10) per version")
        b, f = summary["bubble"], summary["fixed"]
        return (f"{', '.join(sizes)}; GPU utilisation bubble {b.get('gpu_utilization', 0):.0%} vs fixed "
                f"{f.get('gpu_utilization', 0):.0%}; CPU time in the step range (not the period: the fixed CPU runs ahead) {b['mean_step_us'] / 1e3:.1f} vs "
                f"{f['mean_step_us'] / 1e3:.1f} ms")

    def step_step_times(self):
        """Wall-clock step times: synchronised per step from the very first (warm-up visible), then
        back to back with one synchronise at the end (throughput)."""

        out = {}
        for v in ("bubble", "fixed"):
            step = make_step(v)
            out[v] = {**time_steps(step, STEP_TIME_STEPS, STEP_TIME_BATCHED, skip=10), SAME_WORK: True}
            step.close()
        self.w.write("step_times", out, units={"_ms": "ms"},
                     notes=f"{STEP_TIME_STEPS} steps each timed with a synchronize (warm-up included, median/p10/p90 "
                           f"over steps 10+), then {STEP_TIME_BATCHED} steps back to back with one synchronize.")
        return "; ".join(f"{v}: median {o['median_ms']:.1f} ms synced, {o['throughput_ms_per_step']:.1f} ms/step "
                         f"back to back" for v, o in out.items())

    def step_variants(self, device_name: str | None = None, config=None, batch: int | None = None,
                      synced: int = STEP_TIME_STEPS, batched: int = STEP_TIME_BATCHED, skip: int = 10):
        """Each pipeline variant, one change at a time: wall-clock step times (the protocol of ``step_times``),
        then 3 profiled steps reduced to a digest (period, GPU busy share, idle gaps, top 5 kernels), not the
        trace. ~4 s a variant on an H200. Sizes: the pipeline's for the device unless given (tests: tiny, CPU)."""
        out = {}
        for name, v in VARIANTS.items():
            step = make_variant(name, device=device_name, config=config, batch=batch)
            timing = time_steps(step, synced, batched, skip=skip)
            tr = profile(step, wait=1, warmup=1, active=3)
            out[name] = {"changed": v.changed, "base": v.base, "precision": v.precision, "prefetch": v.prefetch,
                         "pinned": v.pinned, "pins": step.pins, "sync_every_step": v.sync_every_step,
                         "workers": step.workers, "timing": timing, "trace": trace_digest(tr),
                         "mean_loss": step.mean_loss(), "loss_curve": step.loss_curve(), "steps_run": step.steps}
            step.close()
        sizes = {"config": vars(step.config), "batch": step.batch, "seq": step.seq, "device": step.device}
        self.w.write(VARIANTS_RECORD, {"variants": out, "sizes": sizes, SAME_WORK: True},
                     units={"_ms": "ms", "_us": "us", "_pct": "%"},
                     notes=f"workloads.pipeline.VARIANTS; timing: {synced} steps each with a synchronize (median/p10/p90 "
                           f"over steps {skip}+), then {batched} back to back (throughput_ms_per_step); trace: "
                           "torch.profiler schedule(wait=1, warmup=1, active=3) on the same pipeline, reduced by "
                           "analysis.variants.trace_digest (idle gaps over min_gap_us; top kernels by GPU time; "
                           "kernel kinds read from kernel names); mean_loss and loss_curve over all steps_run (same seed, same batches: "
                           "batch i is tokenized from the same random stream in the step or by the prefetching variants' "
                           "DataLoader workers); TF32 allowed only during fixed+tf32's steps")
        return "; ".join(f"{n} {o['timing']['throughput_ms_per_step']:.1f} ms/step" for n, o in out.items())

    def step_memory_timeline(self):
        timeline = _optional("infralens_lab.measure.memory_timeline", "record_into")
        timeline.record_into(self.w)

    def step_overlap(self):
        overlap = _optional("infralens_lab.measure.overlap", "record_into")
        return overlap.record_into(self.w, quick=self.quick, log=self.log)

    # ------------------------------------------------------------ ncu
    def _windows(self, kernel: str, regex: str | None = None) -> list[dict]:
        """The launch windows to profile ``kernel`` in, in the order to try them: first only the launches inside
        the target's NVTX range (left out once a run has learned NVTX filtering selects nothing here), then a
        counted window after the warm-up launches."""
        per = LAUNCHES[kernel]
        attempts = [dict(kernel_regex=regex or REGEX[kernel], launch_skip=0,
                         launch_count=None if per is None else sum(per.values()), nvtx=True)]
        rx, skip, cnt = launch_window(kernel, 1, 1)
        attempts.append(dict(kernel_regex=rx, launch_skip=skip, launch_count=cnt, nvtx=False))
        return attempts[1:] if self.nvtx_ok is False else attempts

    def _in_first_window(self, kernel: str, regex: str | None, label: str, run):
        """``run(window)`` in the launch windows of :meth:`_windows`, in order, until one has kernels: an
        ``NcuNoKernels`` moves on to the next window; any other ``NcuError`` is raised. The first success
        records whether NVTX filtering selects kernels here (``nvtx_ok``). Returns ``run``'s result; raises
        the last error when no window has kernels."""
        err = None
        for a in self._windows(kernel, regex):
            try:
                out = run(a)
            except ncu.NcuNoKernels as exc:
                self.log(f"[record]   {label}: no kernels with {a}; trying the next launch window")
                err = exc
                continue
            if self.nvtx_ok is None:
                self.nvtx_ok = a["nvtx"]
            return out
        raise err

    def _ncu_file(self, filename: str, configs: list[tuple[str, str, list[str]]], metrics: list[str]) -> str:
        """Run ncu once per (label, kernel family, target args); join the outputs into one CSV file. A metric
        ncu does not know is dropped (for the later runs too) and the run repeated, up to 3 tries a window."""
        blocks, failed, absent = [], [], set()
        metrics = list(metrics)

        def profile(a, target, label):
            nonlocal metrics
            for _ in range(3):
                try:
                    t0 = time.perf_counter()
                    text = NR.run_ncu(target, metrics=metrics, timeout=240, **a)
                    self.log(f"[record]   {filename} {label}: {time.perf_counter() - t0:.1f} s (nvtx={a['nvtx']})")
                    return text, NR.command_line(target, metrics=metrics, **a)
                except ncu.NcuMetricError as exc:
                    self.log(f"[record]   {label}: dropping unknown metrics {exc.metrics}")
                    if not exc.metrics:
                        raise
                    err = exc
                    metrics = [m for m in metrics if m not in exc.metrics]
            raise err

        for label, kernel, args, *regex in configs:
            target = ["--kernel", kernel, *args, "--warmup", "1", "--iters", "1"]
            try:
                text, cmd = self._in_first_window(kernel, regex[0] if regex else None, label,
                                                  lambda a, target=target, label=label: profile(a, target, label))
            except ncu.NcuError as err:
                failed.append(f"{label}: {err}")
                self.log(f"[record]   {label} FAILED: {err}")
                continue
            got = set(ncu.parse_raw_csv(text)["metric"])
            missing = [m for m in metrics if m not in got]  # ncu may drop a metric without an error
            if missing:
                absent.update(missing)
                self.log(f"[record]   {label}: requested but absent from the CSV: {missing}")
            blocks.append(ncu.config_block(label, cmd, text))
        if not blocks:
            raise RuntimeError(f"every ncu run for {filename} failed: {failed}")
        self.w.write_text(filename, "".join(blocks))
        return (f"{len(blocks)}/{len(configs)} runs ok" + (f"; failed: {failed}" if failed else "")
                + (f"; metrics absent from the CSV: {sorted(absent)}" if absent else ""))

    def _copy_configs(self):
        strides = (1, 8, 32) if self.quick else STRIDES
        runs = [copy_run(COPY_N, "fp32")] + [copy_run(COPY_N, "fp32", s) for s in strides]
        return [(r.label(), r.kind, target_args(r)) for r in runs]

    def step_ncu_copies(self):
        return self._ncu_file("ncu_copies.csv", self._copy_configs(), COPY_METRICS)

    def step_ncu_copies_stalls(self):
        return self._ncu_file("ncu_copies_stalls.csv", self._copy_configs(), ncu.TIME + ncu.STALLS + ncu.SCHEDULER + ncu.CLOCK)

    def step_ncu_copies_source(self):
        """Per-SASS-instruction stall samples and executions (ncu's Source page,
        :func:`~infralens_lab.measure.ncu.run_ncu_source`) of the coalesced and stride 8, 32 copies: which
        instruction each stall reason sits on. The ``.ncu-rep`` report is temporary; only CSV text is kept."""
        src, raw, inst, failed = [], [], [], []
        for run in [copy_run(COPY_N, "fp32")] + [copy_run(COPY_N, "fp32", s) for s in (8, 32)]:
            target = ["--kernel", run.kind, *target_args(run), "--warmup", "1", "--iters", "1"]
            label = run.label()

            def capture(a, target=target, label=label):
                t0 = time.perf_counter()
                out = NR.run_ncu_source(target, timeout=240, **a)
                self.log(f"[record]   ncu_copies_source {label}: {time.perf_counter() - t0:.1f} s")
                return out, {page: NR.source_command_line(target, page=page, **a) for page in ("source", "raw", "instances")}

            try:
                out, cmds = self._in_first_window(run.kind, None, label, capture)
            except ncu.NcuError as err:
                failed.append(f"{label}: {err}")
                continue
            for blocks, page in ((src, "source"), (raw, "raw"), (inst, "instances")):
                blocks.append(ncu.config_block(label, cmds[page], out[page]))
        if not src:
            raise RuntimeError(f"every ncu source capture failed: {failed}")
        self.w.write_text("ncu_copies_source.csv", "".join(src))
        self.w.write_text("ncu_copies_source_raw.csv", "".join(raw))
        self.w.write_text("ncu_copies_source_instances.csv", "".join(inst))
        return f"{len(src)}/3 captures ok" + (f"; failed: {failed}" if failed else "")

    def step_ncu_attention(self):
        runs = [RunConfig(k, "fp16", shape=ATTN_SHAPE) for k in ATTENTION_KINDS]
        cfgs = [(r.label(), r.kind, target_args(r)) for r in runs]
        return self._ncu_file("ncu_attention.csv", cfgs, ATTN_METRICS)

    def step_ncu_gluon(self):
        """ncu on ``attn_fwd_gluon`` and ``attn_fwd_fast`` at :data:`GLUON_SHAPE` fp16 (``ncu_gluon.csv``, the same
        layout as ``ncu_attention.csv``); skipped on a GPU that is not Hopper: the Gluon kernel is sm_90 only.
        Record it into its own set (``--out data/recorded/<gpu-slug>-gluon --only device,ncu_gluon``)."""
        f = device.facts()
        if not str(f.compute_capability).startswith("9."):
            raise _Skip(f"needs sm_90: this GPU is {f.name} (compute capability {f.compute_capability}); "
                        "attn_fwd_gluon runs on Hopper only")
        runs = [RunConfig(k, "fp16", shape=GLUON_SHAPE) for k in GLUON_KERNELS]
        return self._ncu_file("ncu_gluon.csv", [(r.label(), r.kind, target_args(r)) for r in runs], GLUON_METRICS)

    def step_ncu_matmul(self):
        sizes = MATMUL_SIZES[::2] if self.quick else MATMUL_SIZES
        runs = [RunConfig("matmul", "fp16", shape=(n, n, n)) for n in sizes]
        cfgs = [(r.label(), r.kind, target_args(r)) for r in runs]
        return self._ncu_file("ncu_matmul.csv", cfgs, MATMUL_METRICS)

    def step_ncu_train_step(self):
        """ncu on the hot kernels of one fixed-pipeline training step: the top 3 by device time in
        ``trace_fixed`` (every kernel of a step would take minutes of replay)."""
        if not self.top_kernels:
            raise _Skip("no trace_fixed kernels to choose from (run the traces step first)")
        rx = "|".join(ncu.short_name_regex(k) for k in self.top_kernels[:3])
        run = RunConfig("train_step", version="fixed")
        return self._ncu_file("ncu_train_step.csv", [(run.label(), "train_step", [], rx)], TRAIN_STEP_METRICS)

    def step_distributed(self):
        """DDP on every GPU through NCCL (:func:`infralens_lab.measure.distributed.record_into`), written only when
        :func:`infralens_lab.analysis.ddp_run.run_violations` finds every invariant holds; skipped below 2 GPUs."""
        dist = _optional("infralens_lab.measure.distributed", "record_into")
        try:
            return dist.record_into(self.w, check=run_violations, quick=self.quick)
        except dist.NotEnoughGPUs as exc:
            raise _Skip(str(exc)) from None


class _Skip(InfraLensError):
    pass


def _optional(module: str, attr: str):
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise _Skip(f"{module} is not there yet ({exc})") from None
    if not hasattr(mod, attr):
        raise _Skip(f"{module} has no {attr}() yet")
    return mod


def bundle(out: Path, path: Path, log_text: str) -> Path:
    """Write ``out`` (the recorded set) and the log into one ``.tar.gz`` at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(out, arcname=out.name)
        data = log_text.encode()
        info = tarfile.TarInfo(f"{out.name}.record.log")
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return path


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m infralens_lab record", description=__doc__.split("\n\n")[0],
                                 epilog="steps: " + ", ".join(STEPS) + ". Records: device, ceilings, bench, "
                                 "trace_bubble, trace_fixed, trace_summary, step_times, pipeline_variants, memory_train, memory_infer, record_log; "
                                 "files ncu_copies.csv, ncu_copies_stalls.csv, ncu_attention.csv, ncu_matmul.csv, "
                                 "ncu_train_step.csv, ncu_gluon.csv (Hopper only, into its own set).")
    ap.add_argument("--out", required=True, help="folder for the recorded set, e.g. data/recorded/<gpu-slug>")
    ap.add_argument("--quick", action="store_true", help="fewer strides, sizes and repeats (a smoke run)")
    ap.add_argument("--only", default="", help=f"comma-separated subset of steps: {','.join(STEPS)}")
    ap.add_argument("--bundle", default="", help="also write everything (and the log) as one .tar.gz here")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in STEPS]
    if unknown:
        print(f"record: unknown step(s) {unknown}; expected some of {list(STEPS)}", file=sys.stderr)
        return 2

    try:
        gpu = device.is_gpu()
    except (device.ModeSettingError, device.GpuUnavailableError) as exc:
        print(f"record: refusing to record: {exc}. Recorded evidence must come from a real GPU; run it on a "
              "machine with an NVIDIA GPU.", file=sys.stderr)
        return 2
    if not gpu:
        print(f"record: refusing to record: recorded evidence must come from a real GPU, and this machine "
              f"runs in interpreter mode ({device.mode_reason()}). Run it on a machine with an NVIDIA GPU.", file=sys.stderr)
        return 2

    command = "python -m infralens_lab record " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(args.out)
    try:
        writer = EvidenceWriter(out, command)
    except EvidenceError as exc:
        print(f"record: {exc}", file=sys.stderr)
        return 2
    rec = Recorder(writer, quick=args.quick, log=lambda m: print(m, flush=True))
    t0 = time.perf_counter()
    for step in [s for s in STEPS if not only or s in only]:
        rec.run(step)
    total = time.perf_counter() - t0
    writer.write("record_log", {"steps": rec.entries, "total_seconds": round(total, 2), "quick": args.quick,
                                "ncu_clock_control": "none"},
                 units={"seconds": "s"}, notes=NCU_NOTES)
    writer.close()
    lines = ["", f"{'step':<20}{'status':<9}{'seconds':>8}"] + \
        [f"{e['step']:<20}{e['status']:<9}{e['seconds']:>8.1f}" for e in rec.entries] + [f"{'total':<29}{total:>8.1f}"]
    print("\n".join(lines))
    rec.lines += lines
    if args.bundle:
        print(f"bundle: {bundle(out, Path(args.bundle), chr(10).join(rec.lines))}")
    return 0 if all(e["status"] != "failed" for e in rec.entries) else 1


if __name__ == "__main__":
    sys.exit(main())
