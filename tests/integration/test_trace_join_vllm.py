"""The join against the real vLLM CPU server's own spans (issue 21, "the same join against the real vLLM").

vLLM exports one ``llm_request`` span per request when started with ``--otlp-traces-endpoint``; with
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`` it speaks OTLP/HTTP protobuf, which ``trace collect`` takes from
a plain install, and by default OTLP/gRPC, which ``trace collect --grpc-port`` takes (``tailscope[grpc]``): the test
runs both ways. The session's ``vllm_server`` runs without tracing, so this test starts its own server (same tiny
model, same arguments plus the endpoint) with :func:`tailscope.testing.vllm.start_vllm`; it skips like the other vLLM
tests when vLLM is not installed (and fails under CI).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import duckdb
import pytest
from test_trace_join import _start, _stop

import tailscope
from tailscope.testing.vllm import VllmStartError, start_vllm

#: the session server's arguments (conftest.SERVER_ARGS): a KV cache small enough to see queueing
SERVER_ARGS = ("--num-gpu-blocks-override", "128")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_bench_joined_with_vllms_llm_request_spans(
    tmp_path: Path, tiny_model_dir: Path, vllm_python: Path, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    trace_db = tmp_path / "traces.duckdb"
    run_db = tmp_path / "runs.duckdb"
    if protocol == "grpc":  # vLLM's default protocol: the SDK's gRPC exporter, plain text on loopback
        collect, grpc_addr, collect_out = _start(
            ["trace", "collect", "--port", "0", "--grpc-port", "0", "--set", "vllm", "--db", str(trace_db)],
            r"listening on grpc://(127\.0\.0\.1:\d+)",
        )
        endpoint = f"http://{grpc_addr}"  # http:// = a plain-text gRPC channel (docs/trace.md)
    else:  # the http exporter takes the endpoint as the full URL
        collect, collect_url, collect_out = _start(
            ["trace", "collect", "--port", "0", "--set", "vllm", "--db", str(trace_db)],
            r"listening on (http://127\.0\.0\.1:\d+)",
        )
        endpoint = f"{collect_url}/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "500")  # the batch processor sends every 0.5 s (default 5 s)
    log = Path(__file__).resolve().parents[2] / "test-artifacts" / f"vllm-otlp-{os.getpid()}.log"
    try:
        with start_vllm(
            tiny_model_dir, vllm_python, log_path=log, timeout_s=_start_timeout(),
            extra_args=(*SERVER_ARGS, "--otlp-traces-endpoint", endpoint),
        ) as server:  # fmt: skip
            result = tailscope.bench(
                server.base_url, model=server.model, requests=20, rate=2.0, arrival="constant", input_tokens=32,
                output_tokens=8, trace_context="on", store=run_db,
            )  # fmt: skip
            assert result.summary.requests.completed == 20
            time.sleep(3.0)  # vLLM's batch span processor, then the collector's flush
    except VllmStartError as exc:
        pytest.fail(str(exc))
    finally:
        _stop(collect)
    assert "received" in "".join(collect_out), "".join(collect_out)

    con = duckdb.connect(str(trace_db), read_only=True)
    try:
        sql = "SELECT trace_id, parent_id, layer, attributes FROM spans WHERE name = 'llm_request'"
        rows = con.execute(sql).fetchall()
    finally:
        con.close()
    assert rows, "vLLM exported no llm_request span"
    sent = {r.trace_id: r.span_id for r in result.records}
    engine: dict[str, dict[str, float]] = {}
    for trace_id, parent, layer, attrs in rows:
        assert layer == "inference"
        assert sent.get(trace_id) == parent  # parented on the client's span
        engine[trace_id] = json.loads(attrs)

    join = tailscope.join_traces("latest", "vllm", store=run_db, trace_store=trace_db)
    assert join.joined >= 0.95 * join.requests, join.summary.unjoined
    for p in join.summary.per_request:
        assert sum(p.ttft_parts_ns.values()) == p.ttft_ns
        assert all(v >= 0 for v in p.ttft_parts_ns.values())
        a = engine[p.trace_id]
        assert abs(p.ttft_parts_ns.get("queue", 0) / 1e9 - float(a["gen_ai.latency.time_in_queue"])) < 1e-5
        assert abs(p.ttft_parts_ns["prefill"] / 1e9 - float(a["gen_ai.latency.time_in_model_prefill"])) < 1e-5
        assert p.ttft_parts_ns["network"] >= 0


def _start_timeout() -> float:
    return float(os.environ.get("TAILSCOPE_VLLM_START_TIMEOUT", "360"))
