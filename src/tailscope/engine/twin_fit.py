"""Fitting the digital twin (pure): robust regressions of the probe's observations into
:class:`~tailscope.engine.twin.TwinModel` coefficients with bootstrap standard errors (:func:`fit_twin`), and the
busy front end's excess TTFT (:func:`busy_frontend_excess`). ``engine/twin_observe.py`` turns records into the
observations; ``runner/twin_from_runs.py`` runs the fit on stored or probed runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailscope.engine.twin import (
    ServerFacts,
    TwinCoefficients,
    TwinModel,
    speed_from_ratios,
)
from tailscope.engine.twin_prior import DECODE_TERMS, PREFILL_TERMS, TwinPrior
from tailscope.errors import ConfigError

__all__ = [
    "DecodeObservation",
    "LoadedTtftObservation",
    "PrefillObservation",
    "bootstrap_stderr",
    "busy_frontend_excess",
    "fit_twin",
    "huber_fit",
    "updated_by_probe",
]


def huber_fit(
    x: np.ndarray,
    y: np.ndarray,
    *,
    delta: float = 1.345,
    iters: int = 50,
    prior: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Robust linear regression (Huber loss by iteratively reweighted least squares), coefficients ≥ 0.

    ``x`` is the design matrix (n × k), ``y`` the targets. The scale is the MAD of the residuals. With ``prior`` =
    (mean, sd) per coefficient (sd = inf: none), the fit is the maximum a posteriori one: each coefficient with a
    prior adds the pseudo-observation ``(β − mean) / sd`` to the residuals measured in units of the data's scale.
    """
    k = x.shape[1]
    rows, targets = np.empty((0, k)), np.empty(0)
    scale = 1.0  # without a prior the data rows need no common scale
    if prior is not None:
        mean, sd = prior
        has = np.isfinite(sd) & (sd > 0)
        rows = np.diag(1.0 / np.where(has, sd, 1.0))[has]
        targets = (mean / np.where(has, sd, 1.0))[has]
        start, *_ = np.linalg.lstsq(x, y, rcond=None)
        scale = _scale(y - x @ np.maximum(start, 0.0))  # the data's scale, so that a prior row weighs as it should
    w: np.ndarray = np.ones(len(y))
    beta: np.ndarray = np.zeros(k)
    for _ in range(iters):
        sw = np.sqrt(w) / scale
        a, b = x * sw[:, None], y * sw
        if len(rows):
            a, b = np.vstack([a, rows]), np.concatenate([b, targets])
        beta_new, *_ = np.linalg.lstsq(a, b, rcond=None)
        beta_new = np.asarray(np.maximum(beta_new, 0.0), dtype=np.float64)  # costs are never negative
        r = y - x @ beta_new
        robust = _scale(r)
        if prior is not None:
            scale = robust
        u = np.abs(r) / (delta * robust)
        w = np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-12))
        if np.allclose(beta_new, beta, rtol=1e-6, atol=1e-9):
            beta = beta_new
            break
        beta = beta_new
    return beta


def _scale(r: np.ndarray) -> float:
    """The residuals' robust scale (1.4826 × their MAD)."""
    return 1.4826 * float(np.median(np.abs(r - np.median(r)))) or 1e-9


