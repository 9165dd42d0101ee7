"""Scraped server metrics are read by meaning, whichever engine named them (docs/servers.md)."""

from __future__ import annotations

import pytest

from tailscope.metrics.server import keep_sample, summarize_server
from tailscope.records import ServerSample


def _samples(name: str, values: list[float]) -> list[ServerSample]:
    return [ServerSample(t_ns=i * 1_000_000_000, name=name, value=v) for i, v in enumerate(values)]


@pytest.mark.parametrize(
    ("queue", "running"),
    [
        ("vllm:num_requests_waiting", "vllm:num_requests_running"),
        ("sglang:num_queue_reqs", "sglang:num_running_reqs"),
        ("tgi_queue_size", "tgi_batch_current_size"),
        ("llamacpp:requests_deferred", "llamacpp:requests_processing"),
    ],
)
def test_queue_and_running_gauges_of_each_engine(queue: str, running: str) -> None:
    out = summarize_server(_samples(queue, [0, 4, 2]) + _samples(running, [1, 3, 3]))
    assert out["queue_depth"]["max"] == 4
    assert out["queue_depth"]["metric"] == queue
    assert out["running"]["mean"] == pytest.approx(7 / 3)
    assert keep_sample(queue)
    assert keep_sample(running)


def test_histogram_buckets_and_foreign_metrics_are_not_stored() -> None:
    assert not keep_sample("llamacpp:whatever_bucket")
    assert not keep_sample("process_cpu_seconds_total")
