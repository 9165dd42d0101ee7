"""Fitting the digital twin (pure): robust regressions of the probe's observations into
:class:`~tailscope.engine.twin.TwinModel` coefficients with bootstrap standard errors (:func:`fit_twin`), and the
busy front end's excess TTFT (:func:`busy_frontend_excess`). ``engine/twin_observe.py`` turns records into the
observations; ``runner/twin_from_runs.py`` runs the fit on stored or probed runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tailscope.engine.twin import (
    ServerFacts,
    TwinCoefficients,
    TwinModel,
    speed_from_ratios,
)
from tailscope.errors import ConfigError

__all__ = [
    "DecodeObservation",
    "LoadedTtftObservation",
    "PrefillObservation",
    "bootstrap_stderr",
    "busy_frontend_excess",
    "fit_twin",
    "huber_fit",
]


def huber_fit(x: np.ndarray, y: np.ndarray, *, delta: float = 1.345, iters: int = 50) -> np.ndarray:
    """Robust linear regression (Huber loss by iteratively reweighted least squares), coefficients ≥ 0.

    ``x`` is the design matrix (n × k), ``y`` the targets. The scale is the MAD of the residuals.
    """
    w = np.ones(len(y))
    beta = np.zeros(x.shape[1])
    for _ in range(iters):
        sw = np.sqrt(w)
        beta_new, *_ = np.linalg.lstsq(x * sw[:, None], y * sw, rcond=None)
        beta_new = np.maximum(beta_new, 0.0)  # costs are never negative
        r = y - x @ beta_new
        scale = 1.4826 * float(np.median(np.abs(r - np.median(r)))) or 1e-9
        u = np.abs(r) / (delta * scale)
        w = np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-12))
        if np.allclose(beta_new, beta, rtol=1e-6, atol=1e-9):
            beta = beta_new
            break
        beta = beta_new
    return beta


def bootstrap_stderr(x: np.ndarray, y: np.ndarray, *, rounds: int = 200, seed: int = 0) -> np.ndarray:
    """Standard errors of :func:`huber_fit`'s coefficients by resampling observations."""
    rng = np.random.default_rng(seed)
    n = len(y)
    draws = []
    for _ in range(rounds):
        idx = rng.integers(0, n, n)
        draws.append(huber_fit(x[idx], y[idx], iters=20))
    out: np.ndarray = np.asarray(draws).std(axis=0)
    return out


@dataclass(frozen=True, slots=True)
class PrefillObservation:
    """One request alone on the server: its prompt length and TTFT measured from send (µs)."""

    prompt_tokens: int
    ttft_us: float


@dataclass(frozen=True, slots=True)
class DecodeObservation:
    """Steady decode: ``concurrency`` sequences of average context ``context`` tokens; one request's TPOT (µs)."""

    concurrency: float
    context: float
    tpot_us: float
    duration_us: float = 0.0  # the decode phase's length (first to last token)


@dataclass(frozen=True, slots=True)
class LoadedTtftObservation:
    """TTFT (µs) of a request sent while ``in_flight`` others were streaming, and its prompt length."""

    in_flight: float
    prompt_tokens: int
    ttft_us: float


def busy_frontend_excess(
    measured: Sequence[tuple[bool, float]], simulated: Sequence[tuple[bool, float]]
) -> tuple[float, float, int]:
    """The TTFT the twin misses on requests that arrive while others are in flight: (median measured TTFT of such
    requests − median simulated TTFT of such requests, in µs; its standard error; how many measured).

    Each side is (arrived while others were in flight, TTFT µs) per request, the busy ones picked by each side's own
    timeline: pairing a request's measured and simulated TTFT would be biased, since a request is more often busy
    when the one before it was slow, and the twin's draw for that one was not. (0, 0, 0) under 5 busy arrivals on
    either side.
    """
    m = np.asarray([t for busy, t in measured if busy], dtype=np.float64)
    s = np.asarray([t for busy, t in simulated if busy], dtype=np.float64)
    if len(m) < 5 or len(s) < 5:
        return 0.0, 0.0, 0
    stderr = 1.2533 * math.sqrt(float(np.var(m)) / len(m) + float(np.var(s)) / len(s))  # medians, normal spread
    return float(np.median(m) - np.median(s)), stderr, len(m)


