"""The ingest fast path (orjson where it is exact, rows instead of spans) equals the reference path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace_ingest import jaeger_doc, otlp_doc

from tailscope.store.spans import encode_span, span_row
from tailscope.trace.demo import demo_traces, to_otlp_json
from tailscope.trace.ingest.common import ParseContext, loads_json, parse_int
from tailscope.trace.ingest.files import iter_file, iter_file_rows
from tailscope.trace.ingest.otlp import otlp_json_rows, parse_otlp_json

Rows = list[dict[str, Any]]


def both(path: Path, fmt: str = "auto") -> tuple[Rows, Rows, ParseContext, ParseContext]:
    ctx_a, ctx_b = ParseContext(source=str(path)), ParseContext(source=str(path))
    rows = list(iter_file_rows(path, fmt, ctx_a))
    ref = [span_row(s) for s in iter_file(path, fmt, ctx_b)]
    return rows, ref, ctx_a, ctx_b


def test_rows_equal_spans_made_rows_for_every_format(tmp_path: Path) -> None:
    demo = [s for t in demo_traces(20, retry_rate=0.5) for s in t]
    bad = otlp_doc()
    del bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["endTimeUnixNano"] = "1"  # ends before it starts
    docs: dict[str, str] = {
        "demo.json": json.dumps(to_otlp_json(demo)),
        "lines.jsonl": json.dumps(otlp_doc()) + "\n{broken\n" + json.dumps(otlp_doc(legacy=True)) + "\n",
        "b64.json": json.dumps(otlp_doc(ids="base64")),
        "bad.json": json.dumps(bad),
        "v3.json": json.dumps({"result": otlp_doc()}),
        "jaeger.json": json.dumps(jaeger_doc()),
        "cut.json": json.dumps(otlp_doc(), indent=1)[:400],
        "other.json": json.dumps({"hello": "world"}),
    }
    for name, text in docs.items():
        p = tmp_path / name
        p.write_text(text)
        rows, ref, ctx_a, ctx_b = both(p)
        assert rows == ref, name
        assert ctx_a.problems == ctx_b.problems, name
    rows, _, _, _ = both(tmp_path / "demo.json")
    assert len(rows) == len(demo)
    layers = {(r["trace_id"], r["span_id"]): r["layer"] for r in rows}
    assert layers == {(s.trace_id, s.span_id): s.layer for s in demo}


def test_encoded_rows_are_the_stdlib_encoding_of_the_same_values() -> None:
    for spans in demo_traces(5):
        for s in spans:
            assert json.loads(encode_span(s)) == json.loads(json.dumps(span_row(s), default=str))


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": 18446744073709551615, "b": -9223372036854775808, "c": "12345678901234567890123"}',
        b'{"a": NaN, "b": Infinity}',  # the stdlib accepts them, orjson does not
        b'{"startTimeUnixNano": 1767225600000000000, "x": [1.5, -2, true, null, 1e300, -0.0]}',
        b'\xef\xbb\xbf{"bom": 1}',
    ],
)
def test_loads_json_is_exactly_the_stdlib(text: bytes) -> None:
    assert repr(loads_json(text)) == repr(json.loads(text))  # repr shows the types: 1 vs 1.0, nan


def test_integers_beyond_64_bits_never_become_times() -> None:
    # orjson turns them into floats; parse_int refuses floats outside int64 instead of rounding them into a time
    doc = loads_json(b'{"t": 123456789012345678901234567890, "u": -9223372036854775809}')
    assert parse_int(doc["t"]) is None
    assert parse_int(doc["u"]) is None
    assert parse_int(float(2**62)) == 2**62
    assert parse_int("123456789012345678901234567890") == 123456789012345678901234567890  # strings stay exact


@pytest.mark.parametrize("text", [b'{"a": 1', b'{"a": }', b"\xff\xfe", b'{"a": "\\ud800"}x'])
def test_loads_json_errors_are_the_stdlib_errors(text: bytes) -> None:
    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)) as got:
        loads_json(text)
    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)) as want:
        json.loads(text)
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_loads_json_matches_the_stdlib_on_random_documents(value: Any) -> None:
    text = json.dumps(value).encode()
    assert repr(loads_json(text)) == repr(json.loads(text))


ids = st.sampled_from(["", "0000000000000000", "eee19b7ec3c1b174", "7uGbfsPBsXQ=", "EEE19B7EC3C1B173", "span-1", 12])
times = st.sampled_from(["1544712660300000123", 1544712660300000000, " 17 ", "1_000", "x", 1.5e18, 2.5, None, True])
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


@settings(max_examples=300, deadline=None)
@given(st.lists(otlp_spans, min_size=1, max_size=6))
def test_otlp_rows_equal_spans_made_rows_on_odd_spans(spans: list[dict[str, Any]]) -> None:
    doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    for _ in range(2):  # the second time every id is in the cache: the inline path
        ctx_a, ctx_b = ParseContext(source="x"), ParseContext(source="x")
        assert list(otlp_json_rows(doc, ctx_a)) == [span_row(s) for s in parse_otlp_json(doc, ctx_b)]
        assert ctx_a.problems == ctx_b.problems
