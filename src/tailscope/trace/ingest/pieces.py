"""Cutting trace files into pieces that worker processes parse independently.

Whatever its shape, a large file is cut so that every CPU parses a share of it:

* **JSON lines** are cut at line ends into byte ranges; each piece knows the number of its first line.
* **One large OTLP JSON document** is not parsed here: its span arrays are found in its bytes
  (:mod:`tailscope.trace.ingest.rawcut`) and cut into byte slices of whole span objects; each slice knows where it
  lies in the document (``resourceSpans[0].scopeSpans[0].spans`` and the index of its first element), so problems
  are reported at the same positions as when the document is parsed whole. A slice that does not parse sends the
  whole file back to the ordinary reader (:class:`DamagedPiece`).
* **One large Jaeger query-API document** (``{"data": [trace, …]}``) is cut the same way, from its bytes, into
  slices of whole trace objects (each keeps its ``processes`` map); a damaged slice sends the file back too.
  A document of another shape (Jaeger api_v3's ``result``, or one the byte cut does not take) is parsed once here,
  and its trace list or span arrays are cut into slices re-encoded with orjson.
* **OTLP protobuf** is decoded once here, and each scope's spans are cut into slices re-serialized as ``ScopeSpans``
  messages.

Small files, Zipkin files (a shared server span may sit anywhere in the list) and files that do not parse whole
become one piece, read by :func:`~tailscope.trace.ingest.files.iter_file_rows` like any file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

from tailscope.trace.ingest.common import ParseContext, loads_json
from tailscope.trace.ingest.files import detect_json_format, iter_file_rows, line_rows, open_trace_file, sniff
from tailscope.trace.ingest.jaeger import jaeger_trace_rows, jaeger_traces
from tailscope.trace.ingest.otlp import (
    otlp_proto_request,
    otlp_span_lists,
    otlp_span_rows,
    proto_span_lists,
    proto_span_rows,
)
from tailscope.trace.ingest.rawcut import looks_like_jaeger, marker_index, span_arrays, trace_array

_Cut = TypeVar("_Cut")

#: Files smaller than this are one piece (cutting costs more than it saves).
SPLIT_MIN_BYTES = 8_000_000

#: One slice of a span array: (array path, service, index of the first element, encoded elements).
Group = tuple[str, str, int, bytes]


@dataclass(frozen=True, slots=True)
class Piece:
    """A share of one trace file that a worker parses on its own.

    Attributes:
        path: the file (problems name it).
        fmt: the format the user asked for (``auto`` or a name).
        kind: ``file`` (the whole file), ``lines`` (a byte range of JSON lines), ``otlp-raw`` (byte slices of an
            OTLP JSON document's span arrays), ``jaeger-raw`` (byte slices of a Jaeger document's trace list),
            ``otlp``/``jaeger`` (re-encoded slices of a JSON document's span
            arrays or trace list) or ``proto`` (slices of a protobuf request's scopes).
        start: ``lines``: the first byte.
        end: ``lines``: the byte after the last one.
        first_line: ``lines``: the number of the first line.
        groups: ``otlp``/``jaeger``/``proto``: the slices.
    """

    path: str
    fmt: str
    kind: str = "file"
    start: int = 0
    end: int = 0
    first_line: int = 1
    groups: tuple[Group, ...] = ()


class DamagedPiece(Exception):
    """A byte slice of a document's span array is not valid JSON: read the whole file with the ordinary reader
    (it reports the damage at its position and salvages what precedes it)."""


def piece_rows(piece: Piece, ctx: ParseContext) -> Iterator[dict[str, Any]]:
    """Store rows of one piece (problems go to ``ctx``).

    Raises:
        DamagedPiece: an ``otlp-raw``/``jaeger-raw`` piece whose slices do not parse (before any row is yielded).
    """
    if piece.kind in ("otlp-raw", "jaeger-raw"):
        try:  # every slice first: a damaged piece yields nothing
            arrays = [loads_json(data) for _, _, _, data in piece.groups]
        except json.JSONDecodeError:
            raise DamagedPiece(piece.path) from None
        for (prefix, service, first, _), elements in zip(piece.groups, arrays, strict=True):
            if piece.kind == "otlp-raw":
                yield from otlp_span_rows(elements, service, prefix, ctx, first)
            else:
                yield from jaeger_trace_rows(elements, prefix, ctx, first)
    elif piece.kind == "file":
        yield from iter_file_rows(piece.path, piece.fmt, ctx)
    elif piece.kind == "lines":
        with open_trace_file(Path(piece.path), piece.fmt) as fh:
            yield from line_rows(fh, piece.start, piece.end, piece.first_line, piece.fmt, ctx)
    elif piece.kind == "otlp":
        for prefix, service, first, data in piece.groups:
            yield from otlp_span_rows(orjson.loads(data), service, prefix, ctx, first)
    elif piece.kind == "jaeger":
        for base, _, first, data in piece.groups:
            yield from jaeger_trace_rows(orjson.loads(data), base, ctx, first)
    else:
        from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans

        for prefix, service, first, data in piece.groups:
            yield from proto_span_rows(ScopeSpans.FromString(data).spans, service, prefix, ctx, first)


def split_file(path: str, fmt: str, parts: int, ctx: ParseContext) -> Iterator[Piece]:
    """Cut one file into about ``parts`` pieces (one piece when it is small or cannot be cut).

    Pieces are yielded as soon as they are cut, so workers can start on the first while later ones are made.
    Problems found in the parts of a document that are parsed here (its structure around the span arrays) go to
    ``ctx``; problems inside the pieces are found by whoever parses them.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError:
        size = 0
    if parts <= 1 or size < SPLIT_MIN_BYTES:
        yield Piece(path, fmt)
        return
    with open_trace_file(p, fmt) as fh:
        shape = sniff(fh, p, fmt)
        if shape == "lines":
            yield from _line_pieces(fh, path, fmt, size, parts)
            return
        if shape not in ("document", "proto"):
            yield Piece(path, fmt)
            return
        fh.seek(0)
        raw = fh.read()
    if shape == "proto":
        yield from _proto_pieces(raw, path, fmt, parts, ctx)
    else:
        yield from _document_pieces(raw, path, fmt, parts, ctx)


def _line_pieces(fh: Any, path: str, fmt: str, size: int, parts: int) -> Iterator[Piece]:
    """Byte ranges of about ``size / parts`` that end at line ends."""
    start, first_line = 0, 1
    for k in range(1, parts + 1):
        if k == parts:
            end = size
        else:
            fh.seek(max(start, size * k // parts))
            fh.readline()  # to the end of the line the cut falls in
            end = fh.tell()
        if end > start:
            fh.seek(start)
            lines = fh.read(end - start).count(b"\n")
            yield Piece(path, fmt, "lines", start, end, first_line)
            start, first_line = end, first_line + lines
        if start >= size:
            return


def _skeleton(found: tuple[bytes, _Cut] | None, fmt: str, want: str) -> tuple[Any, _Cut] | None:
    """A raw scan's skeleton parsed, with what the scan cut out of it; None when there was no scan, or the skeleton
    is not JSON of the format ``want`` (``fmt``, or detected when ``auto``)."""
    if found is None:
        return None
    skeleton, cut = found
    try:
        doc = loads_json(skeleton)
    except json.JSONDecodeError:
        return None
    if (detect_json_format(doc) if fmt == "auto" else fmt) != want:
        return None
    return doc, cut


def _raw_otlp_pieces(raw: bytes, path: str, fmt: str, parts: int, ctx: ParseContext) -> list[Piece] | None:
    """Pieces of byte slices of an OTLP JSON document's span arrays (see :mod:`~tailscope.trace.ingest.rawcut`);
    None when the document is not of that shape (then it is parsed here)."""
    found = _skeleton(span_arrays(raw), fmt, "otlp-json")
    if found is None:
        return None
    doc, raw_arrays = found
    walk = ParseContext(source=ctx.source, rules=ctx.rules, max_problems=ctx.max_problems)
    arrays: list[tuple[str, str, Any]] = []
    for prefix, service, spans in otlp_span_lists(doc, walk):
        k = marker_index(spans)
        if k is None:
            return None  # a span array the scan did not find: read the document whole
        arrays.append((prefix, service, raw_arrays[k]))
    for problem in walk.problems:
        ctx.problem(problem.position, problem.message)
    ctx.dropped += walk.dropped - len(walk.problems)
    return list(_cut("otlp-raw", arrays, path, fmt, parts, bytes))


def _raw_jaeger_pieces(raw: bytes, path: str, fmt: str, parts: int, ctx: ParseContext) -> list[Piece] | None:
    """Pieces of byte slices of a Jaeger query-API document's trace list (see
    :func:`~tailscope.trace.ingest.rawcut.trace_array`); None when the document is not of that shape."""
    found = _skeleton(trace_array(raw), fmt, "jaeger")
    if found is None:
        return None
    doc, traces = found
    if not isinstance(doc, dict) or "result" in doc:
        return None  # OTLP (api_v3's "result" included): not this path
    listed = jaeger_traces(doc, ParseContext(source=ctx.source))  # no problem is possible when it is taken
    if listed is None or marker_index(listed[1]) != 0:
        return None  # the skeleton's "data" is not the list the scan found (a duplicate key, say)
    return list(_cut("jaeger-raw", [(listed[0], "", traces)], path, fmt, parts, bytes))


def _document_pieces(raw: bytes, path: str, fmt: str, parts: int, ctx: ParseContext) -> Iterator[Piece]:
    if fmt in ("auto", "jaeger") and looks_like_jaeger(raw):
        cut = _raw_jaeger_pieces(raw, path, fmt, parts, ctx)
        if cut is not None:
            yield from cut
            return
    if fmt in ("auto", "otlp-json"):
        cut = _raw_otlp_pieces(raw, path, fmt, parts, ctx)
        if cut is not None:
            yield from cut
            return
    try:
        doc = loads_json(raw)
    except json.JSONDecodeError:
        yield Piece(path, fmt)  # reported (and salvaged) by whoever reads the whole file
        return
    del raw
    kind = detect_json_format(doc) if fmt == "auto" else fmt
    if kind == "otlp-json" or (kind == "jaeger" and isinstance(doc, dict) and "result" in doc):
        arrays = [(prefix, service, spans) for prefix, service, spans in otlp_span_lists(doc, ctx)]
        yield from _cut("otlp", arrays, path, fmt, parts, orjson.dumps)
    elif kind == "jaeger":
        found = jaeger_traces(doc, ctx)
        if found is not None:
            yield from _cut("jaeger", [(found[0], "", found[1])], path, fmt, parts, orjson.dumps)
    else:
        yield Piece(path, fmt)  # Zipkin, or a shape the parsers report on


def _proto_pieces(raw: bytes, path: str, fmt: str, parts: int, ctx: ParseContext) -> Iterator[Piece]:
    req = otlp_proto_request(raw, ctx)
    if req is None:
        return
    del raw
    from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans

    def encode(spans: Any) -> bytes:
        scope = ScopeSpans()
        scope.spans.extend(spans)
        return scope.SerializeToString()  # type: ignore[no-any-return]

    yield from _cut("proto", list(proto_span_lists(req)), path, fmt, parts, encode)


def _cut(
    kind: str, arrays: list[tuple[str, str, Any]], path: str, fmt: str, parts: int, encode: Any
) -> Iterator[Piece]:
    """Pieces of about equal element counts from the arrays, in document order; a piece may hold slices of several
    small arrays."""
    total = sum(len(a) for _, _, a in arrays)
    share = max(1, -(-total // parts))
    groups: list[Group] = []
    room = share
    for prefix, service, elements in arrays:
        at = 0
        while at < len(elements):
            take = min(room, len(elements) - at)
            groups.append((prefix, service, at, encode(elements[at : at + take])))
            at += take
            room -= take
            if room == 0:
                yield Piece(path, fmt, kind, groups=tuple(groups))
                groups, room = [], share
    if groups:
        yield Piece(path, fmt, kind, groups=tuple(groups))
