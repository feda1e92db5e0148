"""Read any torch.profiler trace the way the labs do: ``python -m infralens_lab analyze PATH`` or
:func:`analyze` in a notebook.

PATH is a chrome trace (``.json`` or ``.json.gz``, as ``prof.export_chrome_trace`` or the tensorboard handler
write it; older PyTorch's category names, ``Operator``, ``Runtime``, ``Kernel``..., read as the modern ones), a
recorded evidence file of the package (``data/recorded/<gpu>/trace_*.json``: the trace under ``values``), or a
folder of per-rank traces (one file per rank of a distributed job; a gloo job's CPU-only ranks are read as
such, without ``--cpu``). The report holds what labs 01,
05 and 06 show, computed by the same functions, over the GPU work the profiled steps launched (the series'
attribution rule, :meth:`~infralens_lab.parse.trace.Trace.gpu_step`):

* steps: each profiled step's CPU time, the GPU work it launched (summed over streams, and merged: busy time)
  and when that finished; the steady period;
* GPU busy share of the steady window, and ALL its idle time: the gaps over ``min_gap_us`` by their CPU cause,
  the shorter ones (back-to-back launches) as a row of their own (:mod:`~infralens_lab.analysis.idle`);
* per stream, why it waited (host wait, other-stream wait, other); launch delay (CPU launch call start to GPU
  start) and launch call time per kind of call; kernels under 10 µs and the launch overhead they carry;
* hot kernels launched in the profiled steps (what to hand to Nsight Compute next);
* host-to-device copy time and the share hidden under kernels;
* for a folder: a one-line verdict first (which rank the others wait for, how long per step, at which
  collective: :func:`~infralens_lab.analysis.distributed.stragglers`), per rank and step, communication time,
  the part no compute hides, and the collectives aligned across ranks (the largest waits printed; all in --json).

``analyze A B`` (:func:`diff`): what changed from trace A to trace B of the same program: steady period, GPU
busy share, every kernel's time and launches per step (added and removed ones too) and idle by CPU cause, each
as before, after, change and ratio (:mod:`~infralens_lab.analysis.trace_diff`). Kernel and op names print
shortened (:func:`~infralens_lab.present.kernel_names_short`); the report's tables and ``--json`` keep them whole.

Every table carries a provenance line beginning ``Evidence: your trace`` (``Evidence: recorded evidence file``
for a recorded one, with its record's provenance). A trace that cannot be read gets
one clear message (:class:`~infralens_lab.parse.trace.TraceError`): not JSON, truncated, no ``traceEvents``
(saying where a trace sits inside the JSON, if one does),
no ``ProfilerStep`` ranges ("use a schedule"), no GPU events ("profiled without CUDA activity?").
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import present
from .analysis import distributed, trace_diff
from .analysis import idle as idle_analysis
from .analysis.overlap import copy_overlap
from .evidence import EvidenceError, Provenance
from .parse.trace import Trace, TraceError, load_trace, read_trace_file, read_trace_record, step_gpu_work
from .present import table_text

NO_STEPS = ("no ProfilerStep ranges in {what}: use a schedule, e.g. torch.profiler.profile(..., "
            "schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)) and call prof.step() after each "
            "step, so that the analysis can tell one step from the next")
NO_GPU = ("no GPU events (kernels, memcpys, memsets) in {what}: profiled without CUDA activity? Pass "
          "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a machine with a GPU; or allow a "
          "CPU-only report (analyze(..., cpu_ok=True), or --cpu on the command line)")
TRACE_SUFFIXES = (".json", ".json.gz")
GZIP_MAGIC = b"\x1f\x8b"
NAME_COLUMNS = ("kernel", "name", "op")  # columns of kernel or op names: shortened when printed
ALIGN_TABLE = "collectives aligned across ranks"
ALIGN_ROWS_SHOWN = 12  # rows of the collectives-aligned table printed (the largest waits); --json has all
# the names of single()'s tables: tests and callers read them by these names, so keep them stable
STEPS_TABLE = "steps"
IDLE_TABLE = "GPU idle time in the steady window by CPU cause (shares of all idle time)"
KERNELS_TABLE = "hot kernels (launched in the profiled steps)"
STREAMS_TABLE = "why each stream waited (idle between its own events, in the steady window)"
LAUNCH_TABLE = "launch delay (CPU launch call start to GPU start) and launch call time"
SHORT_TABLE = f"short kernels (under {idle_analysis.SHORT_KERNEL_US:g} µs) and their launch overhead"


@dataclass
class Report:
    """What :func:`analyze` found: named tables (DataFrames), one-line notes, and the provenance line."""

    source: str
    provenance: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    capped: dict[str, tuple[int, str]] = field(default_factory=dict)  # table -> (rows shown, largest |column|)

    def shown(self, name: str) -> tuple[pd.DataFrame, str]:
        """Table ``name`` as printed: kernel and op names (columns :data:`NAME_COLUMNS`) shortened
        (:func:`~infralens_lab.present.kernel_names_short`; :attr:`tables` and :meth:`to_json` keep them whole),
        and a table in :attr:`capped` cut to its top rows, with a line saying what was left out (else "")."""
        df = self.tables[name]
        left = ""
        if name in self.capped and len(df) > self.capped[name][0]:
            n, by = self.capped[name]
            df = df.loc[df[by].abs().nlargest(n).index].sort_index()
            left = (f"({len(self.tables[name]) - n} of {len(self.tables[name])} rows left out: the {n} largest by "
                    f"{present.header_label(by)} are shown; --json has all)")
        short = {c: present.kernel_names_short(df[c].tolist()) for c in df.columns if c in NAME_COLUMNS}
        return (df.assign(**short) if short else df), left

    def text(self) -> str:
        """The report as plain text (what the command line prints)."""
        out = [f"# {self.source}", self.provenance, ""]
        out += [f"- {n}" for n in self.notes]
        for name in self.tables:
            df, left = self.shown(name)
            out += ["", f"## {name}", table_text(df, shorten=False) if len(df) else "(none)"] + ([left] if left else [])
        return "\n".join(out)

    def show(self) -> None:
        """Display every table in a notebook under its provenance line (plain text outside IPython)."""
        for n in self.notes:
            print(n)
        for name in self.tables:
            df, left = self.shown(name)
            present.show(df, caption=f"{self.provenance} {left}".strip(), title=name)

    def to_json(self) -> dict:
        return {"source": self.source, "provenance": self.provenance, "notes": self.notes,
                "tables": {k: json.loads(v.to_json(orient="records")) for k, v in self.tables.items()}}


def _provenance(path: Path | None, data: dict, what: str, record: dict | None = None) -> str:
    """The report's provenance line: whose trace (``Evidence: your trace``, or ``Evidence: recorded evidence
    file`` for a file the package recorded, ``record`` being its JSON without the values:
    :func:`~infralens_lab.parse.trace.read_trace_record`), the file's name and sha256, the GPU (the record's
    provenance, else the trace's ``deviceProperties``) and the number of events."""
    parts = ["Evidence: your trace" if record is None else "Evidence: recorded evidence file", what]
    if path is not None and path.is_file():
        raw = path.read_bytes()
        if raw[:2] == GZIP_MAGIC:  # the JSON's checksum, as a recorded set's manifest lists it for a .json.gz
            raw = gzip.decompress(raw)
        parts.append(f"sha256 {hashlib.sha256(raw).hexdigest()[:12]}")
    gpus = sorted({str(d.get("name")) for d in data.get("deviceProperties", []) or [] if d.get("name")})
    if record is not None:
        prov = record.get("provenance") or {}
        try:
            said = Provenance.from_dict(prov, what).caption().removeprefix("Evidence: ")
        except EvidenceError:  # a record of another version: the fields it has
            said = " · ".join(str(prov[k]) for k in ("source", "gpu", "torch", "date_utc") if prov.get(k))
        parts.append(f"record {record.get('name', what)!r}: {said or 'no provenance fields'}")
    else:
        parts.append(", ".join(gpus) if gpus else "no GPU named in the trace")
    parts.append(f"{len(data.get('traceEvents', []))} events")
    return " · ".join(parts)


