"""Read any torch.profiler trace the way the labs do: ``python -m infralens_lab analyze PATH`` or
:func:`analyze` in a notebook.

PATH is a chrome trace (``.json`` or ``.json.gz``, as ``prof.export_chrome_trace`` or the tensorboard handler
write it) or a folder of per-rank traces (one file per rank of a distributed job). The report holds what labs 01,
05 and 06 show, computed by the same functions, over the GPU work the profiled steps launched (the series'
attribution rule, :meth:`~infralens_lab.parse.trace.Trace.gpu_step`):

* steps: each profiled step's CPU time, the GPU work it launched and when that finished; the steady period;
* GPU busy share of the steady window, and the idle gaps over ``min_gap_us`` by their CPU cause;
* hot kernels launched in the profiled steps (what to hand to Nsight Compute next);
* host-to-device copy time and the share hidden under kernels;
* for a folder: per rank and step, communication time, the part no compute hides, and the collectives
  aligned across ranks (stragglers).

Every table carries a provenance line beginning ``Evidence: your trace``. A trace that cannot be read gets
one clear message (:class:`~infralens_lab.parse.trace.TraceError`): not JSON, truncated, no ``traceEvents``,
no ``ProfilerStep`` ranges ("use a schedule"), no GPU events ("profiled without CUDA activity?").
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import present
from .analysis import distributed as D
from .analysis.overlap import copy_overlap
from .parse.trace import Trace, TraceError, idle_by_cause, load_trace, read_trace_file, step_gpu_work
from .present import table_text

NO_STEPS = ("no ProfilerStep ranges in {what}: use a schedule, e.g. torch.profiler.profile(..., "
            "schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)) and call prof.step() after each "
            "step, so that the analysis can tell one step from the next")
NO_GPU = ("no GPU events (kernels, memcpys, memsets) in {what}: profiled without CUDA activity? Pass "
          "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a machine with a GPU; or allow a "
          "CPU-only report (analyze(..., cpu_ok=True), or --cpu on the command line)")
TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass
class Report:
    """What :func:`analyze` found: named tables (DataFrames), one-line notes, and the provenance line."""

    source: str
    provenance: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The report as plain text (what the command line prints)."""
        out = [f"# {self.source}", self.provenance, ""]
        out += [f"- {n}" for n in self.notes]
        for name, df in self.tables.items():
            out += ["", f"## {name}", table_text(df) if len(df) else "(none)"]
        return "\n".join(out)

    def show(self) -> None:
        """Display every table in a notebook under its provenance line (plain text outside IPython)."""
        for n in self.notes:
            print(n)
        for name, df in self.tables.items():
            present.show(df, caption=self.provenance, title=name)

    def to_json(self) -> dict:
        return {"source": self.source, "provenance": self.provenance, "notes": self.notes,
                "tables": {k: json.loads(v.to_json(orient="records")) for k, v in self.tables.items()}}


def _provenance(path: Path | None, data: dict, what: str) -> str:
    parts = ["Evidence: your trace", what]
    if path is not None and path.is_file():
        parts.append(f"sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:12]}")
    gpus = sorted({str(d.get("name")) for d in data.get("deviceProperties", []) or [] if d.get("name")})
    parts.append(", ".join(gpus) if gpus else "no GPU named in the trace")
    parts.append(f"{len(data.get('traceEvents', []))} events")
    return " · ".join(parts)


def _require(tr: Trace, what: str, cpu_ok: bool) -> None:
    if not tr.has_steps:
        raise TraceError(NO_STEPS.format(what=what))
    if not tr.has_gpu and not cpu_ok:
        raise TraceError(NO_GPU.format(what=what))


def single(tr: Trace, min_gap_us: float = 50.0) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """The tables and notes of one trace (see the module doc)."""
    tables: dict[str, pd.DataFrame] = {}
    notes: list[str] = []
    st = tr.steps()
    if not tr.has_gpu:
        ops = tr.ops(top=10)
        tables["top ops (CPU time)"] = ops[["name", "count", "cpu_total_us", "self_cpu_us"]]
        tables["steps (CPU)"] = pd.DataFrame({"step": st["name"],
                                              "cpu_ms": (st["cpu_end_us"] - st["cpu_start_us"]) / 1e3})
        notes.append("CPU-only trace: no GPU events, so no GPU busy share, idle gaps, kernels or copies.")
        return tables, notes
    w = step_gpu_work(tr)
    tables["steps"] = pd.DataFrame({
        "step": w["step"], "cpu_ms": (w["cpu_end_us"] - w["cpu_start_us"]) / 1e3, "gpu_ops": w["gpu_ops"],
        "kernels": w["kernels"], "gpu_work_ms": w["gpu_work_us"] / 1e3, "gpu_end_ms": w["gpu_end_us"] / 1e3})
    s = tr.summary(min_gap_us)
    sw = tr.steady_window()
    if sw is not None:
        a, b, n = sw
        notes.append(f"steady period {(b - a) / n / 1e3:.3f} ms per step (spacing of the steps' GPU-work ends, "
                     f"{n} period{'s' if n != 1 else ''}); GPU busy {100 * s['gpu_utilization']:.1f}% of it")
    else:
        notes.append(f"fewer than two profiled steps launched GPU work: GPU busy "
                     f"{100 * s['gpu_utilization']:.1f}% from its first start to its last end")
    left = s["leftover"]
    if left["events"]:
        notes.append(f"left out: {left['events']} GPU events ({left['device_us'] / 1e3:.3f} ms) that no profiled "
                     f"step launched (queued by steps before the profiler's active window)")
    idle = idle_by_cause(tr)
    tables[f"GPU idle time by CPU cause (gaps over {min_gap_us:g} µs)"] = idle.assign(idle_ms=idle["idle_us"] / 1e3)[
        ["cause", "idle_ms", "share"]]
    k = tr.kernels(top=10)
    tables["hot kernels (launched in the profiled steps)"] = pd.DataFrame({
        "kernel": k["name"], "launches": k["count"], "total_ms": k["total_us"] / 1e3, "pct_of_kernel_time": k["pct"]})
    c = copy_overlap(tr)
    if c["copies"]:
        tables["host-to-device copies"] = pd.DataFrame([{
            "copies": c["copies"], "copy_ms_per_step": c["copy_us"] / c["steps"] / 1e3,
            "hidden_fraction": c["fraction"], "exposed_ms_per_step": c["exposed_us"] / c["steps"] / 1e3}])
    return tables, notes


