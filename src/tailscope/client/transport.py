"""The transport protocol: how the OpenAI client talks HTTP, and its aiohttp implementation.

A :class:`Transport` opens a POST and yields a :class:`Response` whose body arrives as raw byte chunks. The OpenAI
client above it timestamps each chunk on arrival and parses SSE itself, so a test can swap in a scripted transport
(see ``tests/unit/client``) and the timing code is the same code that runs against real servers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol


class Response(Protocol):
    """An HTTP response being received."""

    status: int
    headers: Mapping[str, str]

    def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (any boundaries)."""
        ...

    async def read_text(self, limit: int = 4096) -> str:
        """Up to ``limit`` bytes of the body as text (for error messages)."""
        ...


class Transport(Protocol):
    """Sends requests to one server."""

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> AbstractAsyncContextManager[Response]:
        """POST ``body`` to ``path`` (relative to the base URL); the context yields the response once headers arrive."""
        ...

    async def get(self, path: str, timeout_s: float) -> tuple[int, Mapping[str, str], bytes]:
        """A bounded GET (preflight, /metrics)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class _Phases:
    """One request's connection, as aiohttp's trace hooks report it (perf_counter ns)."""

    __slots__ = ("connect", "dns", "dns_t", "reused", "t")

    def __init__(self) -> None:
        self.t = self.dns_t = 0
        self.dns: int | None = None
        self.connect: int | None = None
        self.reused: bool | None = None

    def connection(self) -> tuple[bool | None, int | None, int | None, int | None]:
        """(reused, dns_ns, connect_ns, tls_ns): aiohttp's connect includes TLS, so TLS is not told apart (None)."""
        if self.reused:
            return (True, None, None, None)
        if self.connect is None:
            return (None, None, None, None)
        return (False, self.dns, self.connect, None)


def _trace_config() -> Any:
    """aiohttp hooks that time DNS and connecting apart per request (``trace_request_ctx`` is its :class:`_Phases`)."""
    import time

    import aiohttp

    def phases(ctx: Any) -> _Phases | None:
        p = ctx.trace_request_ctx
        return p if isinstance(p, _Phases) else None

    async def create_start(_s: Any, ctx: Any, _p: Any) -> None:
        if (p := phases(ctx)) is not None:
            p.t = time.perf_counter_ns()

    async def create_end(_s: Any, ctx: Any, _p: Any) -> None:
        if (p := phases(ctx)) is not None:
            p.reused = False
            p.connect = time.perf_counter_ns() - p.t - (p.dns or 0)

    async def reuse(_s: Any, ctx: Any, _p: Any) -> None:
        if (p := phases(ctx)) is not None:
            p.reused = True

    async def dns_start(_s: Any, ctx: Any, _p: Any) -> None:
        if (p := phases(ctx)) is not None:
            p.dns_t = time.perf_counter_ns()

    async def dns_end(_s: Any, ctx: Any, _p: Any) -> None:
        if (p := phases(ctx)) is not None:
            p.dns = time.perf_counter_ns() - p.dns_t

    async def dns_cached(_s: Any, ctx: Any, _p: Any) -> None:
        if (p := phases(ctx)) is not None:
            p.dns = 0

    tc = aiohttp.TraceConfig()
    tc.on_connection_create_start.append(create_start)
    tc.on_connection_create_end.append(create_end)
    tc.on_connection_reuseconn.append(reuse)
    tc.on_dns_resolvehost_start.append(dns_start)
    tc.on_dns_resolvehost_end.append(dns_end)
    tc.on_dns_cache_hit.append(dns_cached)
    return tc


class _AioResponse:
    __slots__ = ("_resp", "connection", "headers", "status")

    def __init__(self, resp: Any, phases: _Phases | None = None) -> None:
        self._resp = resp
        self.status: int = resp.status
        self.headers: Mapping[str, str] = resp.headers
        self.connection = phases.connection() if phases is not None else (None, None, None, None)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._resp.content.iter_any():
            yield chunk

    async def read_text(self, limit: int = 4096) -> str:
        raw: bytes = await self._resp.content.read(limit)
        return raw.decode("utf-8", errors="replace")


class AioHttpTransport:
    """aiohttp transport with one shared keep-alive connection pool.

    Args:
        base_url: server root, e.g. ``http://127.0.0.1:8000`` (no ``/v1``).
        max_connections: pool size (0 = unlimited); set it to the run's concurrency.
        connect_timeout_s: TCP connect timeout.
        auth_header: value of the ``Authorization`` header, or ``None``. Never logged or stored.
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 0,
        connect_timeout_s: float = 10.0,
        auth_header: str | None = None,
    ) -> None:
        import aiohttp

        self.base_url = base_url.rstrip("/")
        self._auth = auth_header
        connector = aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=60
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, connect=connect_timeout_s),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
            headers={"User-Agent": "tailscope"},
            trace_configs=[_trace_config()],
        )

    def _headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        h = dict(headers)
        if self._auth:
            h["Authorization"] = self._auth
        return h

    @asynccontextmanager
    async def _post(self, path: str, body: bytes, headers: Mapping[str, str]) -> AsyncIterator[Response]:
        phases = _Phases()
        async with self._session.post(
            self.base_url + path, data=body, headers=self._headers(headers), trace_request_ctx=phases
        ) as resp:
            yield _AioResponse(resp, phases)

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> AbstractAsyncContextManager[Response]:
        return self._post(path, body, headers)

    async def get(self, path: str, timeout_s: float) -> tuple[int, Mapping[str, str], bytes]:
        import aiohttp

        url = path if path.startswith("http") else self.base_url + path
        async with self._session.get(
            url, headers=self._headers({}), timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            return resp.status, resp.headers, await resp.read()

    async def close(self) -> None:
        await self._session.close()