def gloo_rank(tr: Trace) -> bool:
    """True for one rank of a gloo (CPU) distributed job: no GPU events, and collectives run on the CPU, gloo's
    ranges (``gloo:all_reduce``...) or c10d's calls (``c10d::allreduce_``...), with no NCCL range (an NCCL job
    profiled without CUDA activity is not one: its GPU side is missing, and it still needs ``cpu_ok``)."""
    if tr.has_gpu:
        return False
    names = tr.events["name"].astype(str)
    if names.str.contains("nccl", case=False, regex=False).any():
        return False
    return bool(names.str.startswith(("gloo:", "c10d::")).any())


def _cpu_ranks_note(trs: list[Trace]) -> list[str]:
    """The note for traces that are all gloo ranks (:func:`gloo_rank`), else none."""
    if not trs or not all(gloo_rank(tr) for tr in trs):
        return []
    what = f"{len(trs)} CPU ranks" if len(trs) > 1 else "a CPU rank"
    return [f"{what} (gloo): collectives ran on the CPU (gloo:all_reduce, c10d::allreduce_) and no GPU events were "
            f"recorded, so the report covers the CPU side: no GPU busy share, idle gaps, kernels or copies"]


def _require(tr: Trace, what: str, cpu_ok: bool) -> None:
    if not tr.has_steps:
        raise TraceError(NO_STEPS.format(what=what))
    if not tr.has_gpu and not cpu_ok:
        raise TraceError(NO_GPU.format(what=what))


