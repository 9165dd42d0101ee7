"""Parsers: OTLP JSON (incl. legacy), OTLP protobuf, Jaeger (incl. api_v3), Zipkin v2; ids, times, bad input."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tailscope.errors import TraceFormatError
from tailscope.records import Span
from tailscope.trace.ingest.common import ParseContext, normalize_id, parse_int, parse_kind, parse_status
from tailscope.trace.ingest.files import detect_json_format, iter_file

TID = "5b8efff798038103d269b633813fc60c"
SID_A = "eee19b7ec3c1b174"
SID_B = "eee19b7ec3c1b173"
BIG = "1544712660300000123"  # beyond float precision: must stay exact


def otlp_doc(*, legacy: bool = False, ids: str = "hex") -> dict[str, Any]:
    def enc(x: str) -> str:
        return base64.b64encode(bytes.fromhex(x)).decode() if ids == "base64" else x

    spans = [
        {
            "traceId": enc(TID),
            "spanId": enc(SID_A),
            "name": "POST /chat",
            "kind": "SPAN_KIND_SERVER",
            "startTimeUnixNano": BIG,
            "endTimeUnixNano": "1544712661300000123",
            "attributes": [
                {"key": "http.route", "value": {"stringValue": "/chat"}},
                {"key": "http.response.status_code", "value": {"intValue": "200"}},
            ],
            "status": {"code": "STATUS_CODE_OK"},
        },
        {
            "traceId": enc(TID),
            "spanId": enc(SID_B),
            "parentSpanId": enc(SID_A),
            "name": "chat gpt",
            "kind": 3,
            "startTimeUnixNano": 1544712660400000000,
            "endTimeUnixNano": 1544712661200000000,
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}],
            "status": {"code": 2},
        },
    ]
    scope_key = "instrumentationLibrarySpans" if legacy else "scopeSpans"
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
                scope_key: [{"spans": spans}],
            }
        ]
    }


def load(path: Path, fmt: str = "auto") -> tuple[list[Span], ParseContext]:
    ctx = ParseContext(source=str(path))
    return list(iter_file(path, fmt, ctx)), ctx


def check_otlp(spans: list[Span]) -> None:
    assert len(spans) == 2
    a, b = spans
    assert (a.trace_id, a.span_id, a.parent_id) == (TID, SID_A, None)
    assert b.parent_id == SID_A
    assert a.start_ns == int(BIG)
    assert a.kind == "SERVER"
    assert b.kind == "CLIENT"
    assert a.status == "OK"
    assert b.status == "ERROR"
    assert a.service == "api"
    assert a.attributes["http.response.status_code"] == 200
    assert a.layer == "gateway"
    assert b.layer == "inference"


@pytest.mark.parametrize(("legacy", "ids"), [(False, "hex"), (True, "hex"), (False, "base64")])
def test_otlp_json(tmp_path: Path, legacy: bool, ids: str) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(otlp_doc(legacy=legacy, ids=ids)))
    spans, ctx = load(p)
    assert ctx.problems == []
    check_otlp(spans)


def test_otlp_json_lines_stream_and_report_a_bad_line(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    good = json.dumps(otlp_doc())
    p.write_text(good + "\n" + good[: len(good) // 2] + "\n" + good + "\n")
    spans, ctx = load(p)
    assert len(spans) == 4
    assert len(ctx.problems) == 1
    assert ctx.problems[0].position.startswith("2:")
    assert str(p) in str(ctx.problems[0])


def test_jaeger_api_v3_result_wrapper(tmp_path: Path) -> None:
    p = tmp_path / "v3.json"
    p.write_text(json.dumps({"result": otlp_doc(ids="base64")}))
    spans, _ = load(p, "jaeger")
    check_otlp(spans)


def test_otlp_protobuf(tmp_path: Path) -> None:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    msg = ParseDict(otlp_doc(ids="base64"), ExportTraceServiceRequest())
    p = tmp_path / "t.pb"
    p.write_bytes(msg.SerializeToString())
    spans, ctx = load(p)
    assert ctx.problems == []
    check_otlp(spans)
    garbage = tmp_path / "bad.pb"
    garbage.write_bytes(b"\xff\xfe\x00garbage")
    spans, ctx = load(garbage, "otlp-proto")
    assert spans == []
    assert ctx.problems


def jaeger_doc() -> dict[str, Any]:
    return {
        "data": [
            {
                "traceID": "0d269b633813fc60c",  # odd length, leading zero dropped by some emitters
                "spans": [
                    {
                        "traceID": "0d269b633813fc60c",
                        "spanID": "a1",
                        "operationName": "HTTP GET",
                        "references": [],
                        "startTime": 1700000000000001,
                        "duration": 5000,
                        "tags": [{"key": "span.kind", "type": "string", "value": "server"}],
                        "processID": "p1",
                    },
                    {
                        "traceID": "0d269b633813fc60c",
                        "spanID": "b2",
                        "operationName": "SELECT",
                        "references": [{"refType": "CHILD_OF", "traceID": "0d269b633813fc60c", "spanID": "a1"}],
                        "startTime": 1700000000001000,
                        "duration": 2000,
                        "tags": [
                            {"key": "db.system", "type": "string", "value": "postgresql"},
                            {"key": "error", "type": "bool", "value": True},
                        ],
                        "processID": "p2",
                    },
                    {
                        "traceID": "0d269b633813fc60c",
                        "spanID": "c3",
                        "operationName": "async job",
                        "references": [{"refType": "FOLLOWS_FROM", "traceID": "0d269b633813fc60c", "spanID": "a1"}],
                        "startTime": 1700000000004000,
                        "duration": 9000,
                        "tags": [],
                        "processID": "p1",
                    },
                ],
                "processes": {"p1": {"serviceName": "web"}, "p2": {"serviceName": "db"}},
            }
        ]
    }


def test_jaeger_json(tmp_path: Path) -> None:
    p = tmp_path / "j.json"
    p.write_text(json.dumps(jaeger_doc()))
    spans, ctx = load(p)
    assert ctx.problems == []
    a, b, c = spans
    assert a.trace_id == "0000000000000000000000d269b633813fc60c"[-32:].rjust(32, "0")
    assert a.span_id == "00000000000000a1"
    assert b.parent_id == a.span_id
    assert a.start_ns == 1700000000000001000
    assert a.end_ns == a.start_ns + 5_000_000
    assert a.kind == "SERVER"
    assert a.service == "web"
    assert b.service == "db"
    assert b.status == "ERROR"
    assert b.layer == "business"
    assert c.follows_from
    assert c.parent_id == a.span_id


def test_zipkin_v2_with_shared_server_span(tmp_path: Path) -> None:
    doc = [
        {"traceId": TID, "id": SID_A, "name": "get /api", "kind": "CLIENT", "timestamp": 1000, "duration": 500,
         "localEndpoint": {"serviceName": "frontend"}},
        {"traceId": TID, "id": SID_A, "name": "get /api", "kind": "SERVER", "shared": True, "timestamp": 1100,
         "duration": 300, "localEndpoint": {"serviceName": "backend"}},
        {"traceId": TID, "id": SID_B, "parentId": SID_A, "name": "select", "kind": "CLIENT", "timestamp": 1150,
         "duration": 100, "localEndpoint": {"serviceName": "backend"}, "tags": {"db.system": "mysql", "error": "x"}},
    ]  # fmt: skip
    p = tmp_path / "z.json"
    p.write_text(json.dumps(doc))
    assert detect_json_format(doc) == "zipkin"
    spans, ctx = load(p)
    assert ctx.problems == []
    client, server, child = spans
    assert server.span_id == f"{SID_A}-srv"
    assert server.parent_id == SID_A
    assert child.parent_id == server.span_id
    assert client.start_ns == 1_000_000
    assert client.end_ns == 1_500_000
    assert child.status == "ERROR"


def test_truncated_document_is_reported_and_complete_spans_before_it_load(tmp_path: Path) -> None:
    text = json.dumps(otlp_doc(), indent=1)
    cut = text.index('"spanId": "' + SID_B)  # inside the second span
    p = tmp_path / "cut.json"
    p.write_text(text[:cut])
    spans, ctx = load(p)
    assert [s.span_id for s in spans] == [SID_A]
    assert spans[0].service == "api"
    assert ctx.problems
    assert ":" in ctx.problems[0].position
    assert "truncated" in ctx.problems[0].message


def test_wrong_format_and_span_without_trace_id(tmp_path: Path) -> None:
    p = tmp_path / "other.json"
    p.write_text(json.dumps({"hello": "world"}))
    spans, ctx = load(p)
    assert spans == []
    assert "unrecognised" in ctx.problems[0].message
    doc = otlp_doc()
    del doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    p2 = tmp_path / "noid.json"
    p2.write_text(json.dumps(doc))
    spans, ctx = load(p2)
    assert len(spans) == 1
    assert ctx.problems[0].position == "resourceSpans[0].scopeSpans[0].spans[0]"
    assert "without trace id" in ctx.problems[0].message
    empty = tmp_path / "empty.json"
    empty.write_text("")
    spans, ctx = load(empty)
    assert spans == []
    assert ctx.problems
    with pytest.raises(TraceFormatError, match="cannot open"):
        load(tmp_path / "missing.json")


def test_id_and_value_helpers() -> None:
    assert normalize_id("ABC", width=16) == "0000000000000abc"
    assert normalize_id(base64.b64encode(bytes(range(1, 17))).decode(), width=32) == bytes(range(1, 17)).hex()
    assert normalize_id("0000000000000000", width=16) is None
    assert normalize_id("", width=16) is None
    assert normalize_id("span-1", width=16) == "span-1"
    assert parse_int("1544712660300000123") == 1544712660300000123
    assert parse_int(1.5) is None
    assert parse_int("x") is None
    assert parse_int(True) is None
    assert parse_kind("SPAN_KIND_PRODUCER") == "PRODUCER"
    assert parse_kind(5) == "CONSUMER"
    assert parse_kind("2") == "SERVER"
    assert parse_status("STATUS_CODE_ERROR") == "ERROR"
    assert parse_status(1) == "OK"
    assert parse_status(None) == "UNSET"
