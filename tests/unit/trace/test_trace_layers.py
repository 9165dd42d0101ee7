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


def test_an_explicit_layer_attribute_wins_over_conventions() -> None:
    # tailscope app marks each span's layer; the agent's planning model call is agent time, as the case counts it
    assert classify("plan", "INTERNAL", {"layer": "agent", "gen_ai.operation.name": "chat"}) == "agent"
    assert classify("auth", "INTERNAL", {"layer": "gateway"}) == "gateway"
    assert classify("x", "INTERNAL", {"layer": "transformer-12", "gen_ai.request.model": "m"}) == "inference"
