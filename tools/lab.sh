#!/usr/bin/env bash
# `make lab`: serve the learner's working copy of labs/ in JupyterLab.
#
# The committed notebooks in labs/ stay untouched: the learner works in my-labs/ (git-ignored),
# made on the first run. Later runs copy in only labs that are new since (a `git pull` that
# adds lab 05 brings it), never overwriting a notebook already there. Starts JupyterLab in the
# background (its log goes to $WORK/.infralens/jupyter.log), waits until it answers, then prints
# where the notebooks are, the port used when 8888 is taken, the SSH tunnel line on a remote machine
# and, last, the URL, which opens 00_start_here.ipynb. Ctrl-C stops the server. Works as root.
# JupyterLab's defaults come from tools/jupyter/settings/overrides.json (news toast off, widget
# state saved in the notebook); a learner's own settings still win. tools/jupyter/custom/custom.css
# (served as JupyterLab's custom CSS) makes printed output wrap between words. Kernels start with the
# package's notebook guard (infralens_lab/notebook_guard.py: one line of guidance instead of a
# bare NameError after a restart, answer cells that did not run, self-checks that survive a
# reopened notebook), through a "python3" kernelspec written to $WORK/.infralens/ and put first
# on JUPYTER_PATH: it is the usual ipykernel plus --ext=infralens_lab.quiz.
set -euo pipefail
VENV="${1:-.venv}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${INFRALENS_WORK_DIR:-$ROOT/my-labs}"
WANT_PORT="${PORT:-8888}"
[ -x "$VENV/bin/python" ] || { echo "make lab: $VENV/bin/python is missing; run 'make install' first" >&2; exit 1; }
VENV="$(cd "$VENV" && pwd)"
PY="$VENV/bin/python"

