"""Mapping a monotonic clock to Unix time: a thread preempted between the two reads must not shift the mapping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tailscope.clock as clock_mod
from tailscope.clock import unix_offset_ns


class _Scripted:
    """A clock whose readings come from a list (one per ``now_ns`` call)."""

    def __init__(self, readings: list[int]) -> None:
        self._it: Iterator[int] = iter(readings)

    def now_ns(self) -> int:
        return next(self._it)


def test_the_narrowest_bracket_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    # true offset 1_000_000_000: Unix = clock + 1e9. Try 1 is preempted for 5 ms after its first clock read (the
    # Unix read comes late), try 2 is clean (1 µs wide), try 3 preempted before its second read.
    clock = _Scripted([0, 5_000_100, 10_000_000, 10_001_000, 20_000_000, 24_000_000])
    unix = iter([1_000_000_000 + 5_000_000, 1_000_000_000 + 10_000_500, 1_000_000_000 + 20_000_200])
    monkeypatch.setattr(clock_mod.time, "time_ns", lambda: next(unix))
    assert unix_offset_ns(clock, tries=3) == 1_000_000_000  # exact: the clean try's midpoint


def test_a_single_try_is_the_midpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock_mod.time, "time_ns", lambda: 500)
    assert unix_offset_ns(_Scripted([100, 300]), tries=1) == 300


def test_on_the_real_clocks_the_error_is_small() -> None:
    import time

    off = unix_offset_ns(clock_mod.MonotonicClock())
    # the mapping agrees with a fresh pair of reads to within their own (coarse) preemption margin
    assert abs(time.time_ns() - (time.perf_counter_ns() + off)) < 50_000_000
