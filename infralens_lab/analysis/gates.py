"""Regression gates as arithmetic: count rules, time ratios with a tolerance, and how many runs to take.

Two kinds of gate (see :mod:`infralens_lab.measure.gates` for the measuring side):

* **count gates** compare a count (aten ops per step, syncs per step, launches per step, graph
  breaks, peak bytes) with a rule from the threshold file: ``max`` (at most), ``equals`` (exactly),
  with an optional ``slack`` fraction for byte counts. Counts do not depend on how busy the machine
  is, so the rule can be exact and the gate never flakes.
* **ratio gates** compare the speed of a candidate with a reference measured *in the same run*
  (``ratio = t_reference / t_candidate``, above 1 when the candidate is faster: the bench's
  convention). A machine that is slower today slows both, so the ratio moves much less than either
  time. The gate takes the median of ``k`` ratios and fails when it falls more than ``tolerance``
  (a fraction) below the expected ratio.

How to choose ``k`` and the tolerance from data: measure ``n`` ratios of the *unchanged* code (an
A/A run). Their spread ``(p90 - p10) / median`` is the noise one ratio carries. The median of ``k``
ratios varies less; :func:`median_band` bootstraps how much, and :func:`false_alarm_rate` says how
often an unchanged candidate would fail at a given tolerance. Pick the tolerance a little above the
noise of the median of ``k`` (so false alarms are rare) and below the smallest slowdown you want to
catch; :func:`runs_needed` gives the ``k`` a normal model asks for. Fractions throughout (0.05 = 5%).
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..stats import percentile

RULES = ("max", "equals")
_Z90 = 1.2816  # the normal distribution's 90th percentile, in standard deviations
_MEDIAN_SE = math.sqrt(math.pi / 2)  # standard error of a median / that of a mean, for normal samples


@dataclass(frozen=True)
class Verdict:
    """One gate's outcome: ``measured`` against ``limit`` under ``rule``; ``passed`` and a sentence."""

    gate: str
    metric: str
    measured: float
    limit: float
    rule: str
    passed: bool
    message: str
    skipped: bool = False  # measured but not held to a limit (a build-dependent count on another build)

    def as_dict(self) -> dict:
        return {"gate": self.gate, "metric": self.metric, "measured": self.measured, "limit": self.limit,
                "rule": self.rule, "passed": self.passed, "skipped": self.skipped, "message": self.message}


def skipped_verdict(gate: str, metric: str, measured: float, rule: dict, build: str, home: str, why: str) -> Verdict:
    """A count measured on ``build`` whose rule was measured on another build (``home``) and differs by build
    (``why``): reported with its value and the reason, never held to the other build's limit (``passed`` True,
    ``skipped`` True)."""
    if build == home:
        raise ValueError(f"gate {gate!r} metric {metric!r}: build {build!r} is the build its rule was measured on; "
                         "expected another build to skip it on")
    kind = "max" if "max" in rule else "equals"
    limit = float(rule[kind])
    msg = (f"{metric} = {measured:g}, not gated on this build ({build}): the file's limit {limit:g} was measured on "
           f"{home}, and {why}; record this build's own limit with `python -m infralens_lab gates --record-counts`")
    return Verdict(gate, metric, float(measured), limit, kind, True, msg, skipped=True)


def count_verdict(gate: str, metric: str, measured: float, rule: dict) -> Verdict:
    """Hold a measured count against a rule ``{"max": x}`` or ``{"equals": x}`` (optional ``"slack"``:
    a fraction the count may exceed ``max`` by, for byte counts whose last few percent depend on the
    library build). Raises ValueError for a rule without exactly one of ``max``/``equals``."""
    kinds = [k for k in RULES if k in rule]
    if len(kinds) != 1:
        raise ValueError(f"gate {gate!r} metric {metric!r}: rule {rule!r}; expected exactly one of {RULES}")
    kind = kinds[0]
    limit = float(rule[kind])
    slack = float(rule.get("slack", 0.0))
    if not 0 <= slack < 1:
        raise ValueError(f"gate {gate!r} metric {metric!r}: slack={slack!r}; expected a fraction in [0, 1)")
    if kind == "equals":
        ok = float(measured) == limit
        msg = f"{metric} = {measured:g}, expected exactly {limit:g}"
    else:
        allowed = limit * (1 + slack)
        ok = float(measured) <= allowed
        msg = f"{metric} = {measured:g}, allowed at most {limit:g}" + (f" (+{slack:.0%})" if slack else "")
    if not ok:
        msg += (": a regression, or an intended change: if intended, set the new value in the threshold file")
    return Verdict(gate, metric, float(measured), limit, kind, ok, msg)


