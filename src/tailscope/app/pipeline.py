"""One request through the method's layers: gateway → business (profile) → retrieval → agent → inference → business.

Every step is a span with its ``layer`` and GenAI / database attributes. Costs are drawn from the preset's
distributions with a per-request seeded RNG and slept (× ``time_scale``); the model's tokens are real (the engine
streams them) and the database queries are real (SQLite behind a bounded pool).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from tailscope.app.business import USERS, SqlitePool
from tailscope.app.inference import Engines, ModelError
from tailscope.app.options import AppOptions
from tailscope.app.tracing import AppTracer, AttrValue, SpanRef
from tailscope.workload.app_preset import AppPreset, Dist

#: faults the admin endpoint toggles (for drills)
FAULTS: tuple[str, ...] = ("llm-down", "llm-slow", "retrieval-down", "db-slow")

STATIC_ANSWER = "The assistant is busy right now. Our help centre has the most common answers; please try again soon."
FAQ_ANSWER = "From the FAQ: see the matching article in the help centre for the steps to follow."


class RetrievalDown(Exception):
    """The retrieval fault is on."""


class Throttled(Exception):
    """The gateway refused the request: over its rate limit or the caller's quota (HTTP 429)."""

    def __init__(self, why: str, retry_after_s: float) -> None:
        super().__init__(why)
        self.retry_after_s = retry_after_s


@dataclass(slots=True)
class Limits:
    """The gateway's real limits, in real time (not scaled): a token bucket over every request, and a quota of
    requests per caller per minute (fixed windows)."""

    rate_rps: float | None
    burst: int
    quota_per_min: int | None
    tokens: float = 0.0
    at: float = field(default_factory=time.monotonic)
    window: int = -1
    used: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def admit(self, user: int, now: float) -> None:
        """Take one request for ``user`` at monotonic time ``now``, or raise :class:`Throttled`."""
        if self.quota_per_min is not None:
            minute = int(now // 60)
            if minute != self.window:
                self.window, self.used = minute, {}
            if self.used.get(user, 0) >= self.quota_per_min:
                raise Throttled(f"user {user} is over its quota of {self.quota_per_min}/min", 60 - now % 60)
        if self.rate_rps is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate_rps)
            self.at = now
            if self.tokens < 1:
                raise Throttled(
                    f"over the gateway's rate limit of {self.rate_rps:g}/s", (1 - self.tokens) / self.rate_rps
                )
            self.tokens -= 1
        if self.quota_per_min is not None:
            self.used[user] = self.used.get(user, 0) + 1


@dataclass(slots=True)
class AppState:
    """What the admin endpoints change at run time."""

    degrade: int = 0
    faults: set[str] = field(default_factory=set)
    requests: int = 0
    fallbacks: int = 0
    throttled: int = 0
    errors: int = 0


@dataclass(slots=True)
class Outcome:
    """How a request's answer was produced (for the response and the spans)."""

    fallback: str | None = None
    faq_hits: int = 0
    agent_steps: int = 0
    cache_hit: bool = False
    simple: bool = False
    conn: Any = None  # a database connection the request keeps (the pool-exhaustion incident)


