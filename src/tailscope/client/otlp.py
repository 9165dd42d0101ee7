"""OTLP/HTTP span export without an SDK: encoding (protobuf or JSON) and a batching sender off the hot path.

Used by ``tailscope serve --otlp-endpoint`` (engine spans) and ``tailscope bench --otlp-endpoint`` (one CLIENT span
per request, :func:`client_span`). The hot path only appends an item to a list; a background task converts and
encodes batches a few items at a time between the event loop's other work (never holding the GIL for more than
~0.1 ms) and POSTs them every ``interval_s`` or as soon as ``max_batch`` items wait. A
collector that is down or slow loses spans (counted in :attr:`OtlpSender.dropped`), never requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from tailscope.errors import ConfigError
from tailscope.records import RequestRecord

#: the pending cap: past it new items are dropped (counted) rather than memory growing while a collector is down
MAX_PENDING = 100_000
#: a gap between token events at least this long is a stall (a span event on the client span)
STALL_NS = 250_000_000
#: items turned into spans and encoded between two turns of the event loop (see OtlpSender)
ENCODE_CHUNK = 4
PROTOCOLS = ("protobuf", "json")

T = TypeVar("T")


def traces_url(endpoint: str, flag: str = "--otlp-endpoint") -> str:
    """The OTLP/HTTP traces URL of ``endpoint``: ``/v1/traces`` appended when it names no path (as the SDKs do).

    Raises:
        ConfigError: when ``endpoint`` is not an http(s) URL.
    """
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{flag} {endpoint!r}: expected http://HOST:PORT (OTLP/HTTP, /v1/traces implied)")
    if parts.path in ("", "/"):
        return endpoint.strip().rstrip("/") + "/v1/traces"
    return endpoint.strip()


def check_protocol(protocol: str) -> str:
    """``protobuf`` or ``json`` (``http/protobuf``, ``http/json`` accepted as the SDKs spell them), else ConfigError."""
    p = protocol.strip().lower().removeprefix("http/")
    if p not in PROTOCOLS:
        raise ConfigError(f"--otlp-protocol {protocol!r}: use protobuf or json (OTLP/HTTP)")
    return p


@dataclass(frozen=True, slots=True)
class OtlpSpan:
    """One span to export (times in Unix ns; ids in lowercase hex; ``kind`` as in OTLP: 1 internal … 3 client)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    events: tuple[tuple[str, int, Mapping[str, Any]], ...] = ()
    error: bool = False


# -- encoding ----------------------------------------------------------------------------------------------------------
# Span by span, so the sender can encode a batch a few spans at a time between the event loop's other work (a whole
# batch at once held the GIL for milliseconds beside the measuring loop). Protobuf: each span is serialized by the
# generated class and framed by hand inside ScopeSpans (the bytes equal serializing the whole request at once — tested);
# OTLP/JSON is written directly (through MessageToDict it cost ~120–230 µs per span).


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def set_attributes(target: Any, attributes: Mapping[str, Any]) -> None:
    """Append ``attributes`` to a protobuf ``repeated KeyValue`` field (bool, int, float or text values)."""
    for key, value in attributes.items():
        a = target.add()
        a.key = key
        if isinstance(value, bool):
            a.value.bool_value = value
        elif isinstance(value, int):
            a.value.int_value = value
        elif isinstance(value, float):
            a.value.double_value = value
        else:
            a.value.string_value = str(value)


def _span_proto(s: OtlpSpan) -> bytes:
    """One ``Span`` as the ``spans`` field (2) of a ScopeSpans message."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    sp = Span(
        trace_id=bytes.fromhex(s.trace_id),
        span_id=bytes.fromhex(s.span_id),
        name=s.name,
        kind=s.kind,  # type: ignore[arg-type]
        start_time_unix_nano=s.start_ns,
        end_time_unix_nano=max(s.end_ns, s.start_ns),
    )
    if s.parent_span_id:
        sp.parent_span_id = bytes.fromhex(s.parent_span_id)
    sp.status.code = 2 if s.error else 0  # type: ignore[assignment]  # ERROR, else UNSET (the status is present)
    set_attributes(sp.attributes, s.attributes)
    for name, t_ns, attrs in s.events:
        ev = sp.events.add()
        ev.name = name
        ev.time_unix_nano = t_ns
        set_attributes(ev.attributes, attrs)
    return _ld(2, sp.SerializeToString())


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 as a string, as OTLP/JSON (proto3 JSON) spells it
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def _json_attributes(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _json_value(v)} for k, v in attributes.items()]


def _span_json(s: OtlpSpan) -> dict[str, Any]:
    doc: dict[str, Any] = {"traceId": s.trace_id, "spanId": s.span_id}
    if s.parent_span_id:
        doc["parentSpanId"] = s.parent_span_id
    doc["name"] = s.name
    if s.kind:
        doc["kind"] = s.kind  # OTLP/JSON spells enums as integers
    doc["startTimeUnixNano"] = str(s.start_ns)
    doc["endTimeUnixNano"] = str(max(s.end_ns, s.start_ns))
    if s.attributes:
        doc["attributes"] = _json_attributes(s.attributes)
    if s.events:
        doc["events"] = [
            {"timeUnixNano": str(t), "name": n, **({"attributes": _json_attributes(a)} if a else {})}
            for n, t, a in s.events
        ]
    doc["status"] = {"code": 2} if s.error else {}
    return doc


def encode_spans(spans: Sequence[OtlpSpan], protocol: str = "protobuf") -> list[bytes]:
    """Each span's piece of an export request (put together by :func:`assemble`)."""
    if protocol == "protobuf":
        return [_span_proto(s) for s in spans]
    return [json.dumps(_span_json(s), separators=(",", ":")).encode() for s in spans]


