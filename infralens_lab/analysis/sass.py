"""Which instruction each stall sits on: ncu's per-SASS-instruction samples, read by opcode.

:func:`infralens_lab.parse.ncu.parse_source_csv` gives one row per SASS instruction with the warp-state
samples taken while a warp's next instruction was that one, split by reason, and how often it executed.
A stall sample is charged to the instruction that *cannot issue*, so a scoreboard stall sits on the
*consumer* of a result; the producer is an earlier instruction that writes a register the consumer reads.
This module names the producer (:func:`producer`), attributes each reason's samples to opcodes and to the
producers' classes (:func:`reason_sites`), and gives the executed-instruction mix per class
(:func:`instruction_mix`; per-instruction executions summed by opcode are what ncu's
``sass__inst_executed_per_opcode`` counts).

What ncu's Kernel Profiling Guide says each reason is (section "Warp Stall Reasons" / the WarpStateStats
rule's texts; https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#metrics-reference):
``short_scoreboard``: waiting for a scoreboard dependency on an MIO (memory input/output) operation, not
L1TEX; typically shared memory, also special math (MUFU) or dynamic branching (BRX, JMX).
``mio_throttle``: waiting for the MIO instruction queue to be not full; extreme use of the MIO pipelines
(special math, dynamic branches, shared memory). ``drain``: after EXIT, waiting for all outstanding memory
operations to complete so the warp's resources can be freed; typical when much data is written at the end. A
warp past EXIT issues nothing more, so its drain samples sit on the instruction after EXIT (in Triton's copies
a ``BRA`` to its own address, executed 0 times), not on EXIT itself.
``long_scoreboard``: waiting for a scoreboard dependency on an L1TEX (local, global, surface, texture)
operation. The guide does not list special-register reads (S2R); S2R is a variable-latency instruction
(NVIDIA developer forum, "How to understand the short scoreboard of sass code on H100", 2025), which is why
:data:`CLASSES` keeps it apart: the per-instruction table says whether its consumers carry the samples.
"""
from __future__ import annotations

import re

import pandas as pd

# opcode (before the first dot) -> class; the MIO-side classes are the ones the guide names for
# short_scoreboard / mio_throttle, plus special-register reads
CLASSES = {
    "global load": ("LDG",), "global store": ("STG",), "shared memory": ("LDS", "STS", "LDSM", "LDGSTS", "ATOMS"),
    "special register": ("S2R", "S2UR"), "local memory": ("LDL", "STL"), "texture": ("TEX", "TLD", "TLD4"), "special math": ("MUFU",), "constant load": ("LDC", "ULDC", "LDCU"),
    "control": ("EXIT", "BRA", "BRX", "JMX", "BSSY", "BSYNC", "RET", "CALL", "NOP", "BAR", "WARPSYNC"),
    "integer / address": ("IMAD", "IADD3", "VIADD", "CS2R", "IADD", "LEA", "LEA.HI", "SHF", "SHL", "SHR", "LOP3", "ISETP", "SEL",
                          "IABS", "IMNMX", "PRMT", "SGXT", "FLO", "POPC", "I2F", "F2I", "MOV", "P2R", "R2P", "PLOP3"),
    "uniform datapath": ("UMOV", "UIADD3", "UIMAD", "ULEA", "USHF", "ULOP3", "UISETP", "USEL", "R2UR", "UPLOP3"),
    "float math": ("FADD", "FMUL", "FFMA", "HADD2", "HMUL2", "HFMA2", "FSETP", "FMNMX", "F2F", "FSEL"),
}
_CLASS_OF = {op: cls for cls, ops in CLASSES.items() for op in ops}
MIO_CLASSES = ("shared memory", "special register", "special math")
# what a scoreboard reason can be waiting for (the guide: long = an L1TEX operation, short = an MIO one); the
# producer of a scoreboard wait is looked for among those classes only, so a store that reads both an address
# (integer arithmetic) and data (a load) is put down to the load
L1TEX_CLASSES = ("global load", "local memory", "texture")
SCOREBOARD_PRODUCERS = {"long_scoreboard": L1TEX_CLASSES, "short_scoreboard": MIO_CLASSES}
# a throttle is charged to the instruction that cannot enter a full queue (its own class matters); a
# scoreboard wait to the consumer of a result in flight (its producer's class matters)
THROTTLES = ("mio_throttle", "lg_throttle", "tex_throttle", "math_pipe_throttle")
_REG = re.compile(r"\b(U?R\d+|U?P\d+)\b")


