"""Tokens leave the server at the step times the engine model computes (raw aiohttp client, moderate load).

The server runs in a thread of the test process (so its step log can be read); the client runs in a separate
process, as ``tailscope bench`` would, so the two do not compete for one interpreter. Both stamp times with
``time.perf_counter_ns`` — ``CLOCK_MONOTONIC`` on Linux, the same clock in every process — so every content chunk's
arrival can be compared with the scheduled end of the engine step that produced that token.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from tailscope.serve.embedded import EmbeddedServer
from tailscope.serve.engine_factory import build_replica
from tailscope.serve.loop import StepRecord
from tailscope.testing.judgement import Judgement

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs one monotonic clock across processes"),
]

# 24 streaming chat requests, 100–900 prompt words, 48 output tokens, one every 30 ms (≈16 in flight)
CLIENT = r"""
import asyncio, json, random, sys, time
import aiohttp

URL = sys.argv[1]

async def one(session, words, out, at):
    await asyncio.sleep(at)
    body = {"messages": [{"role": "user", "content": " ".join(["word"] * words)}], "max_tokens": out,
            "ignore_eos": True, "stream": True}
    arrivals = []
    async with session.post(URL + "/v1/chat/completions", json=body) as r:
        engine_id = int(r.headers["x-tailscope-engine-request-id"])
        async for line in r.content:
            now = time.perf_counter_ns()
            if line.startswith(b"data: {") and b'"content":"' in line and b'"role"' not in line:
                arrivals.append(now)
    return engine_id, arrivals

async def main():
    rng = random.Random(3)
    plan = [(rng.randint(100, 900), 48, i * 0.03) for i in range(24)]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        results = await asyncio.gather(*(one(session, *p) for p in plan))
    print(json.dumps(results))

asyncio.run(main())
"""


def _due_times(steps: list[StepRecord]) -> dict[int, list[int]]:
    due: dict[int, list[int]] = {}
    for rec in steps:
        for rid, n in rec.result.emitted:
            due.setdefault(rid, []).extend([rec.due_ns] * n)
    return due


def _measure() -> tuple[list[float], list[StepRecord]]:
    """Errors (ms) of every content chunk's arrival against its step's scheduled end, and the step log."""
    engine, options = build_replica("llama-3.1-8b", "h100-sxm", speed=1.0)
    with EmbeddedServer(engine, options) as srv:
        proc = subprocess.run(
            [sys.executable, "-c", CLIENT, srv.base_url], capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, proc.stderr
        steps: list[StepRecord] = srv.call(lambda st: list(st.loop.steps))
    results: list[tuple[int, list[int]]] = json.loads(proc.stdout)
    due = _due_times(steps)
    errors_ms: list[float] = []
    for engine_id, arrivals in results:
        assert len(arrivals) == 48
        assert len(due[engine_id]) == 48
        errors_ms.extend((a - d) / 1e6 for a, d in zip(arrivals, due[engine_id], strict=True))
    return sorted(errors_ms), steps


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[int(q * (len(sorted_values) - 1))]


def test_token_times_follow_engine_steps(judgement: Judgement) -> None:
    best: tuple[float, float, float] | None = None
    for _attempt in range(3):  # timing on a shared host: the best of three runs is judged
        errors_ms, steps = _measure()
        # structure, whatever the host load: never early, and no drift of the engine timeline
        assert errors_ms[0] > -0.5  # never before the engine says the token exists
        # while there was work each step started where the previous one ended; the only allowed gaps are idle
        # restarts and the catch-up reset after a release more than 250 ms late (an overloaded host)
        gaps = [
            b.result.start_ns - (a.result.start_ns + a.result.duration_ns)
            for a, b in itertools.pairwise(steps)
            if b.result.start_ns != a.result.start_ns + a.result.duration_ns and a.released_ns - a.due_ns < 200_000_000
        ]
        assert len(gaps) <= 2, gaps
        p50, p95, p99 = (_quantile(errors_ms, q) for q in (0.5, 0.95, 0.99))
        print(
            f"\nchunk arrival − step end over {len(errors_ms)} tokens: p50 {p50:.2f}, p95 {p95:.2f}, p99 {p99:.2f} ms"
        )
        if best is None or p95 < best[1]:
            best = (p50, p95, p99)
        if p50 < 3.0 and p95 < 10.0:
            return
    assert best is not None
    late = f"tokens late against the engine schedule: best p50 {best[0]:.2f} ms, p95 {best[1]:.2f} ms"
    judgement.holds(False, late, 0.75)


def _lone_request() -> tuple[float, float]:
    """One 2,000-token prompt on an idle server: (TTFT seen by the client, frontend delay + prefill step), in ms."""
    import asyncio
    import time

    import aiohttp

    from tailscope.serve.frontend import Frontend
    from tailscope.serve.tokenizer import encode_text

    engine, options = build_replica("llama-3.1-8b", "h100-sxm", speed=1.0, seed=5)
    prompt = " ".join(["word"] * 2000)
    body = {"prompt": prompt, "max_tokens": 4, "ignore_eos": True, "stream": True}
    with EmbeddedServer(engine, options) as srv:

        async def run() -> float:
            async with aiohttp.ClientSession() as s:
                await (await s.get(srv.base_url + "/health")).read()  # connection warm
                t0 = time.perf_counter_ns()
                async with s.post(srv.base_url + "/v1/completions", json=body) as r:
                    async for line in r.content:
                        if line.startswith(b"data: {"):
                            return (time.perf_counter_ns() - t0) / 1e6
            raise AssertionError("no token")

        ttft_ms = asyncio.run(asyncio.wait_for(run(), 30))
        steps: list[StepRecord] = srv.call(lambda st: list(st.loop.steps))
    frontend_ms = Frontend(engine.perf, seed=5).delay_ns(0, len(encode_text(prompt)), 1, key=1) / 1e6  # type: ignore[attr-defined]
    first_step_ms = steps[0].result.duration_ns / 1e6
    print(f"\nTTFT {ttft_ms:.2f} ms = frontend {frontend_ms:.2f} + prefill step {first_step_ms:.2f} + "
          f"{ttft_ms - frontend_ms - first_step_ms:.2f}")  # fmt: skip
    assert frontend_ms > 0
    return ttft_ms, frontend_ms + first_step_ms


def test_lone_request_ttft_is_frontend_plus_prefill(judgement: Judgement) -> None:
    """TTFT seen by a client = the API-server latency sim models + the prefill step + HTTP overhead."""
    overheads = []
    for _attempt in range(3):  # timing on a shared host: the best of three is judged
        ttft_ms, expected = _lone_request()
        assert ttft_ms >= expected - 0.5  # never before the engine's own timeline, whatever the load
        overheads.append(ttft_ms - expected)
        if overheads[-1] < 8.0:
            return
    judgement.holds(False, f"HTTP overhead on a lone request: best {min(overheads):.1f} ms of 3 (≤ 8 ms asked)")
