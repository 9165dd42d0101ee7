"""OTLP traces: the JSON encoding (incl. the legacy ``instrumentationLibrarySpans``) and protobuf.

JSON follows the OTLP/JSON mapping: ids are hex (base64 from generic protobuf-JSON encoders is accepted too), int64
times are decimal strings or numbers, enums are ints or names. Protobuf needs the ``opentelemetry-proto`` package
(``pip install 'tailscope[trace]'``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tailscope.errors import TraceFormatError
from tailscope.records import Span
from tailscope.trace.ingest.common import (
    KIND_BY_INT,
    STATUS_BY_INT,
    ParseContext,
    id_cache,
    make_row,
    make_span,
    parse_int,
    parse_kind,
    parse_status,
)
from tailscope.trace.layers import classify


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


def _otlp_spans(doc: Any, ctx: ParseContext, where: str) -> Iterator[tuple[str, int, dict[str, Any], str]]:
    """Walk an ``ExportTraceServiceRequest``: ``(array path, index, span object, service)`` per span object."""
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
            if not isinstance(spans, list):
                continue
            prefix = f"{where}resourceSpans[{r}].{key}[{s_i}].spans"
            for k, sp in enumerate(spans):
                if type(sp) is not dict:
                    ctx.problem(f"{prefix}[{k}]", "span is not an object, skipped")
                    continue
                yield prefix, k, sp, service


def _links(sp: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    raw_links = sp.get("links")
    if not raw_links:
        return ()
    return tuple((str(ln.get("traceId", "")), str(ln.get("spanId", ""))) for ln in raw_links if isinstance(ln, Mapping))


def parse_otlp_json(doc: Any, ctx: ParseContext, *, where: str = "") -> Iterator[Span]:
    """Spans of one ``ExportTraceServiceRequest`` JSON document (also ``{"result": {...}}`` from Jaeger api_v3)."""
    for prefix, k, sp, service in _otlp_spans(doc, ctx, where):
        status = sp.get("status")
        span = make_span(
            ctx,
            (prefix, k),
            trace_id=sp.get("traceId"),
            span_id=sp.get("spanId"),
            parent_id=sp.get("parentSpanId"),
            name=sp.get("name"),
            start_ns=parse_int(sp.get("startTimeUnixNano")),
            end_ns=parse_int(sp.get("endTimeUnixNano")),
            service=service,
            kind=parse_kind(sp.get("kind")),
            status=parse_status(status.get("code") if type(status) is dict else None),
            attributes=attributes_of(sp.get("attributes")),
            links=_links(sp),
        )
        if span is not None:
            yield span


def otlp_json_rows(doc: Any, ctx: ParseContext, *, where: str = "") -> Iterator[dict[str, Any]]:
    """What :func:`parse_otlp_json` yields, as store batch rows (:func:`~tailscope.trace.ingest.common.make_row`).

    The ingest fast path: no :class:`~tailscope.records.Span` is built only to be turned into a row, and a span whose
    ids are already known and whose times are plain integers is made into a row inline; anything else (a new or bad
    id, a missing or odd time) goes through :func:`~tailscope.trace.ingest.common.make_row`, which validates, reports
    and fills the id caches.
    """
    trace_ids = id_cache(32)
    span_ids = id_cache(16)
    rules = ctx.rules
    for prefix, k, sp, service in _otlp_spans(doc, ctx, where):
        get = sp.get
        t, s, p = get("traceId"), get("spanId"), get("parentSpanId")
        st, en = get("startTimeUnixNano"), get("endTimeUnixNano")
        tid = trace_ids.get(t) if type(t) is str else None
        sid = span_ids.get(s) if type(s) is str else None
        pid = None if p is None else span_ids.get(p, "") if type(p) is str else ""
        try:
            start = int(st) if type(st) is str else st if type(st) is int else None
            end = int(en) if type(en) is str else en if type(en) is int else None
        except ValueError:
            start = end = None
        status = get("status")
        code = status.get("code") if type(status) is dict else None
        kind_v = get("kind")
        kind = KIND_BY_INT.get(kind_v, "INTERNAL") if type(kind_v) is int else parse_kind(kind_v)
        status_s = STATUS_BY_INT.get(code, "UNSET") if type(code) is int else parse_status(code)
        attrs = attributes_of(get("attributes"))
        if tid is None or sid is None or pid == "" or start is None or end is None or end < start:
            row = make_row(
                ctx,
                (prefix, k),
                t,
                s,
                p,
                get("name"),
                parse_int(st),
                parse_int(en),
                service,
                kind,
                status_s,
                attrs,
                _links(sp),
            )
            if row is not None:
                yield row
            continue
        name = get("name")
        name_s = name if type(name) is str else str(name) if name is not None else ""
        resend = attrs.get("http.request.resend_count") if attrs else None
        links = _links(sp)
        yield {
            "trace_id": tid,
            "span_id": sid,
            "parent_id": pid,
            "name": name_s,
            "start_ns": start,
            "end_ns": end,
            "service": service,
            "kind": kind,
            "status": status_s,
            "layer": classify(name_s, kind, attrs, service=service, rules=rules),
            "follows_from": False,
            "resend": resend if isinstance(resend, int) else None,
            "attributes": attrs or None,
            "links": links or None,
        }


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


def parse_otlp_proto(data: bytes, ctx: ParseContext) -> Iterator[Span]:
    """Spans of one protobuf-encoded ``ExportTraceServiceRequest``.

    Raises:
        TraceFormatError: when ``opentelemetry-proto`` is not installed.
    """
    try:
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError:  # pragma: no cover - depends on the environment
        raise TraceFormatError(
            f"{ctx.source}: OTLP protobuf needs the opentelemetry-proto package: pip install 'tailscope[trace]'"
        ) from None
    try:
        req = ExportTraceServiceRequest.FromString(data)
    except (DecodeError, ValueError) as exc:
        ctx.problem(f"byte 0..{len(data)}", f"not a protobuf ExportTraceServiceRequest ({exc})")
        return
    for r, rs in enumerate(req.resource_spans):
        resource = {kv.key: _pb_value(kv.value) for kv in rs.resource.attributes}
        service = str(resource.get("service.name") or "")
        for s_i, scope in enumerate(rs.scope_spans):
            for k, sp in enumerate(scope.spans):
                attrs = {kv.key: _pb_value(kv.value) for kv in sp.attributes}
                span = make_span(
                    ctx,
                    f"resource_spans[{r}].scope_spans[{s_i}].spans[{k}]",
                    trace_id=sp.trace_id or None,
                    span_id=sp.span_id or None,
                    parent_id=sp.parent_span_id or None,
                    name=sp.name,
                    start_ns=int(sp.start_time_unix_nano),
                    end_ns=int(sp.end_time_unix_nano),
                    service=service,
                    kind=parse_kind(int(sp.kind)),
                    status=parse_status(int(sp.status.code)),
                    attributes=attrs,
                    links=tuple((ln.trace_id.hex(), ln.span_id.hex()) for ln in sp.links),
                )
                if span is not None:
                    yield span
