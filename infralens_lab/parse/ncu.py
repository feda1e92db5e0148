"""Nsight Compute's CSV output, read: a tidy table per (launch, metric), the views labs need, and the
per-instruction source page. Reading only; running ncu is :mod:`infralens_lab.measure.ncu`'s.

:func:`parse_raw_csv` turns ``ncu --csv --page raw`` text into a tidy DataFrame with one row per
(launch, metric): columns ``config``, ``kernel``, ``launch``, ``metric``, ``unit``, ``value`` (float, NaN
when not numeric) and ``text`` (as printed). ncu's raw page starts with ``==PROF==``/``==WARNING==`` lines
and whatever the program printed, then a header row, a units row and one row per launch, with thousands
separators in the values (``"16,777,216"``). The recorder may join several runs in one file, each block
introduced by a ``==INFRALENS== config: <label>`` line (:func:`config_block` writes it, :func:`read_blocks`
reads it); the label lands in ``config``. The metric names every lab and the recorder ask for live here
(one owner). A file that is not such a CSV raises :class:`NcuCsvError` naming what was seen.
"""
from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence

import pandas as pd

from ..errors import InfraLensError

CONFIG_MARK = "==INFRALENS== config:"
COMMAND_MARK = "==INFRALENS== command:"
NVTX_RANGE = "infralens"  # push/pop NVTX range the target opens around measured launches

