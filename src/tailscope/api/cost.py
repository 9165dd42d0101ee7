"""Plan: cost — :func:`plan_napkin` (capacity on a napkin), :func:`plan_unit_cost` ($ per 1M tokens from a day's
figures) and :func:`plan_cost` ($ per 1M tokens at a run's throughput, break-even against an API). Runs are only
read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tailscope.api._support import StorePath, public
from tailscope.api.verify import RunRef, load_run
from tailscope.errors import ConfigError
from tailscope.metrics.slo import Slo, parse_slo
from tailscope.plan import napkin as napkin_core
from tailscope.plan.napkin import CostPlan, NapkinCapacity, UnitCost
from tailscope.store.runs import RunStore


@public
def plan_napkin(
    *,
    users: int,
    tokens_per_user_s: float | None = None,
    gpu_tokens_s: float,
    headroom: float = 0.2,
    slo: Sequence[str | Slo] = (),
    output_tokens: float | None = None,
) -> NapkinCapacity:
    """Capacity on a napkin: users × tokens/s each × (1 + headroom) ÷ tokens/s one GPU gives, rounded up.

    Args:
        users: concurrent streams.
        tokens_per_user_s: the generation rate each stream gets (optional when an SLO gives it).
        gpu_tokens_s: tokens/s one GPU sustains.
        headroom: extra load fraction to plan for.
        slo: latency SLOs; an E2E one (``e2e_p95=8s``, less a TTFT one if given) over ``output_tokens`` or a TPOT
            one sets the least rate per stream (the method: 350 tokens within a P95 of 8 s → ≥ 45 tok/s), and the
            larger of that and ``tokens_per_user_s`` is planned for. Other SLOs are refused, not ignored.
        output_tokens: mean output tokens per request (for an E2E SLO).

    Returns:
        ``n.gpus``, ``n.slo_tokens_per_user_s``, ``n.steps()`` (the arithmetic, one line per step) and ``n.to_dict()``.

    Raises:
        ConfigError: an SLO the napkin form cannot use, or an E2E SLO without ``output_tokens``.
        PlanError: non-positive inputs.
    """
    slos = [s if isinstance(s, Slo) else parse_slo(s) for s in slo]
    by_metric = {s.metric: s for s in slos}
    for s in slos:
        if s.metric not in ("e2e", "ttft", "tpot"):
            raise ConfigError(f"--slo {s.key}: the napkin form can use e2e, ttft (with e2e) and tpot SLOs only")
    if "ttft" in by_metric and "e2e" not in by_metric:
        raise ConfigError(f"--slo {by_metric['ttft'].key}: the napkin form uses a TTFT SLO only beside an E2E one")
    rates: list[tuple[float, str]] = []
    if "e2e" in by_metric:
        if output_tokens is None:
            raise ConfigError(f"--slo {by_metric['e2e'].key} needs --output-tokens N (mean output tokens per request)")
        ttft = by_metric.get("ttft")
        rates.append(
            napkin_core.stream_rate_for_slo(
                output_tokens, by_metric["e2e"].threshold_ms / 1000, ttft.threshold_ms / 1000 if ttft else 0.0
            )
        )
    if "tpot" in by_metric:
        t = by_metric["tpot"]
        rates.append((1000.0 / t.threshold_ms, f"TPOT {t.percentile} ≤ {t.threshold_ms:g} ms"))
    slo_rate = max(rates, default=None, key=lambda r: r[0])
    return napkin_core.napkin_capacity(users, tokens_per_user_s, gpu_tokens_s, headroom, slo_rate=slo_rate)


@public
def plan_unit_cost(
    *,
    tokens_per_day: float,
    gpu_hours: float | None = None,
    bill: float | None = None,
    gpu_price: float | None = None,
) -> UnitCost:
    """Cost per 1M tokens from a day's figures (the method's unit cost): the bill ÷ the day's tokens × 10⁶.

    Args:
        tokens_per_day: tokens served in the day (input + output, or what you bill on).
        gpu_hours: GPU-hours used that day (also gives tokens per GPU-hour).
        bill: the day's bill in USD; without it, ``gpu_hours × gpu_price``.
        gpu_price: USD per GPU-hour.

    Returns:
        ``u.usd_per_million_tokens``, ``u.tokens_per_gpu_hour``, ``u.steps()`` and ``u.to_dict()``.

    Raises:
        PlanError: non-positive figures, or neither a bill nor GPU-hours with a price.
    """
    return napkin_core.unit_cost(tokens_per_day=tokens_per_day, gpu_hours=gpu_hours, bill=bill, gpu_price=gpu_price)


@public
def plan_cost(
    *,
    gpu_price: float,
    run: RunRef,
    gpus: int | None = None,
    api_price_in: float | None = None,
    api_price_out: float | None = None,
    daily_requests: int | None = None,
    ops_usd_per_month: float = 0.0,
    cached_share: float = 0.0,
    cache_write_share: float = 0.0,
    cache_read_mult: float = 0.1,
    cache_write_mult: float = 1.25,
    store: StorePath | RunStore | None = None,
) -> CostPlan:
    """$ per 1M output tokens and per request at a measured or simulated run's throughput, and the break-even
    against an API's prices.

    Args:
        gpu_price: USD per GPU-hour.
        run: the run (a result of this API, a store reference such as ``latest``, or a ``--json`` export).
        gpus: GPUs behind the run (a sim run knows its own deployment).
        api_price_in, api_price_out: an API's USD per 1M input / output tokens.
        daily_requests: size a self-hosted fleet for this many requests a day and compare the daily cost.
        ops_usd_per_month: operations cost of self-hosting (people, on-call, monitoring), added to its side of the
            break-even (÷ 30 per day).
        cached_share: share of the API's input tokens read from its prompt cache, billed at ``cache_read_mult`` ×
            the input price (0.1×); ``cache_write_share`` of them are cache writes at ``cache_write_mult`` (1.25×).
        store: where references are looked up (only read).

    Raises:
        ConfigError: a bench run without ``gpus``. NotFoundError: no such run.
    """
    data = load_run(run, store=store)
    s = data.summary or {}
    n_gpus = run_gpus(data, gpus)
    if n_gpus is None:
        raise ConfigError(f"run {data.id} is a {data.kind} run: say how many GPUs served it with --gpus N")
    return napkin_core.plan_cost(
        gpus=n_gpus,
        gpu_price_per_hour=gpu_price,
        output_tokens_per_s=float(s.get("output_tokens_per_s") or 0.0),
        requests_per_s=float(s.get("requests_per_s") or 0.0),
        mean_input_tokens=float((s.get("input_tokens") or {}).get("mean") or 0.0),
        mean_output_tokens=float((s.get("output_tokens") or {}).get("mean") or 0.0),
        source=f"{data.kind} run {data.id}",
        api_price_in=api_price_in,
        api_price_out=api_price_out,
        daily_requests=daily_requests,
        ops_usd_per_month=ops_usd_per_month,
        cached=napkin_core.CachedPricing(cached_share, cache_write_share, cache_read_mult, cache_write_mult),
    )


def run_gpus(data: Any, gpus: int | None = None) -> int | None:
    """The GPUs behind a loaded run: ``gpus`` when given, else what the run's deployment says (replicas × TP): a sim
    run's cluster, or the built-in engine a bench run started (one replica at TP 1)."""
    if gpus is not None:
        return gpus
    engine = data.settings.get("engine") if isinstance(data.settings, Mapping) else None
    if isinstance(engine, Mapping):
        return int(engine.get("replicas", 1)) * int(engine.get("tp", 1))
    return None
