"""Listening: start an aiohttp runner on a host and port and learn the port it bound (``port=0``: a free one); stop
a foreground listener (or a bench run) on SIGINT/SIGTERM.

The one place every tailscope HTTP listener — the built-in engine server, the fault proxy, the reference
application and the test servers — starts its site, so they all bind alike (``reuse_address``) and report the
bound port the same way; and the one place a foreground command routes the signals: a listener (``serve``, ``app``,
``proxy``, ``trace collect``) to its stop event, ``bench`` to its interrupt.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # aiohttp's server half is imported when a site starts: bench routes signals here without it
    from aiohttp import web


async def serve_site(runner: web.AppRunner, host: str, port: int) -> int:
    """Start ``runner`` (already set up) on ``host:port``; returns the bound port (useful with ``port=0``).

    Raises:
        OSError: the address cannot be bound (the caller names the flag to change).
    """
    from aiohttp import web

    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return port


def install_signal_handlers(on_signal: Callable[[str], None], *, enabled: bool = True) -> Callable[[], None]:
    """Route SIGINT and SIGTERM to ``on_signal(name)`` on the running loop (when ``enabled``, and where the platform
    and the thread allow loop signal handlers; elsewhere they keep their default action).

    Returns:
        The function that removes the handlers again.
    """
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if enabled:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal, sig.name)
                installed.append(sig)

    def restore() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return restore


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event, *, enabled: bool = True) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM set ``stop`` (as :func:`install_signal_handlers`). Needs a running event
    loop."""
    restore = install_signal_handlers(lambda _name: stop.set(), enabled=enabled)
    try:
        yield
    finally:
        restore()
