"""The engine's llm_request spans: W3C traceparent parsing, vLLM's attributes, OTLP protobuf that the ingest reads."""

from __future__ import annotations

import random

import pytest

from tailscope.client.otlp import traces_url
from tailscope.errors import ConfigError
from tailscope.serve.otlp import RequestTiming, encode_spans, parse_traceparent, span_attributes
from tailscope.trace.ingest.common import ParseContext, row_span
from tailscope.trace.ingest.otlp import parse_otlp_proto

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (f"00-{TID}-{SID}-01", (TID, SID, True)),
        (f"00-{TID}-{SID}-00", (TID, SID, False)),
        (f"00-{TID.upper()}-{SID}-01", (TID, SID, True)),
        (f"01-{TID}-{SID}-01-future", (TID, SID, True)),  # a later version: its first four fields
        (f"00-{TID}-{SID}-01-extra", None),
        (f"ff-{TID}-{SID}-01", None),
        (f"00-{'0' * 32}-{SID}-01", None),
        (f"00-{TID}-{'0' * 16}-01", None),
        ("00-xyz-abc-01", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_traceparent(header: str | None, expected: tuple[str, str, bool] | None) -> None:
    assert parse_traceparent(header) == expected


def test_traces_url() -> None:
    assert traces_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/traces"
    assert traces_url("http://c:4318/custom/path") == "http://c:4318/custom/path"
    with pytest.raises(ConfigError, match="--otlp-endpoint"):
        traces_url("127.0.0.1:4318")


def _timing(**kw: object) -> RequestTiming:
    base: dict[str, object] = dict(
        trace_id=TID, parent_span_id=SID, request_id="r1", received_ns=1_000_000_000, queued_ns=1_002_000_000,
        scheduled_ns=1_005_000_000, first_token_ns=1_025_000_000, last_token_ns=1_125_000_000, end_ns=1_125_000_000,
        prompt_tokens=64, completion_tokens=16, max_tokens=16,
    )  # fmt: skip
    base.update(kw)
    return RequestTiming(**base)  # type: ignore[arg-type]


def test_attributes_are_vllms_in_seconds() -> None:
    a = span_attributes(_timing(), "m")
    assert a["gen_ai.latency.time_in_queue"] == pytest.approx(0.003)
    assert a["gen_ai.latency.time_to_first_token"] == pytest.approx(0.025)
    assert a["gen_ai.latency.time_in_model_prefill"] == pytest.approx(0.020)
    assert a["gen_ai.latency.time_in_model_decode"] == pytest.approx(0.100)
    assert a["gen_ai.latency.e2e"] == pytest.approx(0.125)
    assert a["gen_ai.usage.prompt_tokens"] == 64
    # no admission stamp: no queue or prefill figure rather than a wrong one
    b = span_attributes(_timing(scheduled_ns=None, first_token_ns=None, last_token_ns=None), "m")
    assert "gen_ai.latency.time_in_queue" not in b
    assert "gen_ai.latency.time_to_first_token" not in b


def test_encoded_spans_parse_back_as_inference_children_of_the_caller() -> None:
    body = encode_spans([_timing(), _timing(parent_span_id=None)], model="m", service="svc", span_ids=random.Random(1))
    spans = [row_span(r) for r in parse_otlp_proto(body, ParseContext(source="test"))]
    assert len(spans) == 2
    s = spans[0]
    assert (s.trace_id, s.parent_id, s.name, s.kind, s.service) == (TID, SID, "llm_request", "SERVER", "svc")
    assert (s.start_ns, s.end_ns) == (1_000_000_000, 1_125_000_000)
    assert s.layer == "inference"
    assert s.attributes["gen_ai.latency.time_in_model_prefill"] == pytest.approx(0.020)
    assert spans[1].parent_id is None
