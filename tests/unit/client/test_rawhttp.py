"""The lean HTTP/1.1 transport: response framing under any read boundaries, and real loopback exchanges."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.client.http1_conn import Http1Connection as _Conn
from tailscope.client.http1_pool import ConnectionPool as _Pool
from tailscope.client.rawhttp import ConnectFailed, ProtocolViolation, RawHttpTransport, StreamClosed


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


def test_connection_phases_on_the_first_request_only() -> None:
    """A new connection's DNS and connect times ride on its first request; later ones say it was reused."""
    from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

    async def go(url: str) -> list[tuple[bool, int | None, int | None, int | None]]:
        t = RawHttpTransport(url.replace("127.0.0.1", "localhost"))  # a name, so resolving is a real step
        seen = []
        try:
            for _ in range(2):
                async with t.post(
                    "/v1/completions", b'{"max_tokens":2,"prompt":"a"}', {"Content-Type": "application/json"}
                ) as r:
                    seen.append(r.connection)
                    _ = [d async for d in r.iter_chunks()]
        finally:
            await t.close()
        return seen

    with ScriptedServer(ScriptedConfig(ttft_ms=1, itl_ms=1)) as srv:
        first, second = asyncio.run(go(srv.url))
    reused, dns, connect, tls = first
    assert reused is False
    assert dns is not None
    assert dns > 0
    assert connect is not None
    assert connect > 0
    assert tls is None  # plain HTTP
    assert second == (True, None, None, None)


def test_tls_handshake_is_timed_apart(tmp_path: Any) -> None:
    """Over https the handshake is its own phase, and the exchange still works through the upgraded transport."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = tmp_path / "c.pem", tmp_path / "k.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    async def go() -> list[tuple[bool, int | None, int | None, int | None]]:
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(cert_path, key_path)
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        t = RawHttpTransport(f"https://localhost:{port}")
        t._pool.ssl_ctx = ssl.create_default_context(cafile=str(cert_path))
        seen = []
        try:
            for _ in range(2):
                async with t.post("/x", b"{}", {}) as r:
                    assert r.status == 200
                    assert b"".join([d async for d in r.iter_chunks()]) == b"ok"
                    seen.append(r.connection)
        finally:
            await t.close()
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        return seen

    first, second = asyncio.run(go())
    assert first[0] is False
    assert first[3] is not None
    assert first[3] > 0
    assert second == (True, None, None, None)
