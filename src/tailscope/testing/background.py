"""A test server's own event loop in a daemon thread: started by ``with`` once it listens, stopped on exit."""

from __future__ import annotations

import asyncio
import threading
from typing import Self


class BackgroundServer:
    """Base of the test servers that run in a background thread on 127.0.0.1 (a context manager).

    A subclass implements :meth:`_run_server`: listen (setting ``port``), ``await self._until_stopped()``, clean up.
    """

    #: what the server is called in its thread's name and in the error when it does not start
    what = "test server"

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name=self.what, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"the {self.what} did not start within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await self._run_server()

    async def _until_stopped(self) -> None:
        """Say that the server listens, then wait for the ``with`` block to end."""
        assert self._stop is not None
        self._ready.set()
        await self._stop.wait()

    async def _run_server(self) -> None:
        raise NotImplementedError
