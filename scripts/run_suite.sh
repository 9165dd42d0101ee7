#!/usr/bin/env bash
# The whole pytest suite for `make check`: the 10-minute soak (tests marked `soak`, TAILSCOPE_SOAK_S=600) runs in a
# second pytest process beside the rest, so CI asserts bounded memory over ten minutes on a machine kept busy by the
# other tests, without adding ten minutes to the run. The slowest tests are listed after the run, to keep the whole
# of `make test` within its 40 minutes. Exit status: non-zero when either process fails.
set -u
BIN=${BIN:-.venv/bin}
mkdir -p test-artifacts
soak_log=test-artifacts/soak-suite.log
TAILSCOPE_SOAK_S=${TAILSCOPE_SOAK_S:-600} "$BIN/python" -m pytest -q -m soak -p no:cacheprovider --basetemp test-artifacts/soak-tmp >"$soak_log" 2>&1 &
soak_pid=$!
trap 'kill "$soak_pid" 2>/dev/null' INT TERM
"$BIN/python" -m pytest -q -m "not soak" --durations=40 --durations-min=10 "$@"
main_rc=$?
wait "$soak_pid"
soak_rc=$?
echo "---- the 10-minute soak, run beside the suite (tests marked soak) ----"
cat "$soak_log"
if [ "$main_rc" -ne 0 ]; then exit "$main_rc"; fi
exit "$soak_rc"