def spread(samples: Sequence[float]) -> float:
    """``(p90 - p10) / median`` of ``samples``: the relative noise band (a fraction)."""

    med = percentile(samples, 50)
    if med == 0:
        raise ValueError("median of the samples is 0; a spread relative to it is undefined")
    return (percentile(samples, 90) - percentile(samples, 10)) / med


def ratio_verdict(gate: str, ratios: Sequence[float], expected: float, tolerance: float) -> Verdict:
    """A ratio gate: the median of ``ratios`` (t_reference / t_candidate from one run, k of them)
    against ``expected`` (the committed reference's ratio). Fails when the median is below
    ``expected * (1 - tolerance)``. The message also says when the measured spread is wider than the
    tolerance: then one run cannot decide, and ``k`` should grow (:func:`runs_needed`)."""

    if not ratios:
        raise ValueError(f"gate {gate!r}: no ratios measured; expected k >= 1 ratios")
    if not (isinstance(expected, (int, float)) and expected > 0):
        raise ValueError(f"gate {gate!r}: expected ratio {expected!r}; expected a positive number")
    if not 0 < tolerance < 1:
        raise ValueError(f"gate {gate!r}: tolerance={tolerance!r}; expected a fraction in (0, 1)")
    med = percentile(ratios, 50)
    limit = expected * (1 - tolerance)
    ok = med >= limit
    s = spread(ratios) if len(ratios) > 1 else 0.0
    msg = (f"median ratio {med:.3f} over k={len(ratios)} (p10-p90 spread {s:.1%}); reference {expected:.3f}, "
           f"gate at {limit:.3f} (-{tolerance:.0%})")
    if s > tolerance:
        msg += f"; spread {s:.1%} is wider than the tolerance: take more runs before trusting this verdict"
    return Verdict(gate, "time_ratio", med, limit, "min", ok, msg)


def _check_k(k) -> None:
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k={k!r}; expected an int >= 1 (runs per median)")


