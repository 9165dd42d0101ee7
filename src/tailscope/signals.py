"""SIGINT and SIGTERM routed on the running event loop: a foreground listener (``serve``, ``app``, ``proxy``,
``trace collect``) to its stop event, a bench run (and the multi-process driver) to its interrupt — the one place
every foreground command installs and removes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator


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
