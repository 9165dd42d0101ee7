"""The run verdict: SLOs count failed requests as slower than any limit; too many failures fail the run."""

from __future__ import annotations

import math

from tailscope.metrics.slo import parse_slo
from tailscope.metrics.summary import summarize
from tailscope.metrics.verdict import run_verdict
from tailscope.records import ErrorClass, RequestRecord, Status


def ok(i: int, ttft_ms: float) -> RequestRecord:
    first = int(ttft_ms * 1e6)
    return RequestRecord(
        id=i,
        scheduled_ns=0,
        sent_ns=0,
        first_token_ns=first,
        end_ns=first + 10_000_000,
        status=Status.OK,
        chunk_times_ns=(first, first + 10_000_000),
        chunk_tokens=(1, 1),
        output_tokens=2,
    )


def failed(i: int) -> RequestRecord:
    return RequestRecord(
        id=i, scheduled_ns=0, sent_ns=0, first_token_ns=None, end_ns=5, status=Status.ERROR, error=ErrorClass.HTTP_5XX
    )


def test_failures_make_a_percentile_slo_fail_even_when_successes_are_fast() -> None:
    records = [ok(i, 10.0) for i in range(70)] + [failed(70 + i) for i in range(30)]
    s = summarize(records, slos=(parse_slo("ttft_p99=1s"), parse_slo("ttft_p50=1s")))
    p99, p50 = s.slo
    assert p99.observed_ms == math.inf
    assert not p99.passed
    assert p99.failed == 30
    assert p50.passed  # the median is still a fast success
    v = run_verdict(s)
    assert not v.passed
    assert v.error_rate == 0.3
    assert any("30 of 100 requests failed" in r for r in v.reasons)
    assert any("ttft_p99" in r and "∞" in r for r in v.reasons)


def test_a_clean_run_passes_and_the_error_budget_is_a_limit() -> None:
    records = [ok(i, 10.0) for i in range(99)] + [failed(99)]
    s = summarize(records, slos=(parse_slo("ttft_p90=1s"),))
    assert run_verdict(s, max_error_rate=0.01).passed  # exactly 1 % fails: at the limit, not over it
    assert not run_verdict(s, max_error_rate=0.005).passed
    assert run_verdict(summarize([ok(0, 5.0)])).passed


def test_no_measured_request_fails() -> None:
    warm = [RequestRecord(id=0, scheduled_ns=0, sent_ns=0, first_token_ns=1, end_ns=2, status=Status.OK, warmup=True)]
    v = run_verdict(summarize(warm))
    assert not v.passed
    assert "no request was measured" in v.reasons[0]
