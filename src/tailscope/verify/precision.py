"""How precisely repeated runs know a percentile, and when to stop repeating.

``bench --repeat N`` runs the same workload N times; ``--until-precise ttft_ms.p99=5%`` keeps repeating until the
95 % bootstrap interval of that percentile, over the pooled samples of every run so far, is within ±5 % of its
estimate. Each run is a separate, complete run (fresh prompt text, its own record in the store); pooling their
samples is what makes a tail percentile trustworthy when one run is too short for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailscope.errors import ConfigError
from tailscope.metrics.percentiles import canonical_percentile
from tailscope.records import RequestRecord
from tailscope.verify.bootstrap import percentile_replicates
from tailscope.verify.contract import LATENCY_METRICS
from tailscope.verify.values import latency_samples, stat_of

_TARGET = re.compile(r"^\s*([a-z0-9_]+)\.(p[0-9.]+|mean|median)\s*=\s*([0-9.]+)\s*%\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PrecisionTarget:
    """``metric.stat=X%``: the 95 % interval of ``stat`` of ``metric`` within ±X % of the estimate."""

    metric: str  # ttft_ms | tpot_ms | itl_ms | e2e_ms
    stat: str  # p50 … p999, mean
    rel_half_width: float  # 0.05 for 5 %

    def __str__(self) -> str:
        return f"{self.metric}.{self.stat}={self.rel_half_width * 100:.6g}%"


def parse_precision(text: str) -> PrecisionTarget:
    """Parse ``ttft_ms.p99=5%``.

    Raises:
        ConfigError: naming the text and the accepted form.
    """
    m = _TARGET.match(text)
    metrics = ", ".join(LATENCY_METRICS)
    if not m:
        raise ConfigError(f"--until-precise {text!r}: expected METRIC.PERCENTILE=X% (METRIC one of {metrics}), "
                          "e.g. ttft_ms.p99=5%")  # fmt: skip
    metric, pct = m.group(1).lower(), float(m.group(3))
    if metric not in LATENCY_METRICS:
        raise ConfigError(f"--until-precise {text!r}: metric {metric!r} is not one of {metrics}")
    try:
        stat = canonical_percentile(m.group(2))
    except ValueError as exc:
        raise ConfigError(f"--until-precise {text!r}: {exc}") from None
    if not 0 < pct < 100:
        raise ConfigError(f"--until-precise {text!r}: the precision must be between 0 and 100 %")
    return PrecisionTarget(metric, stat, pct / 100.0)


@dataclass(frozen=True, slots=True)
class Precision:
    """A percentile over pooled samples with its 95 % bootstrap interval; ``met`` against a target when given."""

    target: PrecisionTarget
    samples: int
    estimate: float | None
    low: float | None
    high: float | None

    @property
    def rel_half_width(self) -> float | None:
        """Half the interval's width relative to the estimate (None when undefined)."""
        if self.estimate is None or self.low is None or self.high is None or self.estimate == 0:
            return None
        return (self.high - self.low) / 2 / abs(self.estimate)

    @property
    def met(self) -> bool:
        rel = self.rel_half_width
        return rel is not None and rel <= self.target.rel_half_width

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": str(self.target),
            "samples": self.samples,
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "rel_half_width": self.rel_half_width,
            "met": self.met,
        }


def precision_of(
    records: Sequence[RequestRecord], target: PrecisionTarget, *, resamples: int = 1000, seed: int = 0
) -> Precision:
    """The target percentile over ``records`` (pooled across runs) and its 95 % bootstrap interval."""
    samples = latency_samples(records, target.metric)
    if samples.size < 2:
        return Precision(target, int(samples.size), stat_of(samples, target.stat), None, None)
    reps = percentile_replicates(samples, target.stat, resamples, np.random.default_rng(seed))
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return Precision(target, int(samples.size), stat_of(samples, target.stat), float(lo), float(hi))


#: the figures compared across repeated runs
REPEAT_FIGURES: tuple[tuple[str, str], ...] = tuple(
    (m, p) for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms") for p in ("p50", "p90", "p99")
)


def across_runs(summaries: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per figure (``ttft_ms.p99`` …, and throughput), the median, min and max over repeated runs' summaries."""
    out: dict[str, dict[str, float | None]] = {}
    keys = [f"{m}.{p}" for m, p in REPEAT_FIGURES] + ["output_tokens_per_s", "requests_per_s"]
    for key in keys:
        metric, _, stat = key.partition(".")
        values = [
            float(v)
            for s in summaries
            if (v := ((s.get(metric) or {}).get(stat) if stat else s.get(metric))) is not None
        ]
        out[key] = {
            "median": float(np.median(values)) if values else None,
            "min": min(values) if values else None,
            "max": max(values) if values else None,
        }
    return out