def fit_twin(
    prefill: Sequence[PrefillObservation],
    decode: Sequence[DecodeObservation],
    facts: ServerFacts,
    *,
    loaded_ttft: Sequence[LoadedTtftObservation] = (),
    seed: int = 0,
    fit_inflight: bool = False,
) -> TwinModel:
    """Fit the twin's coefficients by robust regression.

    1. Decode: ``TPOT = overhead + per_seq · c + per_kv_token · c · context`` (one step per token).
    2. Prefill at concurrency 1: ``TTFT = a + prefill_per_token · P + prefill_attn · P²/2`` with
       ``a = frontend + overhead + per_seq`` (one prefill step plus the front end).
    3. Speed noise: the quantiles of measured ÷ fitted decode times, replayed per window of one typical decode
       phase (:class:`SpeedNoise`).
    4. Optionally (``fit_inflight``), the TTFT excess under load per request already in flight. Off by default:
       most of that excess is batching and queueing that the simulated scheduler reproduces itself, so fitting it
       as a front-end cost counts it twice (measured on vLLM CPU: +300 % TTFT error with it, see docs/engine.md).

    Raises:
        ConfigError: when there are too few observations to fit.
    """
    if len(decode) < 3 or len(prefill) < 3:
        raise ConfigError(
            f"calibration needs ≥ 3 prefill and ≥ 3 decode observations (got {len(prefill)} and {len(decode)}); "
            "run a longer probe"
        )
    xd = np.array([[1.0, o.concurrency, o.concurrency * o.context] for o in decode])
    yd = np.array([o.tpot_us for o in decode])
    bd = huber_fit(xd, yd)
    sd = bootstrap_stderr(xd, yd, seed=seed)
    overhead, per_seq, per_kv = (float(v) for v in bd)
    xp = np.array([[1.0, o.prompt_tokens, o.prompt_tokens**2 / 2.0] for o in prefill])
    yp = np.array([o.ttft_us for o in prefill])
    bp = huber_fit(xp, yp)
    sp = bootstrap_stderr(xp, yp, seed=seed + 1)
    intercept, per_token, attn = (float(v) for v in bp)
    frontend = max(0.0, intercept - overhead - per_seq)
    per_inflight = 0.0
    if loaded_ttft and fit_inflight:
        alone = np.array([intercept + per_token * o.prompt_tokens + attn * o.prompt_tokens**2 / 2 for o in loaded_ttft])
        wait = np.array([0.5 * (overhead + per_seq * o.in_flight) for o in loaded_ttft])
        excess = np.array([o.ttft_us for o in loaded_ttft]) - alone - wait
        n = np.array([o.in_flight for o in loaded_ttft])
        mask = n > 0
        if mask.sum() >= 3:
            per_inflight = float(huber_fit(n[mask][:, None], excess[mask])[0])
    res_d = yd - xd @ bd
    res_p = yp - xp @ bp
    durations = [o.duration_us for o in decode if o.duration_us > 0]
    window_ms = min(5000.0, max(50.0, float(np.median(durations)) / 1e3)) if durations else 300.0
    speed = speed_from_ratios(list(yd / np.maximum(xd @ bd, 1e-9)), window_ms)
    coeffs = TwinCoefficients(overhead, per_seq, per_kv, per_token, attn, frontend, per_inflight)
    stderr = TwinCoefficients(float(sd[0]), float(sd[1]), float(sd[2]), float(sp[1]), float(sp[2]), float(sp[0]), 0.0)
    return TwinModel(
        coefficients=coeffs,
        stderr=stderr,
        facts=facts,
        residuals={
            "decode_mad_us": float(np.median(np.abs(res_d))),
            "decode_rel_mad": float(np.median(np.abs(res_d) / np.maximum(yd, 1e-9))),
            "prefill_mad_us": float(np.median(np.abs(res_p))),
            "prefill_rel_mad": float(np.median(np.abs(res_p) / np.maximum(yp, 1e-9))),
        },
        fitted_on={
            "prefill_observations": len(prefill),
            "decode_observations": len(decode),
            "loaded_ttft_observations": len(loaded_ttft),
            "prompt_tokens_range": [min(o.prompt_tokens for o in prefill), max(o.prompt_tokens for o in prefill)],
            "concurrency_range": [min(o.concurrency for o in decode), max(o.concurrency for o in decode)],
            "context_range": [min(o.context for o in decode), max(o.context for o in decode)],
        },
        speed=speed,
    )
