"""One bench run end to end: target → preflight → load → records in the store → summary.

This is the library behind ``tailscope bench``; the CLI only resolves flags into a :class:`BenchConfig` and renders.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tailscope import __version__
from tailscope.client.openai import ClientOptions, Timeouts, build_body, extension_flags, without_extensions
from tailscope.client.otlp import ClientSpanExporter
from tailscope.client.rawhttp import RawHttpTransport
from tailscope.client.transport import AioHttpTransport, Transport
from tailscope.clock import Clock, MonotonicClock, utc_now_iso
from tailscope.errors import ConfigError
from tailscope.io.tokenizer import load_tokenizer
from tailscope.metrics.document import build_export, run_to_json
from tailscope.metrics.percentiles import Stats
from tailscope.metrics.saturation import saturation_check
from tailscope.metrics.server import summarize_server
from tailscope.metrics.slo import Slo
from tailscope.metrics.summary import RunSummary, summarize
from tailscope.metrics.verdict import DEFAULT_MAX_ERROR_RATE, Verdict, run_verdict
from tailscope.records import RequestRecord, Run, RunKind, RunStatus, ServerSample, Target
from tailscope.runner.loadgen import DispatchConfig, LoadGenerator
from tailscope.runner.mixed import MixedTraffic
from tailscope.runner.persist import RunPersistence
from tailscope.runner.preflight import (
    ACCEPTS_EXTENSIONS,
    LengthBound,
    check_context,
    check_reachable,
    preflight,
    preflight_template,
    probe_dialect,
)
from tailscope.runner.progress import Progress
from tailscope.runner.telemetry import Scraper, TelemetryScrapers, probe_metrics
from tailscope.workload.profile import MixedTarget
from tailscope.workload.prompts import PromptSynthesizer
from tailscope.workload.spec import RequestSpec
from tailscope.workload.template import RequestTemplate

if TYPE_CHECKING:
    from tailscope.store.runs import RunStore


#: where the API key is read from unless --api-key-env names another variable
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Everything a bench run needs, resolved (CLI > file > env > defaults) before the run starts.

    Attributes:
        url: target API root; ``None`` = start the built-in simulated engine.
        metrics_url: ``"auto"`` (probe ``<url>/metrics``), an explicit URL, or ``None`` (off).
        settings: the user-facing settings, stored with the run (never secrets).
    """

    url: str | None
    model: str | None
    endpoint: str = "chat"
    api_key_env: str = DEFAULT_API_KEY_ENV
    ignore_eos: bool = True
    continuous_usage: bool = True
    timeouts: Timeouts = field(default_factory=Timeouts)
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)
    requested_rate: float | None = None
    seed: int = 0
    slos: tuple[Slo, ...] = ()
    tokenizer: str | None = None
    prompt_nonce: int | None = None  # fresh prompt text per run (cold caches); None = text from the seed alone
    metrics_url: str | None = "auto"
    telemetry_urls: tuple[str, ...] = ()  # DCGM / node exporters scraped beside the engine (summary.gpu)
    scrape_interval_s: float = 1.0
    flush_interval_s: float = 1.0
    settings: dict[str, Any] = field(default_factory=dict)
    profile_name: str | None = None
    builtin_model: str = "llama-3.1-8b"
    builtin_gpu: str = "h100-sxm"
    sweep_id: str | None = None
    probe: str | None = None  # what this run probes for (calibrate, find-max, twin-check): tagged, never ``latest``
    handle_signals: bool = False
    mixed_traffic: tuple[MixedTarget, ...] = ()  # plain HTTP sent beside the LLM load (profile mixed_traffic)
    # steady stages (start_s, end_s) tested for over-saturation; None = one window when the run is open loop at one
    # constant rate (requested_rate set), () = no test
    saturation_windows: tuple[tuple[float, float], ...] | None = None
    http_client: str = "raw"  # raw (lean asyncio HTTP/1.1, stamps at the socket) | aiohttp
    lengths: tuple[LengthBound, ...] = ()  # the workload's length distributions, checked against the served context
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body
    class_extra_body: dict[str, dict[str, Any]] = field(default_factory=dict)  # per class, over extra_body
    headers: tuple[tuple[str, str], ...] = ()  # extra request headers (values never stored)
    template: RequestTemplate | None = None  # a non-OpenAI API (None: OpenAI-compatible)
    stream_options: bool = True  # send stream_options (usage in the stream)
    probe_dialect: bool = True  # probe which extensions a (non-built-in) server accepts before the run
    trace_ratio: float = 0.0  # share of requests sent with a W3C traceparent (ids precomputed in the request stream)
    tracestate: str | None = None  # W3C tracestate sent beside traceparent
    # client (issue 20): connections opened before the first send (None = auto, 0 = off); warmed with a GET of
    # /v1/models each when warm_connections
    preopen_connections: int | None = None
    warm_connections: bool = False
    # records only go to the store while the run goes (long runs, soaks); the summary reads them back at the end
    stream_records: bool = False
    otlp_endpoint: str | None = None  # where one CLIENT span per traced request goes (OTLP/HTTP)
    otlp_protocol: str = "protobuf"  # protobuf | json

    def without(self, refused: frozenset[str]) -> BenchConfig:
        """This config with the extensions the server refused turned off."""
        return replace(self, **extension_flags(self, refused)) if refused else self

    def client_options(self, model: str) -> ClientOptions:
        """How this run's requests are shaped, for ``model``."""
        return ClientOptions(
            endpoint=self.endpoint,
            model=model,
            ignore_eos=self.ignore_eos,
            continuous_usage=self.continuous_usage,
            stream_options=self.stream_options,
            extra_body=self.extra_body,
            headers=self.headers,
            template=self.template,
            class_extra_body=self.class_extra_body,
            tracestate=self.tracestate,
        )


