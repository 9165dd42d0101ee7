"""A lean HTTP/1.1 streaming transport on asyncio protocols (the measuring client's default).

Why not only aiohttp: at hundreds of concurrent streams the client's own per-event cost decides whether its timings
are true. This transport does the minimum per network read — one ``perf_counter_ns`` stamp in ``data_received``,
chunked-encoding decoding, one waiter wake-up — and hands ``(arrival_ns, bytes)`` pairs to the client, so a token's
arrival time is taken when the bytes reach the process, not when a task gets scheduled later.

Scope: HTTP/1.1 over TCP or TLS, ``Content-Length``, ``Transfer-Encoding: chunked`` and close-delimited bodies,
keep-alive pooling per target. Anything it does not handle raises a clear error; aiohttp remains available
(``--http-client aiohttp``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import urlsplit

from tailscope.client.http1_conn import ConnectFailed as ConnectFailed
from tailscope.client.http1_conn import ConnectTimeout as ConnectTimeout
from tailscope.client.http1_conn import Http1Connection
from tailscope.client.http1_conn import ProtocolViolation as ProtocolViolation
from tailscope.client.http1_conn import StreamClosed as StreamClosed
from tailscope.client.http1_pool import ConnectionPool
from tailscope.client.kstamp import ARRIVAL_STAMPS


class _RawResponse:
    """The response being received on one connection."""

    def __init__(self, conn: Http1Connection, opened: tuple[int, int, int | None] | None) -> None:
        self._conn = conn
        self.sent_ns = conn.sent_ns  # when the request left for the socket (perf_counter_ns): the actual send
        self.status = conn.status
        self.headers: Mapping[str, str] = _CaseInsensitive(conn.headers)
        #: (reused, dns_ns, connect_ns, tls_ns): a reused keep-alive connection, or the phases of opening this one
        self.connection: tuple[bool, int | None, int | None, int | None] = (
            (True, None, None, None) if opened is None else (False, *opened)
        )

    async def iter_timed_chunks(self) -> AsyncIterator[tuple[int, bytes]]:
        """(arrival ns on perf_counter_ns, body bytes) as they come; ends when the body is complete."""
        c = self._conn
        loop = asyncio.get_running_loop()
        while True:
            if c.pieces:
                pieces, c.pieces = c.pieces, []
                for p in pieces:
                    yield p
                continue
            if c.error is not None:
                raise c.error
            if c.complete or c.closed:
                return
            c.waiter = loop.create_future()
            try:
                await c.waiter
            finally:
                c.waiter = None

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        async for _, data in self.iter_timed_chunks():
            yield data

    async def consume(self, handler: Callable[[int, bytes], bool]) -> None:
        """Push mode: call ``handler(arrival_ns, body_bytes)`` from the protocol itself as bytes arrive — no task
        wake-up per network read — until it returns True, the body ends, or an error (re-raised here, including
        the handler's own exceptions)."""
        c = self._conn
        pieces, c.pieces = c.pieces, []
        for stamp, piece in pieces:
            if handler(stamp, piece):
                return
        if c.error is not None:
            raise c.error
        if c.complete or c.closed:
            return
        c.handler = handler
        c.handler_done = False
        c.done_waiter = asyncio.get_running_loop().create_future()
        try:
            await c.done_waiter
        finally:
            c.handler = None
            c.done_waiter = None
        if c.error is not None:
            raise c.error

    async def read_text(self, limit: int = 4096) -> str:
        buf = bytearray()
        try:
            async for data in self.iter_chunks():
                buf += data
                if len(buf) >= limit:
                    break
        except (StreamClosed, ProtocolViolation):
            pass
        return bytes(buf[:limit]).decode("utf-8", "replace")


class _CaseInsensitive(dict[str, str]):
    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.title(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.title())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.title())


class _Exchange:
    """One request's exchange: sends it and waits for the response head on entry; on exit the connection goes back
    to the pool, or is closed when the body raised (an ``@asynccontextmanager`` would do the same, at the cost of a
    generator and its context-manager wrapper per request)."""

    __slots__ = ("_args", "_conn", "_transport")

    def __init__(
        self, transport: RawHttpTransport, method: str, path: str, body: bytes, headers: Mapping[str, str]
    ) -> None:
        self._transport = transport
        self._args = (method, path, body, headers)
        self._conn: Http1Connection | None = None

    async def __aenter__(self) -> _RawResponse:
        conn = self._conn = await self._transport._open(*self._args)
        return _RawResponse(conn, conn.request_opened)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        conn = self._conn
        assert conn is not None
        self._conn = None
        if exc_type is not None:
            conn.keep_alive = False
        self._transport._pool.release(conn)


