"""Service-level objectives: ``ttft_p99=1.5s``, ``tpot_p99=60ms``, ``e2e_p95=15s``.

An SLO is checked two ways:

* per run: the metric's percentile over the run must be ≤ the threshold (reported as pass/fail);
* per request, for goodput: a successful request counts as *good* when its own TTFT, TPOT and E2E are each ≤ the
  threshold of every SLO on that metric (for ITL, the request's longest per-token gap must be ≤ the threshold).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tailscope.errors import ConfigError
from tailscope.metrics.percentiles import normalize_percentile_name, percentile_fraction
from tailscope.units import parse_duration_s

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
    pct = normalize_percentile_name(m.group(2))
    try:
        if pct != "mean":
            percentile_fraction(pct)
    except ValueError as exc:
        raise ConfigError(f"--slo {text!r}: {exc}") from None
    if pct == "p99.9":
        pct = "p999"
    seconds = parse_duration_s(m.group(3), what=f"--slo {text!r}", default_unit="ms")
    if seconds <= 0:
        raise ConfigError(f"--slo {text!r}: the threshold must be > 0")
    return Slo(metric=metric, percentile=pct, threshold_ms=seconds * 1000.0)
