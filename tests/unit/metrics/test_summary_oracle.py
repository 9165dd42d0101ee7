"""Metric oracle tests: hand-computed values for hand-made records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.metrics import request as rq
from tailscope.metrics.percentiles import compute_stats, percentile_fraction
from tailscope.metrics.slo import parse_slo
from tailscope.metrics.summary import summarize
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource

MS = 1_000_000


def rec(
    i: int,
    sched: float,
    sent: float,
    chunks: list[tuple[float, int]],
    *,
    n: int | None = None,
    status: Status = Status.OK,
    error: ErrorClass | None = None,
    warmup: bool = False,
    cls: str = "default",
    inp: int = 10,
) -> RequestRecord:
    times = tuple(round(t * MS) for t, _ in chunks)
    toks = tuple(k for _, k in chunks)
    return RequestRecord(
        id=i,
        scheduled_ns=round(sched * MS),
        sent_ns=round(sent * MS),
        first_token_ns=times[0] if times else None,
        end_ns=times[-1] if times and status is Status.OK else round((sent + 5) * MS),
        status=status,
        error=error,
        chunk_times_ns=times,
        chunk_tokens=toks,
        output_tokens=n if n is not None else (sum(toks) if toks else None),
        input_tokens=inp,
        tokens_source=TokensSource.USAGE,
        warmup=warmup,
        request_class=cls,
    )


def test_per_request_definitions_multi_token_chunks() -> None:
    # scheduled 0, sent 1; tokens at 100 (1), 130 (3), 140 (1) → N = 5
    r = rec(0, 0, 1, [(100, 1), (130, 3), (140, 1)])
    assert rq.ttft_ms(r) == pytest.approx(100)
    assert rq.ttft_ms(r, from_sent=True) == pytest.approx(99)
    assert rq.e2e_ms(r) == pytest.approx(140)
    assert rq.tpot_ms(r) == pytest.approx((140 - 100) / 4)
    assert rq.itl_samples_ms(r) == pytest.approx([10, 10, 10, 10])
    assert rq.icl_samples_ms(r) == pytest.approx([30, 10])
    assert rq.max_stall_ms(r) == pytest.approx(30)
    assert rq.send_lag_ms(r) == pytest.approx(1)


def test_single_token_has_no_tpot_and_no_itl() -> None:
    r = rec(0, 0, 0, [(50, 1)])
    assert rq.tpot_ms(r) is None
    assert rq.itl_samples_ms(r) == []
    assert rq.max_stall_ms(r) is None


def test_summary_counts_windows_and_rates() -> None:
    records = [
        rec(0, 0, 0, [(100, 1), (110, 1)], warmup=True),
        rec(1, 1000, 1000, [(1100, 1), (1120, 1), (1140, 1)]),  # ttft 100, e2e 140, tpot 20
        rec(2, 1500, 1502, [(1700, 1), (1710, 1)]),  # ttft 200, e2e 210, tpot 10
        rec(3, 1800, 1800, [], status=Status.ERROR, error=ErrorClass.HTTP_5XX),
        rec(4, 1900, 1900, [(1950, 1)], status=Status.INCOMPLETE, error=ErrorClass.CANCELLED),
    ]
    s = summarize(records)
    assert s.requests.total == 4
    assert s.requests.warmup == 1
    assert (s.requests.completed, s.requests.failed, s.requests.incomplete) == (2, 1, 1)
    # window: first scheduled non-warmup (1000 ms) → last end (1905 ms: failure/incomplete end = sent + 5)
    assert s.duration_s == pytest.approx(0.905)
    assert s.output_tokens_per_s == pytest.approx(5 / 0.905)
    assert s.total_tokens_per_s == pytest.approx((5 + 20) / 0.905)
    assert s.requests_per_s == pytest.approx(2 / 0.905)
    assert s.ttft_ms.count == 2
    assert s.ttft_ms.mean == pytest.approx(150)
    assert s.ttft_ms.p50 == pytest.approx(150)
    assert s.ttft_ms.max == pytest.approx(200)
    assert s.tpot_ms.mean == pytest.approx(15)
    assert s.itl_ms.count == 3
    assert s.errors == {"http_5xx": 1}
    assert s.send_lag_ms.max == pytest.approx(2)
    # error-adjusted p99 counts the failure as +inf
    assert s.error_adjusted_ms["ttft_p99"] == math.inf
    assert any("1 of 4 requests failed" in w for w in s.warnings)


def test_goodput_and_slo_verdicts() -> None:
    records = [
        rec(i, i * 100, i * 100, [(i * 100 + ttft, 1), (i * 100 + ttft + 20, 1)])
        for i, ttft in enumerate([50, 60, 500, 70])
    ]
    s = summarize(records, slos=[parse_slo("ttft_p99=100ms"), parse_slo("tpot_p50=30ms")])
    assert s.goodput_rps == pytest.approx(3 / s.duration_s)
    assert s.requests_per_s == pytest.approx(4 / s.duration_s)
    ttft_check, tpot_check = s.slo
    assert ttft_check.passed is False
    assert ttft_check.observed_ms == pytest.approx(np.quantile([50, 60, 500, 70], 0.99))
    assert tpot_check.passed is True


def test_per_class_summaries() -> None:
    records = [rec(0, 0, 0, [(10, 1)], cls="a"), rec(1, 0, 0, [(30, 1)], cls="b"), rec(2, 0, 0, [(20, 1)], cls="b")]
    s = summarize(records)
    assert set(s.classes) == {"a", "b"}
    assert s.classes["b"].ttft_ms.mean == pytest.approx(25)
    assert s.classes["a"].requests.completed == 1


def test_client_bottleneck_warning_from_send_lag() -> None:
    records = [rec(i, i * 10, i * 10 + 20, [(i * 10 + 50, 1)]) for i in range(50)]
    s = summarize(records)
    assert any("CLIENT BOTTLENECK" in w and "send lag" in w for w in s.warnings)


def test_requested_rate_shortfall_warning() -> None:
    records = [rec(i, i * 100, i * 200, [(i * 200 + 5, 1)]) for i in range(20)]
    s = summarize(records, requested_rate_rps=10.0)
    assert any("below 95 %" in w for w in s.warnings)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=300))
def test_percentiles_match_numpy_linear(xs: list[float]) -> None:
    s = compute_stats(xs)
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)):
        assert s.get(name) == pytest.approx(float(np.quantile(xs, q)))
    assert s.max == max(xs)
    assert s.count == len(xs)


def test_percentile_names() -> None:
    assert percentile_fraction("p99.9") == pytest.approx(0.999)
    assert percentile_fraction("p999") == pytest.approx(0.999)
    assert percentile_fraction("P95") == pytest.approx(0.95)
    with pytest.raises(ValueError, match="unknown percentile"):
        percentile_fraction("q7")


def test_slo_parsing() -> None:
    s = parse_slo("ttft_p99=1.5s")
    assert (s.metric, s.percentile, s.threshold_ms) == ("ttft", "p99", 1500.0)
    assert parse_slo("tpot_p99.9=60ms").percentile == "p999"
    assert parse_slo("e2e_p95=15").threshold_ms == 15.0  # bare number = ms
    from tailscope.errors import ConfigError

    with pytest.raises(ConfigError, match="expected METRIC_PERCENTILE=DURATION"):
        parse_slo("latency<5")