@dataclass(frozen=True, slots=True)
class BenchResult:
    """A finished (or interrupted) run."""

    run: Run
    status: RunStatus
    summary: RunSummary
    server: dict[str, Any]
    records: list[RequestRecord]
    signal_name: str | None
    store_path: str | None
    t0_ns: int = 0  # the run start on the monotonic clock (record times are relative to it)
    extra: dict[str, Any] = field(default_factory=dict)  # summary keys beyond RunSummary (e.g. ``mixed``)
    samples: list[ServerSample] = field(default_factory=list)  # the scraped server telemetry
    store_error: str | None = None  # the store could not keep every record (disk full, …): what and what to do

    @property
    def exit_code(self) -> int:
        """0; 130 (SIGINT) / 143 (SIGTERM) for an interrupted run; 1 when the store could not keep every record."""
        if self.signal_name == "SIGTERM":
            return 143
        if self.signal_name:
            return 130
        if self.store_error:
            return 1
        return 0

    def verdict(self, *, max_error_rate: float = DEFAULT_MAX_ERROR_RATE) -> Verdict:
        """Whether the run met its SLOs with few enough failures (what ``tailscope bench`` exits on)."""
        return run_verdict(self.summary, max_error_rate=max_error_rate)

    def summary_dict(self) -> dict[str, Any]:
        """The ``summary`` object of the export and of the store: the summary, the server's telemetry and extras."""
        doc = self.summary.to_dict()
        doc["server"] = self.server
        doc.update(self.extra)
        return doc

    def brief(self) -> dict[str, Any]:
        """``run`` and ``summary`` of the export document, without the requests (one run of a sweep or a repeat)."""
        return {"run": run_to_json(self.run), "summary": self.summary_dict()}

    def to_dict(self) -> dict[str, Any]:
        """The export document (``run``, ``summary``, ``requests``), as ``tailscope bench --json`` writes it."""
        return build_export(self.run, self.summary_dict(), self.records)

    def to_json(self, *, indent: int | None = 1) -> str:
        """The export document as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)


def new_run_id() -> str:
    """Sortable, unique run id: ``YYYYmmdd-HHMMSS-xxxxxx``."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def _normalize_url(url: str) -> str:
    u = url.strip().rstrip("/")
    if not u.startswith(("http://", "https://")):
        raise ConfigError(f"--url {url!r}: expected http://HOST:PORT or https://…")
    from urllib.parse import urlsplit

    try:  # an unclosed [IPv6 bracket or a port out of range raised ValueError on the first request
        parts = urlsplit(u)
        _ = parts.port
    except ValueError as exc:
        raise ConfigError(f"--url {url!r}: {exc}; expected http://HOST:PORT or https://…") from None
    if not parts.hostname:
        raise ConfigError(f"--url {url!r}: no host; expected http://HOST:PORT or https://…")
    if u.endswith("/v1"):
        u = u[:-3]
    return u


