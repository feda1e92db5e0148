#!/usr/bin/env bash
# What one session on a lent GPU machine runs, with plain python3 (no Jupyter there):
#   record  the reference set for this GPU (python -m infralens_lab record), bundled under $OUT
#   bench   the benchmark table (ratios measured side by side in one run)
#   gates   what `make gates-gpu` runs: count gates in interpreter mode, then the time-ratio gates
#   tests   the test suite in gpu mode (modules that need Jupyter skip with the reason)
#   labs    every lab as a plain script in gpu mode (convert first, where Jupyter is installed:
#           jupyter nbconvert --to script --output-dir build/labscripts labs/*.ipynb)
# Usage: OUT=/some/dir bash tools/gpu_session.sh record,tests,labs
set -u
OUT=${OUT:?set OUT to a folder for the results}
what=${1:-record,tests,labs}
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
slug=$(python3 -c 'from infralens_lab import device; print(device.slug(device.facts().name))') || exit 1
echo "gpu_session: $(nvidia-smi -L | head -2 | tr '\n' ' ') slug=$slug steps=$what"
has() { case ",$what," in *",$1,"*) return 0;; *) return 1;; esac; }
if has record; then
    rm -rf "/tmp/rec/$slug"
    python3 -m infralens_lab record --out "/tmp/rec/$slug" --bundle "$OUT/rec-$slug.tar.gz" >"$OUT/record.log" 2>&1
    echo "record: exit $?"; grep '^\[record\] .*: \(ok\|failed\|skipped\) in' "$OUT/record.log"
fi
if has bench; then
    python3 -m infralens_lab bench --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -40
fi
if has gates; then
    INFRALENS_MODE=interpreter python3 -m infralens_lab gates --counts >"$OUT/gates.log" 2>&1
    echo "gates --counts: exit $?" | tee -a "$OUT/gates.log"
    python3 -m infralens_lab gates --ratios --json "$OUT/gates.json" >>"$OUT/gates.log" 2>&1
    echo "gates --ratios: exit $?" | tee -a "$OUT/gates.log"; tail -8 "$OUT/gates.log"
fi
if has tests; then
    python3 -m pytest tests -q -p no:cacheprovider -rs >"$OUT/tests.log" 2>&1
    echo "tests: exit $?"; tail -30 "$OUT/tests.log"
fi
if has labs; then
    for f in build/labscripts/*.py; do
        t0=$(date +%s)
        (cd labs && timeout 400 python3 "../$f") >"$OUT/lab-$(basename "$f" .py).log" 2>&1
        rc=$?  # before any $(...) below: a command substitution resets $? (it once reported lab 06's exit 1 as 0)
        echo "lab $(basename "$f"): exit $rc in $(( $(date +%s) - t0 )) s"
    done
fi
