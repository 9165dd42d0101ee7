"""Metric dialects on hand-made records, against values computed by hand from each tool's definitions."""

from __future__ import annotations

import pytest

from tailscope.metrics.dialects import DIALECTS, summarize_dialect
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource

MS = 1_000_000

# A: sent 1 ms after its schedule; a role-only first event at 11 ms; content at 21, 31, 51 ms (the last carries 2
#    tokens); 4 output tokens by usage; the stream closes at 61 ms.
A = RequestRecord(
    id=0,
    scheduled_ns=0,
    sent_ns=1 * MS,
    first_token_ns=21 * MS,
    end_ns=51 * MS,
    status=Status.OK,
    input_tokens=100,
    output_tokens=4,
    requested_output_tokens=4,
    tokens_source=TokensSource.USAGE,
    chunk_times_ns=(21 * MS, 31 * MS, 51 * MS),
    chunk_tokens=(1, 1, 2),
    first_event_ns=11 * MS,
    stream_end_ns=61 * MS,
)
# B: sent on time at 100 ms; content at 140 and 150 ms; 2 tokens; stream closes at 155 ms; no separate role event.
B = RequestRecord(
    id=1,
    scheduled_ns=100 * MS,
    sent_ns=100 * MS,
    first_token_ns=140 * MS,
    end_ns=150 * MS,
    status=Status.OK,
    input_tokens=50,
    output_tokens=2,
    requested_output_tokens=8,
    tokens_source=TokensSource.USAGE,
    chunk_times_ns=(140 * MS, 150 * MS),
    chunk_tokens=(1, 1),
    first_event_ns=140 * MS,
    stream_end_ns=155 * MS,
)
# C: failed at 300 ms.
C = RequestRecord(
    id=2,
    scheduled_ns=200 * MS,
    sent_ns=200 * MS,
    first_token_ns=None,
    end_ns=300 * MS,
    status=Status.ERROR,
    error=ErrorClass.HTTP_5XX,
)
# W: a warmup request that every dialect leaves out (it would dominate every statistic).
W = RequestRecord(
    id=3,
    scheduled_ns=0,
    sent_ns=0,
    first_token_ns=5000 * MS,
    end_ns=9000 * MS,
    status=Status.OK,
    output_tokens=2,
    tokens_source=TokensSource.USAGE,
    chunk_times_ns=(5000 * MS, 9000 * MS),
    chunk_tokens=(1, 1),
    warmup=True,
)
RECORDS = [A, B, C, W]


def _m(d: dict, key: str) -> dict:  # type: ignore[type-arg]
    return d["metrics"][key]  # type: ignore[no-any-return]


def test_vllm_definitions() -> None:
    d = summarize_dialect(RECORDS, "vllm")
    assert d["requests"] == {"completed": 2, "failed": 1}
    # TTFT from the send to the first event with a choice (the role-only delta counts): 10 and 40 ms
    ttft = _m(d, "ttft_ms")
    assert (ttft["mean"], ttft["median"], ttft["count"]) == pytest.approx((25.0, 25.0, 2))
    assert ttft["p99"] == pytest.approx(10 + 0.99 * 30)
    assert ttft["std"] == pytest.approx(15.0)
    # ITL per chunk gap between choice events, pooled: A [10, 10, 20], B [10]
    itl = _m(d, "itl_ms")
    assert itl["count"] == 4
    assert (itl["mean"], itl["median"], itl["max"]) == pytest.approx((12.5, 10.0, 20.0))
    # E2EL to the last token-bearing event: 50 and 50; TPOT = (E2EL − TTFT)/(N − 1): 40/3 and 10/1
    assert _m(d, "e2e_ms")["mean"] == pytest.approx(50.0)
    assert _m(d, "tpot_ms")["mean"] == pytest.approx((40 / 3 + 10) / 2)
    # duration: first scheduled (0) → last stream close/failure (300 ms)
    assert d["duration_s"] == pytest.approx(0.3)
    assert d["output_throughput"] == pytest.approx(6 / 0.3)
    assert d["total_token_throughput"] == pytest.approx(156 / 0.3)
    assert d["names"]["e2e_ms"] == "E2EL"


def test_sglang_definitions() -> None:
    d = summarize_dialect(RECORDS, "sglang")
    # TTFT to the first non-empty content: 20 and 40 ms
    assert _m(d, "ttft_ms")["mean"] == pytest.approx(30.0)
    # E2E to the last line of the stream ([DONE]): 60 and 55 ms
    e2e = _m(d, "e2e_ms")
    assert (e2e["mean"], e2e["min"], e2e["max"]) == pytest.approx((57.5, 55.0, 60.0))
    # ITL per content chunk gap: A [10, 20], B [10]
    assert _m(d, "itl_ms")["count"] == 3
    assert _m(d, "itl_ms")["mean"] == pytest.approx(40 / 3)
    # TPOT = (E2E − TTFT)/(N − 1) with usage N: (60 − 20)/3, (55 − 40)/1
    assert _m(d, "tpot_ms")["mean"] == pytest.approx((40 / 3 + 15) / 2)
    assert d["concurrency"] == pytest.approx(0.115 / 0.3)


