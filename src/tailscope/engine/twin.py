"""The digital twin: a step-time model fitted to one real deployment (pure).

A twin replaces the roofline's datasheet efficiencies with coefficients measured on the server::

    step(prefill chunks (c, p), n decodes, KV tokens read D)
        = overhead + prefill_per_token · Σc + prefill_attn · Σ c·(p + c/2) + per_seq · (n + chunks) + per_kv_token · D
    TTFT = frontend (+ frontend_busy when others are in flight) + the prefill step (+ queueing, which the
           scheduler simulates)

and carries the server's own facts (KV blocks, block size, scheduler limits, max model length), so the simulated
KV capacity is the server's, not an estimate. Every coefficient has a bootstrap standard error; the fit's residuals
are kept.

This module holds the model and its file form; ``twin_step.py`` the twin as a step-time model
(:class:`~tailscope.engine.twin_step.TwinStepModel`, what ``sim`` drives), ``twin_fit.py`` the fit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from tailscope.errors import ConfigError

TWIN_VERSION = 1


@dataclass(frozen=True, slots=True)
class TwinCoefficients:
    """Fitted costs, all in microseconds (per unit named)."""

    step_overhead_us: float = 0.0
    per_seq_us: float = 0.0
    per_kv_token_us: float = 0.0
    prefill_per_token_us: float = 0.0
    prefill_attn_us: float = 0.0  # per (prompt token × context token)
    frontend_us: float = 0.0
    frontend_per_inflight_us: float = 0.0
    #: added to the front end of a request that arrives while the replica has others in flight (the API server's
    #: work for it then shares the machine with a running engine); fitted by simulating the probe's open-loop phase
    frontend_busy_us: float = 0.0

    def lone_ttft_us(self, prompt: int) -> float:
        """A lone request's TTFT on an idle server: front end (at its mean), then one prefill step of ``prompt``
        tokens — the model the prefill ladder is fitted to."""
        fixed = self.frontend_us + self.step_overhead_us + self.per_seq_us
        return fixed + self.prefill_per_token_us * prompt + self.prefill_attn_us * prompt * prompt / 2

    def to_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the server said about itself (``/metrics`` ``vllm:cache_config_info``, ``/v1/models``)."""

    block_size: int
    num_blocks: int
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    engine: str = "vllm"
    model: str = ""
    url: str = ""
    prompt_scale: float = 1.0  # server prompt tokens per requested (synthesized) prompt token
    prompt_offset: float = 0.0  # server prompt tokens added to every request (chat template, BOS)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.block_size * self.num_blocks

    def server_prompt_tokens(self, requested: int) -> int:
        """How many prompt tokens the server will count for a synthesized prompt of ``requested`` tokens."""
        return max(1, round(self.prompt_offset + self.prompt_scale * requested))


def quantile_at(q: Sequence[float], u: float) -> float:
    """The value at ``u`` in [0, 1] of a distribution given by quantiles ``q`` evenly spaced over [0, 1] (linear
    between them): how :class:`SpeedNoise` and :class:`SendLag` draw from what the calibration measured."""
    last = len(q) - 1
    x = u * last
    i = int(x)
    return q[i] if i >= last else q[i] + (q[i + 1] - q[i]) * (x - i)


@dataclass(frozen=True, slots=True)
class SpeedNoise:
    """How the deployment's speed wanders over time, as measured by the calibration.

    On a shared or virtual machine the same work takes more or less time from one second to the next (on the 2-core
    VM this project is developed on, a fixed CPU loop takes 22–44 ms by the second with nothing else running). The
    probe sees that as spread in the ratio *measured ÷ fitted* of its decode observations; the twin replays it as a
    piecewise-constant factor on every step and front-end time, drawn afresh every ``window_ms`` from those ratios'
    quantiles. It widens predicted percentiles the way the machine does; on a steady GPU server the ratios are ≈ 1
    and it changes nothing.
    """

    window_ms: float
    quantiles: tuple[float, ...]  # evenly spaced from the minimum to the maximum ratio
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"window_ms": self.window_ms, "quantiles": [round(q, 4) for q in self.quantiles], "seed": self.seed}

    def factor_at(self) -> Callable[[int], float]:
        """A deterministic speed factor as a function of time (ns): constant within each window."""
        rng = random.Random(self.seed)
        q = self.quantiles
        window_ns = max(1, int(self.window_ms * 1e6))
        drawn: list[float] = []

        def draw() -> float:
            return quantile_at(q, rng.random())

        def factor(t_ns: int) -> float:
            k = t_ns // window_ns if t_ns > 0 else 0
            while len(drawn) <= k:
                drawn.append(draw())
            return drawn[k]

        return factor


def speed_from_ratios(ratios: Sequence[float], window_ms: float, *, points: int = 21) -> SpeedNoise | None:
    """The :class:`SpeedNoise` of measured ÷ fitted ratios (None under 10 ratios)."""
    r = np.asarray([x for x in ratios if math.isfinite(x) and x > 0], dtype=np.float64)
    if len(r) < 10:
        return None
    qs = np.quantile(r, np.linspace(0.0, 1.0, points))
    return SpeedNoise(window_ms=float(window_ms), quantiles=tuple(float(v) for v in qs))