def bootstrap_stderr(
    x: np.ndarray,
    y: np.ndarray,
    *,
    rounds: int = 200,
    seed: int = 0,
    prior: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Standard errors of :func:`huber_fit`'s coefficients by resampling observations (the prior, when given, is
    kept in every resample: the posterior's spread)."""
    rng = np.random.default_rng(seed)
    n = len(y)
    draws = []
    for _ in range(rounds):
        idx = rng.integers(0, n, n)
        draws.append(huber_fit(x[idx], y[idx], iters=20, prior=prior))
    out: np.ndarray = np.asarray(draws).std(axis=0)
    return out


def probe_covariance(x: np.ndarray, y: np.ndarray, beta: np.ndarray, prior_sd: np.ndarray | None = None) -> np.ndarray:
    """The coefficients' covariance: from the observations alone (the inverse Fisher information at the robust
    scale), or with ``prior_sd`` (inf: none) the posterior's (Laplace). Coefficients the design cannot separate
    (collinear columns) get a huge variance along that direction without a prior — where a bootstrap of the
    minimum-norm fit would report a small one — and the prior's share of it with one."""
    norm = np.linalg.norm(x, axis=0)
    norm = np.where(norm > 0, norm, 1.0)
    scale = _scale(y - x @ beta)
    info = (x / norm).T @ (x / norm) / scale**2
    if prior_sd is not None:
        info = info + np.diag(np.where(np.isfinite(prior_sd), 1.0 / prior_sd**2, 0.0) / norm**2)
    lam, vec = np.linalg.eigh(info)
    lam = np.maximum(lam, float(lam.max()) * 1e-12)
    out: np.ndarray = ((vec / lam) @ vec.T) / np.outer(norm, norm)
    return out


#: χ² with k degrees of freedom at 0.9973 (the two-sided 3-sd level of one normal), k = 1…5
_CHI2_3SD = (9.0, 11.83, 14.16, 16.25, 18.21)


def updated_by_probe(
    x: np.ndarray,
    y: np.ndarray,
    prior: tuple[np.ndarray, np.ndarray],
    terms: Sequence[str | None],
    *,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The probe as the prior's update: (coefficients, their posterior standard errors, what happened per term).

    First a conflict check: the probe-only estimates of the terms with a prior against the prior's means, jointly
    (Mahalanobis distance over the probe's covariance, :func:`probe_covariance`, plus the prior's; against χ² at the
    3-sd level). While they conflict, the term furthest from its prior (in its own combined standard deviations) is
    fitted without the prior — the deployment is unlike those the prior was sized on — and the rest are checked
    again. A term the probe cannot separate from another (a decode ladder at one batch size: the step's cost and
    each sequence's) has a huge probe variance along that direction, so it does not conflict and keeps the prior's
    split. Then the maximum a posteriori fit with the priors left, and its standard errors. ``terms`` names each
    column (None: no prior).
    """
    mean, sd0 = prior
    sd = sd0.copy()
    plain = huber_fit(x, y)
    cov = probe_covariance(x, y, plain)
    # heavy tails and uneven noise make the bootstrap's spread wider than the information's: each variance is
    # raised to the bootstrap's where that is larger, the correlations kept
    plain_se = bootstrap_stderr(x, y, seed=seed)
    inflate = np.maximum(1.0, plain_se / np.sqrt(np.maximum(np.diag(cov), 1e-300)))
    cov = cov * np.outer(inflate, inflate)
    live = [i for i, name in enumerate(terms) if name is not None and math.isfinite(sd0[i])]
    report: dict[str, Any] = {"probe_only_us": {terms[i]: float(plain[i]) for i in live}, "used": [], "rejected": {}}
    while live:
        d = plain[live] - mean[live]
        both = cov[np.ix_(live, live)] + np.diag(sd0[live] ** 2)
        dist2 = float(d @ np.linalg.solve(both, d))
        if dist2 <= _CHI2_3SD[min(len(live), len(_CHI2_3SD)) - 1]:
            break
        z = np.abs(d) / np.sqrt(np.diag(both))
        k = int(np.argmax(z))
        i = live.pop(k)
        sd[i] = math.inf
        together = f"; with {len(live)} other term(s), {math.sqrt(dist2):.1f} sd jointly" if live else ""
        report["rejected"][terms[i]] = (
            f"the probe measured {plain[i]:.4g} ± {math.sqrt(max(cov[i, i], 0.0)):.2g} µs, the prior says "
            f"{mean[i]:.4g} ± {sd0[i]:.2g} µs ({z[k]:.1f} sd apart{together}): fitted on the probe alone"
        )
    report["used"] = [terms[i] for i in live]
    if not live:
        return plain, plain_se, report
    beta = huber_fit(x, y, prior=(mean, sd))
    # the bootstrap keeps the prior fixed, so it sees only the probe's sampling spread; the posterior's own spread
    # (Laplace) carries the prior's uncertainty where the probe cannot see — the larger of the two is reported
    posterior = np.sqrt(np.diag(probe_covariance(x, y, beta, sd)))
    return beta, np.maximum(bootstrap_stderr(x, y, seed=seed, prior=(mean, sd)), posterior), report


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
    prior: TwinPrior | None = None,
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
    5. With ``prior`` (the trained step model projected onto these terms,
       :func:`~tailscope.engine.twin_prior.twin_prior`), steps 1 and 2 are the prior's update by the probe
       (:func:`updated_by_probe`): maximum a posteriori
       coefficients and posterior standard errors; ``fitted_on["prior"]`` records the prior, the probe-only
       estimates and the terms whose prior the probe contradicted.

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
    xp = np.array([[1.0, o.prompt_tokens, o.prompt_tokens**2 / 2.0] for o in prefill])
    yp = np.array([o.ttft_us for o in prefill])
    prior_report: dict[str, Any] = {}
    if prior is None:
        bd = huber_fit(xd, yd)
        sd = bootstrap_stderr(xd, yd, seed=seed)
        bp = huber_fit(xp, yp)
        sp = bootstrap_stderr(xp, yp, seed=seed + 1)
    else:
        bd, sd, rd = updated_by_probe(xd, yd, prior.arrays(DECODE_TERMS), DECODE_TERMS, seed=seed)
        mean_p, sd_p = prior.arrays(PREFILL_TERMS)
        bp, sp, rp = updated_by_probe(
            xp, yp, (np.r_[0.0, mean_p], np.r_[math.inf, sd_p]), (None, *PREFILL_TERMS), seed=seed + 1
        )
        prior_report = {**prior.to_dict(), "probe_only_us": {**rd["probe_only_us"], **rp["probe_only_us"]}}
        prior_report["used"] = [*rd["used"], *rp["used"]]
        prior_report["rejected"] = {**rd["rejected"], **rp["rejected"]}
    overhead, per_seq, per_kv = (float(v) for v in bd)
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
            **({"prior": prior_report} if prior_report else {}),
        },
        speed=speed,
    )
