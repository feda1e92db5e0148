"""Is a stream program safe, and what period would it run at? Lab 05's edit-and-measure exercise judges a learner's
``prefetch`` from the log :mod:`infralens_lab.measure.stream_record` writes (one dict per op, in issue order:
``kind`` copy / kernel / record / wait / sync, ``stream``, ``step``, ``slot``, ``batch``, ``event``).

CUDA's ordering rules, as the log is read here: work on one stream runs in issue order; ``event.record(s)`` marks
everything issued to ``s`` so far; ``s.wait_event(e)`` makes later work on ``s`` wait for what ``e`` marked when the
wait was issued (an event never recorded waits for nothing); a host synchronize waits for everything issued. One op
*happens before* another when these rules order it first (vector clocks, one counter per stream).

* :func:`races`: a kernel reading a buffer that its copy is not ordered before (read before written), and a copy
  into a buffer that an earlier kernel reading it is not ordered before (overwritten while read); each named by
  step, buffer and stream, with the wait that would order it.
* :func:`model` gives the period a two-engine model predicts: copies on the one copy engine, kernels on the SMs,
  each op starting when its stream, its waits and its engine allow, in issue order, with per-step copy and kernel
  times handed in (the recorded ones). It is a **model**, never a measurement: it knows no clock, no host, no
  contention beyond one op per engine.
"""
from __future__ import annotations

import itertools
import math

import pandas as pd

from . import intervals, overlap_tables

KINDS = ("copy", "kernel", "record", "wait", "sync")


def _check_ops(ops) -> list[dict]:
    if not isinstance(ops, list | tuple):
        raise ValueError(f"ops is {type(ops).__name__}; expected a list of op dicts (measure.stream_record's log)")
    for k, op in enumerate(ops):
        if not isinstance(op, dict) or op.get("kind") not in KINDS or not isinstance(op.get("stream"), int):
            raise ValueError(f"ops[{k}] is {op!r}; expected a dict with kind in {KINDS} and an int stream")
        if op["kind"] in ("record", "wait") and not isinstance(op.get("event"), int):
            raise ValueError(f"ops[{k}] is a {op['kind']} without an int event: {op!r}")
    return list(ops)


def clocks(ops) -> list[dict | None]:
    """Per op, its vector clock (``{stream: ops of that stream it waits for, itself included}``) for copies and
    kernels; None for the other kinds. ``a`` happens before ``b`` when ``clock_b[stream_a] >= clock_a[stream_a]``."""
    vc: dict[int, dict[int, int]] = {}
    marked: dict[int, dict[int, int]] = {}
    out: list[dict | None] = []
    for op in _check_ops(ops):
        s, mine = op["stream"], vc.setdefault(op["stream"], {})
        if op["kind"] == "record":
            marked[op["event"]] = dict(mine)
        elif op["kind"] == "wait":
            for t, n in marked.get(op["event"], {}).items():
                mine[t] = max(mine.get(t, 0), n)
        elif op["kind"] == "sync":  # the host waits for every stream: later work on any stream comes after all of it
            every = {t: max(c.get(t, 0) for c in vc.values()) for t in {t for c in vc.values() for t in c}}
            for c in vc.values():
                c.update(every)
        if op["kind"] in ("copy", "kernel"):
            mine[s] = mine.get(s, 0) + 1
            out.append(dict(mine))
        else:
            out.append(None)
    return out


def _before(a: dict, ca: dict, cb: dict) -> bool:
    return cb.get(a["stream"], 0) >= ca[a["stream"]]


