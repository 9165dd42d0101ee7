"""Which layer of the stack owns a span: network, gateway, inference, retrieval, agent, business or other.

The classifier reads, in this order (first match wins):

1. user rules (service, name or attribute regexes → layer), e.g. from a YAML file;
1b. an explicit ``layer`` attribute naming one of :data:`LAYERS` (an application that knows its layers says so, as
   ``tailscope app`` does);
2. the LLM dialects: OpenInference ``openinference.span.kind``, OpenLLMetry ``traceloop.span.kind`` /
   ``llm.request.type``, LangSmith ``run_type``;
3. OpenTelemetry GenAI semantic conventions: ``gen_ai.operation.name`` (chat, text_completion, generate_content,
   embeddings → inference; retrieval → retrieval; execute_tool, invoke_agent, create_agent → agent), then
   ``gen_ai.tool.*``/``gen_ai.agent.*`` → agent and any other ``gen_ai.*`` attribute (model, usage, vLLM's
   ``gen_ai.latency.*`` and ``gen_ai.request.*``) → inference; then the serving engines by name: vLLM's
   ``llm_request`` span, and spans of a service named ``vllm``/``sglang`` (SGLang's request-stage spans) → inference;
4. ``db.*`` (``db.system.name``, deprecated ``db.system``/``db.statement``, ``db.query.text``): vector stores →
   retrieval, other databases → business; ``messaging.*`` → business;
5. ``http.*``/``url.*``/``rpc.*`` by span kind: SERVER → gateway, CLIENT → network;
6. span kind alone: SERVER → gateway, CLIENT → network, PRODUCER/CONSUMER → business; else ``other``.

Network time is approximated as a CLIENT span minus its SERVER child: the client span's own (exclusive) time is what
the network layer gets. A CLIENT call without a SERVER child in the trace is an external API: :func:`refine_layer`
turns it into ``business``, and a non-root SERVER span (a downstream service) is ``business`` too. A GenAI CLIENT
span (an LLM call as the caller saw it: ``bench --otlp-endpoint``, an instrumented SDK) whose SERVER child is in the
trace is ``network`` as well: the server's spans hold the inference, the client span's own time is the wire's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailscope.errors import ConfigError

LAYERS: tuple[str, ...] = ("network", "gateway", "inference", "retrieval", "agent", "business", "other")

_OPENINFERENCE = {
    "LLM": "inference",
    "EMBEDDING": "inference",
    "RETRIEVER": "retrieval",
    "RERANKER": "retrieval",
    "TOOL": "agent",
    "AGENT": "agent",
    "CHAIN": "agent",
    "GUARDRAIL": "agent",
    "EVALUATOR": "other",
}
_TRACELOOP = {"workflow": "agent", "task": "agent", "agent": "agent", "tool": "agent"}
_LANGSMITH = {
    "llm": "inference",
    "chat_model": "inference",
    "embedding": "inference",
    "retriever": "retrieval",
    "tool": "agent",
    "chain": "agent",
    "prompt": "agent",
    "parser": "agent",
}
_GENAI_OPS = {
    "chat": "inference",
    "text_completion": "inference",
    "generate_content": "inference",
    "embeddings": "inference",
    "retrieval": "retrieval",
    "execute_tool": "agent",
    "invoke_agent": "agent",
    "create_agent": "agent",
}
_GENAI_MODEL_KEYS = (
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.system",
    "gen_ai.provider.name",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "llm.request.type",
)
#: span names that serving engines give a request's own span (vLLM: one ``llm_request`` span per request)
_ENGINE_SPAN_NAMES = frozenset({"llm_request"})
#: services that are inference engines (their spans: the request's stages inside the engine)
_ENGINE_SERVICE = re.compile(r"(?i)\b(vllm|sglang)\b|^(vllm|sglang)[-_.]")
_VECTOR_DBS = frozenset(
    {"pinecone", "qdrant", "weaviate", "milvus", "chroma", "chromadb", "lancedb", "pgvector", "vespa", "faiss"}
)
_DB_KEYS = ("db.system.name", "db.system", "db.query.text", "db.statement", "db.operation.name", "db.operation")
_HTTP_KEYS = ("http.request.method", "http.method", "url.full", "http.url", "http.route", "url.path", "rpc.system")


@dataclass(frozen=True, slots=True)
class LayerRule:
    """A user rule: every given pattern must match (``re.search``) for the span to get ``layer``."""

    layer: str
    service: re.Pattern[str] | None = None
    name: re.Pattern[str] | None = None
    attributes: tuple[tuple[str, re.Pattern[str]], ...] = ()

    def matches(self, name: str, service: str, attributes: Mapping[str, Any]) -> bool:
        """True when all of the rule's patterns match."""
        if self.service is not None and not self.service.search(service):
            return False
        if self.name is not None and not self.name.search(name):
            return False
        for key, pattern in self.attributes:
            value = attributes.get(key)
            if value is None or not pattern.search(str(value)):
                return False
        return True