def host_facts() -> dict[str, Any]:
    """Facts about the load-generating machine, stored with the run (no hostnames, no secrets)."""
    return {
        "os": platform.system(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }


def make_transport(kind: str, base_url: str, **kw: Any) -> Transport:
    """The HTTP transport by name: ``raw`` (default) or ``aiohttp``."""
    if kind == "raw":
        return RawHttpTransport(base_url, **kw)
    if kind == "aiohttp":
        return AioHttpTransport(base_url, **kw)
    raise ConfigError(f"--http-client {kind!r}: use raw or aiohttp")


#: at most this many connections are opened before the load starts (auto and explicit alike)
PREOPEN_CAP = 1024
#: open loop, auto: connections for this many seconds of arrivals at the requested rate
PREOPEN_OPEN_LOOP_S = 2.0


def preopen_count(cfg: BenchConfig, share: int | None = None) -> int:
    """How many connections to open before the first send: ``cfg.preopen_connections`` when given, else the closed
    loop's concurrency (``share``: a worker's slots), else ~2 s of arrivals at the requested rate; capped."""
    if cfg.preopen_connections is not None:
        n = cfg.preopen_connections
    elif share is not None:
        n = share
    elif cfg.dispatch.concurrency:
        n = cfg.dispatch.concurrency
    elif cfg.requested_rate:
        n = int(cfg.requested_rate * PREOPEN_OPEN_LOOP_S + 0.999)
    else:
        n = 0
    return max(0, min(n, PREOPEN_CAP))


async def preopen_transport(transport: Transport, n: int, *, warm_path: str | None) -> int:
    """Open (and warm) ``n`` pooled connections when the transport can (the raw one); returns how many are idle."""
    pre = getattr(transport, "preopen", None)
    if pre is None or n <= 0:
        return 0
    return int(await pre(n, warm_path=warm_path))


def warm_path(cfg: BenchConfig) -> str | None:
    """The GET that warms a pre-opened connection (``--warm-connections``), or None."""
    return "/v1/models" if cfg.warm_connections and cfg.template is None else None


def _auth_header(env_name: str) -> str | None:
    key = os.environ.get(env_name)
    return f"Bearer {key}" if key else None


@dataclass(slots=True)
class TargetSession:
    """A reachable, preflighted target: what both the single-process and the distributed run start from."""

    base_url: str
    transport: Transport
    target: Target
    metrics_url: str | None
    warnings: tuple[str, ...] = ()  # what preflight found worth saying in the run's summary
    refused: frozenset[str] = frozenset()  # API extensions the server refused (sent without them)


async def open_target(
    cfg: BenchConfig, stack: AsyncExitStack, on_target: Callable[[Target], None] | None = None
) -> TargetSession:
    """Start the built-in engine (no ``cfg.url``) or normalize the URL; open a transport, preflight, probe /metrics.

    Everything opened is closed by ``stack``.
    """
    builtin = cfg.url is None
    description = ""
    if builtin:
        from tailscope.serve.embedded import start_embedded_server

        embedded = await stack.enter_async_context(start_embedded_server(model=cfg.builtin_model, gpu=cfg.builtin_gpu))
        base_url, description = embedded.base_url, embedded.description
    else:
        assert cfg.url is not None
        base_url = _normalize_url(cfg.url)
    max_conn = cfg.dispatch.concurrency or cfg.dispatch.max_in_flight or 0
    transport = make_transport(
        cfg.http_client,
        base_url,
        max_connections=max_conn,
        connect_timeout_s=cfg.timeouts.connect_s,
        auth_header=_auth_header(cfg.api_key_env),
    )
    stack.push_async_callback(transport.close)
    if cfg.template is not None:
        info = await preflight_template(base_url, cfg.model)
    else:
        info = await preflight(transport, base_url, cfg.model, api_key_env=cfg.api_key_env)
    warnings = check_context(cfg.lengths, info.max_model_len, info.model)
    if cfg.api_key_env != DEFAULT_API_KEY_ENV and not os.environ.get(cfg.api_key_env):
        # the user named a variable on purpose: an unset one is a typo or a missing export, not "no key needed"
        warnings = (
            *warnings,
            f"--api-key-env {cfg.api_key_env}: that variable is not set (or empty); requests carry no API key",
        )
    refused: frozenset[str] = frozenset()
    if not builtin and cfg.template is None and cfg.probe_dialect and info.owned_by not in ACCEPTS_EXTENSIONS:
        probe = cfg.client_options(info.model)

        def body_for(dropped: frozenset[str]) -> bytes:
            return build_body(without_extensions(probe, dropped), "Say hi.", 1)

        refused, said = await probe_dialect(transport, probe.path, body_for)
        warnings = (*warnings, *said)
    for mixed in cfg.mixed_traffic:
        await check_reachable(mixed.name, mixed.url)
    target = Target(url=base_url, model=info.model, endpoint=cfg.endpoint, builtin=builtin, description=description)
    if on_target is not None:
        on_target(target)
    metrics_url = cfg.metrics_url
    if metrics_url == "auto":
        metrics_url = base_url + "/metrics" if await probe_metrics(transport, base_url + "/metrics") else None
    return TargetSession(
        base_url=base_url,
        transport=transport,
        target=target,
        metrics_url=metrics_url,
        warnings=warnings,
        refused=refused,
    )


def new_run(cfg: BenchConfig, ts: TargetSession, **settings: Any) -> Run:
    """The run row for a bench against ``ts`` (``settings`` are added to the stored settings)."""
    return Run(
        id=new_run_id(),
        kind=RunKind.BENCH,
        tool_version=__version__,
        started_at=utc_now_iso(),
        target=ts.target,
        seed=cfg.seed,
        settings={
            **cfg.settings,
            "metrics_url": ts.metrics_url,
            **({"server_refused": sorted(ts.refused)} if ts.refused else {}),
            **settings,
        },
        profile=cfg.profile_name,
        sweep_id=cfg.sweep_id,
        host=host_facts(),
        probe=cfg.probe,
    )


def finish_bench(
    cfg: BenchConfig,
    store: RunPersistence,
    run: Run,
    *,
    status: RunStatus,
    records: list[RequestRecord],
    samples: list[ServerSample],
    loop_lag_ms: Stats,
    signal_name: str | None,
    t0_ns: int,
    extra_warnings: tuple[str, ...] = (),
    extra_summary: dict[str, Any] | None = None,
    scraper: Scraper | None = None,
    telemetry: TelemetryScrapers | None = None,
    workers_hint: int | None = None,
) -> BenchResult:
    """Summarize the records, finish the run in the store and build the result.

    A store that cannot be written at the end (disk full) does not lose the result: it is returned with
    ``store_error`` set (what the store could not keep), and a run left ``running`` is marked incomplete by the next
    ``runs list``.
    """
    summary = summarize(
        records,
        slos=cfg.slos,
        requested_rate_rps=cfg.requested_rate,
        loop_lag_ms=loop_lag_ms,
        max_in_flight=cfg.dispatch.max_in_flight,
    )
    extra_warnings = (
        extra_warnings
        + store.warnings
        + (scraper.warnings() if scraper is not None else ())
        + (telemetry.warnings() if telemetry is not None else ())
        + saturation_check(
            records,
            cfg.saturation_windows,
            open_loop=cfg.dispatch.concurrency is None,
            constant_rate=cfg.requested_rate is not None,
            samples=samples,
            cap=cfg.dispatch.max_in_flight,
        )
    )
    if extra_warnings:
        summary = replace(summary, warnings=summary.warnings + extra_warnings)
    if workers_hint is not None and workers_hint > 1:
        said = (
            f" At this run's measured cost per token event, about {workers_hint} load processes would keep each "
            f"under half a core: --workers {workers_hint} (or --workers auto)."
        )
        summary = replace(
            summary,
            warnings=tuple(w + said if w.startswith("CLIENT BOTTLENECK") else w for w in summary.warnings),
        )
    result = BenchResult(
        run=replace(run, status=status),
        status=status,
        summary=summary,
        server={**summarize_server(samples), "scrapes": scraper.outcome()} if scraper else summarize_server(samples),
        records=records,
        signal_name=signal_name,
        store_path=store.path,
        t0_ns=t0_ns,
        extra={**(extra_summary or {}), **(telemetry.summary(records, samples) if telemetry is not None else {})},
        samples=samples,
    )
    store.finish(run.id, status, result.summary_dict())
    return replace(result, store_error=store.store_error) if store.store_error else result


def install_signal_handlers(on_signal: Callable[[str], None], *, enabled: bool) -> Callable[[], None]:
    """Route SIGINT and SIGTERM to ``on_signal(name)`` on the running loop (when ``enabled`` and the platform allows).

    Returns:
        The function that removes the handlers again.
    """
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if enabled:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal, sig.name)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def restore() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return restore