def races(ops) -> list[str]:
    """Sentences, one per kind of hazard found (the first case of each, and how many there were): a kernel reading a
    buffer its copy is not ordered before, a copy into a buffer an earlier kernel reading it is not ordered before,
    two copies into one buffer not ordered. Empty when the program is safe under CUDA's ordering rules."""
    ops = _check_ops(ops)
    vcs = clocks(ops)
    found: dict[str, dict[int, str]] = {}  # hazard kind -> {op index: sentence}: one case per op, the first kept
    for j, b in enumerate(ops):
        if b["kind"] not in ("copy", "kernel") or b.get("slot") is None:
            continue
        for i in range(j - 1, -1, -1):
            a = ops[i]
            if a["kind"] not in ("copy", "kernel") or a.get("slot") != b["slot"] or a["kind"] == b["kind"] == "kernel":
                continue
            if not _before(a, vcs[i], vcs[j]):
                kind, text = _hazard(a, b)
                found.setdefault(kind, {}).setdefault(j, text)
            if a["kind"] == "copy" and b["kind"] == "kernel":
                break  # a kernel depends on the last copy into its buffer only
    return [next(iter(t.values())) + (f" ({len(t)} such ops)" if len(t) > 1 else "") for t in found.values()]


def _hazard(a: dict, b: dict) -> tuple[str, str]:
    if a["kind"] == "copy" and b["kind"] == "kernel":
        return "read", (f"race: step {b['step']}'s matmuls ({stream_name(b['stream'])} stream) read buffer {b['slot']} without "
                        f"waiting for its copy (batch {a['batch']}, {stream_name(a['stream'])} stream); record `step.copied[slot]` on "
                        "the copy's stream right after the copy: the step waits on that event")
    if a["kind"] == "kernel":
        return "overwrite", (f"race: the copy of batch {b['batch']} into buffer {b['slot']} ({stream_name(b['stream'])} stream) may "
                             f"overwrite it while step {a['step']}'s matmuls ({stream_name(a['stream'])} stream) still read it; make the "
                             "copy's stream wait for `step.freed[slot]` before the copy")
    return "copies", (f"race: two copies into buffer {b['slot']} ({stream_name(a['stream'])} and {stream_name(b['stream'])} streams) are not "
                      "ordered; issue them on one stream or order them with an event")


def streams_of(ops) -> dict[str, list[int]]:
    """``{'copy': [...], 'kernel': [...]}``: the streams the copies into a buffer and the kernels ran on."""
    ops = _check_ops(ops)
    return {k: sorted({o["stream"] for o in ops if o["kind"] == k and (k == "kernel" or o.get("slot") is not None)})
            for k in ("copy", "kernel")}


def model(ops, copy_ms: float, kernel_ms: float, skip: int = 2) -> dict:
    """The two-engine model of a program (see the module doc): each copy lasts ``copy_ms``; each step's kernels
    share ``kernel_ms`` equally. Returns ``period_ms`` (mean spacing of the steps' last kernel ends, after ``skip``
    steps), ``hidden_fraction`` (copy time under a kernel, :func:`~infralens_lab.analysis.intervals.hidden`, over
    the same steps), and the op ``intervals`` ``[(kind, stream, start_ms, end_ms)]``. ValueError for times that are
    not positive or too few steps. A model: it says what the order allows, not what a GPU did."""
    for name, v in (("copy_ms", copy_ms), ("kernel_ms", kernel_ms)):
        if not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{name}={v!r}; expected a positive time in ms (a recorded per-step time)")
    ops, vcs = _check_ops(ops), clocks(ops)
    per_step: dict[int, int] = {}
    for o in ops:
        if o["kind"] == "kernel":
            per_step[o["step"]] = per_step.get(o["step"], 0) + 1
    ends: dict[int, list[float]] = {}  # stream -> end time of its n-th op
    engine = {"copy": 0.0, "kernel": 0.0}
    iv, last = [], {}
    for o, c in zip(ops, vcs, strict=True):
        if c is None:
            continue
        deps = [engine[o["kind"]]]
        for t, n in c.items():  # its stream's previous op, and the n-th op of each stream it waits for
            k = n - 2 if t == o["stream"] else n - 1
            if k >= 0:
                deps.append(ends[t][k])
        start = max(deps)
        end = start + (copy_ms if o["kind"] == "copy" else kernel_ms / per_step[o["step"]])
        ends.setdefault(o["stream"], []).append(end)
        engine[o["kind"]] = end
        iv.append((o["kind"], o["stream"], o["step"], start, end))
        if o["kind"] == "kernel":
            last[o["step"]] = end
    done = [last[s] for s in sorted(last) if s >= 0]
    if len(done) - skip < 2:
        raise ValueError(f"kernels in {len(done)} steps; expected at least {skip + 2} (skip={skip}, then two ends)")
    window = (done[skip - 1] if skip else 0.0, done[-1])
    cp = [(a, b) for k, _, s, a, b in iv if k == "copy" and b > window[0] and a < window[1]]
    kn = [(a, b) for k, _, s, a, b in iv if k == "kernel"]
    total, hid = intervals.hidden(cp, kn)
    spacing = [b - a for a, b in itertools.pairwise(done[skip:])]
    return {"period_ms": sum(spacing) / len(spacing), "hidden_fraction": hid / total if total else None,
            "intervals": [(k, st, a, b) for k, st, _, a, b in iv]}


