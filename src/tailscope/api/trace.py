"""Locate: trace sets — ingest, collect, analyze (a set or a file, no store needed), show one trace, diff two sets.

Analyses answer where the time of slow traces goes: critical paths, P99 by layer, operations, waterfalls of calls
that could run together, retries; ``join_traces`` joins a bench run's requests with a set by trace id and takes each
client-seen latency apart. ``ingest_traces`` and ``collect_traces`` write the store they are given; every
other function only reads (a set in ``store``, or a trace file parsed in memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailscope.api._support import StorePath, default_store, open_store, public, sync_twin
from tailscope.errors import ConfigError, NotFoundError, TraceFormatError, UnknownOperationError
from tailscope.io.layer_rules import load_layer_rules
from tailscope.records import Span
from tailscope.store.runs import RunStore
from tailscope.store.spans import SpanStore, TraceSet
from tailscope.trace.analysis import analyze_facts
from tailscope.trace.changes import Operations
from tailscope.trace.critical_path import POLICIES, CriticalPath, critical_path
from tailscope.trace.dependency import Marks, marks_from
from tailscope.trace.diff import diff_sets
from tailscope.trace.facts import TraceFacts, span_layers, trace_facts
from tailscope.trace.ingest.files import FORMATS, iter_file
from tailscope.trace.ingest.sets import IngestReport, ingest_paths, set_facts
from tailscope.trace.join import JoinSummary, join_records
from tailscope.trace.tree import TraceTree, build_tree, tree_from_rows

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
    if _is_file(source):
        return file_facts(source, policy=policy, async_blocking=async_blocking)
    spans = _spans(store)
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
    grpc_address: str | None = None  # HOST:PORT of the OTLP/gRPC receiver, when one ran


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

    spans = _spans(store)
    spans.ensure_schema()
    receiver = OtlpReceiver(
        lambda batch: spans.write(set_name, batch, source="otlp/http"),
        host=host, port=port, token=token, max_body_bytes=int(max_body_mb * 1024 * 1024),
        rules=load_layer_rules(rules), grpc_port=grpc_port,
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
    grpc_address = None if grpc_port is None else f"{host}:{receiver.grpc_port}"
    if on_listening is not None:
        on_listening(url)
        if grpc_address is not None:
            on_listening(f"grpc://{grpc_address}")
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=duration if duration and duration > 0 else None)
    finally:
        await receiver.stop()
        for sig in installed:
            loop.remove_signal_handler(sig)
    return CollectResult(receiver.received, receiver.requests, receiver.rejected, url, grpc_address)


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


# --------------------------------------------------------------------------------------------------- what-if


@dataclass(frozen=True, slots=True)
class WhatIfResult:
    """A set's latency before and after projected changes (the document ``trace whatif --json`` writes).

    Attributes:
        before, after: ``{"count", "p50_ms", "p95_ms", "p99_ms", "{stat}_low_ms", "{stat}_high_ms", "mean_ms"}`` of
            the root durations (bootstrap percentile intervals at ``confidence``).
        saving: ``{"p50_ms", "p95_ms", "p99_ms"}``: before − after.
        changes: the changes, each ``{"kind", "operations", "flag"}``.
        traces: traces re-timed.
        root_ops: the same per root operation.
        critical_path: ``{"traces", "changed", "changed_share", "moves": [{"from", "to", "traces", "share"}]}``:
            traces whose dominant critical-path operation changed (another branch became critical).
        candidates, greedy: with ``rank``: candidate fixes projected alone, by P95 saving, and the greedy order;
            when some trace has a class, each also has ``classes`` {class: {``p95_after_ms``, ``p95_saving_ms``}}
            (the document then has ``p95_before_by_class_ms`` {class: ms} too).
        warnings: one line per change operation that no span of the set matches (it projects no saving; the line
            names close names), and e.g. a ``--parallel`` over calls the data marks as dependent.
        unmatched: the operations that match no span, each ``{"flag", "operation", "close", "group"}`` (``close``:
            names of the set close to it; ``group``: ``layer 'X'`` or ``service 'X'`` when the name is one, ``close``
            then listing its operations).
        classes: the same as ``root_ops`` per class (``{class: {"count", "before", "after", "saving"}}``, traces
            without a class as ``(none)``); empty when no trace has one. The document names the attribute read in
            ``class_attribute``.
    """

    before: dict[str, Any]
    after: dict[str, Any]
    saving: dict[str, Any]
    changes: list[dict[str, Any]]
    traces: int
    root_ops: dict[str, Any]
    critical_path: dict[str, Any]
    candidates: list[dict[str, Any]]
    greedy: list[dict[str, Any]]
    warnings: list[str]
    document: dict[str, Any]
    classes: dict[str, Any] = field(default_factory=dict)
    unmatched: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


def _file_traces(source: PathLike) -> dict[str, list[Span]]:
    """A trace file's spans by trace, parsed in memory."""
    by_trace: dict[str, list[Span]] = {}
    for span in iter_file(Path(source), "auto"):
        by_trace.setdefault(span.trace_id, []).append(span)
    if not by_trace:
        raise TraceFormatError(f"{source}: no spans (expected OTLP JSON or JSON lines, OTLP protobuf, Jaeger, Zipkin)")
    return by_trace


