"""The warnings a run summary carries: a client that could not keep its schedule, failures (with the server's own
words), requests cut off at the stop, streams whose per-chunk token counts were guessed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tailscope.metrics.first_wave import FirstWave
from tailscope.metrics.percentiles import Stats
from tailscope.records import RequestCounts, RequestRecord

#: send lag p99 above this means the client could not keep its schedule (ms).
SEND_LAG_WARN_MS = 5.0
#: event-loop lag p99 above this means the client's loop was saturated (ms).
LOOP_LAG_WARN_MS = 5.0
#: achieved send rate below this fraction of the requested rate means the client fell behind.
RATE_WARN_FRACTION = 0.95


def server_messages(failed: Sequence[RequestRecord], *, limit: int = 3) -> tuple[str, ...]:
    """The first failure's own message per error class (what the server said, not only a count), most common first."""
    first: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for r in failed:
        key = r.error.value if r.error else "unknown"
        counts[key] += 1
        if key not in first and r.error_detail:
            first[key] = r.error_detail
    out: list[str] = []
    for key, n in counts.most_common():
        if key in first and len(out) < limit:
            out.append(f"{key} ({n}): {first[key][:300]}")
    return tuple(out)


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f} ms"


def run_warnings(
    counts: RequestCounts,
    errors: Counter[str],
    lag: Stats,
    loop_lag: Stats | None,
    requested_rate: float | None,
    achieved: float | None,
    ok: Sequence[RequestRecord],
    wave: FirstWave | None = None,
    cap: int | None = None,
) -> tuple[str, ...]:
    """The run's warnings, in the order a reader acts on them: the first wave, the schedule (a capped loop, a slow
    client, a lagging event loop, a rate below the one asked), failures and cut-off requests, guessed chunk tokens.

    ``cap``: a capped open loop's cap (late sends are then waits for a slot, said so, not a slow client).
    """
    out: list[str] = []
    if wave is not None and wave.rest_send_lag_ms.p99 is not None and cap is None:
        # the opening burst is reported on its own (below): the schedule judgement is on the rest of the run
        wl = wave.send_lag_ms.p99
        if wl is not None and wl > SEND_LAG_WARN_MS:
            out.append(
                f"FIRST WAVE: the {wave.count} requests due at the start went out with send lag p99 {wl:.1f} ms "
                f"(the rest {wave.rest_send_lag_ms.p99:.1f} ms); their TTFT from the intended time carries it "
                f"(TTFT p99 {_fmt(wave.ttft_ms.p99)} vs {_fmt(wave.rest_ttft_ms.p99)} for the rest; "
                f"{_fmt(wave.ttft_from_sent_ms.p99)} from the actual send)."
            )
        lag = wave.rest_send_lag_ms
    late = lag.p99 is not None and lag.p99 > SEND_LAG_WARN_MS
    slow = bool(requested_rate and achieved is not None and achieved < RATE_WARN_FRACTION * requested_rate)
    if cap is not None and (late or slow):
        # a capped open loop: requests that waited for a slot went out late; that is the cap, not the client
        out.append(
            f"CAP REACHED: send lag p99 is {lag.p99 or 0:.1f} ms: requests waited for one of the {cap} slots "
            "(--rate with --concurrency); their latencies count the wait from the intended send time. With "
            f"{cap} in flight the target serves fewer requests/s than offered: raise the cap or lower the rate."
        )
        late = slow = False
    if late and lag.p99 is not None:
        out.append(
            f"CLIENT BOTTLENECK: send lag p99 is {lag.p99:.1f} ms (> {SEND_LAG_WARN_MS:g} ms); the client could not "
            "send on schedule. Latencies are still measured from the intended send time, but lower the load per "
            "process or use --workers."
        )
    if loop_lag is not None and loop_lag.p99 is not None and loop_lag.p99 > LOOP_LAG_WARN_MS:
        out.append(
            f"CLIENT BOTTLENECK: the client's event loop lagged {loop_lag.p99:.1f} ms at p99 (> "
            f"{LOOP_LAG_WARN_MS:g} ms); token timings carry that much client delay. Use --workers or fewer streams."
        )
    if slow and requested_rate and achieved is not None:
        out.append(
            f"CLIENT BOTTLENECK: achieved send rate {achieved:.2f} req/s is below 95 % of the requested "
            f"{requested_rate:.2f} req/s."
        )
    if counts.failed:
        detail = ", ".join(f"{k}={v}" for k, v in sorted(errors.items()))
        out.append(f"{counts.failed} of {counts.total} requests failed ({detail}).")
    if counts.incomplete:
        out.append(f"{counts.incomplete} requests were still in flight when the run stopped (counted as incomplete).")
    uneven = sum(
        1
        for r in ok
        if r.tokens_source.value == "chunks"
        and r.output_tokens is not None
        and r.output_tokens != len(r.chunk_times_ns)
    )
    if uneven:
        out.append(
            f"{uneven} requests streamed chunks holding several tokens but the server gave no per-chunk counts; ITL "
            "assumes one token per chunk there. Pass --tokenizer for per-chunk counts."
        )
    return tuple(out)