def opcode_class(op: str) -> str:
    """The class of an opcode (``LDG`` or ``LDG.E.128`` -> ``global load``); ``other`` if not in :data:`CLASSES`."""
    if not isinstance(op, str):
        raise TypeError(f"opcode is {type(op).__name__}; expected a str such as 'LDG'")
    base = op.strip().split(".")[0].upper()
    return _CLASS_OF.get(base, "uniform datapath" if base.startswith("U") else "other")


def _operands(sass: str) -> tuple[set[str], set[str]]:
    """(registers written, registers read) of one SASS line: the first operand is the destination, except for
    stores and control instructions, whose operands are all read. RZ/PT are constants and left out."""
    words = sass.strip().rstrip(";").split(None, 1)
    if words and words[0].startswith("@"):
        pred = words[0][1:].lstrip("!")
        words = (words[1] if len(words) > 1 else "").split(None, 1)
        extra = {pred} if pred not in ("PT", "UPT") else set()
    else:
        extra = set()
    if not words:
        return set(), extra
    op, rest = words[0], (words[1] if len(words) > 1 else "")
    parts = [p.strip() for p in rest.split(",")] if rest else []
    if opcode_class(op) in ("global store", "control") or op.startswith(("ST", "RED", "BAR")) or not parts:
        return set(), extra | set(_REG.findall(rest))
    regs = [set(_REG.findall(p)) for p in parts]
    written, read = set(regs[0]), {r for p in regs[1:] for r in p} | extra
    if "[" in parts[0]:  # a memory destination (an address first) is read, not written
        read |= written
        written = set()
    return written, read


def producer(rows: pd.DataFrame, index, classes=None) -> int | None:
    """Row label of the nearest earlier instruction (in address order, same config and kernel) that writes a
    register the instruction at ``index`` reads, of one of ``classes`` (opcode classes) when given; None if
    none. Exact for straight-line code (a copy kernel has no loop); across branches it is the nearest writer
    in address order, not a data-flow analysis."""
    row = rows.loc[index]
    same = rows[(rows["config"] == row["config"]) & (rows["kernel"] == row["kernel"])].sort_values("address")
    reads = _operands(row["sass"])[1]
    if not reads:
        return None
    earlier = same[same["address"] < row["address"]]
    for j in reversed(list(earlier.index)):
        written = _operands(earlier.at[j, "sass"])[0] & reads
        if written and (classes is None or opcode_class(earlier.at[j, "op"]) in classes):
            return j
        if classes is not None:
            reads = reads - written  # overwritten later than any producer of the right class could write it
    return None


def _reasons(rows: pd.DataFrame) -> list[str]:
    fixed = {"config", "kernel", "address", "pc_offset", "sass", "opcode", "op", "samples", "samples_not_issued",
             "inst_executed"}
    return [c for c in rows.columns if c not in fixed]


def _check(rows) -> None:
    need = {"config", "kernel", "address", "sass", "op", "samples", "inst_executed"}
    have = set(getattr(rows, "columns", []))
    if not need <= have:
        raise ValueError(f"source rows have columns {sorted(have)}; expected {sorted(need)} and reason columns "
                         f"(the DataFrame of parse.ncu.parse_source_csv)")


def top_instructions(rows: pd.DataFrame, config: str, n: int = 8,
                     reasons=("long_scoreboard", "drain", "short_scoreboard", "mio_throttle", "lg_throttle")):
    """The ``n`` instructions of one config with the most stall samples: ``pc`` (hex offset), ``sass``,
    ``inst_executed``, ``samples``, ``share`` (of the config's samples) and the samples of ``reasons``."""
    _check(rows)
    sub = rows[rows["config"] == config]
    if sub.empty:
        raise ValueError(f"no source rows for config {config!r}; have {sorted(set(rows['config']))}")
    total = sub["samples"].sum()
    keep = [r for r in reasons if r in sub.columns]
    out = sub.sort_values("samples", ascending=False).head(n).copy()
    out["pc"] = out["pc_offset"].map(lambda v: f"{int(v):#06x}")
    out["share"] = out["samples"] / total if total > 0 else float("nan")
    return out[["pc", "sass", "inst_executed", "samples", "share", *keep]].reset_index(drop=True)


def instruction_mix(rows: pd.DataFrame) -> pd.DataFrame:
    """Executed warp-level instructions per config and opcode class (``executed``, ``share`` of the config's
    total), largest first: :func:`opcode_class` of each row's ``op``, ``inst_executed`` summed."""
    _check(rows)
    d = rows.assign(op_class=rows["op"].map(opcode_class))
    g = d.groupby(["config", "op_class"], sort=False)["inst_executed"].sum().rename("executed").reset_index()
    g["share"] = g["executed"] / g.groupby("config")["executed"].transform("sum")
    return g.sort_values(["config", "executed"], ascending=[True, False]).reset_index(drop=True)


