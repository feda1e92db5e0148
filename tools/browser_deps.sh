#!/usr/bin/env bash
# Install Debian's Chromium for the browser test when it is missing and we may (root or password-less sudo).
# Never fails: the browser test skips with the reason when Chromium is not there.
set -u
for c in /usr/bin/chromium /usr/bin/chromium-browser; do [ -x "$c" ] && exit 0; done
command -v apt-get >/dev/null 2>&1 || { echo "browser_deps: no apt-get; the browser test will be skipped"; exit 0; }
if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "browser_deps: not root and no password-less sudo; the browser test will be skipped"; exit 0; fi
echo "browser_deps: installing Debian's chromium for the browser test"
$SUDO apt-get update -qq >/dev/null 2>&1 || true
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
    || echo "browser_deps: 'apt-get install chromium' failed; the browser test will be skipped"
exit 0
