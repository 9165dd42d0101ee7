"""Fuzz targets: every parser that reads user or server input, with valid seeds to mutate.

A target takes bytes and must either succeed or raise a :class:`~tailscope.errors.TailscopeError` (whose message
names the input and position). Any other exception is a bug. Used by the property tests in
``tests/unit/test_fuzz_parsers.py`` and the long harness ``benchmarks/fuzz.py``.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path

from tailscope.errors import TailscopeError

Target = Callable[[bytes], object]


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _sse(data: bytes) -> object:
    from tailscope.client.sse import SSEParser

    p = SSEParser(max_line_bytes=4096)
    q = SSEParser(max_line_bytes=4096)
    half = len(data) // 2
    out = p.feed(data[:half]) + p.feed(data[half:]) + p.close()
    q.feed_data(data)
    q.close_data()
    return out


def _client_events(data: bytes) -> object:
    """The OpenAI stream accounting over arbitrary SSE bytes (what a hostile server can send)."""
    from tailscope.client.openai import _consume, _MalformedEvent, _ServerErrorEvent, _State
    from tailscope.client.sse import SSEParser

    st = _State()
    try:
        _consume(SSEParser(max_line_bytes=4096).feed_data(data + b"\n\n"), 0, st, None)
    except (_MalformedEvent, _ServerErrorEvent):
        return None  # classified as malformed_sse / server_error_event records by the client
    return st


def _prometheus(data: bytes) -> object:
    from tailscope.client.prometheus import parse_prometheus_text

    return parse_prometheus_text(_text(data), source="fuzz")


def _length_spec(data: bytes) -> object:
    from tailscope.workload.lengths import parse_length_spec

    return parse_length_spec(_text(data)[:200], what="fuzz")


def _slo(data: bytes) -> object:
    from tailscope.metrics.slo import parse_slo

    return parse_slo(_text(data)[:200])


def _profile(data: bytes) -> object:
    from tailscope.io.profile import parse_profile

    return parse_profile(_text(data), source="fuzz.yaml", base_dir=Path(tempfile.gettempdir()))


def _contract(data: bytes) -> object:
    from tailscope.io.contracts import parse_contract

    return parse_contract(_text(data), source="fuzz.yaml")


def _drill(data: bytes) -> object:
    from tailscope.io.drill import parse_drill

    return parse_drill(_text(data), source="fuzz.yaml")


def _proxy_rules(data: bytes) -> object:
    from tailscope.io.proxy_rules import parse_rules

    return parse_rules(_text(data), source="fuzz.yaml")


def _calibration(data: bytes) -> object:
    import yaml

    from tailscope.engine.calibration import calibration_from_mapping

    try:
        doc = yaml.safe_load(_text(data))
    except yaml.YAMLError:
        return None  # the file loader turns this into a ConfigError naming the file
    return calibration_from_mapping(doc, source="fuzz.yaml")


def _trace_json(fmt: str) -> Target:
    def run(data: bytes) -> object:
        from tailscope.trace.ingest.common import ParseContext
        from tailscope.trace.ingest.files import parse_document

        try:
            doc = json.loads(data)
        except ValueError:
            return None
        ctx = ParseContext(source="fuzz.json")
        return list(parse_document(doc, fmt, ctx))

    return run


def _trace_file(data: bytes) -> object:
    from tailscope.trace.ingest.files import iter_file

    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        fh.write(data)
        fh.flush()
        return list(iter_file(fh.name))


def _otlp_proto(data: bytes) -> object:
    from tailscope.trace.ingest.common import ParseContext
    from tailscope.trace.ingest.otlp import parse_otlp_proto

    return list(parse_otlp_proto(data, ParseContext(source="fuzz.pb")))


def _replay(data: bytes) -> object:
    from tailscope.io.replay import read_replay

    with tempfile.NamedTemporaryFile(suffix=".jsonl") as fh:
        fh.write(data)
        fh.flush()
        return read_replay(fh.name)


def _autoscale(data: bytes) -> object:
    from tailscope.io.autoscaler import parse_policy

    return parse_policy(_text(data), source="fuzz.yaml")


def _lengths(data: bytes) -> object:
    from tailscope.io.lengths import read_lengths

    out = []
    for suffix in (".csv", ".jsonl"):
        with tempfile.NamedTemporaryFile(suffix=suffix) as fh:
            fh.write(data)
            fh.flush()
            out.append(read_lengths(Path(fh.name), column="n"))
    return out


def _bench_export(data: bytes) -> object:
    from tailscope.verify.rundata import run_from_export

    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return run_from_export(doc, source="fuzz.json")


_OTLP_SEED = json.dumps(
    {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "POST /chat",
                                "kind": 2,
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}],
                            }
                        ]
                    }
                ],
            }
        ]
    }
).encode()
_JAEGER_SEED = json.dumps(
    {
        "data": [
            {
                "traceID": "abc123",
                "spans": [
                    {
                        "traceID": "abc123",
                        "spanID": "def456",
                        "operationName": "GET /x",
                        "references": [],
                        "startTime": 1544712660000000,
                        "duration": 1000,
                        "tags": [{"key": "span.kind", "type": "string", "value": "server"}],
                        "processID": "p1",
                    }
                ],
                "processes": {"p1": {"serviceName": "api", "tags": []}},
            }
        ]
    }
).encode()
_ZIPKIN_SEED = json.dumps(
    [
        {
            "traceId": "abc123",
            "id": "def456",
            "name": "get",
            "timestamp": 1544712660000000,
            "duration": 1000,
            "kind": "SERVER",
            "localEndpoint": {"serviceName": "api"},
        }
    ]
).encode()

TARGETS: dict[str, tuple[Target, list[bytes]]] = {
    "sse": (_sse, [b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n: c\r\ndata: [DONE]\r\n\r\n']),
    "client_events": (
        _client_events,
        [b'data: {"id":"x","choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1}}\n\ndata: [DONE]'],
    ),
    "prometheus": (
        _prometheus,
        [b'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} 3\nx_total 1e3\n'],
    ),
    "length_spec": (_length_spec, [b"lognormal:40:0.6:min=5:max=300", b"uniform:100:900", b"256"]),
    "slo": (_slo, [b"ttft_p99=1.5s", b"tpot_p99.9=60ms"]),
    "profile": (
        _profile,
        [
            b"name: p\nclasses:\n  - name: a\n    weight: 1\n    input_tokens: {dist: uniform, min: 10, max: 90}\n"
            b"    output_tokens: {dist: fixed, value: 20}\narrival: {mode: open, process: poisson, stages: "
            b"[{rate: 2, duration_s: 10}]}\nstop: {duration_s: 10}\n",
            b"name: g\nclasses:\n  - name: a\n    input_tokens: 40\n    output_tokens: 8\n    agent:\n      steps:\n"
            b"        - {name: plan}\n        - {name: s, fan_out: uniform:2:4, gap_ms: exponential:50:max=500}\n"
            b"        - {name: r, repeat: 2, steps: [{name: t, use_answers: true, gap_ms: 5}]}\n"
            b"arrival: {rate: 2}\nstop: {requests: 20}\n",
        ],
    ),
    "contract": (
        _contract,
        [
            b"name: c\nslo:\n  - {metric: ttft_ms, percentile: p99, max: 1500}\n  - {metric: error_rate, max: 0.01}\n"
            b"layers:\n  - {layer: retrieval, percentile: p99.9, max_ms: 200}\n"
        ],
    ),
    "drill": (
        _drill,
        [
            b"name: d\ntarget: {url: 'http://127.0.0.1:8080'}\nload: {rate: 4, duration_s: 20, output_tokens: 32}\n"
            b"fault: {at_s: 5, for_s: 8, kind: llm-down}\nexpect: {error_rate_max: 0.01, recovered_within_s: 5}\n",
            b"name: p\ntarget: {url: 'http://h:1'}\nload: {concurrency: 2, duration_s: 9}\nfault: {at_s: 1, for_s: 2, "
            b"kind: proxy, proxy: 'http://h:2', rule: {latency: {dist: uniform, min_ms: 1, max_ms: 9}}}\n",
        ],
    ),
    "proxy_rules": (
        _proxy_rules,
        [
            b"rules:\n  - {name: a, share: 0.5, error: {status: 503}}\n  - {name: b, stall: {after_bytes: 9, ms: 5}}\n"
            b"  - {latency: {dist: lognormal, median_ms: 10, p95_ms: 30}, bandwidth_kbps: 4, reset: {after_bytes: 1}}\n"
        ],
    ),
    "calibration": (_calibration, [b"default: {mfu: 0.5, mbu: 0.8}\ngpus:\n  h100-sxm: {step_overhead_ms: 2.5}\n"]),
    "otlp_json": (_trace_json("otlp-json"), [_OTLP_SEED]),
    "jaeger": (_trace_json("jaeger"), [_JAEGER_SEED]),
    "zipkin": (_trace_json("zipkin"), [_ZIPKIN_SEED]),
    "trace_file": (_trace_file, [_OTLP_SEED, _JAEGER_SEED, _ZIPKIN_SEED]),
    "otlp_proto": (_otlp_proto, [b"\n\x00"]),
    "replay": (
        _replay,
        [
            b'{"timestamp_s": 0, "input_tokens": 10, "output_tokens": 5}\n{"timestamp_s": 0.5, "input_tokens": 7, '
            b'"output_tokens": 3, "class": "a"}\n'
        ],
    ),
    "autoscale": (_autoscale, [b"metric: ttft_p99\ntarget: 2000\nmin_replicas: 1\nmax_replicas: 4\nwindow_s: 30\n"]),
    "lengths": (_lengths, [b"n\n10\n20\n", b'{"n": 7}\n9\n']),
    "bench_export": (
        _bench_export,
        [
            json.dumps(
                {
                    "run": {"id": "r", "kind": "bench"},
                    "summary": {},
                    "requests": [
                        {
                            "id": 0,
                            "class": "default",
                            "scheduled_s": 0,
                            "sent_s": 0,
                            "first_token_s": 0.1,
                            "end_s": 0.2,
                            "input_tokens": 3,
                            "output_tokens": 2,
                            "tokens_source": "usage",
                            "status": "ok",
                            "error": None,
                            "server_request_id": "x",
                            "chunk_times_s": [0.1, 0.2],
                            "chunk_tokens": [1, 1],
                        }
                    ],
                }
            ).encode()
        ],
    ),
}


def mutate(seed: bytes, rng: random.Random, *, max_ops: int = 8) -> bytes:
    """A random mutation of ``seed``: byte flips, inserts (incl. structural characters), deletes, splices."""
    data = bytearray(seed)
    alphabet = b'{}[]":,\n\r\t \\-0123456789.eE+aAzZ\x00\xff:=#'
    for _ in range(rng.randint(1, max_ops)):
        op = rng.random()
        pos = rng.randint(0, len(data)) if data else 0
        if op < 0.3 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op < 0.55:
            data[pos:pos] = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
        elif op < 0.8 and data:
            end = min(len(data), pos + rng.randint(1, 16))
            del data[pos:end]
        elif data:
            a = rng.randint(0, len(data) - 1)
            b = min(len(data), a + rng.randint(1, 32))
            data[pos:pos] = data[a:b]
    return bytes(data)


def run_target(name: str, data: bytes) -> BaseException | None:
    """Run one case; return the unhandled (non-TailscopeError) exception, or None."""
    fn, _ = TARGETS[name]
    try:
        fn(data)
    except TailscopeError as exc:
        if not str(exc):
            return AssertionError(f"{name}: a TailscopeError without a message")
        return None
    except RecursionError:
        return None  # deeply nested JSON/YAML is refused by the language's own limits
    except Exception as exc:
        return exc
    return None
