"""Reading trace files: format detection, streaming, and salvaging what can be read from damaged files.

A file is either one JSON document (OTLP, Jaeger or Zipkin), JSON lines (one document per line, as the OpenTelemetry
collector's file exporter writes; read line by line, never whole), or a protobuf ``ExportTraceServiceRequest``.
Problems are recorded with file and position (``line:col`` or a JSON path); good spans still load. A truncated JSON
document is salvaged: every complete span object before the damage is read.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from tailscope.errors import TraceFormatError
from tailscope.records import Span
from tailscope.trace.ingest.common import ParseContext, loads_json, row_span
from tailscope.trace.ingest.jaeger import parse_jaeger_json, parse_zipkin_json
from tailscope.trace.ingest.otlp import parse_otlp_json, parse_otlp_proto

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


def parse_document(doc: Any, fmt: str, ctx: ParseContext, *, where: str = "") -> Iterator[dict[str, Any]]:
    """Store rows of one parsed JSON document in format ``fmt`` (``auto`` detects it)."""
    if fmt == "auto":
        detected = detect_json_format(doc)
        if detected is None:
            ctx.problem(where.rstrip("."), "unrecognised trace format (not OTLP JSON, Jaeger or Zipkin v2)")
            return
        fmt = detected
    if fmt == "otlp-json" or (fmt == "jaeger" and isinstance(doc, Mapping) and "result" in doc):
        yield from parse_otlp_json(doc, ctx, where=where)  # api_v3 is OTLP inside "result"
    elif fmt == "jaeger":
        yield from parse_jaeger_json(doc, ctx, where=where)
    elif fmt == "zipkin":
        yield from parse_zipkin_json(doc, ctx, where=where)
    else:
        raise TraceFormatError(f"{ctx.source}: format {fmt!r} is not a JSON format; use one of {', '.join(FORMATS)}")


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"{line}:{col}"


_SPANS_ARRAY = re.compile(r'"spans"\s*:\s*\[')
_SERVICE = re.compile(r'"(?:service\.name"\s*,\s*"value"\s*:\s*\{\s*"stringValue|serviceName)"\s*:\s*"([^"]*)"')


def _salvage(text: str, fmt: str, ctx: ParseContext) -> Iterator[dict[str, Any]]:
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
    """:func:`iter_file_rows` as :class:`~tailscope.records.Span` objects."""
    return map(row_span, iter_file_rows(path, fmt, ctx))


def iter_file_rows(path: str | Path, fmt: str = "auto", ctx: ParseContext | None = None) -> Iterator[dict[str, Any]]:
    """Stream the spans of one trace file as store rows; problems go to ``ctx.problems`` (good spans still load).

    Raises:
        TraceFormatError: when the file cannot be opened or the format name is unknown.
    """
    p = Path(path)
    ctx = ctx if ctx is not None else ParseContext(source=str(p))
    with open_trace_file(p, fmt) as fh:
        shape = sniff(fh, p, fmt)
        if shape == "lines":
            yield from line_rows(fh, 0, None, 1, fmt, ctx)
            return
        if shape in SHAPE_PROBLEMS:
            ctx.problem("", SHAPE_PROBLEMS[shape])
            return
        fh.seek(0)
        raw = fh.read()
    if shape == "proto":
        yield from parse_otlp_proto(raw, ctx)
    else:
        yield from document_rows(raw, fmt, ctx)


#: What a file of each unusable shape is reported as.
SHAPE_PROBLEMS = {
    "empty": "empty file",
    "text": "text that is not JSON (a JSON trace file starts with '{' or '['; name protobuf files *.pb)",
}


@contextlib.contextmanager
def open_trace_file(path: Path, fmt: str) -> Iterator[BinaryIO]:
    """The file opened for binary reading.

    Raises:
        TraceFormatError: when the format name is unknown or the file cannot be opened.
    """
    if fmt not in FORMATS:
        raise TraceFormatError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot open ({exc.strerror})") from None
    with fh:
        yield fh


def sniff(fh: BinaryIO, path: Path, fmt: str) -> str:
    """The shape of a trace file: ``proto``, ``lines`` (JSON lines), ``document`` (one JSON document), ``empty`` or
    ``text`` (neither JSON nor protobuf). Reads from the start; leaves the position anywhere."""
    fh.seek(0)
    head = fh.read(1)
    while head and head in b" \t\r\n":
        head = fh.read(1)
    if head == b"\xef":  # a UTF-8 byte-order mark before JSON
        bom = fh.read(2)
        head = fh.read(1) if bom == b"\xbb\xbf" else head
    proto_name = path.suffix.lower() in _PROTO_SUFFIXES
    if fmt == "otlp-proto" or (fmt == "auto" and head and (proto_name or head not in b"{[")):
        if fmt == "auto" and not proto_name and _is_text(path):
            return "text"
        return "proto"
    if not head:
        return "empty"
    fh.seek(0)
    end = _line_end(fh)
    if end is None or not _more_text(fh):
        return "document"  # one line (or one document followed by blank lines)
    fh.seek(0)
    try:
        loads_json(fh.read(end))
    except json.JSONDecodeError:
        return "document"  # a document spread over lines
    return "lines"


def _line_end(fh: BinaryIO, chunk: int = 1 << 20) -> int | None:
    """The offset after the first newline from the position (None when there is none), found chunk by chunk and
    left there: ``readline`` on a one-line document of hundreds of megabytes costs about a microsecond per span."""
    start = fh.tell()
    seen = 0
    while block := fh.read(chunk):
        cut = block.find(b"\n")
        if cut >= 0:
            fh.seek(start + seen + cut + 1)
            return start + seen + cut + 1
        seen += len(block)
    return None


def _more_text(fh: BinaryIO, chunk: int = 1 << 20) -> bool:
    """Whether anything but whitespace follows the position."""
    while block := fh.read(chunk):
        if block.strip():
            return True
    return False


def _is_text(path: Path) -> bool:
    """Whether the file starts like text (UTF-8 without control characters) rather than protobuf."""
    with open(path, "rb") as fh:
        sample = fh.read(4096)
    try:
        text = sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(sample) - 4:  # not just a character cut at the end of the sample
            return False
        text = sample[: exc.start].decode("utf-8")
    return all(ch.isprintable() or ch in "\t\r\n" for ch in text)


def line_rows(
    fh: BinaryIO, start: int, end: int | None, first_line: int, fmt: str, ctx: ParseContext
) -> Iterator[dict[str, Any]]:
    """Store rows of the JSON lines from byte ``start`` (a line start) up to byte ``end`` (None: the end of the file);
    ``first_line`` numbers the first of them in problem positions."""
    fh.seek(start)
    pos = start
    lineno = first_line
    while end is None or pos < end:
        line = fh.readline()
        if not line:
            break
        pos += len(line)
        if line.strip():
            try:
                doc = loads_json(line)
            except json.JSONDecodeError as exc:
                ctx.problem(f"{lineno}:{exc.colno}", f"invalid JSON line, skipped ({exc.msg})")
            else:
                yield from parse_document(doc, fmt, ctx, where=f"line {lineno}: ")
        lineno += 1


def document_rows(raw: bytes, fmt: str, ctx: ParseContext) -> Iterator[dict[str, Any]]:
    """Store rows of a file that holds one JSON document; a damaged one is salvaged (see :func:`_salvage`)."""
    try:
        doc = loads_json(raw)
    except json.JSONDecodeError as exc:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            ctx.problem(f"byte {bad.start}", "not UTF-8 text (use --format otlp-proto for protobuf files)")
            return
        ctx.problem(f"{exc.lineno}:{exc.colno}", f"invalid or truncated JSON ({exc.msg}); reading what precedes it")
        yield from _salvage(text, fmt, ctx)
        return
    yield from parse_document(doc, fmt, ctx)
