"""The reference AI application as a library: start it, drive it, degrade it, break it.

:func:`start_app` resolves the preset, fixes and incidents (every error before anything starts) and returns an
:class:`AppServer`, an async context manager around the running service::

    async with tailscope.start_app(preset="knowledge-assistant", fixes="all", time_scale=0.1,
                                   otlp_endpoint="http://127.0.0.1:4318") as app:
        result = await tailscope.bench_async(url=app.url, concurrency=8, requests=100)

:func:`run_app` serves in the foreground until interrupted or ``duration`` passes (``tailscope app``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tailscope.api._support import Listener, public, serve_until_stopped, sync_twin
from tailscope.errors import ConfigError

if TYPE_CHECKING:
    from tailscope.app.server import ReferenceApp

FixSpec = str | Sequence[str]


@dataclass(frozen=True, slots=True)
class AppStats:
    """What a served application did: requests, fallbacks and failed requests, and where it listened."""

    url: str
    requests: int
    fallbacks: int
    errors: int


class AppServer(Listener):
    """A reference application, started by ``async with`` (or :meth:`start`) and stopped on exit.

    Attributes:
        preset: the resolved preset (fixes and incidents applied).
        url: ``http://HOST:PORT`` once started (give it to ``bench`` as ``url=``).
    """

    def __init__(self, app: ReferenceApp) -> None:
        self._app = app
        self.preset = app.preset
        self.url = ""

    async def start(self) -> str:
        """Start the engines, the database and the HTTP service; returns :attr:`url`.

        Raises:
            TargetError: the port is taken or an engine cannot start.
        """
        self.url = await self._app.start()
        return self.url

    async def stop(self) -> None:
        """Stop serving, export the remaining spans, close the engines and the database."""
        await self._app.stop()

    async def flush_spans(self) -> None:
        """Export the spans buffered so far (before reading them from a collector)."""
        await self._app.flush_spans()

    def degrade(self, level: int) -> None:
        """Degradation level: 0 normal, 1 no retrieval, 2 FAQ search only and no agent, 3 a static answer.

        Raises:
            ConfigError: a level outside 0–3.
        """
        if level not in (0, 1, 2, 3):
            raise ConfigError(f"degradation level must be 0, 1, 2 or 3 (got {level!r})")
        self._app.pipeline.state.degrade = level

    def set_fault(self, name: str, on: bool = True) -> None:
        """Switch a drill fault: ``llm-down``, ``llm-slow``, ``retrieval-down`` or ``db-slow``.

        Raises:
            ConfigError: an unknown fault.
        """
        from tailscope.app.pipeline import FAULTS

        if name not in FAULTS:
            raise ConfigError(f"fault {name!r}: use one of {', '.join(FAULTS)}")
        faults = self._app.pipeline.state.faults
        if on:
            faults.add(name)
        else:
            faults.discard(name)

    @property
    def stats(self) -> AppStats:
        s = self._app.pipeline.state
        return AppStats(self.url, s.requests, s.fallbacks, s.errors)


@public
def start_app(
    *,
    preset: str | Path = "knowledge-assistant",
    fixes: FixSpec = (),
    incidents: FixSpec = (),
    host: str = "127.0.0.1",
    port: int = 0,
    time_scale: float = 1.0,
    llm_url: str | None = None,
    otlp_endpoint: str | None = None,
    seed: int = 0,
    fallback: bool = True,
) -> AppServer:
    """The reference application, ready to start (``async with start_app(...) as app``).

    Args:
        preset: a shipped preset's name (``knowledge-assistant``) or a preset YAML file.
        fixes: fixes to apply: ``"all"``, ``"async-auth,parallel-retrieval"`` or a list (see ``docs/app.md``).
        incidents: incidents to switch on (``pool-exhaustion``, ``sync-audit``, ``slow-dns``, ``no-reuse``,
            ``sse-buffering``).
        host / port: where to listen (port 0: a free one).
        time_scale: every modelled cost runs this many times as long (0.1: ten times faster).
        llm_url: an OpenAI-compatible server for the model calls (default: the built-in engines, in process).
        otlp_endpoint: OTLP/HTTP collector for the spans (e.g. ``tailscope trace collect``'s); None: no spans.
        seed: seed of the per-request cost draws.
        fallback: answer from the FAQ or a static text when the model fails (else the request fails with 502).

    Raises:
        ConfigError: an unknown preset, fix or incident, a bad preset file (``file:line: field …``), a bad
            ``time_scale``, or ``otlp_endpoint`` without the OpenTelemetry SDK installed.
    """
    from tailscope.app.options import AppOptions
    from tailscope.app.presets import resolve_preset
    from tailscope.app.server import ReferenceApp

    resolved = resolve_preset(preset, fixes=fixes, incidents=incidents)
    options = AppOptions(
        host=host,
        port=port,
        time_scale=time_scale,
        llm_url=llm_url,
        otlp_endpoint=otlp_endpoint,
        seed=seed,
        fallback=fallback,
    )
    return AppServer(ReferenceApp(resolved, options))


@public
async def run_app_async(
    *,
    preset: str | Path = "knowledge-assistant",
    fixes: FixSpec = (),
    incidents: FixSpec = (),
    host: str = "127.0.0.1",
    port: int = 8080,
    time_scale: float = 1.0,
    llm_url: str | None = None,
    otlp_endpoint: str | None = None,
    seed: int = 0,
    fallback: bool = True,
    duration: float | None = None,
    handle_signals: bool = False,
    on_ready: Callable[[AppServer], None] | None = None,
) -> AppStats:
    """Serve the reference application until ``duration`` seconds pass, or (``handle_signals``) SIGINT/SIGTERM,
    or the task is cancelled. Arguments as :func:`start_app`; ``on_ready`` is called once it listens."""
    server = start_app(
        preset=preset,
        fixes=fixes,
        incidents=incidents,
        host=host,
        port=port,
        time_scale=time_scale,
        llm_url=llm_url,
        otlp_endpoint=otlp_endpoint,
        seed=seed,
        fallback=fallback,
    )
    await serve_until_stopped(server, duration=duration, handle_signals=handle_signals, on_ready=on_ready)
    return server.stats


run_app = sync_twin(run_app_async)