def median_band(samples: Sequence[float], k: int, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Bootstrap the median of ``k`` runs drawn from ``samples``: its ``(p10, median, p90)``.

    What a gate taking ``k`` runs would see on this machine, from runs already measured (resampled
    with replacement, a fixed ``seed`` so the answer is reproducible for the same samples)."""

    _check_k(k)
    if len(samples) < 2:
        raise ValueError(f"{len(samples)} samples; expected at least 2 to resample")
    rng = random.Random(seed)
    xs = list(map(float, samples))
    meds = [percentile([rng.choice(xs) for _ in range(k)], 50) for _ in range(n_boot)]
    return percentile(meds, 10), percentile(meds, 50), percentile(meds, 90)


def false_alarm_rate(ratios: Sequence[float], k: int, tolerance: float, n_boot: int = 2000, seed: int = 0) -> float:
    """How often a gate on the median of ``k`` ratios would fail an *unchanged* candidate.

    ``ratios`` come from an A/A run (the same code as reference and candidate); the expected ratio is
    their own median. A failure is a bootstrap median more than ``tolerance`` below it."""

    _check_k(k)
    if len(ratios) < 2:
        raise ValueError(f"{len(ratios)} ratios; expected at least 2 to resample")
    rng = random.Random(seed)
    xs = list(map(float, ratios))
    limit = percentile(xs, 50) * (1 - tolerance)
    fails = sum(percentile([rng.choice(xs) for _ in range(k)], 50) < limit for _ in range(n_boot))
    return fails / n_boot


def false_alarm_exact(ratios: Sequence[float], k: int, tolerance: float) -> float:
    """The false-alarm rate :func:`false_alarm_rate` estimates, computed exactly: the probability that the median of
    ``k`` ratios drawn with replacement from ``ratios`` lies more than ``tolerance`` below their median. For odd
    ``k`` the median is the middle draw, so it is below the limit exactly when at least ``(k + 1) / 2`` draws are:
    with ``p`` the share of ``ratios`` below the limit, the binomial tail ``sum C(k, j) p^j (1 - p)^(k - j)`` over
    ``j >= (k + 1) / 2``. The bootstrap's answer scatters around it by its own sampling error (about
    ``sqrt(rate (1 - rate) / n_boot)``)."""
    _check_k(k)
    if k % 2 == 0:
        raise ValueError(f"k={k}; expected an odd k (the median of an even k averages two draws: no binomial tail)")
    if len(ratios) < 2:
        raise ValueError(f"{len(ratios)} ratios; expected at least 2 to draw from")
    xs = list(map(float, ratios))
    limit = percentile(xs, 50) * (1 - tolerance)
    p = sum(x < limit for x in xs) / len(xs)
    return float(sum(math.comb(k, j) * p ** j * (1 - p) ** (k - j) for j in range((k + 1) // 2, k + 1)))


def detection_rate(ratios: Sequence[float], k: int, tolerance: float, slowdown: float, n_boot: int = 2000,
                   seed: int = 1) -> float:
    """How often the same gate would catch a candidate ``slowdown`` (a fraction, 0.1 = 10% slower) worse
    than the A/A ``ratios`` show: each resampled ratio divided by ``1 + slowdown``. A model applied to
    measured noise, not a measurement of a slower candidate."""
    if slowdown < 0:
        raise ValueError(f"slowdown={slowdown!r}; expected a fraction >= 0")

    _check_k(k)
    rng = random.Random(seed)
    xs = list(map(float, ratios))
    limit = percentile(xs, 50) * (1 - tolerance)
    hits = sum(percentile([rng.choice(xs) / (1 + slowdown) for _ in range(k)], 50) < limit for _ in range(n_boot))
    return hits / n_boot


def runs_needed(spread_one: float, tolerance: float, z: float = 2.0) -> int:
    """Runs ``k`` so that the median of ``k`` ratios stays within ``tolerance`` of its centre ``z``
    standard errors out (z=2: about 1 false alarm in 40 on the low side), for ratios whose single-run
    spread ``(p90 - p10) / median`` is ``spread_one``.

    Normal model: one ratio's standard deviation is ``spread_one / (2 * 1.2816)``; a median of ``k``
    has a standard error ``sqrt(pi / 2)`` times that over ``sqrt(k)``. So
    ``k = ceil((z * sqrt(pi/2) * sd / tolerance) ** 2)``, at least 1."""
    if spread_one < 0:
        raise ValueError(f"spread_one={spread_one!r}; expected a fraction >= 0")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance={tolerance!r}; expected a fraction in (0, 1)")
    sd = spread_one / (2 * _Z90)
    return max(1, math.ceil((z * _MEDIAN_SE * sd / tolerance) ** 2))


# The steps a threshold file picks from (fractions). None is below 3%: samples from one run cannot show the drift
# between runs, and on the H200 (2026-11-23) the gate medians moved by up to 1.9% between processes (the interim
# and final recordings, and a separate `gates --ratios` run), so a 2% gate would fail unchanged code.
TOLERANCES = (0.03, 0.05, 0.08, 0.10)


def choose_gate(sample_sets: Sequence[Sequence[float]], tolerances: Sequence[float] = TOLERANCES,
                k_min: int = 3, k_max: int = 9, max_false_alarms: float = 0.01) -> tuple[float, int]:
    """``(tolerance, k)`` for one ratio gate from unchanged-code samples of it (one list per reference
    GPU): the smallest ``tolerance`` for which some ``k`` from ``max(k_min, runs_needed(spread))`` (the
    largest over the lists) up to ``k_max`` keeps the bootstrapped :func:`false_alarm_rate` at most
    ``max_false_alarms`` on every list, with the smallest such ``k``. ``k_min`` 3: a median of fewer runs
    is one unlucky run away from a false alarm whatever the spread says; a larger ``k`` also outvotes a
    lone slow run that a p10-p90 spread does not see. Raises when no tolerance in
    ``tolerances`` qualifies (the ratio is too noisy to gate at those steps)."""
    sets = [list(map(float, xs)) for xs in sample_sets]
    if not sets or any(len(xs) < 2 for xs in sets):
        raise ValueError(f"sample lists of lengths {[len(xs) for xs in sets]}; expected at least one, each of 2 or more")
    for tol in sorted(tolerances):
        k0 = max(k_min, *(runs_needed(spread(xs), tol) for xs in sets))
        for k in range(k0, k_max + 1):  # more runs also outvote a lone outlier the spread does not show
            if all(false_alarm_rate(xs, k, tol) <= max_false_alarms for xs in sets):
                return tol, k
    raise ValueError(f"no tolerance in {sorted(tolerances)} keeps k <= {k_max} with false alarms <= "
                     f"{max_false_alarms:.0%}; spreads {[round(spread(xs), 4) for xs in sets]}")


def suggest(stores) -> list[dict]:
    """Per ratio gate recorded in the ``gates_gpu`` records of ``stores``: the tolerance and k
    :func:`choose_gate` picks from all of them, with each set's median, spread and GPU."""
    per: dict[str, list] = {}
    for st in stores:
        if "gates_gpu" not in st.names():
            continue
        for name, xs in st.load("gates_gpu").values.get("ratio_gates", {}).items():
            per.setdefault(name, []).append((st.gpu, xs))

    rows = []
    for name, got in per.items():
        tol, k = choose_gate([xs for _, xs in got])
        rows.append({"ratio": name, "tolerance": tol, "k": k,
                     "sets": {gpu: {"median": percentile(xs, 50), "spread": spread(xs), "n": len(xs)}
                              for gpu, xs in got}})
    return rows


