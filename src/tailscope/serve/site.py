"""Listening: start an aiohttp runner on a host and port and learn the port it bound (``port=0``: a free one); stop
a foreground listener on SIGINT/SIGTERM.

The one place every tailscope HTTP listener — the built-in engine server, the fault proxy, the reference
application and the test servers — starts its site, so they all bind alike (``reuse_address``) and report the
bound port the same way; and the one place a foreground one (``serve``, ``app``, ``proxy``, ``trace collect``) routes
the signals to its stop event.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

from aiohttp import web


async def serve_site(runner: web.AppRunner, host: str, port: int) -> int:
    """Start ``runner`` (already set up) on ``host:port``; returns the bound port (useful with ``port=0``).

    Raises:
        OSError: the address cannot be bound (the caller names the flag to change).
    """
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return port


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event, *, enabled: bool = True) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM set ``stop`` (when ``enabled``, and where the platform and the thread allow
    loop signal handlers; elsewhere they keep their default action). Needs a running event loop."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if enabled:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
