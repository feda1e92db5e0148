#!/usr/bin/env bash
# Create the virtual environment and install InfraLens Lab into it.
# Without an NVIDIA GPU, torch is a CPU build (a few hundred MB, not the multi-GB CUDA one).
set -euo pipefail
PYTHON="${1:-python3}"
VENV="${2:-.venv}"

if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "InfraLens Lab needs Python 3.11 or newer; '$PYTHON' is $("$PYTHON" --version 2>&1)." >&2
    echo "Run with another interpreter, e.g. 'make test PYTHON=python3.12'." >&2
    exit 1
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check)

if "$VENV/bin/python" -c 'import torch, triton' 2>/dev/null; then
    echo "install: torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') already there"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "install: NVIDIA GPU found; installing the CUDA build of torch (with its triton)"
    "${PIP[@]}" torch
else
    echo "install: no NVIDIA GPU; installing a CPU build of torch and triton (kernels run in Triton's interpreter)"
    # A local or mirrored CPU wheel first; else PyTorch's own CPU index.
    "${PIP[@]}" "torch==2.13.0+cpu" "triton==3.6.0" 2>/dev/null \
      || "${PIP[@]}" "torch==2.13.0+cpu" "triton==3.6.0" \
           --extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
fi
"${PIP[@]}" -e ".[test]"
echo "install: done ($("$VENV/bin/python" -c 'import torch, triton; print("torch", torch.__version__, "· triton", triton.__version__)'))"