@dataclass(frozen=True, slots=True)
class SendLag:
    """How late the measuring client sends an open-loop request: intended send time → actual send, in ms.

    Bench measures open-loop latency from the intended send time (no coordinated omission), so a request's TTFT
    includes the load generator's own delay in sending it (timer wake-up, building the request; 0.5–1 ms median on
    the 2-core development VM). The twin's front end is fitted on requests timed from their actual send, so without
    this the twin predicts open-loop TTFT that much low. Measured in the probe's open-loop phase; each simulated
    open-loop request arrives at the server this much after its intended time, drawn per request (deterministically)
    from these quantiles, and the simulated record carries it as its send lag.
    """

    quantiles_ms: tuple[float, ...]  # evenly spaced from the minimum lag to the 99th percentile

    def to_list(self) -> list[float]:
        return [round(q, 4) for q in self.quantiles_ms]

    def lag_ns(self, u: float) -> int:
        """The lag at quantile ``u`` in [0, 1) (linear between the stored quantiles)."""
        return int(quantile_at(self.quantiles_ms, u) * 1e6)


#: a decode fit whose median |relative error| is above this was taken while the machine's speed moved. On the
#: development VM's vLLM CPU server, of seven calibrations in a row the four fits at 17.5–19.9 % gave twins that
#: missed the open-loop held-out figures by 17.8–40.0 % on average, the three at 9.1–11.8 % by 9.5–21.9 %
#: (docs/engine.md, "How noisy the fit was"): a reason to calibrate again, not a verdict
NOISY_DECODE_FIT = 0.15


def noisy_fit_warning(twin: TwinModel) -> str | None:
    """One line when the twin's decode fit is noisy (:data:`NOISY_DECODE_FIT`), else None."""
    err = twin.residuals.get("decode_rel_mad")
    if err is None or err <= NOISY_DECODE_FIT:
        return None
    return (
        f"the decode fit's median |error| is {err:.1%} (over {NOISY_DECODE_FIT:.0%}): the server's speed moved while "
        "it was probed, and such fits made the less accurate twins on this project's VM (docs/engine.md, \"How noisy "
        'the fit was") — calibrate again when the machine is quieter and keep the quieter fit'
    )


def send_lag_from(lags_ms: Sequence[float], *, points: int = 21) -> SendLag | None:
    """The :class:`SendLag` of measured open-loop send lags in ms (None under 10 of them).

    Lags above the 99th percentile are left out: one hiccup of the client (15.3 ms at a median of 0.85 ms, seen in a
    144-arrival probe) would otherwise become the top quantile and give 5 % of every simulated run's requests a lag
    of several ms — a client bottleneck the simulation does not have.
    """
    v = np.asarray([x for x in lags_ms if math.isfinite(x) and x >= 0], dtype=np.float64)
    if len(v) < 10:
        return None
    v = v[v <= np.quantile(v, 0.99)]
    return SendLag(quantiles_ms=tuple(float(q) for q in np.quantile(v, np.linspace(0.0, 1.0, points))))


@dataclass(frozen=True, slots=True)
class TwinModel:
    """A fitted twin: coefficients, their standard errors, residual figures and the server facts."""

    coefficients: TwinCoefficients
    stderr: TwinCoefficients
    facts: ServerFacts
    residuals: dict[str, float] = field(default_factory=dict)
    fitted_on: dict[str, Any] = field(default_factory=dict)
    speed: SpeedNoise | None = None
    send_lag: SendLag | None = None

    def shifted(self, sigmas: float) -> TwinModel:
        """The twin with every cost moved by ``sigmas`` standard errors (for prediction intervals)."""
        c, s = self.coefficients, self.stderr
        moved = {f.name: max(0.0, getattr(c, f.name) + sigmas * getattr(s, f.name)) for f in fields(c)}
        return replace(self, coefficients=TwinCoefficients(**moved))

    def to_mapping(self) -> dict[str, Any]:
        """The ``twin.yaml`` document."""
        f = self.facts
        return {
            "twin_version": TWIN_VERSION,
            "server": {
                "url": f.url,
                "model": f.model,
                "engine": f.engine,
                "block_size": f.block_size,
                "num_blocks": f.num_blocks,
                "kv_capacity_tokens": f.kv_capacity_tokens,
                "max_num_seqs": f.max_num_seqs,
                "max_num_batched_tokens": f.max_num_batched_tokens,
                "max_model_len": f.max_model_len,
                "enable_prefix_caching": f.enable_prefix_caching,
                "prompt_scale": f.prompt_scale,
                "prompt_offset": f.prompt_offset,
            },
            "coefficients_us": self.coefficients.to_dict(),
            "stderr_us": self.stderr.to_dict(),
            "residuals": dict(self.residuals),
            "fitted_on": dict(self.fitted_on),
            **({"speed": self.speed.to_dict()} if self.speed is not None else {}),
            **({"client": {"send_lag_ms": self.send_lag.to_list()}} if self.send_lag is not None else {}),
        }


