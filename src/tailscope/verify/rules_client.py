"""Diagnosis rules about the client and the request stream: client bottleneck, errors and bursts, cold start."""

from __future__ import annotations

from collections import Counter

import numpy as np

from tailscope.metrics.run_warnings import RATE_WARN_FRACTION, SEND_LAG_WARN_MS
from tailscope.records import ErrorClass, Status
from tailscope.verify.findings import Finding, RunView, clip01, finite, pct

#: error rule: error share that triggers it (any 429 triggers it too).
ERROR_SHARE = 0.01
#: a burst: at least this share of the errors inside this share of the run window.
BURST_ERROR_SHARE = 0.5
BURST_WINDOW_SHARE = 0.1
BURST_MIN_ERRORS = 5
#: cold start: the first requests' median TTFT is this many times the rest's.
COLD_FACTOR = 3.0
COLD_MIN_REST = 10


def client_bottleneck(v: RunView) -> Finding | None:
    """The load generator could not keep its schedule: its numbers are not trustworthy. (A capped open loop —
    ``max_concurrency`` — sends late by design while its slots are full; the summary says ``CAP REACHED`` then.)"""
    lag = finite(v.send_lag)
    if lag.size == 0 or v.settings.get("max_concurrency"):
        return None
    p99 = float(np.percentile(lag, 99))
    requested = v.settings.get("rate")
    sent = np.sort(finite(v.sent_ms))
    achieved = (sent.size - 1) / ((sent[-1] - sent[0]) / 1000.0) if sent.size > 1 and sent[-1] > sent[0] else None
    behind = (
        isinstance(requested, int | float)
        and requested > 0
        and achieved is not None
        and achieved < RATE_WARN_FRACTION * requested
    )
    if p99 <= SEND_LAG_WARN_MS and not behind:
        return None
    evidence = [
        f"send lag (sent − scheduled) p50 {np.percentile(lag, 50):.1f} ms, p99 {p99:.1f} ms, max {lag.max():.0f} ms"
    ]
    if behind:
        evidence.append(f"achieved send rate {achieved:.2f} req/s vs requested {requested:g} req/s")
    return Finding(
        rule="client_bottleneck",
        title="Client bottleneck: results not trustworthy",
        symptom="the load generator sent requests late; measured load is lower than intended",
        evidence=tuple(evidence),
        cause="the client process is CPU-bound (too many streams per process, slow event loop, tokenizer on the hot "
        "path) or its host is overloaded",
        actions=(
            "rerun with more client processes (--workers) or fewer streams per process",
            "run the client on a separate machine from the server; install uvloop (pip install 'tailscope[fast]')",
            "treat this run's latencies as a lower bound on the server's, not as the truth",
        ),
        impact=1.0,
    )


def errors(v: RunView) -> Finding | None:
    """Rate limiting (429), server errors (5xx), timeouts — and whether they came in a burst."""
    failed = [r for r in v.records if r.status is Status.ERROR]
    if not failed:
        return None
    share = len(failed) / v.n
    classes = Counter(r.error.value if r.error else "unknown" for r in failed)
    n429 = classes.get(ErrorClass.HTTP_429.value, 0)
    if share < ERROR_SHARE and n429 == 0:
        return None
    evidence = [
        f"{len(failed)} of {v.n} requests failed ({share:.1%}): "
        + ", ".join(f"{k}={n}" for k, n in classes.most_common())
    ]
    times = np.sort(np.asarray([r.scheduled_ns / 1e6 for r in failed]))
    span = float(v.sched_ms.max() - v.sched_ms.min()) if v.n > 1 else 0.0
    burst = False
    if times.size >= BURST_MIN_ERRORS and span > 0:
        width = BURST_WINDOW_SHARE * span
        inside = np.searchsorted(times, times + width, side="right") - np.arange(times.size)
        best = int(inside.argmax())
        if inside[best] >= BURST_ERROR_SHARE * times.size:
            burst = True
            evidence.append(
                f"burst: {inside[best]} errors between t = {times[best] / 1000:.1f} s and "
                f"{(times[best] + width) / 1000:.1f} s ({BURST_WINDOW_SHARE:.0%} of the run)"
            )
    statuses = Counter(r.http_status for r in failed if r.http_status)
    if statuses:
        evidence.append("HTTP statuses: " + ", ".join(f"{k}={n}" for k, n in sorted(statuses.items())))
    if n429 >= len(failed) / 2:
        cause = "a rate limiter (gateway, provider quota or the engine's admission control) rejects requests"
        actions = (
            "stay under the limit: lower the request rate or ask for a higher quota",
            "retry 429 with exponential backoff and jitter honouring Retry-After; count retries in latency",
            "spread load over keys/replicas; alert on the 429 ratio (see `tailscope alerts`)",
        )
        title = "Rate limiting (HTTP 429)"
    else:
        cause = (
            "the server fails under load (crash, OOM, worker restarts) or requests time out in a saturated queue"
            + (
                "; the errors came in a burst, which points at an incident (restart, deploy, dependency outage) "
                "rather than steady overload"
                if burst
                else ""
            )
        )
        actions = (
            "read the server log around the error times; check restarts and OOM kills",
            "if timeouts dominate, see the saturation finding: lower the load or add capacity",
            "alert on the error ratio (see `tailscope alerts`) and gate releases on error_rate",
        )
        title = "Error burst" if burst else "Errors"
    return Finding(
        rule="errors",
        title=title,
        symptom=f"{share:.1%} of requests failed" + (" in a burst" if burst else ""),
        evidence=tuple(evidence),
        cause=cause,
        actions=actions,
        impact=clip01(0.5 + 5.0 * share),
    )


def cold_start(v: RunView) -> Finding | None:
    """The first requests are much slower than the rest and no warmup was excluded."""
    if v.warmup_count > 0:
        return None
    ok_idx = np.flatnonzero(np.isfinite(v.ttft))
    k = max(3, int(np.ceil(0.02 * ok_idx.size)))
    if ok_idx.size < k + COLD_MIN_REST:
        return None
    first, rest = v.ttft[ok_idx[:k]], v.ttft[ok_idx[k:]]
    f_med, r_med = float(np.median(first)), float(np.median(rest))
    if r_med <= 0 or f_med < COLD_FACTOR * r_med:
        return None
    p99_all = pct(v.ttft, 99) or 0.0
    p99_rest = pct(rest, 99) or 0.0
    return Finding(
        rule="cold_start",
        title="Cold start: first requests slow, no warmup",
        symptom=f"the first {k} requests waited ×{f_med / r_med:.1f} longer for their first token than the rest",
        evidence=(
            f"median TTFT of the first {k} requests {f_med:.0f} ms vs {r_med:.0f} ms for the others",
            f"TTFT p99 {p99_all:.0f} ms with them, {p99_rest:.0f} ms without",
            "no warmup requests were excluded",
        ),
        cause="one-off start-up work: connection setup, CUDA graph capture or compilation, cold caches, model load",
        actions=(
            "rerun with --warmup N so start-up cost is measured apart from steady state",
            "pre-warm replicas before they take traffic (readiness probe that sends a request)",
            "keep HTTP connections alive across requests",
        ),
        impact=clip01(0.2 + (p99_all - p99_rest) / p99_all) if p99_all else 0.2,
    )