@dataclass(slots=True, eq=False)  # a service, not a value: compared by identity
class Pipeline:
    """The layers of one application instance.

    Args:
        preset: the application (with fixes and incidents applied).
        tracer: where spans go.
        engines: the model endpoints.
        pool: the database pool.
        options: ``time_scale`` (every modelled cost is multiplied by it), ``seed`` (of the per-request draws) and
            ``fallback`` (answer from the FAQ or a static text when the model fails, else the request fails).
    """

    preset: AppPreset
    tracer: AppTracer
    engines: Engines
    pool: SqlitePool
    options: AppOptions
    state: AppState = field(default_factory=AppState, init=False)
    limits: Limits = field(init=False)
    _seq: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        p = self.preset
        self.limits = Limits(p.rate_limit_rps, p.rate_limit_burst, p.user_quota_per_min)

    # -- helpers ----------------------------------------------------------------------------------------------

    def rng(self) -> random.Random:
        self._seq += 1
        return random.Random(self.options.seed * 1_000_003 + self._seq)

    async def cost(self, dist: Dist, rng: random.Random, factor: float = 1.0) -> float:
        """Sleep one draw of ``dist`` (× ``factor`` × time scale); returns the unscaled draw in seconds."""
        draw = dist.sample(rng) * factor
        if draw > 0:
            await asyncio.sleep(draw * self.options.time_scale)
        return draw

    async def connect(self, rng: random.Random, peer: str) -> None:
        """A new connection's DNS lookup and TCP+TLS set-up (skipped with keep-alive)."""
        p = self.preset
        if p.keep_alive:
            return
        with self.tracer.span(f"connect {peer}", "network", {"server.address": peer}):
            with self.tracer.span(f"dns {peer}", "network", {"server.address": peer}):
                await self.cost(p.slow_dns if p.use_slow_dns else p.dns, rng)
            await self.cost(p.connect, rng)

    # -- layers -----------------------------------------------------------------------------------------------

    async def gateway(self, rng: random.Random, caller: int | None = None) -> int:
        """Authenticate, check the rate limit and the caller's quota, write the audit log; returns the user id (the
        ``X-User-Id`` caller, else a drawn one).

        Raises:
            Throttled: over the rate limit or the quota (the ``rate limit`` span is marked as an error).
        """
        p = self.preset
        user = rng.randrange(USERS) if caller is None else caller % USERS
        with self.tracer.span("gateway", "gateway", {"app.user": user}):
            mode = "cache" if p.auth_async else "sync"
            with self.tracer.span("auth", "gateway", {"app.auth.mode": mode, "peer.service": "permissions"}):
                if p.auth_async:
                    await self.cost(p.auth_cached, rng)
                else:
                    await self.connect(rng, "permissions")
                    await self.cost(p.auth_sync, rng)
            with self.tracer.span("rate limit", "gateway", {"app.quota.mode": mode}) as s:
                await self.cost(p.quota, rng)
                try:
                    self.limits.admit(user, time.monotonic())
                except Throttled as exc:
                    s.error(str(exc))
                    s.set("app.throttled", True)
                    raise
            with self.tracer.span("audit log", "gateway", {"app.audit.mode": "sync" if p.audit_sync else "async"}):
                await self.cost(p.audit, rng)
                if p.audit_sync:
                    await self.cost(p.audit_sync_cost, rng)
        return user

    async def db(
        self, rng: random.Random, name: str, sql: str, params: tuple[Any, ...], outcome: Outcome | None = None
    ) -> list[Any]:
        """One query: wait for a pooled connection (a span), then run it. With ``hold_connection`` (the
        pool-exhaustion incident) the request keeps its connection in ``outcome`` until :meth:`release`."""
        keep = outcome is not None and self.preset.hold_connection
        conn = outcome.conn if outcome is not None else None
        if conn is None:
            with self.tracer.span(
                "db pool wait",
                "business",
                {"db.client.connection.pool.name": "app", "app.pool.in_use": self.pool.in_use},
            ):
                conn = await self.pool.acquire()
            if keep:
                assert outcome is not None
                outcome.conn = conn
        try:
            attrs = {"db.system.name": "sqlite", "db.query.text": sql, "db.operation.name": name.split()[0]}
            with self.tracer.span(name, "business", attrs, kind="client"):
                factor = 10.0 if "db-slow" in self.state.faults else 1.0
                hold = self.preset.db_query.sample(rng) * factor * self.options.time_scale
                return await self.pool.run(conn, sql, params, hold)
        finally:
            if not keep:
                self.pool.release(conn)

    def release(self, outcome: Outcome) -> None:
        """Give back the connection a request kept (pool-exhaustion incident); no-op otherwise."""
        if outcome.conn is not None:
            self.pool.release(outcome.conn)
            outcome.conn = None

    async def retrieve(self, rng: random.Random, outcome: Outcome) -> list[str]:
        """Query embedding, the knowledge-base searches (serial or together) and the rerank; returns passages."""
        p = self.preset
        searches = p.searches[:1] if self.state.degrade == 2 else p.searches
        with self.tracer.span(
            "retrieve",
            "retrieval",
            {
                "gen_ai.operation.name": "retrieval",
                "app.retrieval.parallel": p.parallel_search,
                "app.retrieval.top_k": p.top_k,
            },
        ):
            with self.tracer.span("embed query", "retrieval", {"gen_ai.operation.name": "embeddings"}):
                await self.cost(p.embed, rng)
            if "retrieval-down" in self.state.faults:
                raise RetrievalDown("the retrieval fault is on")
            draws = [
                (s, s.base.sample(rng) + s.per_doc.sample(rng) * p.top_k, random.Random(rng.getrandbits(64)))
                for s in searches
            ]
            refs: list[SpanRef] = []

            async def one(name: str, seconds: float, r: random.Random) -> None:
                with self.tracer.span(
                    f"search {name}",
                    "retrieval",
                    {"gen_ai.operation.name": "retrieval", "db.collection.name": name, "app.top_k": p.top_k},
                ) as s:
                    refs.append(s)
                    await self.connect(r, f"search-{name}")
                    await asyncio.sleep(seconds * self.options.time_scale)

            if p.parallel_search:
                await asyncio.gather(*(one(s.name, sec, r) for s, sec, r in draws))
            else:
                for s, sec, r in draws:
                    await one(s.name, sec, r)
            consumed = [f"search {s.name}" for s in searches]
            with self.tracer.span(
                "rerank",
                "retrieval",
                {"app.consumes": consumed, "app.top_k": p.top_k, "gen_ai.operation.name": "retrieval"},
                links=[r.context for r in refs],
            ):
                await self.connect(rng, "reranker")
                await self.cost(p.rerank_per_doc, rng, factor=p.top_k)
        outcome.faq_hits = 1
        return [f"passage {k} from {s.name}" for k, s in enumerate(searches)]

    async def agent(self, rng: random.Random, outcome: Outcome) -> None:
        """Route the question (small-model routing) and run the ReAct loop: plan, call a tool, until done."""
        p = self.preset
        large, small = (
            self.engines.names.get("large", p.engine.model),
            self.engines.names.get("small", p.small_engine.model),
        )
        with self.tracer.span(
            "agent", "agent", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": p.name}
        ) as a:
            if p.routing:
                with self.tracer.span(
                    f"route {small}", "agent", {"gen_ai.operation.name": "chat", "gen_ai.request.model": small}
                ) as r:
                    await self.cost(p.route, rng)
                    simple = rng.random() < p.simple_share
                    r.set("app.route", "simple" if simple else "agent")
                if simple:
                    a.set("app.agent.steps", 0)
                    outcome.simple = True
                    return
            wanted = p.draw_steps(rng)
            steps = min(wanted, p.max_iterations)
            a.set("app.agent.steps", steps)
            a.set("app.agent.stopped_early", steps < wanted)
            planner = small if p.routing else large
            observed: list[str] = []  # the previous step's tool call ids: the next plan reads their results
            for k in range(1, steps + 1):
                step_attrs: dict[str, AttrValue] = {"app.agent.step": k}
                if p.tools_per_step > 1:
                    step_attrs["gen_ai.request.parallel_tool_calls"] = p.parallel_tools
                with self.tracer.span(f"agent step {k}", "agent", step_attrs):
                    plan_attrs: dict[str, AttrValue] = {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": planner,
                    }
                    if observed:
                        plan_attrs["app.observations"] = list(observed)
                    with self.tracer.span(f"plan {planner}", "agent", plan_attrs):
                        await self.cost(p.plan_small if p.routing else p.plan, rng)
                    # one RNG per call, drawn in order, so parallel calls draw the same costs run after run
                    calls = [
                        (p.tools[rng.randrange(len(p.tools))], f"call_{rng.getrandbits(48):012x}",
                         random.Random(rng.getrandbits(64)))
                        for _ in range(p.tools_per_step)
                    ]  # fmt: skip
                    if p.parallel_tools:
                        await asyncio.gather(*(self.tool(name, cid, r) for name, cid, r in calls))
                    else:
                        for name, cid, call_rng in calls:
                            await self.tool(name, cid, call_rng)
                    observed = [cid for _, cid, _ in calls]
            outcome.agent_steps = steps

    async def tool(self, name: str, call_id: str, rng: random.Random) -> None:
        """One tool call of an agent step (an external API: a connection unless kept alive, then its cost)."""
        attrs: dict[str, AttrValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
        }
        with self.tracer.span(f"tool {name}", "agent", attrs):
            await self.connect(rng, name)
            await self.cost(self.preset.tool, rng)

    def messages(self, question: str, passages: list[str], rng: random.Random) -> list[dict[str, str]]:
        """The answer prompt: a fixed system prompt first with prompt caching, else a per-request header first
        (a timestamp in front of the system prompt defeats any prefix cache)."""
        p = self.preset
        system = ("You are the internal knowledge assistant. Answer from the passages. " * 100)[: p.system_prompt_chars]
        if not p.prompt_cache:
            system = f"[request {rng.getrandbits(48):x} at {time.time():.6f}] " + system
        context = "\n".join(passages)
        return [{"role": "system", "content": system}, {"role": "user", "content": f"{context}\n\n{question}"}]

    async def answer(
        self, rng: random.Random, messages: list[dict[str, str]], max_tokens: int, *, small: bool = False
    ) -> AsyncIterator[bytes]:
        """Stream the model's answer (SSE payloads); the ``chat`` span covers the API's queue and the stream.

        ``small``: a simple question routed to the small model (small-model routing).
        """
        p = self.preset
        role = "small" if small else "large"
        model = self.engines.names.get(role, (p.small_engine if small else p.engine).model)
        attrs: dict[str, AttrValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.provider.name": "openai",
            "gen_ai.request.max_tokens": max_tokens,
            "app.prompt_cache": p.prompt_cache,
        }
        with self.tracer.span(f"chat {model}", "inference", attrs, kind="client") as s:
            await self.connect(rng, "model-api")
            if "llm-down" in self.state.faults:
                s.error("llm-down fault")
                raise ModelError("the llm-down fault is on")
            await self.cost(p.api_ttft_cached if p.prompt_cache else p.api_ttft, rng)
            if "llm-slow" in self.state.faults:
                await self.cost(p.api_ttft, rng, factor=4.0)
            tokens = 0
            async for payload in self.engines.stream(role, messages, max_tokens):
                tokens += 1
                yield payload
            s.set("gen_ai.usage.output_tokens", max(tokens - 1, 0))

    async def prepare(
        self, question: str, outcome: Outcome, caller: int | None = None
    ) -> tuple[random.Random, list[dict[str, str]] | None]:
        """Everything before the model: gateway, profile, retrieval, agent, prompt. None messages: a cached or static
        answer. The caller calls :meth:`release` with ``outcome`` when the request ends, however it ends.

        Raises:
            Throttled: the gateway refused the request.
        """
        rng = self.rng()
        user = await self.gateway(rng, caller)
        await self.db(rng, "SELECT users", "SELECT name, tier, quota FROM users WHERE id = ?", (user,), outcome)
        if self.state.degrade >= 3:
            outcome.fallback = "static"
            return rng, None
        p = self.preset
        if p.semantic_cache and self.state.degrade == 0:
            # a semantic cache keeps answers: a hit skips retrieval, the agent and the model (method 004, §4.2)
            with self.tracer.span("semantic cache lookup", "retrieval", {"app.cache.kind": "semantic"}) as s:
                await self.cost(p.cache_lookup, rng)
                outcome.cache_hit = rng.random() < p.cache_hit_rate
                s.set("app.cache.hit", outcome.cache_hit)
            if outcome.cache_hit:
                return rng, None
        passages: list[str] = []
        if self.state.degrade != 1:
            try:
                passages = await self.retrieve(rng, outcome)
            except RetrievalDown:
                passages = []
        if self.state.degrade == 0:
            await self.agent(rng, outcome)
        with self.tracer.span("render prompt", "business"):
            await self.cost(self.preset.serialize, rng)
        return rng, self.messages(question, passages, rng)

    async def finish(self, rng: random.Random, question: str, answer: str, outcome: Outcome) -> None:
        """Write the conversation history (a real INSERT through the pool)."""
        await self.db(
            rng,
            "INSERT history",
            "INSERT INTO history (user_id, question, answer, at) VALUES (?, ?, ?, ?)",
            (0, question[:200], answer[:200], time.time()),
            outcome,
        )

    def canned_text(self, outcome: Outcome, tokens: int) -> str:
        """The answer when the model is not asked: a cached answer (``tokens`` words), the FAQ's or a static one."""
        if outcome.cache_hit and not outcome.fallback:
            return " ".join(f"cached{k}" for k in range(tokens))
        return FAQ_ANSWER if outcome.faq_hits else STATIC_ANSWER
