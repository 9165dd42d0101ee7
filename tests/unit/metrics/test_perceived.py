"""Perceived latency against hand-computed values: slow streams, stalls per request, slow first tokens."""

from __future__ import annotations

import pytest

from tailscope.metrics.perceived import PerceivedThresholds, perceived
from tailscope.metrics.summary import summarize
from tailscope.records import RequestRecord, Status

MS = 1_000_000


def rec(i: int, ttft_ms: float, gaps_ms: list[float], *, ok: bool = True) -> RequestRecord:
    first = round(ttft_ms * MS)
    times = [first]
    for g in gaps_ms:
        times.append(times[-1] + round(g * MS))
    status = Status.OK if ok else Status.ERROR
    return RequestRecord(
        id=i, scheduled_ns=0, sent_ns=0, first_token_ns=first, end_ns=times[-1], status=status,
        chunk_times_ns=tuple(times), chunk_tokens=tuple(1 for _ in times), output_tokens=len(times),
    )  # fmt: skip


def test_hand_computed_shares() -> None:
    records = [
        rec(0, 100, [10, 10, 10]),  # fast: TPOT 10 ms, no stall
        rec(1, 3000, [50, 50]),  # slow first token, TPOT 50 ms (under 30 tok/s)
        rec(2, 200, [300, 10, 260, 10]),  # two stalls ≥ 250 ms; TPOT (580/4) = 145 ms
        rec(3, 100, [20]),  # TPOT 20 ms
        rec(4, 9000, [999], ok=False),  # failed: not counted
    ]
    p = perceived(records)
    assert p.requests == 4
    assert p.slow_stream_share == pytest.approx(2 / 4)
    assert p.stalls_per_request == pytest.approx(2 / 4)
    assert p.stalled_share == pytest.approx(1 / 4)
    assert p.slow_ttft_share == pytest.approx(1 / 4)
    strict = perceived(records, PerceivedThresholds(reading_tokens_per_s=200, stall_ms=20, slow_ttft_ms=150))
    assert strict.slow_stream_share == 1.0  # every TPOT > 5 ms
    assert strict.stalls_per_request == pytest.approx((0 + 2 + 2 + 1) / 4)  # gaps ≥ 20 ms, never across requests
    assert strict.slow_ttft_share == pytest.approx(2 / 4)


def test_in_every_summary_and_empty_when_nothing_succeeded() -> None:
    doc = summarize([rec(0, 100, [10])]).to_dict()
    assert doc["perceived"]["requests"] == 1
    assert doc["perceived"]["reading_tokens_per_s"] == 30.0
    empty = perceived([rec(0, 100, [10], ok=False)])
    assert empty.requests == 0
    assert empty.slow_stream_share is None
