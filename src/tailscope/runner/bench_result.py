"""A finished bench: :class:`BenchResult`, and the records summarized into it and into the store."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from tailscope.metrics.document import build_export, run_to_json
from tailscope.metrics.percentiles import Stats
from tailscope.metrics.saturation import saturation_check
from tailscope.metrics.server import summarize_server
from tailscope.metrics.summary import RunSummary, summarize
from tailscope.metrics.verdict import DEFAULT_MAX_ERROR_RATE, Verdict, run_verdict
from tailscope.records import RequestRecord, Run, RunStatus, ServerSample
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.persist import RunPersistence
from tailscope.runner.telemetry import RunScrapes


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
    scrapes: RunScrapes | None = None,
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
        + (scrapes.warnings() if scrapes is not None else ())
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
    engine = scrapes.engine if scrapes is not None else None
    result = BenchResult(
        run=replace(run, status=status),
        status=status,
        summary=summary,
        server=summarize_server(samples) | ({"scrapes": engine.outcome()} if engine is not None else {}),
        records=records,
        signal_name=signal_name,
        store_path=store.path,
        t0_ns=t0_ns,
        extra={**(extra_summary or {}), **(scrapes.telemetry.summary(records, samples) if scrapes is not None else {})},
        samples=samples,
    )
    store.finish(run.id, status, result.summary_dict())
    return replace(result, store_error=store.store_error) if store.store_error else result
