"""Locate: trace sets — ingest, collect, analyze (a set or a file, no store needed), show one trace, diff two sets.

Analyses answer where the time of slow traces goes: critical paths, P99 by layer, operations, waterfalls of calls
that could run together, retries. ``ingest_traces`` and ``collect_traces`` write the store they are given; every
other function only reads (a set in ``store``, or a trace file parsed in memory). Joining a bench run with a set is
:mod:`tailscope.api.join`, projecting changes :mod:`tailscope.api.whatif`, scoring caching
:mod:`tailscope.api.cacheability`, synthetic demo traces :mod:`tailscope.api.demo`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailscope.api._sources import is_file, open_spans
from tailscope.api._support import Listener, PathLike, StorePath, public, serve_until_stopped, sync_twin
from tailscope.errors import ConfigError, TraceFormatError, UnknownOperationError
from tailscope.store.spans import SpanStore, TraceSet
from tailscope.trace.analysis import analyze_facts
from tailscope.trace.changes import Operations, roots_hint, unmatched_names
from tailscope.trace.critical_path import POLICIES, CriticalPath, critical_path
from tailscope.trace.dependency import marks_from
from tailscope.trace.diff import diff_sets
from tailscope.trace.facts import TraceFacts, span_layers, trace_facts
from tailscope.trace.ingest.files import FORMATS, iter_file
from tailscope.trace.ingest.sets import IngestReport, ingest_paths, no_cyclic_gc, set_facts
from tailscope.trace.layers import LayerRule
from tailscope.trace.tree import TraceTree, build_tree, tree_from_rows

if TYPE_CHECKING:
    from tailscope.trace.receiver import OtlpReceiver


def _check_policy(policy: str) -> None:
    if policy not in POLICIES:
        raise ConfigError(f"--policy {policy!r}: use one of {', '.join(POLICIES)}")


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
    out = []
    for spans in by_trace.values():
        tree = build_tree(spans)
        marks = marks_from((s.span_id, s.attributes, s.links) for s in spans if s.attributes or s.links)
        consumes = marks.by_index(tree) if marks else None
        out.append(trace_facts(tree, policy=policy, async_blocking=async_blocking, consumes=consumes))
    return out


def _facts(
    source: PathLike, store: StorePath | SpanStore | None, policy: str, async_blocking: bool
) -> list[TraceFacts]:
    _check_policy(policy)
    if is_file(source):
        return file_facts(source, policy=policy, async_blocking=async_blocking)
    spans = open_spans(store)
    facts = set_facts(spans, str(source), policy=policy, async_blocking=async_blocking)
    return _honour_marks(facts, spans, str(source), policy, async_blocking)


def _honour_marks(
    facts: list[TraceFacts], spans: SpanStore, set_name: str, policy: str, async_blocking: bool
) -> list[TraceFacts]:
    """Recompute the facts of the traces where a waterfall holds a call that the data marks as consuming an earlier
    member's output (links, tool call ids): the store's rows carry no attributes, so the finder could not see it."""
    if not any(f.waterfalls for f in facts):
        return facts
    marks = {tid: mk for tid, items in spans.dependency_rows(set_name).items() if (mk := marks_from(items))}
    redo = set()
    for f in facts:
        m = marks.get(f.trace_id)
        if m is None or not m.consumes:
            continue
        for g in f.waterfalls:
            members = set(g.member_ids)
            if any(sid in members and not used.isdisjoint(members) for sid, used in m.consumes.items()):
                redo.add(f.trace_id)
                break
    if not redo:
        return facts
    fixed: dict[str, TraceFacts] = {}
    for rows in spans.iter_trace_rows(set_name):
        tid = rows[0][0]
        if tid in redo:
            tree = tree_from_rows(rows)
            fixed[tid] = trace_facts(
                tree, policy=policy, async_blocking=async_blocking, consumes=marks[tid].by_index(tree)
            )
    return [fixed.get(f.trace_id, f) for f in facts]


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

    Raises:
        UnknownOperationError: ``root_op`` is no trace's root operation (the message names the close ones; for a
            stored set a name of no span at all is found before the traces are read).
    """
    if root_op is not None and not is_file(source):
        _check_root_op(root_op, source, Operations.from_rows(open_spans(store).operation_rows(str(source))))
    # The facts (millions of small acyclic objects on a large set) live from their computation to the summary: the
    # cyclic collector stays paused until they are dropped, else it scans them all when it resumes and again in
    # the collections that follow (0.5–0.75 s of a 1M-span analyze).
    with no_cyclic_gc():
        facts = _facts(source, store, policy, async_blocking)
        if root_op is not None and facts and not any(f.root_op == root_op for f in facts):
            raise UnknownOperationError(
                f'--root-op "{root_op}": no trace of {source} has its root span named {root_op!r}; '
                + roots_hint(root_op, {f.root_op for f in facts})
            )
        doc = analyze_facts(facts, root_op=root_op)
        del facts
    doc["set"] = str(source)
    doc["policy"] = policy
    return TraceAnalysis(
        traces=doc["traces"], root_ops=doc["root_ops"], layers=doc["layers"], operations=doc["operations"],
        waterfalls=doc["waterfalls"], retries=doc["retries"], anomalies=doc["anomalies"], document=doc,
    )  # fmt: skip


