"""Cutting files into pieces for worker processes changes nothing: the rows and the problems (with their positions)
are those of reading the file whole, for every shape; and the JSON reader reads what the stdlib reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace_ingest import jaeger_doc, otlp_doc

from tailscope.store.spans import encode_rows, span_row
from tailscope.trace.demo import demo_traces, to_otlp_json
from tailscope.trace.ingest import pieces
from tailscope.trace.ingest.common import ParseContext, loads_json, parse_int
from tailscope.trace.ingest.files import iter_file_rows
from tailscope.trace.ingest.pieces import piece_rows, split_file

Rows = list[dict[str, Any]]


def whole_and_pieces(path: Path, parts: int, fmt: str = "auto") -> tuple[Rows, Rows, list[str], list[str], int]:
    """Rows and problems of the file read whole and read as ``parts`` pieces (and how many pieces there were)."""
    whole_ctx = ParseContext(source=str(path))
    whole = list(iter_file_rows(path, fmt, whole_ctx))
    main_ctx = ParseContext(source=str(path))
    rows: Rows = []
    problems: list[str] = []
    cut = list(split_file(str(path), fmt, parts, main_ctx))
    for piece in cut:
        ctx = ParseContext(source=str(path))
        rows.extend(piece_rows(piece, ctx))
        problems.extend(map(str, ctx.problems))
    problems += map(str, main_ctx.problems)
    return whole, rows, sorted(map(str, whole_ctx.problems)), sorted(problems), len(cut)


def otlp_proto(doc: dict[str, Any]) -> bytes:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()  # type: ignore[no-any-return]


def test_pieces_equal_the_whole_file_for_every_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    demo = [s for t in demo_traces(30, retry_rate=0.5) for s in t]
    doc = to_otlp_json(demo)
    doc["resourceSpans"].append("not a resource")
    bad = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    del bad[3]["traceId"]
    bad[5]["endTimeUnixNano"] = "1"  # ends before it starts
    bad.insert(7, "not a span")
    lines = [json.dumps(to_otlp_json(demo[k : k + 40])) for k in range(0, len(demo), 40)]
    lines.insert(2, "{broken")
    jaeger = jaeger_doc()
    jaeger["data"] = jaeger["data"] * 9 + [{"no": "spans"}]
    files: dict[str, bytes] = {
        "doc.json": json.dumps(doc).encode(),
        "lines.jsonl": ("\n".join(lines) + "\n\n").encode(),
        "jaeger.json": json.dumps(jaeger).encode(),
        "v3.json": json.dumps({"result": to_otlp_json(demo)}).encode(),
        "spans.pb": otlp_proto(to_otlp_json(demo)),
        "cut.json": json.dumps(to_otlp_json(demo), indent=1)[:5000].encode(),
        "zipkin.json": json.dumps([{"traceId": "ab", "id": "cd", "name": "x", "timestamp": 1, "duration": 2}]).encode(),
    }
    for name, data in files.items():
        p = tmp_path / name
        p.write_bytes(data)
        for parts in (1, 2, 3, 7):
            whole, rows, whole_problems, problems, n = whole_and_pieces(p, parts)
            assert rows == whole, (name, parts)
            assert problems == whole_problems, (name, parts)
        assert whole, name
        assert n > 1 or name in ("cut.json", "zipkin.json"), name  # the rest was really cut
    _, _, problems, _, _ = whole_and_pieces(tmp_path / "doc.json", 3)
    assert any("scopeSpans[0].spans[7]: span is not an object" in p for p in problems)


def test_line_pieces_number_lines_like_the_whole_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "SPLIT_MIN_BYTES", 0)
    p = tmp_path / "l.jsonl"
    p.write_text("\n".join([json.dumps(otlp_doc())] * 5 + ["{bad"] + [json.dumps(otlp_doc())] * 5) + "\n")
    _, rows, whole_problems, problems, n = whole_and_pieces(p, 4)
    assert n == 4
    assert len(rows) == 20
    assert problems == whole_problems
    assert [q.split(": ", 1)[0] for q in problems] == [f"{p}:6:2"]


def test_encoded_rows_are_the_stdlib_encoding_of_the_same_values() -> None:
    for spans in demo_traces(5):
        for s in spans:
            assert json.loads(encode_rows([span_row(s)])) == [json.loads(json.dumps(span_row(s), default=str))]


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": 18446744073709551615, "b": -9223372036854775808, "c": "12345678901234567890123"}',
        b'{"a": NaN, "b": Infinity}',  # the stdlib accepts them, orjson does not
        b'{"name": "bad \\ud800 name"}',  # a lone surrogate: the stdlib reads it (the store makes it storable)
        b'{"startTimeUnixNano": 1767225600000000000, "x": [1.5, -2, true, null, 1e300, -0.0]}',
        b'\xef\xbb\xbf{"bom": 1}',
    ],
)
def test_loads_json_reads_what_the_stdlib_reads(text: bytes) -> None:
    assert repr(loads_json(text)) == repr(json.loads(text))  # repr shows the types: 1 vs 1.0, nan


@pytest.mark.parametrize("text", [b'{"a": 1', b'{"a": }', b'{\n"a": tru}'])
def test_loads_json_errors_are_the_stdlib_errors(text: bytes) -> None:
    with pytest.raises(json.JSONDecodeError) as got:
        loads_json(text)
    with pytest.raises(json.JSONDecodeError) as want:
        json.loads(text)
    assert str(got.value) == str(want.value)


def test_loads_json_reports_bytes_that_are_not_utf8_with_their_position() -> None:
    with pytest.raises(json.JSONDecodeError) as got:
        loads_json(b'{"a": "\xff"}')
    assert (got.value.lineno, got.value.colno) == (1, 8)


def test_integers_beyond_64_bits_never_become_times() -> None:
    # orjson turns them into floats; parse_int refuses floats outside int64 instead of rounding them into a time
    doc = loads_json(b'{"t": 123456789012345678901234567890, "u": -9223372036854775809}')
    assert parse_int(doc["t"]) is None
    assert parse_int(doc["u"]) is None
    assert parse_int(float(2**62)) == 2**62
    assert parse_int("123456789012345678901234567890") == 123456789012345678901234567890  # strings stay exact


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_loads_json_matches_the_stdlib_on_random_documents(value: Any) -> None:
    text = json.dumps(value).encode()
    assert repr(loads_json(text)) == repr(json.loads(text))


ids = st.sampled_from(["", "0000000000000000", "eee19b7ec3c1b174", "7uGbfsPBsXQ=", "EEE19B7EC3C1B173", "span-1", 12])
times = st.sampled_from(
    ["1544712660300000123", 1544712660300000000, " 17 ", "1_000", "x", 1.5e18, 2.5, None, True, "99999999999999999999"]
)
otlp_spans = st.fixed_dictionaries(
    {"traceId": st.sampled_from(["5b8efff798038103d269b633813fc60c", "", "W47/95gDgQPSabYzgT/GDA==", None, 7])},
    optional={
        "spanId": ids,
        "parentSpanId": ids | st.none(),
        "name": st.sampled_from(["chat", "", 5, None]),
        "kind": st.sampled_from([0, 1, 2, 3, 9, "SPAN_KIND_CLIENT", "server", True, None]),
        "startTimeUnixNano": times,
        "endTimeUnixNano": times,
        "status": st.sampled_from([{"code": 2}, {"code": "STATUS_CODE_OK"}, {}, "x", None]),
        "attributes": st.sampled_from(
            [
                [{"key": "http.request.resend_count", "value": {"intValue": "2"}}],
                [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}],
                [{"key": "db.system.name", "value": {"stringValue": "qdrant"}}, {"key": 1}],
                "bad",
            ]
        ),
        "links": st.sampled_from([[{"traceId": "ab", "spanId": "cd"}], [], ["x"]]),
    },
)


@settings(max_examples=100, deadline=None)
@given(st.lists(otlp_spans | st.integers(), min_size=1, max_size=8), st.integers(2, 5))
def test_pieces_equal_the_whole_file_on_odd_spans(tmp_path_factory: Any, spans: list[Any], parts: int) -> None:
    pieces.SPLIT_MIN_BYTES, saved = 0, pieces.SPLIT_MIN_BYTES
    try:
        p = tmp_path_factory.mktemp("odd") / "odd.json"
        p.write_text(json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}))
        whole, rows, whole_problems, problems, _ = whole_and_pieces(p, parts)
    finally:
        pieces.SPLIT_MIN_BYTES = saved
    assert rows == whole
    assert problems == whole_problems
    for row in rows:  # every row is storable: int64 times, encodable values
        assert -(2**63) <= row["start_ns"] <= row["end_ns"] < 2**63
        json.loads(encode_rows([row]))