def test_sglang_uses_requested_tokens_without_usage() -> None:
    from dataclasses import replace

    b = replace(B, tokens_source=TokensSource.CHUNKS)
    d = summarize_dialect([b], "sglang")
    # bench_serving keeps the requested output length (8) when usage is absent: (55 − 40)/7
    assert _m(d, "tpot_ms")["mean"] == pytest.approx(15 / 7)


def test_aiperf_definitions() -> None:
    d = summarize_dialect(RECORDS, "aiperf")
    assert _m(d, "ttft_ms")["mean"] == pytest.approx(30.0)
    # request latency to the last content response: 50 and 50
    assert _m(d, "e2e_ms")["mean"] == pytest.approx(50.0)
    # ITL is a per-request average: (50 − 20)/(4 − 1) = 10 and (50 − 40)/(2 − 1) = 10
    itl = _m(d, "itl_ms")
    assert (itl["count"], itl["mean"]) == (2, pytest.approx(10.0))
    # ICL is per chunk: A [10, 20], B [10]; TTST: 10 and 10
    assert _m(d, "icl_ms")["count"] == 3
    assert _m(d, "ttst_ms")["mean"] == pytest.approx(10.0)
    assert _m(d, "output_token_throughput_per_user")["mean"] == pytest.approx(100.0)
    # duration: max response (150 ms) − min request start (1 ms)
    assert d["duration_s"] == pytest.approx(0.149)
    assert d["request_throughput"] == pytest.approx(2 / 0.149)


def test_guidellm_definitions() -> None:
    d = summarize_dialect(RECORDS, "guidellm")
    # TPOT includes the first token: (last token − start)/N = 50/4, 50/2
    tpot = _m(d, "tpot_ms")
    assert tpot["mean"] == pytest.approx((12.5 + 25) / 2)
    # ITL = (last − first token)/(N − 1) = 30/3, 10/1
    assert _m(d, "itl_ms")["mean"] == pytest.approx(10.0)
    # request latency to stream close: 60 and 55
    assert _m(d, "e2e_ms")["mean"] == pytest.approx(57.5)
    # percentiles without interpolation: the smallest value whose cumulative share ≥ q
    ttft = _m(d, "ttft_ms")
    assert (ttft["median"], ttft["p90"], ttft["p99"]) == (20.0, 40.0, 40.0)


def test_guidellm_percentile_rule_on_ten_values() -> None:
    recs = []
    for i in range(10):
        t = (i + 1) * 10 * MS
        recs.append(
            RequestRecord(
                id=i,
                scheduled_ns=0,
                sent_ns=0,
                first_token_ns=t,
                end_ns=t + MS,
                status=Status.OK,
                output_tokens=2,
                tokens_source=TokensSource.USAGE,
                chunk_times_ns=(t, t + MS),
                chunk_tokens=(1, 1),
            )
        )
    g = _m(summarize_dialect(recs, "guidellm"), "ttft_ms")
    v = _m(summarize_dialect(recs, "vllm"), "ttft_ms")
    # GuideLLM sums the ten 0.1 shares in floating point: 0.5 exactly at the 5th value, but 0.8999999999999999 at the
    # 9th, so its p90 is the 10th value (its own DistributionSummary gives the same)
    assert (g["median"], g["p90"], g["p95"], g["p99"]) == (50.0, 100.0, 100.0, 100.0)
    assert (v["median"], v["p90"], v["p99"]) == pytest.approx((55.0, 91.0, 99.1))


def test_tailscope_dialect_measures_from_the_schedule() -> None:
    d = summarize_dialect(RECORDS, "tailscope")
    # A is 1 ms late: tailscope's TTFT counts from the intended send (21 ms), vLLM's from the send (10 ms)
    assert _m(d, "ttft_ms")["min"] == pytest.approx(21.0)
    assert d["requests"] == {"completed": 2, "failed": 1}


def test_every_dialect_has_the_same_shape_and_skips_warmup() -> None:
    for name in DIALECTS:
        d = summarize_dialect(RECORDS, name)
        assert d["dialect"] == name
        assert d["source"]
        assert {"ttft_ms", "itl_ms", "e2e_ms"} <= set(d["metrics"])
        assert all(m["max"] is None or m["max"] < 1000 for m in d["metrics"].values() if "count" in m)


def test_empty_and_unknown() -> None:
    d = summarize_dialect([], "vllm")
    assert d["metrics"]["ttft_ms"]["count"] == 0
    assert d["metrics"]["ttft_ms"]["mean"] is None
    assert d["request_throughput"] is None
    with pytest.raises(ValueError, match="use one of tailscope, vllm"):
        summarize_dialect([], "locust")
