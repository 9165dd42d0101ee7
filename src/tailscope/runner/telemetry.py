"""Scraping the target's Prometheus /metrics while a run goes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from tailscope.client.prometheus import parse_prometheus_text
from tailscope.client.transport import Transport
from tailscope.clock import Clock
from tailscope.errors import TailscopeError
from tailscope.metrics.server import keep_sample
from tailscope.records import ServerSample


async def probe_metrics(transport: Transport, url: str, timeout_s: float = 3.0) -> bool:
    """Whether ``url`` serves Prometheus text with engine metrics."""
    try:
        status, _, body = await transport.get(url, timeout_s)
    except Exception:
        return False
    if status != 200:
        return False
    try:
        return any(keep_sample(s.name) for s in parse_prometheus_text(body.decode("utf-8", "replace")))
    except TailscopeError:
        return False


class Scraper:
    """Scrapes ``url`` every ``interval_s`` and hands the engine samples to ``sink``.

    A failed scrape is counted, never fatal: the run goes on.
    """

    def __init__(
        self,
        transport: Transport,
        url: str,
        sink: Callable[[list[ServerSample]], None],
        clock: Clock,
        t0_ns: int,
        *,
        interval_s: float = 1.0,
    ) -> None:
        self.transport = transport
        self.url = url
        self.sink = sink
        self.clock = clock
        self.t0_ns = t0_ns
        self.interval_s = interval_s
        self.scrapes = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def scrape_once(self) -> None:
        t = self.clock.now_ns() - self.t0_ns
        try:
            status, _, body = await self.transport.get(self.url, 2.0)
            if status != 200:
                raise TailscopeError(f"HTTP {status}")
            parsed = parse_prometheus_text(body.decode("utf-8", "replace"), source=self.url)
        except Exception:
            self.failures += 1
            return
        self.scrapes += 1
        self.sink(
            [ServerSample(t_ns=t, name=s.name, value=s.value, labels=s.labels) for s in parsed if keep_sample(s.name)]
        )

    async def _loop(self) -> None:
        while True:
            await self.scrape_once()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop the loop and take one final scrape (so counter deltas cover the whole run)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.scrape_once()