def twin_from_mapping(data: Any, *, source: str) -> TwinModel:
    """Validate a parsed ``twin.yaml``.

    Raises:
        ConfigError: naming ``source`` and the section or field that is wrong.
    """
    if not isinstance(data, dict) or "coefficients_us" not in data or "server" not in data:
        raise ConfigError(f"{source}: not a twin file (expected sections server and coefficients_us)")
    srv = data["server"]
    if not isinstance(srv, dict):
        raise ConfigError(f"{source}: server must be a mapping")

    def coeffs(sec: str) -> TwinCoefficients:
        raw = data.get(sec) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: {sec} must be a mapping of name: microseconds")
        known = {f.name for f in fields(TwinCoefficients)}
        unknown = {str(k) for k in raw} - known
        if unknown:
            raise ConfigError(f"{source}: {sec}: unknown field(s) {', '.join(sorted(unknown))}")
        try:
            values = {str(k): float(v) for k, v in raw.items()}
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: {sec}: every value must be a number") from None
        if any(v < 0 or not math.isfinite(v) for v in values.values()):
            raise ConfigError(f"{source}: {sec}: costs must be finite and ≥ 0")
        return TwinCoefficients(**values)

    try:
        facts = ServerFacts(
            block_size=int(srv["block_size"]),
            num_blocks=int(srv["num_blocks"]),
            max_num_seqs=int(srv.get("max_num_seqs") or 256),
            max_num_batched_tokens=int(srv.get("max_num_batched_tokens") or 2048),
            max_model_len=int(srv["max_model_len"]) if srv.get("max_model_len") else None,
            enable_prefix_caching=bool(srv.get("enable_prefix_caching", True)),
            engine=str(srv.get("engine") or "vllm"),
            model=str(srv.get("model") or ""),
            url=str(srv.get("url") or ""),
            prompt_scale=float(srv.get("prompt_scale", 1.0)),
            prompt_offset=float(srv.get("prompt_offset", 0.0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: server needs integer block_size and num_blocks ({exc})") from None
    if facts.block_size < 1 or facts.num_blocks < 1:
        raise ConfigError(f"{source}: server.block_size and server.num_blocks must be ≥ 1")
    if not (0 < facts.prompt_scale < 100 and 0 <= facts.prompt_offset < 1e6):
        raise ConfigError(f"{source}: server.prompt_scale must be in (0, 100) and prompt_offset ≥ 0")
    residuals = data.get("residuals") or {}
    fitted_on = data.get("fitted_on") or {}
    speed = _speed_from_mapping(data.get("speed"), source)
    send_lag = _send_lag_from_mapping(data.get("client"), source)
    return TwinModel(
        coefficients=coeffs("coefficients_us"),
        stderr=coeffs("stderr_us"),
        facts=facts,
        residuals={str(k): float(v) for k, v in residuals.items()} if isinstance(residuals, dict) else {},
        fitted_on=dict(fitted_on) if isinstance(fitted_on, dict) else {},
        speed=speed,
        send_lag=send_lag,
    )


def _send_lag_from_mapping(raw: Any, source: str) -> SendLag | None:
    if raw is None:
        return None
    lags = raw.get("send_lag_ms") if isinstance(raw, dict) else None
    try:
        qs = tuple(float(v) for v in lags) if isinstance(lags, list) else ()
    except (TypeError, ValueError):
        qs = ()
    if len(qs) < 2 or any(not (q >= 0 and math.isfinite(q)) for q in qs) or list(qs) != sorted(qs):
        raise ConfigError(
            f"{source}: client.send_lag_ms must be a list of ≥ 2 numbers ≥ 0 in increasing order (the client's "
            "open-loop send lag quantiles, ms); delete the client section to predict without it"
        )
    return SendLag(quantiles_ms=qs)


def _speed_from_mapping(raw: Any, source: str) -> SpeedNoise | None:
    if raw is None:
        return None
    try:
        window = float(raw["window_ms"])
        qs = tuple(float(v) for v in raw["quantiles"])
        seed = int(raw.get("seed", 0))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(
            f"{source}: speed needs window_ms (a number) and quantiles (a list of numbers); delete the section to "
            "predict without the machine's speed noise"
        ) from None
    if not (window > 0 and math.isfinite(window)):
        raise ConfigError(f"{source}: speed.window_ms must be > 0")
    if len(qs) < 2 or any(not (q > 0 and math.isfinite(q)) for q in qs) or list(qs) != sorted(qs):
        raise ConfigError(f"{source}: speed.quantiles must be ≥ 2 positive numbers in increasing order")
    return SpeedNoise(window_ms=window, quantiles=qs, seed=seed)
