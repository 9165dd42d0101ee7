"""A scripted in-process transport (the mock twin of :class:`AioHttpTransport`) for unit tests.

Each POST plays a :class:`Script`: a status, headers and body chunks, each delivered at a given time on a
:class:`~tailscope.clock.ManualClock` that the transport advances, so timings in tests are exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

from tailscope.clock import ManualClock


@dataclass(slots=True)
class Script:
    """One scripted response: ``chunks`` are (time in ns on the manual clock, bytes)."""

    chunks: list[tuple[int, bytes]] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raise_after: BaseException | None = None  # raised after the chunks (a broken stream)
    hang: bool = False  # after the chunks, wait forever (for timeouts)


class _MockResponse:
    def __init__(self, script: Script, clock: ManualClock) -> None:
        self._script = script
        self._clock = clock
        self.status = script.status
        self.headers: Mapping[str, str] = script.headers

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for t, data in self._script.chunks:
            if t > self._clock.now_ns():
                self._clock.set(t)
            await asyncio.sleep(0)
            yield data
        if self._script.raise_after is not None:
            raise self._script.raise_after
        if self._script.hang:
            await asyncio.Event().wait()

    async def read_text(self, limit: int = 4096) -> str:
        return b"".join(c for _, c in self._script.chunks).decode("utf-8", "replace")[:limit]


class MockTransport:
    """Plays scripts in order (or from a callback that builds one per request body)."""

    def __init__(self, clock: ManualClock, scripts: list[Script] | Callable[[bytes], Script]) -> None:
        self.clock = clock
        self._scripts = scripts
        self.bodies: list[bytes] = []

    def _next(self, body: bytes) -> Script:
        if callable(self._scripts):
            return self._scripts(body)
        return self._scripts.pop(0)

    @asynccontextmanager
    async def _post(self, body: bytes) -> AsyncIterator[_MockResponse]:
        self.bodies.append(body)
        yield _MockResponse(self._next(body), self.clock)

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> AbstractAsyncContextManager[_MockResponse]:
        return self._post(body)

    async def get(self, path: str, timeout_s: float) -> tuple[int, Mapping[str, str], bytes]:
        return 200, {"Content-Type": "application/json"}, b'{"data":[{"id":"mock"}]}'

    async def close(self) -> None:
        return None
