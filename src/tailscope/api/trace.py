"""Locate: trace sets — ingest, collect, analyze (a set or a file, no store needed), show one trace, diff two sets.

Analyses answer where the time of slow traces goes: critical paths, P99 by layer, operations, waterfalls of calls
that could run together, retries; ``join_traces`` joins a bench run's requests with a set by trace id and takes each
client-seen latency apart. ``ingest_traces`` and ``collect_traces`` write the store they are given; every
other function only reads (a set in ``store``, or a trace file parsed in memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailscope.api._support import StorePath, default_store, open_store, public, sync_twin
from tailscope.errors import ConfigError, TraceFormatError
from tailscope.io.layer_rules import load_layer_rules
from tailscope.store.runs import RunStore
from tailscope.store.spans import SpanStore, TraceSet
from tailscope.trace.analysis import analyze_facts
from tailscope.trace.critical_path import POLICIES, CriticalPath, critical_path
from tailscope.trace.diff import diff_sets
from tailscope.trace.facts import TraceFacts, span_layers, trace_facts
from tailscope.trace.ingest.files import FORMATS, iter_file
from tailscope.trace.ingest.sets import IngestReport, ingest_paths, set_facts
from tailscope.trace.join import JoinSummary, join_records
from tailscope.trace.tree import TraceTree, build_tree

PathLike = str | os.PathLike[str]


def _spans(store: StorePath | SpanStore | None) -> SpanStore:
    return store if isinstance(store, SpanStore) else SpanStore(store)


def _check_policy(policy: str) -> None:
    if policy not in POLICIES:
        raise ConfigError(f"--policy {policy!r}: use one of {', '.join(POLICIES)}")


def _is_file(source: PathLike) -> bool:
    return isinstance(source, os.PathLike) or Path(source).is_file()


def file_facts(
    path: PathLike, *, fmt: str = "auto", policy: str = "default", async_blocking: bool = False
) -> list[TraceFacts]:
    """Per-trace facts of a trace file parsed in memory (nothing is stored).

    Raises:
        TraceFormatError: the file cannot be read or holds no span.
    """
    by_trace: dict[str, list[Any]] = {}
    for span in iter_file(Path(path), fmt):
        by_trace.setdefault(span.trace_id, []).append(span)
    if not by_trace:
        raise TraceFormatError(f"{path}: no spans (expected OTLP JSON or JSON lines, OTLP protobuf, Jaeger or Zipkin)")
    return [trace_facts(build_tree(spans), policy=policy, async_blocking=async_blocking) for spans in by_trace.values()]


def _facts(
    source: PathLike, store: StorePath | SpanStore | None, policy: str, async_blocking: bool
) -> list[TraceFacts]:
    _check_policy(policy)
    if _is_file(source):
        return file_facts(source, policy=policy, async_blocking=async_blocking)
    return set_facts(_spans(store), str(source), policy=policy, async_blocking=async_blocking)


@dataclass(frozen=True, slots=True)
class TraceAnalysis:
    """Where the time of a set's slow traces goes (the document ``trace analyze --json`` writes).

    Attributes:
        traces: ``{"count", "spans", …}`` of the analysed traces.
        root_ops: per root operation, the latency percentiles (ms).
        layers: the critical-path time per trace by layer in the median, ≥ p95 and ≥ p99 buckets.
        operations: per operation, its share of the tail's critical path, self time, gaps, fan-out.
        waterfalls: sequential calls that could run together, with the P99/P50 they would save.
        retries, anomalies: retried operations and tree anomalies (orphans, cycles, clock skew).
    """

    traces: dict[str, Any]
    root_ops: dict[str, Any]
    layers: dict[str, Any]
    operations: dict[str, Any]
    waterfalls: list[dict[str, Any]]
    retries: list[dict[str, Any]]
    anomalies: dict[str, Any]
    document: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


@public
def analyze_traces(
    source: PathLike,
    *,
    root_op: str | None = None,
    policy: str = "default",
    async_blocking: bool = False,
    store: StorePath | SpanStore | None = None,
) -> TraceAnalysis:
    """Analyze a trace set of ``store`` (by name) or a trace file (by path, parsed in memory: nothing is stored).

    Args:
        root_op: only traces whose root operation is this (e.g. ``POST /chat``).
        policy: the critical-path policy, ``default`` or ``jaeger`` (Jaeger UI's sections).
        async_blocking: count follows-from and CONSUMER children as blocking their parent.
    """
    doc = analyze_facts(_facts(source, store, policy, async_blocking), root_op=root_op)
    doc["set"] = str(source)
    doc["policy"] = policy
    return TraceAnalysis(
        traces=doc["traces"], root_ops=doc["root_ops"], layers=doc["layers"], operations=doc["operations"],
        waterfalls=doc["waterfalls"], retries=doc["retries"], anomalies=doc["anomalies"], document=doc,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class TraceDiff:
    """Why latency moved between two sets, per shared root operation (``trace diff --json``)."""

    document: dict[str, Any]

    @property
    def root_ops(self) -> dict[str, Any]:
        return dict(self.document["root_ops"])

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


@public
def diff_traces(
    before: PathLike,
    after: PathLike,
    *,
    policy: str = "default",
    async_blocking: bool = False,
    store: StorePath | SpanStore | None = None,
) -> TraceDiff:
    """Explain how latency moved from ``before`` to ``after`` (set names in ``store``, or trace files); ``root_ops``
    is empty when the two share no root operation."""
    doc = diff_sets(_facts(before, store, policy, async_blocking), _facts(after, store, policy, async_blocking))
    doc.update({"before_set": str(before), "after_set": str(after), "policy": policy})
    return TraceDiff(doc)


@dataclass(frozen=True, slots=True)
class TraceView:
    """One trace: its tree, critical path and each span's layer (``trace show``)."""

    tree: TraceTree
    critical_path: CriticalPath
    layers: list[str]

    def to_dict(self) -> dict[str, Any]:
        tree, cp = self.tree, self.critical_path
        return {
            "trace_id": tree.trace_id,
            "spans": [
                {
                    "span_id": s.span_id,
                    "parent_id": s.parent_id,
                    "name": s.name,
                    "start_ns": s.start_ns,
                    "end_ns": s.end_ns,
                    "layer": self.layers[i],
                }
                for i, s in enumerate(tree.spans)
            ],
            "critical_path": [
                {"span_id": g.span_id, "name": g.name, "start_ns": g.start_ns, "end_ns": g.end_ns} for g in cp.segments
            ],
            "exclusive_ns": cp.exclusive_ns,
        }


@public
def show_trace(
    trace_id: str,
    *,
    set_name: str | None = None,
    policy: str = "default",
    async_blocking: bool = False,
    store: StorePath | SpanStore | None = None,
) -> TraceView:
    """One stored trace by id or unique prefix (in ``set_name``, else in every set) with its critical path."""
    _check_policy(policy)
    _, spans = _spans(store).load_trace(set_name, trace_id)
    tree = build_tree(spans)
    return TraceView(tree, critical_path(tree, policy=policy, async_blocking=async_blocking), span_layers(tree))


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What an ingest loaded: the report (spans, problems) and the set afterwards."""

    report: IngestReport
    set: TraceSet
    files: int


@public
def ingest_traces(
    paths: Sequence[PathLike],
    set_name: str,
    *,
    store: StorePath | SpanStore,
    fmt: str = "auto",
    rules: PathLike | None = None,
    replace: bool = False,
) -> IngestResult:
    """Load trace files (OTLP JSON/protobuf, Jaeger, Zipkin) into the set ``set_name`` of ``store``.

    Raises:
        TraceFormatError: an unknown format, or no file yielded a span (naming each file and why).
    """
    if fmt not in FORMATS:
        raise TraceFormatError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    spans = _spans(store)
    layer_rules = load_layer_rules(rules)
    if replace:
        spans.delete_set(set_name)
    report = ingest_paths(spans, set_name, [str(p) for p in paths], fmt=fmt, rules=layer_rules)
    return IngestResult(report, spans.get_set(set_name), len(paths))


@dataclass(frozen=True, slots=True)
class CollectResult:
    """What a receiver took in: spans, requests, rejected requests, and where it listened."""

    received: int
    requests: int
    rejected: int
    url: str


@public
async def collect_traces_async(
    set_name: str = "live",
    *,
    store: StorePath | SpanStore,
    host: str = "127.0.0.1",
    port: int = 4318,
    token: str | None = None,
    max_body_mb: float = 16.0,
    duration: float | None = None,
    rules: PathLike | None = None,
    handle_signals: bool = False,
    on_listening: Callable[[str], None] | None = None,
) -> CollectResult:
    """Receive OTLP/HTTP traces (JSON and protobuf) into ``set_name`` until ``duration`` seconds pass (or, with
    ``handle_signals``, SIGINT/SIGTERM; with neither, until cancelled).

    Args:
        on_listening: called with the ``/v1/traces`` URL once the receiver listens (port 0 picks a free one).
    """
    from tailscope.trace.receiver import OtlpReceiver

    spans = _spans(store)
    spans.ensure_schema()
    receiver = OtlpReceiver(
        lambda batch: spans.write(set_name, batch, source="otlp/http"),
        host=host, port=port, token=token, max_body_bytes=int(max_body_mb * 1024 * 1024),
        rules=load_layer_rules(rules),
    )  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    await receiver.start()
    url = f"http://{host}:{receiver.port}/v1/traces"
    if on_listening is not None:
        on_listening(url)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=duration if duration and duration > 0 else None)
    finally:
        await receiver.stop()
        for sig in installed:
            loop.remove_signal_handler(sig)
    return CollectResult(receiver.received, receiver.requests, receiver.rejected, url)


collect_traces = sync_twin(collect_traces_async)


@public
def trace_sets(*, store: StorePath | SpanStore | None = None) -> list[TraceSet]:
    """The trace sets of ``store`` with their span and trace counts, newest first."""
    return _spans(store).list_sets()


@public
def delete_trace_sets(names: Sequence[str], *, store: StorePath | SpanStore | None = None) -> list[TraceSet]:
    """Delete trace sets and their spans; nothing is deleted unless every name exists (NotFoundError)."""
    spans = _spans(store)
    gone = [spans.get_set(name) for name in names]
    for s in gone:
        spans.delete_set(s.name)
    return gone


@public
def write_demo_traces(out: PathLike, *, traces: int = 2000, seed: int = 7) -> list[Path]:
    """Write synthetic agent traces with known waterfalls: ``before.otlp.json`` (tools one after another in 63 % of
    traces) and ``after.otlp.json`` (parallelised, but the knowledge-base backend 1.6× slower), as OTLP JSON lines."""
    import json

    from tailscope.trace.demo import demo_traces, to_otlp_json

    if traces < 1:
        raise ConfigError(f"--traces must be ≥ 1 (got {traces})")
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create ({exc.strerror})") from None
    variants = {"before": {"sequential_share": 0.63}, "after": {"sequential_share": 0.05, "tool_scale": 1.6}}
    written = []
    for name, kwargs in variants.items():
        path = folder / f"{name}.otlp.json"
        with open(path, "w", encoding="utf-8") as fh:
            batch: list[Any] = []
            for spans in demo_traces(traces, seed=seed + (name == "after"), **kwargs):  # type: ignore[arg-type]
                batch.extend(spans)
                if len(batch) >= 2000:
                    fh.write(json.dumps(to_otlp_json(batch), separators=(",", ":")) + "\n")
                    batch = []
            if batch:
                fh.write(json.dumps(to_otlp_json(batch), separators=(",", ":")) + "\n")
        written.append(path)
    return written


@dataclass(frozen=True, slots=True)
class TraceJoin:
    """A bench run's requests joined with a trace set by trace id, each client-seen TTFT and E2E taken apart.

    Attributes:
        run_id, set_name: what was joined.
        summary: the parts per request and their distributions (:class:`~tailscope.trace.join.JoinSummary`).
    """

    run_id: str
    set_name: str
    summary: JoinSummary

    @property
    def joined(self) -> int:
        return self.summary.joined

    @property
    def requests(self) -> int:
        return self.summary.requests

    def to_dict(self) -> dict[str, Any]:
        """The document ``trace join --json`` writes: ``run``, ``set``, ``requests``, ``joined``, ``unjoined``,
        ``ttft_ms``/``e2e_ms`` part distributions, ``explain_*_p99`` and ``per_request`` rows."""
        return {"run": self.run_id, "set": self.set_name, **self.summary.to_dict()}


@public
def join_traces(
    run: str,
    set_name: str,
    *,
    skew_tolerance_ms: float = 1.0,
    store: StorePath | RunStore | None = None,
    trace_store: StorePath | SpanStore | None = None,
) -> TraceJoin:
    """Join the requests of bench run ``run`` (id, prefix, ``latest``) with trace set ``set_name`` by trace id.

    The run must have been made with ``trace_context`` (``bench --trace-context``) and the server must have exported
    its spans into the set (``trace collect``). Each joined request's client-seen TTFT and E2E are split into parts
    that add up to it exactly (docs/metrics.md, "Client and tree"); requests that cannot be joined are counted and
    listed with the reason.

    Args:
        skew_tolerance_ms: how far the server's spans may lie outside the client's send/receive (on the run start's
            Unix time) before clock skew is suspected.
        store: the store holding the run (path or RunStore; default: the command line's).
        trace_store: the store holding the set, when not ``store`` itself.

    Raises:
        NotFoundError: no such run or set. ConfigError: a bad tolerance.
    """
    if not skew_tolerance_ms >= 0:
        raise ConfigError(f"--skew-tolerance-ms must be ≥ 0 (got {skew_tolerance_ms})")
    runs = open_store(store) or default_store()
    stored = runs.get_run(run)
    records = runs.load_records(stored.run.id)
    span_store = SpanStore(runs.db) if trace_store is None else _spans(trace_store)
    spans = span_store.load_traces(set_name, (r.trace_id for r in records if r.trace_id is not None))
    ctx = (stored.summary or {}).get("trace_context")
    t0_unix = ctx.get("t0_unix_ns") if isinstance(ctx, dict) else None
    summary = join_records(
        records,
        spans,
        t0_unix_ns=int(t0_unix) if isinstance(t0_unix, int | float) else None,
        skew_tolerance_ns=round(skew_tolerance_ms * 1e6),
    )
    return TraceJoin(run_id=stored.run.id, set_name=set_name, summary=summary)