async def run_bench(
    cfg: BenchConfig,
    specs: Iterator[RequestSpec],
    *,
    store: RunStore | None = None,
    progress: Progress | None = None,
    on_target: Callable[[Target], None] | None = None,
    clock: Clock | None = None,
) -> BenchResult:
    """Run one bench: preflight, dispatch, persist incrementally (when given a store), summarize.

    Args:
        specs: the request stream (from flags or a profile).
        store: where the run and its records go; None keeps them in memory only.
        progress: counters for a live display.
        on_target: called once the target is known (e.g. to print that it is the built-in engine).
    """
    clock = clock or MonotonicClock()
    progress = progress or Progress()
    # a bad --tokenizer is refused before the target is contacted and before the store holds a run (it was refused
    # after writer.begin: a run left 'running' with a live writer thread in a long-lived process — found by fuzz_cli)
    synth = PromptSynthesizer(load_tokenizer(cfg.tokenizer) if cfg.tokenizer else None, nonce=cfg.prompt_nonce)
    writer = RunPersistence(store, flush_interval_s=cfg.flush_interval_s, check_now=False)
    async with AsyncExitStack() as stack:
        # the store's open and schema check overlap the target's preflight; both finish before any load is sent
        checked = asyncio.create_task(writer.check_async())
        try:
            ts = await open_target(cfg, stack, on_target)
        except BaseException:
            with contextlib.suppress(Exception):  # the preflight's error is the one to show
                await checked
            raise
        await checked  # a bad store path fails here, before any load
        cfg = cfg.without(ts.refused)
        transport, metrics_url = ts.transport, ts.metrics_url
        run = new_run(cfg, ts)
        writer.begin(run)
        # The summary's percentiles are exact, over every request and every token gap, so it needs all records:
        # kept here as they finish — or, with stream_records (a store is required), read back from the store after
        # the run, so that a run of hours holds only what the writer has not flushed yet.
        records: list[RequestRecord] = []
        samples: list[ServerSample] = []
        retain = not (cfg.stream_records and store is not None)
        spans = _client_spans(cfg, ts.target)

        def sink(r: RequestRecord) -> None:
            if retain:
                records.append(r)
            writer.add(r)
            if spans is not None:
                spans.add(r)

        def sample_sink(batch: list[ServerSample]) -> None:
            samples.extend(batch)
            writer.add_samples(batch)

        count_tokens = synth.counter()
        opts = cfg.client_options(ts.target.model)
        gen = LoadGenerator(
            transport,
            opts,
            cfg.timeouts,
            synth,
            sink,
            clock,
            count_tokens=count_tokens,
            progress=progress,
        )
        restore_signals = install_signal_handlers(gen.interrupt, enabled=cfg.handle_signals)
        scraper: Scraper | None = None
        telemetry = TelemetryScrapers(cfg.telemetry_urls, sample_sink, clock, interval_s=cfg.scrape_interval_s)
        # no thundering herd: the first wave finds its connections open (connects are not server latency)
        preopened = await preopen_transport(transport, preopen_count(cfg), warm_path=warm_path(cfg))
        gen.prepare(specs, min(cfg.dispatch.concurrency or preopen_count(cfg), PREOPEN_CAP))  # the first wave
        t0 = clock.now_ns()
        t0_unix_ns = time.time_ns()  # lines record times up with span timestamps (trace join's skew check)
        if spans is not None:
            spans.t0_unix_ns = t0_unix_ns
            spans.sender.start()
        mixed = MixedTraffic(
            cfg.mixed_traffic, clock=clock, t0_ns=t0, duration_s=cfg.dispatch.duration_s, seed=cfg.seed
        )
        try:
            if metrics_url:
                scraper = Scraper(transport, metrics_url, sample_sink, clock, t0, interval_s=cfg.scrape_interval_s)
                scraper.start()
            telemetry.start(t0)
            cpu0 = time.process_time()
            try:
                dispatch = await gen.run(specs, cfg.dispatch, t0_ns=t0)
            except BaseException:
                await mixed.cancel()
                raise
            cpu_s = time.process_time() - cpu0
            mixed_summary = await mixed.finish()
        finally:
            if scraper is not None:
                await scraper.stop()
            await telemetry.stop()
            if spans is not None:
                await spans.sender.stop()  # what is still pending goes now (after the load: no effect on timings)
            restore_signals()
            writer.close()
        if not retain and store is not None:
            records = store.load_records(run.id)
        # a store that could not keep every record holds an incomplete run, whatever the load did
        status = RunStatus.INCOMPLETE if dispatch.interrupted or writer.store_error else RunStatus.COMPLETE
        return finish_bench(
            cfg,
            writer,
            run,
            status=status,
            records=records,
            samples=samples,
            loop_lag_ms=dispatch.loop_lag_ms,
            signal_name=dispatch.signal_name,
            t0_ns=t0,
            extra_warnings=ts.warnings,
            extra_summary=_extra_summary(cfg, records, t0_unix_ns, mixed_summary, preopened, spans, gen),
            scraper=scraper,
            telemetry=telemetry,
            workers_hint=_workers_hint(cfg, records, cpu_s, (clock.now_ns() - t0) / 1e9),
        )