# ---- the working copy
mkdir -p "$WORK"
new=()
for f in "$ROOT"/labs/*; do
    [ -f "$f" ] || continue
    dest="$WORK/$(basename "$f")"
    if [ ! -e "$dest" ]; then cp "$f" "$dest"; new+=("$(basename "$f")"); fi
done
# A clean working copy: in each new copy the outputs of the answer, exercise, worked-solution and
# predict-then-look cells are cleared (infralens_lab.quiz.cells.working_copy), so no answer is on the page
# before the learner tries; if that fails the copy is removed, never left with its answers showing.
# The rest of the labs' committed outputs are the project's own (an interpreter-mode run, checked by nbval): sign the
# copies just made, so that JupyterLab renders them trusted on first open. An unsigned notebook's HTML outputs
# lose their <style> to JupyterLab's sanitizer, and a wide table then scrolls with no cue. Only the copies made
# now are signed, never a notebook the learner has changed; the signatures go where the server reads them
# (NotebookNotary's data_dir, JUPYTER_DATA_DIR or Jupyter's data folder).
if [ ${#new[@]} -gt 0 ]; then
    ( cd "$WORK" && PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "${new[@]}" <<'PYEOF'
import os
import sys
import infralens_lab.quick_nbformat  # before nbformat: no IRI grammar built for nothing (seconds on 2 cores)
import nbformat
from infralens_lab.quiz.cells import working_copy
names = [n for n in sys.argv[1:] if n.endswith(".ipynb")]
written = []
for name in names:
    try:
        nb = nbformat.read(name, as_version=4)
        working_copy(nb)
        nbformat.write(nb, name)
    except Exception as exc:
        os.remove(name)
        sys.exit(f"make lab: could not clear the answers' outputs in {name} ({exc}); removed the copy, run again")
    written.append(nb)
try:  # each notebook as written (signed without reading it back)
    from nbformat.sign import NotebookNotary
    notary = NotebookNotary()
    for nb in written:
        notary.sign(nb)
except Exception as exc:
    print(f"make lab: could not sign the new copies ({exc}; their tables render without styles until run)", file=sys.stderr)
PYEOF
    )
fi

# ---- the kernel: the usual python3 kernelspec plus the notebook guard (regenerated every run)
KSPEC="$WORK/.infralens/jupyter/kernels/python3"
mkdir -p "$KSPEC"
"$PY" - "$PY" "$KSPEC/kernel.json" <<'PYEOF'
import json, sys
py, out = sys.argv[1], sys.argv[2]
spec = {"argv": [py, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--ext=infralens_lab.quiz"],
        "display_name": "Python 3 (ipykernel)", "language": "python", "metadata": {"debugger": True}}
with open(out, "w") as f:
    json.dump(spec, f, indent=1)
PYEOF
export JUPYTER_PATH="$WORK/.infralens/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"

# ---- a free port: WANT_PORT or the next free one above it
PORT_USED="$("$PY" - "$WANT_PORT" <<'PYEOF'
import socket, sys
want = int(sys.argv[1])
for port in range(want, want + 50):
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            continue
        print(port)
        break
else:
    sys.exit(f"make lab: ports {want}-{want + 49} are all taken; choose one with 'make lab PORT=9000'")
PYEOF
)"
TOKEN="$("$PY" -c 'import secrets; print(secrets.token_hex(24))')"

ARGS=(--no-browser --ServerApp.port="$PORT_USED" --ServerApp.port_retries=0
      --IdentityProvider.token="$TOKEN" --ServerApp.root_dir="$WORK"
      --LabApp.app_settings_dir="$ROOT/tools/jupyter/settings"
      --LabApp.custom_css=True --ServerApp.tornado_settings=static_custom_path="$ROOT/tools/jupyter/custom")
if [ "$(id -u)" = 0 ]; then ARGS+=(--allow-root); fi   # GPU cloud machines and containers run as root

# ---- what the learner needs to know, printed once the server answers; the URL last
START="00_start_here.ipynb"
URL="http://localhost:$PORT_USED/lab/tree/$START?token=$TOKEN"
SERVER_LOG="$WORK/.infralens/jupyter.log"
banner() {
    echo "------------------------------------------------------------------------"
    echo "InfraLens Lab"
    echo "  your notebooks: $WORK"
    echo "    (a working copy of labs/, git-ignored: your edits and answers stay here;"
    echo "     the committed labs/ are never changed, so 'git pull' stays clean)"
    if [ ${#new[@]} -gt 0 ]; then echo "    copied in now: ${new[*]}"; fi
    if [ "$PORT_USED" != "$WANT_PORT" ]; then
        echo "  port $WANT_PORT is taken; using port $PORT_USED"
    fi
    echo "  server log: $SERVER_LOG"
    echo "  stop: Ctrl-C"
    echo "------------------------------------------------------------------------"
    if [ -n "${SSH_CONNECTION:-}" ]; then
        host="$(echo "$SSH_CONNECTION" | awk '{print $3}')"
        echo "  this machine is remote: on your own computer run"
        echo "    ssh -N -L $PORT_USED:localhost:$PORT_USED $(id -un)@$host"
        echo "  (or the host name you log in with), then open the URL below there."
    fi
    echo "  open: $URL"
}
cd "$WORK"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# `jupyter lab`, with infralens_lab.quick_nbformat imported first: the server imports nbformat, whose jsonschema
# would otherwise build an IRI grammar no notebook uses (seconds of a laptop's start)
LAB=("$PY" -c 'import sys, infralens_lab.quick_nbformat; from jupyterlab.labapp import main; sys.exit(main())')
if [ -n "${INFRALENS_LAB_DRY_RUN:-}" ]; then   # tests: everything but starting the server
    echo "would run: jupyter lab ${ARGS[*]}"
    banner
    exit 0
fi

# ---- the server, in the background; Ctrl-C (or a TERM) stops it, and it stops when this script does
"${LAB[@]}" "${ARGS[@]}" >"$SERVER_LOG" 2>&1 &
SERVER=$!
STOPPING=
trap 'STOPPING=1; kill -TERM "$SERVER" 2>/dev/null || true' INT TERM
trap 'kill -TERM "$SERVER" 2>/dev/null || true' EXIT
answers() {
    "$PY" - "$PORT_USED" "$TOKEN" <<'PYEOF'
import sys, urllib.request
req = urllib.request.Request(f"http://localhost:{sys.argv[1]}/api/status", headers={"Authorization": f"token {sys.argv[2]}"})
try:
    with urllib.request.urlopen(req, timeout=5):
        pass
except OSError:
    sys.exit(1)
PYEOF
}
waited=0
until answers; do
    if ! kill -0 "$SERVER" 2>/dev/null; then
        if [ -n "$STOPPING" ]; then exit 130; fi   # stopped with Ctrl-C before it answered
        echo "make lab: JupyterLab stopped before it answered; the end of its log ($SERVER_LOG):" >&2
        tail -n 40 "$SERVER_LOG" >&2
        exit 1
    fi
    if [ "$waited" -ge 600 ]; then   # half-seconds: 5 minutes
        echo "make lab: JupyterLab did not answer on port $PORT_USED within 5 minutes; the end of its log ($SERVER_LOG):" >&2
        tail -n 40 "$SERVER_LOG" >&2
        exit 1
    fi
    sleep 0.5
    waited=$((waited + 1))
done
banner
rc=0
while kill -0 "$SERVER" 2>/dev/null; do
    wait "$SERVER" && rc=0 || rc=$?   # returns early when Ctrl-C's trap runs; the loop waits for the stop
done
trap - EXIT
exit "$rc"