def _trees_and_marks(
    source: PathLike,
    store: StorePath | SpanStore | None,
    root_op: str | None,
    *,
    with_marks: bool = True,
    class_attribute: str | None = None,
    check: Callable[[Operations], None] | None = None,
) -> tuple[Iterator[TraceTree], dict[str, Marks], dict[str, dict[str, str]]]:
    """The trees of a file or set, their dependency marks and, with ``class_attribute``, the values of that attribute
    per trace (span id → value as text). ``check`` sees the source's operations first, before anything else is read
    (it raises to stop)."""
    marks: dict[str, Marks] = {}
    classes: dict[str, dict[str, str]] = {}
    if _is_file(source):
        by_trace = _file_traces(source)
        if check is not None:
            check(Operations.from_rows({(s.name, s.service, s.layer) for v in by_trace.values() for s in v}))
        trees = []
        for tid, spans in by_trace.items():
            m = marks_from((s.span_id, s.attributes, s.links) for s in spans if s.attributes or s.links)
            if m:
                marks[tid] = m
            if class_attribute:
                found = {s.span_id: _as_text(s.attributes[class_attribute]) for s in spans
                         if s.attributes and s.attributes.get(class_attribute) is not None}  # fmt: skip
                if found:
                    classes[tid] = found
            trees.append(build_tree(spans))
        it: Iterator[TraceTree] = iter(trees)
    else:
        spans_store = _spans(store)
        if check is not None:
            check(Operations.from_rows(spans_store.operation_rows(str(source))))
        for tid, items in (spans_store.dependency_rows(str(source)) if with_marks else {}).items():
            m = marks_from(items)
            if m:
                marks[tid] = m
        if class_attribute:
            classes = spans_store.attribute_values(str(source), class_attribute)
        it = (tree_from_rows(rows) for rows in spans_store.iter_trace_rows(str(source)))
    if root_op is not None:
        it = (t for t in it if t.primary >= 0 and t.names[t.primary] == root_op)
    return it, marks, classes


def _as_text(value: Any) -> str:
    """An attribute value as the store's ``json_extract_string`` gives it (a string as is, others as JSON)."""
    return value if isinstance(value, str) else json.dumps(value)


#: The root-span attribute that names a trace's class by default (tailscope's client spans set it to the request
#: class of the workload profile).
CLASS_ATTRIBUTE = "tailscope.request.class"


