"""Listening: start an aiohttp runner on a host and port and learn the port it bound (``port=0``: a free one).

The one place every tailscope HTTP listener — the built-in engine server, the fault proxy, the reference
application and the test servers — starts its site, so they all bind alike (``reuse_address``) and report the
bound port the same way. Stopping on SIGINT/SIGTERM is :mod:`tailscope.signals`'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # aiohttp's server half is imported when a site starts
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
