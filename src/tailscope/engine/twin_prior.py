"""The trained step model as the twin's prior (pure).

A probe measures a server well where it looked and not at all elsewhere: a decode ladder at one batch size cannot
tell the per-step cost from the per-sequence one, and a prompt ladder of short prompts says little about attention
over long ones. The trained step model (:class:`~tailscope.engine.step_model.TrainedStepModel`, fitted on the
corpus) says what such a deployment should cost. :func:`twin_prior` projects its step times onto the twin's own
linear terms (the same names, units and meaning as :class:`~tailscope.engine.twin.TwinCoefficients`), each with a
standard deviation from the model's cross-validated residuals on configurations like this one
(:func:`~tailscope.engine.residuals.residual_group`, which names them). ``fit_twin(..., prior=)`` then treats the
probe as the update: a Gaussian prior on each term (maximum a posteriori by the same robust regression), so a term
the probe pins down is the probe's, one it cannot see is the physics', and every term's standard error is the
posterior's. Terms whose probe-only estimates contradict the prior (jointly, at the 3-sd level: a device or
engine the corpus never saw) are fitted without it, the furthest first, and the twin file says which and why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tailscope.engine.residuals import ResidualGroup
from tailscope.errors import ConfigError

__all__ = ["DECODE_TERMS", "PREFILL_TERMS", "TwinPrior", "parse_prior_ref", "twin_prior"]

#: the decode regression's terms, in its design matrix's order (1, c, c·context)
DECODE_TERMS = ("step_overhead_us", "per_seq_us", "per_kv_token_us")
#: the prefill regression's terms after its intercept (P, P²/2)
PREFILL_TERMS = ("prefill_per_token_us", "prefill_attn_us")
#: 90 % of a normal lies within ±1.645 sd: the residual table's q05…q95 span is 3.29 sd of ln(predicted/measured)
_SPAN_SD = 3.29


class StepTimes(Protocol):
    """What the prior needs of a step model: seconds for one step (``TrainedStepModel.step_s``)."""

    def step_s(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> float: ...


@dataclass(frozen=True, slots=True)
class TwinPrior:
    """A prior on the twin's step terms: mean and standard deviation per term, µs (a term not named has none).

    Attributes:
        mean_us / sd_us: per term of :data:`DECODE_TERMS` and :data:`PREFILL_TERMS`.
        source: what it was computed from (model, GPU, TP, engine, precision) and which residuals sized it.
        projection: how well the twin's linear form follows the step model on the grid (relative RMS, per
            regression) — the part of the prior's spread that is the form's, not the model's.
    """

    mean_us: dict[str, float]
    sd_us: dict[str, float]
    source: str
    projection: dict[str, float] = field(default_factory=dict)

    def arrays(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(mean, sd) over ``terms``; sd = inf where the prior says nothing."""
        mean = np.array([self.mean_us.get(t, 0.0) for t in terms], dtype=np.float64)
        sd = np.array([self.sd_us.get(t, math.inf) for t in terms], dtype=np.float64)
        return mean, sd

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "mean_us": {k: float(v) for k, v in self.mean_us.items()},
            "sd_us": {k: float(v) for k, v in self.sd_us.items()},
            "projection_rel_rms": {k: round(float(v), 4) for k, v in self.projection.items()},
        }


_REF = re.compile(r"^(?P<model>.+)@(?P<gpu>.+?)(?:x(?P<tp>\d+))?$")


def parse_prior_ref(ref: str) -> tuple[str, str, int]:
    """``MODEL@GPU[xTP]`` → (model, GPU, TP): ``llama-3.1-8b@h100x2`` → ("llama-3.1-8b", "h100", 2).

    Raises:
        ConfigError: a reference without ``@`` or with a TP below 1.
    """
    m = _REF.match(ref.strip())
    if m is None or not m["model"] or not m["gpu"]:
        raise ConfigError(
            f"--prior {ref!r}: expected MODEL@GPU or MODEL@GPUxTP (e.g. llama-3.1-8b@h100x2; MODEL may be a "
            "config.json path)"
        )
    tp = int(m["tp"]) if m["tp"] else 1
    if tp < 1:
        raise ConfigError(f"--prior {ref!r}: TP must be ≥ 1")
    return m["model"], m["gpu"], tp