STREAM_NAMES = {0: "compute", 1: "side"}  # the recorder's default stream, then the first one made: the step's side stream


def stream_name(sid: int) -> str:
    """How a recorded stream is named to the learner: ``compute``, ``side`` (``step.side``), or ``new N``."""
    return STREAM_NAMES.get(sid, f"new {sid}")


def judge(replay: dict, copy_ms: float, kernel_ms: float) -> dict:
    """One row for a replayed prefetch (:func:`~infralens_lab.measure.stream_record.replay_prefetch`'s dict): the
    streams of its copies and kernels, ``order`` (``safe``, ``race`` or ``wrong data``), ``problems`` (sentences)
    and, for a safe order only, the :func:`model`'s ``period_ms`` and ``hidden_fraction``."""
    if not isinstance(replay, dict) or "ops" not in replay or "wrong" not in replay:
        raise ValueError(f"replay is {type(replay).__name__}; expected replay_prefetch()'s dict with 'ops' and 'wrong'")
    if replay["wrong"]:
        return {"order": "wrong data", "problems": [replay["wrong"]], "period_ms": None, "hidden_fraction": None}
    st, bad = streams_of(replay["ops"]), races(replay["ops"])
    row = {"copy_streams": ", ".join(map(stream_name, st["copy"])), "kernel_streams": ", ".join(map(stream_name, st["kernel"])),
           "order": "race" if bad else "safe", "problems": bad, "period_ms": None, "hidden_fraction": None}
    if not bad:
        m = model(replay["ops"], copy_ms, kernel_ms)
        row.update(period_ms=m["period_ms"], hidden_fraction=m["hidden_fraction"])
    return row


RECORDED_ROWS = {"pinned": "recorded: pinned (copy on the compute stream)",
                 "double_buffered": "recorded: double_buffered (copy on a side stream)"}


def _range(lo, hi) -> str:
    return f"{lo:.2f}–{hi:.2f}" if lo is not None and pd.notna(lo) else ""


def safe(replay: dict) -> bool:
    """True when a replayed prefetch gave the right data and its order has no race (:func:`races`)."""
    return not replay["wrong"] and not races(replay["ops"])