def _require_step_work(tr: Trace) -> None:
    """Raise TraceError for a trace with GPU events of which no profiled step launched any: the step tables,
    the idle accounting and the diff have nothing to read then."""
    if not tr.busy():
        raise TraceError(f"{tr.leftover()['events']} GPU events, none launched inside a ProfilerStep range (no launch "
                         f"call matched by correlation id inside a step); expected the profiled steps' kernels with "
                         f"their runtime calls: profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")


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
    _require_step_work(tr)
    w = step_gpu_work(tr)
    tables[STEPS_TABLE] = pd.DataFrame({  # the sum over streams can exceed the period; the merged time cannot
        "step": w["step"], "cpu_ms": (w["cpu_end_us"] - w["cpu_start_us"]) / 1e3, "gpu_ops": w["gpu_ops"],
        "kernels": w["kernels"], "gpu_work_sum_ms": w["gpu_work_us"] / 1e3, "gpu_busy_ms": w["gpu_busy_us"] / 1e3,
        "gpu_end_ms": w["gpu_end_us"] / 1e3})
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
    idle = idle_analysis.idle_accounting(tr, min_gap_us)
    tables[IDLE_TABLE] = idle
    notes.append(f"idle: {idle.attrs['window_us'] / 1e3:.3f} ms window = {idle.attrs['busy_us'] / 1e3:.3f} ms GPU busy "
                 f"(any stream) + {idle['idle_ms'].sum():.3f} ms idle; gaps over {min_gap_us:g} µs are charged to "
                 f"what the CPU was doing, the shorter ones are a row of their own")
    tables[STREAMS_TABLE] = idle_analysis.stream_idle(tr)
    tables[LAUNCH_TABLE] = idle_analysis.launch_delay(tr)
    tables[SHORT_TABLE] = idle_analysis.short_kernels(tr)
    k = tr.kernels(top=10)
    tables[KERNELS_TABLE] = pd.DataFrame({
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
    cpu_ranks = all(gloo_rank(tr) for tr in trs)  # a gloo job's ranks have no GPU side to miss: no cpu_ok needed
    for (r, p, _), tr in zip(items, trs, strict=True):
        _require(tr, f"{p.name} (rank {r})", cpu_ok or cpu_ranks)
    return trs, [p for _, p, _ in items], [d for _, _, d in items]


def straggler_verdict(st: pd.DataFrame, names: list[int] | None = None) -> str:
    """One line from :func:`~infralens_lab.analysis.distributed.stragglers`: which rank the others wait for, how
    long (median ms per steady step) and at which collective of the step the most. ``names``: the rank number of
    each position (the traces' own ranks), else the positions."""
    if st.empty:
        return "straggler: no collectives to align"
    top = st.iloc[0]
    name = names[int(top["rank"])] if names else int(top["rank"])
    if top["caused_ms_per_step"] <= 0:
        return (f"straggler: none; no rank holds the others up (median wait caused per step 0 ms over "
                f"{int(top['collectives'])} collectives per rank)")
    where = (f"most at all-reduce #{int(top['worst_seq'])} of each step (order within the step; median "
             f"{top['worst_seq_ms']:.3g} ms)" if top["worst_seq"] >= 0 else "")
    return (f"straggler: rank {name} arrives last at {int(top['last_at'])} of {int(top['collectives'])} "
            f"collectives, the other ranks wait for it a median {top['caused_ms_per_step']:.3g} ms per step"
            + (f", {where}" if where else ""))


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
        rep.notes += _cpu_ranks_note(trs)
        for f, tr in zip(files, trs, strict=True):
            tables, _ = single(tr, min_gap_us)
            rep.tables[f"{f.name}: steps"] = tables.get(STEPS_TABLE, tables.get("steps (CPU)"))
        try:
            rep.tables["per rank and step: communication, compute, exposed"] = distributed.overlap_table(trs)
        except ValueError as exc:  # a rank's collectives cannot be paired with their work: say so, keep the rest
            rep.notes.append(f"communication per step not computed: {exc}")
        if len(trs) >= 2:
            try:
                al = distributed.align(trs)
            except ValueError as exc:  # ranks recorded different collectives: say so, keep the rest
                rep.notes.append(f"collectives not aligned: {exc}")
            else:
                names = [_rank_of(d, f, i) for i, (f, d) in enumerate(zip(files, datas, strict=True))]
                rep.notes.insert(0, straggler_verdict(distributed.stragglers(al), names))
                rep.tables[ALIGN_TABLE] = al
                rep.capped[ALIGN_TABLE] = (ALIGN_ROWS_SHOWN, "wait_us")
        return rep
    data, record = read_trace_record(p)
    tr = Trace(data)
    _require(tr, p.name, cpu_ok or gloo_rank(tr))
    tables, notes = single(tr, min_gap_us)
    return Report(str(p), _provenance(p, data, p.name, record), tables, _cpu_ranks_note([tr]) + notes)


def _diff_side(tr: Trace, min_gap_us: float) -> dict[str, Any]:
    """What :func:`diff` compares of one trace: the period and busy share :func:`single`'s notes state
    (:meth:`Trace.steady_window`, :meth:`Trace.summary`), the mean CPU time of a profiled step, idle by cause per
    period of the steady window (:func:`~infralens_lab.analysis.idle.idle_accounting`, :func:`single`'s idle
    table) and every kernel the profiled steps launched, per profiled step (:meth:`Trace.kernels`: the hot-kernel
    table keeps ten, which cannot tell a kernel gone from one cooler)."""
    _require_step_work(tr)
    n = len(tr.steps())
    sw, s = tr.steady_window(), tr.summary(min_gap_us)
    k = tr.kernels()
    kern = pd.DataFrame({"kernel": k["name"], "ms": k["total_us"] / n / 1e3, "launches": k["count"] / n})  # per step
    idle = idle_analysis.idle_accounting(tr, min_gap_us)[["cause", "ms_per_step"]].rename(columns={"ms_per_step": "ms"})
    metrics = {"profiled_steps": n}
    if sw is not None:
        metrics["period_ms"] = (sw[1] - sw[0]) / sw[2] / 1e3
    metrics |= {"gpu_busy_pct": 100 * (s.get("gpu_utilization") or 0.0),
                "cpu_ms_per_step": s["mean_step_us"] / 1e3,
                "kernels_per_step": float(kern["launches"].sum()),
                "kernel_ms_per_step": float(kern["ms"].sum()),
                f"idle_ms_per_step (gaps over {min_gap_us:g} µs)": float(
                    idle.loc[idle["cause"] != idle_analysis.SHORT_ROW.format(t=min_gap_us), "ms"].sum())}
    return {"metrics": metrics, "kernels": kern, "idle": idle}


DIFF_TABLES = ("before → after", "kernels: time (ms) and launches per step, largest change first",
               "GPU idle time by CPU cause, ms per step")
DIFF_KERNELS_SHOWN = 15  # kernel rows printed (the largest changes); --json has all
SAME_PROGRAM_SHARE = 0.5  # below this share of kernel time in common kernels, the diff warns: two programs?


def diff(before: Any, after: Any, min_gap_us: float = 50.0) -> Report:
    """What changed from trace ``before`` to trace ``after`` (files, or anything :func:`analyze` reads that is one
    trace) of the same program: steady period, GPU busy share, per-step CPU, kernel and idle time
    (:func:`~infralens_lab.analysis.trace_diff.compare`), every kernel's time and launches per step, added and
    removed ones included, and idle by CPU cause (:func:`~infralens_lab.analysis.trace_diff.changes`), each as
    before, after, change and ratio. Raises TraceError for a folder, a trace without GPU work, or two traces
    with no kernel in common (two different programs: nothing to compare)."""
    sides, names, prov = [], [], []
    for src in (before, after):
        if isinstance(src, Trace):
            tr, name, data, path, record = src, "a Trace object", src.data, None, None
        else:
            path = Path(src)
            if path.is_dir():
                raise TraceError(f"{path}: a folder; analyze A B compares two trace files (.json or .json.gz), "
                                 f"before and after a change")
            data, record = read_trace_record(path)
            tr, name = Trace(data), path.name
        _require(tr, name, cpu_ok=True)
        if not tr.has_gpu:
            raise TraceError(f"{name}: no GPU events (kernels, memcpys, memsets); analyze A B compares the GPU work "
                             f"of two traces, expected traces profiled with ProfilerActivity.CUDA")
        sides.append(_diff_side(tr, min_gap_us))
        names.append(name)
        prov.append(_provenance(path, data, name, record))
    b, a = sides
    kern = trace_diff.changes(b["kernels"], a["kernels"], "kernel", "ms", "launches")
    share = trace_diff.common_share(kern, "ms")
    if share == 0:
        eg = [repr(x["kernels"]["kernel"].iloc[0][:60]) if len(x["kernels"]) else "none" for x in (b, a)]
        raise TraceError(
            f"{names[0]} and {names[1]} have no kernel in common ({len(b['kernels'])} and {len(a['kernels'])} "
            f"kernels, e.g. {eg[0]} and {eg[1]}); expected two traces of the same program, before and after a change")
    rep = Report(f"{names[0]} → {names[1]}", "\n".join(f"{w}: {p}" for w, p in zip(("before", "after"), prov,
                                                                                   strict=True)))
    summary = trace_diff.compare(b["metrics"], a["metrics"])
    rep.tables[DIFF_TABLES[0]] = summary
    rep.tables[DIFF_TABLES[1]] = kern
    rep.capped[DIFF_TABLES[1]] = (DIFF_KERNELS_SHOWN, "change_ms")
    rep.tables[DIFF_TABLES[2]] = trace_diff.changes(b["idle"], a["idle"], "cause", "ms")
    m = summary.set_index("metric")
    if "period_ms" in m.index:
        r = m.loc["period_ms"]
        rep.notes.append(f"steady period {r['before']:.3f} → {r['after']:.3f} ms per step "
                         f"({r['change']:+.3f} ms, × {r['ratio']:.3f}); GPU busy {m.loc['gpu_busy_pct', 'before']:.1f}%"
                         f" → {m.loc['gpu_busy_pct', 'after']:.1f}%")
    added, removed = (int((kern["status"] == s).sum()) for s in ("added", "removed"))
    rep.notes.append(f"kernels: {int((kern['status'] == 'both').sum())} in both, {added} added, {removed} removed; "
                     f"{100 * share:.1f}% of the kernel time is in kernels both ran")
    if share < SAME_PROGRAM_SHARE:
        rep.notes.append(f"only {100 * share:.1f}% of the kernel time is in kernels both traces ran: two different "
                         f"programs? The per-kernel comparison says little then")
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infralens_lab analyze",
                                 description="what the labs show, for your own torch.profiler trace")
    ap.add_argument("path", help="a chrome trace (.json or .json.gz) or a folder of per-rank traces")
    ap.add_argument("path2", nargs="?", default=None,
                    help="a second trace of the same program: print what changed from PATH to PATH2")
    ap.add_argument("--min-gap-us", type=float, default=50.0, help="idle gaps shorter than this are not listed")
    ap.add_argument("--cpu", action="store_true", help="accept a trace without GPU events (CPU side only)")
    ap.add_argument("--json", default="", help="also write the report as JSON here")
    args = ap.parse_args(argv)
    try:
        rep = (diff(args.path, args.path2, args.min_gap_us) if args.path2 is not None
               else analyze(args.path, args.min_gap_us, cpu_ok=args.cpu))
    except (TraceError, FileNotFoundError) as exc:
        print(f"analyze: {exc}", file=sys.stderr)
        return 2
    print(rep.text())
    if args.json:
        Path(args.json).write_text(json.dumps(rep.to_json(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
