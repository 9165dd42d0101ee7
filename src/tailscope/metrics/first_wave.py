"""The run's first wave (the requests due before any had finished) beside the rest of the run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tailscope.metrics import request as rq
from tailscope.metrics.percentiles import Stats, compute_stats
from tailscope.record_ops import FieldsDocument
from tailscope.records import RequestRecord, Status


@dataclass(frozen=True, slots=True)
class FirstWave(FieldsDocument):
    """The run's first wave beside the rest: the requests due before any request had finished (a closed loop's
    slots all start at once; an open loop's opening burst), which the client must get out while it also starts up.

    Attributes:
        count, rest: requests in the first wave / after it.
        send_lag_ms, rest_send_lag_ms: send lag (actual send − intended time) of each group.
        ttft_ms, rest_ttft_ms: TTFT from the intended time of each group's successful requests.
        ttft_from_sent_ms: the first wave's TTFT from the actual send (what the server took once the bytes left).
    """

    count: int
    rest: int
    send_lag_ms: Stats
    rest_send_lag_ms: Stats
    ttft_ms: Stats
    rest_ttft_ms: Stats
    ttft_from_sent_ms: Stats


def first_wave(measured: Sequence[RequestRecord]) -> FirstWave | None:
    """The first wave (requests scheduled before the first one ended) against the rest; None when either is empty."""
    ends = [r.end_ns for r in measured if r.end_ns is not None and r.status is Status.OK]
    if not ends:
        return None
    first_end = min(ends)
    wave = [r for r in measured if r.scheduled_ns < first_end]
    rest = [r for r in measured if r.scheduled_ns >= first_end]
    if len(wave) < 2 or not rest:
        return None

    def lag(rs: Sequence[RequestRecord]) -> Stats:
        return compute_stats([v for r in rs if (v := rq.send_lag_ms(r)) is not None])

    def ttft(rs: Sequence[RequestRecord], from_sent: bool = False) -> Stats:
        return compute_stats([v for r in rs if r.ok and (v := rq.ttft_ms(r, from_sent=from_sent)) is not None])

    return FirstWave(
        count=len(wave),
        rest=len(rest),
        send_lag_ms=lag(wave),
        rest_send_lag_ms=lag(rest),
        ttft_ms=ttft(wave),
        rest_ttft_ms=ttft(rest),
        ttft_from_sent_ms=ttft(wave, True),
    )
