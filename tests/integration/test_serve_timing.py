"""Tokens leave the server at the step times the engine model computes (raw aiohttp client, moderate load).

The client runs in this process and the server in a background thread, so both read the same monotonic
``perf_counter_ns`` clock: every content chunk's arrival is compared with the scheduled end of the engine step
that produced that token (from the server's step log).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time

import aiohttp
import pytest

from tailscope.serve.app import ENGINE_ID_HEADER
from tailscope.serve.embedded import EmbeddedServer
from tailscope.serve.engine_factory import build_replica
from tailscope.serve.loop import StepRecord

pytestmark = pytest.mark.integration


async def _one(session: aiohttp.ClientSession, url: str, prompt_words: int, out: int) -> tuple[int, list[int]]:
    body = {
        "messages": [{"role": "user", "content": " ".join(["word"] * prompt_words)}],
        "max_tokens": out,
        "ignore_eos": True,
        "stream": True,
    }
    arrivals: list[int] = []
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200
        engine_id = int(r.headers[ENGINE_ID_HEADER])
        async for line in r.content:
            now = time.perf_counter_ns()
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                arrivals.append(now)
    return engine_id, arrivals


def _due_times(steps: list[StepRecord]) -> dict[int, list[int]]:
    due: dict[int, list[int]] = {}
    for rec in steps:
        for rid, n in rec.result.emitted:
            due.setdefault(rid, []).extend([rec.due_ns] * n)
    return due


def test_token_times_follow_engine_steps() -> None:
    engine, options = build_replica("llama-3.1-8b", "h100-sxm", speed=1.0)
    rng = random.Random(3)
    plan = [(rng.randint(100, 900), 48, i * 0.03) for i in range(24)]  # ~33 req/s offered, ≈16 in flight

    with EmbeddedServer(engine, options) as srv:

        async def run() -> list[tuple[int, list[int]]]:
            conn = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=conn) as session:

                async def delayed(words: int, out: int, at: float) -> tuple[int, list[int]]:
                    await asyncio.sleep(at)
                    return await _one(session, srv.base_url, words, out)

                return await asyncio.gather(*(delayed(*p) for p in plan))

        results = asyncio.run(asyncio.wait_for(run(), 60))
        steps: list[StepRecord] = srv.call(lambda st: list(st.loop.steps))

    due = _due_times(steps)
    errors_ms: list[float] = []
    for engine_id, arrivals in results:
        assert len(arrivals) == 48
        assert len(due[engine_id]) == 48
        errors_ms.extend((a - d) / 1e6 for a, d in zip(arrivals, due[engine_id], strict=True))
    errors_ms.sort()
    n = len(errors_ms)
    p50, p95, p99 = (errors_ms[int(q * (n - 1))] for q in (0.5, 0.95, 0.99))
    print(f"\nchunk arrival − engine step end over {n} tokens: p50 {p50:.2f} ms, p95 {p95:.2f} ms, p99 {p99:.2f} ms")
    assert errors_ms[0] > -0.5  # never early (small slack for clock reads on different threads)
    assert p50 < 3.0
    assert p95 < 8.0

    # no drift: while there was work, each step started exactly where the previous one ended on the engine clock
    gaps = [
        b.result.start_ns - (a.result.start_ns + a.result.duration_ns)
        for a, b in itertools.pairwise(steps)
        if b.result.start_ns - (a.result.start_ns + a.result.duration_ns) != 0
    ]
    assert len(gaps) <= 3, gaps  # only idle restarts (none expected at this load) or rare catch-up resets