def edit_view(recorded: pd.DataFrame, replays: dict[str, dict], gpu: str, live: dict | None = None,
              copy_bytes: float | None = None) -> tuple:
    """``(table, reading)``: the recorded ``pinned`` and ``double_buffered`` rows of a
    :func:`~infralens_lab.analysis.overlap_tables.copy_table` (recorded on ``gpu``) beside each replayed prefetch
    (``{name: replay_prefetch() dict}``, as given first, the learner's last), each :func:`judge`'d with the recorded
    pinned step's copy and kernel times. Without ``live`` a safe row's period and hidden share are the
    :func:`model`'s (``evidence`` says so); with ``live`` (``{name: live_prefetch() dict}``: ``trace``, ``timing``,
    ``clock``, ``gpu``) they are measured now: the trace's period, its p10–p90 and hidden share (``copy_table`` with
    ``copy_bytes``), and the untraced CUDA-event period (median, p10–p90, runs) with the SM clock sampled during it."""
    missing = [m for m in RECORDED_ROWS if m not in set(recorded.get("mode", []))]
    if missing:
        raise ValueError(f"recorded copy table with modes {list(recorded.get('mode', []))}; expected also {missing}")
    rec = recorded.set_index("mode")
    judged = {n: judge(r, rec.loc["pinned", "copy_ms"], rec.loc["pinned", "kernel_ms"]) for n, r in replays.items()}
    rows = [{"prefetch": RECORDED_ROWS[m], "evidence": f"recorded, {gpu}", "order": "safe",
             "period_ms": rec.loc[m, "period_ms"], "period_p10_p90_ms": _range(rec.loc[m, "period_p10_ms"], rec.loc[m, "period_p90_ms"]),
             "hidden_fraction": rec.loc[m, "hidden_fraction"]} for m in RECORDED_ROWS]
    for name, j in judged.items():
        row = {"prefetch": name, "order": j["order"], "copy_streams": j.get("copy_streams", ""),  # streams: recorded order
               "kernel_streams": j.get("kernel_streams", ""), "period_ms": j["period_ms"], "hidden_fraction": j["hidden_fraction"]}
        if live is not None and name in live and j["order"] == "safe":
            t, clk = live[name]["timing"], live[name]["clock"]
            lv = overlap_tables.copy_table({name: live[name]["trace"]}, copy_bytes).iloc[0]
            ghz = clk.get("sm_clock_hz") and clk["sm_clock_hz"] / 1e9
            row.update(evidence=f"live, {live[name]['gpu']}", period_ms=lv["period_ms"], hidden_fraction=lv["hidden_fraction"],
                       period_p10_p90_ms=_range(lv["period_p10_ms"], lv["period_p90_ms"]), timed_ms=t["median_ms"],
                       timed_p10_p90_ms=_range(t["p10_ms"], t["p90_ms"]), timed_n=t["n"], sm_clock_ghz=ghz)
        else:
            row["evidence"] = "model (recorded pinned copy and kernel times)" if j["order"] == "safe" else "not run: unsafe"
        rows.append(row)
    table = pd.DataFrame(rows)
    return table, _reading(table, judged, rec.loc["pinned"], gpu, live is not None)


def _reading(table: pd.DataFrame, judged: dict, pinned, gpu: str, live: bool) -> str:
    names = list(judged)
    mine, base = judged[names[-1]], table.set_index("prefetch")
    if mine["order"] != "safe":
        luck = " A race can still give the right numbers on a GPU, by luck of timing." if mine["order"] == "race" else ""
        return f"{names[-1]}: " + "; ".join(mine["problems"]) + f".{luck} Nothing was timed or modelled."
    me, first = base.loc[names[-1]], base.loc[names[0]]
    db = base.loc[RECORDED_ROWS["double_buffered"]]
    where = f"copies on the {mine['copy_streams']} stream, matmuls on the {mine['kernel_streams']} stream, order safe"
    if live:
        clk = f"SM clock {me['sm_clock_ghz']:.2f} GHz" if pd.notna(me.get("sm_clock_ghz")) else "SM clock not read (no NVML)"
        return (f"{names[-1]}: {where}. Live on {me['evidence'].removeprefix('live, ')}: period {me['timed_ms']:.2f} ms "
                f"untraced (CUDA events, median of {int(me['timed_n'])}, p10–p90 {me['timed_p10_p90_ms']} ms, {clk}) against "
                f"{first['timed_ms']:.2f} ms for {names[0]}; copy hidden {me['hidden_fraction']:.0%} in the profiled trace. "
                f"Recorded double_buffered on {gpu}: {db['period_ms']:.2f} ms.")
    return (f"{names[-1]}: {where}. Model, not a measurement (per-step times recorded on {gpu}, pinned step: copy "
            f"{pinned['copy_ms']:.2f} ms, kernels {pinned['kernel_ms']:.2f} ms): period {me['period_ms']:.2f} ms against "
            f"{first['period_ms']:.2f} ms for {names[0]} ({me['period_ms'] / first['period_ms']:.2f}x), copy hidden "
            f"{me['hidden_fraction']:.0%}; the recorded double_buffered step ran at {db['period_ms']:.2f} ms "
            f"(p10–p90 {db['period_p10_p90_ms']} ms). This CPU: order and counts only, no timing.")