# metric groups (the names every module uses; verified with ncu 2025.3 on an H100 and an H200)
TIME = ["gpu__time_duration.sum"]
DRAM = ["dram__bytes_read.sum", "dram__bytes_write.sum"]
SECTORS = ["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]
HIT_RATES = ["lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct"]
SOL = ["sm__throughput.avg.pct_of_peak_sustained_elapsed",
       "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"]
OCCUPANCY = ["sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct"]
FLOP_WEIGHTS = {"fadd": 1, "fmul": 1, "ffma": 2, "hadd": 1, "hmul": 1, "hfma": 2}  # FLOPs per thread instruction
FLOP_METRICS = {op: f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in FLOP_WEIGHTS}
FLOPS = list(FLOP_METRICS.values())
# sm__ops_path_tensor_src_fp16_dst_fp32 reads "n/a" on the H200 with ncu 2025.3.1 (and is left out of the
# raw CSV); --query-metrics there lists sm__ops_path_tensor_src_fp16. Triton's tl.dot on Hopper issues GMMA.
TENSOR = ["sm__ops_path_tensor_src_fp16.sum", "sm__inst_executed_pipe_tensor.sum",
          "sm__inst_executed_pipe_tensor_op_gmma.sum", "sm__inst_executed_pipe_tensor_op_hmma.sum"]
# tensor-core work: "math ops executed in the tensor path" under the first name this ncu knows, and the
# count of tensor-pipe instructions (warp-level; FLOPs per instruction depend on the MMA shape)
TENSOR_OPS_NAMES = ("sm__ops_path_tensor_src_fp16.sum", "sm__ops_path_tensor_src_fp16_dst_fp32.sum")
TENSOR_INST = "sm__inst_executed_pipe_tensor.sum"
# the tensor path's share of its peak per elapsed cycle (clock-free), under the op counter's name
TENSOR_PCT = ["sm__ops_path_tensor_src_fp16.sum.pct_of_peak_sustained_elapsed"]
# Per-pipe work (issue 42's Gluon profile, ncu_gluon.csv): warp instructions issued to the FMA pipe (FFMA, FMUL,
# FADD: the softmax's arithmetic), the ALU pipe (compares, max, conversions), the XU pipe (MUFU.EX2: exp2), and the
# tensor pipe's active cycles as a share of peak per active cycle. Read by ncu 2025.3.1 on the H200
# (data/recorded/nvidia-h200-gluon); the recorder drops a name another ncu does not know and says so in record_log.
PIPES = ["sm__inst_executed_pipe_fma.sum", "sm__inst_executed_pipe_alu.sum", "sm__inst_executed_pipe_xu.sum",
         "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]
GRID, BLOCK, WAVES = "launch__grid_size", "launch__block_size", "launch__waves_per_multiprocessor"
LAUNCH = [GRID, BLOCK, "launch__registers_per_thread", WAVES]
# bytes through L1/TEX and L2 (the hierarchical roofline's upper levels) and the peaks ncu knows for them
HIERARCHY = ["l1tex__t_bytes.sum", "lts__t_bytes.sum"]
HIERARCHY_PEAKS = ["l1tex__t_bytes.sum.peak_sustained", "lts__t_bytes.sum.peak_sustained",
                   "sm__cycles_elapsed.avg.per_second", "lts__cycles_elapsed.avg.per_second"]
# the SM clock each launch ran at (ncu runs with --clock-control none: the GPU's own clock policy, not a lock)
CLOCK = ["sm__cycles_elapsed.avg.per_second"]
# Scheduler Statistics: issue-slot utilisation (% of cycles a scheduler issued), eligible and active warps per
# scheduler per cycle (ncu's SchedulerStats section)
SCHEDULER = ["smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__warps_eligible.avg.per_cycle_active",
             "smsp__warps_active.avg.per_cycle_active"]
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "barrier", "lg_throttle", "mio_throttle", "math_pipe_throttle",
                 "tex_throttle", "wait", "not_selected", "selected", "no_instructions", "dispatch_stall", "drain",
                 "membar", "branch_resolving", "sleeping", "misc", "imc_miss")
STALLS = ["smsp__pcsamp_sample_count"] + [f"smsp__pcsamp_warps_issue_stalled_{r}" for r in STALL_REASONS]
# The grammar of ncu's stall-metric names, the package's one copy (stall_breakdown here, analysis.stalls.normalize,
# quiz.derive's dominant_stall read names through stall_metric): a family prefix (sampled ``pcsamp_warps``, per-issue
# ``average_warps``, per-warp ``warps``), the reason, ncu's optional ``_not_issued`` half, then roll-up suffixes. The
# prefix is optional so that a bare reason (``long_scoreboard``) reads the same way.
STALL_METRIC = re.compile(r"^(?:smsp__(?P<family>pcsamp_warps|average_warps|warps)_issue_stalled_)?"
                          r"(?P<reason>[a-z0-9_]+?)(?P<not_issued>_not_issued)?"
                          r"(?P<rollup>(?:_per_issue_active\.ratio|_per_warp_active\.pct|\.sum|\.avg|\.ratio)*)$")
# ncu's older spelling of a reason -> the name STALL_REASONS' readers use
STALL_ALIASES = {"no_instructions": "no_instruction"}


def stall_metric(name: str) -> dict | None:
    """The parts of a stall metric or reason name, or None when ``name`` is neither: ``{"family", "reason",
    "not_issued", "rollup"}`` with ``reason`` bare and aliased (``no_instructions`` -> ``no_instruction``),
    ``family`` None for a bare reason, ``not_issued`` a bool and ``rollup`` ``""`` when absent. Case and outer
    spaces are ignored: ``smsp__pcsamp_warps_issue_stalled_long_scoreboard`` -> family ``pcsamp_warps``, reason
    ``long_scoreboard``."""
    m = STALL_METRIC.match(name.strip().lower()) if isinstance(name, str) else None
    if m is None:
        return None
    return {"family": m["family"], "reason": STALL_ALIASES.get(m["reason"], m["reason"]),
            "not_issued": bool(m["not_issued"]), "rollup": m["rollup"]}


def _sampled_stall(name: str) -> str | None:
    """The reason of a per-launch sampled stall count (``smsp__pcsamp_warps_issue_stalled_<reason>``, the
    ``_not_issued`` half and roll-ups excluded), else None: what :func:`stall_breakdown` reads."""
    parts = stall_metric(name)
    ok = parts is not None and parts["family"] == "pcsamp_warps" and not parts["not_issued"] and not parts["rollup"]
    return parts["reason"] if ok else None


def config_block(label: str, command: str, csv_text: str) -> str:
    """One run's block in a recorded ncu file: the ``==INFRALENS== config:`` line (a
    :meth:`~infralens_lab.measure.runs.RunConfig.label`), the ``==INFRALENS== command:`` line and ncu's CSV."""
    if "\n" in label or "\n" in command:
        raise ValueError(f"config label {label!r} / command {command!r}; expected single lines")
    return f"{CONFIG_MARK} {label}\n{COMMAND_MARK} {command}\n{csv_text.rstrip()}\n"


def read_blocks(text: str) -> list[dict]:
    """The blocks of a recorded ncu file in order: ``{"label", "command", "first_line"}`` each
    (``first_line``: 0-based index of the config line). A text without config lines is one block
    labelled ``""``. The one reader of :func:`config_block`'s format."""
    blocks: list[dict] = []
    for i, ln in enumerate(text.splitlines()):
        if ln.startswith(CONFIG_MARK):
            blocks.append({"label": ln[len(CONFIG_MARK):].strip(), "command": None, "first_line": i})
        elif ln.startswith(COMMAND_MARK) and blocks and blocks[-1]["command"] is None:
            blocks[-1]["command"] = ln[len(COMMAND_MARK):].strip()
    return blocks or [{"label": "", "command": None, "first_line": 0}]


def demangled_regex(name: str) -> str:
    """A regex for ``--kernel-name-base demangled``: the kernel's demangled name up to its argument list,
    escaped, anchored at the start, so ``cutlass::Kernel2<cutlass_80_simt_sgemm_...>`` picks that one
    instantiation and not every ``Kernel2``."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"kernel name {name!r}; expected a non-empty string")
    head = re.sub(r"^void\s+", "", name.strip())
    depth, cut = 0, len(head)
    for i, ch in enumerate(head):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            cut = i
            break
    return "^" + re.escape(head[:cut].strip())


def command_of(text: str, label_part: str) -> str | None:
    """The ncu command recorded for the first block whose label contains ``label_part``."""
    return next((b["command"] for b in read_blocks(text) if b["command"] and label_part in b["label"]), None)


def short_name_regex(name: str) -> str:
    """Regex for ``--kernel-name regex:`` matching a kernel as torch.profiler names it: its leading
    identifier, escaped (ncu matches the short function name, without templates or arguments).
    ``'void at::native::vectorized_elementwise_kernel<4, ...>(...)'`` -> ``'vectorized_elementwise_kernel'``."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"kernel name {name!r}; expected a non-empty string")
    m = re.match(r"(?:void\s+)?([A-Za-z_][\w:]*)", name.strip())
    base = m.group(1).split("::")[-1] if m else name.strip()
    return re.escape(base)


# ---------------------------------------------------------------- errors
class NcuError(InfraLensError, RuntimeError):
    """ncu could not give counters. ``message`` says what happened, ``fix`` what to do."""

    def __init__(self, message: str, fix: str = "", output: str = ""):
        self.message, self.fix, self.output = message, fix, output
        super().__init__(message + (f"\nfix: {fix}" if fix else ""))


class NcuCsvError(NcuError):
    """ncu's output is not the CSV that ``--csv --page raw`` should print."""


class NcuNotFound(NcuError):
    """``ncu`` is not on PATH."""


class NcuPermissionError(NcuError):
    """ERR_NVGPUCTRPERM: performance counters are restricted to administrators."""


class NcuNoGpu(NcuError):
    """No CUDA GPU for ncu to profile on."""


class NcuTimeout(NcuError):
    """The profiled program did not finish in time."""


class NcuNoKernels(NcuError):
    """ncu ran, but no kernel matched the name filter / launch window."""


class NcuMetricError(NcuError):
    """ncu does not know some requested metrics; ``metrics`` lists them."""

    def __init__(self, message: str, fix: str = "", output: str = "", metrics: Sequence[str] = ()):
        super().__init__(message, fix, output)
        self.metrics = list(metrics)


class NcuFailed(NcuError):
    """ncu or the profiled program exited with an error not covered above."""


FIX_NOT_FOUND = ("Install Nsight Compute (with the CUDA toolkit or from NVIDIA's Nsight Compute page) and put its "
                 "folder, e.g. /opt/nvidia/nsight-compute/<version>, on PATH; or set INFRALENS_NCU to the ncu "
                 "binary. Without it the labs show recorded counters.")
FIX_PERM = ("Run ncu as root (sudo), or allow all users to read counters: add "
            "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` to a file in /etc/modprobe.d/ and reboot "
            "(on a managed machine ask the administrator).")
FIX_NO_KERNELS = ("Check the kernel-name regex (Triton kernels are named after their Python function, e.g. "
                  "copy_strided), that --launch-skip is smaller than the number of matching launches, and, with "
                  "--nvtx, that the launches happen inside the target's 'infralens' NVTX range.")
FIX_NO_GPU = "ncu needs an NVIDIA GPU with its driver; run on a GPU machine, or read the recorded counters."


def classify_failure(output: str, returncode: int, requested: Sequence[str] = (), kernel_regex: str = "") -> NcuError | None:
    """The :class:`NcuError` that ncu's combined output describes, or None if it looks fine."""
    if "ERR_NVGPUCTRPERM" in output:
        return NcuPermissionError("ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): "
                                  "they are restricted to administrators on this machine.", FIX_PERM, output)
    low = output.lower()
    if any(s in low for s in ("no cuda-capable device", "no cuda devices", "cudaerrornodevice",
                              "no supported gpus", "no gpu available", "needs a gpu")):
        return NcuNoGpu("No CUDA GPU was found for ncu to profile on.", FIX_NO_GPU, output)
    errors = [ln for ln in output.splitlines() if ln.startswith("==ERROR==")]
    bad = [m for m in requested if any(m in ln for ln in errors)]
    if bad or any("metric" in ln.lower() and ("not found" in ln.lower() or "failed to find" in ln.lower()
                                               or "invalid" in ln.lower()) for ln in errors):
        return NcuMetricError(f"ncu does not know the metric(s) {bad or '(see output)'} on this GPU/version: "
                              + " | ".join(errors[:3]),
                              "Drop or rename them; `ncu --query-metrics` lists the metrics this GPU supports.",
                              output, bad)
    if "No kernels were profiled" in output:
        which = f"regex {kernel_regex!r}" if kernel_regex else "the kernel-name regex"
        return NcuNoKernels(f"ncu ran the program but profiled no kernel: none matched {which} in the launch window.",
                            FIX_NO_KERNELS, output)
    if returncode != 0:
        tail = "\n".join(errors[-3:] or output.strip().splitlines()[-5:])
        return NcuFailed(f"ncu or the profiled program exited with code {returncode}: {tail}",
                         "Run the printed command by hand to see the program's own error.", output)
    return None


# ---------------------------------------------------------------- parsing
_ID_COLUMNS = {"ID": "launch", "Kernel Name": "kernel"}


def _find_headers(lines: list[str]) -> list[int]:
    return [i for i, ln in enumerate(lines) if ln.startswith('"ID",') or ln.startswith("ID,")]


def _number(text: str) -> float:
    s = text.strip().replace(",", "")
    if not s or s.lower() in ("n/a", "nan"):
        return math.nan
    try:
        return float(s)
    except ValueError:
        return math.nan


def parse_raw_csv(text: str, device_attributes: bool = False):
    """Tidy DataFrame from ncu ``--csv --page raw`` output (see module doc).

    One row per (config, kernel, launch, metric); ``launch`` is ncu's ID (0-based, per profiled
    process). ``device__attribute_*`` columns are dropped unless ``device_attributes``.
    Raises :class:`NcuNoKernels` for the "No kernels were profiled" warning with no rows, a
    matching :class:`NcuError` for known failure output, and :class:`NcuCsvError` when the
    text holds no ncu CSV or its rows do not match the header.
    """
    if not isinstance(text, str):
        raise TypeError(f"ncu output is {type(text).__name__}; expected str (the CSV text)")
    lines = text.splitlines()
    headers = _find_headers(lines)
    if not headers:
        err = classify_failure(text, 0)
        if err is not None:
            raise err
        raise NcuCsvError("no ncu CSV header found (a row starting with \"ID\"); "
                          f"the text begins {text[:120]!r}",
                          "Pass the stdout of `ncu --csv --page raw ...`.", text)
    starts = {b["first_line"]: b["label"] for b in read_blocks(text)}
    labels: dict[int, str] = {}
    label = ""
    for i in range(len(lines)):
        label = starts.get(i, label)
        labels[i] = label
    records = []
    for h in headers:
        reader = csv.reader(io.StringIO("\n".join(lines[h:h + 2])))
        try:
            header, units = next(reader), next(reader)
        except StopIteration:
            raise NcuCsvError(f"line {h + 1}: header without a units row", "Pass the complete ncu output.", text) from None
        if len(units) != len(header):
            raise NcuCsvError(f"line {h + 2}: units row has {len(units)} fields, header has {len(header)}",
                              "Pass the complete, unmodified ncu output.", text)
        missing = [c for c in _ID_COLUMNS if c not in header]
        if missing:
            raise NcuCsvError(f"line {h + 1}: header lacks {missing}", "Pass `--page raw` output.", text)
        if "Metric Name" in header and not any("__" in c for c in header):
            raise NcuCsvError(f"line {h + 1}: this is ncu's default 'details' page (columns Section Name, "
                              f"Metric Name, Metric Value), not the raw page with one column per metric",
                              "Profile again with `ncu --csv --page raw ...` (ncu_command adds it), or export the "
                              "report with `ncu --import report.ncu-rep --csv --page raw`.", text)
        idx = {c: header.index(c) for c in _ID_COLUMNS}
        metric_cols = [j for j, c in enumerate(header) if "__" in c
                       and (device_attributes or not c.startswith("device__attribute"))]
        j = h + 2
        while j < len(lines) and lines[j].startswith('"') and not lines[j].startswith('"ID",'):
            row = next(csv.reader([lines[j]]))
            if len(row) != len(header):
                raise NcuCsvError(f"line {j + 1}: {len(row)} fields, header has {len(header)}",
                                  "Pass the complete, unmodified ncu output.", text)
            launch = int(_number(row[idx["ID"]]))
            for c in metric_cols:
                records.append((labels[h], row[idx["Kernel Name"]], launch, header[c], units[c],
                                _number(row[c]), row[c]))
            j += 1
    if not records:
        if "No kernels were profiled" in text:
            raise NcuNoKernels("ncu profiled no kernel (\"No kernels were profiled\").", FIX_NO_KERNELS, text)
        if any(c in lines[h] for h in headers for c in ('"Section Name"', '"Metric Name"')):
            raise NcuCsvError("this CSV is ncu's default 'details' page (columns Section Name, Metric Name, "
                              "Metric Value: one row per metric), not the raw page (one row per launch)",
                              "Profile again with `ncu --csv --page raw ...` (ncu_command adds it), or export the "
                              "report with `ncu --import report.ncu-rep --csv --page raw`.", text)
        raise NcuCsvError("the ncu CSV has a header but no launch rows", "Check the launch window.", text)
    return pd.DataFrame.from_records(records, columns=["config", "kernel", "launch", "metric", "unit", "value", "text"])


# ---------------------------------------------------------------- derived views
KEYS = ["config", "kernel", "launch"]


def wide(df, metrics: Sequence[str] | None = None):
    """One row per (config, kernel, launch), one column per metric (values as floats)."""
    sub = df if metrics is None else df[df["metric"].isin(list(metrics))]
    out = sub.groupby([*KEYS, "metric"], sort=False)["value"].first().unstack("metric")
    out.columns.name = None
    return out.reset_index()


def _pick(df, columns: dict[str, str]):
    w = wide(df, list(columns))
    for m in columns:
        if m not in w.columns:
            w[m] = math.nan
    return w[KEYS + list(columns)].rename(columns=columns)


def speed_of_light(df):
    """Per launch: time (ns) and SM / memory throughput in % of peak (ncu's Speed of Light)."""
    return _pick(df, {"gpu__time_duration.sum": "time_ns", SOL[0]: "sm_pct", SOL[1]: "memory_pct"})


def _require(df, metrics: Sequence[str], what: str, fix: str) -> None:
    have = set(df["metric"]) if hasattr(df, "columns") and "metric" in df.columns else None
    if have is None:
        raise TypeError(f"{what}: got {type(df).__name__}; expected the DataFrame of parse_raw_csv")
    if not any(m in have for m in metrics):
        raise NcuCsvError(f"{what}: the CSV has none of {list(metrics)}; it holds {len(have)} other metrics "
                          f"(e.g. {sorted(have)[:3]})", fix)


def sectors_per_request(df):
    """Per launch: global-load sectors, requests and sectors per request (32-byte sectors).
    :class:`NcuCsvError` when the CSV has neither counter (profiled without them)."""
    _require(df, SECTORS, "sectors_per_request", f"Profile with --metrics {','.join(SECTORS)}.")
    w = _pick(df, {SECTORS[0]: "sectors", SECTORS[1]: "requests"})
    w["sectors_per_request"] = w["sectors"] / w["requests"].where(w["requests"] > 0)
    return w


def dram_bytes(df, useful_bytes=None):
    """Per launch: DRAM bytes read / written / total; with ``useful_bytes`` (a number, or a dict
    by config or kernel) also ``read_over_useful`` (how many bytes were read per byte the kernel needed)."""
    w = _pick(df, {DRAM[0]: "read_bytes", DRAM[1]: "write_bytes"})
    w["total_bytes"] = w["read_bytes"] + w["write_bytes"]
    if useful_bytes is not None:
        if isinstance(useful_bytes, dict):
            w["useful_bytes"] = [useful_bytes.get(c, useful_bytes.get(k, math.nan)) for c, k in zip(w["config"], w["kernel"], strict=True)]
        else:
            w["useful_bytes"] = float(useful_bytes)
        w["read_over_useful"] = w["read_bytes"] / w["useful_bytes"]
    return w


def hit_rates(df):
    """Per launch: L1 and L2 sector hit rates in %."""
    return _pick(df, {HIT_RATES[1]: "l1_hit_pct", HIT_RATES[0]: "l2_hit_pct"})


def occupancy(df):
    """Per launch: achieved occupancy (active warps, % of peak) and theoretical maximum (%)."""
    return _pick(df, {OCCUPANCY[0]: "achieved_pct", OCCUPANCY[1]: "theoretical_pct"})


def stall_breakdown(df):
    """Long table per launch: ``reason`` (e.g. ``long_scoreboard``), ``samples`` and ``share`` of all
    sampled warp states (the reasons' sum; ``selected`` = issuing is included), largest first."""
    reasons = df["metric"].map(_sampled_stall)
    sub = df[reasons.notna()].copy()
    if sub.empty:
        raise NcuCsvError(f"stall_breakdown: the CSV has no stall samples (smsp__pcsamp_warps_issue_stalled_*); "
                          f"its metrics: {sorted(set(df['metric']))[:5]}...",
                          "Profile with --metrics " + ",".join(STALLS[:3]) + ",... (measure.ncu.STALLS), or pass "
                          "the recorded ncu_copies_stalls.csv; use has_stalls(df) to test first.")
    sub["reason"] = reasons[sub.index]
    sub = sub.rename(columns={"value": "samples"})[[*KEYS, "reason", "samples"]]
    total = sub.groupby(KEYS, sort=False)["samples"].transform("sum")
    sub["share"] = sub["samples"] / total.where(total > 0)
    return sub.sort_values([*KEYS[:2], "launch", "samples"], ascending=[True, True, True, False]).reset_index(drop=True)


def scheduler(df):
    """Per launch: ``issue_active_pct`` (issue-slot utilisation: % of active cycles with an instruction
    issued), ``eligible_warps`` and ``active_warps`` (per scheduler per active cycle), from :data:`SCHEDULER`."""
    _require(df, SCHEDULER, "scheduler", f"Profile with --metrics {','.join(SCHEDULER)}.")
    return _pick(df, dict(zip(SCHEDULER, ("issue_active_pct", "eligible_warps", "active_warps"), strict=True)))


def has_stalls(df) -> bool:
    """Whether a tidy ncu frame holds stall samples (so :func:`stall_breakdown` has something to read)."""
    return bool(df["metric"].map(_sampled_stall).notna().any())


def summary(df):
    """Wide per-launch table of the common views joined (whatever metrics the CSV holds)."""
    out = speed_of_light(df)
    views = (dram_bytes, hit_rates, occupancy) + ((sectors_per_request,) if set(SECTORS) & set(df["metric"]) else ())
    for view in views:
        out = out.merge(view(df), on=KEYS, how="left")
    return out


# ---------------------------------------------------------------- source page: counters per SASS instruction
# The source page's per-reason sample columns carry ncu's short labels (``stall_long_sb``, ...; a second set
# ends in " (Not Issued)"); this maps each label to the reason name of STALL_REASONS / stall_breakdown.
SOURCE_STALL_COLUMNS = {
    "barrier": "barrier", "branch_resolving": "branch_resolving", "dispatch": "dispatch_stall", "drain": "drain",
    "imc": "imc_miss", "lg": "lg_throttle", "long_sb": "long_scoreboard", "math": "math_pipe_throttle",
    "membar": "membar", "mio": "mio_throttle", "misc": "misc", "no_inst": "no_instruction",
    "not_selected": "not_selected", "selected": "selected", "short_sb": "short_scoreboard", "sleep": "sleeping",
    "sleeping": "sleeping", "tex": "tex_throttle", "wait": "wait", "gmma": "gmma"}
# what the source-page parser looks for (matched by substring, case-insensitive: labels moved between versions,
# e.g. "Warp Stall Sampling (All Cycles)" before "(All Samples)")
SOURCE_COLUMNS = {"address": "Address", "sass": "Source", "samples": "Warp Stall Sampling (All",
                  "samples_not_issued": "Warp Stall Sampling (Not-issued", "inst_executed": "Instructions Executed",
                  "reasons": "stall_<reason>"}



_ADDRESS = re.compile(r"^(0[xX][0-9a-fA-F]+|[1-9][0-9]*|0)$")  # ncu prints 0x...; a plain decimal is accepted too


def _source_header(lines: list[str]) -> int | None:
    for i, ln in enumerate(lines):
        if ('"Address"' in ln and ('"Source"' in ln or '"SASS"' in ln)) or ln.startswith("Address,"):
            return i
    return None


def _col(header: list[str], want: str, exact: bool = False) -> int | None:
    low = [h.strip().lower() for h in header]
    w = want.lower()
    hits = [i for i, h in enumerate(low) if (h == w if exact else w in h)]
    return hits[0] if hits else None


def _opcode(sass: str) -> str:
    """Mnemonic of one SASS line without its predicate: ``'@!P0 LDG.E.128 R4, desc[UR4][R2.64]'`` ->
    ``'LDG.E.128'``."""
    words = sass.strip().rstrip(";").split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def parse_source_csv(text: str):
    """Tidy DataFrame from ncu's Source page as CSV (``--page source --print-source sass --csv``), one row
    per SASS instruction: ``config`` (the recorder's block label), ``kernel``, ``address`` (int), ``pc_offset``
    (bytes from the kernel's first instruction), ``sass`` (the instruction text), ``opcode`` (mnemonic with
    modifiers, e.g. ``LDG.E.128``), ``op`` (before the first dot, ``LDG``), ``samples`` (warp-state samples at
    this instruction, all reasons), ``samples_not_issued``, ``inst_executed`` (warp-level executions) and one
    column per stall reason (names as in :data:`STALL_REASONS`; ncu's ``stall_<label>`` columns, not their
    ``(Not Issued)`` twins). Columns are found by substring (:data:`SOURCE_COLUMNS`); a CSV without them raises
    :class:`NcuCsvError` naming the columns seen and those expected."""
    if not isinstance(text, str):
        raise TypeError(f"ncu source page is {type(text).__name__}; expected str (the CSV text)")
    lines = text.splitlines()
    if _source_header(lines) is None:
        what = ("ncu's raw page (one row per launch), not the Source page" if _find_headers(lines) else
                f"no Source page header (a row with \"Address\" and \"Source\"); the text begins {text[:120]!r}")
        raise NcuCsvError(f"parse_source_csv: {what}",
                          "Export the report with `ncu --import REPORT.ncu-rep --csv --page source --print-source "
                          "sass` (measure.ncu.source_commands).", text)
    starts = {b["first_line"]: b["label"] for b in read_blocks(text)}
    records, label, kernel, cols = [], "", "", None
    reasons: list[str] = []
    for i, ln in enumerate(lines):
        label = starts.get(i, label)
        if not ln.strip() or ln.startswith("=="):
            continue
        row = next(csv.reader([ln]))
        first = row[0].strip() if row else ""
        if first in ("Kernel Name", "Function Name") and len(row) > 1:
            kernel = row[1].strip()
            continue
        if "Address" in [c.strip() for c in row] and {"Source", "SASS"} & {c.strip() for c in row}:
            header = [c.strip() for c in row]
            cols = {k: _col(header, v, exact=k in ("address", "sass", "inst_executed"))
                    for k, v in SOURCE_COLUMNS.items() if k != "reasons"}
            if cols["sass"] is None:  # a version that names the instruction column after the view
                cols["sass"] = _col(header, "SASS", exact=True)
            stall = {j: h[len("stall_"):] for j, h in enumerate(header)
                     if h.lower().startswith("stall_") and not h.endswith("(Not Issued)")}
            missing = [SOURCE_COLUMNS[k] for k in ("address", "sass", "samples") if cols[k] is None]
            if missing or not stall:
                raise NcuCsvError(f"parse_source_csv: line {i + 1}: the header lacks {missing or []}"
                                  f"{'' if stall else ' and every stall_<reason> column'}; columns seen: {header}; "
                                  f"expected (by substring): {list(SOURCE_COLUMNS.values())}",
                                  "Collect the SourceCounters and WarpStateStats sections (measure.ncu.SOURCE_SECTIONS) "
                                  "and export with --page source --print-source sass.", text)
            cols["stall"] = {j: SOURCE_STALL_COLUMNS.get(s, s) for j, s in stall.items()}
            reasons += [r for r in cols["stall"].values() if r not in reasons]
            continue
        if cols is None or len(row) <= cols["address"] or not _ADDRESS.match(row[cols["address"]].strip()):
            continue  # not an instruction row (a source line, a separator, "-")
        def get(k, row=row, cols=cols):
            return _number(row[cols[k]]) if cols.get(k) is not None and cols[k] < len(row) else math.nan
        rec = {"config": label, "kernel": kernel, "address": int(row[cols["address"]].strip(), 0),
               "sass": row[cols["sass"]].strip(), "samples": get("samples"),
               "samples_not_issued": get("samples_not_issued"), "inst_executed": get("inst_executed")}
        for j, r in cols["stall"].items():
            rec[r] = rec.get(r, 0.0) + (_number(row[j]) if j < len(row) else math.nan)
        records.append(rec)
    if not records:
        raise NcuCsvError("parse_source_csv: the Source page has a header but no instruction rows (addresses 0x...)",
                          "Check the capture profiled a launch; export the complete report.", text)
    df = pd.DataFrame.from_records(records)
    for r in reasons:
        df[r] = df[r].fillna(0.0) if r in df.columns else 0.0
    df["opcode"] = df["sass"].map(_opcode)
    df["op"] = df["opcode"].str.split(".").str[0]
    df["pc_offset"] = df["address"] - df.groupby(["config", "kernel"], sort=False)["address"].transform("min")
    return df[["config", "kernel", "address", "pc_offset", "sass", "opcode", "op", "samples", "samples_not_issued",
               "inst_executed", *reasons]]


OPCODE_MIX = "sass__inst_executed_per_opcode"  # InstructionStats: warp-level executed instructions per SASS opcode
_INSTANCE = re.compile(r"([A-Z][A-Z0-9_.]*)\s*:\s*([0-9][0-9,]*(?:\.[0-9]+)?)")


def opcode_census(df):
    """Executed instructions per opcode per launch from a tidy raw frame (:func:`parse_raw_csv`) of a report
    exported with ``--print-metric-instances details``: the cell of :data:`OPCODE_MIX` reads
    ``"total (OPCODE: n; ...)"``. Returns ``(config, kernel, launch, opcode, executed)``. :class:`NcuCsvError`
    when the metric is absent or its cell carries no per-opcode values (exported without instances)."""
    _require(df, [OPCODE_MIX], "opcode_census", f"Collect the InstructionStats section ({OPCODE_MIX}).")
    rows = []
    for r in df[df["metric"] == OPCODE_MIX].itertuples():
        pairs = _INSTANCE.findall(str(r.text))
        if not pairs:
            raise NcuCsvError(f"opcode_census: the {OPCODE_MIX} cell of {r.kernel!r} is {str(r.text)[:60]!r}, without "
                              f"per-opcode values; expected \"total (OPCODE: n; ...)\"",
                              "Export with `ncu --import R.ncu-rep --csv --page raw --print-metric-instances details`.")
        rows += [(r.config, r.kernel, r.launch, op, _number(v)) for op, v in pairs]
    return pd.DataFrame(rows, columns=[*KEYS, "opcode", "executed"])