def absolute_flake_rate(times: Sequence[float], threshold: float) -> float:
    """Share of ``times`` above an absolute ``threshold`` (same unit): how often an absolute time gate
    set at ``threshold`` fails runs of unchanged code."""
    if not times:
        raise ValueError("no times; expected at least one")
    return sum(float(t) > threshold for t in times) / len(times)


# ---------------------------------------------------------------- tables a lab reads
KS = (1, 3, 5, 9, 15, 31)  # the k a table of the median of k runs shows


def k_table(ratios: Sequence[float], tolerance: float, slowdown: float = 0.03, ks: Sequence[int] = KS):
    """For each k in ``ks``: the p10-p90 band of the median of k ``ratios`` (:func:`median_band`) in percent
    of its middle, how often a gate at ``tolerance`` fails an unchanged candidate (:func:`false_alarm_rate`)
    and how often it catches one ``slowdown`` slower (:func:`detection_rate`), both in percent. Columns
    ``k, median_p10, median_p90, band_pct, false_alarm_pct, caught_pct`` (``attrs``: tolerance, slowdown)."""
    rows = []
    for k in ks:
        lo, med, hi = median_band(ratios, k)
        rows.append({"k": k, "median_p10": lo, "median_p90": hi, "band_pct": 100 * (hi - lo) / med,
                     "false_alarm_pct": 100 * false_alarm_rate(ratios, k, tolerance),
                     "caught_pct": 100 * detection_rate(ratios, k, tolerance, slowdown)})
    out = pd.DataFrame(rows)
    out.attrs.update(tolerance=tolerance, slowdown=slowdown)
    return out


def smallest_k(table, max_false_alarm_pct: float = 1.0) -> int | None:
    """The smallest k of a :func:`k_table` whose false-alarm rate is at most ``max_false_alarm_pct``; None if
    no k in the table gets there."""
    ok = table[table["false_alarm_pct"] <= max_false_alarm_pct]
    return None if ok.empty else int(ok["k"].min())


def _check_pair(a_ms: Sequence[float], b_ms: Sequence[float]) -> None:
    """An A/A run's two timing lists: equal lengths, at least two each."""
    if len(a_ms) != len(b_ms) or len(a_ms) < 2:
        raise ValueError(f"{len(a_ms)} a timings and {len(b_ms)} b timings; expected two equal lists of 2 or more")