def _rank_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    if not files:
        raise TraceError(f"{folder}: no trace files (*.json, *.json.gz); expected one chrome trace per rank")
    return files


def _rank_of(data: dict, path: Path, fallback: int) -> int:
    info = data.get("distributedInfo") or {}
    if isinstance(info.get("rank"), int):
        return info["rank"]
    digits = "".join(ch if ch.isdigit() else " " for ch in path.name.split(".")[0]).split()
    return int(digits[-1]) if digits else fallback


def ranks(folder: Path, cpu_ok: bool = False) -> tuple[list[Trace], list[Path], list[dict]]:
    """The per-rank traces of a folder, ordered by rank (``distributedInfo.rank``, else the last number in the
    file name). Raises TraceError when two files claim one rank."""
    items = []
    for i, p in enumerate(_rank_files(folder)):
        data = read_trace_file(p)
        items.append((_rank_of(data, p, i), p, data))
    seen = [r for r, _, _ in items]
    if len(set(seen)) != len(seen):
        raise TraceError(f"{folder}: ranks {seen} repeat; expected one file per rank")
    items.sort(key=lambda x: x[0])
    trs = [Trace(d) for _, _, d in items]
    for (r, p, _), tr in zip(items, trs, strict=True):
        _require(tr, f"{p.name} (rank {r})", cpu_ok)
    return trs, [p for _, p, _ in items], [d for _, _, d in items]


def analyze(source: Any, min_gap_us: float = 50.0, cpu_ok: bool = False) -> Report:
    """Analyze a trace file, a folder of per-rank traces, a chrome-trace dict or a :class:`Trace` (see the
    module doc). ``cpu_ok`` accepts a trace without GPU events (the CPU side only)."""
    if isinstance(source, Trace):
        _require(source, "this trace", cpu_ok)
        tables, notes = single(source, min_gap_us)
        return Report("a Trace object", _provenance(None, source.data, "a Trace object"), tables, notes)
    if isinstance(source, dict):
        return analyze(load_trace(source), min_gap_us, cpu_ok)
    p = Path(source)
    if p.is_dir():
        trs, files, datas = ranks(p, cpu_ok)
        rep = Report(str(p), _provenance(None, datas[0], f"{len(trs)} ranks in {p.name}/"))
        for f, tr in zip(files, trs, strict=True):
            tables, _ = single(tr, min_gap_us)
            rep.tables[f"{f.name}: steps"] = tables.get("steps", tables.get("steps (CPU)"))
        rep.tables["per rank and step: communication, compute, exposed"] = D.overlap_table(trs)
        if len(trs) >= 2:
            try:
                al = D.align(trs)
                rep.tables["collectives aligned across ranks"] = al
            except ValueError as exc:  # ranks recorded different collectives: say so, keep the rest
                rep.notes.append(f"collectives not aligned: {exc}")
        return rep
    data = read_trace_file(p)
    tr = Trace(data)
    _require(tr, p.name, cpu_ok)
    tables, notes = single(tr, min_gap_us)
    return Report(str(p), _provenance(p, data, p.name), tables, notes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infralens_lab analyze",
                                 description="what the labs show, for your own torch.profiler trace")
    ap.add_argument("path", help="a chrome trace (.json or .json.gz) or a folder of per-rank traces")
    ap.add_argument("--min-gap-us", type=float, default=50.0, help="idle gaps shorter than this are not listed")
    ap.add_argument("--cpu", action="store_true", help="accept a trace without GPU events (CPU side only)")
    ap.add_argument("--json", default="", help="also write the report as JSON here")
    args = ap.parse_args(argv)
    try:
        rep = analyze(args.path, args.min_gap_us, cpu_ok=args.cpu)
    except (TraceError, FileNotFoundError) as exc:
        print(f"analyze: {exc}", file=sys.stderr)
        return 2
    print(rep.text())
    if args.json:
        Path(args.json).write_text(json.dumps(rep.to_json(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
