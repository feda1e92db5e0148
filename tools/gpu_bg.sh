#!/usr/bin/env bash
# Start `tools/gpu_session.sh STEPS` in its own session (it outlives this call while the machine is held),
# or, if one is running, wait for it; either way wait up to $WAIT seconds, then copy what it has written
# (a bundle, logs) into $OUT as results.tar.gz. Re-run the same command to keep waiting. Results persist in /tmp/gpu_bg.
set -u
OUT=${OUT:?}; WAIT=${WAIT:-570}; BG=/tmp/gpu_bg; mkdir -p "$BG"
if [ ! -f "$BG/started" ]; then
    date +%s >"$BG/started"
    OUT="$BG" setsid nohup bash tools/gpu_session.sh "${1:-record}" >"$BG/session.log" 2>&1 < /dev/null &
    echo $! >"$BG/pid"
fi
t0=$(date +%s)
while kill -0 "$(cat "$BG/pid")" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$WAIT" ]; do sleep 5; done
if kill -0 "$(cat "$BG/pid")" 2>/dev/null; then echo "gpu_bg: still running after $(( $(date +%s) - $(cat "$BG/started") )) s"; \
else echo "gpu_bg: done in $(( $(date +%s) - $(cat "$BG/started") )) s"; fi
# one archive (the device tool brings back a limited number of files) plus the session log to read at once
tar -czf "$OUT/results.tar.gz" -C "$BG" --exclude=pid --exclude=started . 2>/dev/null
cp "$BG/session.log" "$OUT"/ 2>/dev/null
tail -25 "$BG/session.log"
