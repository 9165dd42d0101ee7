"""Trace replay: request streams from recorded arrival times and lengths (``--replay FILE``, ``--time-scale``).

The trace files are read by :mod:`tailscope.io.replay` (formats, validation); this module turns their rows into
request specs. Timestamps are relative to the earliest row and multiplied by ``time_scale`` (0.5 replays twice as
fast, 2 half as fast). Rows of one ``session`` become turns: the first keeps its time, the later ones are sent
``think_time_s`` (default: the gap between the rows' timestamps) after the previous turn completed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tailscope.errors import ProfileError
from tailscope.workload.spec import RequestSpec

_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ReplayRow:
    """One request of a trace (times in seconds from the trace's first request, before scaling).

    Attributes:
        line: the row's line in its file (for messages).
        timestamp_s: arrival time, seconds from the trace's first request.
        input_tokens: prompt tokens (≥ 1).
        output_tokens: tokens to generate (≥ 1).
        request_class: class name in records and per-class summaries.
        session: rows of one session become the turns of one conversation (None: a single request).
        think_time_s: the pause before this turn after the previous one completed (None: the timestamps' gap).
        prefix_key: requests with equal keys share a prefix variant (Mooncake's first block hash), or None.
    """

    line: int
    timestamp_s: float
    input_tokens: int
    output_tokens: int
    request_class: str = "replay"
    session: str | None = None
    think_time_s: float | None = None
    prefix_key: int | None = None


def replay_requests(
    rows: list[ReplayRow],
    *,
    seed: int,
    time_scale: float = 1.0,
    warmup: int = 0,
    max_requests: int | None = None,
    duration_s: float | None = None,
    prefix_tokens: int = 0,
) -> Iterator[RequestSpec]:
    """Request specs for a parsed trace.

    Args:
        rows: rows from :func:`tailscope.io.replay.read_replay` (sorted by time).
        seed: per-request prompt seeds derive from it.
        time_scale: multiplies every timestamp and think time (0.5 = twice as fast).
        warmup: the first N requests are warmup.
        max_requests: stop after this many requests.
        duration_s: drop requests scheduled at or after this time (scaled seconds).
        prefix_tokens: for Mooncake traces, the shared-prefix length given to rows with a ``prefix_key``
            (0 = no shared prefixes).

    Raises:
        ProfileError: for a non-positive ``time_scale``.
    """
    if not time_scale > 0:
        raise ProfileError(f"--time-scale must be > 0 (got {time_scale!r}); 0.5 replays twice as fast")
    last_ts: dict[str, float] = {}
    turns: dict[str, int] = {}
    prefix_ids: dict[int, int] = {}
    i = 0
    for r in rows:
        t = r.timestamp_s * time_scale
        if duration_s is not None and t >= duration_s:
            continue
        if max_requests is not None and i >= max_requests:
            return
        turn: int | None = None
        at_ns: int | None = round(t * _NS)
        think_ns = 0
        if r.session is not None:
            turn = turns.get(r.session, 0)
            turns[r.session] = turn + 1
            if turn > 0:
                gap = r.think_time_s if r.think_time_s is not None else r.timestamp_s - last_ts[r.session]
                think_ns = round(max(0.0, gap) * time_scale * _NS)
                at_ns = None
            last_ts[r.session] = r.timestamp_s
        prefix_id = None
        ptoks = 0
        if prefix_tokens > 0 and r.prefix_key is not None and (turn is None or turn == 0):
            prefix_id = prefix_ids.setdefault(r.prefix_key, len(prefix_ids))
            ptoks = min(prefix_tokens, r.input_tokens)
        yield RequestSpec(
            id=i,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            at_ns=at_ns,
            request_class=r.request_class,
            prefix_id=prefix_id,
            prefix_tokens=ptoks,
            session_id=r.session,
            turn=turn,
            think_time_ns=think_ns,
            warmup=i < warmup,
            seed=seed * 1_000_003 + i,
        )
        i += 1
