"""bench --otlp-endpoint: one CLIENT span per traced record, GenAI attributes and events, read back by the ingest."""

from __future__ import annotations

import json

import pytest

from tailscope.client.otlp import ClientSpanExporter, OtlpSpan, check_protocol, client_span, encode
from tailscope.errors import ConfigError
from tailscope.records import ErrorClass, RequestRecord, Status
from tailscope.trace.ingest.common import ParseContext, row_span
from tailscope.trace.ingest.otlp import parse_otlp_json, parse_otlp_proto
from tailscope.trace.layers import refine_layer

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"
T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _record(**kw: object) -> RequestRecord:
    base: dict[str, object] = dict(
        id=7, scheduled_ns=10 * MS, sent_ns=11 * MS, first_token_ns=60 * MS, end_ns=700 * MS, status=Status.OK,
        input_tokens=64, output_tokens=4, requested_output_tokens=4, http_status=200,
        chunk_times_ns=(60 * MS, 80 * MS, 400 * MS, 700 * MS), chunk_tokens=(1, 1, 1, 1), stream_end_ns=701 * MS,
        trace_id=TID, span_id=SID,
    )  # fmt: skip
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]


def test_client_span_is_the_records_request() -> None:
    s = client_span(_record(), t0_unix_ns=T0, model="m")
    assert s is not None
    assert (s.trace_id, s.span_id, s.parent_span_id, s.kind) == (TID, SID, None, 3)
    assert (s.start_ns, s.end_ns) == (T0 + 10 * MS, T0 + 701 * MS)  # scheduled → stream end
    assert s.name == "chat m"
    assert s.attributes["gen_ai.request.model"] == "m"
    assert s.attributes["gen_ai.usage.input_tokens"] == 64
    assert s.attributes["gen_ai.usage.output_tokens"] == 4
    names = [e[0] for e in s.events]
    assert names == ["request.sent", "gen_ai.first_token", "gen_ai.stall", "gen_ai.stall"]  # 320 ms and 300 ms gaps
    assert s.events[1][1] == T0 + 60 * MS
    assert s.events[2][2]["tailscope.stall_ms"] == pytest.approx(320.0)
    assert not s.error
    assert client_span(_record(trace_id=None, span_id=None), t0_unix_ns=T0, model="m") is None


def test_a_failed_request_is_an_error_span() -> None:
    r = _record(status=Status.ERROR, error=ErrorClass.HTTP_5XX, first_token_ns=None, end_ns=20 * MS, chunk_times_ns=())
    s = client_span(r, t0_unix_ns=T0, model="m")
    assert s is not None
    assert s.error
    assert s.attributes["error.type"] == "http_5xx"
    assert [e[0] for e in s.events] == ["request.sent"]


@pytest.mark.parametrize("protocol", ["protobuf", "json"])
def test_encoded_client_spans_parse_back_as_roots(protocol: str) -> None:
    span = client_span(_record(), t0_unix_ns=T0, model="m")
    assert span is not None
    body = encode([span], service="tailscope-bench", scope="tailscope.bench", protocol=protocol)
    ctx = ParseContext(source="test")
    rows = parse_otlp_proto(body, ctx) if protocol == "protobuf" else parse_otlp_json(json.loads(body), ctx)
    spans = [row_span(r) for r in rows]
    assert len(spans) == 1
    s = spans[0]
    assert (s.trace_id, s.span_id, s.parent_id, s.kind, s.service) == (TID, SID, None, "CLIENT", "tailscope-bench")
    assert s.layer == "inference"  # alone: an LLM call; with the server's span beneath it, the wire
    assert refine_layer(s.layer, s.kind, ["SERVER"]) == "network"
    assert (s.start_ns, s.end_ns) == (T0 + 10 * MS, T0 + 701 * MS)
    assert s.attributes["gen_ai.usage.output_tokens"] == 4


