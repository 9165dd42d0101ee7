#!/usr/bin/env bash
# Make the browser tests runnable: Debian's Chromium (system package) and Playwright (PyPI) in the project venv.
#
# Never downloads a browser build: Playwright drives /usr/bin/chromium through `executable_path` (we never run
# `playwright install`). Idempotent and quiet when everything is in place.
#
# - chromium: installed with apt-get when missing and we are root on Debian/Ubuntu; otherwise a hint is printed.
# - playwright: pip-installed into $VENV when it cannot be imported there.
#
# Exit status: 0 when both are ready. When one is missing it prints one line saying what to do, then exits 1 when
# CI is set (CI must never silently skip the browser tests) and 0 otherwise (the tests then skip with that message).
#
# Environment:
#   VENV                         the project venv (default: .venv)
#   TAILSCOPE_CHROMIUM           browser binary (default: /usr/bin/chromium)
#   TAILSCOPE_PLAYWRIGHT_SPEC    pip requirement (default: playwright>=1.40)
set -u -o pipefail

cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
CHROMIUM="${TAILSCOPE_CHROMIUM:-/usr/bin/chromium}"
SPEC="${TAILSCOPE_PLAYWRIGHT_SPEC:-playwright>=1.40}"
LOG=".cache/browser-setup.log"
mkdir -p .cache

in_ci() {
    case "${CI:-}" in ""|0|false|no|False|FALSE) return 1 ;; *) return 0 ;; esac
}

fail() {
    echo "setup_browser: $1" >&2
    if in_ci; then exit 1; fi
    exit 0
}

if [ ! -x "$CHROMIUM" ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup_browser: installing Debian's chromium (log: $LOG)"
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } >"$LOG" 2>&1 \
            || fail "apt-get install chromium failed; see $LOG"
    else
        fail "no $CHROMIUM: install Debian's chromium package (sudo apt-get install chromium), or set TAILSCOPE_CHROMIUM"
    fi
fi
[ -x "$CHROMIUM" ] || fail "chromium still missing at $CHROMIUM after the install; see $LOG"

if [ ! -x "$VENV/bin/python" ]; then
    fail "no venv at $VENV (run \`make setup\` first)"
fi
if ! "$VENV/bin/python" -c "import playwright.sync_api" >/dev/null 2>&1; then
    echo "setup_browser: installing $SPEC into $VENV (log: $LOG)"
    "$VENV/bin/python" -m pip install -q "$SPEC" >>"$LOG" 2>&1 || fail "pip install $SPEC failed; see $LOG"
fi
exit 0
