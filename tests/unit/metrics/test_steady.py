"""The steady window of a run: first wave and drain left out; drifting latency flagged; time slices."""

from __future__ import annotations

from tailscope.metrics.steady import slice_records, steady_window
from tailscope.metrics.summary import summarize
from tailscope.records import RequestRecord, Status

MS = 1_000_000


def closed_loop(slots: int, per_slot: int, service_ms: float, ttft_ms: float = 20.0, growth_ms: float = 0.0) -> list:
    """``slots`` clients, each sending ``per_slot`` back-to-back requests of ``service_ms``."""
    out = []
    i = 0
    for s in range(slots):
        t = s * 0.1 * MS  # the first wave: every slot at (almost) once
        for _ in range(per_slot):
            ttft = ttft_ms + growth_ms * (t / 1e9)
            first = t + ttft * MS
            end = t + service_ms * MS
            times = (int(first), int(end))
            out.append(RequestRecord(i, int(t), int(t), *times, Status.OK, chunk_times_ns=times, chunk_tokens=(1, 1)))
            i += 1
            t = end
    return out


def test_first_wave_and_drain_are_left_out() -> None:
    recs = closed_loop(slots=4, per_slot=30, service_ms=100)
    w = steady_window(recs)
    assert w is not None
    assert 4 <= w.ramp_up <= 8  # the first wave (and what its first completions sent) is left out
    assert 0.09 <= w.start_s <= 0.11
    assert w.requests + w.ramp_up + w.drain <= len(recs)
    assert w.drain <= 4
    assert w.stationary is True
    assert abs(w.ttft_drift or 0.0) < 0.05


def test_drifting_latency_is_non_stationary_and_warned() -> None:
    recs = closed_loop(slots=4, per_slot=30, service_ms=100, ttft_ms=20, growth_ms=20)  # +20 ms TTFT per second
    s = summarize(recs)
    assert s.steady is not None
    assert s.steady.stationary is False
    assert (s.steady.ttft_drift or 0) > 0.2
    assert any(w.startswith("NON-STATIONARY") for w in s.warnings)


def test_small_runs_have_no_window_and_slices_cut_by_schedule() -> None:
    assert steady_window(closed_loop(slots=2, per_slot=5, service_ms=50)) is None
    recs = closed_loop(slots=1, per_slot=10, service_ms=100)  # sends at 0, 0.1, …, 0.9 s
    assert [r.id for r in slice_records(recs, 0.25, 0.55)] == [3, 4, 5]
