"""The discrete-event core: a heap of events keyed ``(time, priority, seq)``.

Equal times resolve by priority (lower first: tokens leave a replica before new arrivals are routed, as in SimPy's
``(time, priority, eid)``) and then by insertion order, so a run is fully deterministic.
"""

from __future__ import annotations

import heapq
from typing import Any

STEP_END = 0
REPLICA_READY = 1
ARRIVE = 2
SPEC_DUE = 3
SCRAPE = 4
TIMELINE = 5
ROUTE = 6
CLIENT_START = 7
KV_ARRIVE = 8  # a disaggregated request's KV reached the decode pool


class EventQueue:
    """Min-heap of ``(time_ns, priority, seq, payload)``."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, Any]] = []
        self._seq = 0

    def push(self, time_ns: int, priority: int, payload: Any) -> None:
        """Schedule ``payload`` at ``time_ns``."""
        self._seq += 1
        heapq.heappush(self._heap, (time_ns, priority, self._seq, payload))

    def pop(self) -> tuple[int, int, Any]:
        """Remove and return the earliest ``(time_ns, priority, payload)``."""
        t, p, _, payload = heapq.heappop(self._heap)
        return t, p, payload

    def peek_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
