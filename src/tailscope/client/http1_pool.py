"""Keep-alive connections to one target: idle ones reused, new ones opened with their DNS, TCP connect and TLS
handshake timed apart."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

from tailscope.client.http1_conn import ConnectFailed, ConnectTimeout, Http1Connection
from tailscope.client.kstamp import (
    ReadBatcher,
    RealtimeMap,
    kernel_stamps_supported,
    open_kernel_stamped,
    read_window_s,
)


class ConnectionPool:
    """The connections to ``host:port`` (TLS when ``ssl_ctx`` is given): idle ones first, then new ones."""

    def __init__(
        self,
        host: str,
        port: int,
        ssl_ctx: ssl.SSLContext | None,
        connect_timeout_s: float,
        arrival_stamp: str = "auto",
    ) -> None:
        self.host = host
        # kernel receive stamps on plain TCP under Linux; TLS keeps asyncio's transport (user-space stamps)
        self.kernel_clock: RealtimeMap | None = (
            RealtimeMap() if arrival_stamp != "user" and ssl_ctx is None and kernel_stamps_supported() else None
        )
        #: the kernel-stamped connections' reads, batched (kstamp, "Read batching"); made at the first connect
        self.read_batcher: ReadBatcher | None = None
        self._window_s = read_window_s() if self.kernel_clock is not None else 0.0
        self.port = port
        self.ssl_ctx = ssl_ctx
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[Http1Connection] = []
        self.all: set[Http1Connection] = set()

    async def acquire(self) -> Http1Connection:
        while self.idle:
            c = self.idle.pop()
            if not c.closed:
                return c
        return await self.connect()

    async def connect(self) -> Http1Connection:
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

    async def _connect(self) -> Http1Connection:
        """A new connection, its DNS, TCP connect and TLS handshake timed apart (``Http1Connection.opened``)."""
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter_ns()
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        t1 = time.perf_counter_ns()
        last: OSError = OSError(f"{self.host} resolved to no address")
        transport: asyncio.BaseTransport
        for family, _, _, _, addr in infos:  # each address in turn, as create_connection does
            try:
                if self.kernel_clock is not None:
                    if self.read_batcher is None and self._window_s > 0:
                        self.read_batcher = ReadBatcher(loop, self._window_s)
                    transport, proto = await open_kernel_stamped(
                        loop, lambda: Http1Connection(self), addr, family, self.kernel_clock, self.read_batcher
                    )
                else:
                    transport, proto = await loop.create_connection(
                        lambda: Http1Connection(self), str(addr[0]), int(addr[1]), family=family
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

    def release(self, c: Http1Connection) -> None:
        if c.closed or not c.keep_alive:
            self.discard(c)
            if c.transport is not None and not c.closed:
                c.transport.close()
            return
        if c.complete:
            self.idle.append(c)
        else:
            c.draining = True  # the rest of the body (e.g. the last chunk after [DONE]) returns it to the pool

    def release_idle(self, c: Http1Connection) -> None:
        """A fresh (or warmed and fully read) connection joins the idle list."""
        if c.closed or not c.keep_alive:
            self.release(c)
            return
        c.complete = True
        self.idle.append(c)

    def discard(self, c: Http1Connection) -> None:
        self.all.discard(c)
        if c in self.idle:
            self.idle.remove(c)

    def close(self) -> None:
        for c in list(self.all):
            if c.transport is not None:
                c.transport.close()
        self.all.clear()
        self.idle.clear()
