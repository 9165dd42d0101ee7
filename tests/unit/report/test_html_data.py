"""Chart data: CDF points, histograms, windows, time series and the Gantt sample, against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.records import RequestRecord, ServerSample, Status
from tailscope.report import html_data as hd

MS = 1_000_000
S = 1_000_000_000


def rec(i: int, sched_s: float, end_s: float, *, tokens: int = 4, status: Status = Status.OK) -> RequestRecord:
    sched = int(sched_s * S)
    end = int(end_s * S)
    first = sched + 100 * MS
    times = tuple(np.linspace(first, end, tokens).astype(int)) if status is Status.OK else ()
    return RequestRecord(
        id=i,
        scheduled_ns=sched,
        sent_ns=sched,
        first_token_ns=first if status is Status.OK else None,
        end_ns=end,
        status=status,
        output_tokens=tokens if status is Status.OK else None,
        chunk_times_ns=times,
        chunk_tokens=(1,) * len(times),
    )


def test_cdf_small_sets_keep_every_sample() -> None:
    c = hd.cdf_points(np.array([3.0, 1.0, 2.0]))
    assert c == {"x": [1.0, 2.0, 3.0], "y": [1 / 3, 2 / 3, 1.0]}


def test_cdf_of_nothing_is_empty() -> None:
    assert hd.cdf_points(np.array([])) == {"x": [], "y": []}


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=2001, max_value=60_000), st.integers(min_value=0, max_value=2**31))
def test_cdf_large_sets_are_bounded_monotone_and_exact_at_points(n: int, seed: int) -> None:
    values = np.random.default_rng(seed).lognormal(3, 1, n)
    c = hd.cdf_points(values)
    assert len(c["x"]) <= 1001
    assert c["x"] == sorted(c["x"])
    assert c["y"] == sorted(c["y"])
    assert c["x"][-1] == values.max()
    assert c["y"][-1] == 1.0
    # every point is a real sample at its exact empirical fraction
    srt = np.sort(values)
    for x, y in zip(c["x"][::97], c["y"][::97], strict=True):
        assert srt[round(y * n) - 1] == x


def test_histogram_linear_and_log() -> None:
    lin = hd.histogram(np.array([1.0, 2.0, 3.0, 4.0]), bins=3)
    assert lin["log"] is False
    assert sum(lin["counts"]) == 4
    assert lin["edges"][0] == 1.0
    assert lin["edges"][-1] == 4.0
    log = hd.histogram(np.array([1.0, 10.0, 1000.0]), bins=3)
    assert log["log"] is True
    assert log["counts"] == [1, 1, 1]


def test_histogram_of_one_value() -> None:
    h = hd.histogram(np.array([5.0, 5.0]))
    assert h["counts"] == [2]
    assert h["edges"][0] == 5.0


@pytest.mark.parametrize(("duration", "expected"), [(10.0, 0.1), (100.0, 1.0), (45.0, 0.5), (0.0, 1.0), (1000.0, 10.0)])
def test_nice_window(duration: float, expected: float) -> None:
    assert hd.nice_window_s(duration) == pytest.approx(expected)


def test_time_series_counts_tokens_and_concurrency() -> None:
    # two requests each in flight for exactly the first 10 s window-aligned span, 4 tokens each
    records = [rec(0, 0.0, 10.0), rec(1, 0.0, 10.0), rec(2, 5.0, 6.0, status=Status.ERROR)]
    ts = hd.time_series(records, [])
    w = ts["window_s"]
    assert w == pytest.approx(0.1)
    assert sum(ts["out_tok_s"]) * w == pytest.approx(8.0)
    # mean concurrency over the run: 2 requests × 10 s + 1 × 1 s over 10 s
    assert sum(ts["in_flight"]) * w == pytest.approx(21.0, rel=1e-6)
    assert sum(ts["errors"]) == 1
    assert sum(ts["completed"]) == 2
    assert ts["ttft_p99_ms"][0] == pytest.approx(100.0)
    assert ts["ttft_p50_ms"][50] is None


def test_server_series_turns_counters_into_rates_and_skips_histograms() -> None:
    samples = [ServerSample(k * S, "vllm:prefix_cache_hits_total", 10.0 * k) for k in range(3)]
    samples += [ServerSample(k * S, "vllm:num_requests_waiting", float(k)) for k in range(3)]
    samples += [ServerSample(k * S, "vllm:e2e_request_latency_seconds_sum", 1.0) for k in range(3)]
    series = {s["name"]: s for s in hd.server_series(samples)}
    assert set(series) == {"vllm:prefix_cache_hits_total", "vllm:num_requests_waiting"}
    assert series["vllm:prefix_cache_hits_total"]["v"] == [10.0, 10.0]
    assert series["vllm:prefix_cache_hits_total"]["rate"] is True
    assert series["vllm:num_requests_waiting"]["v"] == [0.0, 1.0, 2.0]


def test_gantt_sample_is_bounded_and_keeps_the_slowest() -> None:
    records = [rec(i, i * 0.1, i * 0.1 + (50.0 if i == 777 else 1.0)) for i in range(2000)]
    g = hd.gantt_sample(records, limit=100, slowest=5)
    assert g["total"] == 2000
    assert g["shown"] <= 100
    ids = [r["id"] for r in g["rows"]]
    assert 777 in ids
    assert ids == sorted(ids)
    row = g["rows"][0]
    assert row["scheduled"] <= row["sent"] <= row["first"] <= row["end"]


def test_latency_charts_use_the_summary_population() -> None:
    records = [rec(0, 0.0, 1.0), rec(1, 0.0, 2.0, status=Status.ERROR)]
    charts = hd.latency_charts(records)
    assert charts["ttft_ms"]["n"] == 1
    assert charts["ttft_ms"]["cdf"]["x"] == [pytest.approx(100.0)]
    assert charts["e2e_ms"]["n"] == 1


def test_sim_series_from_the_simulation_summary() -> None:
    sim = {
        "timeline": [
            {"t_s": 10.0, "replicas_ready": 1, "waiting": 3, "kv_usage": 0.5},
            {"t_s": 20.0, "replicas_ready": 2, "waiting": 0, "kv_usage": 0.25},
        ],
        "scale_events": [[12.5, 1, "waiting=8"]],
    }
    series = {s["name"]: s for s in hd.sim_series(sim)}
    assert series["sim:replicas_ready"]["v"] == [1.0, 2.0]
    assert series["sim:waiting"]["t"] == [10.0, 20.0]
    assert series["sim:scale_events"] == {
        "name": "sim:scale_events",
        "labels": "",
        "t": [12.5],
        "v": [1.0],
        "rate": False,
        "markers": True,
    }
    assert "sim:running" not in series
    assert hd.sim_series(None) == []


def test_sim_series_only_events_when_the_timeline_is_stored_as_samples() -> None:
    sim = {"timeline": [{"t_s": 10.0, "waiting": 3}], "scale_events": [[1.0, -1, "x"]]}
    assert [s["name"] for s in hd.sim_series(sim, events_only=True)] == ["sim:scale_events"]


def test_server_series_prefers_queue_and_kv_gauges() -> None:
    samples = [ServerSample(0, f"vllm:aaa_{k}", 1.0) for k in range(40)]
    samples.append(ServerSample(0, "vllm:num_requests_waiting", 2.0))
    names = [s["name"] for s in hd.server_series(samples)]
    assert len(names) == hd.MAX_SERVER_SERIES
    assert names[0] == "vllm:num_requests_waiting"
