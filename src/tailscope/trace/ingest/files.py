"""Reading trace files: format detection, streaming, and salvaging what can be read from damaged files.

A file is either one JSON document (OTLP, Jaeger or Zipkin), JSON lines (one document per line, as the OpenTelemetry
collector's file exporter writes; read line by line, never whole), or a protobuf ``ExportTraceServiceRequest``.
Problems are recorded with file and position (``line:col`` or a JSON path); good spans still load. A truncated JSON
document is salvaged: every complete span object before the damage is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tailscope.errors import TraceFormatError
from tailscope.records import Span
from tailscope.store.spans import span_row
from tailscope.trace.ingest.common import ParseContext, loads_json
from tailscope.trace.ingest.jaeger import parse_jaeger_json, parse_zipkin_json
from tailscope.trace.ingest.otlp import otlp_json_rows, parse_otlp_json, parse_otlp_proto

FORMATS = ("auto", "otlp-json", "otlp-proto", "jaeger", "zipkin")
_PROTO_SUFFIXES = (".pb", ".bin", ".protobuf", ".proto")


def detect_json_format(doc: Any) -> str | None:
    """``otlp-json``, ``jaeger`` or ``zipkin`` from a parsed document's shape; None when unknown."""
    if isinstance(doc, Mapping):
        if "resourceSpans" in doc or "result" in doc:
            return "otlp-json"
        if "data" in doc or ("spans" in doc and ("traceID" in doc or "processes" in doc)):
            return "jaeger"
        return None
    if isinstance(doc, list):
        first = doc[0] if doc else None
        while isinstance(first, list):
            first = first[0] if first else None
        if isinstance(first, Mapping):
            if "traceId" in first and "id" in first:
                return "zipkin"
            if "spans" in first:
                return "jaeger"
        return "zipkin" if not doc else None
    return None


def parse_document(doc: Any, fmt: str, ctx: ParseContext, *, where: str = "") -> Iterator[Span]:
    """Spans of one parsed JSON document in format ``fmt`` (``auto`` detects it)."""
    yield from _parse_document(doc, fmt, ctx, where, as_rows=False)


def _parse_document(doc: Any, fmt: str, ctx: ParseContext, where: str, *, as_rows: bool) -> Iterator[Any]:
    if fmt == "auto":
        detected = detect_json_format(doc)
        if detected is None:
            ctx.problem(where.rstrip("."), "unrecognised trace format (not OTLP JSON, Jaeger or Zipkin v2)")
            return
        fmt = detected
    if fmt == "otlp-json" or (fmt == "jaeger" and isinstance(doc, Mapping) and "result" in doc):
        # api_v3 is OTLP inside "result"; OTLP JSON has a row fast path (the bulk of real-world input)
        yield from (otlp_json_rows if as_rows else parse_otlp_json)(doc, ctx, where=where)
        return
    if fmt == "jaeger":
        spans = parse_jaeger_json(doc, ctx, where=where)
    elif fmt == "zipkin":
        spans = parse_zipkin_json(doc, ctx, where=where)
    else:
        raise TraceFormatError(f"{ctx.source}: format {fmt!r} is not a JSON format; use one of {', '.join(FORMATS)}")
    yield from (map(span_row, spans) if as_rows else spans)


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"{line}:{col}"


_SPANS_ARRAY = re.compile(r'"spans"\s*:\s*\[')
_SERVICE = re.compile(r'"(?:service\.name"\s*,\s*"value"\s*:\s*\{\s*"stringValue|serviceName)"\s*:\s*"([^"]*)"')


