"""Kernel receive timestamps: the stamp is the arrival, not the read; writes, EOF and resets behave as asyncio's
transport does for Http1Connection; the clock map clamps and falls back."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tailscope.client import http1_conn
from tailscope.client.http1_conn import Http1Connection
from tailscope.client.http1_pool import ConnectionPool
from tailscope.client.kstamp import KernelStampTransport, RealtimeMap, kernel_stamps_supported, open_kernel_stamped
from tailscope.client.rawhttp import RawHttpTransport, StreamClosed

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")
pytestmark = pytest.mark.usefixtures("each_hot_loop")  # compiled and pure Python (conftest)


# -- the clock map, on scripted clocks ------------------------------------------------------------------------------
def test_map_uses_the_kernel_stamp_inside_the_bracket() -> None:
    m = RealtimeMap(offset_ns=lambda: 1_000_000)
    assert m.stamp(1_000_500, read_ns=900, floor_ns=100) == 500
    assert (m.kernel, m.user, m.clamped) == (1, 0, 0)


def test_map_clamps_to_the_user_stamp_outside_send_and_read() -> None:
    m = RealtimeMap(offset_ns=lambda: 1_000_000)
    assert m.stamp(1_000_950, read_ns=900, floor_ns=100) == 900  # later than the read: impossible, fall back
    assert m.stamp(1_000_050, read_ns=900, floor_ns=100) == 900  # before the request was sent: fall back
    assert m.stamp(None, read_ns=900, floor_ns=100) == 900  # no control message
    assert (m.kernel, m.user, m.clamped) == (0, 1, 2)


def test_map_resyncs_the_offset_on_its_period_only() -> None:
    offsets = iter([1_000, 2_000, 3_000])
    calls: list[int] = []

    def measure() -> int:
        v = next(offsets)
        calls.append(v)
        return v

    m = RealtimeMap(offset_ns=measure, resync_ns=100)
    assert m.stamp(1_050, read_ns=60, floor_ns=0) == 50  # first read measures
    assert m.stamp(1_150, read_ns=159, floor_ns=0) == 150  # within the period: same offset
    assert m.stamp(2_165, read_ns=170, floor_ns=0) == 165  # past 60 + 100: re-measured
    assert calls == [1_000, 2_000]


# -- a real loopback socket -----------------------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.sent_ns = 0
        self.reads: list[tuple[bytes, int, int]] = []  # (data, arrival stamp, perf_counter at delivery)
        self.lost: list[Exception | None] = []
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)

    def data_received_at(self, data: bytes, arrival_ns: int) -> None:
        self.reads.append((data, arrival_ns, time.perf_counter_ns()))


async def _pair(m: RealtimeMap) -> tuple[Recorder, socket.socket, socket.socket]:
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    loop = asyncio.get_running_loop()
    _, proto = await open_kernel_stamped(loop, Recorder, lsock.getsockname(), socket.AF_INET, m)
    peer, _ = lsock.accept()
    assert isinstance(proto, Recorder)
    return proto, peer, lsock


@contextlib.asynccontextmanager
async def _connected(m: RealtimeMap) -> AsyncIterator[tuple[Recorder, socket.socket]]:
    """A kernel-stamped connection and its peer, both closed (and the listener) when the block ends."""
    rec, peer, lsock = await _pair(m)
    try:
        yield rec, peer
    finally:
        rec.transport.close()
        peer.close()
        lsock.close()


async def _until_stamped(rec: Recorder, peer: socket.socket, m: RealtimeMap) -> None:
    """Exchange bytes until a read carries the kernel's stamp, then forget them. The kernel turns receive stamping
    on for the host a moment after the first socket asks (deferred, and off again once the last such socket closed,
    as an earlier test's may have): a segment received in that moment carries no stamp."""
    rec.sent_ns = time.perf_counter_ns() - 1_000_000
    for _ in range(200):
        peer.sendall(b".")
        n = len(rec.reads)
        while len(rec.reads) == n:
            await asyncio.sleep(0.001)
        if m.kernel:
            break
        await asyncio.sleep(0.005)
    rec.reads.clear()
    m.kernel = m.user = m.clamped = 0


@linux
def test_the_stamp_is_the_arrival_not_the_read() -> None:
    async def go() -> None:
        m = RealtimeMap()
        async with _connected(m) as (rec, peer):
            await _until_stamped(rec, peer, m)
            # the request's send 1 ms back: over loopback the answer arrives µs after this, and a mapping error of a
            # few µs below the send would be clamped (the read keeps its user-space stamp) — not what this test is about
            rec.sent_ns = time.perf_counter_ns() - 1_000_000
            before = time.perf_counter_ns()
            peer.sendall(b"hello")
            sent = time.perf_counter_ns()
            time.sleep(0.05)  # the loop is busy: the bytes wait in the socket for 50 ms
            while not rec.reads:
                await asyncio.sleep(0.001)
            data, stamp, delivered = rec.reads[0]
            assert data == b"hello"
            assert delivered - sent >= 45_000_000  # read late …
            assert (m.kernel, m.clamped, m.user) == (1, 0, 0)
            assert stamp - before < 10_000_000  # … but stamped at its arrival

    asyncio.run(go())


@linux
def test_partial_writes_are_finished_when_writable() -> None:
    async def go() -> None:
        async with _connected(RealtimeMap()) as (rec, peer):
            t: KernelStampTransport = rec.transport
            t._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            blob = bytes(range(256)) * 40_000  # ~10 MB: far beyond the socket buffers
            t.write(blob)
            t.write(b"tail")
            assert t.get_write_buffer_size() > 0
            peer.setblocking(False)
            got = bytearray()
            loop = asyncio.get_running_loop()
            while len(got) < len(blob) + 4:
                got += await loop.sock_recv(peer, 1 << 20)
            assert bytes(got) == blob + b"tail"
            assert t.get_write_buffer_size() == 0

    asyncio.run(go())


@linux
@pytest.mark.parametrize("how", ["eof", "reset"])
def test_eof_and_reset_end_in_connection_lost(how: str) -> None:
    async def go() -> None:
        rec, peer, lsock = await _pair(RealtimeMap())
        try:
            if how == "reset":
                peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            peer.close()
            for _ in range(200):
                if rec.lost:
                    break
                await asyncio.sleep(0.005)
            assert len(rec.lost) == 1
            if how == "eof":
                assert rec.lost[0] is None
            else:
                assert isinstance(rec.lost[0], ConnectionResetError)
            assert rec.transport.is_closing()
        finally:
            lsock.close()

    asyncio.run(go())


@linux
def test_http1_connection_sees_a_mid_response_close_as_stream_closed() -> None:
    async def go() -> None:
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(1)
        pool = ConnectionPool("127.0.0.1", lsock.getsockname()[1], None, 5.0, "kernel")
        try:
            conn = await pool.connect()
            assert isinstance(conn.transport, KernelStampTransport)
            peer, _ = lsock.accept()
            conn.start(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            conn.head_waiter = asyncio.get_running_loop().create_future()
            peer.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await conn.head_waiter
            peer.close()
            for _ in range(200):
                if conn.closed:
                    break
                await asyncio.sleep(0.005)
            assert isinstance(conn.error, StreamClosed)
            assert [p for _, p in conn.pieces] == [b"hello"]
            assert conn.pieces[0][0] >= conn.sent_ns
        finally:
            pool.close()
            lsock.close()

    asyncio.run(go())


@linux
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_loopback_exchange_with_kernel_stamps(loop: str) -> None:
    from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

    async def go(url: str) -> dict[str, int] | None:
        t = RawHttpTransport(url, arrival_stamp="kernel")
        try:
            status, _, _ = await t.get("/v1/models", 5)
            assert status == 200
            for _ in range(3):
                async with t.post(
                    "/v1/completions", b'{"max_tokens":3,"prompt":"a b"}', {"Content-Type": "application/json"}
                ) as r:
                    assert r.status == 200
                    pieces = [p async for p in r.iter_timed_chunks()]
                    assert b"".join(d for _, d in pieces).endswith(b"data: [DONE]\n\n")
                    assert all(r.sent_ns <= s <= time.perf_counter_ns() for s, _ in pieces)
            assert len(t._pool.all) == 1
            return t.arrival_stamps
        finally:
            await t.close()

    with ScriptedServer(ScriptedConfig(ttft_ms=1, itl_ms=1)) as srv:
        if loop == "uvloop":
            import uvloop

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                counts = runner.run(go(srv.url))
        else:
            counts = asyncio.run(go(srv.url))
    assert counts is not None
    assert counts["kernel"] > 0


def test_arrival_stamp_is_checked() -> None:
    with pytest.raises(ValueError, match="use auto, kernel or user"):
        RawHttpTransport("http://127.0.0.1:1", arrival_stamp="nic")
    assert RawHttpTransport("http://127.0.0.1:1", arrival_stamp="user").arrival_stamps is None
    if kernel_stamps_supported():  # the default, auto: kernel stamps on plain TCP
        assert RawHttpTransport("http://127.0.0.1:1").arrival_stamps == {"kernel": 0, "user": 0, "clamped": 0}
    assert RawHttpTransport("https://127.0.0.1:1", arrival_stamp="kernel").arrival_stamps is None  # TLS: user


def test_data_received_is_data_received_at_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """``data_received`` hands the read to ``data_received_at`` (or its compiled twin, ``http1_conn._receive``) with
    the user-space stamp taken then."""
    conn = Http1Connection(ConnectionPool("h", 1, None, 1.0))
    seen: list[tuple[Any, bytes, int]] = []
    monkeypatch.setattr(http1_conn, "_receive", lambda c, data, now: seen.append((c, data, now)))
    before = time.perf_counter_ns()
    conn.data_received(b"x")
    assert seen[0][:2] == (conn, b"x")
    assert before <= seen[0][2] <= time.perf_counter_ns()


def test_auto_is_kernel_where_possible_and_user_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    from tailscope.client import kstamp

    monkeypatch.setattr(kstamp, "kernel_stamps_supported", lambda: True)
    resolve = kstamp.resolve_arrival_stamp
    assert resolve("auto", http_client="raw", url=None) == "kernel"  # the built-in engine, on loopback
    assert resolve("auto", http_client="raw", url="http://127.0.0.1:8000") == "kernel"
    assert resolve("kernel", http_client="raw", url="http://127.0.0.1:8000") == "kernel"
    assert resolve("auto", http_client="raw", url="HTTPS://api.example.com") == "user"  # TLS keeps user stamps
    assert resolve("auto", http_client="aiohttp", url=None) == "user"  # aiohttp reads its sockets itself
    assert resolve("user", http_client="raw", url=None) == "user"
    monkeypatch.setattr(kstamp, "kernel_stamps_supported", lambda: False)
    assert resolve("auto", http_client="raw", url=None) == "user"  # not Linux
