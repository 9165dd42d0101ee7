"""The reference app's gateway limits are real (issue 25: "rate limit and quota"): a token bucket over every request
and a quota per caller per minute, in real time; a refused request is a 429 with when to retry."""

from __future__ import annotations

import pytest

from tailscope.app.pipeline import Limits, Throttled


def test_the_token_bucket_admits_its_burst_then_its_rate() -> None:
    limits = Limits(rate_rps=2.0, burst=3, quota_per_min=None, at=100.0)
    for _ in range(3):
        limits.admit(user=1, now=100.0)  # the burst
    with pytest.raises(Throttled, match=r"over the gateway's rate limit of 2/s") as info:
        limits.admit(user=1, now=100.0)
    assert info.value.retry_after_s == pytest.approx(0.5)  # one token comes back in 1/2 s
    limits.admit(user=1, now=100.5)
    with pytest.raises(Throttled):
        limits.admit(user=2, now=100.6)  # any caller: the bucket is the gateway's


def test_the_quota_is_per_caller_per_minute() -> None:
    limits = Limits(rate_rps=None, burst=10, quota_per_min=2)
    limits.admit(user=7, now=60.0)
    limits.admit(user=7, now=61.0)
    with pytest.raises(Throttled, match=r"user 7 is over its quota of 2/min") as info:
        limits.admit(user=7, now=90.0)
    assert info.value.retry_after_s == pytest.approx(30.0)  # the next minute
    limits.admit(user=8, now=90.0)  # another caller has its own
    limits.admit(user=7, now=120.0)  # a new minute


def test_a_refused_request_takes_no_token_and_no_quota() -> None:
    limits = Limits(rate_rps=1.0, burst=1, quota_per_min=5, at=0.0)
    limits.admit(user=1, now=0.0)
    with pytest.raises(Throttled):
        limits.admit(user=1, now=0.1)
    assert limits.used[1] == 1  # the refusal did not count against the caller's quota
