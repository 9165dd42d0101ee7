"""The napkin forms of capacity and cost (pure arithmetic, every step shown)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tailscope.errors import PlanError


@dataclass(frozen=True, slots=True)
class NapkinCapacity:
    """``users × tokens/user/s`` against a per-GPU token rate, with headroom."""

    users: int
    tokens_per_user_s: float
    gpu_tokens_s: float
    headroom: float
    required_tokens_s: float
    with_headroom_tokens_s: float
    gpus_without_headroom: int
    gpus: int
    slo_tokens_per_user_s: float | None = None  # the per-stream rate the latency SLO demands
    slo_derivation: str = ""

    def steps(self) -> list[str]:
        first = []
        if self.slo_tokens_per_user_s is not None:
            first.append(
                f"SLO: {self.slo_derivation} → ≥ {math.ceil(self.slo_tokens_per_user_s - 1e-9)} tok/s per stream"
            )
        return [
            *first,
            f"{self.users} users × {self.tokens_per_user_s:g} tok/s = {self.required_tokens_s:,.0f} tok/s",
            f"{self.required_tokens_s:,.0f} / {self.gpu_tokens_s:,.0f} tok/s per GPU"
            f" → {self.gpus_without_headroom} GPUs",
            f"with {self.headroom:.0%} headroom {self.with_headroom_tokens_s:,.0f} tok/s → {self.gpus} GPUs",
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "users": self.users,
            "tokens_per_user_s": self.tokens_per_user_s,
            "gpu_tokens_s": self.gpu_tokens_s,
            "headroom": self.headroom,
            "required_tokens_s": self.required_tokens_s,
            "with_headroom_tokens_s": self.with_headroom_tokens_s,
            "gpus_without_headroom": self.gpus_without_headroom,
            "gpus": self.gpus,
            "slo_tokens_per_user_s": self.slo_tokens_per_user_s,
            "slo_derivation": self.slo_derivation,
            "steps": self.steps(),
        }


def stream_rate_for_slo(output_tokens: float, e2e_s: float, ttft_s: float = 0.0) -> tuple[float, str]:
    """The per-stream generation rate a latency SLO demands: ``output_tokens / (e2e − ttft)`` tokens/s.

    The method (../shared/method/001 §4.2): a P95 of 8 s over 350 output tokens needs about 45 tok/s per stream
    (350 / 8 = 43.75; with 0.2 s of TTFT out of the 8 s, 350 / 7.8 = 44.9).

    Raises:
        PlanError: non-positive tokens, or a TTFT allowance that leaves no time to generate.
    """
    if output_tokens <= 0:
        raise PlanError(f"--output-tokens must be > 0 to derive a rate from the SLO (got {output_tokens:g})")
    decode_s = e2e_s - ttft_s
    if decode_s <= 0:
        raise PlanError(f"the TTFT SLO ({ttft_s:g} s) leaves no time to generate within the E2E SLO ({e2e_s:g} s)")
    text = f"{output_tokens:g} tokens in {e2e_s:g} s" + (f" − {ttft_s:g} s TTFT" if ttft_s else "")
    return output_tokens / decode_s, text


def napkin_capacity(
    users: int,
    tokens_per_user_s: float | None,
    gpu_tokens_s: float,
    headroom: float = 0.2,
    *,
    slo_rate: tuple[float, str] | None = None,
) -> NapkinCapacity:
    """GPUs = ⌈users × tokens/user/s × (1 + headroom) / GPU tokens/s⌉; with ``slo_rate`` (from
    :func:`stream_rate_for_slo`) each stream needs at least that rate, so the larger of the two is planned for.

    Raises:
        PlanError: for non-positive inputs or headroom outside [0, 10].
    """
    slo_tokens = slo_rate[0] if slo_rate is not None else None
    if tokens_per_user_s is None:
        if slo_tokens is None:
            raise PlanError("give --tokens-per-user-s, or an E2E SLO (--slo e2e_p95=8s) with --output-tokens")
        tokens_per_user_s = slo_tokens
    elif slo_tokens is not None:
        tokens_per_user_s = max(tokens_per_user_s, slo_tokens)
    if users < 1 or tokens_per_user_s <= 0 or gpu_tokens_s <= 0:
        raise PlanError("--users, --tokens-per-user-s and --gpu-tokens-s must be > 0")
    if not 0 <= headroom <= 10:
        raise PlanError(f"--headroom is a fraction, e.g. 0.2 for 20 % (got {headroom})")
    need = users * tokens_per_user_s
    padded = need * (1 + headroom)
    eps = 1e-9  # 3000/1500 must be 2, not 3, after floating-point rounding
    return NapkinCapacity(
        users=users,
        tokens_per_user_s=tokens_per_user_s,
        gpu_tokens_s=gpu_tokens_s,
        headroom=headroom,
        required_tokens_s=need,
        with_headroom_tokens_s=padded,
        gpus_without_headroom=max(1, math.ceil(need / gpu_tokens_s - eps)),
        gpus=max(1, math.ceil(padded / gpu_tokens_s - eps)),
        slo_tokens_per_user_s=slo_tokens,
        slo_derivation=slo_rate[1] if slo_rate is not None else "",
    )


@dataclass(frozen=True, slots=True)
class CostPlan:
    """Self-hosting cost from a measured or simulated throughput, and the break-even against an API."""

    gpus: int
    gpu_price_per_hour: float
    output_tokens_per_s: float
    requests_per_s: float
    usd_per_million_output_tokens: float
    usd_per_request: float
    source: str
    api_usd_per_request: float | None = None
    daily_requests: int | None = None
    self_host_usd_per_day: float | None = None
    api_usd_per_day: float | None = None
    break_even_daily_requests: float | None = None
    gpus_for_daily: int | None = None
    ops_usd_per_month: float = 0.0
    cached_share: float = 0.0
    cache_write_share: float = 0.0
    cache_read_mult: float = 0.1
    cache_write_mult: float = 1.25
    api_usd_per_million_input_effective: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class CachedPricing:
    """An API's input price with prompt caching: ``cached_share`` of input tokens are cache reads billed at
    ``read_mult`` × the input price, ``write_share`` are cache writes at ``write_mult`` ×, the rest at 1×."""

    cached_share: float = 0.0
    write_share: float = 0.0
    read_mult: float = 0.1
    write_mult: float = 1.25

    def input_multiplier(self) -> float:
        """The effective multiplier of the input price: (1 − r − w) + r × read + w × write."""
        r, w = self.cached_share, self.write_share
        return (1 - r - w) + r * self.read_mult + w * self.write_mult

    def check(self) -> None:
        """Raises PlanError for shares outside [0, 1] (or summing over 1) and negative multipliers."""
        for flag, v in (("--cached-share", self.cached_share), ("--cache-write-share", self.write_share)):
            if not 0 <= v <= 1:
                raise PlanError(f"{flag} is a fraction of the input tokens in [0, 1] (got {v})")
        if self.cached_share + self.write_share > 1 + 1e-9:
            raise PlanError("--cached-share + --cache-write-share cannot exceed 1 (they are shares of input tokens)")
        if self.read_mult < 0 or self.write_mult < 0:
            raise PlanError("--cache-read-mult and --cache-write-mult must be ≥ 0 (e.g. 0.1 and 1.25)")


@dataclass(frozen=True, slots=True)
class UnitCost:
    """Cost per 1M tokens from a day's figures: tokens served, GPU-hours, the bill (the method's unit cost)."""

    tokens_per_day: float
    gpu_hours: float | None
    bill_usd: float
    usd_per_million_tokens: float
    tokens_per_gpu_hour: float | None
    gpu_hours_per_million_tokens: float | None
    bill_from: str  # "bill" or "gpu-hours × price"

    def steps(self) -> list[str]:
        out = [f"bill {self.bill_usd:,.2f} USD ({self.bill_from})"]
        out.append(
            f"{self.bill_usd:,.2f} USD / {self.tokens_per_day / 1e6:,.1f} M tokens = "
            f"{self.usd_per_million_tokens:,.4f} USD per 1M tokens"
        )
        if self.tokens_per_gpu_hour is not None:
            out.append(f"{self.tokens_per_day:,.0f} tokens / {self.gpu_hours:,.1f} GPU-h = "
                       f"{self.tokens_per_gpu_hour:,.0f} tokens per GPU-hour")  # fmt: skip
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self.__slots__}, "steps": self.steps()}


def unit_cost(
    *, tokens_per_day: float, gpu_hours: float | None = None, bill: float | None = None, gpu_price: float | None = None
) -> UnitCost:
    """USD per 1M tokens = the day's bill ÷ the day's tokens × 10⁶; the bill is given, or GPU-hours × price.

    Raises:
        PlanError: non-positive tokens, or neither a bill nor GPU-hours with a price.
    """
    if tokens_per_day <= 0:
        raise PlanError(f"--tokens-per-day must be > 0 (got {tokens_per_day:g})")
    if gpu_hours is not None and gpu_hours <= 0:
        raise PlanError(f"--gpu-hours must be > 0 (got {gpu_hours:g})")
    if bill is not None:
        if bill <= 0:
            raise PlanError(f"--bill must be > 0 USD (got {bill:g})")
        total, source = bill, "bill"
    elif gpu_hours is not None and gpu_price is not None and gpu_price > 0:
        total, source = gpu_hours * gpu_price, f"{gpu_hours:g} GPU-h × {gpu_price:g} USD"
    else:
        raise PlanError("give the day's --bill USD, or --gpu-hours H with --gpu-price USD per GPU-hour")
    per_gpu_h = tokens_per_day / gpu_hours if gpu_hours else None
    return UnitCost(
        tokens_per_day=tokens_per_day,
        gpu_hours=gpu_hours,
        bill_usd=total,
        usd_per_million_tokens=total / tokens_per_day * 1e6,
        tokens_per_gpu_hour=per_gpu_h,
        gpu_hours_per_million_tokens=gpu_hours / tokens_per_day * 1e6 if gpu_hours else None,
        bill_from=source,
    )


def plan_cost(
    *,
    gpus: int,
    gpu_price_per_hour: float,
    output_tokens_per_s: float,
    requests_per_s: float,
    mean_input_tokens: float,
    mean_output_tokens: float,
    source: str,
    api_price_in: float | None = None,
    api_price_out: float | None = None,
    daily_requests: int | None = None,
    ops_usd_per_month: float = 0.0,
    cached: CachedPricing | None = None,
) -> CostPlan:
    """Cost per 1M output tokens and per request at the given throughput (GPUs busy 100 % of the time).

    API prices are USD per 1M input / output tokens. With ``daily_requests`` the self-hosted fleet is sized to the
    average rate (⌈daily/86400 / requests_per_s per fleet × gpus⌉ GPUs, at least one replica's worth) and compared
    with paying the API for the same requests; ``break_even_daily_requests`` is where they cost the same for one
    fleet of ``gpus`` GPUs. ``ops_usd_per_month`` (people, on-call, monitoring) is added to the self-hosted side
    (÷ 30 per day); ``cached`` prices the API's input with prompt caching (reads 0.1×, writes 1.25× by default).

    Raises:
        PlanError: for non-positive throughput or prices.
    """
    if gpus < 1 or gpu_price_per_hour <= 0:
        raise PlanError("--gpu-price (USD per GPU-hour) and the GPU count must be > 0")
    if ops_usd_per_month < 0:
        raise PlanError(f"--ops-usd-per-month must be ≥ 0 (got {ops_usd_per_month:g})")
    cache = cached or CachedPricing()
    cache.check()
    if output_tokens_per_s <= 0 or requests_per_s <= 0:
        raise PlanError(f"the throughput from {source} is zero: nothing to price (did the run complete requests?)")
    fleet_per_s = gpus * gpu_price_per_hour / 3600.0
    out = CostPlan(
        gpus=gpus,
        gpu_price_per_hour=gpu_price_per_hour,
        output_tokens_per_s=output_tokens_per_s,
        requests_per_s=requests_per_s,
        usd_per_million_output_tokens=fleet_per_s / output_tokens_per_s * 1e6,
        usd_per_request=fleet_per_s / requests_per_s,
        source=source,
        ops_usd_per_month=ops_usd_per_month,
        cached_share=cache.cached_share,
        cache_write_share=cache.write_share,
        cache_read_mult=cache.read_mult,
        cache_write_mult=cache.write_mult,
    )
    if api_price_in is None or api_price_out is None:
        return out
    price_in = api_price_in * cache.input_multiplier()
    api_req = mean_input_tokens * price_in / 1e6 + mean_output_tokens * api_price_out / 1e6
    fields: dict[str, Any] = {"api_usd_per_request": api_req, "api_usd_per_million_input_effective": price_in}
    ops_day = ops_usd_per_month / 30.0
    fleet_day = gpus * gpu_price_per_hour * 24
    fields["break_even_daily_requests"] = (fleet_day + ops_day) / api_req if api_req > 0 else None
    if daily_requests is not None:
        avg_rps = daily_requests / 86400.0
        fleets = max(1, math.ceil(avg_rps / requests_per_s))
        fields.update(
            daily_requests=daily_requests,
            gpus_for_daily=fleets * gpus,
            self_host_usd_per_day=fleets * fleet_day + ops_day,
            api_usd_per_day=daily_requests * api_req,
        )
    return CostPlan(**{**{k: getattr(out, k) for k in out.__slots__}, **fields})