def assemble(pieces: Sequence[bytes], *, service: str, scope: str, protocol: str = "protobuf") -> bytes:
    """An OTLP ``ExportTraceServiceRequest`` of the spans :func:`encode_spans` encoded."""
    if protocol == "protobuf":
        resource = _ld(1, _ld(1, _ld(1, b"service.name") + _ld(2, _ld(1, service.encode()))))
        return _ld(1, resource + _ld(2, _ld(1, _ld(1, scope.encode())) + b"".join(pieces)))
    head = json.dumps(
        {
            "resource": {"attributes": _json_attributes({"service.name": service})},
            "scopeSpans": [{"scope": {"name": scope}}],
        },
        separators=(",", ":"),
    ).encode()
    return b'{"resourceSpans":[' + head[:-3] + b',"spans":[' + b",".join(pieces) + b"]}]}]}"


def encode(spans: Sequence[OtlpSpan], *, service: str, scope: str, protocol: str = "protobuf") -> bytes:
    """An OTLP ``ExportTraceServiceRequest`` holding ``spans``: protobuf bytes, or OTLP/JSON text (hex ids)."""
    return assemble(encode_spans(spans, protocol), service=service, scope=scope, protocol=protocol)


class OtlpSender(Generic[T]):
    """Batches items and POSTs them as OTLP/HTTP from a background task.

    Args:
        endpoint: the collector (``http://HOST:4318`` or a full ``…/v1/traces`` URL).
        to_spans: turns a few items into spans (called ``ENCODE_CHUNK`` items at a time, yielding to the loop between).
        service: the ``service.name`` resource attribute.
        scope: the instrumentation scope's name.
        protocol: ``protobuf`` (default) or ``json``.
        interval_s: how often pending items are sent.
        max_batch: send at once when this many items wait.
    """

    def __init__(
        self,
        endpoint: str,
        to_spans: Callable[[list[T]], list[OtlpSpan]],
        *,
        service: str,
        scope: str,
        protocol: str = "protobuf",
        interval_s: float = 0.5,
        max_batch: int = 512,
    ) -> None:
        self.url = traces_url(endpoint)
        self.protocol = check_protocol(protocol)
        self.to_spans = to_spans
        self.service = service
        self.scope = scope
        self.interval_s = interval_s
        self.max_batch = max_batch
        self.exported = 0
        self.dropped = 0
        self.last_error: str | None = None
        self._pending: list[T] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._session: Any = None
        self._stopping = False

    def start(self) -> None:
        """Start the sender on the running loop."""
        self._wake = asyncio.Event()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tailscope-otlp-export")

    def add(self, item: T) -> None:
        """Queue one item (the hot path: an append)."""
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
        self._pending.append(item)
        if len(self._pending) >= self.max_batch and self._wake is not None:
            self._wake.set()

    async def stop(self) -> None:
        """Send what is pending and stop.

        The sender is asked to finish rather than cancelled: a batch it had taken when the load ended is sent, not lost
        uncounted (each POST is bounded by the session's 10 s timeout).
        """
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            if self._wake is not None:
                self._wake.set()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        with contextlib.suppress(Exception):
            await self._send_pending()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def outcome(self) -> dict[str, Any]:
        """``{"endpoint", "protocol", "exported", "dropped", "last_error"}`` (stored in the run's summary)."""
        return {
            "endpoint": self.url,
            "protocol": self.protocol,
            "exported": self.exported,
            "dropped": self.dropped,
            "last_error": self.last_error,
        }

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
            try:
                await self._send_pending()
            except Exception as exc:  # a collector that is down loses spans, never the load
                self.last_error = f"{type(exc).__name__}: {exc}"

    async def _send_pending(self) -> None:
        import aiohttp

        content_type = "application/x-protobuf" if self.protocol == "protobuf" else "application/json"
        while self._pending:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            try:
                pieces: list[bytes] = []
                for k in range(0, len(batch), ENCODE_CHUNK):
                    pieces += encode_spans(self.to_spans(batch[k : k + ENCODE_CHUNK]), self.protocol)
                    await asyncio.sleep(0)  # the loop stamps whatever arrived meanwhile: one chunk is ~0.1 ms
                body = assemble(pieces, service=self.service, scope=self.scope, protocol=self.protocol)
                if self._session is None:
                    self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
                async with self._session.post(self.url, data=body, headers={"Content-Type": content_type}) as resp:
                    await resp.read()
                    if resp.status >= 300:
                        self.dropped += len(batch)
                        self.last_error = f"collector answered HTTP {resp.status}"
                        continue
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                self.dropped += len(batch)
                self.last_error = f"{type(exc).__name__}: {exc}"
                continue
            except BaseException:  # cancelled (Ctrl-C) or an encoding bug: the batch is lost, and counted as such
                self.dropped += len(batch)
                raise
            self.exported += len(batch)


