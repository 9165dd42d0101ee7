"""Per-request metric derivations (pure functions over :class:`RequestRecord`).

Definitions are the contract in ``docs/metrics.md``. Every function returns ``None`` when the metric is not defined
for the record (e.g. TPOT with fewer than two output tokens), never 0.
"""

from __future__ import annotations

from tailscope.records import RequestRecord

_MS = 1e6


def ttft_ms(r: RequestRecord, *, from_sent: bool = False) -> float | None:
    """Time to first token: first token-bearing event − scheduled (or − sent), in ms."""
    if r.first_token_ns is None:
        return None
    origin = r.sent_ns if from_sent else r.scheduled_ns
    if origin is None:
        return None
    return (r.first_token_ns - origin) / _MS


def e2e_ms(r: RequestRecord, *, from_sent: bool = False) -> float | None:
    """End-to-end latency: last token-bearing event − scheduled (or − sent), in ms. Successful requests only."""
    if not r.ok or r.end_ns is None:
        return None
    origin = r.sent_ns if from_sent else r.scheduled_ns
    if origin is None:
        return None
    return (r.end_ns - origin) / _MS


def output_token_count(r: RequestRecord) -> int:
    """N: server-reported output tokens when known, else the sum of per-chunk tokens."""
    if r.output_tokens is not None:
        return r.output_tokens
    return sum(r.chunk_tokens)


def tpot_ms(r: RequestRecord) -> float | None:
    """Time per output token after the first: (E2E − TTFT) / (N − 1) in ms; ``None`` for N < 2 or failures."""
    if not r.ok or r.first_token_ns is None or r.end_ns is None:
        return None
    n = output_token_count(r)
    if n < 2:
        return None
    return (r.end_ns - r.first_token_ns) / _MS / (n - 1)


def itl_samples_ms(r: RequestRecord) -> list[float]:
    """Per-token inter-token latencies: each gap between consecutive token-bearing events, split evenly over the
    tokens of the later event (k tokens → k samples of gap/k). Empty for fewer than two events."""
    times = r.chunk_times_ns
    toks = r.chunk_tokens
    out: list[float] = []
    for i in range(1, len(times)):
        gap = (times[i] - times[i - 1]) / _MS
        k = toks[i] if i < len(toks) else 1
        if k <= 1:
            out.append(gap)
        else:
            out.extend([gap / k] * k)
    return out


def icl_samples_ms(r: RequestRecord) -> list[float]:
    """Inter-chunk latencies: each gap between consecutive token-bearing events, unsplit, in ms."""
    times = r.chunk_times_ns
    return [(times[i] - times[i - 1]) / _MS for i in range(1, len(times))]


def max_stall_ms(r: RequestRecord) -> float | None:
    """Longest gap between consecutive token-bearing events of the request, in ms (``None`` with < 2 events)."""
    times = r.chunk_times_ns
    if len(times) < 2:
        return None
    return max(times[i] - times[i - 1] for i in range(1, len(times))) / _MS


def send_lag_ms(r: RequestRecord) -> float | None:
    """How late the client sent the request: sent − scheduled, in ms."""
    if r.sent_ns is None:
        return None
    return (r.sent_ns - r.scheduled_ns) / _MS
