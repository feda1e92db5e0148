#!/usr/bin/env bash
# Create the virtual environment and install InfraLens Lab into it:
#   bash tools/install.sh PYTHON VENV [test|learner]
# test (the default; `make test`, `make install`): the package with its test extra (pytest, nbval, playwright,
# ruff, HTA), pip's output shown as it goes. learner (`make lab`): the package alone, what the labs need, with
# pip's output kept in VENV/install.log and shown only when pip fails.
# Without an NVIDIA GPU, torch is a CPU build (a few hundred MB, not the multi-GB CUDA one).
set -euo pipefail
PYTHON="${1:-python3}"
VENV="${2:-.venv}"
MODE="${3:-test}"
case "$MODE" in
    test|learner) ;;
    *) echo "install: mode '$MODE'; expected 'test' (with the test extra) or 'learner' (the labs only)" >&2; exit 2;;
esac

if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "InfraLens Lab needs Python 3.11 or newer; '$PYTHON' is $("$PYTHON" --version 2>&1)." >&2
    echo "Run with another interpreter, e.g. 'make test PYTHON=python3.12'." >&2
    exit 1
fi
# A venv made where ensurepip is missing (Debian/Ubuntu without python3-venv) has no pip and
# would fail forever: never reuse one, and say which OS package gives Python its venv/pip.
has_pip() { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1; }
no_pip_help() {
    local ver; ver="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    echo "install: '$PYTHON -m venv' made a virtual environment without pip (Python $ver has no ensurepip here)." >&2
    echo "install: expected pip inside $VENV; removed it so that nothing reuses it." >&2
    echo "install: fix: install the OS package that provides venv with pip, then rerun:" >&2
    echo "           sudo apt-get install python3-venv   (or python$ver-venv; on Fedora: python3-pip)" >&2
}
if [ -e "$VENV" ] && ! has_pip; then
    if [ -L "$VENV" ]; then
        echo "install: $VENV is a link to an environment without pip; expected one with pip. Fix: remove the link or install pip there." >&2
        exit 1
    fi
    echo "install: $VENV has no working pip (an earlier venv made without ensurepip); making it again"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv "$VENV" 2>/tmp/infralens_venv_err.$$ || ! has_pip; then
        cat /tmp/infralens_venv_err.$$ >&2 2>/dev/null || true
        rm -f /tmp/infralens_venv_err.$$
        rm -rf "$VENV"
        no_pip_help
        exit 1
    fi
    rm -f /tmp/infralens_venv_err.$$
fi
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check)
LOG="$VENV/install.log"
if [ "$MODE" = learner ]; then
    : >"$LOG"
    echo "install: installing what the labs need into $VENV (pip's output goes to $LOG)"
fi
# pip install ARGS: as it goes for the test install; into $LOG for the learner install.
pip_install() {
    if [ "$MODE" = learner ]; then "${PIP[@]}" "$@" >>"$LOG" 2>&1; else "${PIP[@]}" "$@"; fi
}
# After a failed pip install: the learner install shows the end of what pip said (the error is last).
pip_failed() {
    if [ "$MODE" = learner ]; then
        echo "install: pip failed; the last 80 lines of its output (all of it: $LOG):" >&2
        tail -n 80 "$LOG" >&2
    fi
    echo "install: pip failed (see above); fix what it names, then run the command again" >&2
    exit 1
}

if "$VENV/bin/python" -c 'import torch, triton' 2>/dev/null; then
    echo "install: torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') already there"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "install: NVIDIA GPU found; installing the CUDA build of torch (with its triton)"
    pip_install torch || pip_failed
else
    echo "install: no NVIDIA GPU; installing a CPU build of torch and triton (kernels run in Triton's interpreter)"
    # A local or mirrored CPU wheel first; else PyTorch's own CPU index.
    pip_install "torch==2.13.0+cpu" "triton==3.6.0" 2>/dev/null \
      || pip_install "torch==2.13.0+cpu" "triton==3.6.0" \
           --extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" \
      || pip_failed
fi
if [ "$MODE" = learner ]; then pip_install -e . || pip_failed; else pip_install -e ".[test]" || pip_failed; fi
echo "install: done ($("$VENV/bin/python" -c 'import torch, triton; print("torch", torch.__version__, "· triton", triton.__version__)'))"
