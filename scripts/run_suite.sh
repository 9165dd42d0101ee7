#!/usr/bin/env bash
# The whole pytest suite for `make check`, so that `make test` stays within its 40 minutes on a 2-core machine (most
# integration tests wait on sockets, servers and timed loads: one process alone kept the load average at ≈ 0.9 and
# took ≈ 34 minutes). First three pytest processes side by side:
#   - the real-server tests (marked `vllm`: every test that uses the vLLM venv, its tiny model or a server started
#     from them; tests/integration/conftest.py marks them), in the one process that starts the session's vLLM, and
#     the longest other tests (marked `beside`: the docs' and the tutorial's commands run as written, the bench fuzz),
#     to even out the two;
#   - the 10-minute soak (marked `soak`, TAILSCOPE_SOAK_S=600), so CI asserts bounded memory over ten minutes on a
#     machine kept busy by the other tests, without adding ten minutes to the run;
#   - everything else, in the foreground.
# Then, with the machine to itself, the timing tests that need it (marked `alone`: the twin's accuracy on the real
# vLLM server, which could not be judged beside the others: the server's speed moved ×1.5–3.5 between repeats).
# The side processes' output follows the main one's; the slowest tests are listed after each. Exit status: non-zero
# when any process fails.
set -u
BIN=${BIN:-.venv/bin}
mkdir -p test-artifacts
soak_log=test-artifacts/soak-suite.log
real_log=test-artifacts/real-server-suite.log
side="vllm or beside"  # the side process's tests; the main process runs the rest (neither soak nor alone)
TAILSCOPE_SOAK_S=${TAILSCOPE_SOAK_S:-600} "$BIN/python" -m pytest -q -m soak -p no:cacheprovider \
    --basetemp test-artifacts/soak-tmp >"$soak_log" 2>&1 &
soak_pid=$!
"$BIN/python" -m pytest -q -m "($side) and not soak and not alone" -p no:cacheprovider \
    --basetemp test-artifacts/real-server-tmp --durations=20 --durations-min=10 "$@" >"$real_log" 2>&1 &
real_pid=$!
trap 'kill "$soak_pid" "$real_pid" 2>/dev/null' INT TERM
"$BIN/python" -m pytest -q -m "not ($side) and not soak and not alone" --durations=40 --durations-min=10 "$@"
main_rc=$?
wait "$real_pid"
real_rc=$?
wait "$soak_pid"
soak_rc=$?
echo "---- the real-server and other long tests, run beside the suite (tests marked vllm or beside) ----"
cat "$real_log"
echo "---- the 10-minute soak, run beside the suite (tests marked soak) ----"
cat "$soak_log"
echo "---- the tests that need the machine to themselves, run after the rest (tests marked alone) ----"
"$BIN/python" -m pytest -q -m "alone and not soak" -p no:cacheprovider --basetemp test-artifacts/alone-tmp \
    --durations=5 --durations-min=10 "$@"
alone_rc=$?
for rc in "$main_rc" "$real_rc" "$soak_rc" "$alone_rc"; do
    # 5: pytest's "no tests collected" (arguments that name none of a process's tests)
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
