"""OTLP traces: the JSON encoding (incl. the legacy ``instrumentationLibrarySpans``) and protobuf.

JSON follows the OTLP/JSON mapping: ids are hex (base64 from generic protobuf-JSON encoders is accepted too), int64
times are decimal strings or numbers, enums are ints or names. Protobuf uses the ``opentelemetry-proto`` package (a
core dependency).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tailscope.errors import TraceFormatError
from tailscope.trace.ingest.common import (
    KIND_BY_INT,
    STATUS_BY_INT,
    ParseContext,
    make_row,
    parse_int,
    parse_kind,
    parse_status,
)


def any_value(v: Any) -> Any:
    """An OTLP ``AnyValue`` JSON object as a plain Python value."""
    if not isinstance(v, Mapping):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return parse_int(v["intValue"])
    if "doubleValue" in v:
        d = v["doubleValue"]
        return float(d) if isinstance(d, int | float | str) else None
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [any_value(x) for x in (v["arrayValue"] or {}).get("values", []) or []]
    if "kvlistValue" in v:
        return attributes_of((v["kvlistValue"] or {}).get("values"))
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def attributes_of(items: Any) -> dict[str, Any]:
    """OTLP ``[{key, value}]`` attributes as a dict (malformed entries skipped)."""
    out: dict[str, Any] = {}
    if type(items) is not list:
        return out
    for kv in items:
        if type(kv) is dict and "key" in kv:
            v = kv.get("value")
            # fast path for the common case; any_value handles the rest
            out[str(kv["key"])] = v["stringValue"] if type(v) is dict and "stringValue" in v else any_value(v)
    return out


def otlp_span_lists(doc: Any, ctx: ParseContext, where: str = "") -> Iterator[tuple[str, str, list[Any]]]:
    """Walk an ``ExportTraceServiceRequest`` (also ``{"result": {...}}`` from Jaeger api_v3): ``(array path,
    service, spans list)`` per scope; problems with the enclosing structure are recorded."""
    if isinstance(doc, Mapping) and "result" in doc and "resourceSpans" not in doc:
        doc = doc["result"]
        where = f"{where}result." if where else "result."
    if not isinstance(doc, Mapping) or not isinstance(doc.get("resourceSpans", []), list):
        ctx.problem(where.rstrip("."), "not an OTLP traces document (no resourceSpans list)")
        return
    for r, rs in enumerate(doc.get("resourceSpans") or []):
        if not isinstance(rs, Mapping):
            ctx.problem(f"{where}resourceSpans[{r}]", "not an object, skipped")
            continue
        resource = attributes_of((rs.get("resource") or {}).get("attributes"))
        service = str(resource.get("service.name") or "")
        scopes = rs.get("scopeSpans")
        key = "scopeSpans"
        if scopes is None:
            scopes, key = rs.get("instrumentationLibrarySpans"), "instrumentationLibrarySpans"
        for s_i, scope in enumerate(scopes or []):
            spans = scope.get("spans") if isinstance(scope, Mapping) else None
            if isinstance(spans, list):
                yield f"{where}resourceSpans[{r}].{key}[{s_i}].spans", service, spans


def _links(sp: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    raw_links = sp.get("links")
    if not raw_links:
        return ()
    return tuple((str(ln.get("traceId", "")), str(ln.get("spanId", ""))) for ln in raw_links if isinstance(ln, Mapping))


def otlp_span_rows(
    spans: list[Any], service: str, prefix: str, ctx: ParseContext, first: int = 0
) -> Iterator[dict[str, Any]]:
    """Store rows of the span objects of one scope; ``first`` is the index of ``spans[0]`` in its array (a piece of
    a large document starts inside it), used in problem positions."""
    for k, sp in enumerate(spans, first):
        if type(sp) is not dict:
            ctx.problem(f"{prefix}[{k}]", "span is not an object, skipped")
            continue
        get = sp.get
        status = get("status")
        code = status.get("code") if type(status) is dict else None
        kind = get("kind")
        row = make_row(
            ctx,
            (prefix, k),
            get("traceId"),
            get("spanId"),
            get("parentSpanId"),
            get("name"),
            parse_int(get("startTimeUnixNano")),
            parse_int(get("endTimeUnixNano")),
            service,
            KIND_BY_INT.get(kind, "INTERNAL") if type(kind) is int else parse_kind(kind),
            STATUS_BY_INT.get(code, "UNSET") if type(code) is int else parse_status(code),
            attributes_of(get("attributes")),
            _links(sp) if "links" in sp else (),
        )
        if row is not None:
            yield row


def parse_otlp_json(doc: Any, ctx: ParseContext, *, where: str = "") -> Iterator[dict[str, Any]]:
    """Store rows of one ``ExportTraceServiceRequest`` JSON document (also ``{"result": {...}}`` from Jaeger
    api_v3); see :func:`~tailscope.trace.ingest.common.make_row`."""
    for prefix, service, spans in otlp_span_lists(doc, ctx, where):
        yield from otlp_span_rows(spans, service, prefix, ctx)


def _pb_value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_pb_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def otlp_proto_request(data: bytes, ctx: ParseContext) -> Any:
    """A protobuf ``ExportTraceServiceRequest`` message, or None with the problem recorded.

    Raises:
        TraceFormatError: when ``opentelemetry-proto`` is not installed.
    """
    try:
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError:  # pragma: no cover - depends on the environment
        raise TraceFormatError(
            f"{ctx.source}: OTLP protobuf needs opentelemetry-proto (a tailscope dependency): reinstall tailscope"
        ) from None
    try:
        return ExportTraceServiceRequest.FromString(data)
    except (DecodeError, ValueError) as exc:
        ctx.problem(f"byte 0..{len(data)}", f"not a protobuf ExportTraceServiceRequest ({exc})")
        return None


def proto_span_lists(req: Any) -> Iterator[tuple[str, str, Any]]:
    """``(array path, service, repeated spans)`` per scope of a protobuf request."""
    for r, rs in enumerate(req.resource_spans):
        service = ""
        for kv in rs.resource.attributes:
            if kv.key == "service.name":
                service = str(_pb_value(kv.value) or "")
        for s_i, scope in enumerate(rs.scope_spans):
            yield f"resource_spans[{r}].scope_spans[{s_i}].spans", service, scope.spans


def proto_span_rows(
    spans: Any, service: str, prefix: str, ctx: ParseContext, first: int = 0
) -> Iterator[dict[str, Any]]:
    """Store rows of the protobuf spans of one scope (``first`` as in :func:`otlp_span_rows`)."""
    for k, sp in enumerate(spans, first):
        attrs = {kv.key: _pb_value(kv.value) for kv in sp.attributes}
        row = make_row(
            ctx,
            (prefix, k),
            sp.trace_id or None,
            sp.span_id or None,
            sp.parent_span_id or None,
            sp.name,
            sp.start_time_unix_nano,
            sp.end_time_unix_nano,
            service,
            KIND_BY_INT.get(sp.kind, "INTERNAL"),
            STATUS_BY_INT.get(sp.status.code, "UNSET"),
            attrs,
            tuple((ln.trace_id.hex(), ln.span_id.hex()) for ln in sp.links),
        )
        if row is not None:
            yield row


def parse_otlp_proto(data: bytes, ctx: ParseContext) -> Iterator[dict[str, Any]]:
    """Store rows of one protobuf-encoded ``ExportTraceServiceRequest``.

    Raises:
        TraceFormatError: when ``opentelemetry-proto`` is not installed.
    """
    req = otlp_proto_request(data, ctx)
    if req is not None:
        for prefix, service, spans in proto_span_lists(req):
            yield from proto_span_rows(spans, service, prefix, ctx)
