"""torch.profiler as a system timeline: top ops and kernels, ranges, and GPU idle gaps with their causes.

:func:`load_trace` builds a :class:`Trace` from a chrome-trace JSON (a path, a dict, or a recorded
Evidence); :func:`infralens_lab.measure.torch_trace.profile` returns the same :class:`Trace` for a live
run, so live traces and recorded ones go through one code path. Reading only: nothing here runs. :func:`infralens_lab.annotate.annotate`
opens the named ranges the workloads use.

A kernel is attributed to the op and range that launched it: its ``correlation`` id (also
carried by the ``ac2g`` flow events) names the ``cudaLaunchKernel``/``cuLaunchKernel`` call on
the CPU, and every op or range enclosing that call on its thread gets the kernel's time. GPU
idle gaps are the holes between consecutive kernels/memcpys/memsets on the device (all
streams merged). Each gap is explained by what the CPU was doing during it, each moment
charged to the first matching cause: ``sync`` (cudaStreamSynchronize, cudaDeviceSynchronize,
aten::item, aten::_local_scalar_dense...), ``memcpy`` (cudaMemcpy* calls: pageable host->device
copies run synchronously on the CPU), ``launch`` (cudaLaunchKernel/cuLaunchKernel: launch
overhead), ``host`` (any other op or range, e.g. ``data`` preparing a batch in Python) and
``unaccounted`` (no profiled event). Times in the frames are microseconds (``_us``) from the
trace's first event, unless a column says ``_ms``.
"""
from __future__ import annotations

import copy
import gzip
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InfraLensError

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
CPU_CATS = ("cpu_op", "user_annotation", *RUNTIME_CATS)
SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
              "cuCtxSynchronize", "aten::item", "aten::_local_scalar_dense")
CAUSES = ("sync", "memcpy", "launch", "host", "unaccounted")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
                "cudaGraphLaunch", "cuGraphLaunch", "cudaLaunchCooperativeKernel")  # CPU calls that launch GPU work
GRAPH_LAUNCH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")
KEEP_ARGS = ("correlation", "External id", "stream", "device")
# Categories of older traces -> the ones this module reads. PyTorch 1.8/1.9 (early kineto) wrote ``Operator`` (aten
# ops and record_function ranges, ``ProfilerStep#N`` included), ``Runtime`` (cudaLaunchKernel...), ``Kernel``,
# ``Memcpy`` and ``Memset``; names are matched in any case (``CUDA_Runtime``). The same mapping as the tensorboard
# profiler plugin's ``EventTypeMap``, and the GPU categories HTA's idle-time analysis accepts (``Kernel``,
# ``Memcpy``, ``Memset`` beside the modern ones). Others (``Trace``, ``Python``, ``python_function``) are not read.
CATEGORY_OF = {"cpu_op": "cpu_op", "operator": "cpu_op", "user_annotation": "user_annotation",
               "cuda_runtime": "cuda_runtime", "runtime": "cuda_runtime", "cuda_driver": "cuda_driver",
               "kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "memcpy": "gpu_memcpy",
               "gpu_memset": "gpu_memset", "memset": "gpu_memset"}
STEP_PREFIX = "ProfilerStep#"  # prof.step() opens one range so named per profiled step
NO_GPU_NOTE = "CPU-only trace: no kernels, memcpys or memsets were recorded, so there are no GPU idle gaps to find"


class TraceError(InfraLensError, ValueError):
    """A file or object is not a chrome trace this package can read; the message says what was seen and the fix."""


def category(event: dict) -> str | None:
    """The category this module reads ``event`` as: its ``cat`` mapped by :data:`CATEGORY_OF` (any case, legacy
    names included), or None for one it does not read. A ``ProfilerStep#N`` range is a ``user_annotation``
    whichever category it carries (PyTorch 1.8 labelled it ``Operator``, like an aten op)."""
    cat = event.get("cat")
    c = CATEGORY_OF.get(cat.lower()) if isinstance(cat, str) else None
    if c == "cpu_op" and str(event.get("name", "")).startswith(STEP_PREFIX):
        return "user_annotation"
    return c


NOT_JSON_FIX = ("expected the JSON file torch.profiler writes: prof.export_chrome_trace('trace.json'), or the "
                "tensorboard handler's *.pt.trace.json(.gz)")


def read_trace_file(path: str | Path) -> dict:
    """The chrome-trace dict in ``path`` (``.json`` or gzip-compressed ``.json.gz``): the file itself, or the
    trace inside an evidence record the package recorded (``data/recorded/<gpu>/trace_*.json``: ``provenance``,
    and the trace under ``values``; :func:`read_trace_record` also returns the record). Raises
    :class:`TraceError` for a file that is not JSON, a truncated one (the profiler stopped while exporting),
    or JSON that is neither (the message says where a trace sits inside it, if one does); FileNotFoundError
    when nothing is there."""
    return read_trace_record(path)[0]


EVIDENCE_SCHEMA_PREFIX = "infralens.evidence/"  # the schema of a recorded evidence file (infralens_lab.evidence)


def is_trace_record(data: Any) -> bool:
    """True for an evidence record whose values are a chrome trace: a dict with a ``provenance`` object, a
    ``values`` dict holding a ``traceEvents`` list, and no other ``schema`` than an evidence one."""
    return (isinstance(data, dict) and isinstance(data.get("provenance"), dict)
            and isinstance(data.get("values"), dict) and isinstance(data["values"].get("traceEvents"), list)
            and str(data.get("schema", EVIDENCE_SCHEMA_PREFIX)).startswith(EVIDENCE_SCHEMA_PREFIX))


