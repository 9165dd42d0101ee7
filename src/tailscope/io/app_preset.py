"""Reference-application presets (``tailscope app --preset NAME|FILE``): YAML validated by pydantic, handed on as
:class:`~tailscope.workload.app_preset.AppPreset`.

Costs are ``{median_ms, p95_ms}`` (a lognormal); sections group the fields by layer (``gateway``, ``network``,
``retrieval``, ``agent``, ``inference``, ``business``). Unknown keys are errors; every error names the file, the line
and the field (``my.yaml:12: retrieval.top_k Input should be greater than or equal to 1 (got 0)``).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tailscope.errors import ConfigError
from tailscope.files import read_user_text
from tailscope.io._schema import nested_problem
from tailscope.io._yaml import line_of, validate_yaml_mapping
from tailscope.workload.app_preset import AppPreset, Dist, EngineSpec, Search


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Dist(_Strict):
    median_ms: float = Field(ge=0)
    p95_ms: float = Field(ge=0)

    def dist(self) -> Dist:
        return Dist(self.median_ms / 1e3, max(self.p95_ms, self.median_ms) / 1e3)


class _Engine(_Strict):
    model: str
    gpu: str = "h100-sxm"
    tp: int = Field(default=1, ge=1)
    speed: float = Field(default=1.0, gt=0)


class _Search(_Strict):
    name: str = Field(min_length=1)
    base: _Dist
    per_doc: _Dist


class _Gateway(_Strict):
    auth_async: bool = False
    auth_sync: _Dist | None = None
    auth_cached: _Dist | None = None
    quota: _Dist | None = None
    audit: _Dist | None = None
    audit_sync: bool = False
    audit_sync_cost: _Dist | None = None
    rate_limit_rps: float | None = Field(default=None, gt=0)
    rate_limit_burst: int = Field(default=10, ge=1)
    user_quota_per_min: int | None = Field(default=None, ge=1)


class _Network(_Strict):
    keep_alive: bool = False
    connect: _Dist | None = None
    dns: _Dist | None = None
    slow_dns: _Dist | None = None
    serialize: _Dist | None = None


class _Retrieval(_Strict):
    parallel: bool = False
    top_k: int = Field(default=100, ge=1)
    semantic_cache: bool = False
    cache_hit_rate: float = Field(default=0.38, ge=0, le=1)
    cache_lookup: _Dist | None = None
    embed: _Dist | None = None
    rerank_per_doc: _Dist | None = None
    searches: list[_Search] = Field(min_length=1)


class _Agent(_Strict):
    routing: bool = False
    simple_share: float = Field(default=0.9, ge=0, le=1)
    max_iterations: int = Field(default=8, ge=1)
    steps: dict[int, float] | None = None
    plan: _Dist | None = None
    plan_small: _Dist | None = None
    tool: _Dist | None = None
    route: _Dist | None = None
    tools: list[str] | None = None
    tools_per_step: int = Field(default=1, ge=1)
    parallel_tools: bool = False


class _Inference(_Strict):
    prompt_cache: bool = False
    api_ttft: _Dist | None = None
    api_ttft_cached: _Dist | None = None


class _Business(_Strict):
    pool_size: int = Field(default=8, ge=1)
    query: _Dist | None = None


class _PresetM(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    served_model: str = "tailscope-app"
    engine: _Engine | None = None
    small_engine: _Engine | None = None
    answer_tokens: int = Field(default=40, ge=1)
    system_prompt_chars: int = Field(default=6000, ge=0)
    gateway: _Gateway = Field(default_factory=_Gateway)
    network: _Network = Field(default_factory=_Network)
    retrieval: _Retrieval
    agent: _Agent = Field(default_factory=_Agent)
    inference: _Inference = Field(default_factory=_Inference)
    business: _Business = Field(default_factory=_Business)


# section field → AppPreset field (costs given in the section replace the defaults)
_COSTS: dict[str, dict[str, str]] = {
    "gateway": {
        "auth_sync": "auth_sync",
        "auth_cached": "auth_cached",
        "quota": "quota",
        "audit": "audit",
        "audit_sync_cost": "audit_sync_cost",
    },
    "network": {"connect": "connect", "dns": "dns", "slow_dns": "slow_dns", "serialize": "serialize"},
    "retrieval": {"cache_lookup": "cache_lookup", "embed": "embed", "rerank_per_doc": "rerank_per_doc"},
    "agent": {"plan": "plan", "plan_small": "plan_small", "tool": "tool", "route": "route"},
    "inference": {"api_ttft": "api_ttft", "api_ttft_cached": "api_ttft_cached"},
    "business": {"query": "db_query"},
}


def _problem(exc: ValidationError, model: type[BaseModel]) -> tuple[tuple[Any, ...], str]:
    _e, loc, what = nested_problem(exc, model, see="docs/app.md for a section's fields")
    return loc, what


def load_app_preset(path: str | os.PathLike[str]) -> AppPreset:
    """Read a reference-application preset YAML file.

    Raises:
        ConfigError: ``file:line: field what is wrong`` (or the file cannot be read, or is not UTF-8).
    """
    return parse_app_preset(read_user_text(path, what="app preset"), source=str(path))


def parse_app_preset(text: str, *, source: str = "<app preset>") -> AppPreset:
    """Validate preset YAML text.

    Raises:
        ConfigError: ``source:line: field what is wrong``.
    """
    m, root = validate_yaml_mapping(
        text,
        _PresetM,
        source=source,
        error=ConfigError,
        shape="an app preset is a mapping (name, gateway, retrieval, agent, …)",
        problem=_problem,
    )
    kw: dict[str, Any] = {
        "name": m.name,
        "description": m.description,
        "served_model": m.served_model,
        "answer_tokens": m.answer_tokens,
        "system_prompt_chars": m.system_prompt_chars,
        "auth_async": m.gateway.auth_async,
        "audit_sync": m.gateway.audit_sync,
        "rate_limit_rps": m.gateway.rate_limit_rps,
        "rate_limit_burst": m.gateway.rate_limit_burst,
        "user_quota_per_min": m.gateway.user_quota_per_min,
        "keep_alive": m.network.keep_alive,
        "parallel_search": m.retrieval.parallel,
        "top_k": m.retrieval.top_k,
        "semantic_cache": m.retrieval.semantic_cache,
        "cache_hit_rate": m.retrieval.cache_hit_rate,
        "searches": tuple(Search(s.name, s.base.dist(), s.per_doc.dist()) for s in m.retrieval.searches),
        "routing": m.agent.routing,
        "simple_share": m.agent.simple_share,
        "max_iterations": m.agent.max_iterations,
        "tools_per_step": m.agent.tools_per_step,
        "parallel_tools": m.agent.parallel_tools,
        "prompt_cache": m.inference.prompt_cache,
        "pool_size": m.business.pool_size,
    }
    for engine_key in ("engine", "small_engine"):
        e_m: _Engine | None = getattr(m, engine_key)
        if e_m is not None:
            kw[engine_key] = EngineSpec(e_m.model, e_m.gpu, e_m.tp, e_m.speed)
    for section, mapping in _COSTS.items():
        sec = getattr(m, section)
        for key, target in mapping.items():
            value = getattr(sec, key)
            if value is not None:
                if value.p95_ms < value.median_ms:
                    line = line_of(root, (section, key, "p95_ms"))
                    raise ConfigError(
                        f"{source}:{line}: {section}.{key}.p95_ms must be ≥ median_ms "
                        f"(got {value.p95_ms:g} < {value.median_ms:g})"
                    )
                kw[target] = value.dist()
    if m.agent.steps is not None:
        total = sum(m.agent.steps.values())
        if any(n < 1 or p < 0 for n, p in m.agent.steps.items()) or abs(total - 1) > 1e-6:
            raise ConfigError(
                f"{source}:{line_of(root, ('agent', 'steps'))}: agent.steps maps step counts ≥ 1 to probabilities "
                f"≥ 0 that sum to 1 (sum {total:g})"
            )
        kw["steps"] = tuple(sorted(m.agent.steps.items()))
    if m.agent.tools is not None:
        if not m.agent.tools:
            raise ConfigError(f"{source}:{line_of(root, ('agent', 'tools'))}: agent.tools needs at least one name")
        kw["tools"] = tuple(m.agent.tools)
    return AppPreset(**kw).validate(source)
