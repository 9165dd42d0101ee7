"""OTLP/gRPC into ``trace collect --grpc-port``: the OpenTelemetry SDK's own gRPC exporter (vLLM's default protocol)
sends spans to a collector process; they land in its store. A raw gRPC call checks the bearer token and bad bodies."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tailscope.errors import ConfigError
from tailscope.records import Span
from tailscope.trace.receiver import GRPC_SERVICE, OtlpReceiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
grpc = pytest.importorskip("grpc")


def test_the_sdks_grpc_exporter_reaches_trace_collect(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    db = tmp_path / "traces.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailscope", "trace", "collect", "--port", "0", "--grpc-port", "0", "--set", "g",
         "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    address = None
    deadline = time.monotonic() + 60
    while address is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"listening on grpc://(127\.0\.0\.1:\d+)", line)
        address = m.group(1) if m else None
    try:
        assert address is not None, "trace collect did not say where it receives gRPC"
        provider = TracerProvider(resource=Resource.create({"service.name": "vllm"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=address, insecure=True)))
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("llm_request", kind=SpanKind.SERVER) as span:
            span.set_attribute("gen_ai.latency.time_in_queue", 0.003)
        provider.shutdown()
    finally:
        proc.send_signal(2)
        out, _ = proc.communicate(timeout=30)
    assert "received 1 spans in 1 request(s)" in out, out
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT name, kind, service, layer FROM spans").fetchall()
    finally:
        con.close()
    assert rows == [("llm_request", "SERVER", "vllm", "inference")]


async def _raw_calls() -> tuple[list[Span], list[str]]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    got: list[Span] = []
    rx = OtlpReceiver(got.extend, port=0, grpc_port=0, token="tok", flush_interval_s=0.05)
    await rx.start()
    codes: list[str] = []
    req = ExportTraceServiceRequest()
    sp = req.resource_spans.add().scope_spans.add().spans.add()
    sp.trace_id, sp.span_id, sp.name = bytes.fromhex("5b8efff798038103d269b633813fc60c"), b"\x01" * 8, "GET /"
    sp.start_time_unix_nano, sp.end_time_unix_nano = 1000, 2000
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{rx.grpc_port}") as channel:
            export = channel.unary_unary(f"/{GRPC_SERVICE}/Export")
            body = await export(req.SerializeToString(), metadata=(("authorization", "Bearer tok"),))
            ExportTraceServiceResponse.FromString(body)
            codes.append("OK")
            for metadata, payload in ((None, req.SerializeToString()), (("authorization", "Bearer tok"), b"\xff\x01")):
                try:
                    await export(payload, metadata=None if metadata is None else (metadata,))
                    codes.append("OK")
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code().name)
    finally:
        await rx.stop()
    return got, codes


def test_raw_grpc_token_and_bad_bodies() -> None:
    got, codes = asyncio.run(_raw_calls())
    assert codes == ["OK", "UNAUTHENTICATED", "INVALID_ARGUMENT"]
    assert [s.name for s in got] == ["GET /"]


def test_a_port_in_use_is_a_config_error() -> None:
    async def twice() -> None:
        a = OtlpReceiver(lambda b: None, port=0, grpc_port=0)
        await a.start()
        try:
            b = OtlpReceiver(lambda b: None, port=0, grpc_port=a.grpc_port)
            with pytest.raises(ConfigError, match="--grpc-port"):
                await b.start()
        finally:
            await a.stop()

    asyncio.run(twice())
