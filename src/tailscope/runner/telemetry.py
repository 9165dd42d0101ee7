"""Scraping the target's Prometheus /metrics while a run goes — and host/GPU exporters (DCGM, node exporter) beside
it, on the same clock, so their samples line up with the run's requests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from tailscope.client.prometheus import parse_prometheus_text
from tailscope.client.rawhttp import RawHttpTransport
from tailscope.client.transport import Transport
from tailscope.clock import Clock
from tailscope.errors import TailscopeError
from tailscope.metrics import request as rq
from tailscope.metrics.gpu import keep_telemetry, summarize_gpu
from tailscope.metrics.server import keep_sample
from tailscope.records import RequestRecord, ServerSample


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


def _join_labels(prefix: str, labels: str) -> str:
    return f"{prefix},{labels}" if prefix and labels else prefix or labels


@dataclass(eq=False, slots=True)
class Scraper:
    """Scrapes ``url`` every ``interval_s`` and hands the engine samples to ``sink``.

    A failed scrape is counted, never fatal: the run goes on.
    """

    transport: Transport
    url: str
    sink: Callable[[list[ServerSample]], None]
    clock: Clock
    t0_ns: int
    _: KW_ONLY
    interval_s: float = 1.0
    timeout_s: float = 5.0
    keep: Callable[[str], bool] = keep_sample
    what: str = "the server's queue, running and KV figures"
    instance: str | None = None
    scrapes: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

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
        prefix = f'instance="{self.instance}"' if self.instance else ""
        self.sink(
            [
                ServerSample(t_ns=t, name=s.name, value=s.value, labels=_join_labels(prefix, s.labels))
                for s in parsed
                if self.keep(s.name)
            ]
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
            f"{self.failures} of {total} scrapes of {self.url} failed (timeout {self.timeout_s:g} s or error): "
            f"{self.what} rest on the scrapes that answered and can miss a peak",
        )

    async def stop(self) -> None:
        """Stop the loop and take one final scrape (so counter deltas cover the whole run)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.scrape_once()


class TelemetryScrapers:
    """Scrapers of host/GPU exporters (``bench --telemetry-url``), one per URL, each on its own connection (the
    target's API key is never sent to an exporter). Their samples join the engine's in the run, on the run's clock.
    """

    def __init__(
        self,
        urls: Sequence[str],
        sink: Callable[[list[ServerSample]], None],
        clock: Clock,
        *,
        interval_s: float = 1.0,
    ) -> None:
        self.urls = tuple(urls)
        self.sink = sink
        self.clock = clock
        self.interval_s = interval_s
        self.scrapers: list[Scraper] = []

    def start(self, t0_ns: int) -> None:
        for url in self.urls:
            u = urlsplit(url)
            transport = RawHttpTransport(f"{u.scheme}://{u.netloc}", connect_timeout_s=5.0)
            path = u.path + (f"?{u.query}" if u.query else "") or "/metrics"
            scraper = Scraper(
                transport,
                path,
                self.sink,
                self.clock,
                t0_ns,
                interval_s=self.interval_s,
                keep=keep_telemetry,
                what="the GPU and host figures (summary.gpu)",
                instance=u.netloc,  # two exporters' GPU "0" are two GPUs
            )
            scraper.url = url
            scraper.start()
            self.scrapers.append(scraper)

    async def stop(self) -> None:
        for scraper in self.scrapers:
            await scraper.stop()
            await scraper.transport.close()

    def warnings(self) -> tuple[str, ...]:
        out: list[str] = []
        for scraper in self.scrapers:
            out.extend(scraper.warnings())
            if scraper.scrapes == 0:
                out.append(f"telemetry {scraper.url} never answered: summary.gpu has nothing from it")
        return tuple(out)

    def summary(self, records: Sequence[RequestRecord], samples: Sequence[ServerSample]) -> dict[str, Any]:
        """``{"gpu": {...}}`` for the run's summary (empty when no exporter was given)."""
        if not self.scrapers:
            return {}
        tokens = sum(rq.output_token_count(r) or 0 for r in records if r.ok)
        gpu = summarize_gpu([s for s in samples if keep_telemetry(s.name)], output_tokens=tokens or None)
        gpu["scrapes"] = {s.url: s.outcome() for s in self.scrapers}
        return {"gpu": gpu}


class RunScrapes:
    """What a run scrapes on the server side while its load goes: the engine's ``/metrics`` (when the target serves
    one) and the ``--telemetry-url`` exporters, every sample to ``sink`` on the run's clock.

    Args:
        transport: the target's transport (the engine's scrapes share its connections).
        metrics_url: the engine's metrics path, or ``None`` when the target has none.
        telemetry_urls: host/GPU exporters (see :class:`TelemetryScrapers`).
        interval_s: the time between two scrapes of one source.
    """

    def __init__(
        self,
        transport: Transport,
        metrics_url: str | None,
        telemetry_urls: Sequence[str],
        sink: Callable[[list[ServerSample]], None],
        clock: Clock,
        *,
        interval_s: float = 1.0,
    ) -> None:
        # the engine's scraper, made at the start (it counts its sample times from the run's start)
        self._engine_from = (
            partial(Scraper, transport, metrics_url, sink, clock, interval_s=interval_s) if metrics_url else None
        )
        self.engine: Scraper | None = None
        self.telemetry = TelemetryScrapers(telemetry_urls, sink, clock, interval_s=interval_s)

    def start(self, t0_ns: int) -> None:
        """Start every scrape; their sample times count from ``t0_ns`` (the run's start)."""
        if self._engine_from is not None:
            self.engine = self._engine_from(t0_ns)
            self.engine.start()
        self.telemetry.start(t0_ns)

    async def stop(self) -> None:
        """Stop them (each takes one last scrape); safe when they never started."""
        if self.engine is not None:
            await self.engine.stop()
        await self.telemetry.stop()

    def warnings(self) -> tuple[str, ...]:
        """What went wrong with the scrapes, the engine's first."""
        return (self.engine.warnings() if self.engine is not None else ()) + self.telemetry.warnings()
