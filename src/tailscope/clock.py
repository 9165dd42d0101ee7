"""Injectable clocks.

Intervals are measured with a monotonic nanosecond clock (``time.perf_counter_ns``); a run takes one wall-clock stamp
at its start for export. Tests inject :class:`ManualClock` to get exact, repeatable times.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """A monotonic clock in integer nanoseconds."""

    def now_ns(self) -> int:
        """Current monotonic time in nanoseconds (arbitrary epoch)."""
        ...


class MonotonicClock:
    """Production clock: ``time.perf_counter_ns``."""

    __slots__ = ()

    def now_ns(self) -> int:
        return time.perf_counter_ns()


class ManualClock:
    """A clock that only moves when told to; for tests and virtual time."""

    __slots__ = ("_t",)

    def __init__(self, start_ns: int = 0) -> None:
        self._t = start_ns

    def now_ns(self) -> int:
        return self._t

    def advance(self, delta_ns: int) -> None:
        """Move forward by ``delta_ns`` nanoseconds (must be ≥ 0)."""
        if delta_ns < 0:
            raise ValueError(f"a clock cannot go backwards (delta {delta_ns} ns)")
        self._t += delta_ns

    def set(self, t_ns: int) -> None:
        """Jump to absolute time ``t_ns`` (must not be in the past)."""
        if t_ns < self._t:
            raise ValueError(f"a clock cannot go backwards ({t_ns} < {self._t})")
        self._t = t_ns


def unix_offset_ns(clock: Clock, *, tries: int = 7) -> int:
    """Unix time minus ``clock``'s reading, in ns: add it to a reading to get Unix time.

    Two clocks cannot be read at one instant; a thread preempted between the two reads (milliseconds on a busy
    machine) would shift every mapped time by that much. So the Unix read is bracketed by two readings of ``clock``
    ``tries`` times and the narrowest bracket is kept: its error is at most half its width (microseconds), unless
    every try was preempted.
    """
    best_width, best = -1, 0
    for _ in range(max(1, tries)):
        a = clock.now_ns()
        u = time.time_ns()
        b = clock.now_ns()
        if best_width < 0 or b - a < best_width:
            best_width, best = b - a, u - (a + b) // 2
    return best


def utc_now_iso() -> str:
    """Wall-clock UTC time as ISO 8601 with a ``Z`` suffix; used once per run as its ``started_at``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
