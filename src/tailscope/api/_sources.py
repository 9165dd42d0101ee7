"""Where the trace API reads: a trace set of a store (by name) or a trace file (by path), parsed in memory."""

from __future__ import annotations

import os
from pathlib import Path

from tailscope.api._support import PathLike, StorePath
from tailscope.errors import TraceFormatError
from tailscope.records import Span
from tailscope.store.spans import SpanStore
from tailscope.trace.ingest.files import iter_file


def open_spans(store: StorePath | SpanStore | None) -> SpanStore:
    return store if isinstance(store, SpanStore) else SpanStore(store)


def is_file(source: PathLike) -> bool:
    return isinstance(source, os.PathLike) or Path(source).is_file()


def file_traces(source: PathLike) -> dict[str, list[Span]]:
    """A trace file's spans by trace, parsed in memory."""
    by_trace: dict[str, list[Span]] = {}
    for span in iter_file(Path(source), "auto"):
        by_trace.setdefault(span.trace_id, []).append(span)
    if not by_trace:
        raise TraceFormatError(f"{source}: no spans (expected OTLP JSON or JSON lines, OTLP protobuf, Jaeger, Zipkin)")
    return by_trace
