"""Model routing and tiers: project latency and cost of sending request classes to model tiers behind a router, and
find the cheapest routing that meets a latency SLO.

The method (article 004 §8 "model routing", §10 step 3): a router — rules or a small-model classifier — sends simple
requests to small tiers (a template answer, Haiku, Sonnet) and only complex ones to the frontier model; "90 % of
requests can be served by Haiku/Sonnet, overall cost −60–80 %"; in the case study a Haiku intent check sends 80 % of
queries straight to the RAG answer.

Model: each tier's latency is lognormal through its P50 and P95 (σ = ln(P95/P50) / 1.645; P95 = P50 → constant); a
routed request takes the router's latency plus its tier's. Percentiles of the mixture come from a seeded Monte Carlo
(deterministic). A tier's cost per request is its flat price, or tokens × its per-1M-token prices. Routing is per
class: a class may go to any tier at or above its minimum tier (quality), never below. Pure: no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailscope.record_ops import record_dict

Z95 = 1.6448536269514722
#: Monte Carlo samples per projection (seeded: the same inputs give the same percentiles)
SAMPLES = 200_000
#: at most this many class → tier assignments are searched
MAX_ASSIGNMENTS = 100_000


@dataclass(frozen=True, slots=True)
class Tier:
    """A model tier: its latency (P50, P95 in ms) and its price.

    Attributes:
        name: ``template``, ``haiku``, ``llama-8b``, …
        p50_ms, p95_ms: end-to-end latency of a request on this tier.
        price_in, price_out: USD per 1M input / output tokens (API prices, or self-hosted cost per token).
        per_request: USD per request, added to the token cost (a template answer: 0).
        tokens_in, tokens_out: mean tokens per request on this tier (``None``: the plan's defaults).
        rank: capability order (0 = least capable); the tiers' order when not given.
        source: where the figures came from (``flags``, ``run RUN_ID``, a file).
    """

    name: str
    p50_ms: float
    p95_ms: float
    price_in: float = 0.0
    price_out: float = 0.0
    per_request: float = 0.0
    tokens_in: float | None = None
    tokens_out: float | None = None
    rank: int = 0
    source: str = "flags"

    def cost(self, tokens_in: float, tokens_out: float) -> float:
        """USD per request."""
        tin = self.tokens_in if self.tokens_in is not None else tokens_in
        tout = self.tokens_out if self.tokens_out is not None else tokens_out
        return self.per_request + (tin * self.price_in + tout * self.price_out) / 1e6

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True, slots=True)
class RequestClass:
    """A share of the traffic and the least capable tier that answers it well enough."""

    name: str
    share: float
    min_tier: str

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True, slots=True)
class Projection:
    """One routing: which tier each class goes to, the share per tier, latency percentiles and cost."""

    assignment: Mapping[str, str]
    shares: Mapping[str, float]
    p50_ms: float
    p95_ms: float
    p99_ms: float
    cost_per_request: float
    router_cost_per_request: float
    routed: bool
    meets_slo: bool | None = None

    @property
    def cost_per_1m_requests(self) -> float:
        return self.cost_per_request * 1e6

    def to_dict(self) -> dict[str, Any]:
        return {
            "assignment": dict(self.assignment),
            "shares": {k: round(v, 6) for k, v in self.shares.items()},
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "cost_per_request": self.cost_per_request,
            "cost_per_1m_requests": self.cost_per_1m_requests,
            "router_cost_per_1m_requests": self.router_cost_per_request * 1e6,
            "routed": self.routed,
            "meets_slo": self.meets_slo,
        }


@dataclass(frozen=True, slots=True)
class RoutingPlan:
    """The answer of ``tailscope plan routing``.

    Attributes:
        tiers, classes, router: the inputs (the router is a tier whose latency and cost every routed request pays).
        baseline: no router, every request on the most capable tier.
        given: the routing of the given shares (``None`` when none were given).
        best: the cheapest routing that meets the SLO (``None``: none does); ``candidates`` the cheapest few.
        slo_p50_ms, slo_p95_ms: the latency SLO searched for.
    """

    tiers: tuple[Tier, ...]
    classes: tuple[RequestClass, ...]
    router: Tier | None
    tokens_in: float
    tokens_out: float
    baseline: Projection
    given: Projection | None
    best: Projection | None
    candidates: tuple[Projection, ...] = ()
    slo_p50_ms: float | None = None
    slo_p95_ms: float | None = None
    notes: tuple[str, ...] = field(default=())

    def saving(self, p: Projection | None = None) -> float | None:
        """Cost change of a routing against the baseline (−0.7 = 70 % cheaper)."""
        p = p if p is not None else self.best
        if p is None or self.baseline.cost_per_request <= 0:
            return None
        return p.cost_per_request / self.baseline.cost_per_request - 1.0

    @property
    def exit_code(self) -> int:
        """0 when a routing meets the SLO (or no SLO was asked), 1 otherwise."""
        return 0 if self.best is not None else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "tiers": [t.to_dict() for t in self.tiers],
            "classes": [c.to_dict() for c in self.classes],
            "router": self.router.to_dict() if self.router else None,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "slo": {"p50_ms": self.slo_p50_ms, "p95_ms": self.slo_p95_ms},
            "baseline": self.baseline.to_dict(),
            "given": self.given.to_dict() if self.given else None,
            "given_saving": self.saving(self.given) if self.given else None,
            "best": self.best.to_dict() if self.best else None,
            "best_saving": self.saving(),
            "candidates": [c.to_dict() for c in self.candidates],
            "notes": list(self.notes),
        }


def _sigma(t: Tier) -> float:
    return max(0.0, math.log(t.p95_ms / t.p50_ms) / Z95) if t.p50_ms > 0 and t.p95_ms > t.p50_ms else 0.0


def _samples(t: Tier, n: int, rng: np.random.Generator) -> np.ndarray:
    s = _sigma(t)
    if s == 0.0:
        return np.full(n, t.p50_ms)
    out: np.ndarray = t.p50_ms * np.exp(s * rng.standard_normal(n))
    return out


def project(
    tiers: Sequence[Tier],
    shares: Mapping[str, float],
    *,
    router: Tier | None,
    tokens_in: float,
    tokens_out: float,
    assignment: Mapping[str, str] | None = None,
    seed: int = 0,
    samples: int = SAMPLES,
) -> Projection:
    """Latency percentiles and cost of sending ``shares`` of the traffic to tiers (by name), behind ``router``."""
    by_name = {t.name: t for t in tiers}
    total = sum(shares.values())
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(samples, [shares[k] / total for k in shares]) if total > 0 else np.zeros(len(shares))
    parts = [_samples(by_name[name], int(c), rng) for name, c in zip(shares, counts, strict=True) if c > 0]
    lat = np.concatenate(parts) if parts else np.zeros(1)
    router_cost = 0.0
    if router is not None:
        lat = lat + _samples(router, lat.size, rng)
        router_cost = router.cost(tokens_in, tokens_out)
    cost = sum(shares[k] / total * by_name[k].cost(tokens_in, tokens_out) for k in shares) if total > 0 else 0.0
    p50, p95, p99 = (float(x) for x in np.percentile(lat, [50, 95, 99]))
    return Projection(
        assignment=dict(assignment or {}),
        shares={k: v / total for k, v in shares.items()} if total > 0 else dict(shares),
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        cost_per_request=cost + router_cost,
        router_cost_per_request=router_cost,
        routed=router is not None,
    )


def _meets(p: Projection, slo_p50_ms: float | None, slo_p95_ms: float | None) -> bool:
    return (slo_p50_ms is None or p.p50_ms <= slo_p50_ms) and (slo_p95_ms is None or p.p95_ms <= slo_p95_ms)


def plan_routing(
    tiers: Sequence[Tier],
    classes: Sequence[RequestClass],
    *,
    router: Tier | None = None,
    tokens_in: float = 1000.0,
    tokens_out: float = 300.0,
    shares: Mapping[str, float] | None = None,
    slo_p50_ms: float | None = None,
    slo_p95_ms: float | None = None,
    top: int = 5,
    seed: int = 0,
) -> RoutingPlan:
    """The baseline (everything on the most capable tier, no router), the given shares, and the cheapest class → tier
    routing (each class on a tier at or above its minimum) that meets the SLO.

    Raises:
        ValueError: no tiers, unknown tier names, class shares that do not sum to 1, bad latencies.
    """
    if not tiers:
        raise ValueError("give at least two tiers (e.g. --tier name=small,… --tier name=large,…)")
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise ValueError(f"tier names must be unique (got {', '.join(names)})")
    for t in (*tiers, *((router,) if router else ())):
        if not (t.p50_ms > 0 and t.p95_ms >= t.p50_ms):
            raise ValueError(f"tier {t.name}: need 0 < p50 ≤ p95 (got p50 {t.p50_ms:g} ms, p95 {t.p95_ms:g} ms)")
    ordered = sorted(tiers, key=lambda t: t.rank)
    rank = {t.name: i for i, t in enumerate(ordered)}
    top_tier = ordered[-1]
    if not classes:
        classes = (RequestClass("all", 1.0, ordered[0].name),)
    for c in classes:
        if c.min_tier not in rank:
            raise ValueError(f"class {c.name}: unknown tier {c.min_tier!r} (tiers: {', '.join(names)})")
        if not c.share > 0:
            raise ValueError(f"class {c.name}: share must be > 0 (got {c.share:g})")
    total = sum(c.share for c in classes)
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"class shares must add up to 1 (they add up to {total:g})")
    notes: list[str] = []
    baseline = project(ordered, {top_tier.name: 1.0}, router=None, tokens_in=tokens_in, tokens_out=tokens_out,
                       assignment={c.name: top_tier.name for c in classes}, seed=seed)  # fmt: skip
    baseline = _with_slo(baseline, slo_p50_ms, slo_p95_ms)
    given = None
    if shares:
        unknown = set(shares) - set(rank)
        if unknown:
            raise ValueError(f"--share: unknown tier {', '.join(sorted(unknown))} (tiers: {', '.join(names)})")
        if abs(sum(shares.values()) - 1.0) > 1e-6:
            raise ValueError(f"--share values must add up to 1 (they add up to {sum(shares.values()):g})")
        capable = _capable_share(classes, rank, shares)
        if capable is not None:
            notes.append(capable)
        given = _with_slo(
            project(ordered, shares, router=router, tokens_in=tokens_in, tokens_out=tokens_out, seed=seed),
            slo_p50_ms,
            slo_p95_ms,
        )
    choices = [[t.name for t in ordered if rank[t.name] >= rank[c.min_tier]] for c in classes]
    n_assign = math.prod(len(ch) for ch in choices)
    if n_assign > MAX_ASSIGNMENTS:
        raise ValueError(f"{n_assign:,} class → tier routings to search; merge classes or drop tiers")
    found: list[Projection] = []
    for combo in itertools.product(*choices):
        share: dict[str, float] = {}
        for c, tier_name in zip(classes, combo, strict=True):
            share[tier_name] = share.get(tier_name, 0.0) + c.share
        p = project(ordered, share, router=router, tokens_in=tokens_in, tokens_out=tokens_out,
                    assignment={c.name: t for c, t in zip(classes, combo, strict=True)}, seed=seed)  # fmt: skip
        found.append(_with_slo(p, slo_p50_ms, slo_p95_ms))
    ok = sorted((p for p in found if p.meets_slo), key=lambda p: (p.cost_per_request, p.p95_ms))
    if not ok:
        fastest = min(found, key=lambda p: p.p95_ms)
        notes.append(
            f"no routing meets the SLO: the fastest has P50 {fastest.p50_ms:.0f} ms, P95 {fastest.p95_ms:.0f} ms "
            "(the router's own latency included)"
        )
    return RoutingPlan(
        tiers=tuple(ordered),
        classes=tuple(classes),
        router=router,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        baseline=baseline,
        given=given,
        best=ok[0] if ok else None,
        candidates=tuple(ok[:top]),
        slo_p50_ms=slo_p50_ms,
        slo_p95_ms=slo_p95_ms,
        notes=tuple(notes),
    )


def _with_slo(p: Projection, slo_p50_ms: float | None, slo_p95_ms: float | None) -> Projection:
    from dataclasses import replace

    return replace(p, meets_slo=_meets(p, slo_p50_ms, slo_p95_ms))


def _capable_share(classes: Sequence[RequestClass], rank: Mapping[str, int], shares: Mapping[str, float]) -> str | None:
    """A note when the given shares send more traffic to a tier than the classes capable there allow."""
    for name, r in rank.items():
        below = sum(v for k, v in shares.items() if rank[k] <= r)
        capable = sum(c.share for c in classes if rank[c.min_tier] <= r)
        if below > capable + 1e-9:
            return (
                f"--share sends {below:.0%} of requests to tiers up to {name}, but only {capable:.0%} of the traffic "
                "is answered well there (class min tiers): quality would drop"
            )
    return None