def client_span(r: RequestRecord, *, t0_unix_ns: int, model: str, operation: str = "chat") -> OtlpSpan | None:
    """The CLIENT span of one traced request (GenAI semantic conventions), or None for an untraced one.

    Its trace and span ids are the record's (those sent in ``traceparent``), so the server's spans are its children.
    It runs from the scheduled send time to the stream's end (the client-seen request), with events ``request.sent``,
    ``gen_ai.first_token`` and one ``gen_ai.stall`` per gap of at least 250 ms between token events
    (``tailscope.stall_ms``).
    """
    if r.trace_id is None or r.span_id is None:
        return None
    end = r.closed_ns
    if end is None:
        end = r.sent_ns if r.sent_ns is not None else r.scheduled_ns
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.request.model": model,
        "tailscope.request.id": r.id,
        "tailscope.request.class": r.request_class,
    }
    if r.input_tokens is not None:
        attrs["gen_ai.usage.input_tokens"] = r.input_tokens
    if r.output_tokens is not None:
        attrs["gen_ai.usage.output_tokens"] = r.output_tokens
    if r.requested_output_tokens is not None:
        attrs["gen_ai.request.max_tokens"] = r.requested_output_tokens
    if r.server_request_id:
        attrs["gen_ai.response.id"] = r.server_request_id
    if r.http_status is not None:
        attrs["http.response.status_code"] = r.http_status
    if r.error is not None:
        attrs["error.type"] = str(r.error)
    if r.first_token_ns is not None:
        attrs["tailscope.ttft_ms"] = (r.first_token_ns - r.scheduled_ns) / 1e6
    events: list[tuple[str, int, Mapping[str, Any]]] = []
    if r.sent_ns is not None:
        events.append(("request.sent", t0_unix_ns + r.sent_ns, {}))
    if r.first_token_ns is not None:
        events.append(("gen_ai.first_token", t0_unix_ns + r.first_token_ns, {}))
    times = r.chunk_times_ns
    for a, b in itertools.pairwise(times):
        if b - a >= STALL_NS:
            events.append(("gen_ai.stall", t0_unix_ns + a, {"tailscope.stall_ms": (b - a) / 1e6}))
    return OtlpSpan(
        trace_id=r.trace_id,
        span_id=r.span_id,
        parent_span_id=None,
        name=f"{operation} {model}",
        kind=3,  # SPAN_KIND_CLIENT
        start_ns=t0_unix_ns + r.scheduled_ns,
        end_ns=t0_unix_ns + end,
        attributes=attrs,
        events=tuple(events),
        error=not r.ok,
    )


class ClientSpanExporter:
    """``bench --otlp-endpoint``: one CLIENT span per traced request record, exported in batches.

    Args:
        endpoint: the collector's OTLP/HTTP endpoint.
        model: the requested model (``gen_ai.request.model``).
        t0_unix_ns: the run start's Unix time (record times are relative to it).
        operation: ``chat`` or ``text_completion`` (``gen_ai.operation.name``).
        protocol: ``protobuf`` or ``json``.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        model: str,
        t0_unix_ns: int | None = None,
        operation: str = "chat",
        protocol: str = "protobuf",
        service: str = "tailscope-bench",
        interval_s: float = 0.5,
    ) -> None:
        self.model = model
        self.operation = operation
        self.t0_unix_ns = time.time_ns() if t0_unix_ns is None else t0_unix_ns
        self.sender: OtlpSender[RequestRecord] = OtlpSender(
            endpoint, self._spans, service=service, scope="tailscope.bench", protocol=protocol, interval_s=interval_s
        )

    def _spans(self, batch: list[RequestRecord]) -> list[OtlpSpan]:
        out = []
        for r in batch:
            s = client_span(r, t0_unix_ns=self.t0_unix_ns, model=self.model, operation=self.operation)
            if s is not None:
                out.append(s)
        return out

    def add(self, r: RequestRecord) -> None:
        """Queue a finished record (untraced ones are skipped here, on the hot path, by one attribute test)."""
        if r.trace_id is not None:
            self.sender.add(r)
