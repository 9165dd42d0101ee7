"""Synthetic runs for the report tests: deterministic records with queueing, errors, classes, turns and telemetry."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from tailscope.metrics.document import build_export
from tailscope.metrics.slo import parse_slo
from tailscope.metrics.summary import summarize
from tailscope.records import (
    ErrorClass,
    RequestRecord,
    Run,
    RunKind,
    RunStatus,
    ServerSample,
    Status,
    Target,
    TokensSource,
)

XSS = "<script>alert(1)</script>"
MS = 1_000_000


def make_records(
    n: int = 200, *, seed: int = 1, classes: tuple[str, ...] = ("chat", XSS), slow: float = 1.0
) -> list[RequestRecord]:
    """``n`` requests over ~n/20 s: a load ramp whose TTFT grows, a few failures, two classes, three turns."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    for i in range(n):
        sched = int(i * 50 * MS)
        sent = sched + rng.randint(0, 2 * MS)
        if i % 37 == 5:
            out.append(
                RequestRecord(
                    id=i,
                    scheduled_ns=sched,
                    sent_ns=sent,
                    first_token_ns=None,
                    end_ns=sent + 30 * MS,
                    status=Status.ERROR,
                    error=ErrorClass.HTTP_5XX,
                    http_status=503,
                    request_class=classes[i % len(classes)],
                    turn=i % 3,
                    session_id=f"s{i // 3}",
                )
            )
            continue
        ttft = int((40 + i * 0.5 + rng.expovariate(1 / 20)) * slow * MS)
        ntok = 8 + i % 16
        times = []
        t = sent + ttft
        for _ in range(ntok):
            times.append(t)
            t += int((6 + rng.random() * 4) * slow * MS)
        out.append(
            RequestRecord(
                id=i,
                scheduled_ns=sched,
                sent_ns=sent,
                first_token_ns=times[0],
                end_ns=times[-1],
                status=Status.OK,
                request_class=classes[i % len(classes)],
                turn=i % 3,
                session_id=f"s{i // 3}",
                input_tokens=100 + i,
                output_tokens=ntok,
                tokens_source=TokensSource.USAGE,
                chunk_times_ns=tuple(times),
                chunk_tokens=(1,) * ntok,
                stream_end_ns=times[-1] + MS,
                warmup=i < 2,
            )
        )
    return out


def make_samples(duration_s: float = 10.0) -> list[ServerSample]:
    out = []
    for k in range(int(duration_s) + 1):
        t = k * 1_000_000_000
        out.append(ServerSample(t, "vllm:num_requests_waiting", float(k % 4), 'model_name="m"'))
        out.append(ServerSample(t, "vllm:kv_cache_usage_perc", 0.1 * (k % 10), 'model_name="m"'))
        out.append(ServerSample(t, "vllm:prefix_cache_hits_total", 100.0 * k, 'model_name="m"'))
    return out


def make_run(run_id: str = "20260101-000000-abcdef", *, profile: str | None = XSS, **settings: Any) -> Run:
    return Run(
        id=run_id,
        kind=RunKind.BENCH,
        tool_version="0.1.0",
        started_at="2026-01-01T00:00:00Z",
        target=Target(url="http://127.0.0.1:9/v1", model=XSS),
        seed=7,
        settings={"concurrency": 8, **settings},
        profile=profile,
        status=RunStatus.COMPLETE,
    )


def summary_dict(records: list[RequestRecord], samples: list[ServerSample]) -> dict[str, Any]:
    from tailscope.metrics.server import summarize_server

    d = summarize(records, slos=(parse_slo("ttft_p99=200ms"),)).to_dict()
    d["server"] = summarize_server(samples)
    return d


@pytest.fixture
def synthetic() -> Callable[..., dict[str, Any]]:
    """Factory: the export document (``run``, ``summary``, ``requests``) plus ``records``, ``samples``, ``run_obj``."""

    def make(
        n: int = 200, run_id: str = "20260101-000000-abcdef", slow: float = 1.0, **settings: Any
    ) -> dict[str, Any]:
        run = make_run(run_id, **settings)
        records = make_records(n, slow=slow)
        samples = make_samples(n / 20)
        summary = summary_dict(records, samples)
        doc = build_export(run, summary, records)
        return {**doc, "records": records, "samples": samples, "run_obj": run}

    return make
