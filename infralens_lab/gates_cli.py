"""``python -m infralens_lab gates``: run the regression gates (counts on any machine, time ratios on a GPU)
and hold them to ``data/gates.json``. Measuring is :mod:`infralens_lab.measure.gates`'s, the arithmetic and
verdicts :mod:`infralens_lab.analysis.gates`'s, the threshold file's reader :mod:`infralens_lab.parse.gates`'s."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from . import device, evidence
from .analysis.gates import count_verdict, ratio_verdict, skipped_verdict, suggest
from .measure import gates
from .parse.gates import DEFAULT_THRESHOLDS, ThresholdError, gate_references, load_thresholds


def count_rules(thresholds: dict, build: str) -> dict[str, tuple[dict, dict]]:
    """Per workload of the threshold file, ``(rules held on build, rules left out)``: on the build ``counts`` were
    measured on (``counts_build``) every rule holds; on another build a build-dependent metric
    (``build_dependent``) is held to that build's own rule from ``counts_by_build`` when the file has one, and left
    out otherwise (its reason is the file's ``build_dependent`` text)."""
    home = thresholds.get("counts_build", gates.COUNTS_BUILD)
    dep = thresholds.get("build_dependent", {})
    mine = thresholds.get("counts_by_build", {}).get(build, {})
    out = {}
    for wl, rules in thresholds["counts"].items():
        held, left = dict(rules), {}
        if build != home:
            for m in [m for m in held if m in dep]:
                if m in mine.get(wl, {}):
                    held[m] = mine[wl][m]
                else:
                    left[m] = held.pop(m)
        out[wl] = (held, left)
    return out


def check_counts(thresholds: dict, workloads: list[str] | None = None, build: str | None = None) -> list:
    """Every count gate of the threshold file (or of ``workloads`` only) on this build (``build``, default
    :func:`infralens_lab.measure.gates.count_build`): a list of :class:`infralens_lab.analysis.gates.Verdict`,
    the rules :func:`count_rules` leaves out on this build measured too and reported as skipped, with the reason."""
    build = build or gates.count_build()
    home = thresholds.get("counts_build", gates.COUNTS_BUILD)
    out = []
    for wl, (held, left) in count_rules(thresholds, build).items():
        if workloads is not None and wl not in workloads:
            continue
        got = gates.measure_counts(wl, list(held) + list(left))
        out += [count_verdict(wl, m, got[m], rule) for m, rule in held.items()]
        out += [skipped_verdict(wl, m, got[m], rule, build, home, thresholds["build_dependent"][m])
                for m, rule in left.items()]
    return out


def record_counts(thresholds: dict, build: str | None = None) -> dict:
    """This build's own rules for the file's build-dependent counts, measured now: ``{"build", "torch",
    "counts_by_build": {build: {workload: {metric: rule}}}}``, each rule ``{"max": measured}`` with the slack of the
    file's rule for that metric. Paste the ``counts_by_build`` entry into the threshold file to key them."""
    build = build or gates.count_build()
    dep = thresholds.get("build_dependent", {})
    keyed = {}
    for wl, rules in thresholds["counts"].items():
        ms = [m for m in rules if m in dep]
        if ms:
            got = gates.measure_counts(wl, ms)
            keyed[wl] = {m: {"max": got[m], **({"slack": rules[m]["slack"]} if "slack" in rules[m] else {})}
                         for m in ms}
    return {"build": build, "torch": gates.torch.__version__, "counts_by_build": {build: keyed}}


def check_ratios(thresholds: dict, names: list[str] | None = None, store=None, k: int | None = None) -> list:
    """Measure every ratio gate of the threshold file (GPU) and hold it against the reference set's
    bench ratio: a list of ``Verdict`` (``analysis.gates.ratio_verdict``), with the ratios measured."""
    ref = gate_references(store)
    out = []
    for name, rule in thresholds["ratios"].items():
        if names is not None and name not in names:
            continue
        if name not in ref:
            raise ThresholdError(f"ratio {name!r} is not in the reference set's gates_gpu or bench record; "
                                   f"it has {sorted(ref)}")
        cand, refn = gates.RATIO_GATES[name]()
        samples = gates.ratio_samples(cand, refn, k or rule["k"])
        expected, source = ref[name]
        v = ratio_verdict(name, samples, expected, rule["tolerance"])
        if source != "gates_gpu":
            v = replace(v, message=v.message + "; reference from the bench (another timing procedure: re-record "
                                               "the set so gates_gpu holds this gate's own samples)")
        out.append(v)
        del cand, refn
        gates.torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infralens_lab gates",
                                 description="regression gates: counts (any machine) and time ratios (GPU)")
    ap.add_argument("--counts", action="store_true", help="run the count gates (default when --ratios is absent)")
    ap.add_argument("--ratios", action="store_true", help="run the time-ratio gates against the reference (GPU)")
    ap.add_argument("--thresholds", default=None, help=f"threshold file (default {DEFAULT_THRESHOLDS})")
    ap.add_argument("--k", type=int, default=None, help="runs per ratio (default: the file's k)")
    ap.add_argument("--json", default="", help="also write the verdicts as JSON here")
    ap.add_argument("--record-counts", default="", metavar="PATH",
                    help="measure the threshold file's build-dependent counts (peak bytes) on this build and write "
                         "them as a counts_by_build entry to PATH, to key them in data/gates.json; any mode")
    ap.add_argument("--suggest", action="store_true", help="print the tolerance and k each ratio gate's recorded "
                    "samples call for (every recorded set with gates_gpu), then exit; any machine")
    args = ap.parse_args(argv)

    if args.suggest:
        rows = suggest(evidence.load_all_sets())
        for r in rows:
            sets = "; ".join(f"{g}: median {v['median']:.3f}, spread {v['spread']:.1%} (n={v['n']})"
                             for g, v in r["sets"].items())
            print(f'"{r["ratio"]}": {{"tolerance": {r["tolerance"]}, "k": {r["k"]}}}   # {sets}')
        return 0 if rows else 1

    try:
        th = load_thresholds(args.thresholds)
    except ThresholdError as exc:
        print(f"gates: {exc}", file=sys.stderr)
        return 2
    if args.record_counts:
        rec = record_counts(th)
        Path(args.record_counts).write_text(json.dumps(rec, indent=1))
        print(f"gates: {rec['build']} build (torch {rec['torch']}): wrote {args.record_counts}; add its "
              f"counts_by_build entry to {th['path']} (a threshold change, in the commit a reviewer sees):")
        print(json.dumps(rec["counts_by_build"]))
        return 0
    verdicts = []
    if args.counts or not args.ratios:
        bad = device.numpy_interpreter_problem()
        if bad:
            print(f"gates: cannot run the count gates (they run kernels in Triton's interpreter): {bad}", file=sys.stderr)
            return 2
        if device.is_gpu():
            print("gates: refusing the count gates in gpu mode: `make gates-gpu` runs them with "
                  "INFRALENS_MODE=interpreter (the steps on the CPU, the counts that differ by build keyed to it); "
                  "run the time ratios with --ratios alone.", file=sys.stderr)
            return 2
        build = gates.count_build()
        home = th.get("counts_build", gates.COUNTS_BUILD)
        print(f"gates: counts on the {build} build; the file's counts were measured on {home}"
              + ("" if build == home else f": counts that differ by build ({', '.join(th['build_dependent'])}) are "
                 "held to this build's own rules where the file has them, else left out with the reason"))
        verdicts += check_counts(th, build=build)
    if args.ratios:
        if not device.is_gpu():
            print("gates: refusing the time-ratio gates in interpreter mode: timings of Triton's interpreter say "
                  "nothing about a GPU. Run `make gates-gpu` on a machine with an NVIDIA GPU.", file=sys.stderr)
            return 2

        st = evidence.own_set() or evidence.reference()  # this GPU's own recorded set when there is one, else the default
        print(f"gates: ratio references from the {st.gpu} set ({st.folder})")
        if st.gpu != device.facts().name:
            print(f"gates: note: the reference ratios were recorded on {st.gpu}; this is {device.facts().name}. Ratios "
                  f"move less between GPUs than times do, but a failure here may be the GPU, not the code.")
        verdicts += check_ratios(th, store=st, k=args.k)
    for v in verdicts:
        print(f"{'SKIP' if v.skipped else 'PASS' if v.passed else 'FAIL'}  {v.gate:<52} {v.message}")
    if args.json:
        Path(args.json).write_text(json.dumps([v.as_dict() for v in verdicts], indent=1))
    failed = [v for v in verdicts if not v.passed]
    skipped = [v for v in verdicts if v.skipped]
    print(f"gates: {len(verdicts) - len(failed) - len(skipped)} passed, {len(failed)} failed"
          + (f", {len(skipped)} skipped on this build (reasons above)" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
