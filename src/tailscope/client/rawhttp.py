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
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, cast
from urllib.parse import urlsplit


class ConnectFailed(OSError):
    """The TCP/TLS connection could not be made."""


class ConnectTimeout(Exception):
    """Connecting took longer than the connect timeout."""


class StreamClosed(Exception):
    """The server closed the connection before the response was complete."""


class ProtocolViolation(Exception):
    """The server's HTTP framing is invalid."""


_MAX_HEADER = 64 * 1024


class _Conn(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.sent_ns = 0  # perf_counter_ns when the current request was written to the socket
        # (dns_ns, connect_ns, tls_ns) of opening this connection, until its first request takes them
        self.opened: tuple[int, int, int | None] | None = None
        self.request_opened: tuple[int, int, int | None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._head = bytearray()
        self._in_body = False
        self._chunked = False
        self._remaining: int | None = None  # content-length bytes left
        self._chunk_left = 0  # bytes left in the current chunk (+2 for its CRLF once data is read)
        self._chunk_state = 0  # 0 = size line, 1 = data, 2 = CRLF after data, 3 = trailers
        self._line = bytearray()
        self.complete = False
        self.keep_alive = True
        self.pieces: list[tuple[int, bytes]] = []
        self.waiter: asyncio.Future[None] | None = None
        self.head_waiter: asyncio.Future[None] | None = None
        self.error: BaseException | None = None
        self.draining = False
        # push mode (see _RawResponse.consume): body pieces go straight to a handler from data_received
        self.handler: Callable[[int, bytes], bool] | None = None
        self.handler_done = False
        self.done_waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport but implement it
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete:
            if self._in_body and self._remaining is None and not self._chunked:
                self._finish()  # close-delimited body ends here
            elif self.error is None:  # keep the first cause (e.g. the handler's malformed event)
                self.error = StreamClosed("the server closed the connection mid-response")
        self._wake()
        self.pool.discard(self)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        handler = self.handler
        if handler is not None and self._chunked and self._chunk_state == 0 and not self._line and not self.pieces:
            # push mode's common case: the read holds whole "SIZE\r\nDATA\r\n" chunks — one SSE event each, one per
            # read on a quiet machine, several when the loop fell behind — each handed over as it is framed (no piece
            # list, no join, no re-split by the SSE parser); whatever else the read holds (the last chunk, a partial
            # one) goes to the general decoder below
            i, n = 0, len(data)
            while True:
                j = data.find(b"\r\n", i)
                if not 0 < j - i <= 8:
                    break
                try:
                    size = int(data[i:j], 16)
                except ValueError:
                    break
                end = j + 2 + size
                if size <= 0 or end + 2 > n or data[end : end + 2] != b"\r\n":
                    break
                i = end + 2
                try:
                    if handler(now, data[j + 2 : end]):
                        self.handler = None
                        self.handler_done = True
                        self._wake()
                        break
                except Exception as exc:  # whatever the handler raised (a malformed event, …)
                    self.error = exc
                    self.keep_alive = False
                    self.handler = None
                    if self.transport is not None:
                        self.transport.close()
                    self._wake()
                    return
                if i == n:
                    return
            if i == n:
                return
            if i:
                data = data[i:]
        try:
            if not self._in_body:
                self._head += data
                end = self._head.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._head) > _MAX_HEADER:
                        raise ProtocolViolation("response headers exceed 64 KiB")
                    return
                rest = bytes(self._head[end + 4 :])
                self._parse_head(bytes(self._head[:end]))
                self._in_body = True
                if self.head_waiter is not None and not self.head_waiter.done():
                    self.head_waiter.set_result(None)
                if not rest and not self.complete:
                    return
                data = rest
            if self._chunked:
                self._feed_chunked(data, now)
            else:
                self._feed_plain(data, now)
            if self.handler is not None and self.pieces:
                self._push()
        except Exception as exc:  # framing errors, and whatever the handler raised (a malformed event, …)
            self.error = exc
            self.keep_alive = False
            self.handler = None
            if self.transport is not None:
                self.transport.close()
        self._wake()

    def _push(self) -> None:
        pieces, self.pieces = self.pieces, []
        handler = self.handler
        assert handler is not None
        for stamp, piece in pieces:
            if handler(stamp, piece):
                self.handler = None
                self.handler_done = True
                return

    # -- parsing -----------------------------------------------------------------------------------------------
    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ProtocolViolation(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        try:
            self.status = int(parts[1])
        except ValueError:
            raise ProtocolViolation(f"bad status code in {lines[0][:80]!r}") from None
        for raw in lines[1:]:
            name, sep, value = raw.partition(b":")
            if not sep:
                continue
            self.headers[name.strip().decode("latin-1").title()] = value.strip().decode("latin-1")
        te = self.headers.get("Transfer-Encoding", "").lower()
        self._chunked = "chunked" in te
        conn = self.headers.get("Connection", "").lower()
        if conn == "close" or parts[0] == b"HTTP/1.0":
            self.keep_alive = False
        if not self._chunked:
            cl = self.headers.get("Content-Length")
            if cl is not None:
                try:
                    self._remaining = int(cl)
                except ValueError:
                    raise ProtocolViolation(f"bad Content-Length {cl!r}") from None
                if self._remaining == 0:
                    self._finish()
            else:
                self.keep_alive = False  # body ends when the connection closes

    def _feed_plain(self, data: bytes, now: int) -> None:
        if self._remaining is not None:
            data = data[: self._remaining]
            self._remaining -= len(data)
        if data:
            self.pieces.append((now, data))
        if self._remaining == 0:
            self._finish()

    def _feed_chunked(self, data: bytes, now: int) -> None:
        out: list[bytes] = []
        i, n = 0, len(data)
        while i < n:
            st = self._chunk_state
            if st == 0 and not self._line:
                # fast path: a whole "SIZE\r\nDATA\r\n" chunk in this read (the common case for SSE streams)
                j = data.find(b"\r\n", i)
                if j > i:
                    try:
                        size = int(data[i:j], 16)
                    except ValueError:
                        size = -1  # extensions or junk: the general path below decides
                    if size > 0:
                        end = j + 2 + size
                        if end + 2 <= n and data[end : end + 2] == b"\r\n":
                            out.append(data[j + 2 : end])
                            i = end + 2
                            continue
            if st == 1:
                take = min(self._chunk_left, n - i)
                out.append(data[i : i + take])
                i += take
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._chunk_state = 2
            else:
                j = data.find(b"\n", i)
                if j < 0:
                    self._line += data[i:]
                    if len(self._line) > 4096:
                        raise ProtocolViolation("chunk-size line too long")
                    break
                line = bytes(self._line) + data[i:j] if self._line else data[i:j]
                self._line.clear()
                i = j + 1
                line = line.rstrip(b"\r")
                if st == 0:
                    try:
                        size = int(line.split(b";", 1)[0].strip(), 16)
                    except ValueError:
                        raise ProtocolViolation(f"bad chunk size line {line[:40]!r}") from None
                    if size == 0:
                        self._chunk_state = 3
                    else:
                        self._chunk_left = size
                        self._chunk_state = 1
                elif st == 2:
                    if line:
                        raise ProtocolViolation("chunk data not followed by CRLF")
                    self._chunk_state = 0
                elif not line:  # st == 3: trailers end with an empty line
                    self._finish()
                    break
        if out:
            self.pieces.append((now, out[0] if len(out) == 1 else b"".join(out)))

    def _finish(self) -> None:
        self.complete = True
        if self.draining:
            self.draining = False
            self.pool.release(self)

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)
        dw = self.done_waiter
        if dw is not None and not dw.done() and (self.handler_done or self.error or self.complete or self.closed):
            dw.set_result(None)
        hw = self.head_waiter
        if hw is not None and not hw.done():
            if self.error is not None:
                hw.set_exception(self.error)
            elif self.closed:
                hw.set_exception(StreamClosed("the server closed the connection before answering"))

    # -- request -----------------------------------------------------------------------------------------------
    def start(self, request: bytes) -> None:
        self._reset()
        assert self.transport is not None
        self.sent_ns = time.perf_counter_ns()
        self.transport.write(request)


class _RawResponse:
    """The response being received on one connection."""

    def __init__(self, conn: _Conn, opened: tuple[int, int, int | None] | None) -> None:
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


class _Pool:
    def __init__(self, host: str, port: int, ssl_ctx: ssl.SSLContext | None, connect_timeout_s: float) -> None:
        self.host = host
        self.port = port
        self.ssl_ctx = ssl_ctx
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[_Conn] = []
        self.all: set[_Conn] = set()

    async def acquire(self) -> _Conn:
        while self.idle:
            c = self.idle.pop()
            if not c.closed:
                return c
        return await self.connect()

    async def connect(self) -> _Conn:
        """A new connection (not yet in the idle list)."""
        try:
            conn = await asyncio.wait_for(self._connect(), self.connect_timeout_s)
        except TimeoutError:
            raise ConnectTimeout(
                f"connecting to {self.host}:{self.port} took over {self.connect_timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise ConnectFailed(
                exc.errno, f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self.all.add(conn)
        return conn

    async def _connect(self) -> _Conn:
        """A new connection, its DNS, TCP connect and TLS handshake timed apart (``_Conn.opened``)."""
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter_ns()
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        t1 = time.perf_counter_ns()
        last: OSError = OSError(f"{self.host} resolved to no address")
        for family, _, _, _, addr in infos:  # each address in turn, as create_connection does
            try:
                transport, proto = await loop.create_connection(
                    lambda: _Conn(self), str(addr[0]), int(addr[1]), family=family
                )
                break
            except OSError as exc:
                last = exc
        else:
            raise last
        t2 = time.perf_counter_ns()
        tls_ns: int | None = None
        if self.ssl_ctx is not None:
            try:
                tls = await loop.start_tls(transport, proto, self.ssl_ctx, server_hostname=self.host)
            except BaseException:
                transport.close()
                raise
            assert tls is not None
            proto.transport = tls
            tls_ns = time.perf_counter_ns() - t2
        proto.opened = (t1 - t0, t2 - t1, tls_ns)
        return proto

    def release(self, c: _Conn) -> None:
        if c.closed or not c.keep_alive:
            self.discard(c)
            if c.transport is not None and not c.closed:
                c.transport.close()
            return
        if c.complete:
            self.idle.append(c)
        else:
            c.draining = True  # the rest of the body (e.g. the last chunk after [DONE]) returns it to the pool

    def release_idle(self, c: _Conn) -> None:
        """A fresh (or warmed and fully read) connection joins the idle list."""
        if c.closed or not c.keep_alive:
            self.release(c)
            return
        c.complete = True
        self.idle.append(c)

    def discard(self, c: _Conn) -> None:
        self.all.discard(c)
        if c in self.idle:
            self.idle.remove(c)

    def close(self) -> None:
        for c in list(self.all):
            if c.transport is not None:
                c.transport.close()
        self.all.clear()
        self.idle.clear()


class RawHttpTransport:
    """The :class:`~tailscope.client.transport.Transport` protocol on raw asyncio connections.

    Args:
        base_url: ``http://HOST:PORT`` or ``https://…`` (an optional path prefix is kept).
        connect_timeout_s: TCP (+TLS) connect timeout.
        auth_header: ``Authorization`` value or ``None``; never logged.
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 0,
        connect_timeout_s: float = 10.0,
        auth_header: str | None = None,
    ) -> None:
        u = urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"unsupported URL {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._prefix = u.path.rstrip("/")
        port = u.port or (443 if u.scheme == "https" else 80)
        ctx = ssl.create_default_context() if u.scheme == "https" else None
        self._pool = _Pool(u.hostname, port, ctx, connect_timeout_s)
        host_hdr = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
        self._common = f"Host: {host_hdr}\r\nUser-Agent: tailscope\r\nAccept: */*\r\nConnection: keep-alive\r\n"
        if auth_header:
            self._common += f"Authorization: {auth_header}\r\n"
        self.max_connections = max_connections

    def _request(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head = f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._common}{extra}Content-Length: {len(body)}\r\n\r\n"
        return head.encode("latin-1") + body

    async def _open(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> _Conn:
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

    @asynccontextmanager
    async def _exchange(
        self, method: str, path: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[_RawResponse]:
        conn = await self._open(method, path, body, headers)
        try:
            yield _RawResponse(conn, conn.request_opened)
        except BaseException:
            conn.keep_alive = False
            raise
        finally:
            self._pool.release(conn)

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> AbstractAsyncContextManager[_RawResponse]:
        return self._exchange("POST", path, body, headers)

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

    async def _warm(self, conn: _Conn, path: str) -> None:
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