def parse_layer_rules(data: Any, *, source: str = "rules") -> tuple[LayerRule, ...]:
    """Validate user rules loaded from YAML/JSON.

    Accepts ``{"rules": [...]}`` or a bare list; each rule is
    ``{"layer": "retrieval", "service": "regex", "name": "regex", "attributes": {"key": "regex"}}`` with at least one
    matcher.

    Raises:
        ConfigError: naming ``source``, the rule's position and the field that is wrong.
    """
    if isinstance(data, Mapping):
        data = data.get("rules")
    if not isinstance(data, Sequence) or isinstance(data, str | bytes):
        raise ConfigError(f"{source}: expected a list of rules under 'rules:' (each with layer and a matcher)")
    rules: list[LayerRule] = []
    for k, item in enumerate(data):
        where = f"{source}: rules[{k}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}: expected a mapping with layer and service/name/attributes")
        layer = item.get("layer")
        if layer not in LAYERS:
            raise ConfigError(f"{where}.layer: must be one of {', '.join(LAYERS)} (got {layer!r})")
        unknown = set(item) - {"layer", "service", "name", "attributes"}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")

        def compile_(text: Any, field: str, where: str = where) -> re.Pattern[str]:
            if not isinstance(text, str):
                raise ConfigError(f"{where}.{field}: expected a regex string (got {text!r})")
            try:
                return re.compile(text)
            except re.error as exc:
                raise ConfigError(f"{where}.{field}: invalid regex {text!r}: {exc}") from None

        attrs_raw = item.get("attributes") or {}
        if not isinstance(attrs_raw, Mapping):
            raise ConfigError(f"{where}.attributes: expected a mapping of attribute key → regex")
        attrs = tuple((str(key), compile_(v, f"attributes.{key}")) for key, v in attrs_raw.items())
        service = compile_(item["service"], "service") if item.get("service") is not None else None
        name = compile_(item["name"], "name") if item.get("name") is not None else None
        if service is None and name is None and not attrs:
            raise ConfigError(f"{where}: give at least one of service, name or attributes")
        rules.append(LayerRule(layer=str(layer), service=service, name=name, attributes=attrs))
    return tuple(rules)


def classify(
    name: str,
    kind: str,
    attributes: Mapping[str, Any],
    *,
    service: str = "",
    rules: Sequence[LayerRule] = (),
) -> str:
    """The layer of one span (see the module docstring for the order of evidence)."""
    for rule in rules:
        if rule.matches(name, service, attributes):
            return rule.layer
    if attributes:
        get = attributes.get
        v = get("layer")
        if isinstance(v, str) and v in LAYERS:
            return v
        v = get("openinference.span.kind")
        if v is not None:
            return _OPENINFERENCE.get(str(v).upper(), "other")
        v = get("traceloop.span.kind")
        if v is not None:
            return _TRACELOOP.get(str(v).lower(), "agent")
        v = get("run_type")
        if v is not None and str(v).lower() in _LANGSMITH:
            return _LANGSMITH[str(v).lower()]
        v = get("gen_ai.operation.name")
        if v is not None:
            return _GENAI_OPS.get(str(v).lower(), "inference")
        for key in _GENAI_MODEL_KEYS:
            if key in attributes:
                return "inference"
        for key in attributes:
            if key.startswith("gen_ai."):
                return "agent" if key.startswith(("gen_ai.tool.", "gen_ai.agent.")) else "inference"
    if name in _ENGINE_SPAN_NAMES or _ENGINE_SERVICE.search(service):
        return "inference"
    if attributes:
        get = attributes.get
        for key in _DB_KEYS:
            if key in attributes:
                system = str(get("db.system.name") or get("db.system") or "").lower()
                return "retrieval" if system in _VECTOR_DBS else "business"
        for key in attributes:
            if key.startswith("messaging."):
                return "business"
        for key in _HTTP_KEYS:
            if key in attributes:
                return "gateway" if kind == "SERVER" else "network" if kind == "CLIENT" else "other"
    if kind == "SERVER":
        return "gateway"
    if kind == "CLIENT":
        return "network"
    if kind in ("PRODUCER", "CONSUMER"):
        return "business"
    return "other"


def refine_layer(layer: str, kind: str, child_kinds: Sequence[str], *, is_root: bool = True) -> str:
    """Tree-aware corrections.

    A network CLIENT span with no SERVER child is an external API call (``business``); a gateway SERVER span that is
    not a root serves an internal or downstream service (``business``); the entry point stays ``gateway``; an
    inference CLIENT span with a SERVER child (the engine's own span beneath the caller's) is ``network``.
    """
    if layer == "inference" and kind == "CLIENT" and "SERVER" in child_kinds:
        return "network"
    if layer == "network" and kind == "CLIENT" and "SERVER" not in child_kinds:
        return "business"
    if layer == "gateway" and kind == "SERVER" and not is_root:
        return "business"
    return layer