class RawHttpTransport:
    """The :class:`~tailscope.client.transport.Transport` protocol on raw asyncio connections.

    Args:
        base_url: ``http://HOST:PORT`` or ``https://…`` (an optional path prefix is kept).
        connect_timeout_s: TCP (+TLS) connect timeout.
        auth_header: ``Authorization`` value or ``None``; never logged.
        arrival_stamp: ``kernel`` (the kernel's receive time of the read's last segment, ``SO_TIMESTAMPNS``; Linux,
            plain TCP — TLS and other systems keep ``user``), ``auto`` (the default: the same) or ``user`` (a read is
            stamped with ``perf_counter_ns`` when the event loop delivers it). See docs/metrics.md, "Arrival".
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 0,
        connect_timeout_s: float = 10.0,
        auth_header: str | None = None,
        arrival_stamp: str = "auto",
    ) -> None:
        if arrival_stamp not in ARRIVAL_STAMPS:
            raise ValueError(f"arrival_stamp {arrival_stamp!r}: use auto, kernel or user")
        u = urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"unsupported URL {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._prefix = u.path.rstrip("/")
        port = u.port or (443 if u.scheme == "https" else 80)
        ctx = ssl.create_default_context() if u.scheme == "https" else None
        self._pool = ConnectionPool(u.hostname, port, ctx, connect_timeout_s, arrival_stamp)
        host_hdr = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
        self._common = f"Host: {host_hdr}\r\nUser-Agent: tailscope\r\nAccept: */*\r\nConnection: keep-alive\r\n"
        if auth_header:
            self._common += f"Authorization: {auth_header}\r\n"
        self.max_connections = max_connections

    def _request(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head = f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._common}{extra}Content-Length: {len(body)}\r\n\r\n"
        return head.encode("latin-1") + body

    async def _open(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> Http1Connection:
        """Send the request and wait for the response head.

        No retry, even on a reused keep-alive connection: a POST the server may have received is never sent twice
        (a load tester must count a reset as the fault it is). Idle connections already closed by the server are
        skipped when acquiring.
        """
        conn = await self._pool.acquire()
        conn.request_opened, conn.opened = conn.opened, None  # the first request on it pays for opening it
        conn.start(self._request(method, path, body, headers))
        conn.head_waiter = asyncio.get_running_loop().create_future()
        try:
            await conn.head_waiter
        except BaseException:
            conn.keep_alive = False
            self._pool.release(conn)
            raise
        finally:
            conn.head_waiter = None
        return conn

    def _exchange(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> _Exchange:
        return _Exchange(self, method, path, body, headers)

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> AbstractAsyncContextManager[_RawResponse]:
        return _Exchange(self, "POST", path, body, headers)

    async def get(self, path: str, timeout_s: float) -> tuple[int, Mapping[str, str], bytes]:
        if path.startswith("http"):
            u = urlsplit(path)
            other = RawHttpTransport(f"{u.scheme}://{u.netloc}", connect_timeout_s=timeout_s)
            try:
                return await other.get(u.path or "/", timeout_s)
            finally:
                await other.close()

        async def go() -> tuple[int, Mapping[str, str], bytes]:
            async with self._exchange("GET", path, b"", {}) as resp:
                buf = bytearray()
                async for data in resp.iter_chunks():
                    buf += data
                return resp.status, resp.headers, bytes(buf)

        return await asyncio.wait_for(go(), timeout_s)

    async def preopen(self, n: int, *, warm_path: str | None = None, parallel: int = 64) -> int:
        """Open connections before the load starts so the first wave does not wait for TCP (+TLS) connects.

        Opens up to ``n`` connections beyond those already idle, ``parallel`` at a time, and puts them in the pool;
        with ``warm_path`` each also carries one GET of that path (the server's accept path and the connection's
        buffers warmed, the answer read and dropped). A connection that fails to open or warm is dropped and the
        opening stops there (the run opens connections on demand as before).

        Returns:
            How many connections are idle in the pool afterwards.
        """
        pool = self._pool
        want = max(0, n - len(pool.idle))
        gate = asyncio.Semaphore(max(1, parallel))
        failed = False

        async def one() -> None:
            nonlocal failed
            async with gate:
                if failed:
                    return
                try:
                    conn = await pool.connect()
                except (ConnectFailed, ConnectTimeout):
                    failed = True
                    return
                if warm_path is not None:
                    try:
                        await self._warm(conn, warm_path)
                    except Exception:
                        failed = True
                        conn.keep_alive = False
                        pool.release(conn)
                        return
                pool.release_idle(conn)

        await asyncio.gather(*(one() for _ in range(want)))
        return len(pool.idle)

    async def _warm(self, conn: Http1Connection, path: str) -> None:
        loop = asyncio.get_running_loop()
        conn.start(self._request("GET", path, b"", {}))
        conn.head_waiter = loop.create_future()
        try:
            await asyncio.wait_for(conn.head_waiter, self._pool.connect_timeout_s)
        finally:
            conn.head_waiter = None
        resp = _RawResponse(conn, None)  # the warm-up GET: the phases stay for the first request
        async for _ in resp.iter_chunks():
            pass

    @property
    def idle_connections(self) -> int:
        """Keep-alive connections waiting in the pool."""
        return len(self._pool.idle)

    async def close(self) -> None:
        self._pool.close()

    @property
    def arrival_stamps(self) -> dict[str, int] | None:
        """With ``arrival_stamp="kernel"``: how many reads took the kernel's stamp, kept the user-space one (no
        control message), or fell back because a clamp fired; ``None`` otherwise."""
        k = self._pool.kernel_clock
        return None if k is None else {"kernel": k.kernel, "user": k.user, "clamped": k.clamped}

    @property
    def read_batching(self) -> dict[str, int] | None:
        """Where kernel-stamped reads were batched (kstamp, "Read batching"): the window (µs), the loop's wake-ups
        that read something, the reads they did, and how many of those wake-ups were batching polls; ``None``
        where reads are not batched (user stamps, or the window 0)."""
        b = self._pool.read_batcher
        if b is None:
            return None
        return {
            "window_us": round(b.window_s * 1e6),
            "wake_ups": b.polls,
            "reads": b.reads,
            "batched_wake_ups": b.batched_polls,
        }