def noise_table(a_ms: Sequence[float], b_ms: Sequence[float]):
    """Spread of two identical steps timed alternately (an A/A run): per quantity (``a``, ``b``, ``a / b``)
    its median, p10, p90 and ``spread_pct`` (:func:`spread`). Drift common to a and b (clock, heat, neighbour load)
    cancels in ``a / b``; each timing's own noise adds in it (about sqrt(2) times one timing's spread when the two
    are equal and independent). Which wins is measured, not assumed: :func:`noise_verdict`."""
    _check_pair(a_ms, b_ms)
    series = {"a (ms)": list(a_ms), "b (ms)": list(b_ms), "a / b": [x / y for x, y in zip(a_ms, b_ms, strict=True)]}
    return pd.DataFrame([{"what": w, "median": percentile(x, 50), "p10": percentile(x, 10), "p90": percentile(x, 90),
                          "spread_pct": 100 * spread(x)} for w, x in series.items()])


NOISE_SHARED_BELOW = 1.0  # ratio spread / a's spread below 1: drift a and b share outweighed each one's own noise
INDEPENDENT_QUOTIENT = math.sqrt(2)  # the quotient of equal, independent noise in a and b and nothing shared


def spread_quotient(a_ms: Sequence[float], b_ms: Sequence[float]) -> float:
    """The p10-p90 spread of ``a / b`` over that of ``a`` alone (:func:`spread`), for one A/A run."""
    a_ms, b_ms = [float(x) for x in a_ms], [float(x) for x in b_ms]
    _check_pair(a_ms, b_ms)
    sa = spread(a_ms)
    if sa <= 0:
        raise ValueError(f"a's timings {list(a_ms)[:5]}... do not spread; the quotient is undefined")
    return spread([x / y for x, y in zip(a_ms, b_ms, strict=True)]) / sa


def noise_verdict(quotient: float) -> str:
    """Which noise an A/A run's :func:`spread_quotient` shows, with the rule's threshold."""
    if quotient < NOISE_SHARED_BELOW:
        return (f"ratio/time spread {quotient:.2f} < {NOISE_SHARED_BELOW:g}: drift common to a and b outweighed each "
                "timing's own noise, and it cancels in a / b")
    return (f"ratio/time spread {quotient:.2f} >= {NOISE_SHARED_BELOW:g}: each timing's own noise outweighed the "
            f"drift they share, and it adds up in a / b ({INDEPENDENT_QUOTIENT:.2f} for equal independent noise alone)")


def process_quotients(processes: Sequence[dict]) -> dict:
    """:func:`spread_quotient` of each A/A process (``[{a_ms, b_ms}, ...]``, a ``gates_gpu`` record's
    ``aa_processes``): ``quotients``, their ``median`` and ``shared`` (how many fall below
    :data:`NOISE_SHARED_BELOW`)."""
    if not processes:
        raise ValueError("no A/A processes; expected a list of {'a_ms': [...], 'b_ms': [...]}")
    q = [spread_quotient(p["a_ms"], p["b_ms"]) for p in processes]
    return {"quotients": q, "median": percentile(q, 50), "shared": sum(x < NOISE_SHARED_BELOW for x in q)}


def ratio_helped(noise) -> bool:
    """From a :func:`noise_table`: True when the ratio ``a / b`` spread less than ``a`` alone did (the rule of
    :func:`noise_verdict`: drift both shared outweighed each one's own noise); False otherwise."""
    s = noise.set_index("what")["spread_pct"]
    return bool(s["a / b"] < NOISE_SHARED_BELOW * s["a (ms)"])


BETWEEN = "between groups: medians apart (%)"  # the drift table's last row


def drift_table(groups: dict):
    """A/A timings in several groups (``{group: (a_ms, b_ms)}``: processes, machines, load states): per group
    the median of ``a`` and of ``a / b``, then a row ``between groups``: how far the group medians are apart,
    ``(max - min) / median`` in percent, for the absolute time and for the ratio. A ratio wins when something
    slows a and b alike between groups (the absolute medians move, the ratio's do not); inside one group it wins
    or loses by how much of the noise a and b share (:func:`noise_verdict`)."""
    if len(groups) < 2:
        raise ValueError(f"{len(groups)} group(s); expected at least 2 to compare")
    rows = []
    for g, (a, b) in groups.items():
        r = [x / y for x, y in zip(a, b, strict=True)]
        rows.append({"group": str(g), "a_median_ms": percentile(a, 50), "ratio_median": percentile(r, 50),
                     "a_spread_pct": 100 * spread(a), "ratio_spread_pct": 100 * spread(r)})
    t = pd.DataFrame(rows)

    def apart(x):
        return 100 * (x.max() - x.min()) / x.median()

    # the last row holds percentages under the median columns; its label says so
    rows.append({"group": BETWEEN, "a_median_ms": apart(t["a_median_ms"]),
                 "ratio_median": apart(t["ratio_median"]), "a_spread_pct": None, "ratio_spread_pct": None})
    out = pd.DataFrame(rows)
    out.attrs["between_pct"] = {"absolute": rows[-1]["a_median_ms"], "ratio": rows[-1]["ratio_median"]}
    return out


