#!/usr/bin/env bash
# Install Prometheus and promtool (Debian's `prometheus` package) for the alert-rule integration tests.
#
# Idempotent and quiet: exits at once when `prometheus` and `promtool` are already on PATH (or in
# $TAILSCOPE_PROMETHEUS_DIR). Otherwise it installs the package with apt-get (as root, or through sudo when that works
# without a password). The tests start their own Prometheus on 127.0.0.1 with a temporary data folder; the package's
# own service is not needed (in containers without systemd it does not start at all).
#
# Exit status: 0 when Prometheus is ready. When it cannot be installed it prints one clear line; then it exits 1 when
# CI is set (CI must never silently skip the Prometheus tests) and 0 otherwise (those tests then skip with a message).
#
# Environment:
#   TAILSCOPE_PROMETHEUS_DIR  folder holding prometheus and promtool binaries (e.g. an unpacked release tarball)
set -u -o pipefail

in_ci() {
    [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]
}

have() {
    if [ -n "${TAILSCOPE_PROMETHEUS_DIR:-}" ]; then
        [ -x "${TAILSCOPE_PROMETHEUS_DIR}/prometheus" ] && [ -x "${TAILSCOPE_PROMETHEUS_DIR}/promtool" ]
    else
        command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1
    fi
}

give_up() {
    echo "setup_prometheus: $1" >&2
    if in_ci; then
        echo "setup_prometheus: CI is set, so this is an error: the Prometheus alert tests must not be skipped in CI." >&2
        exit 1
    fi
    echo "setup_prometheus: the Prometheus alert tests will be skipped (set CI=true to make this fatal)." >&2
    exit 0
}

have && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    give_up "prometheus/promtool not found and apt-get is not available; install Prometheus or set TAILSCOPE_PROMETHEUS_DIR."
fi
if [ "$(id -u)" = "0" ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    give_up "prometheus/promtool not found and this user cannot run apt-get (not root, no passwordless sudo); run: sudo apt-get install -y prometheus"
fi

mkdir -p .cache
LOG=.cache/prometheus-install.log
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends prometheus >"$LOG" 2>&1; then
    $SUDO apt-get update >>"$LOG" 2>&1 || true
    $SUDO apt-get install -y --no-install-recommends prometheus >>"$LOG" 2>&1 \
        || give_up "apt-get install prometheus failed (log: $LOG)."
fi
have || give_up "prometheus was installed but prometheus/promtool are not on PATH (log: $LOG)."
echo "setup_prometheus: installed $(prometheus --version 2>&1 | head -1)" >&2
exit 0