def _grid(max_batched: int, max_len: int | None) -> tuple[list[int], list[int], list[int]]:
    """Concurrencies, decode contexts and prompt lengths the projection is made over: the ranges a probe covers."""
    cap = max_len or 4096
    contexts = [c for c in (64, 256, 512, 1024, 2048) if c < cap] or [max(1, cap // 2)]
    prompts = [p for p in (32, 64, 128, 256, 512, 768, 1024, 1536, 2048) if p <= min(max_batched, cap)] or [
        max(1, min(max_batched, cap) // 2)
    ]
    return [1, 2, 4, 8, 16], contexts, prompts


def _project(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative least squares of ``y`` on ``x`` (few columns: clip and refit the rest), and its relative RMS."""
    keep = np.ones(x.shape[1], dtype=bool)
    beta = np.zeros(x.shape[1])
    for _ in range(x.shape[1]):
        b, *_ = np.linalg.lstsq(x[:, keep], y, rcond=None)
        beta[:] = 0.0
        beta[keep] = b
        if (b >= 0).all():
            break
        keep[np.flatnonzero(keep)[b < 0]] = False
    rel = float(np.sqrt(np.mean(((x @ beta - y) / np.maximum(y, 1e-12)) ** 2)))
    return beta, rel


def twin_prior(
    step: StepTimes,
    *,
    max_num_batched_tokens: int,
    max_model_len: int | None,
    group: ResidualGroup | None,
    source: str,
) -> TwinPrior:
    """Project ``step``'s step times onto the twin's terms, sized by the residuals of ``group``.

    Decode: ``TPOT(c, context) = step_overhead + per_seq · c + per_kv_token · c · context`` fitted to the model's
    decode steps over a grid of batch sizes and contexts; prefill: ``step(P) = a + prefill_per_token · P +
    prefill_attn · P²/2`` over prompt lengths up to the token budget (the intercept ``a`` also holds the front end,
    which the prior leaves to the probe). Each mean is corrected by the group's median ``ln(predicted/measured)``
    (decode terms by TPOT's, prefill terms by TTFT's); its standard deviation is the mean times the group's spread
    (q05…q95 over 3.29) widened by the projection's own relative RMS. Without a group the spread is 1.0 (a factor
    of e either way).
    """
    concurrencies, contexts, prompts = _grid(max_num_batched_tokens, max_model_len)
    xd, yd = [], []
    for c in concurrencies:
        for ctx in contexts:
            xd.append([1.0, c, c * ctx])
            yd.append(step.step_s([], c, c * ctx) * 1e6)
    bd, rel_d = _project(np.array(xd), np.array(yd))
    xp = np.array([[1.0, p, p * p / 2.0] for p in prompts])
    yp = np.array([step.step_s([(p, 0)], 0, 0) * 1e6 for p in prompts])
    bp, rel_p = _project(xp, yp)
    tpot_q = group.tpot if group is not None else (-1.645, 0.0, 1.645)
    ttft_q = group.ttft if group is not None else (-1.645, 0.0, 1.645)
    mean: dict[str, float] = {}
    sd: dict[str, float] = {}
    for terms, beta, q, rel in ((DECODE_TERMS, bd, tpot_q, rel_d), (PREFILL_TERMS, bp[1:], ttft_q, rel_p)):
        spread = math.hypot((q[2] - q[0]) / _SPAN_SD, rel)
        for name, value in zip(terms, beta, strict=True):
            m = float(value) * math.exp(-q[1])  # the model's median bias on such configurations, removed
            mean[name] = m
            sd[name] = max(m * spread, 1e-6)
    where = group.label if group is not None else "no residual group (spread e^±1)"
    return TwinPrior(
        mean_us=mean,
        sd_us=sd,
        source=f"{source}; sized by the step model's cross-validated residuals on {where}",
        projection={"decode": rel_d, "prefill": rel_p},
    )
