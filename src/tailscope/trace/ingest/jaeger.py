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

from tailscope.trace.ingest.common import ParseContext, make_row, normalize_id, parse_int, parse_kind

_REF_CHILD = "CHILD_OF"


def _tags(tags: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(tags, list):
        return out
    for t in tags:  # parsed JSON: objects are dicts (a dict check is much cheaper than an ABC one)
        if type(t) is dict and "key" in t:
            value = t.get("value")
            if type(value) is str and t.get("type") in ("int64", "INT64"):
                value = parse_int(value)
            key = t["key"]
            out[key if type(key) is str else str(key)] = value
    return out


def _status(tags: Mapping[str, Any]) -> str:
    err = tags.get("error")
    if err is True or (isinstance(err, str) and err.lower() == "true"):
        return "ERROR"
    code = str(tags.get("otel.status_code") or "").upper()
    return code if code in ("OK", "ERROR") else "UNSET"


def jaeger_traces(doc: Any, ctx: ParseContext, where: str = "") -> tuple[str, list[Any]] | None:
    """The traces list of a Jaeger query-API document (``{"data": [...]}``, a list of traces, or one trace object)
    and its JSON path; None with the problem recorded when there is none."""
    if isinstance(doc, Mapping) and "data" in doc:
        traces, base = doc["data"], f"{where}data"
    elif isinstance(doc, list):
        traces, base = doc, where or "$"
    else:
        traces, base = [doc], where or "$"
    if not isinstance(traces, list):
        ctx.problem(base, "expected a list of traces")
        return None
    return base, traces


def jaeger_trace_rows(traces: list[Any], base: str, ctx: ParseContext, first: int = 0) -> Iterator[dict[str, Any]]:
    """Store rows of Jaeger trace objects; ``first`` is the index of ``traces[0]`` in its array (a piece of a large
    document starts inside it), used in problem positions."""
    for t_i, trace in enumerate(traces, first):
        tpos = f"{base}[{t_i}]"
        if not isinstance(trace, Mapping) or not isinstance(trace.get("spans"), list):
            ctx.problem(tpos, "not a Jaeger trace (no spans list), skipped")
            continue
        procs = trace.get("processes")
        processes: Mapping[str, Any] = procs if isinstance(procs, Mapping) else {}
        services: dict[Any, str] = {}  # processID → service, per trace (its processes map)
        trace_id = trace.get("traceID")
        where = f"{tpos}.spans"
        for k, sp in enumerate(trace["spans"]):
            if type(sp) is not dict:
                ctx.problem(f"{where}[{k}]", "span is not an object, skipped")
                continue
            row = _jaeger_row(sp, trace_id, processes, services, (where, k), ctx)
            if row is not None:
                yield row


#: :func:`parse_kind` of the ``span.kind`` tag values seen (a handful of strings).
_KIND_OF: dict[str, str] = {}


def _service(sp: dict[str, Any], processes: Mapping[str, Any], services: dict[Any, str]) -> str:
    """The span's service: its inline ``process``, else its ``processID``'s entry of the trace's ``processes``
    (looked up once per processID and trace)."""
    proc = sp.get("process")
    if proc:
        return str(proc.get("serviceName", "")) if type(proc) is dict else ""
    pid = sp.get("processID")
    if type(pid) is str:
        got = services.get(pid)
        if got is not None:
            return got
    proc = processes.get(str(pid), {})
    service = str(proc.get("serviceName", "")) if type(proc) is dict else ""
    if type(pid) is str:
        services[pid] = service
    return service


def _jaeger_row(
    sp: dict[str, Any],
    trace_id: Any,
    processes: Mapping[str, Any],
    services: dict[Any, str],
    pos: tuple[str, int],
    ctx: ParseContext,
) -> dict[str, Any] | None:
    get = sp.get
    tags = _tags(get("tags"))
    service = _service(sp, processes, services)
    raw_refs = get("references")
    links: tuple[tuple[str, str], ...] = ()
    follows = False
    if not raw_refs:
        parent = get("parentSpanID")
    elif (
        type(raw_refs) is list
        and len(raw_refs) == 1
        and type(ref := raw_refs[0]) is dict
        and ref.get("refType") == _REF_CHILD
    ):  # the common case: one CHILD_OF reference
        parent = ref.get("spanID")
    else:
        refs = [r for r in raw_refs if type(r) is dict]
        parent = get("parentSpanID")
        if refs:
            child_of = [r for r in refs if str(r.get("refType", "")).upper() == _REF_CHILD]
            if child_of:
                parent = child_of[0].get("spanID")
            else:
                parent, follows = refs[0].get("spanID"), True
            links = tuple((str(r.get("traceID", "")), str(r.get("spanID", ""))) for r in refs[1:])
    start_us, dur_us = get("startTime"), get("duration")
    if type(start_us) is not int:
        start_us = parse_int(start_us)
    if type(dur_us) is not int:
        dur_us = parse_int(dur_us)
    start = start_us * 1000 if start_us is not None else None
    end = start + dur_us * 1000 if start is not None and dur_us is not None else None
    kind_tag = tags.get("span.kind")
    if type(kind_tag) is str:
        kind = _KIND_OF.get(kind_tag)
        if kind is None:
            kind = parse_kind(kind_tag)
            if len(_KIND_OF) < 64:
                _KIND_OF[kind_tag] = kind
    else:
        kind = parse_kind(kind_tag)
    return make_row(
        ctx,
        pos,
        get("traceID") or trace_id,
        get("spanID"),
        parent,
        get("operationName"),
        start,
        end,
        service,
        kind,
        "UNSET" if "error" not in tags and "otel.status_code" not in tags else _status(tags),
        tags,
        links,
        follows,
    )


def parse_jaeger_json(doc: Any, ctx: ParseContext, *, where: str = "") -> Iterator[dict[str, Any]]:
    """Store rows of a Jaeger query-API JSON document (``{"data": [...]}``, a list of traces, or one trace
    object); see :func:`~tailscope.trace.ingest.common.make_row`."""
    found = jaeger_traces(doc, ctx, where)
    if found is not None:
        yield from jaeger_trace_rows(found[1], found[0], ctx)


def parse_zipkin_json(doc: Any, ctx: ParseContext, *, where: str = "") -> Iterator[dict[str, Any]]:
    """Store rows of a Zipkin v2 JSON list (or a list of such lists, as the Zipkin API returns for several traces)."""
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
        row = make_row(
            ctx, pos, tid, sid, pid, sp.get("name"), start, end, service, kind, "ERROR" if err else "UNSET", tags
        )
        if row is not None:
            yield row