@public
def whatif(
    source: PathLike,
    *,
    set_duration: Sequence[str] = (),
    scale: Sequence[str] = (),
    parallel: Sequence[str] = (),
    parallel_children: Sequence[str] = (),
    cache: Sequence[str] = (),
    remove: Sequence[str] = (),
    cap_retries: Sequence[str] = (),
    timeout: Sequence[str] = (),
    independent: Sequence[str] = (),
    rank: bool = False,
    root_op: str | None = None,
    class_attribute: str | None = CLASS_ATTRIBUTE,
    seed: int = 0,
    resamples: int = 200,
    confidence: float = 0.95,
    store: StorePath | SpanStore | None = None,
) -> WhatIfResult:
    """Project changes over a trace set of ``store`` (by name) or a trace file (by path): every trace re-timed along
    its tree, latency before and after (``docs/trace.md`` states the method).

    Each change argument takes the values of its command-line flag, e.g. ``set_duration=["auth=30ms"]``,
    ``scale=["llm=0.6"]``, ``parallel=["search_a,search_b,search_c"]``, ``cache=["kb=0.4:2ms"]``,
    ``timeout=["kb=3s:200ms"]``, ``cap_retries=["llm=1"]``; all apply together.

    Args:
        independent: groups of operations to treat as independent (``"A,B"``), whatever the data says.
        rank: also generate candidate fixes from the set's findings and rank them by P95 saving (on top of the
            changes given).
        root_op: only traces whose root operation is this.
        class_attribute: the span attribute that names a trace's class (read on the primary root span, else on the
            earliest span carrying it); the result is also broken down by class when some trace has one. None: no
            breakdown.
        seed: seed of the cache draws (a hash of seed, trace and span: the same trace hits the same way).
        resamples: bootstrap resamples for the intervals (0: none).
        confidence: the intervals' confidence.

    Raises:
        ConfigError: a change that does not parse (naming the flag and the form), or no change and no ``rank``.
        UnknownOperationError: no change names an operation (span name or glob) of the set, checked before anything
            else is read (a change of which only some operations match gets a warning instead).
        NotFoundError: no such set. TraceFormatError: a file without spans.
    """
    from tailscope.trace.changes import Change, Unmatched, matches_nothing, parse_change, unmatched
    from tailscope.trace.dependency import Evidence
    from tailscope.trace.whatif import Plan, Projection, project_trace, trace_class

    changes: list[Change] = []
    given = {"set-duration": set_duration, "scale": scale, "parallel": parallel,
             "parallel-children": parallel_children, "cache": cache, "remove": remove,
             "cap-retries": cap_retries, "timeout": timeout}  # fmt: skip
    try:
        for kind, values in given.items():
            changes.extend(parse_change(kind, v) for v in values)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    groups = []
    for g in independent:
        ops = [o.strip() for o in g.split(",") if o.strip()]
        if len(ops) < 2:
            raise ConfigError(f'--independent {g!r}: expected "A,B" (two or more operations, comma-separated)')
        groups.append(ops)
    if not changes and not rank:
        raise ConfigError(
            "give at least one change (--set-duration, --scale, --parallel, --parallel-children, --cache, --remove, "
            "--cap-retries, --timeout) or --rank"
        )
    if not 0 < confidence < 1:
        raise ConfigError(f"--confidence must be within (0, 1) (got {confidence})")
    if resamples < 0:
        raise ConfigError(f"resamples must be ≥ 0 (got {resamples})")
    # the evidence serves --rank and the warnings of --parallel; without them its query and pair counts are skipped
    need_evidence = rank or any(c.kind in ("parallel", "parallel-children") for c in changes)
    missing: list[Unmatched] = []

    def check(ops: Operations) -> None:
        missing.extend(unmatched(changes, ops))
        if matches_nothing(changes, missing):
            listed = "; ".join(f"{u.change.flag}: {u.operation!r} ({u.hint()})" for u in missing)
            raise UnknownOperationError(
                f"no change matches a span of {source}: {listed} — give span names as `tailscope trace analyze "
                f"--set {source}` lists them (exact, or globs such as 'search*')"
            )

    trees_it, marks, class_values = _trees_and_marks(
        source, store, root_op, with_marks=need_evidence, class_attribute=class_attribute,
        check=check if changes else None,
    )  # fmt: skip
    evidence = Evidence(groups)
    plan = Plan(changes, seed=seed)
    proj = Projection()
    kept: list[TraceTree] = []
    kept_classes: list[str | None] = []
    for tree in trees_it:
        if need_evidence:
            evidence.add(tree, marks.get(tree.trace_id))
        klass = trace_class(tree, class_values.get(tree.trace_id))
        outcome = project_trace(tree, plan, klass=klass)
        if outcome is not None:
            proj.outcomes.append(outcome)
        if rank:
            kept.append(tree)
            kept_classes.append(klass)
    if not proj.outcomes:
        raise NotFoundError(f"no traces in {source}" + (f" with root operation {root_op!r}" if root_op else ""))
    doc = proj.summary(resamples=resamples, confidence=confidence, seed=seed)
    warnings = [u.message() for u in missing] + evidence.warnings(changes)
    ranked: dict[str, Any] = {"candidates": [], "greedy": []}
    if rank:
        from tailscope.trace.rank import rank as rank_fixes
        from tailscope.trace.rank import set_facts_with_marks

        facts = set_facts_with_marks(kept, marks)
        ranked = rank_fixes(kept, facts, evidence, base=changes, seed=seed, classes=kept_classes)
    doc.update(
        {"set": str(source), "changes": [c.to_dict() for c in changes], "traces": len(proj.outcomes),
         "seed": seed, "confidence": confidence, "warnings": warnings, "unmatched": [u.to_dict() for u in missing],
         "class_attribute": class_attribute, **ranked}
    )  # fmt: skip
    return WhatIfResult(
        before=doc["before"], after=doc["after"], saving=doc["saving"], changes=doc["changes"], traces=doc["traces"],
        root_ops=doc["root_ops"], critical_path=doc["critical_path"], candidates=doc["candidates"],
        greedy=doc["greedy"], warnings=warnings, document=doc, classes=doc.get("classes", {}),
        unmatched=doc["unmatched"],
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------- cacheability


@dataclass(frozen=True, slots=True)
class CacheabilityResult:
    """Each operation's cacheability score (the document ``trace cacheability --json`` writes).

    Attributes:
        operations: one row per operation, best score first: ``operation``, ``calls``, ``mean_ms``, ``compared``,
            ``reuse_share``, ``reuse``, ``cost``, ``immutability``, ``score``, ``ttl_s``, ``candidate``, ``note``;
            a candidate also has ``whatif`` {``change``, ``p95_before_ms``, ``p95_after_ms``, ``p95_saving_ms``}.
        candidates: the operations scoring ≥ 60.
    """

    operations: list[dict[str, Any]]
    candidates: list[str]
    document: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


def _per_op_seconds(values: Sequence[str], flag: str, *, rate: bool) -> dict[str, float]:
    from tailscope.trace.cacheability import YEAR_S
    from tailscope.trace.changes import parse_duration_ns

    per = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
    out: dict[str, float] = {}
    for text in values:
        op, sep, rhs = text.rpartition("=")
        want = '"OP=4/d" (changes per s, m, h or d)' if rate else '"OP=30d" (how long an answer stays valid)'
        if not sep or not op.strip():
            raise ConfigError(f"{flag} {text!r}: expected {want}")
        try:
            if rate:
                n, _, unit = rhs.strip().partition("/")
                changes = float(n)
                if unit.strip() not in per or changes < 0:
                    raise ValueError
                out[op.strip()] = per[unit.strip()] / changes if changes > 0 else YEAR_S * 100
            else:
                out[op.strip()] = parse_duration_ns(rhs) / 1e9
        except (ValueError, ZeroDivisionError):
            raise ConfigError(f"{flag} {text!r}: expected {want}") from None
    return out


@public
def cacheability(
    source: PathLike,
    *,
    ttl: Sequence[str] = (),
    change_rate: Sequence[str] = (),
    window: str = "1h",
    hit_duration: str = "1ms",
    seed: int = 0,
    store: StorePath | SpanStore | None = None,
) -> CacheabilityResult:
    """Score each operation of a trace set (or file) for caching: reuse (40), compute cost (30), immutability (30);
    ≥ 60 marks a candidate, whose ``--cache`` what-if is projected (``docs/trace.md``, "Cacheability").

    Args:
        ttl: per operation, how long an answer stays valid (``"kb search=30d"``).
        change_rate: per operation, how often its data changes (``"user profile=4/d"``; the TTL is its inverse).
        window: calls repeating an earlier call's arguments within this long count as reuse.
        hit_duration: the duration of a cache hit in the what-if.

    Raises:
        ConfigError: a flag that does not parse. NotFoundError: no such set. TraceFormatError: a file without spans.
    """
    import json

    import numpy as np

    from tailscope.trace.cacheability import call_key, score_calls
    from tailscope.trace.changes import parse_change, parse_duration_ns
    from tailscope.trace.tree import tree_from_rows
    from tailscope.trace.whatif import project

    ttl_s = _per_op_seconds(change_rate, "--change-rate", rate=True)
    ttl_s.update(_per_op_seconds(ttl, "--ttl", rate=False))
    try:
        window_ns = parse_duration_ns(window)
        hit_ns = parse_duration_ns(hit_duration)
    except ValueError as exc:
        raise ConfigError(f"--window/--hit-duration: {exc}") from None
    if _is_file(source):
        by_trace = _file_traces(source)
        calls = [
            (s.name, s.start_ns, s.end_ns - s.start_ns, call_key(s.attributes)) for t in by_trace.values() for s in t
        ]
        trees = [build_tree(spans) for spans in by_trace.values()]
    else:
        spans_store = _spans(store)
        calls = [
            (name, start, dur, call_key(json.loads(attrs)) if attrs else None)
            for name, start, dur, attrs in spans_store.iter_call_rows(str(source))
        ]
        trees = []
    rows = score_calls(calls, window_ns=window_ns, ttl_s=ttl_s)
    picked = [r for r in rows if r["candidate"]]
    if picked:
        if not trees:
            trees = [tree_from_rows(r) for r in _spans(store).iter_trace_rows(str(source))]
        base = project(trees, [], paths=False).arrays()[0]
        p95_before = float(np.quantile(base, 0.95)) / 1e6 if base.size else 0.0
        for r in picked:
            change = parse_change("cache", f"{r['operation']}={r['reuse_share']:.4f}:{hit_ns / 1e6:g}ms")
            after = project(trees, [change], seed=seed, paths=False).arrays()[1]
            p95 = float(np.quantile(after, 0.95)) / 1e6 if after.size else 0.0
            r["whatif"] = {"change": change.flag, "p95_before_ms": round(p95_before, 3), "p95_after_ms": round(p95, 3),
                           "p95_saving_ms": round(p95_before - p95, 3)}  # fmt: skip
    doc: dict[str, Any] = {"set": str(source), "window_s": window_ns / 1e9, "operations": rows,
           "candidates": [r["operation"] for r in picked]}  # fmt: skip
    return CacheabilityResult(rows, doc["candidates"], doc)