def _check_root_op(root_op: str, source: PathLike, ops: Operations) -> None:
    """An UnknownOperationError when ``root_op`` names no span of the set (with its close names)."""
    bad = unmatched_names(f'--root-op "{root_op}"', [root_op], ops, effect="no trace is left to analyze")
    if bad:
        raise UnknownOperationError(
            f"{bad[0].message()} — give a root operation as `tailscope trace analyze --set {source}` lists them"
        )


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
    _, spans = open_spans(store).load_trace(set_name, trace_id)
    tree = build_tree(spans)
    return TraceView(tree, critical_path(tree, policy=policy, async_blocking=async_blocking), span_layers(tree))


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What an ingest loaded: the report (spans, problems) and the set afterwards."""

    report: IngestReport
    set: TraceSet
    files: int


def _layer_rules(path: PathLike | None) -> tuple[LayerRule, ...]:
    """The user's layer rules (YAML, imported only when there is a file: a plain ingest starts faster)."""
    if path is None:
        return ()
    from tailscope.io.layer_rules import load_layer_rules

    return load_layer_rules(path)


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
    spans = open_spans(store)
    layer_rules = _layer_rules(rules)
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
    grpc_address: str | None = None  # HOST:PORT of the OTLP/gRPC receiver, when one ran


class _Collecting(Listener):
    """An OTLP receiver run by :func:`serve_until_stopped`, as the app and the proxy are (duration, signals)."""

    def __init__(self, receiver: OtlpReceiver, host: str) -> None:
        self.receiver = receiver
        self.host = host
        self.url = ""

    async def start(self) -> str:
        await self.receiver.start()
        self.url = f"http://{self.host}:{self.receiver.port}/v1/traces"
        return self.url

    async def stop(self) -> None:
        await self.receiver.stop()


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
    grpc_port: int | None = None,
) -> CollectResult:
    """Receive OTLP/HTTP traces (JSON and protobuf) into ``set_name`` until ``duration`` seconds pass (or, with
    ``handle_signals``, SIGINT/SIGTERM; with neither, until cancelled).

    Args:
        on_listening: called with the ``/v1/traces`` URL once the receiver listens (port 0 picks a free one), then,
            with ``grpc_port``, with ``grpc://HOST:PORT``.
        grpc_port: also receive OTLP/gRPC (``TraceService/Export``) on this port (4317 is the usual one; 0 picks a
            free one). Needs ``grpcio`` (``pip install 'tailscope[grpc]'``); ConfigError without it.
    """
    from tailscope.trace.receiver import OtlpReceiver

    spans = open_spans(store)
    spans.ensure_schema()
    receiver = OtlpReceiver(
        lambda batch: spans.write(set_name, batch, source="otlp/http"),
        host=host, port=port, token=token, max_body_bytes=int(max_body_mb * 1024 * 1024),
        rules=_layer_rules(rules), grpc_port=grpc_port,
    )  # fmt: skip
    collecting = _Collecting(receiver, host)

    def listening(_: _Collecting) -> None:
        if on_listening is not None:
            on_listening(collecting.url)
            if grpc_port is not None:
                on_listening(f"grpc://{host}:{receiver.grpc_port}")

    await serve_until_stopped(collecting, duration=duration, handle_signals=handle_signals, on_ready=listening)
    grpc_address = None if grpc_port is None else f"{host}:{receiver.grpc_port}"
    return CollectResult(receiver.received, receiver.requests, receiver.rejected, collecting.url, grpc_address)


collect_traces = sync_twin(collect_traces_async)


@public
def trace_sets(*, store: StorePath | SpanStore | None = None) -> list[TraceSet]:
    """The trace sets of ``store`` with their span and trace counts, newest first."""
    return open_spans(store).list_sets()


@public
def delete_trace_sets(names: Sequence[str], *, store: StorePath | SpanStore | None = None) -> list[TraceSet]:
    """Delete trace sets and their spans; nothing is deleted unless every name exists (NotFoundError)."""
    spans = open_spans(store)
    gone = [spans.get_set(name) for name in names]
    for s in gone:
        spans.delete_set(s.name)
    return gone
