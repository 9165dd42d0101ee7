"""Jaeger JSON (the query API's ``{"data": [{traceID, spans, processes}]}``, times in µs) and Zipkin v2 JSON.

Jaeger: the parent is the first ``CHILD_OF`` reference (else the first reference, marked follows-from; else the
legacy ``parentSpanID``); ``span.kind`` and ``error`` tags give kind and status. api_v3 responses
(``{"result": {"resourceSpans": …}}``) are OTLP and handled by :mod:`tailscope.trace.ingest.otlp`.

Zipkin v2: a list of spans with ``timestamp``/``duration`` in µs. A server span that shares its id with the client
span (``shared: true``, B3 single-host-span style) gets the id ``<id>-srv`` and becomes the client span's child;
children recorded by the server's service are re-parented onto it, so network time = client − server.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tailscope.records import Span
from tailscope.trace.ingest.common import ParseContext, make_span, normalize_id, parse_int, parse_kind

_REF_CHILD = "CHILD_OF"


def _tags(tags: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(tags, list):
        return out
    for t in tags:
        if isinstance(t, Mapping) and "key" in t:
            value = t.get("value")
            if t.get("type") in ("int64", "INT64") and isinstance(value, str):
                value = parse_int(value)
            out[str(t["key"])] = value
    return out


def _status(tags: Mapping[str, Any]) -> str:
    err = tags.get("error")
    if err is True or (isinstance(err, str) and err.lower() == "true"):
        return "ERROR"
    code = str(tags.get("otel.status_code") or "").upper()
    return code if code in ("OK", "ERROR") else "UNSET"


def parse_jaeger_json(doc: Any, ctx: ParseContext, *, where: str = "") -> Iterator[Span]:
    """Spans of a Jaeger query-API JSON document (``{"data": [...]}``, a list of traces, or one trace object)."""
    if isinstance(doc, Mapping) and "data" in doc:
        traces, base = doc["data"], f"{where}data"
    elif isinstance(doc, list):
        traces, base = doc, where or "$"
    else:
        traces, base = [doc], where or "$"
    if not isinstance(traces, list):
        ctx.problem(base, "expected a list of traces")
        return
    for t_i, trace in enumerate(traces):
        tpos = f"{base}[{t_i}]"
        if not isinstance(trace, Mapping) or not isinstance(trace.get("spans"), list):
            ctx.problem(tpos, "not a Jaeger trace (no spans list), skipped")
            continue
        procs = trace.get("processes")
        processes: Mapping[str, Any] = procs if isinstance(procs, Mapping) else {}
        for k, sp in enumerate(trace["spans"]):
            pos = f"{tpos}.spans[{k}]"
            if not isinstance(sp, Mapping):
                ctx.problem(pos, "span is not an object, skipped")
                continue
            tags = _tags(sp.get("tags"))
            proc = sp.get("process") or processes.get(str(sp.get("processID")), {})
            service = str(proc.get("serviceName", "")) if isinstance(proc, Mapping) else ""
            refs = [r for r in sp.get("references") or [] if isinstance(r, Mapping)]
            parent, follows = sp.get("parentSpanID"), False
            child_of = [r for r in refs if str(r.get("refType", "")).upper() == _REF_CHILD]
            if child_of:
                parent = child_of[0].get("spanID")
            elif refs:
                parent, follows = refs[0].get("spanID"), True
            start_us = parse_int(sp.get("startTime"))
            dur_us = parse_int(sp.get("duration"))
            start = start_us * 1000 if start_us is not None else None
            end = start + dur_us * 1000 if start is not None and dur_us is not None else None
            span = make_span(
                ctx,
                pos,
                trace_id=sp.get("traceID") or trace.get("traceID"),
                span_id=sp.get("spanID"),
                parent_id=parent,
                name=sp.get("operationName"),
                start_ns=start,
                end_ns=end,
                service=service,
                kind=parse_kind(tags.get("span.kind")),
                status=_status(tags),
                attributes=tags,
                links=tuple((str(r.get("traceID", "")), str(r.get("spanID", ""))) for r in refs[1:]),
                follows_from=follows,
            )
            if span is not None:
                yield span


def parse_zipkin_json(doc: Any, ctx: ParseContext, *, where: str = "") -> Iterator[Span]:
    """Spans of a Zipkin v2 JSON list (or a list of such lists, as the Zipkin API returns for several traces)."""
    if not isinstance(doc, list):
        ctx.problem(where or "$", "Zipkin v2 JSON must be a list of spans")
        return
    flat: list[tuple[str, Any]] = []
    for i, item in enumerate(doc):
        if isinstance(item, list):
            flat.extend((f"{where or '$'}[{i}][{j}]", sp) for j, sp in enumerate(item))
        else:
            flat.append((f"{where or '$'}[{i}]", item))
    shared: dict[tuple[str, str], str] = {}  # (trace, id) → service of the shared server span
    for _, sp in flat:
        if isinstance(sp, Mapping) and sp.get("shared") and str(sp.get("kind", "")).upper() == "SERVER":
            key = (str(normalize_id(sp.get("traceId"), width=32)), str(normalize_id(sp.get("id"), width=16)))
            shared[key] = str((sp.get("localEndpoint") or {}).get("serviceName", ""))
    for pos, sp in flat:
        if not isinstance(sp, Mapping):
            ctx.problem(pos, "span is not an object, skipped")
            continue
        tid = normalize_id(sp.get("traceId"), width=32)
        sid = normalize_id(sp.get("id"), width=16)
        pid = normalize_id(sp.get("parentId"), width=16)
        service = str((sp.get("localEndpoint") or {}).get("serviceName", ""))
        kind = parse_kind(sp.get("kind"))
        tags = dict(sp.get("tags") or {}) if isinstance(sp.get("tags"), Mapping) else {}
        if (str(tid), str(sid)) in shared and kind == "SERVER" and sp.get("shared"):
            pid, sid = sid, f"{sid}-srv"
        elif pid is not None and (str(tid), pid) in shared and shared[(str(tid), pid)] == service:
            pid = f"{pid}-srv"
        ts = parse_int(sp.get("timestamp"))
        dur = parse_int(sp.get("duration"))
        start = ts * 1000 if ts is not None else None
        end = start + (dur or 0) * 1000 if start is not None else None
        err = "error" in tags
        span = make_span(
            ctx,
            pos,
            trace_id=tid,
            span_id=sid,
            parent_id=pid,
            name=sp.get("name"),
            start_ns=start,
            end_ns=end,
            service=service,
            kind=kind,
            status="ERROR" if err else "UNSET",
            attributes=tags,
        )
        if span is not None:
            yield span
