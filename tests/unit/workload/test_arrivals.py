"""Open-loop schedules: a duration bounds the send times to ``[start, start + duration)``, in whole nanoseconds."""

from __future__ import annotations

import random

import pytest

from tailscope.workload.arrivals import arrival_offsets_ns


@pytest.mark.parametrize(("rate", "duration"), [(10, 5.0), (7, 2.0), (3, 1.0), (100, 0.3), (0.5, 4.0), (20, 60.0)])
def test_a_constant_rate_sends_rate_times_duration(rate: float, duration: float) -> None:
    """Fifty 0.1 s gaps add up to 4.999999999999998 s: on the schedule that is 5 s, the end of the window, so it is not
    sent (a constant 10/s for 5 s scheduled 51 requests, and sent the last whenever it beat the stop at 5 s)."""
    times = arrival_offsets_ns("constant", rate, random.Random(0), duration_s=duration)
    assert len(times) == round(rate * duration)
    assert times == sorted(times)
    assert times[-1] < round(duration * 1e9)
    shifted = arrival_offsets_ns("constant", rate, random.Random(0), duration_s=duration, start_s=2.0)
    assert len(shifted) == len(times)
    assert shifted[0] == 2_000_000_000


def test_a_count_and_a_duration_both_bound() -> None:
    assert len(arrival_offsets_ns("constant", 10, random.Random(0), count=3, duration_s=5.0)) == 3
    assert len(arrival_offsets_ns("poisson", 50, random.Random(1), count=10_000, duration_s=1.0)) < 200