def test_protocol_and_untraced_records() -> None:
    assert check_protocol("http/json") == "json"
    with pytest.raises(ConfigError, match="--otlp-protocol"):
        check_protocol("grpc")
    ex = ClientSpanExporter("http://127.0.0.1:1", model="m", t0_unix_ns=T0)
    ex.add(_record(trace_id=None, span_id=None))
    ex.add(_record())
    assert len(ex.sender._pending) == 1


def test_stopping_while_a_batch_is_in_flight_sends_it() -> None:
    """A batch the sender had taken when the load ended is sent (or counted as dropped) — never lost uncounted.

    The collector here is slow (each POST waits 0.3 s), and stop() comes while the first batch is being posted: the
    sender used to be cancelled mid-POST, losing that batch from both counts (105 of 128 spans exported, 0 dropped).
    """
    import asyncio

    from aiohttp import web

    from tailscope.client.otlp import OtlpSender

    got: list[int] = []

    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        await asyncio.sleep(0.3)
        got.append(len(body))
        return web.Response(status=200)

    async def main() -> tuple[int, int, int]:
        app = web.Application()
        app.router.add_post("/v1/traces", traces)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        sender: OtlpSender[RequestRecord] = OtlpSender(
            f"http://127.0.0.1:{port}",
            lambda batch: [s for r in batch if (s := client_span(r, t0_unix_ns=T0, model="m")) is not None],
            service="test",
            scope="test",
            max_batch=10,
            interval_s=0.05,
        )
        sender.start()
        for i in range(25):
            sender.add(_record(id=i))
        await asyncio.sleep(0.1)  # the first batch is in flight now
        await sender.stop()
        await runner.cleanup()
        return sender.exported, sender.dropped, len(got)

    exported, dropped, posts = asyncio.run(main())
    assert (exported, dropped) == (25, 0)
    assert posts == 3


def _whole_request(spans: list[OtlpSpan], service: str, scope: str) -> bytes:
    """The oracle: the request built at once through the generated classes (how encode() used to do it)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from tailscope.client.otlp import set_attributes

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    set_attributes(rs.resource.attributes, {"service.name": service})
    sc = rs.scope_spans.add()
    sc.scope.name = scope
    for s in spans:
        sp = sc.spans.add()
        sp.trace_id, sp.span_id, sp.name, sp.kind = bytes.fromhex(s.trace_id), bytes.fromhex(s.span_id), s.name, s.kind  # type: ignore[assignment]
        if s.parent_span_id:
            sp.parent_span_id = bytes.fromhex(s.parent_span_id)
        sp.start_time_unix_nano, sp.end_time_unix_nano = s.start_ns, max(s.end_ns, s.start_ns)
        sp.status.code = 2 if s.error else 0  # type: ignore[assignment]
        set_attributes(sp.attributes, s.attributes)
        for name, t_ns, attrs in s.events:
            ev = sp.events.add()
            ev.name, ev.time_unix_nano = name, t_ns
            set_attributes(ev.attributes, attrs)
    return bytes(req.SerializeToString())


def test_span_by_span_encoding_equals_the_whole_request() -> None:
    """Protobuf pieces framed by hand are the bytes of the request built at once; JSON parses to the same spans."""
    import dataclasses

    spans = [
        s
        for i in range(40)
        if (
            s := client_span(_record(id=i, trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}"), t0_unix_ns=T0, model="m")
        )
    ]
    spans[3] = dataclasses.replace(
        spans[3], error=True, parent_span_id="00000000000000aa", attributes={"neg": -5, "f": 1.5, "no": False, "é": "ü"}
    )
    assert encode(spans, service="svc", scope="sc") == _whole_request(spans, "svc", "sc")
    assert encode([], service="svc", scope="sc") == _whole_request([], "svc", "sc")
    ctx = ParseContext(source="test")
    from_proto = [row_span(r) for r in parse_otlp_proto(encode(spans, service="svc", scope="sc"), ctx)]
    from_json = [
        row_span(r) for r in parse_otlp_json(json.loads(encode(spans, service="svc", scope="sc", protocol="json")), ctx)
    ]
    assert from_json == from_proto
