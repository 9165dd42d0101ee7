"""Trace context in the request stream: which requests are traced (from the seed) and the W3C ids and headers."""

from __future__ import annotations

import random
import re

import pytest

from tailscope.client.request import ClientOptions, request_headers
from tailscope.errors import ConfigError
from tailscope.runner.options import BenchOptions
from tailscope.runner.resolve import resolve
from tailscope.workload.spec import RequestSpec
from tailscope.workload.tracecontext import check_tracestate, parse_trace_context, with_trace_context


def _specs(n: int) -> list[RequestSpec]:
    return [RequestSpec(id=i, input_tokens=8, output_tokens=4) for i in range(n)]


@pytest.mark.parametrize(
    ("value", "ratio"), [("off", 0.0), ("on", 1.0), (True, 1.0), (False, 0.0), ("0.25", 0.25), (0.5, 0.5), (None, 0)]
)
def test_parse_trace_context(value: object, ratio: float) -> None:
    assert parse_trace_context(value) == ratio  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["sometimes", "1.5", -0.1])
def test_bad_trace_context_names_the_flag(value: object) -> None:
    with pytest.raises(ConfigError, match="--trace-context"):
        parse_trace_context(value)  # type: ignore[arg-type]


def test_every_request_gets_valid_distinct_ids_when_on() -> None:
    out = list(with_trace_context(iter(_specs(200)), 1.0, seed=0, ids=random.Random(1)))
    assert all(re.fullmatch(r"[0-9a-f]{32}", s.trace_id or "") for s in out)
    assert all(re.fullmatch(r"[0-9a-f]{16}", s.span_id or "") for s in out)
    assert len({s.trace_id for s in out}) == 200
    assert [s.id for s in out] == list(range(200))


def test_a_ratio_samples_the_same_requests_for_a_seed_with_fresh_ids() -> None:
    a = list(with_trace_context(iter(_specs(2000)), 0.1, seed=5, ids=random.Random(1)))
    b = list(with_trace_context(iter(_specs(2000)), 0.1, seed=5, ids=random.Random(2)))
    picked_a = [s.id for s in a if s.trace_id]
    assert picked_a == [s.id for s in b if s.trace_id]
    assert 150 < len(picked_a) < 250
    assert {s.trace_id for s in a if s.trace_id}.isdisjoint({s.trace_id for s in b if s.trace_id})
    c = list(with_trace_context(iter(_specs(2000)), 0.1, seed=6, ids=random.Random(1)))
    assert [s.id for s in c if s.trace_id] != picked_a


def test_off_leaves_the_stream_alone() -> None:
    specs = _specs(5)
    assert list(with_trace_context(iter(specs), 0.0, seed=0, ids=random.Random(1))) == specs


def test_headers_carry_traceparent_and_tracestate() -> None:
    opts = ClientOptions(tracestate="ts=1")
    h = request_headers(opts, "a" * 32, "b" * 16)
    assert h["traceparent"] == f"00-{'a' * 32}-{'b' * 16}-01"
    assert h["tracestate"] == "ts=1"
    assert request_headers(opts, None, None) == {"Content-Type": "application/json"}


def test_resolve_wires_trace_context_into_the_stream_and_settings() -> None:
    r = resolve(BenchOptions(url="http://x", requests=10, concurrency=1, trace_context="on", tracestate="k=v"))
    assert r.config.trace_ratio == 1.0
    assert r.config.tracestate == "k=v"
    assert r.config.settings["trace_context"] == 1.0
    assert all(s.trace_id for s in r.specs)
    off = resolve(BenchOptions(url="http://x", requests=3, concurrency=1))
    assert off.config.trace_ratio == 0
    assert all(s.trace_id is None for s in off.specs)


def test_tracestate_needs_trace_context_and_a_plausible_value() -> None:
    with pytest.raises(ConfigError, match="--tracestate"):
        resolve(BenchOptions(url="http://x", requests=3, concurrency=1, tracestate="k=v"))
    with pytest.raises(ConfigError, match="--tracestate"):
        check_tracestate("no equals sign")
