"""The client's run-level behaviour over loopback (issue 20): connections opened before the first send, records
streamed to the store only, and the worker count ``--workers auto`` picks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tailscope.client.hot import hot_loop
from tailscope.client.openai import Timeouts
from tailscope.runner.bench import run_bench
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.bench_result import BenchResult
from tailscope.runner.loadgen import DispatchConfig
from tailscope.runner.preflight import LengthBound
from tailscope.runner.workers.auto import TARGET_UTIL, plan_workers, projected_events_per_s, workers_needed
from tailscope.store.runs import RunStore
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer
from tailscope.workload.lengths import fixed
from tailscope.workload.simple import LoadShape, simple_requests

pytestmark = pytest.mark.integration


def _bench(url: str, db: Path, concurrency: int, requests: int, **kw: object) -> BenchResult:
    cfg = BenchConfig(
        url=url,
        model=None,
        dispatch=DispatchConfig(concurrency=concurrency),
        timeouts=Timeouts(connect_s=5, first_token_s=30, total_s=60),
        metrics_url=None,
        **kw,  # type: ignore[arg-type]
    )
    specs = simple_requests(LoadShape(concurrency=concurrency, requests=requests), fixed(16), fixed(8), seed=1)
    return asyncio.run(run_bench(cfg, specs, store=RunStore(db)))


def test_preopened_connections_serve_the_first_wave(tmp_path: Path) -> None:
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        res = _bench(srv.url, tmp_path / "db.duckdb", 12, 36, warm_connections=True)
    assert res.summary.requests.completed == 36
    client = dict(res.extra["client"])
    client.pop("arrival_stamps", None)  # the default kernel stamps' read counts (docs/metrics.md, "Arrival")
    batching = client.pop("read_batching", None)  # and how their reads were batched ("Read batching")
    if batching is not None:
        assert set(batching) == {"window_us", "wake_ups", "reads", "batched_wake_ups"}
        assert batching["reads"] >= batching["wake_ups"] >= batching["batched_wake_ups"] >= 0
    assert client.pop("hot_loop") == hot_loop()  # compiled or python: which ran (docs/metrics.md)
    assert client == {"preopened_connections": 12, "warmed": True}
    fw = res.summary.first_wave
    assert fw is not None
    assert fw.count == 12  # every slot's first request is due at the start
    for r in res.records:
        assert r.sent_ns is not None
        assert r.sent_ns >= r.scheduled_ns


def test_stream_records_keeps_them_in_the_store_only_and_summarizes_the_same(tmp_path: Path) -> None:
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        kept = _bench(srv.url, tmp_path / "a.duckdb", 4, 20, preopen_connections=0)
        streamed = _bench(srv.url, tmp_path / "b.duckdb", 4, 20, stream_records=True)
    assert "preopened_connections" not in kept.extra.get("client", {})  # --preopen-connections 0: nothing opened ahead
    assert len(streamed.records) == 20
    assert streamed.records == RunStore(tmp_path / "b.duckdb").load_records(streamed.run.id)
    assert streamed.summary.requests.completed == kept.summary.requests.completed == 20
    assert streamed.summary.output_tokens.p50 == kept.summary.output_tokens.p50


def test_workers_auto_sizes_by_event_rate_and_cost() -> None:
    base = BenchConfig(url="http://x", model=None, lengths=(LengthBound("flags", fixed(64), fixed(200)),))
    closed = BenchConfig(url="http://x", model=None, dispatch=DispatchConfig(concurrency=64))
    assert projected_events_per_s(closed) == 6400.0
    open_loop = BenchConfig(url="http://x", model=None, requested_rate=50.0, lengths=base.lengths)
    assert projected_events_per_s(open_loop) == 10_000.0
    # 10,000 events/s × 25 µs = 0.25 core → one worker at ≤ 50 %; × 250 µs = 2.5 cores → 5
    assert workers_needed(10_000.0, 25.0, cap=64) == 1
    assert workers_needed(10_000.0, 250.0, cap=64) == 5
    assert workers_needed(1e9, 250.0, cap=3) == 3
    plan = plan_workers(closed, cost_us=1e6 * TARGET_UTIL / 100)  # a worker per 100 events/s
    assert plan.workers == min(64, plan.workers)
    assert "--workers auto" in plan.describe()
    assert plan_workers(open_loop).workers >= 1  # measured cost on this machine
