"""Model routing and tiers: :func:`plan_routing` (``tailscope plan routing``).

Tiers, classes and the router come from flags (``name=haiku,p50=0.8s,p95=1.5s,in=0.8,out=4``), a table file (YAML
``tiers:``/``classes:``/``router:``), or stored runs and simulations (``run=RUN_ID``: P50/P95 of the run's E2E and its
mean tokens). The model is :mod:`tailscope.plan.routing`'s. Reads the store only for ``run=`` tiers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from tailscope.api._support import StorePath, public
from tailscope.errors import ConfigError
from tailscope.plan.routing import RequestClass, RoutingPlan, Tier
from tailscope.plan.routing import plan_routing as _plan
from tailscope.store.runs import RunStore
from tailscope.units import parse_duration_s

TierRef = str | Mapping[str, Any] | Tier
ClassRef = str | Mapping[str, Any] | RequestClass

_TIER_KEYS = ("name", "p50", "p95", "in", "out", "per_request", "tokens_in", "tokens_out", "rank", "run")


def _ms(value: Any, what: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return parse_duration_s(str(value), what=what, default_unit="ms") * 1000.0


def _kv(spec: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} {spec!r}: expected KEY=VALUE pairs separated by commas (got {part!r})")
        out[key.strip()] = value.strip()
    return out


def _num(d: Mapping[str, Any], key: str, what: str, default: float | None = None) -> float | None:
    if key not in d or d[key] in (None, ""):
        return default
    try:
        return float(d[key])
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: {key}={d[key]!r} is not a number") from None


def _tier(ref: TierRef, index: int, store: StorePath | RunStore | None, what: str = "--tier") -> Tier:
    if isinstance(ref, Tier):
        return ref
    d: Mapping[str, Any] = _kv(ref, what) if isinstance(ref, str) else ref
    where = f"{what} {d.get('name', index)!s}"
    unknown = set(d) - set(_TIER_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {', '.join(sorted(unknown))} (allowed: {', '.join(_TIER_KEYS)})")
    name = str(d.get("name") or f"tier{index}")
    p50 = p95 = None
    tokens_in = _num(d, "tokens_in", where)
    tokens_out = _num(d, "tokens_out", where)
    source = "flags"
    if d.get("run"):
        p50, p95, tin, tout = _from_run(str(d["run"]), store)
        tokens_in = tokens_in if tokens_in is not None else tin
        tokens_out = tokens_out if tokens_out is not None else tout
        source = f"run {d['run']}"
    if "p50" in d:
        p50 = _ms(d["p50"], f"{where} p50")
    if "p95" in d:
        p95 = _ms(d["p95"], f"{where} p95")
    if p50 is None:
        raise ConfigError(f"{where}: give p50= (and p95=) latencies, e.g. p50=800ms,p95=1.5s, or run=RUN_ID")
    return Tier(
        name=name,
        p50_ms=p50,
        p95_ms=p95 if p95 is not None else p50,
        price_in=_num(d, "in", where, 0.0) or 0.0,
        price_out=_num(d, "out", where, 0.0) or 0.0,
        per_request=_num(d, "per_request", where, 0.0) or 0.0,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        rank=int(_num(d, "rank", where, float(index)) or 0),
        source=source,
    )


def _from_run(ref: str, store: StorePath | RunStore | None) -> tuple[float, float, float | None, float | None]:
    """E2E P50/P95 (ms) and mean input/output tokens of a stored bench or sim run."""
    from tailscope.api.verify import load_run

    data = load_run(ref, store=store)
    summary = data.summary or {}
    e2e = summary.get("e2e_ms") or {}
    if e2e.get("p50") is None:
        from tailscope.metrics.summary import summarize

        s = summarize(list(data.records)).to_dict() if data.records else {}
        e2e, summary = s.get("e2e_ms") or {}, s
    if e2e.get("p50") is None:
        raise ConfigError(f"run {ref}: no E2E latencies to take a tier's P50/P95 from")
    tin = (summary.get("input_tokens") or {}).get("mean")
    tout = (summary.get("output_tokens") or {}).get("mean")
    return float(e2e["p50"]), float(e2e.get("p95") or e2e["p50"]), tin, tout


def _class(ref: ClassRef) -> RequestClass:
    if isinstance(ref, RequestClass):
        return ref
    if isinstance(ref, str) and "=" not in ref:
        parts = ref.split(":")
        if len(parts) != 3:
            raise ConfigError(f"--class {ref!r}: expected NAME:SHARE:MIN_TIER, e.g. simple:0.8:template")
        d: Mapping[str, Any] = {"name": parts[0], "share": parts[1], "min_tier": parts[2]}
    else:
        d = _kv(ref, "--class") if isinstance(ref, str) else ref
    share = str(d.get("share", "")).strip()
    try:
        value = float(share[:-1]) / 100 if share.endswith("%") else float(share)
    except ValueError:
        raise ConfigError(f"--class {d.get('name')!r}: share {share!r} is not a number or a percentage") from None
    min_tier = d.get("min_tier") or d.get("min")
    if not d.get("name") or not min_tier:
        raise ConfigError(f"--class {ref!r}: give name, share and min_tier (the least capable tier that serves it)")
    return RequestClass(str(d["name"]), value, str(min_tier))


def _shares(shares: Mapping[str, float] | Sequence[str] | None) -> dict[str, float] | None:
    if shares is None:
        return None
    if isinstance(shares, Mapping):
        return {str(k): float(v) for k, v in shares.items()}
    out: dict[str, float] = {}
    for item in shares:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value.rstrip("%")) / (100 if value.strip().endswith("%") else 1)
        except ValueError:
            raise ConfigError(f"--share {item!r}: expected TIER=SHARE, e.g. haiku=0.6 or haiku=60%") from None
        if not sep:
            raise ConfigError(f"--share {item!r}: expected TIER=SHARE, e.g. haiku=0.6")
    return out or None


def _table(path: str | os.PathLike[str]) -> dict[str, Any]:
    import yaml

    from tailscope.files import read_user_text

    try:
        doc = yaml.safe_load(read_user_text(path, what="routing table")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tiers"), list):
        raise ConfigError(
            f"{path}: expected `tiers: [{{name, p50, p95, in, out}}, …]` (and optional classes:, router:)"
        )
    unknown = set(doc) - {"tiers", "classes", "router", "tokens_in", "tokens_out"}
    if unknown:
        raise ConfigError(f"{path}: unknown key {', '.join(sorted(unknown))} (tiers, classes, router, tokens_in/out)")
    return doc


@public
def plan_routing(
    *,
    tiers: Sequence[TierRef] = (),
    classes: Sequence[ClassRef] = (),
    router: TierRef | None = None,
    table: str | os.PathLike[str] | None = None,
    tokens_in: float = 1000.0,
    tokens_out: float = 300.0,
    shares: Mapping[str, float] | Sequence[str] | None = None,
    slo_p50: str | float | None = None,
    slo_p95: str | float | None = None,
    seed: int = 0,
    store: StorePath | RunStore | None = None,
) -> RoutingPlan:
    """Project P50/P95 latency and cost per 1M requests of routing request classes to model tiers behind a router,
    against the baseline of sending everything to the most capable tier; find the cheapest routing meeting the SLO.

    Args:
        tiers: two or more tiers, least capable first: ``"name=haiku,p50=800ms,p95=1.5s,in=0.8,out=4"`` (prices USD per
            1M input/output tokens; ``per_request=`` a flat USD price; ``tokens_in=``/``tokens_out=`` per tier;
            ``run=RUN_ID`` takes P50/P95 and tokens from a stored bench or sim run), dicts of the same keys, or Tiers.
        classes: request classes ``"simple:0.8:template"`` (NAME:SHARE:MIN_TIER — the least capable tier that answers
            the class well enough) or ``"name=…,share=…,min_tier=…"``; shares add up to 1. Default: one class that
            any tier serves.
        router: the router every routed request passes first (a tier spec: its latency adds, its cost adds).
        table: a YAML file with ``tiers:``, ``classes:``, ``router:``, ``tokens_in``, ``tokens_out`` (flags add to it).
        tokens_in, tokens_out: mean tokens per request (a tier's own ``tokens_in``/``tokens_out`` win).
        shares: a routing to project as given: ``{"haiku": 0.6, "opus": 0.4}`` or ``["haiku=0.6", "opus=0.4"]``.
        slo_p50, slo_p95: the latency SLO of the search (``1.5s``, ``800ms`` or ms).
        seed: the Monte Carlo's seed.
        store: where ``run=`` tiers are looked up (only read).

    Returns:
        ``plan.baseline``, ``plan.given``, ``plan.best`` (each with ``p50_ms``, ``p95_ms``, ``cost_per_1m_requests``,
        ``shares``), ``plan.saving()`` and ``plan.to_dict()`` (``tailscope plan routing --json``).

    Raises:
        ConfigError: bad specs (naming the flag and the value), shares that do not add up, unknown tiers.
    """
    doc = _table(table) if table is not None else {}
    tier_refs: list[TierRef] = [*(doc.get("tiers") or []), *tiers]
    class_refs: list[ClassRef] = [*(doc.get("classes") or []), *classes]
    router_ref = router if router is not None else doc.get("router")
    if len(tier_refs) < 2:
        raise ConfigError("plan routing needs two or more tiers (--tier name=small,p50=…,p95=…,in=…,out=… per tier)")
    parsed = [_tier(t, i, store) for i, t in enumerate(tier_refs)]
    rtr = _tier(router_ref, 0, store, what="--router") if router_ref is not None else None
    try:
        return _plan(
            parsed,
            [_class(c) for c in class_refs],
            router=rtr,
            tokens_in=float(doc.get("tokens_in", tokens_in)) if table is not None else tokens_in,
            tokens_out=float(doc.get("tokens_out", tokens_out)) if table is not None else tokens_out,
            shares=_shares(shares),
            slo_p50_ms=_ms(slo_p50, "--slo-p50") if slo_p50 is not None else None,
            slo_p95_ms=_ms(slo_p95, "--slo-p95") if slo_p95 is not None else None,
            seed=seed,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
