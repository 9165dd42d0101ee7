"""One bench run end to end: target → preflight → load → records in the store → summary.

This is the library behind ``tailscope bench``; the CLI only resolves flags into a
:class:`~tailscope.runner.bench_config.BenchConfig` and renders. The config, the target and the result each have
their own module (``bench_config.py``, ``target.py``, ``bench_result.py``); the distributed run
(``runner/workers/driver.py``) shares them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tailscope import __version__
from tailscope.client.otlp import ClientSpanExporter
from tailscope.clock import Clock, MonotonicClock, unix_offset_ns, utc_now_iso
from tailscope.io.tokenizer import load_tokenizer
from tailscope.records import RequestRecord, Run, RunKind, RunStatus, ServerSample, Target
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.gc_window import freeze_setup, thaw
from tailscope.runner.loadgen import LoadGenerator
from tailscope.runner.mixed import MixedTraffic
from tailscope.runner.persist import RunPersistence
from tailscope.runner.progress import Progress
from tailscope.runner.target import PREOPEN_CAP, TargetSession, open_target, preopen_count, preopen_transport, warm_path
from tailscope.runner.telemetry import RunScrapes
from tailscope.signals import install_signal_handlers
from tailscope.workload.prompts import PromptSynthesizer
from tailscope.workload.spec import RequestSpec

if TYPE_CHECKING:
    from tailscope.runner.bench_result import BenchResult
    from tailscope.store.runs import RunStore


def new_run_id() -> str:
    """Sortable, unique run id: ``YYYYmmdd-HHMMSS-xxxxxx``."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def host_facts() -> dict[str, Any]:
    """Facts about the load-generating machine, stored with the run (no hostnames, no secrets)."""
    return {
        "os": platform.system(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }


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


class RunSinks:
    """Where a run's records and server samples go as they come: kept in memory (records only when ``retain``),
    handed to the store's writer, and to the client-span exporter when the run has one."""

    __slots__ = ("records", "retain", "samples", "spans", "writer")

    def __init__(self, writer: RunPersistence, spans: ClientSpanExporter | None, *, retain: bool = True) -> None:
        self.writer = writer
        self.spans = spans
        self.retain = retain
        self.records: list[RequestRecord] = []
        self.samples: list[ServerSample] = []

    def record(self, r: RequestRecord) -> None:
        if self.retain:
            self.records.append(r)
        self.writer.add(r)
        if self.spans is not None:
            self.spans.add(r)

    def record_batch(self, batch: list[RequestRecord]) -> None:
        for r in batch:
            self.record(r)

    def sample_batch(self, batch: list[ServerSample]) -> None:
        self.samples.extend(batch)
        self.writer.add_samples(batch)


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
        retain = not (cfg.stream_records and store is not None)
        sinks = RunSinks(writer, client_spans(cfg, ts.target), retain=retain)
        records, samples, spans = sinks.records, sinks.samples, sinks.spans

        count_tokens = synth.counter()
        opts = cfg.client_options(ts.target.model)
        gen = LoadGenerator(
            transport,
            opts,
            cfg.timeouts,
            synth,
            sinks.record,
            clock,
            count_tokens=count_tokens,
            progress=progress,
        )
        restore_signals = install_signal_handlers(gen.interrupt, enabled=cfg.handle_signals)
        scrapes = RunScrapes(
            transport, metrics_url, cfg.telemetry_urls, sinks.sample_batch, clock, interval_s=cfg.scrape_interval_s
        )
        # no thundering herd: the first wave finds its connections open (connects are not server latency)
        preopened = await preopen_transport(transport, preopen_count(cfg), warm_path=warm_path(cfg))
        gen.prepare(specs, min(cfg.dispatch.concurrency or preopen_count(cfg), PREOPEN_CAP))  # the first wave
        t0 = clock.now_ns()
        t0_unix_ns = t0 + unix_offset_ns(clock)  # lines record times up with span timestamps (trace join's skew check)
        if spans is not None:
            spans.t0_unix_ns = t0_unix_ns
            spans.sender.start()
        mixed = MixedTraffic(
            cfg.mixed_traffic, clock=clock, t0_ns=t0, duration_s=cfg.dispatch.duration_s, seed=cfg.seed
        )
        frozen = freeze_setup()  # no collection pass over the set-up while tokens arrive (runner/gc_window.py)
        try:
            scrapes.start(t0)
            cpu0 = time.process_time()
            try:
                dispatch = await gen.run(specs, cfg.dispatch, t0_ns=t0)
            except BaseException:
                await mixed.cancel()
                raise
            cpu_s = time.process_time() - cpu0
            mixed_summary = await mixed.finish()
        finally:
            await scrapes.stop()
            if spans is not None:
                await spans.sender.stop()  # what is still pending goes now (after the load: no effect on timings)
            restore_signals()
            writer.close()
            thaw(frozen)
        if not retain and store is not None:
            records = store.load_records(run.id)
        # a store that could not keep every record holds an incomplete run, whatever the load did
        status = RunStatus.INCOMPLETE if dispatch.interrupted or writer.store_error else RunStatus.COMPLETE
        from tailscope.runner.bench_result import finish_bench  # numpy and the summaries: after the run

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
            extra_summary=_extra_summary(
                cfg,
                records,
                t0_unix_ns,
                mixed_summary,
                preopened,
                spans,
                gen,
                getattr(transport, "arrival_stamps", None),
                getattr(transport, "read_batching", None),
            ),
            scrapes=scrapes,
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


def client_spans(cfg: BenchConfig, target: Target) -> ClientSpanExporter | None:
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
    arrival_stamps: dict[str, int] | None = None,
    read_batching: dict[str, int] | None = None,
) -> dict[str, Any] | None:
    """Summary keys beyond RunSummary: mixed traffic, session-level metrics (sessions, trace → load), the trace
    context (traced count, the run start's Unix time in ns, client spans) and the connections opened before the
    first send, with kernel arrival stamps how many reads took which stamp, and which hot loop ran (compiled or
    python)."""
    from tailscope.client.hot import hot_loop

    extra: dict[str, Any] = {"client": {"hot_loop": hot_loop()}}
    if preopened:
        extra["client"].update(preopened_connections=preopened, warmed=warm_path(cfg) is not None)
    if arrival_stamps is not None:
        extra["client"]["arrival_stamps"] = arrival_stamps
    if read_batching is not None:
        extra["client"]["read_batching"] = read_batching
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
