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


class _AioResponse:
    __slots__ = ("_resp", "headers", "status")

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self.status: int = resp.status
        self.headers: Mapping[str, str] = resp.headers

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
        )

    def _headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        h = dict(headers)
        if self._auth:
            h["Authorization"] = self._auth
        return h

    @asynccontextmanager
    async def _post(self, path: str, body: bytes, headers: Mapping[str, str]) -> AsyncIterator[Response]:
        async with self._session.post(self.base_url + path, data=body, headers=self._headers(headers)) as resp:
            yield _AioResponse(resp)

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
