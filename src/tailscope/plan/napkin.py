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

    def steps(self) -> list[str]:
        return [
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
            "steps": self.steps(),
        }


def napkin_capacity(users: int, tokens_per_user_s: float, gpu_tokens_s: float, headroom: float = 0.2) -> NapkinCapacity:
    """GPUs = ⌈users × tokens/user/s × (1 + headroom) / GPU tokens/s⌉.

    Raises:
        PlanError: for non-positive inputs or headroom outside [0, 10].
    """
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

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


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
) -> CostPlan:
    """Cost per 1M output tokens and per request at the given throughput (GPUs busy 100 % of the time).

    API prices are USD per 1M input / output tokens. With ``daily_requests`` the self-hosted fleet is sized to the
    average rate (⌈daily/86400 / requests_per_s per fleet × gpus⌉ GPUs, at least one replica's worth) and compared
    with paying the API for the same requests; ``break_even_daily_requests`` is where they cost the same for one
    fleet of ``gpus`` GPUs.

    Raises:
        PlanError: for non-positive throughput or prices.
    """
    if gpus < 1 or gpu_price_per_hour <= 0:
        raise PlanError("--gpu-price (USD per GPU-hour) and the GPU count must be > 0")
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
    )
    if api_price_in is None or api_price_out is None:
        return out
    api_req = mean_input_tokens * api_price_in / 1e6 + mean_output_tokens * api_price_out / 1e6
    fields: dict[str, Any] = {"api_usd_per_request": api_req}
    fleet_day = gpus * gpu_price_per_hour * 24
    fields["break_even_daily_requests"] = fleet_day / api_req if api_req > 0 else None
    if daily_requests is not None:
        avg_rps = daily_requests / 86400.0
        fleets = max(1, math.ceil(avg_rps / requests_per_s))
        fields.update(
            daily_requests=daily_requests,
            gpus_for_daily=fleets * gpus,
            self_host_usd_per_day=fleets * fleet_day,
            api_usd_per_day=daily_requests * api_req,
        )
    return CostPlan(**{**{k: getattr(out, k) for k in out.__slots__}, **fields})
