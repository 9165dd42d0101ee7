"""Over-saturation detection on synthetic records: growing TTFT through a steady stage vs a steady one."""

from __future__ import annotations

import random

import pytest

from tailscope.metrics.saturation import _t_sf, detect_saturation, saturation_warnings
from tailscope.records import ErrorClass, RequestRecord, Status

MS = 1_000_000


def _records(ttft_ms_at, *, n: int = 300, span_s: float = 60.0, seed: int = 0, fail_after: float | None = None):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = span_s * i / n
        sched = round(t * 1e9)
        if fail_after is not None and t >= fail_after:
            out.append(
                RequestRecord(
                    id=i,
                    scheduled_ns=sched,
                    sent_ns=sched,
                    first_token_ns=None,
                    end_ns=sched + 30 * 10**9,
                    status=Status.ERROR,
                    error=ErrorClass.TIMEOUT_FIRST_TOKEN,
                )
            )
            continue
        ttft = max(1.0, ttft_ms_at(t) + rng.gauss(0, 20))
        first = sched + round(ttft * MS)
        out.append(
            RequestRecord(
                id=i, scheduled_ns=sched, sent_ns=sched, first_token_ns=first, end_ns=first + 500 * MS, status=Status.OK
            )
        )
    return out


def test_steady_stage_is_not_flagged() -> None:
    recs = _records(lambda t: 120.0)
    v = detect_saturation(recs)
    assert len(v) == 1
    assert not v[0].saturated
    assert v[0].n == 300
    assert saturation_warnings(v) == ()


def test_growing_ttft_is_flagged_with_its_slope() -> None:
    recs = _records(lambda t: 100.0 + 40.0 * t)  # the queue grows by 40 ms per second
    v = detect_saturation(recs, windows=[(0.0, 60.0)], labels=["stage 3 (10 req/s)"])
    assert v[0].saturated
    assert v[0].slope_ms_per_s == pytest.approx(40.0, rel=0.05)
    assert v[0].p_value is not None
    assert v[0].p_value < 1e-6
    (msg,) = saturation_warnings(v)
    assert msg.startswith("OVER-SATURATED in stage 3 (10 req/s) (0–60 s): TTFT kept growing")
    assert "+40." in msg


def test_small_growth_is_not_material() -> None:
    # statistically clear but tiny: +0.5 ms/s over 60 s is 30 ms on a 2 s baseline
    recs = _records(lambda t: 2000.0 + 0.5 * t, n=2000)
    v = detect_saturation(recs)
    assert v[0].slope_ms_per_s is not None
    assert v[0].slope_ms_per_s > 0
    assert not v[0].saturated


def test_windows_separate_steady_from_saturated_stages() -> None:
    # 0–30 s fine, 30–60 s growing
    recs = _records(lambda t: 100.0 if t < 30 else 100.0 + 60.0 * (t - 30))
    v = detect_saturation(recs, windows=[(0.0, 30.0), (30.0, 60.0)])
    assert [x.saturated for x in v] == [False, True]
    assert [x.label for x in v] == ["stage 1", "stage 2"]


def test_mass_failure_is_flagged() -> None:
    recs = _records(lambda t: 100.0, fail_after=20.0)
    v = detect_saturation(recs, windows=[(0.0, 20.0), (20.0, 60.0)])
    assert [x.saturated for x in v] == [False, True]
    assert v[1].failed_fraction == 1.0
    assert "failed" in v[1].message()


def test_warmup_and_tiny_windows() -> None:
    recs = _records(lambda t: 100.0 + 40.0 * t, n=5)
    assert not detect_saturation(recs)[0].saturated  # fewer than min_points
    assert detect_saturation([]) == []


def test_student_t_tail_matches_tables() -> None:
    # t-table values: P(T > 2.228) = 0.025 at 10 df; P(T > 1.96) ≈ 0.025 for large df; symmetric
    assert _t_sf(2.228, 10) == pytest.approx(0.025, abs=2e-4)
    assert _t_sf(1.96, 10_000) == pytest.approx(0.025, abs=2e-4)
    assert _t_sf(0.0, 5) == pytest.approx(0.5)
    assert _t_sf(-2.228, 10) == pytest.approx(0.975, abs=2e-4)


def test_a_client_that_falls_behind_is_not_called_server_saturation() -> None:
    """TTFT from the intended send grows because the sends went out later and later; from the actual send it is
    flat: the client is behind, not the server (issue 26: the old warning said 'add replicas')."""
    from dataclasses import replace

    from tailscope.metrics.saturation import saturation_check
    from tailscope.records import ServerSample

    recs = _records(lambda t: 120.0)
    late = [replace(r, sent_ns=r.scheduled_ns + round(10 * (r.scheduled_ns / 1e9) * MS),
                    first_token_ns=(r.first_token_ns or 0) + round(10 * (r.scheduled_ns / 1e9) * MS))
            for r in recs]  # fmt: skip
    v = detect_saturation(late)[0]
    assert v.saturated  # TTFT from the intended send does grow …
    assert v.client_side  # … but not from the actual send
    assert v.message().startswith("CLIENT BEHIND")
    assert "add replicas" not in v.message()
    queue = [ServerSample(t_ns=t * 10**9, name="vllm:num_requests_waiting", value=0.0) for t in range(60)]
    (warning,) = saturation_check(late, None, open_loop=True, constant_rate=True, samples=queue)
    assert "queue peaked at 0" in warning
    server = _records(lambda t: 120.0 + 20.0 * t)  # the server's own queue grows: sends on time
    (grown,) = saturation_check(server, None, open_loop=True, constant_rate=True)
    assert grown.startswith("OVER-SATURATED")


def test_a_capped_open_loop_that_waits_for_slots_says_so() -> None:
    """``bench --rate R --concurrency C``: sends go out late because every slot was taken; that is the cap, not a
    slow client, and the warning names it (issue 26 item 5)."""
    from dataclasses import replace

    from tailscope.metrics.saturation import saturation_check

    recs = _records(lambda t: 120.0)
    late = [replace(r, sent_ns=r.scheduled_ns + round(10 * (r.scheduled_ns / 1e9) * MS),
                    first_token_ns=(r.first_token_ns or 0) + round(10 * (r.scheduled_ns / 1e9) * MS))
            for r in recs]  # fmt: skip
    (warning,) = saturation_check(late, None, open_loop=True, constant_rate=True, cap=4)
    assert warning.startswith("CAP REACHED")
    assert "4 slots" in warning
    assert "CLIENT BEHIND" not in warning