BYTES_SLACK = 0.05  # peak bytes may rise 5% before a count gate calls it a regression (allocator rounding)
COUNT_METRICS = ("aten_ops_per_step", "syncs_per_step", "graph_breaks", "peak_bytes")


def gates_tripped(table, base: str = "intended", metrics: Sequence[str] = COUNT_METRICS):
    """Which count gate each row of ``table`` (one row per step, ``regression`` naming it, one column per
    metric) trips when every gate is set at the ``base`` row's value with :func:`count_verdict`'s ``max`` rule
    (peak bytes with :data:`BYTES_SLACK`): ``True`` per tripped gate and ``caught_by`` (the gates, or
    ``none``), one row per step other than ``base``."""
    t = table.set_index("regression")
    if base not in t.index:
        raise ValueError(f"no {base!r} row to set the gates at; rows: {list(t.index)}")
    rows = []
    for reg, r in t.drop(index=base).iterrows():
        row = {"regression": reg}
        for m in metrics:
            rule = {"max": float(t.loc[base, m]), **({"slack": BYTES_SLACK} if m == "peak_bytes" else {})}
            row[m] = not count_verdict(str(reg), m, float(r[m]), rule).passed
        row["caught_by"] = ", ".join(m for m in metrics if row[m]) or "none"
        rows.append(row)
    return pd.DataFrame(rows)


LAB_TOLERANCE = 0.01  # lab 07's k table: at 5% every k of the recorded A/A runs passed and caught all; at 1% k matters


def ratio_gate_table(samples: dict, rules: dict, bench: dict):
    """Per ratio gate of the threshold file (``rules``: ``{name: {"tolerance", "k"}}``) with recorded
    ``samples`` (``{name: [ratios]}``): the samples' median (what the gate is held to) and spread, the bench's
    ratio of the same pair (``bench``) and how far the two procedures are apart (``procedure_gap_pct``), the
    file's tolerance and k, and the k :func:`runs_needed` asks for at that tolerance."""
    rows = []
    for name, rule in rules.items():
        x = samples.get(name)
        if not x:
            continue
        s, med, b = spread(x), percentile(x, 50), bench.get(name)
        rows.append({"ratio": name, "gate_reference": med, "bench_ratio": b,
                     "procedure_gap_pct": 100 * (med / b - 1) if b else None, "n": len(x), "spread_pct": 100 * s,
                     "tolerance_pct": 100 * rule["tolerance"], "k": rule["k"], "k_needed": runs_needed(s, rule["tolerance"])})
    return pd.DataFrame(rows)


def regression_times(ev, tolerance: float) -> pd.DataFrame | None:
    """Recorded on the GPU, per regression and mode: launches and CUDA syncs per step and the median and p10-p90 of the k
    wall-clock ratios ``t_intended / t_regressed``; ``caught``: the median is below ``1 - tolerance``."""
    if ev is None or "regressions" not in ev.values:
        return None
    rows = []
    for r in ev.values["regressions"]:
        if r["regression"] != "intended":
            x = r["ratio_samples"]
            rows.append({"regression": r["regression"], "mode": "compiled" if r["compiled"] else "eager",
                         "launches": r.get("launches_per_step"), "syncs": r.get("cuda_syncs_per_step"),
                         "ratio": percentile(x, 50), "p10": percentile(x, 10),
                         "p90": percentile(x, 90), "caught": bool(percentile(x, 50) < 1 - tolerance)})
    return pd.DataFrame(rows)
