"""Fault injection of tailscope serve over real sockets: each mode, and the same seed gives the same faults."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import pytest

from tailscope.serve.embedded import EmbeddedServer
from tailscope.serve.engine_factory import build_replica
from tailscope.serve.faults import FaultConfig

pytestmark = pytest.mark.integration

STREAM = {"prompt": "tell me", "max_tokens": 20, "ignore_eos": True, "stream": True}


@contextmanager
def faulty(**kwargs: Any) -> Iterator[EmbeddedServer]:
    engine, options = build_replica("llama-3.1-8b", "h100-sxm", speed=4.0, faults=FaultConfig(**kwargs))
    with EmbeddedServer(engine, options) as srv:
        yield srv


async def _stream_lines(url: str, body: dict[str, Any]) -> tuple[int, list[tuple[float, bytes]], str | None]:
    """Status, (arrival s, line) of every non-empty line, and the error that ended the stream (if any)."""
    lines: list[tuple[float, bytes]] = []
    error = None
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/completions", json=body) as r:
        try:
            async for line in r.content:
                if line.strip():
                    lines.append((time.monotonic(), line.rstrip(b"\n")))
        except aiohttp.ClientError as exc:
            error = type(exc).__name__
        return r.status, lines, error


def stream(srv: EmbeddedServer, body: dict[str, Any] = STREAM) -> tuple[int, list[tuple[float, bytes]], str | None]:
    return asyncio.run(asyncio.wait_for(_stream_lines(srv.base_url, body), 30))


def statuses(srv: EmbeddedServer, n: int) -> list[tuple[int, str | None]]:
    async def run() -> list[tuple[int, str | None]]:
        out = []
        async with aiohttp.ClientSession() as s:
            for _ in range(n):  # sequentially: request i gets sequence number i
                async with s.post(srv.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}) as r:
                    await r.read()
                    out.append((r.status, r.headers.get("Retry-After")))
        return out

    return asyncio.run(asyncio.wait_for(run(), 30))


def test_fail_rate_answers_500_in_openai_shape() -> None:
    with faulty(fail_rate=1.0) as srv:

        async def run() -> tuple[int, dict[str, Any]]:
            async with aiohttp.ClientSession() as s, s.post(srv.base_url + "/v1/completions", json=STREAM) as r:
                return r.status, await r.json()

        status, body = asyncio.run(run())
        assert status == 500
        assert body["error"]["code"] == 500
        assert "injected" in body["error"]["message"]
        assert srv.call(lambda st: st.loop.engine.stats().prompt_tokens_total) == 0  # never reached the engine


def test_rate_limit_has_retry_after_and_is_seeded() -> None:
    with faulty(rate_limit_rate=1.0) as srv:
        assert statuses(srv, 3) == [(429, "1")] * 3
    with faulty(fail_rate=0.3, rate_limit_rate=0.3, seed=11) as a:
        first = statuses(a, 30)
    with faulty(fail_rate=0.3, rate_limit_rate=0.3, seed=11) as b:
        second = statuses(b, 30)
    assert first == second
    assert {s for s, _ in first} == {200, 429, 500}


def test_stall_pauses_mid_stream() -> None:
    with faulty(stall_prob=1.0, stall_ms=400) as srv:
        status, lines, error = stream(srv)
    assert status == 200
    assert error is None
    assert lines[-1][1] == b"data: [DONE]"
    tokens = [t for t, line in lines if line.startswith(b"data: {")]
    assert len(tokens) == 20
    gaps = [b - a for a, b in itertools.pairwise(tokens)]
    assert max(gaps) >= 0.39
    assert sorted(gaps)[-2] < 0.1  # one pause only


def test_disconnect_cuts_the_stream_and_aborts() -> None:
    with faulty(disconnect_prob=1.0) as srv:
        status, lines, error = stream(srv)
        deadline = time.monotonic() + 5
        while srv.call(lambda st: st.loop.live_count) and time.monotonic() < deadline:
            time.sleep(0.02)
        aborted = srv.call(lambda st: st.metrics.success["abort"])
        assert not srv.call(lambda st: st.loop.engine.has_work())
    assert status == 200
    assert error is not None  # the client saw the connection drop mid-body
    assert all(line != b"data: [DONE]" for _, line in lines)
    assert 1 <= sum(line.startswith(b"data: {") for _, line in lines) < 20
    assert aborted == 1


def test_malformed_line_in_stream() -> None:
    with faulty(malformed_rate=1.0) as srv:
        status, lines, error = stream(srv)
    assert status == 200
    assert error is None
    bad = []
    for _, line in lines:
        assert line.startswith(b"data: ")
        payload = line[6:]
        if payload == b"[DONE]":
            continue
        try:
            json.loads(payload)
        except json.JSONDecodeError:
            bad.append(payload)
    assert len(bad) == 1
    assert lines[-1][1] == b"data: [DONE]"
    assert sum(1 for _, line in lines if line.startswith(b"data: {")) == 21  # 20 tokens + the malformed line


def test_non_stream_faults() -> None:
    body = {"prompt": "x", "max_tokens": 10, "ignore_eos": True}

    async def run(url: str) -> tuple[int, bytes] | str:
        try:
            async with aiohttp.ClientSession() as s, s.post(url + "/v1/completions", json=body) as r:
                return r.status, await r.read()
        except aiohttp.ClientError as exc:
            return type(exc).__name__

    with faulty(malformed_rate=1.0) as srv:
        got = asyncio.run(run(srv.base_url))
        assert isinstance(got, tuple)
        assert got[0] == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(got[1])
    with faulty(disconnect_prob=1.0) as srv:
        assert isinstance(asyncio.run(run(srv.base_url)), str)
    with faulty(stall_prob=1.0, stall_ms=300) as srv:
        t0 = time.monotonic()
        got = asyncio.run(run(srv.base_url))
        assert isinstance(got, tuple)
        assert got[0] == 200
        assert time.monotonic() - t0 >= 0.3