def trace_inside(obj: Any, depth: int = 4) -> str | None:
    """Where in parsed JSON ``obj`` a dict with a ``traceEvents`` list sits, as subscripts (``['values']``,
    ``[0]['configs'][1]['trace']``), searched breadth-first up to ``depth`` levels down (the first 64 entries of
    each dict or list, 4096 places a level); None when nowhere."""
    level: list[tuple[str, Any]] = [("", obj)]
    for _ in range(depth):
        nxt: list[tuple[str, Any]] = []
        for where, o in level:
            items = (list(o.items())[:64] if isinstance(o, dict)
                     else list(enumerate(o[:64])) if isinstance(o, list) else [])
            for k, v in items:
                sub = f"{where}[{k!r}]"
                if isinstance(v, dict) and isinstance(v.get("traceEvents"), list):
                    return sub
                if isinstance(v, (dict, list)) and len(nxt) < 4096:
                    nxt.append((sub, v))
        level = nxt
    return None


def _not_a_trace(data: Any) -> str:
    """What a parsed JSON that is not a chrome trace holds, for an error message: its top-level keys (or type)
    and, when a trace sits deeper inside it, where."""
    if isinstance(data, dict):
        seen = f"top level: {sorted(map(str, data))[:8]}"
    elif isinstance(data, list):
        seen = f"top level: a list of {len(data)} items"
    else:
        seen = f"top level: {type(data).__name__}"
    where = trace_inside(data)
    inside = (f"; the trace sits under {where}: save that part as a file of its own "
              f"(json.dump(data{where}, f)) and analyze it" if where else "")
    return f"JSON without a 'traceEvents' list ({seen}){inside}"