def reason_sites(rows: pd.DataFrame, reason: str) -> pd.DataFrame:
    """Where one reason's samples sit, per config: ``samples`` of the reason, the instruction holding most of
    them (``sass``, ``op``, ``site_share`` of the reason's samples), that instruction's producer (``producer``,
    ``producer_class``, :func:`producer`), ``by_producer_class``: the reason's samples grouped by their
    sites' producer classes, as shares (a dict, largest first; ``none`` when a site reads nothing in flight),
    and ``by_site_class``: the same grouped by the sites' own classes (what a throttle is about)."""
    _check(rows)
    if reason not in rows.columns:
        raise ValueError(f"no column {reason!r} in the source rows; reasons there: {_reasons(rows)}")
    out = []
    for cfg, sub in rows.groupby("config", sort=False):
        total = float(sub[reason].sum())
        rec = {"config": cfg, "reason": reason, "samples": total, "sass": None, "op": None, "site_share": None,
               "producer": None, "producer_class": None, "by_producer_class": {}, "by_site_class": {}}
        if total > 0:
            acc: dict[str, float] = {}
            own: dict[str, float] = {}
            prod: dict = {}  # site row -> its producer's row (or None), found once per site
            for i in sub.index[sub[reason] > 0]:
                c = opcode_class(rows.at[i, "op"])
                own[c] = own.get(c, 0.0) + float(rows.at[i, reason])
                p = prod[i] = producer(rows, i, SCOREBOARD_PRODUCERS.get(reason))
                cls = opcode_class(rows.at[p, "op"]) if p is not None else "none"
                acc[cls] = acc.get(cls, 0.0) + float(rows.at[i, reason])
            top = sub[reason].idxmax()
            p = prod[top]  # the top site is one of the sites above (it holds the most samples, so more than 0)
            rec.update(sass=rows.at[top, "sass"], op=rows.at[top, "op"], site_share=float(sub.at[top, reason]) / total,
                       producer=rows.at[p, "sass"] if p is not None else None,
                       producer_class=opcode_class(rows.at[p, "op"]) if p is not None else "none",
                       by_producer_class={k: v / total for k, v in sorted(acc.items(), key=lambda kv: -kv[1])},
                       by_site_class={k: v / total for k, v in sorted(own.items(), key=lambda kv: -kv[1])})
        out.append(rec)
    return pd.DataFrame(out)


def reading(rows: pd.DataFrame, reasons=("short_scoreboard", "mio_throttle", "drain", "long_scoreboard"),
            threshold: float = 0.5) -> list[str]:
    """One sentence per (config, reason) with samples: where most of them sit and on whose result. A reason is
    said to come *from* a producer class only when sites with producers of that class hold at least
    ``threshold`` (default half) of the reason's samples; otherwise the sentence says the evidence is split."""
    lines = []
    for reason in [r for r in reasons if r in rows.columns]:
        for r in reason_sites(rows, reason).to_dict(orient="records"):
            if not r["samples"]:
                continue
            cls, share = next(iter(r["by_producer_class"].items()))
            own, own_share = next(iter(r["by_site_class"].items()))
            where = f"{r['site_share']:.0%} on `{r['sass']}`"
            if reason in THROTTLES:
                src = (f"{own_share:.0%} on {own} instructions waiting to enter the queue" if own_share >= threshold
                       else f"split: {', '.join(f'{k} {v:.0%}' for k, v in list(r['by_site_class'].items())[:3])}")
            elif reason == "drain" or r["op"] == "EXIT":
                src = _drain_site(rows, r["config"], r["sass"])
            elif share >= threshold and cls != "none":
                src = f"{share:.0%} on instructions waiting for a {cls} result (e.g. `{r['producer']}`)"
            else:
                src = f"split: {', '.join(f'{k} {v:.0%}' for k, v in list(r['by_producer_class'].items())[:3])}"
            lines.append(f"{r['config']}: {reason} {r['samples']:.0f} samples, {where}; {src}")
    return lines


