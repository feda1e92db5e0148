"""The regression gates' files, read: the threshold file (``data/gates.json``) and the reference ratios a
time-ratio gate is held to (the recorded ``gates_gpu`` samples, else the ``bench`` record). Reading only:
measuring is :mod:`infralens_lab.measure.gates`'s, verdicts :mod:`infralens_lab.analysis.gates`'s."""
from __future__ import annotations

import json
from pathlib import Path

from .. import evidence
from ..errors import InfraLensError
from ..stats import percentile

METRICS = {
    "aten_ops_per_step": "aten operator calls below autograd per step",
    "syncs_per_step": "calls per step that make the host wait for the device on a GPU",
    "launches_per_step": "Triton kernel launches per step (CUDA launch calls in a GPU trace)",
    "graph_breaks": "graph breaks torch._dynamo.explain finds in the compiled function",
    "peak_bytes": "peak bytes live above the step's start (byte)",
}
SCHEMA = 1
# The builds a count can be measured on (measure.gates.count_build): a CPU wheel of torch (interpreter mode), a CUDA
# wheel in interpreter mode (the steps on the CPU, as `make gates-gpu` runs the count gates), a CUDA wheel on its GPU.
BUILDS = ("cpu", "cuda-interpreter", "cuda-gpu")
COUNTS_BUILD = "cpu"  # the build the file's "counts" hold for when the file does not say
DEFAULT_THRESHOLDS = Path(__file__).resolve().parents[2] / "data" / "gates.json"


class ThresholdError(InfraLensError, ValueError):
    """The threshold file is missing, malformed, or names a workload or metric that does not exist."""
# The time-ratio gates the threshold file may name, the one list: bench ratio name -> the pair measure.gates times
# for it ("copy": the Triton copy against torch's copy_; otherwise the attention variant against SDPA, or
# "tiled_fast_vs_naive_torch"). measure.gates.RATIO_GATES is built from this table, so the two cannot differ.
RATIO_GATE_PAIRS = {
    "coalesced / copy_ (float32)": "copy",
    "tiled_fast / sdpa_default @ 4x16x4096x64 float16": "tiled_fast",
    "tiled / sdpa_default @ 4x16x4096x64 float16": "tiled",
    "tiled_fast / naive_torch @ 4x16x4096x64 float16": "tiled_fast_vs_naive_torch",
}
RATIO_GATE_NAMES = tuple(RATIO_GATE_PAIRS)


