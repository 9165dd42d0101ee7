"""The lean HTTP/1.1 transport: response framing under any read boundaries, and real loopback exchanges."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.client.rawhttp import ConnectFailed, ProtocolViolation, RawHttpTransport, StreamClosed, _Conn, _Pool


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def write(self, data: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def feed(raw: bytes, cuts: list[int]) -> _Conn:
    pool = _Pool("h", 1, None, 1.0)
    c = _Conn(pool)
    c.connection_made(FakeTransport())
    points = sorted({x % (len(raw) + 1) for x in cuts})
    prev = 0
    for p in [*points, len(raw)]:
        if raw[prev:p]:
            c.data_received(raw[prev:p])
        prev = p
    return c


BODY = [b"data: one\n\n", b"data: two\n\n", b"x" * 300]
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nX-Request-Id: r1\r\n\r\n"
    + b"".join(f"{len(p):x};ext=1\r\n".encode() + p + b"\r\n" for p in BODY)
    + b"0\r\nTrailer: x\r\n\r\n"
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=25))
def test_chunked_body_any_boundaries(cuts: list[int]) -> None:
    c = feed(CHUNKED, cuts)
    assert c.error is None
    assert c.status == 200
    assert c.headers["X-Request-Id"] == "r1"
    assert c.complete
    assert b"".join(p for _, p in c.pieces) == b"".join(BODY)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=10))
def test_content_length_body(cuts: list[int]) -> None:
    raw = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 11\r\n\r\nhello worldEXTRA"
    c = feed(raw, cuts)
    assert c.status == 401
    assert c.complete
    assert b"".join(p for _, p in c.pieces) == b"hello world"


def test_close_delimited_body_ends_at_close() -> None:
    c = feed(b"HTTP/1.0 200 OK\r\n\r\nabc", [])
    assert not c.complete
    c.connection_lost(None)
    assert c.complete
    assert c.error is None
    assert not c.keep_alive


def test_cut_mid_chunk_is_stream_closed() -> None:
    c = feed(CHUNKED[:120], [])
    c.connection_lost(None)
    assert isinstance(c.error, StreamClosed)


@pytest.mark.parametrize(
    "raw", [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 abc OK\r\n\r\n", CHUNKED.replace(b"b;ext=1", b"zz")]
)
def test_bad_framing_is_a_protocol_violation(raw: bytes) -> None:
    c = feed(raw, [])
    assert isinstance(c.error, ProtocolViolation)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_loopback_exchange_keepalive_and_errors(loop: str) -> None:
    from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

    async def go(url: str) -> None:
        t = RawHttpTransport(url)
        try:
            status, _, body = await t.get("/v1/models", 5)
            assert status == 200
            assert b"scripted" in body
            for _ in range(3):
                async with t.post(
                    "/v1/completions", b'{"max_tokens":3,"prompt":"a b"}', {"Content-Type": "application/json"}
                ) as r:
                    assert r.status == 200
                    data = b"".join([d async for d in r.iter_chunks()])
                    assert data.endswith(b"data: [DONE]\n\n")
            # one connection served all of it (keep-alive)
            assert len(t._pool.all) == 1
        finally:
            await t.close()

    with ScriptedServer(ScriptedConfig(ttft_ms=1, itl_ms=1)) as srv:
        if loop == "uvloop":
            import uvloop

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(go(srv.url))
        else:
            asyncio.run(go(srv.url))


def test_connection_refused_is_connect_failed() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go() -> None:
        t = RawHttpTransport(f"http://127.0.0.1:{port}")
        with pytest.raises(ConnectFailed, match="cannot connect"):
            async with t.post("/x", b"", {}):
                pass
        await t.close()

    asyncio.run(go())


@pytest.mark.parametrize("warm", [False, True])
def test_preopen_fills_the_pool_and_requests_reuse_it(warm: bool) -> None:
    """Pre-opened (and warmed) connections wait idle; requests take them instead of connecting, and the response
    says when its request left (after any connect)."""
    from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

    async def go(url: str) -> None:
        t = RawHttpTransport(url)
        try:
            assert await t.preopen(6, warm_path="/v1/models" if warm else None) == 6
            assert t.idle_connections == 6
            assert len(t._pool.all) == 6
            assert await t.preopen(4) == 6  # already enough idle: nothing more opened
            assert len(t._pool.all) == 6

            async def one() -> int:
                before = time.perf_counter_ns()
                async with t.post("/v1/completions", b'{"max_tokens":2,"prompt":"a"}', {}) as r:
                    assert r.status == 200
                    _ = [d async for d in r.iter_chunks()]
                    assert r.sent_ns >= before
                    return r.sent_ns

            await asyncio.gather(*(one() for _ in range(6)))
            assert len(t._pool.all) == 6  # no new connection was needed
        finally:
            await t.close()

    with ScriptedServer(ScriptedConfig(ttft_ms=1, itl_ms=1)) as srv:
        asyncio.run(go(srv.url))


def test_preopen_stops_quietly_when_the_server_is_gone() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go() -> None:
        t = RawHttpTransport(f"http://127.0.0.1:{port}")
        assert await t.preopen(3) == 0
        await t.close()

    asyncio.run(go())
