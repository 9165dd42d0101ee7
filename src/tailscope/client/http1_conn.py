"""One HTTP/1.1 keep-alive connection as an asyncio protocol: parses one response at a time (status line and
headers, ``Content-Length``, ``Transfer-Encoding: chunked`` or close-delimited bodies), stamping each network read once
with ``perf_counter_ns``; and the errors the raw transport raises."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from tailscope.client.hot import HOT

if TYPE_CHECKING:
    from tailscope.client.http1_pool import ConnectionPool


class ConnectFailed(OSError):
    """The TCP/TLS connection could not be made."""


class ConnectTimeout(Exception):
    """Connecting took longer than the connect timeout."""


class StreamClosed(Exception):
    """The server closed the connection before the response was complete."""


class ProtocolViolation(Exception):
    """The server's HTTP framing is invalid."""


_MAX_HEADER = 64 * 1024


def _push_frames_py(data: bytes, now: int, handler: Callable[[int, bytes], bool]) -> tuple[int, bool]:
    """Hand the whole ``SIZE\\r\\nDATA\\r\\n`` chunks at the start of one read to ``handler(now, data)``, in order,
    until one returns True; returns (bytes consumed, whether the handler said done). What is left (the last chunk, a
    partial one, extensions) is the general decoder's. The handler's exceptions propagate. Compiled twin:
    ``_hot.push``."""
    i, n = 0, len(data)
    while True:
        j = data.find(b"\r\n", i)
        if not 0 < j - i <= 8:
            return i, False
        try:
            size = int(data[i:j], 16)
        except ValueError:
            return i, False
        end = j + 2 + size
        if size <= 0 or end + 2 > n or data[end : end + 2] != b"\r\n":
            return i, False
        i = end + 2
        if handler(now, data[j + 2 : end]):
            return i, True
        if i == n:
            return i, False


_push_frames: Callable[[bytes, int, Callable[[int, bytes], bool]], tuple[int, bool]] = (
    HOT.push if HOT is not None else _push_frames_py
)


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time."""

    def __init__(self, pool: ConnectionPool) -> None:
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
        _receive(self, data, time.perf_counter_ns())

    def data_received_at(self, data: bytes, now: int) -> None:
        """One network read arrived at ``now`` (perf_counter_ns): the user-space stamp from ``data_received``, or
        the kernel's receive stamp from :class:`~tailscope.client.kstamp.KernelStampTransport`. Compiled twin:
        ``_hot.receive`` (the same fast path, then :meth:`_receive_general`)."""
        handler = self.handler
        if handler is not None and self._chunked and self._chunk_state == 0 and not self._line and not self.pieces:
            # push mode's common case: the read holds whole "SIZE\r\nDATA\r\n" chunks — one SSE event each, one per
            # read on a quiet machine, several when the loop fell behind — each handed over as it is framed (no piece
            # list, no join, no re-split by the SSE parser); whatever else the read holds (the last chunk, a partial
            # one) goes to the general decoder below
            try:
                i, done = _push_frames(data, now, handler)
            except Exception as exc:  # whatever the handler raised (a malformed event, …)
                self._fail(exc)
                self._wake()
                return
            if done:
                self.handler = None
                self.handler_done = True
                self._wake()
            if i == len(data):
                return
            if i:
                data = data[i:]
        self._receive_general(data, now)

    def _receive_general(self, data: bytes, now: int) -> None:
        """The general decoder: the response head, then any body framing (what the push fast path left)."""
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
            self._fail(exc)
        self._wake()

    def _fail(self, exc: Exception) -> None:
        """The response failed: keep the cause, stop pushing, and close the connection (it cannot be reused)."""
        self.error = exc
        self.keep_alive = False
        self.handler = None
        if self.transport is not None:
            self.transport.close()

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


#: what ``data_received`` runs: the compiled twin of :meth:`Http1Connection.data_received_at` where it is built
_receive: Callable[[Http1Connection, bytes, int], None] = (
    HOT.receive if HOT is not None else Http1Connection.data_received_at
)
