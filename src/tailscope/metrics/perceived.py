"""Perceived latency: what a person reading the stream notices, beyond percentiles.

Three shares over a run's successful requests:

* **slow stream** — TPOT above the reading speed (default 30 tokens/s, i.e. TPOT > 33.3 ms): the text arrives slower
  than it is read, so the reader waits on every line;
* **stalls** — gaps of at least ``stall_ms`` (default 250 ms) between consecutive token events: the stream visibly
  stops. Reported as stalls per request and the share of requests with at least one;
* **slow first token** — TTFT above ``slow_ttft_ms`` (default 2 s): the user wonders whether anything happens.

Pure and vectorised (a long run has millions of token events).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from tailscope.metrics import request as rq
from tailscope.records import RequestRecord


@dataclass(frozen=True, slots=True)
class PerceivedThresholds:
    """Where perceived slowness starts: reading speed (tokens/s), a stall (ms), a slow first token (ms)."""

    reading_tokens_per_s: float = 30.0
    stall_ms: float = 250.0
    slow_ttft_ms: float = 2000.0


@dataclass(frozen=True, slots=True)
class Perceived:
    """The perceived-latency block of a summary (shares are 0–1 over ``requests`` successful requests)."""

    thresholds: PerceivedThresholds
    requests: int
    slow_stream_share: float | None
    stalls_per_request: float | None
    stalled_share: float | None
    slow_ttft_share: float | None

    def to_dict(self) -> dict[str, Any]:
        t = self.thresholds
        return {
            "reading_tokens_per_s": t.reading_tokens_per_s,
            "stall_ms": t.stall_ms,
            "slow_ttft_ms": t.slow_ttft_ms,
            "requests": self.requests,
            "slow_stream_share": self.slow_stream_share,
            "stalls_per_request": self.stalls_per_request,
            "stalled_share": self.stalled_share,
            "slow_ttft_share": self.slow_ttft_share,
        }


def _stall_counts(
    ok: Sequence[RequestRecord], stall_ns: float, flat: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """Per request, how many gaps between consecutive token events are ≥ ``stall_ns``.

    ``flat``: ``(lengths, gaps)`` when the caller has them already: ``ok``'s chunk counts and the gaps inside each
    request, in order (int64 ns, from times below 2**53, so that they compare as the differences of the times read
    here do) — a summary has them from its token gaps."""
    if flat is not None:
        lengths, gaps = flat
        ends = np.cumsum(np.maximum(lengths - 1, 0))  # request i's gaps are gaps[ends[i-1]:ends[i]]
        few = np.flatnonzero(gaps >= stall_ns)  # the stalled gaps: no cumulative sum over millions of gaps
        out: np.ndarray = np.bincount(np.searchsorted(ends, few, side="right"), minlength=lengths.size)
        return out.astype(np.int64, copy=False)
    lengths = np.fromiter((len(r.chunk_times_ns) for r in ok), dtype=np.int64, count=len(ok))
    counts = np.zeros(len(ok), dtype=np.int64)
    total = int(lengths.sum())
    if total < 2:
        return counts
    times = np.fromiter(chain.from_iterable(r.chunk_times_ns for r in ok), dtype=np.float64, count=total)
    stalled = np.diff(times) >= stall_ns  # gap j lies between events j and j+1
    starts = np.cumsum(lengths) - lengths
    inside = np.ones(total - 1, dtype=bool)
    boundaries = starts[(lengths > 0) & (starts > 0)] - 1  # the gap from one request's last event to the next's first
    inside[boundaries] = False
    flags = np.concatenate([[0], (stalled & inside).astype(np.int64)])  # flag of the gap *before* each event
    per_event_cum = np.cumsum(flags)
    ends = starts + lengths - 1
    has = lengths > 0
    counts[has] = per_event_cum[ends[has]] - per_event_cum[starts[has]]
    return counts


def perceived(
    records: Sequence[RequestRecord],
    thresholds: PerceivedThresholds | None = None,
    *,
    tpot_ms: np.ndarray | None = None,
    ttft_ms: np.ndarray | None = None,
    flat_gaps: tuple[np.ndarray, np.ndarray] | None = None,
) -> Perceived:
    """The perceived-latency block over the successful, non-warmup requests of ``records``.

    Args:
        tpot_ms, ttft_ms: those requests' TPOT and TTFT values when the caller has them already (a summary does).
        flat_gaps: ``(lengths, gaps)``: those requests' chunk counts and the gaps inside each of them (int64 ns, from
            times |t| < 2**53) in order, when the caller has them already (a summary does).
    """
    t = thresholds or PerceivedThresholds()
    ok = [r for r in records if r.ok and not r.warmup]
    if not ok:
        return Perceived(t, 0, None, None, None, None)
    tpot = tpot_ms if tpot_ms is not None else np.asarray([v for r in ok if (v := rq.tpot_ms(r)) is not None])
    ttft = ttft_ms if ttft_ms is not None else np.asarray([v for r in ok if (v := rq.ttft_ms(r)) is not None])
    counts = _stall_counts(ok, t.stall_ms * 1e6, flat_gaps)
    return Perceived(
        thresholds=t,
        requests=len(ok),
        slow_stream_share=float((tpot > 1000.0 / t.reading_tokens_per_s).mean()) if tpot.size else None,
        stalls_per_request=float(counts.mean()),
        stalled_share=float((counts > 0).mean()),
        slow_ttft_share=float((ttft > t.slow_ttft_ms).mean()) if ttft.size else None,
    )
