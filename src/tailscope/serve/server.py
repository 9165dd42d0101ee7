"""Running the built-in server in the foreground (``tailscope serve``) until interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import sys
import threading
from collections.abc import Callable

from tailscope.engine.api import ReplicaEngine
from tailscope.errors import TargetError
from tailscope.serve.app import build_app, make_runner
from tailscope.serve.options import ServeOptions
from tailscope.serve.site import serve_site
from tailscope.signals import stop_on_signals


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve_forever(
    engine: ReplicaEngine,
    options: ServeOptions,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    exit_on_stdin_eof: bool = False,
) -> None:
    """Serve ``engine`` on ``host:port`` until ``stop`` is set or SIGINT/SIGTERM arrives.

    Args:
        engine: the replica engine to drive.
        options: serving options.
        host: interface to bind.
        port: port to bind (``0`` = a free one).
        on_ready: called with the base URL once the server listens.
        stop: an event that ends serving when set (a new one when omitted).
        exit_on_stdin_eof: also stop when standard input reaches end of file, so a server started as a child
            process ends with its parent even when the parent is killed outright.

    Raises:
        TargetError: when the address cannot be bound.
    """
    app = build_app(engine, options)
    runner = make_runner(app)
    await runner.setup()
    stop = stop or asyncio.Event()
    try:
        try:
            bound = await serve_site(runner, host, port)
        except OSError as exc:
            raise TargetError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port") from None
        with stop_on_signals(stop):
            if exit_on_stdin_eof:
                _watch_stdin(asyncio.get_running_loop(), stop)
            if on_ready is not None:
                shown = f"[{host}]" if ":" in host else host
                on_ready(f"http://{shown}:{bound}")
            await stop.wait()
    finally:
        await runner.cleanup()


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Set ``stop`` (from a daemon thread) once standard input is at end of file."""

    def wait_for_eof() -> None:
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.read(4096):
                pass
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=wait_for_eof, name="tailscope-serve-stdin", daemon=True).start()
