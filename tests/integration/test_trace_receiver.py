"""The OTLP/HTTP receiver over a real socket: JSON, protobuf, gzip, malformed bodies, size limit, bearer token."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from typing import Any

import aiohttp
import pytest

from tailscope.records import Span
from tailscope.trace.receiver import OtlpReceiver

pytestmark = pytest.mark.integration

B64_SPAN = base64.b64encode(bytes.fromhex("eee19b7ec3c1b174")).decode()
DOC: dict[str, Any] = {
    "resourceSpans": [
        {
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
            "scopeSpans": [
                {
                    "spans": [
                        {
                            "traceId": "5b8efff798038103d269b633813fc60c",
                            "spanId": "eee19b7ec3c1b174",
                            "name": "GET /",
                            "kind": 2,
                            "startTimeUnixNano": "1000",
                            "endTimeUnixNano": "2000",
                        }
                    ]
                }
            ],
        }
    ]
}


async def _exercise() -> tuple[list[Span], dict[str, int]]:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    got: list[Span] = []
    rx = OtlpReceiver(got.extend, port=0, token="tok", max_body_bytes=4096, flush_interval_s=0.05)
    await rx.start()
    status: dict[str, int] = {}
    url = f"http://127.0.0.1:{rx.port}/v1/traces"
    auth = {"Authorization": "Bearer tok"}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url, json=DOC, headers=auth) as r:
                status["json"] = r.status
                assert await r.json() == {}
            proto = ParseDict(json.loads(json.dumps(DOC).replace("eee19b7ec3c1b174", B64_SPAN)),
                              ExportTraceServiceRequest()).SerializeToString()  # fmt: skip
            async with http.post(url, data=proto, headers={**auth, "Content-Type": "application/x-protobuf"}) as r:
                status["proto"] = r.status
                assert r.content_type == "application/x-protobuf"
            body = gzip.compress(json.dumps(DOC).encode())
            headers = {**auth, "Content-Type": "application/json", "Content-Encoding": "gzip"}
            async with http.post(url, data=body, headers=headers) as r:
                status["gzip"] = r.status
            async with http.post(url, data=b"{not json", headers={**auth, "Content-Type": "application/json"}) as r:
                status["malformed"] = r.status
                assert "malformed" in (await r.json())["error"]
            async with http.post(url, json={"resourceSpans": "x"}, headers=auth) as r:
                status["wrong_shape"] = r.status
            async with http.post(url, json=DOC) as r:
                status["no_token"] = r.status
            async with http.post(url, data=b"x" * 10_000, headers={**auth, "Content-Type": "application/json"}) as r:
                status["too_big"] = r.status
            bomb = gzip.compress(b" " * 100_000)
            async with http.post(url, data=bomb, headers=headers) as r:
                status["gzip_bomb"] = r.status
        await asyncio.sleep(0.2)
    finally:
        await rx.stop()
    return got, status


def test_receiver_statuses_and_spans() -> None:
    got, status = asyncio.run(asyncio.wait_for(_exercise(), timeout=30))
    assert status == {
        "json": 200,
        "proto": 200,
        "gzip": 200,
        "malformed": 400,
        "wrong_shape": 400,
        "no_token": 401,
        "too_big": 413,
        "gzip_bomb": 413,
    }
    assert len(got) == 3
    assert {s.span_id for s in got} == {"eee19b7ec3c1b174"}
    assert all(s.service == "api" and s.kind == "SERVER" and s.layer == "gateway" for s in got)