def _drain_site(rows: pd.DataFrame, config: str, sass: str) -> str:
    """Where a drain site sits, read off the SASS: the instruction before it, how often it executed, and whether
    it is a branch to its own address (the loop the compiler puts after a program's last EXIT)."""
    site = rows[(rows["config"] == config) & (rows["sass"] == sass)].iloc[0]
    prev = _previous_op(rows, config, sass)
    where = "at EXIT" if site["op"] == "EXIT" else f"on the instruction after {prev}" if prev else "at the end"
    ran = int(site["inst_executed"]) if site["inst_executed"] == site["inst_executed"] else None
    what = ", a branch to itself" if self_branch(site["sass"], site["address"]) else ""
    done = f"{what}, executed {ran:,} times" if ran is not None else what
    return f"{where}{done}: warps past EXIT, waiting for their outstanding memory operations to complete"


def self_branch(sass: str, address) -> bool:
    """True for a ``BRA`` whose target is its own address (``BRA 0x7f..a10`` at address ``0x7f..a10``): the
    endless loop that pads the end of a program, never reached by a warp that executed EXIT."""
    m = re.match(r"\s*BRA\s+`?\(?(0x[0-9a-fA-F]+)", str(sass))
    try:
        return bool(m) and int(m.group(1), 16) == int(address)
    except (TypeError, ValueError):
        return False


def _previous_op(rows: pd.DataFrame, config: str, sass: str) -> str | None:
    """The opcode just before the instruction ``sass`` of ``config`` in address order (``EXIT`` for the branch
    that closes a program), or None."""
    sub = rows[rows["config"] == config].sort_values("address").reset_index(drop=True)
    at = sub.index[sub["sass"] == sass]
    return str(sub.at[at[0] - 1, "op"]) if len(at) and at[0] > 0 else None


def census_agreement(rows: pd.DataFrame, census: pd.DataFrame) -> pd.DataFrame:
    """Per config and opcode: executions summed over the Source page's instructions (``from_source``) beside
    ncu's per-opcode count ``sass__inst_executed_per_opcode`` (``from_census``, from
    :func:`infralens_lab.measure.ncu.opcode_census`), and ``agree`` (equal within 0.1%: both come from the same
    instrumented run, so they should match exactly; the slack is for rounding in the exported text)."""
    _check(rows)
    if not {"config", "opcode", "executed"} <= set(getattr(census, "columns", [])):
        raise ValueError(f"census has columns {list(getattr(census, 'columns', []))}; expected config, opcode, "
                         f"executed (measure.ncu.opcode_census)")
    a = rows.groupby(["config", "op"])["inst_executed"].sum().rename("from_source")
    b = census.assign(op=census["opcode"].str.split(".").str[0]).groupby(["config", "op"])["executed"].sum()
    out = pd.concat([a, b.rename("from_census")], axis=1).fillna(0.0).reset_index()
    tol = 1e-3 * out[["from_source", "from_census"]].max(axis=1)  # 0.1%: rounding of printed values
    out["agree"] = (out["from_source"] - out["from_census"]).abs() <= tol
    return out


_SASS_INSTRUCTION = re.compile(r"^[-0-9a-fA-FY:]+\t(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Za-z0-9_]+)*)")
_HGMMA_SHAPE = re.compile(r"^\.(\d+)x(\d+)x(\d+)")


def opcode_counts(sass: str) -> pd.Series:
    """Static instruction counts by base opcode (``HGMMA``, ``LDGSTS``, ``UTMALDG`` ...) of one kernel's SASS as
    ``cuobjdump -sass`` prints it through Triton's ``asm["sass"]`` (a control-code field, a tab, an optional
    predicate, the instruction): each instruction once, not how often it executed. ValueError when ``sass`` holds
    no instruction line."""
    ops = [m.group(1) for m in map(_SASS_INSTRUCTION.match, str(sass).splitlines()) if m]
    if not ops:
        raise ValueError(f"opcode_counts: no SASS instruction line in {len(str(sass))} characters; expected "
                         "cuobjdump -sass output (e.g. '--:-:1:-:8\\tLDC R1, c[0x0][0x28];')")
    return pd.Series(ops).value_counts().rename("count")


def hgmma_ops_per_warp(sass: str) -> float | None:
    """Tensor ops per warp of one ``HGMMA.MxNxK`` of the SASS, averaged over its static HGMMAs: ``2·M·N·K / 4`` (a
    warpgroup of 4 warps issues it; Nsight Compute's ``sm__inst_executed_pipe_tensor`` counts warp-level
    instructions). None without an HGMMA."""
    sizes = []
    for m in map(_SASS_INSTRUCTION.match, str(sass).splitlines()):
        shape = _HGMMA_SHAPE.match(m.group(2)) if m and m.group(1) == "HGMMA" else None
        if shape:
            a, b, c = map(int, shape.groups())
            sizes.append(2 * a * b * c / 4)
    return sum(sizes) / len(sizes) if sizes else None
