"""The reference AI application's costs and switches (``tailscope app --preset``), and the fixes and incidents.

A preset describes one application: what each layer of a request costs (lognormal distributions given by their
median and 95th percentile) and how the layers are wired (synchronous or cached authentication, serial or parallel
searches, rerank depth, semantic cache, small-model routing, agent step limit, prompt caching, connection reuse).
A *fix* flips one switch to its engineered setting; an *incident* breaks something the way the method's incident
stories do. Both return a new :class:`AppPreset`; nothing here sleeps, opens a socket or reads a file
(``io/app_preset.py`` reads the YAML, ``app/`` runs it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from tailscope.errors import ConfigError

#: z of the 95th percentile of a standard normal
_Z95 = 1.6448536269514722


@dataclass(frozen=True, slots=True)
class Dist:
    """A lognormal cost given by its median and 95th percentile, in seconds (``p95_s == median_s``: a constant)."""

    median_s: float
    p95_s: float

    @property
    def sigma(self) -> float:
        return math.log(self.p95_s / self.median_s) / _Z95 if self.median_s > 0 else 0.0

    def sample(self, rng: random.Random) -> float:
        """One draw in seconds (always ≥ 0)."""
        if self.median_s <= 0:
            return 0.0
        return self.median_s * math.exp(self.sigma * rng.gauss(0.0, 1.0))

    def check(self, where: str) -> None:
        """Raise :class:`ConfigError` when the distribution is impossible."""
        if self.median_s < 0 or self.p95_s < self.median_s:
            raise ConfigError(
                f"{where}: need 0 ≤ median_ms ≤ p95_ms (got {self.median_s * 1e3:g}, {self.p95_s * 1e3:g})"
            )


@dataclass(frozen=True, slots=True)
class Search:
    """One knowledge base: a search costs ``base + per_doc × top_k`` (fetching and scoring the candidates)."""

    name: str
    base: Dist
    per_doc: Dist


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """The built-in engine that stands in for a model API (``--llm-url`` replaces it)."""

    model: str = "llama-3.1-70b"
    gpu: str = "h100-sxm"
    tp: int = 4
    speed: float = 1.0


@dataclass(frozen=True, slots=True)
class AppPreset:
    """Everything one reference application does per request (all costs in seconds before ``--time-scale``).

    Switches (the preset's starting point; the fixes flip them): ``auth_async``, ``parallel_search``, ``top_k``,
    ``semantic_cache``, ``routing``, ``max_iterations``, ``prompt_cache``, ``keep_alive``. Incidents:
    ``pool_size`` and ``hold_connection`` (exhaustion), ``audit_sync``, ``slow_dns``, ``sse_buffering``.
    """

    name: str
    description: str = ""
    served_model: str = "tailscope-app"
    engine: EngineSpec = field(default_factory=EngineSpec)
    small_engine: EngineSpec = field(default_factory=lambda: EngineSpec("llama-3.1-8b", "h100-sxm", 1))
    answer_tokens: int = 40
    system_prompt_chars: int = 6000
    # gateway
    auth_sync: Dist = Dist(1.5, 2.3)
    auth_cached: Dist = Dist(0.025, 0.05)
    quota: Dist = Dist(0.004, 0.01)
    audit: Dist = Dist(0.003, 0.008)
    audit_sync_cost: Dist = Dist(0.05, 0.18)
    auth_async: bool = False
    audit_sync: bool = False
    rate_limit_rps: float | None = None  # the gateway's token bucket (real time): over it a request gets 429
    rate_limit_burst: int = 10
    user_quota_per_min: int | None = None  # requests per caller (``X-User-Id``) per minute: over it, 429
    # network
    connect: Dist = Dist(0.045, 0.1)
    dns: Dist = Dist(0.002, 0.005)
    slow_dns: Dist = Dist(0.25, 1.2)
    keep_alive: bool = False
    use_slow_dns: bool = False
    serialize: Dist = Dist(0.04, 0.08)
    # retrieval
    embed: Dist = Dist(0.03, 0.06)
    searches: tuple[Search, ...] = ()
    rerank_per_doc: Dist = Dist(0.01, 0.014)
    top_k: int = 100
    parallel_search: bool = False
    semantic_cache: bool = False
    cache_hit_rate: float = 0.38
    cache_lookup: Dist = Dist(0.006, 0.012)
    # agent
    steps: tuple[tuple[int, float], ...] = ((1, 0.25), (2, 0.35), (3, 0.25), (4, 0.1), (5, 0.05))
    plan: Dist = Dist(0.5, 0.8)
    plan_small: Dist = Dist(0.06, 0.1)
    tool: Dist = Dist(0.15, 0.4)
    tools: tuple[str, ...] = ("crm_lookup", "order_status", "policy_lookup")
    tools_per_step: int = 1
    parallel_tools: bool = False
    route: Dist = Dist(0.05, 0.08)
    simple_share: float = 0.9
    routing: bool = False
    max_iterations: int = 8
    # inference
    api_ttft: Dist = Dist(1.1, 1.5)
    api_ttft_cached: Dist = Dist(0.3, 0.45)
    prompt_cache: bool = False
    # business
    pool_size: int = 8
    hold_connection: bool = False
    db_query: Dist = Dist(0.015, 0.04)
    sse_buffering: bool = False

    def validate(self, where: str = "preset") -> AppPreset:
        """Raise :class:`ConfigError` naming the field that is out of range; returns ``self``."""
        for f in (
            "auth_sync",
            "auth_cached",
            "quota",
            "audit",
            "audit_sync_cost",
            "connect",
            "dns",
            "slow_dns",
            "serialize",
            "embed",
            "rerank_per_doc",
            "cache_lookup",
            "plan",
            "plan_small",
            "tool",
            "route",
            "api_ttft",
            "api_ttft_cached",
            "db_query",
        ):
            getattr(self, f).check(f"{where}: {f}")
        if not self.searches:
            raise ConfigError(f"{where}: retrieval.searches needs at least one knowledge base")
        for s in self.searches:
            s.base.check(f"{where}: search {s.name} base")
            s.per_doc.check(f"{where}: search {s.name} per_doc")
        if min(self.top_k, self.answer_tokens, self.pool_size, self.max_iterations, self.tools_per_step) < 1:
            raise ConfigError(
                f"{where}: top_k, answer_tokens, pool_size, max_iterations and tools_per_step must be ≥ 1"
            )
        if self.rate_limit_rps is not None and not self.rate_limit_rps > 0:
            raise ConfigError(f"{where}: gateway.rate_limit_rps must be > 0 (or left out: no limit)")
        if self.rate_limit_burst < 1 or (self.user_quota_per_min is not None and self.user_quota_per_min < 1):
            raise ConfigError(f"{where}: gateway.rate_limit_burst and user_quota_per_min must be ≥ 1")
        if not 0 <= self.cache_hit_rate <= 1 or not 0 <= self.simple_share <= 1:
            raise ConfigError(f"{where}: cache_hit_rate and simple_share are fractions in [0, 1]")
        total = sum(p for _, p in self.steps)
        if not self.steps or any(n < 1 or p < 0 for n, p in self.steps) or abs(total - 1) > 1e-6:
            raise ConfigError(
                f"{where}: agent.steps maps step counts ≥ 1 to probabilities that sum to 1 (sum {total:g})"
            )
        return self

    def draw_steps(self, rng: random.Random) -> int:
        """Agent steps this request wants (before the step limit)."""
        x = rng.random()
        for n, p in self.steps:
            x -= p
            if x < 0:
                return n
        return self.steps[-1][0]

    @property
    def mean_steps(self) -> float:
        return sum(n * p for n, p in self.steps)


#: fix name → what it changes (the knowledge-assistant case study's five ROI-ordered fixes, split into switches)
FIXES: dict[str, str] = {
    "async-auth": "quota and permissions from a cache, audit log off the request path (auth ≈ 30 ms)",
    "parallel-retrieval": "the knowledge-base searches run together (asyncio.gather) instead of one after another",
    "rerank-top30": "retrieve and rerank the top 30 candidates instead of the top 100",
    "semantic-cache": "a semantic cache in front of retrieval (hit rate from the preset, 38 % in the case)",
    "small-model-routing": "a small model classifies intent: simple questions skip the agent loop, and the agent "
    "plans its steps with the small model",
    "max-iterations=3": "the agent stops after 3 steps (any N: max-iterations=N)",
    "prompt-cache": "the fixed system prompt is sent first and unchanged, so the model API caches its prefix",
    "keep-alive": "connections to the model and the tools are reused (no TCP+TLS set-up per call)",
}

#: incident name → what it breaks (the method's incident stories)
INCIDENTS: dict[str, str] = {
    "pool-exhaustion": "a pool of 2 connections, and each request keeps its connection from the profile read to the "
    "history write (across the model call): requests queue for a connection",
    "sync-audit": "the gateway writes its audit log synchronously (+≈300 ms at P99)",
    "slow-dns": "every new connection resolves its host slowly (hundreds of ms, long tail)",
    "no-reuse": "a new TCP+TLS connection per call even with the keep-alive fix",
    "sse-buffering": "a proxy buffers the SSE stream: the first token arrives with the last",
}


def _names(spec: str | Sequence[str], known: dict[str, str], flag: str) -> list[str]:
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [s.strip() for s in items if s.strip()]
    if names == ["all"]:
        return list(known)
    for n in names:
        base = n.split("=", 1)[0] + "=" if n.startswith("max-iterations=") else n
        if base == "max-iterations=":
            value = n.split("=", 1)[1]
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"{flag} {n}: max-iterations needs a whole number ≥ 1 (e.g. max-iterations=3)")
            continue
        if base not in known:
            raise ConfigError(f"{flag} {n!r}: unknown; use all or any of {', '.join(known)}")
    return names


def apply_fixes(preset: AppPreset, fixes: str | Sequence[str]) -> AppPreset:
    """``preset`` with the named fixes applied (``"all"``, a comma-separated string or a list).

    Raises:
        ConfigError: an unknown fix (the message lists the known ones).
    """
    out = preset
    for name in _names(fixes, FIXES, "--fix"):
        if name == "async-auth":
            out = replace(out, auth_async=True)
        elif name == "parallel-retrieval":
            out = replace(out, parallel_search=True)
        elif name == "rerank-top30":
            out = replace(out, top_k=min(out.top_k, 30))
        elif name == "semantic-cache":
            out = replace(out, semantic_cache=True)
        elif name == "small-model-routing":
            out = replace(out, routing=True)
        elif name.startswith("max-iterations="):
            out = replace(out, max_iterations=int(name.split("=", 1)[1]))
        elif name == "prompt-cache":
            out = replace(out, prompt_cache=True)
        elif name == "keep-alive":
            out = replace(out, keep_alive=True)
    return out


def apply_incidents(preset: AppPreset, incidents: str | Sequence[str]) -> AppPreset:
    """``preset`` with the named incidents switched on (apply them after the fixes).

    Raises:
        ConfigError: an unknown incident.
    """
    out = preset
    for name in _names(incidents, INCIDENTS, "--incident"):
        if name == "pool-exhaustion":
            out = replace(out, pool_size=min(out.pool_size, 2), hold_connection=True)
        elif name == "sync-audit":
            out = replace(out, audit_sync=True)
        elif name == "slow-dns":
            out = replace(out, use_slow_dns=True)
        elif name == "no-reuse":
            out = replace(out, keep_alive=False)
        elif name == "sse-buffering":
            out = replace(out, sse_buffering=True)
    return out