def _workers_hint(cfg: BenchConfig, records: list[RequestRecord], cpu_s: float, wall_s: float) -> int | None:
    """How many load processes this run would have needed: its token-event rate (or the projected one, when the
    client fell behind it) × its own measured CPU per event."""
    events = sum(len(r.chunk_times_ns) for r in records)
    if events == 0 or wall_s <= 0:
        return None
    from tailscope.runner.workers.auto import projected_events_per_s, workers_needed

    eps = max(events / wall_s, projected_events_per_s(cfg) if cfg.requested_rate else 0.0)
    return workers_needed(eps, cpu_s / events * 1e6, cap=1024)


def _client_spans(cfg: BenchConfig, target: Target) -> ClientSpanExporter | None:
    """The exporter of the run's client spans (``--otlp-endpoint``), or None."""
    if cfg.otlp_endpoint is None or cfg.trace_ratio <= 0:
        return None
    operation = "chat" if cfg.endpoint == "chat" else "text_completion"
    return ClientSpanExporter(cfg.otlp_endpoint, model=target.model, operation=operation, protocol=cfg.otlp_protocol)


def _extra_summary(
    cfg: BenchConfig,
    records: list[RequestRecord],
    t0_unix_ns: int,
    mixed: dict[str, Any] | None,
    preopened: int = 0,
    spans: ClientSpanExporter | None = None,
    gen: LoadGenerator | None = None,
) -> dict[str, Any] | None:
    """Summary keys beyond RunSummary: mixed traffic, session-level metrics (sessions, trace → load), the trace
    context (traced count, the run start's Unix time in ns, client spans) and the connections opened before the
    first send."""
    extra: dict[str, Any] = {}
    if preopened:
        extra["client"] = {"preopened_connections": preopened, "warmed": warm_path(cfg) is not None}
    if mixed:
        extra["mixed"] = mixed
    if any(r.session_id is not None for r in records):
        from tailscope.metrics.sessions import session_summary

        planned = (cfg.settings.get("trace_load") or {}).get("planned")
        if planned is None and gen is not None and gen.planned:  # agent sessions: as planned when they started
            planned = gen.planned
        extra["sessions"] = session_summary(records, planned, gen.step_names if gen is not None else None)
    if cfg.trace_ratio > 0:
        extra["trace_context"] = {
            "ratio": cfg.trace_ratio,
            "traced": sum(1 for r in records if r.trace_id is not None),
            "t0_unix_ns": t0_unix_ns,
        }
        if spans is not None:
            extra["trace_context"]["client_spans"] = spans.sender.outcome()
    return extra or None