def load_thresholds(path: str | Path | None = None) -> dict:
    """Read and validate a threshold file (format in the module doc; default ``data/gates.json``)."""
    from ..workloads.gated import GATED  # lazy: workloads import torch; reading a file should not

    p = Path(path) if path is not None else DEFAULT_THRESHOLDS
    if not p.is_file():
        raise ThresholdError(f"no threshold file at {p}; expected a JSON file like data/gates.json "
                             f"(pass its path, or restore data/gates.json from git)")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ThresholdError(f"threshold file {p} is not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        seen = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ThresholdError(f"threshold file {p}: schema {seen!r}; expected an object with \"schema\": {SCHEMA}")
    extra = sorted(set(data) - {"schema", "note", "counts", "ratios", "counts_build", "build_dependent",
                                "counts_by_build"})
    if extra:
        raise ThresholdError(f"threshold file {p}: unknown keys {extra}; expected schema, note, counts, ratios, "
                             "counts_build, build_dependent, counts_by_build")
    counts = data.get("counts", {})
    if not isinstance(counts, dict):
        raise ThresholdError(f"threshold file {p}: \"counts\" is {type(counts).__name__}; expected an object")
    for wl, rules in counts.items():
        if wl not in GATED:
            raise ThresholdError(f"threshold file {p}: unknown workload {wl!r}; expected one of {sorted(GATED)}")
        if not isinstance(rules, dict) or not rules:
            raise ThresholdError(f"threshold file {p}: counts[{wl!r}] is {rules!r}; expected {{metric: rule}}")
        for metric, rule in rules.items():
            if metric not in METRICS:
                raise ThresholdError(f"threshold file {p}: unknown metric {metric!r} for {wl!r}; expected one "
                                     f"of {sorted(METRICS)}")
            _check_rule(p, f"counts[{wl!r}][{metric!r}]", rule)
    home = data.get("counts_build", COUNTS_BUILD)
    if home not in BUILDS:
        raise ThresholdError(f"threshold file {p}: counts_build {home!r}; expected one of {list(BUILDS)}")
    dep = data.get("build_dependent", {})
    if not isinstance(dep, dict) or any(m not in METRICS or not isinstance(why, str) or not why
                                        for m, why in dep.items()):
        raise ThresholdError(f"threshold file {p}: build_dependent = {dep!r}; expected {{metric: reason (text)}} "
                             f"with metrics among {sorted(METRICS)}")
    by_build = data.get("counts_by_build", {})
    if not isinstance(by_build, dict) or any(b not in BUILDS for b in by_build):
        raise ThresholdError(f"threshold file {p}: counts_by_build has builds {sorted(by_build) if isinstance(by_build, dict) else by_build!r}; "
                             f"expected an object keyed by builds among {list(BUILDS)}")
    for b, wls in by_build.items():
        for wl, rules in (wls.items() if isinstance(wls, dict) else [(None, None)]):
            if wl not in counts or not isinstance(rules, dict) or any(m not in dep for m in rules):
                raise ThresholdError(f"threshold file {p}: counts_by_build[{b!r}][{wl!r}] = {rules!r}; expected "
                                     f"rules for a workload of \"counts\" ({sorted(counts)}) and only for the "
                                     f"build-dependent metrics {sorted(dep)}")
            for metric, rule in rules.items():
                _check_rule(p, f"counts_by_build[{b!r}][{wl!r}][{metric!r}]", rule)
    ratios = data.get("ratios", {})
    if not isinstance(ratios, dict):
        raise ThresholdError(f"threshold file {p}: \"ratios\" is {type(ratios).__name__}; expected an object")
    for name, r in ratios.items():
        if name not in RATIO_GATE_NAMES:
            raise ThresholdError(f"threshold file {p}: unknown ratio {name!r}; expected one of {sorted(RATIO_GATE_NAMES)}")
        tol, k = (r.get("tolerance"), r.get("k")) if isinstance(r, dict) else (None, None)
        if not (isinstance(tol, (int, float)) and 0 < tol < 1 and isinstance(k, int) and k >= 1):
            raise ThresholdError(f"threshold file {p}: ratios[{name!r}] = {r!r}; expected "
                                 f"{{\"tolerance\": fraction in (0, 1), \"k\": int >= 1}}")
    return {"path": str(p), "counts": counts, "ratios": ratios, "note": data.get("note", ""), "counts_build": home,
            "build_dependent": dep, "counts_by_build": by_build}


def _check_rule(p, where: str, rule) -> None:
    bad = not isinstance(rule, dict) or sum(k in rule for k in ("max", "equals")) != 1 \
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rule.values()) \
        or set(rule) - {"max", "equals", "slack"}
    if bad:
        raise ThresholdError(f"threshold file {p}: {where} = {rule!r}; expected "
                             f"{{\"max\": number}} or {{\"equals\": number}}, optionally with \"slack\"")


def reference_ratios(store=None) -> dict[str, float]:
    """``{ratio name: value}`` from the committed reference set's ``bench`` record."""
    st = store if store is not None else evidence.reference()
    return {r["name"]: float(r["value"]) for r in st.load("bench").values["ratios"]}


def gate_references(store=None) -> dict[str, tuple[float, str]]:
    """``{ratio name: (value, source)}`` a ratio gate is held to: the median of the reference set's
    recorded ``gates_gpu`` ``ratio_gates`` samples, which :func:`ratio_samples` measured by the same
    procedure as the gate (``source`` ``"gates_gpu"``). The bench's ratio of the same pair is a different
    procedure (CUDA-event timing of the kernel alone) and differs from it by several percent on the
    recorded GPUs, so it is only the fallback for a set recorded before ``gates_gpu`` existed
    (``source`` ``"bench"``), and the gate's message says so."""
    st = store if store is not None else evidence.reference()
    out = {name: (v, "bench") for name, v in reference_ratios(st).items()}
    if "gates_gpu" in st.names():
        for name, xs in st.load("gates_gpu").values.get("ratio_gates", {}).items():
            if xs:
                out[name] = (float(percentile(xs, 50)), "gates_gpu")
    return out
