"""Service-level objectives: ``ttft_p99=1.5s``, ``tpot_p99=60ms``, ``e2e_p95=15s``.

An SLO is checked two ways:

* per run: the metric's percentile over the run must be ≤ the threshold (reported as pass/fail);
* per request, for goodput: a successful request counts as *good* when its own TTFT, TPOT and E2E are each ≤ the
  threshold of every SLO on that metric (for ITL, the request's longest per-token gap must be ≤ the threshold).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailscope.errors import ConfigError
from tailscope.metrics import request as rq
from tailscope.metrics.percentiles import canonical_percentile, percentile_fraction, quantile
from tailscope.records import RequestRecord
from tailscope.units import parse_duration_s

if TYPE_CHECKING:
    import numpy as np

SLO_METRICS = ("ttft", "tpot", "itl", "e2e")
_SLO = re.compile(r"^\s*(ttft|tpot|itl|e2e)(?:_ms)?_(p[0-9.]+|mean|median|max)\s*=\s*(.+?)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Slo:
    """One latency objective: ``metric``'s ``percentile`` must be ≤ ``threshold_ms``."""

    metric: str  # ttft | tpot | itl | e2e
    percentile: str  # p50 | p90 | p95 | p99 | p999 | mean | max
    threshold_ms: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.percentile}"

    def __str__(self) -> str:
        return f"{self.key}≤{self.threshold_ms:g}ms"


def parse_slo(text: str) -> Slo:
    """Parse ``ttft_p99=1.5s`` (units: ns, us, ms, s, m; a bare number is milliseconds).

    Raises:
        ConfigError: naming the text and the accepted form.
    """
    m = _SLO.match(text)
    if not m:
        raise ConfigError(
            f"--slo {text!r}: expected METRIC_PERCENTILE=DURATION with METRIC one of ttft, tpot, itl, e2e "
            "and PERCENTILE like p50, p95, p99, p99.9, mean (e.g. ttft_p99=1.5s, tpot_p99=60ms)"
        )
    metric = m.group(1).lower()
    try:
        pct = canonical_percentile(m.group(2))
    except ValueError as exc:
        raise ConfigError(f"--slo {text!r}: {exc}") from None
    seconds = parse_duration_s(m.group(3), what=f"--slo {text!r}", default_unit="ms")
    if seconds <= 0:
        raise ConfigError(f"--slo {text!r}: the threshold must be > 0")
    return Slo(metric=metric, percentile=pct, threshold_ms=seconds * 1000.0)


@dataclass(frozen=True, slots=True)
class SloResult:
    """An SLO checked over the run: the observed percentile and the verdict.

    Failed requests count as slower than any limit (+∞), so failures can never make an SLO pass: with failures the
    observed percentile is taken over successes plus ``failed`` values of +∞ (``observed_ms`` is then ∞ when the
    percentile lands on a failure, written as null in JSON).
    """

    slo: Slo
    observed_ms: float | None
    passed: bool
    failed: int = 0  # failed requests counted as +∞

    def to_dict(self) -> dict[str, Any]:
        return {
            "slo": self.slo.key,
            "threshold_ms": self.slo.threshold_ms,
            "observed_ms": self.observed_ms,
            "passed": self.passed,
            "failed_counted": self.failed,
        }


def request_value_ms(r: RequestRecord, metric: str) -> float | None:
    """One request's own value (ms) of an SLO metric; for ``itl`` its longest gap (0 with a single chunk)."""
    if metric == "ttft":
        return rq.ttft_ms(r)
    if metric == "tpot":
        return rq.tpot_ms(r)
    if metric == "e2e":
        return rq.e2e_ms(r)
    if metric == "itl":
        return rq.max_stall_ms(r) if len(r.chunk_times_ns) > 1 else 0.0
    raise KeyError(metric)


def meets_slos(r: RequestRecord, slos: Sequence[Slo]) -> bool:
    """Whether a successful request meets every SLO on its own values (the goodput test)."""
    if not r.ok:
        return False
    for s in slos:
        v = request_value_ms(r, s.metric)
        if v is not None and v > s.threshold_ms:
            return False
    return True


def check_slo(slo: Slo, s: dict[str, np.ndarray], n_failed: int = 0) -> SloResult:
    """``slo`` checked over a run's samples (``s[metric]``, ms), with ``n_failed`` failures counted as +∞."""
    import numpy as np  # here, not at import: a bench's first request does not wait for numpy

    samples = s[slo.metric]
    observed: float | None
    if n_failed:
        # failures are slower than any limit: +∞ in the sample ('higher' rule: interpolating toward ∞ gives ∞)
        with_failures = np.concatenate([samples, np.full(n_failed, np.inf)])
        if slo.percentile == "mean":
            observed = math.inf
        else:
            observed = float(np.quantile(with_failures, percentile_fraction(slo.percentile), method="higher"))
    elif slo.percentile == "mean":
        observed = float(samples.mean()) if samples.size else None
    else:
        observed = quantile(samples, percentile_fraction(slo.percentile))
    passed = observed is not None and observed <= slo.threshold_ms
    return SloResult(slo=slo, observed_ms=observed, passed=passed, failed=n_failed)


def error_adjusted_p99(ok_values: np.ndarray, n_failed: int) -> float | None:
    """p99 with every failed request counted as +∞ (so failures cannot make the tail look better)."""
    import numpy as np  # here, not at import: a bench's first request does not wait for numpy

    if ok_values.size + n_failed == 0:
        return None
    arr = np.concatenate([ok_values, np.full(n_failed, np.inf)])
    # linear interpolation toward +inf would give inf for any neighbour; use the 'higher' rule here
    return float(np.quantile(arr, 0.99, method="higher"))