def _salvage(text: str, fmt: str, ctx: ParseContext) -> Iterator[Span]:
    """Complete span objects from a damaged JSON document, read one by one until the damage."""
    decoder = json.JSONDecoder()
    arrays: list[int] = []
    if text.lstrip().startswith("[") and fmt in ("auto", "zipkin"):
        arrays.append(text.index("[") + 1)
    arrays.extend(m.end() for m in _SPANS_ARRAY.finditer(text))
    for start in arrays:
        services = _SERVICE.findall(text, 0, start)
        service = services[-1] if services else ""
        pos = start
        objects: list[Any] = []
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text) or text[pos] == "]":
                break
            try:
                obj, pos = decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                break
            objects.append(obj)
        if not objects or not isinstance(objects[0], Mapping):
            continue
        first = objects[0]
        where = f"salvaged@{_line_col(text, start)}."
        if "spanId" in first:
            doc: Any = {
                "resourceSpans": [
                    {
                        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                        "scopeSpans": [{"spans": objects}],
                    }
                ]
            }
            yield from parse_otlp_json(doc, ctx, where=where)
        elif "spanID" in first:
            proc = {"serviceName": service}
            for o in objects:
                if isinstance(o, dict):
                    o.setdefault("process", proc)
            yield from parse_jaeger_json({"data": [{"spans": objects}]}, ctx, where=where)
        elif "traceId" in first and "id" in first:
            yield from parse_zipkin_json(objects, ctx, where=where)


def iter_file(path: str | Path, fmt: str = "auto", ctx: ParseContext | None = None) -> Iterator[Span]:
    """Stream the spans of one trace file; problems go to ``ctx.problems`` (good spans still load).

    Raises:
        TraceFormatError: when the file cannot be opened or the format name is unknown.
    """
    yield from _iter_file(path, fmt, ctx, as_rows=False)


def iter_file_rows(path: str | Path, fmt: str = "auto", ctx: ParseContext | None = None) -> Iterator[dict[str, Any]]:
    """:func:`iter_file` yielding the store's batch rows (``store.spans.span_row`` of each span), for ingest."""
    yield from _iter_file(path, fmt, ctx, as_rows=True)


def _iter_file(path: str | Path, fmt: str, ctx: ParseContext | None, *, as_rows: bool) -> Iterator[Any]:
    p = Path(path)
    ctx = ctx if ctx is not None else ParseContext(source=str(p))
    if fmt not in FORMATS:
        raise TraceFormatError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed in finally; the generator streams lines
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot open ({exc.strerror})") from None
    try:
        head = fh.read(1)
        while head and head in b" \t\r\n":
            head = fh.read(1)
        if fmt == "otlp-proto" or (
            fmt == "auto" and (p.suffix.lower() in _PROTO_SUFFIXES or (head and head not in b"{[")) and head != b""
        ):
            fh.seek(0)
            proto = parse_otlp_proto(fh.read(), ctx)
            yield from (map(span_row, proto) if as_rows else proto)
            return
        if not head:
            ctx.problem("", "empty file")
            return
        fh.seek(0)
        first = fh.readline()
        rest_head = fh.readline()
        first_doc: Any = None
        try:
            first_doc = loads_json(first)
            ndjson = bool(rest_head.strip())
        except (json.JSONDecodeError, UnicodeDecodeError):
            ndjson = False
        if ndjson:
            yield from _parse_document(first_doc, fmt, ctx, "line 1: ", as_rows=as_rows)
            lineno = 2
            line = rest_head
            while line:
                if line.strip():
                    try:
                        doc = loads_json(line)
                    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                        col = exc.colno if isinstance(exc, json.JSONDecodeError) else 1
                        ctx.problem(f"{lineno}:{col}", f"invalid JSON line, skipped ({_reason(exc)})")
                    else:
                        yield from _parse_document(doc, fmt, ctx, f"line {lineno}: ", as_rows=as_rows)
                lineno += 1
                line = fh.readline()
            return
        fh.seek(0)
        raw = fh.read()
    finally:
        fh.close()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        ctx.problem(f"byte {exc.start}", "not UTF-8 text (use --format otlp-proto for protobuf files)")
        return
    try:
        doc = loads_json(raw, text)
    except json.JSONDecodeError as exc:
        ctx.problem(f"{exc.lineno}:{exc.colno}", f"invalid or truncated JSON ({exc.msg}); reading what precedes it")
        salvaged = _salvage(text, fmt, ctx)
        yield from (map(span_row, salvaged) if as_rows else salvaged)
        return
    yield from _parse_document(doc, fmt, ctx, "", as_rows=as_rows)


def _reason(exc: Exception) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
