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
        timeout_s: float = 5.0,
    ) -> None:
        self.transport = transport
        self.url = url
        self.sink = sink
        self.clock = clock
        self.t0_ns = t0_ns
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.scrapes = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def scrape_once(self) -> None:
        t = self.clock.now_ns() - self.t0_ns
        try:
            status, _, body = await self.transport.get(self.url, self.timeout_s)
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

    def outcome(self) -> dict[str, int]:
        """Scrapes that answered and scrapes that failed (timeout, HTTP error, unreadable body)."""
        return {"ok": self.scrapes, "failed": self.failures}

    def warnings(self) -> tuple[str, ...]:
        """One warning when scrapes failed: the server's figures then rest on fewer samples than the run lasted."""
        if not self.failures:
            return ()
        total = self.scrapes + self.failures
        return (
            f"{self.failures} of {total} scrapes of {self.url} failed (timeout {self.timeout_s:g} s or error): the "
            "server's queue, running and KV figures rest on the scrapes that answered and can miss a peak",
        )

    async def stop(self) -> None:
        """Stop the loop and take one final scrape (so counter deltas cover the whole run)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.scrape_once()
