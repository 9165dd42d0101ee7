"""Layer classification from semantic conventions, LLM dialects and user rules."""

from __future__ import annotations

import pytest

from tailscope.errors import ConfigError
from tailscope.trace.layers import classify, parse_layer_rules, refine_layer


@pytest.mark.parametrize(
    ("kind", "attrs", "layer"),
    [
        ("CLIENT", {"gen_ai.operation.name": "chat", "http.request.method": "POST"}, "inference"),
        ("INTERNAL", {"gen_ai.operation.name": "embeddings"}, "inference"),
        ("INTERNAL", {"gen_ai.operation.name": "retrieval"}, "retrieval"),
        ("INTERNAL", {"gen_ai.operation.name": "execute_tool"}, "agent"),
        ("INTERNAL", {"gen_ai.operation.name": "invoke_agent"}, "agent"),
        ("CLIENT", {"gen_ai.request.model": "gpt-4o"}, "inference"),
        ("CLIENT", {"gen_ai.usage.input_tokens": 10}, "inference"),
        ("INTERNAL", {"openinference.span.kind": "LLM"}, "inference"),
        ("INTERNAL", {"openinference.span.kind": "RETRIEVER"}, "retrieval"),
        ("INTERNAL", {"openinference.span.kind": "TOOL"}, "agent"),
        ("INTERNAL", {"traceloop.span.kind": "workflow"}, "agent"),
        ("INTERNAL", {"llm.request.type": "chat"}, "inference"),
        ("INTERNAL", {"run_type": "retriever"}, "retrieval"),
        ("INTERNAL", {"run_type": "llm"}, "inference"),
        ("CLIENT", {"db.system.name": "postgresql", "db.query.text": "SELECT 1"}, "business"),
        ("CLIENT", {"db.system": "redis"}, "business"),
        ("CLIENT", {"db.statement": "SELECT 1"}, "business"),
        ("CLIENT", {"db.system": "qdrant"}, "retrieval"),
        ("PRODUCER", {"messaging.system": "kafka"}, "business"),
        ("SERVER", {"http.route": "/chat", "http.request.method": "POST"}, "gateway"),
        ("CLIENT", {"url.full": "http://x/y"}, "network"),
        ("CLIENT", {"rpc.system": "grpc"}, "network"),
        ("SERVER", {}, "gateway"),
        ("CLIENT", {}, "network"),
        ("CONSUMER", {}, "business"),
        ("INTERNAL", {}, "other"),
    ],
)
def test_classify(kind: str, attrs: dict[str, object], layer: str) -> None:
    assert classify("op", kind, attrs) == layer


def test_user_rules_override_and_validate() -> None:
    rules = parse_layer_rules(
        {
            "rules": [
                {"service": "^vector-", "layer": "retrieval"},
                {"attributes": {"peer.service": "pay"}, "layer": "business"},
            ]
        }
    )
    assert classify("POST /q", "CLIENT", {"gen_ai.request.model": "x"}, service="vector-db", rules=rules) == "retrieval"
    assert classify("x", "INTERNAL", {"peer.service": "payments"}, rules=rules) == "business"
    assert classify("x", "INTERNAL", {}, service="other", rules=rules) == "other"
    with pytest.raises(ConfigError, match=r"rules\[0\]\.layer"):
        parse_layer_rules([{"name": "x", "layer": "database"}], source="r.yaml")
    with pytest.raises(ConfigError, match="invalid regex"):
        parse_layer_rules([{"name": "(", "layer": "other"}])
    with pytest.raises(ConfigError, match="at least one"):
        parse_layer_rules([{"layer": "other"}])


def test_refine_network_and_downstream_servers() -> None:
    assert refine_layer("network", "CLIENT", ["SERVER"]) == "network"
    assert refine_layer("network", "CLIENT", []) == "business"  # external API
    assert refine_layer("gateway", "SERVER", [], is_root=False) == "business"
    assert refine_layer("gateway", "SERVER", [], is_root=True) == "gateway"
    assert refine_layer("inference", "CLIENT", ["SERVER"]) == "network"  # an LLM call over the engine's own span
    assert refine_layer("inference", "CLIENT", []) == "inference"  # an LLM API seen from outside
    assert refine_layer("inference", "SERVER", ["SERVER"]) == "inference"


#: vLLM's per-request span as its CPU build exports it (kind SERVER, parented on the caller): gen_ai.latency.* and
#: gen_ai.usage.prompt_tokens, but no model attribute
_VLLM_LLM_REQUEST = {
    "gen_ai.latency.time_in_queue": 0.001,
    "gen_ai.latency.time_to_first_token": 0.05,
    "gen_ai.latency.e2e": 0.4,
    "gen_ai.usage.prompt_tokens": 12,
    "gen_ai.usage.completion_tokens": 16,
    "gen_ai.request.id": "cmpl-1",
    "gen_ai.request.max_tokens": 16,
}


@pytest.mark.parametrize(
    ("name", "kind", "service", "attrs", "layer"),
    [
        ("llm_request", "SERVER", "vllm", _VLLM_LLM_REQUEST, "inference"),
        ("llm_request", "SERVER", "unknown_service", {}, "inference"),  # the name alone
        ("anything", "SERVER", "svc", {"gen_ai.latency.e2e": 0.2}, "inference"),
        ("anything", "INTERNAL", "svc", {"gen_ai.tool.name": "search"}, "agent"),
        ("Prefill Forward", "INTERNAL", "sglang", {}, "inference"),
        ("request", "SERVER", "sglang-router", {}, "inference"),
        ("POST /v1/chat/completions", "SERVER", "gateway", {"http.request.method": "POST"}, "gateway"),
        ("GET", "SERVER", "vllmish-proxy", {}, "gateway"),  # a name that merely starts like an engine's
    ],
)
def test_serving_engine_spans_are_inference(name: str, kind: str, service: str, attrs: dict, layer: str) -> None:
    assert classify(name, kind, attrs, service=service) == layer
    if layer == "inference":  # deeper in a tree (under a gateway) it stays inference
        assert refine_layer(layer, kind, [], is_root=False) == "inference"


def test_an_explicit_layer_attribute_wins_over_conventions() -> None:
    # tailscope app marks each span's layer; the agent's planning model call is agent time, as the case counts it
    assert classify("plan", "INTERNAL", {"layer": "agent", "gen_ai.operation.name": "chat"}) == "agent"
    assert classify("auth", "INTERNAL", {"layer": "gateway"}) == "gateway"
    assert classify("x", "INTERNAL", {"layer": "transformer-12", "gen_ai.request.model": "m"}) == "inference"
