"""Mixed plain-HTTP traffic: scheduling, its own latency summary, failures as records; one loopback run."""

from __future__ import annotations

import asyncio
import random

import pytest
from aiohttp import web

from tailscope.runner.mixed import MixedRecord, run_mixed, schedule_ns, summarize_mixed
from tailscope.workload.profile import MixedTarget

MS = 1_000_000


def test_constant_and_poisson_schedules() -> None:
    t = MixedTarget("api", "http://127.0.0.1:1/x", rate=20.0)
    s = schedule_ns(t, 1.0, poisson=False, rng=random.Random(0))
    assert s == [round(i * 0.05 * 1e9) for i in range(20)]
    p = schedule_ns(MixedTarget("api", "http://127.0.0.1:1/x", rate=100.0), 50.0, poisson=True, rng=random.Random(1))
    assert len(p) == pytest.approx(5000, rel=0.05)


def test_summary_per_target_from_hand_made_records() -> None:
    recs = [
        MixedRecord("a", 0, 0, 10 * MS, 200),
        MixedRecord("a", 100 * MS, 101 * MS, 130 * MS, 200),
        MixedRecord("a", 200 * MS, 200 * MS, 250 * MS, 503),
        MixedRecord("b", 0, 0, None, None, "connect"),
        MixedRecord("b", 50 * MS, 50 * MS, 1050 * MS, 200),
    ]
    s = summarize_mixed(recs)
    assert list(s) == ["a", "b"]
    a = s["a"]
    assert (a.total, a.ok, a.failed) == (3, 2, 1)
    assert a.errors == {"http_503": 1}
    assert a.latency_ms.mean == pytest.approx(20.0)  # 10 and 30 ms, from the scheduled time
    assert a.requests_per_s == pytest.approx(2 / 0.25)
    b = s["b"]
    assert b.errors == {"connect": 1}
    assert b.latency_ms.max == pytest.approx(1000.0)
    assert b.to_dict()["latency_ms"]["count"] == 1


@pytest.mark.integration
def test_loopback_run_hits_only_the_given_url() -> None:
    hits: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.path)
        if request.path == "/slow":
            await asyncio.sleep(0.05)
        return web.Response(text="ok")

    async def main() -> list[MixedRecord]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            targets = [
                MixedTarget("fast", f"http://127.0.0.1:{port}/fast", rate=40.0),
                MixedTarget("slow", f"http://127.0.0.1:{port}/slow", rate=10.0, method="POST", body='{"a": 1}'),
                MixedTarget("down", "http://127.0.0.1:9/nothing", rate=5.0, timeout_s=1.0),
            ]
            return await asyncio.wait_for(run_mixed(targets, duration_s=0.5), timeout=10)
        finally:
            await runner.cleanup()

    recs = asyncio.run(main())
    s = summarize_mixed(recs)
    assert s["fast"].total == 20
    assert s["fast"].ok == 20
    assert s["slow"].total == 5
    assert s["slow"].latency_ms.p50 is not None
    assert s["slow"].latency_ms.p50 >= 50.0
    assert s["down"].ok == 0
    assert s["down"].failed == 3
    assert set(hits) == {"/fast", "/slow"}