def read_trace_record(path: str | Path) -> tuple[dict, dict | None]:
    """``(trace, record)``: the chrome-trace dict in ``path`` (see :func:`read_trace_file`) and, for an
    evidence record, the record without its values (``schema``, ``name``, ``provenance``, ``units``,
    ``notes``); ``record`` is None for a plain trace. Raises as :func:`read_trace_file`."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no trace file at {p}" + (" (it is a folder: pass one rank's file, or analyze "
                                                           "the folder as per-rank traces)" if p.is_dir() else ""))
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise TraceError(f"{p.name}: a gzip file that does not decompress ({exc}); truncated? "
                             f"{NOT_JSON_FIX}") from None
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        stripped = text.rstrip()
        starts_like_json = stripped.lstrip()[:1] in ("{", "[")
        if starts_like_json and exc.pos >= len(stripped) - 64:  # the parse ran out of text: it was cut short
            raise TraceError(f"{p.name}: the JSON stops at character {len(stripped)} before it closes "
                             f"({exc.msg}): a truncated trace, e.g. a profiler stopped while it was exporting. "
                             f"Profile again and let export_chrome_trace finish.") from None
        head = stripped[:60].replace("\n", " ")
        raise TraceError(f"{p.name}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}; it begins "
                         f"{head!r}); {NOT_JSON_FIX}") from None
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        return data, None
    if is_trace_record(data):
        return data["values"], {k: v for k, v in data.items() if k != "values"}
    raise TraceError(f"{p.name}: {_not_a_trace(data)}; {NOT_JSON_FIX}")


def load_trace(source: Any) -> Trace:
    """A :class:`Trace` from a chrome-trace path (``.json`` or ``.json.gz``), a dict, or an Evidence whose values
    are one. Unreadable files raise :class:`TraceError` naming what was seen (:func:`read_trace_file`)."""
    if hasattr(source, "values") and hasattr(source, "provenance"):
        return Trace(source.values)
    if is_trace_record(source):  # a recorded evidence file's JSON, read by the caller
        return Trace(source["values"])
    if isinstance(source, dict):
        return Trace(source)
    if isinstance(source, (str, Path)):
        return Trace(read_trace_file(source))
    raise TypeError(f"trace source is {type(source).__name__}; expected a path, a dict or an Evidence")


def trim(data: dict, decimals: int = 3, max_depth: int | None = None) -> dict:
    """The chrome trace reduced to what :class:`Trace` reads (complete events of known categories with
    their correlation/stream args, and ac2g flows), timestamps rounded to ``decimals`` µs digits. The flows
    are dropped when every GPU event and every runtime call kept carries its ``correlation`` arg: the
    launch join then reads the args, and the flows only repeated them (a third of a trace's events).

    ``max_depth``: also drop aten ops nested more than this many ops deep (1 keeps only top-level
    ops). Idle-gap causes do not change (a child lies inside its parent); kernels are then
    attributed to the deepest op kept.
    """
    depth: dict[int, int] = {}
    if max_depth is not None:
        ops = sorted((e for e in data.get("traceEvents", []) if e.get("ph") == "X" and category(e) == "cpu_op"),
                     key=lambda e: (e.get("pid"), e.get("tid"), float(e["ts"]), -float(e.get("dur", 0))))
        stack: list[float] = []
        key = None
        for e in ops:
            if (e.get("pid"), e.get("tid")) != key:
                key, stack = (e.get("pid"), e.get("tid")), []
            while stack and stack[-1] <= float(e["ts"]):
                stack.pop()
            depth[id(e)] = len(stack) + 1
            stack.append(float(e["ts"]) + float(e.get("dur", 0)))
    keep = []
    for e in data.get("traceEvents", []):
        cat = category(e) if e.get("ph") == "X" else None
        if cat is not None:  # legacy categories written as the modern ones (CATEGORY_OF)
            if max_depth is not None and depth.get(id(e), 0) > max_depth:
                continue
            a = e.get("args") or {}
            args = {k: a[k] for k in KEEP_ARGS if k in a}
            if "External id" not in args and "external id" in a:  # PyTorch 1.8 spelled it in lower case
                args["External id"] = a["external id"]
            keep.append({"ph": "X", "cat": cat, "name": e["name"], "pid": e["pid"], "tid": e["tid"],
                         "ts": round(float(e["ts"]), decimals), "dur": round(float(e.get("dur", 0)), decimals),
                         "args": args})
        elif e.get("cat") == "ac2g" and e.get("ph") in ("s", "f"):
            keep.append({k: e[k] for k in ("ph", "cat", "name", "id", "pid", "tid", "ts", "bp") if k in e})
    joined = [e for e in keep if e.get("ph") == "X" and e["cat"] in GPU_CATS + RUNTIME_CATS]
    if all("correlation" in e["args"] for e in joined):
        keep = [e for e in keep if e.get("cat") != "ac2g"]
    return {"schemaVersion": data.get("schemaVersion", 1), "deviceProperties": data.get("deviceProperties", []),
            "traceEvents": keep}


# ---------------------------------------------------------------- intervals (vectorised)
def union(starts, ends) -> np.ndarray:
    """Merged intervals of ``[starts[i], ends[i])`` as an ``(n, 2)`` array, sorted; empty ones dropped."""
    s, e = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return np.empty((0, 2))
    order = np.lexsort((e, s))
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    out = np.empty((group[-1] + 1, 2))
    out[:, 0] = s[new]
    out[:, 1] = np.maximum.reduceat(e, np.flatnonzero(new))
    return out


def covered(iv: np.ndarray, a, b) -> np.ndarray:
    """Length of the merged intervals ``iv`` (from :func:`union`) inside each ``[a[j], b[j]]``."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not len(iv):
        return np.zeros(np.broadcast(a, b).shape)
    cum = np.concatenate([[0.0], np.cumsum(iv[:, 1] - iv[:, 0])])

    def upto(t):  # covered length in (-inf, t]
        k = np.searchsorted(iv[:, 0], t, side="right")  # intervals starting at or before t
        inside = np.clip(t - iv[np.maximum(k - 1, 0), 0], 0, None)
        part = np.where(k > 0, np.minimum(inside, iv[np.maximum(k - 1, 0), 1] - iv[np.maximum(k - 1, 0), 0]), 0.0)
        return cum[np.maximum(k - 1, 0)] * (k > 0) + part

    return upto(b) - upto(a)


def enclosing_parent(new_group, start, end) -> np.ndarray:
    """For events sorted by (thread, start, end descending), the position of each one's innermost
    enclosing event on its thread: the last earlier event of its group still open at its start
    (``end > start``), or -1. ``new_group[j]`` is True where event ``j`` starts a new thread group;
    times in any one unit (µs here).

    This is exactly the parent a stack walk finds (pop the top while it ended at or before the new
    start, then the top is the parent), partial overlaps included: the top left after popping is
    always the last earlier event that had not ended. Found for all events at once by binary lifting
    over a sparse table of running maxima of ``end``: O(n log n) array operations, no row loop."""
    s, e = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    n = len(s)
    if not n:
        return np.empty(0, dtype=np.int64)
    pos = np.arange(n)
    first = np.maximum.accumulate(np.where(np.asarray(new_group, dtype=bool), pos, 0))  # group's first position
    table = [e]  # table[k][i] = max(end[i : i + 2**k]); NaN propagates, and a NaN end never counts as ended
    while (1 << len(table)) <= n:
        h = 1 << (len(table) - 1)
        table.append(np.maximum(table[-1][:-h], table[-1][h:]))
    lo = pos.copy()  # smallest p found so far with every end in [p, j) at or before start[j]
    for k in range(len(table) - 1, -1, -1):
        step = lo - (1 << k)
        ok = step >= first
        ended = np.zeros(n, dtype=bool)
        ended[ok] = table[k][step[ok]] <= s[ok]
        lo = np.where(ended, step, lo)
    return np.where(lo > first, lo - 1, -1)


def _correlation(own: pd.Series, where: pd.DataFrame, flows: pd.DataFrame) -> pd.Series:
    """The correlation id (Int64, <NA> when none) of each event: its own ``correlation`` arg, else
    the id of the ac2g flow end (``flows``: ``pid, tid, ts3, id``) at the event's place (``where``:
    ``pid, tid, ts3``, the start rounded to 3 digits, as the flows are)."""
    corr = pd.to_numeric(own, errors="coerce").astype(float)
    if len(flows) and corr.isna().any():
        need = where[corr.isna().to_numpy()]
        via = need.merge(flows, on=["pid", "tid", "ts3"], how="left")["id"].to_numpy(dtype=float)
        corr.loc[need.index] = via
    return pd.Series(np.trunc(corr.to_numpy()), index=own.index).astype("Int64")


# ---------------------------------------------------------------- the trace
class Trace:
    """A parsed chrome trace (see module doc). ``events`` is a DataFrame of complete events with
    ``start_us``/``end_us`` relative to the first event."""

    def __init__(self, data: dict):
        if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
            raise TraceError(f"not a chrome trace: {_not_a_trace(data)}; expected a dict with a 'traceEvents' "
                             f"list (load_trace also reads a recorded evidence record)")
        self.data = data
        rows, ts3, flows = [], [], []
        for e in data["traceEvents"]:
            ph = e.get("ph")
            cat = category(e) if ph == "X" else None  # legacy names (Operator, Runtime, Kernel...) as modern ones
            if cat is not None:
                a = e.get("args") or {}
                ts = float(e["ts"])
                rows.append((e["name"], cat, e.get("pid"), e.get("tid"), ts, float(e.get("dur", 0)),
                             a.get("correlation"), a.get("External id", a.get("external id")), a.get("stream")))
                ts3.append(round(ts, 3))  # the key an ac2g flow names its ends by
            elif e.get("cat") == "ac2g" and ph in ("s", "f"):
                flows.append((e.get("id"), e["ph"], e.get("pid"), e.get("tid"), round(float(e["ts"]), 3)))
        ev = pd.DataFrame(rows, columns=["name", "cat", "pid", "tid", "ts", "dur", "correlation", "external_id", "stream"])
        self.t0 = float(ev["ts"].min()) if len(ev) else 0.0
        ev["start_us"] = ev["ts"] - self.t0
        ev["end_us"] = ev["start_us"] + ev["dur"]
        self.events = ev
        self._ts3 = pd.Series(ts3, index=ev.index, dtype=float)
        self._flow_ends = pd.DataFrame(flows, columns=["id", "ph", "pid", "tid", "ts3"])
        self._cache: dict[Any, Any] = {}
        self._attribute()

    # -- attribution: which CPU events enclose the call that launched each GPU event
    def _flow_ids(self, ph: str) -> pd.DataFrame:
        """Flow ends of kind ``ph`` ("s" on the CPU, "f" on the GPU) as ``pid, tid, ts3 -> id``: per id
        its last end of that kind; where two ids end at one place, the id first seen later wins."""
        f = self._flow_ends
        f = f.assign(first=pd.factorize(f["id"], use_na_sentinel=False)[0])  # ids numbered as first seen
        f = f[f["ph"] == ph].drop_duplicates("id", keep="last").sort_values("first", kind="stable")
        f = f.drop_duplicates(["pid", "tid", "ts3"], keep="last")
        return f[["pid", "tid", "ts3", "id"]].astype({"id": float})

    def _attribute(self) -> None:
        """Fill ``enclosing`` (runtime call row -> rows of the ops/ranges enclosing it on its thread,
        outermost first), ``self_us`` (CPU event row -> its time minus the overlap of its direct
        children, µs) and ``launcher`` (GPU event row -> the runtime call that launched it), all from
        array operations over the events (see :func:`enclosing_parent`)."""
        ev = self.events
        cpu = ev[ev["cat"].isin(CPU_CATS)].sort_values(["pid", "tid", "start_us", "end_us"], ascending=[True, True, True, False])
        rows = cpu.index.to_numpy()
        s, e, dur = (cpu[c].to_numpy(dtype=float) for c in ("start_us", "end_us", "dur"))
        pid, tid = cpu["pid"].to_numpy(), cpu["tid"].to_numpy()
        new = np.ones(len(cpu), dtype=bool)
        new[1:] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
        parent = enclosing_parent(new, s, e)
        # self time: each event minus what each direct child covers of it, subtracted child by child in
        # start order (np.subtract.at is unbuffered and in order: the same float rounding as a walk)
        has = parent >= 0
        own = dur.copy()
        child, up = dur[has], e[parent[has]] - s[has]
        np.subtract.at(own, parent[has], np.where(up < child, up, child))
        self.self_us: dict[int, float] = dict(zip(rows.tolist(), own.tolist(), strict=True))
        # enclosing chains of the runtime calls: parent, grandparent... (one array step per nesting level)
        rt = np.flatnonzero(cpu["cat"].isin(RUNTIME_CATS).to_numpy())
        levels, cur = [], parent[rt]
        while (cur >= 0).any():
            levels.append(cur)
            cur = np.where(cur >= 0, parent[np.maximum(cur, 0)], -1)
        chain = np.stack(levels[::-1], axis=1) if levels else np.empty((len(rt), 0), dtype=np.int64)
        ok = chain >= 0  # outermost first: the -1s of shallower chains come first in each row
        flat = rows[chain[ok]].tolist()
        ends = np.cumsum(ok.sum(axis=1)).tolist()
        spans = itertools.pairwise([0, *ends])  # row i's chain is flat[ends[i - 1]:ends[i]]
        self.enclosing: dict[int, list[int]] = dict(zip(rows[rt].tolist(), (flat[a:b] for a, b in spans), strict=True))
        # launches: the runtime call and the GPU event share a correlation id (own arg, else via a flow)
        calls = cpu.iloc[rt]
        corr = _correlation(calls["correlation"], calls[["pid", "tid"]].assign(ts3=self._ts3), self._flow_ids("s"))
        by_corr = pd.Series(calls.index, index=corr).loc[lambda x: x.index.notna()]
        by_corr = by_corr[~by_corr.index.duplicated(keep="last")]
        gpu = ev[ev["cat"].isin(GPU_CATS)]
        gcorr = _correlation(gpu["correlation"], gpu[["pid", "tid"]].assign(ts3=self._ts3), self._flow_ids("f"))
        hit = gcorr.notna() & gcorr.isin(by_corr.index)
        self.launcher = dict(zip(gpu.index[hit.to_numpy()].tolist(),
                                 by_corr.reindex(gcorr[hit].to_numpy()).to_numpy().tolist(), strict=True))  # GPU row -> runtime row

    # -- tables
    # -- the one attribution rule: GPU work belongs to the profiled step whose CPU range holds its launch call
    def steps(self) -> pd.DataFrame:
        """The profiled steps (``ProfilerStep#N`` ranges), in order: ``step`` (0, 1, ...), ``name``, ``pid``,
        ``cpu_start_us``, ``cpu_end_us``. Empty for a trace taken without a profiler schedule."""
        return self._once("steps", self._steps_now).copy()

    def _steps_now(self) -> pd.DataFrame:
        ev = self.events
        st = ev[(ev["cat"] == "user_annotation") & ev["name"].str.startswith("ProfilerStep")].sort_values("start_us")
        return pd.DataFrame({"step": range(len(st)), "name": st["name"].to_numpy(), "pid": st["pid"].to_numpy(),
                             "cpu_start_us": st["start_us"].to_numpy(dtype=float),
                             "cpu_end_us": st["end_us"].to_numpy(dtype=float)})

    def gpu_step(self) -> pd.Series:
        """THE attribution rule of the series (docs/CONTRACTS.md): for every kernel, memcpy and memset, the
        profiled step that launched it, i.e. the ``ProfilerStep`` range (same process, any thread) whose CPU
        time holds the runtime call that launched it (matched by ``correlation`` id), never the step its
        start time happens to fall in: the CPU runs ahead of the GPU, so a step's kernels often run after
        its range has closed, and kernels left queued by warm-up steps run inside the profiled window.
        ``-1`` marks work launched outside every profiled step (warm-up leftovers whose launch calls were
        not recorded, launches before the first step). Indexed by the event rows of :meth:`gpu_events`."""
        return self._once("gpu_step", self._gpu_step_now).copy()

    def _gpu_step_now(self) -> pd.Series:
        ev = self.events
        rows = ev.index[ev["cat"].isin(GPU_CATS)]
        out = pd.Series(-1, index=rows, dtype="int64")
        st = self._once("steps", self._steps_now)
        launched = [g for g in rows if g in self.launcher]
        if st.empty or not launched:
            return out
        rt = [self.launcher[g] for g in launched]
        t = ev.loc[rt, "start_us"].to_numpy(dtype=float)
        pid = ev.loc[rt, "pid"].to_numpy()
        k = np.searchsorted(st["cpu_start_us"].to_numpy(), t, side="right") - 1
        ok = k >= 0
        kk = np.where(ok, k, 0)
        ok &= (t < st["cpu_end_us"].to_numpy()[kk]) & (st["pid"].to_numpy()[kk] == pid)
        out.loc[launched] = np.where(ok, kk, -1)
        return out

    def steady_window(self) -> tuple[float, float, int] | None:
        """``(start_us, end_us, periods)``: the steady-state window the series measures a step on, from the
        moment the first profiled step's GPU work finished to the moment the last one's did, ``periods`` =
        steps - 1 whole periods (each step is charged its own wait before its work too, which a
        first-start-to-last-end span would leave out for the first step). None when fewer than two profiled
        steps launched GPU work."""
        def make():
            ends = []
            g = self.events[self.events["cat"].isin(GPU_CATS)]
            step = self._once("gpu_step", self._gpu_step_now).reindex(g.index)
            for k in range(len(self._once("steps", self._steps_now))):
                mine = g[step.to_numpy() == k]
                if mine.empty:
                    return None
                ends.append(float(mine["end_us"].max()))
            if len(ends) < 2 or ends[-1] <= ends[0]:
                return None
            return ends[0], ends[-1], len(ends) - 1
        return self._once("steady_window", make)

    @property
    def has_steps(self) -> bool:
        """True when the trace has ``ProfilerStep`` ranges (a profiler schedule was used)."""
        return not self._once("steps", self._steps_now).empty

    def _scoped(self, scope: str) -> pd.DataFrame:
        """GPU events in ``scope``: ``'steps'`` keeps the work the profiled steps launched (all of it when the
        trace has no steps), ``'all'`` keeps every GPU event of the trace."""
        if scope not in ("steps", "all"):
            raise ValueError(f"scope={scope!r}; expected 'steps' (work the profiled steps launched) or 'all'")
        g = self.events[self.events["cat"].isin(GPU_CATS)]
        if scope == "all" or not self.has_steps:
            return g
        return g[self._once("gpu_step", self._gpu_step_now).reindex(g.index).to_numpy() >= 0]

    def leftover(self) -> dict:
        """GPU work in the trace that no profiled step launched (:meth:`gpu_step` ``-1``): ``events``,
        ``kernels``, ``device_us`` (summed durations). Zero for a trace without steps."""
        def make():
            g = self.events[self.events["cat"].isin(GPU_CATS)]
            if not self.has_steps:
                return {"events": 0, "kernels": 0, "device_us": 0.0}
            out = g[self._once("gpu_step", self._gpu_step_now).reindex(g.index).to_numpy() < 0]
            return {"events": len(out), "kernels": int((out["cat"] == "kernel").sum()),
                    "device_us": float(out["dur"].sum())}
        return dict(self._once("leftover", make))

    # -- tables
    def gpu_events(self, scope: str = "all"):
        """Kernels, memcpys and memsets in time order (``stream`` is the CUDA stream; ``step`` the profiled
        step that launched each, -1 for none: :meth:`gpu_step`). ``scope='steps'`` keeps only the work the
        profiled steps launched."""
        g = self._scoped(scope).sort_values("start_us")
        out = g[["name", "cat", "pid", "stream", "start_us", "end_us", "dur"]].rename(columns={"dur": "dur_us"})
        return out.assign(step=self._once("gpu_step", self._gpu_step_now).reindex(g.index).to_numpy())

    def kernels(self, top: int | None = None, scope: str = "steps"):
        """Kernels by total device time: ``name, count, total_us, mean_us, pct`` (of the kernel time in scope).
        By default only the kernels the profiled steps launched (the attribution rule, :meth:`gpu_step`), so
        warm-up leftovers never make a kernel look hotter than it is; ``attrs['leftover']`` says what was left
        out. ``scope='all'`` counts every kernel in the trace."""
        k = self._scoped(scope)
        k = k[k["cat"] == "kernel"]
        if k.empty:
            out = pd.DataFrame(columns=["name", "count", "total_us", "mean_us", "pct"])
            out.attrs["note"] = NO_GPU_NOTE
            return out
        g = k.groupby("name")["dur"].agg(count="count", total_us="sum", mean_us="mean").reset_index()
        g["pct"] = 100 * g["total_us"] / g["total_us"].sum()
        g = g.sort_values(["total_us", "name"], ascending=[False, True]).reset_index(drop=True)
        g = g.head(top) if top else g
        g.attrs["scope"] = scope if self.has_steps else "all"
        g.attrs["leftover"] = self.leftover() if scope == "steps" else {"events": 0, "kernels": 0, "device_us": 0.0}
        return g

    def _launched(self, cats: tuple[str, ...]) -> tuple[dict[int, float], dict[int, int]]:
        """CPU event row -> (device µs, number) of GPU events it launched. An op owns the launches of
        calls nested in it on its thread; a range owns every launch made while it was open on any
        thread of its process (autograd runs backward on a thread of its own)."""
        return self._once(("launched", cats), lambda: self._launched_now(cats))

    def _launched_now(self, cats: tuple[str, ...]) -> tuple[dict[int, float], dict[int, int]]:
        ev = self.events
        parts = []
        if self.launcher:
            launch = pd.DataFrame({"gpu": list(self.launcher), "rt": list(self.launcher.values())})
            launch["dur"] = ev.loc[launch["gpu"], "dur"].to_numpy()
            if "cpu_op" in cats:  # every op enclosing the launch call on its thread
                enc = launch.assign(op=launch["rt"].map(lambda r: self.enclosing.get(r, []))).explode("op")
                parts.append(enc.dropna(subset=["op"])[["op", "dur"]])
            if "user_annotation" in cats:  # every range open at the launch call, any thread of its process
                launch["t"] = ev.loc[launch["rt"], "start_us"].to_numpy()
                launch["pid"] = ev.loc[launch["rt"], "pid"].to_numpy()
                rng = ev[ev["cat"] == "user_annotation"]
                for pid, calls in launch.sort_values("t", kind="stable").groupby("pid", sort=False):
                    t, cum = calls["t"].to_numpy(), np.concatenate([[0.0], np.cumsum(calls["dur"].to_numpy())])
                    mine = rng[rng["pid"] == pid]
                    lo = np.searchsorted(t, mine["start_us"].to_numpy() - 1e-9, side="right")
                    hi = np.searchsorted(t, mine["end_us"].to_numpy(), side="right")
                    parts.append(pd.DataFrame({"op": mine.index, "dur": cum[hi] - cum[lo], "n": hi - lo}))
        if not parts:
            return {}, {}
        both = pd.concat(parts, ignore_index=True)
        both["n"] = both["n"].fillna(1) if "n" in both else 1
        agg = both.groupby("op").agg(dev=("dur", "sum"), num=("n", "sum"))
        agg = agg[agg["num"] > 0]
        return {int(i): float(d) for i, d in agg["dev"].items()}, {int(i): int(n) for i, n in agg["num"].items()}

    def _table(self, cats: tuple[str, ...], value: str):
        ev = self.events
        sel = ev[ev["cat"].isin(cats)]
        dev, num = self._launched(cats)
        df = pd.DataFrame({"name": sel["name"], "cpu_us": sel["dur"],
                           "self_cpu_us": [self.self_us.get(i, 0.0) for i in sel.index],
                           "device_us": [dev.get(i, 0.0) for i in sel.index],
                           "launches": [num.get(i, 0) for i in sel.index]})
        out = df.groupby("name").agg(count=("cpu_us", "count"), cpu_total_us=("cpu_us", "sum"),
                                     self_cpu_us=("self_cpu_us", "sum"), device_us=("device_us", "sum"),
                                     launches=("launches", "sum")).reset_index()
        return out.sort_values([value, "name"], ascending=[False, True]).reset_index(drop=True)

    def ops(self, top: int | None = None, by: str = "auto"):
        """aten ops: ``name, count, cpu_total_us, self_cpu_us, device_us, launches`` sorted by device time
        on a GPU trace, CPU time otherwise (``by`` may name the column)."""
        by = ("device_us" if self.has_gpu else "cpu_total_us") if by == "auto" else by
        t = self._table(("cpu_op",), by)
        return t.head(top) if top else t

    def ranges(self):
        """record_function ranges (``ProfilerStep#N`` included): count, CPU time, and the device time and
        number of kernels launched inside them."""
        return self._table(("user_annotation",), "cpu_total_us")

    @property
    def has_gpu(self) -> bool:
        return bool(self.events["cat"].isin(GPU_CATS).any())

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` computed the first time ``key`` is asked for, then kept on this trace (which does not change):
        for an analysis outside this class that is asked for the same trace again (``key`` names the function, e.g.
        ``("distributed.comm_events",)``). The value is shared: a caller hands out a copy, never this object."""
        return self._once(("memo", key), make)

    # -- gaps
    def _once(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` computed the first time ``key`` is asked for, then kept: the trace does not change."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def _busy(self, scope: str = "steps") -> np.ndarray:
        def make():
            g = self._scoped(scope)
            return union(g["start_us"], g["end_us"])
        return self._once(("busy", scope), make)

    def busy(self, scope: str = "steps") -> list[tuple[float, float]]:
        """Merged intervals (µs) when the GPU ran a kernel, memcpy or memset on any stream, of the work the
        profiled steps launched (``scope='all'``: every GPU event of the trace)."""
        return [(float(x), float(y)) for x, y in self._busy(scope)]

    def causes(self) -> pd.DataFrame:
        """The CPU events that can explain GPU idle time, each with its ``cause`` (see module doc) and
        the rank of that cause in :data:`CAUSES` (an earlier cause claims a moment first). Step ranges
        and other runtime calls (event records...) are left out: a step covers everything."""
        return self._once("causes", self._causes).copy()

    def _causes(self) -> pd.DataFrame:
        ev = self.events
        cpu = ev[ev["cat"].isin(CPU_CATS)]
        name, runtime = cpu["name"], cpu["cat"].isin(RUNTIME_CATS)
        cause = np.select(
            [name.isin(SYNC_NAMES) | name.str.contains("Synchronize", regex=False),
             runtime & name.str.startswith(("cudaMemcpy", "cuMemcpy")),
             runtime & name.str.contains("Launch", regex=False),
             name.str.startswith("ProfilerStep") | runtime],
            ["sync", "memcpy", "launch", ""], default="host")
        out = cpu.assign(cause=cause)
        out = out[out["cause"] != ""]
        return out.assign(rank=out["cause"].map({c: i for i, c in enumerate(CAUSES)}))

    def idle_gaps(self, min_gap_us: float = 50.0):
        """GPU idle gaps longer than ``min_gap_us`` between consecutive GPU events, each with the CPU
        time charged to each cause (see module doc), the dominant ``cause``, and the ranges and top
        ops overlapping it. Empty (with ``attrs['note']``) on a CPU-only trace. Computed once per
        threshold: the trace does not change."""
        key = float(min_gap_us)
        return self._once(("idle_gaps", key), lambda: self._idle_gaps(key)).copy()

    def _idle_gaps(self, min_gap_us: float):
        cols = ["start_us", "end_us", "gap_us", "cause", *[f"{c}_us" for c in CAUSES], "ranges", "ops"]
        busy = self._busy()
        if not len(busy):
            out = pd.DataFrame(columns=cols)
            out.attrs["note"] = NO_GPU_NOTE
            return out
        g0, g1 = busy[:-1, 1], busy[1:, 0]
        keep = (g1 - g0) > min_gap_us
        g0, g1 = g0[keep], g1[keep]
        gaps = pd.DataFrame({"start_us": g0, "end_us": g1, "gap_us": g1 - g0})
        if gaps.empty:
            return pd.DataFrame(columns=cols)
        ev = self._once("causes", self._causes)
        claimed = np.zeros(len(gaps))
        for rank, c in enumerate(CAUSES[:4]):  # each cause gets what earlier causes left: |U_k ∩ gap| - |U_k-1 ∩ gap|
            upto = covered(self._once(("causes up to", rank), lambda rank=rank: union(
                *(lambda sel: (sel["start_us"], sel["end_us"]))(ev[ev["rank"] <= rank]))), g0, g1)
            gaps[f"{c}_us"] = upto - claimed
            claimed = upto
        gaps["unaccounted_us"] = gaps["gap_us"] - claimed
        gaps["cause"] = gaps[[f"{c}_us" for c in CAUSES]].to_numpy().argmax(axis=1)
        gaps["cause"] = [CAUSES[i] for i in gaps["cause"]]
        gaps["ranges"], gaps["ops"] = self._names_in_gaps(ev, g0, g1)
        return gaps[cols]

    @staticmethod
    def _names_in_gaps(ev: pd.DataFrame, g0: np.ndarray, g1: np.ndarray) -> tuple[list[str], list[str]]:
        """Per gap: the ranges (all) and ops (top 3) overlapping it, by overlap, largest first; ties in
        the order the events come (cause, then start). All (gap, event) overlaps at once, then one
        group-by over them."""
        ev = ev[ev["cat"].isin(("user_annotation", "cpu_op"))].sort_values(
            ["rank", "start_us", "end_us", "name", "cat"], kind="stable")
        s, e = ev["start_us"].to_numpy(), ev["end_us"].to_numpy()
        g0, g1 = np.asarray(g0, dtype=float), np.asarray(g1, dtype=float)
        gi, ei = [], []
        block = max(1, 4_000_000 // max(len(s), 1))  # gaps per block: a gap x event matrix of at most 4M cells
        for lo in range(0, len(g0), block):
            g, k = np.nonzero((s[None, :] < g1[lo:lo + block, None]) & (e[None, :] > g0[lo:lo + block, None]))
            gi.append(g + lo)
            ei.append(k)
        gi, ei = np.concatenate(gi or [np.empty(0, dtype=np.int64)]), np.concatenate(ei or [np.empty(0, dtype=np.int64)])
        pairs = pd.DataFrame({"gap": gi, "cat": ev["cat"].to_numpy()[ei], "name": ev["name"].to_numpy()[ei],
                              "overlap": np.minimum(e[ei], g1[gi]) - np.maximum(s[ei], g0[gi])})  # in gap, then event order
        per = pairs.groupby(["gap", "cat", "name"], sort=False)["overlap"].sum().reset_index()  # names as first met
        per = per.iloc[np.lexsort((np.arange(len(per)), -per["overlap"].to_numpy(), per["gap"].to_numpy()))]
        out = []
        for cat, top in (("user_annotation", None), ("cpu_op", 3)):
            mine = per[per["cat"] == cat]
            if top is not None:
                mine = mine[mine.groupby("gap").cumcount() < top]
            joined = mine.groupby("gap")["name"].agg(", ".join)
            out.append(joined.reindex(range(len(g0)), fill_value="").tolist())
        return out[0], out[1]

    def summary(self, min_gap_us: float = 50.0) -> dict:
        """JSON-shaped summary: span, GPU busy time and utilisation, step times, idle time by cause. GPU
        quantities cover the work the profiled steps launched (:meth:`gpu_step`), over :meth:`steady_window`
        (whole periods of the steady state; without two steps of GPU work, from the work's first start to its
        last end): ``window_us``, ``gpu_busy_us`` (merged busy time inside it), ``gpu_utilization`` their ratio;
        ``leftover`` is the GPU work left out (no profiled step launched it); ``cpu_window_us`` the span of the
        step ranges on the CPU, which runs ahead. Computed once per threshold."""
        return copy.deepcopy(self._once(("summary", float(min_gap_us)), lambda: self._summary(min_gap_us)))

    def _summary(self, min_gap_us: float) -> dict:
        ev = self.events
        st = self._once("steps", self._steps_now)
        busy = self.busy()
        out = {"span_us": float(ev["end_us"].max()) if len(ev) else 0.0, "has_gpu": self.has_gpu,
               "steps": len(st),
               "mean_step_us": float((st["cpu_end_us"] - st["cpu_start_us"]).mean()) if len(st) else None,
               "kernels": int((self._scoped("steps")["cat"] == "kernel").sum()), "leftover": self.leftover()}
        if not busy:
            out["note"] = NO_GPU_NOTE
            return out
        sw = self.steady_window()
        window = (sw[0], sw[1]) if sw else (busy[0][0], busy[-1][1])
        inside = float(covered(np.asarray(busy), window[0], window[1]))
        gaps = self.idle_gaps(min_gap_us)
        out.update({"window_us": window[1] - window[0], "gpu_busy_us": inside,
                    "gpu_utilization": inside / (window[1] - window[0]) if window[1] > window[0] else None,
                    "cpu_window_us": float(st["cpu_end_us"].max() - st["cpu_start_us"].min()) if len(st) else None,
                    "idle_gaps": len(gaps), "idle_gap_us": float(gaps["gap_us"].sum()),
                    "idle_by_cause_us": {c: float(gaps[f"{c}_us"].sum()) for c in CAUSES}})
        return out

    def export_chrome_trace(self, path: str | Path) -> Path:
        """Write the trace as chrome-trace JSON (open it in Perfetto or chrome://tracing). A recorded trace is
        trimmed of its metadata events, so rows without a name get one: ``GPU N`` for a process whose events carry a
        CUDA ``stream``, ``stream S`` for each of its rows (Kineto draws one row per stream), ``CPU`` and ``thread T``
        for the others; the events themselves are written as recorded."""
        p = Path(path)
        events = self.data.get("traceEvents", [])
        named = {(e.get("name"), e.get("pid"), e.get("tid") if e.get("name") == "thread_name" else None)
                 for e in events if e.get("ph") == "M"}
        rows = {(e["pid"], e["tid"], "stream" in (e.get("args") or {}))
                for e in events if e.get("ph") == "X" and "pid" in e and "tid" in e}
        meta = []
        for pid, tid, gpu in sorted(rows, key=str):
            for kind, key, name in (("process_name", None, f"GPU {pid}" if gpu else "CPU"),
                                    ("thread_name", tid, f"stream {tid}" if gpu else f"thread {tid}")):
                if (kind, pid, key) not in named:
                    named.add((kind, pid, key))
                    meta.append({"ph": "M", "name": kind, "pid": pid, "args": {"name": name},
                                 **({"tid": tid} if key is not None else {})})
        p.write_text(json.dumps({**self.data, "traceEvents": meta + events} if meta else self.data))
        return p


# ---------------------------------------------------------------- functions over a Trace
def step_gpu_work(tr: Trace) -> pd.DataFrame:
    """Per profiled step, the GPU work it launched (the attribution rule, :meth:`Trace.gpu_step`): ``step``
    (the range's name), ``cpu_start_us``/``cpu_end_us`` (its CPU range), ``gpu_ops`` (kernels, memcpys and
    memsets: a whole number by construction), ``kernels``, ``memcpys``, ``launch_calls`` (the CPU's launch calls
    inside the step's range, :data:`LAUNCH_CALLS`: a CUDA graph replay is one), ``gpu_work_us`` (summed durations),
    ``gpu_busy_us`` (their merged time), ``gpu_start_us``/``gpu_end_us`` (first start, last end; NaN for a
    step that launched nothing). GPU work left queued by steps before the window is charged to none."""
    return tr.memo(("step_gpu_work",), lambda: _step_gpu_work(tr)).copy()


def _step_gpu_work(tr: Trace) -> pd.DataFrame:
    st = tr.steps()
    if st.empty:
        raise ValueError("trace has no ProfilerStep ranges; expected a trace taken with a profiler schedule "
                         "(torch.profiler.schedule, as torch_trace.profile does)")
    g = tr.gpu_events(scope="all")
    ev = tr.events
    calls = ev[ev["cat"].isin(RUNTIME_CATS) & ev["name"].isin(LAUNCH_CALLS)]
    rows = []
    for s in st.itertuples(index=False):
        mine = g[g["step"] == s.step]
        iv = union(mine["start_us"], mine["end_us"])
        rows.append({"step": s.name, "cpu_start_us": s.cpu_start_us, "cpu_end_us": s.cpu_end_us,
                     "gpu_ops": len(mine), "kernels": int((mine["cat"] == "kernel").sum()),
                     "memcpys": int((mine["cat"] == "gpu_memcpy").sum()),
                     "gpu_work_us": float(mine["dur_us"].sum()), "gpu_busy_us": float((iv[:, 1] - iv[:, 0]).sum()),
                     "launch_calls": int(((calls["start_us"] >= s.cpu_start_us) & (calls["start_us"] < s.cpu_end_us)
                                          & (calls["pid"] == s.pid)).sum()),
                     "gpu_start_us": float(mine["start_us"].min()) if len(mine) else float("nan"),
                     "gpu_end_us": float(mine["end_us"].max()) if len(mine) else float("nan")})
    return pd.DataFrame(rows)


def idle_by_cause(tr: Trace) -> pd.DataFrame:
    """GPU idle time (gaps over 50 µs) charged to what the CPU was doing: ``cause, idle_us, share``,
    largest first (ties: by name)."""
    gaps = tr.idle_gaps()
    if gaps.empty:
        return pd.DataFrame({"cause": list(CAUSES), "idle_us": [0.0] * len(CAUSES), "share": [0.0] * len(CAUSES)})
    idle = {c: float(gaps[f"{c}_us"].sum()) for c in CAUSES}
    total = sum(idle.values())
    out = pd.DataFrame({"cause": list(idle), "idle_us": list(idle.values()),
                        "share": [x / total if total else 0.0 for x in idle.values()]})
    return out.sort_values(["idle_us", "cause"], ascending=[False, True]).reset_index(drop=True)
