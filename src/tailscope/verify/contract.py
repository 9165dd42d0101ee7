"""Performance contracts: the SLOs of a service and of its dependencies, and the regression rules of its CI gate.

A contract is a YAML file::

    name: chat-service
    slo:
      - {metric: ttft_ms, percentile: p99, max: 1500}
      - {metric: e2e_ms, percentile: p99, max: 20000, class: long_context}
      - {metric: error_rate, max: 0.01}
      - {metric: goodput_rps, min: 5}
      - {metric: gpu_memory_used_max, max: 8GiB}   # from the run's GPU telemetry (bench --telemetry-url)
    layers:
      - {layer: retrieval, percentile: p99.9, max_ms: 200}
    regression:
      baseline: latest:main
      max_increase: {ttft_ms.p99: 10%, output_tokens_per_s: -5%}
      confidence: 0.95

The file (or a dict of the same shape) is read and validated at the IO edge, :mod:`tailscope.io.contracts` (pydantic,
errors naming ``file:line: field``); the gate works on the frozen dataclasses below. The meaning of a regression key
(``ttft_ms.p99``) and of a limit (``10%``) is defined here, where the checks use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# canonical_percentile lives with the other percentile names; imported from here too (api.verify, io.contracts)
from tailscope.metrics.percentiles import canonical_percentile as canonical_percentile

#: Latency metrics (milliseconds); each needs a percentile.
LATENCY_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
#: Run-level rates; no percentile.
RATE_METRICS: tuple[str, ...] = (
    "error_rate",
    "goodput_rps",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "requests_per_s",
)
#: Metrics where a larger value is better (a regression is a decrease).
HIGHER_IS_BETTER: frozenset[str] = frozenset(
    {"goodput_rps", "output_tokens_per_s", "total_tokens_per_s", "requests_per_s"}
)
METRICS: tuple[str, ...] = LATENCY_METRICS + RATE_METRICS
#: Resource limits read from the run's scraped metrics (GPU telemetry, the engine's KV gauge); no percentile, no
#: regression checks. Units: MiB (``gpu_memory_used_max``; a contract may write ``8GiB``, ``8GB``, ``512MiB``),
#: fractions 0–1 (``gpu_memory_used_frac_max``, ``kv_usage_max``), percent (``gpu_util_mean``), joules
#: (``energy_per_output_token_j``).
RESOURCE_METRICS: tuple[str, ...] = (
    "gpu_memory_used_max",
    "gpu_memory_used_frac_max",
    "gpu_util_mean",
    "kv_usage_max",
    "energy_per_output_token_j",
)
RESOURCE_UNITS: dict[str, str] = {
    "gpu_memory_used_max": "MiB",
    "gpu_memory_used_frac_max": "fraction",
    "gpu_util_mean": "%",
    "kv_usage_max": "fraction",
    "energy_per_output_token_j": "J",
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(B|KB|KiB|MB|MiB|GB|GiB|TB|TiB)?\s*$", re.IGNORECASE)
_SIZE_BYTES = {
    "b": 1.0, "kb": 1e3, "kib": 1024.0, "mb": 1e6, "mib": 1024.0**2, "gb": 1e9, "gib": 1024.0**3, "tb": 1e12,
    "tib": 1024.0**4,
}  # fmt: skip


def parse_size_mib(value: str | float) -> float:
    """A memory size as MiB: a number is MiB already; ``8GiB`` → 8192, ``8GB`` → 7629.4 (GB = 10⁹ bytes).

    Raises:
        ValueError: naming the value and the accepted forms.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"expected a size like 8GiB, 8GB, 512MiB or a number of MiB (got {value!r})")
    unit = (m.group(2) or "MiB").lower()
    return float(m.group(1)) * _SIZE_BYTES[unit] / 1024.0**2


def percentile_label(name: str) -> str:
    """Display form: ``p999`` → ``p99.9``."""
    return "p99.9" if name == "p999" else name


@dataclass(frozen=True, slots=True)
class SloCheck:
    """One objective: ``metric`` (at ``percentile`` for latencies) must be ≤ ``max`` and/or ≥ ``min``.

    Latencies are in ms; ``error_rate`` is a fraction (0.01 = 1 %); the other rates are per second.
    ``request_class`` restricts the check to one request class (``None`` = all requests). ``alert_for`` and
    ``severity`` (the file's ``for:`` and ``severity:``) shape the alert ``tailscope alerts`` makes of it.
    """

    metric: str
    percentile: str | None = None
    max: float | None = None
    min: float | None = None
    request_class: str | None = None
    line: int = 0
    alert_for: str | None = None
    severity: str | None = None

    @property
    def name(self) -> str:
        """Stable check name, e.g. ``ttft_ms.p99`` or ``e2e_ms.p99[long_context]``."""
        base = self.metric if self.percentile is None else f"{self.metric}.{percentile_label(self.percentile)}"
        return base if self.request_class is None else f"{base}[{self.request_class}]"


@dataclass(frozen=True, slots=True)
class LayerCheck:
    """A dependency contract on a trace set: the ``layer``'s span duration at ``percentile`` must be ≤ ``max_ms``."""

    layer: str
    percentile: str
    max_ms: float
    line: int = 0
    alert_for: str | None = None
    severity: str | None = None

    @property
    def name(self) -> str:
        return f"layer {self.layer}.{percentile_label(self.percentile)}"


@dataclass(frozen=True, slots=True)
class RegressionLimit:
    """How much worse ``metric`` (at ``percentile``) may get against the baseline.

    ``relative`` limits are fractions (0.10 = +10 %); absolute ones are in the metric's unit. ``error_rate`` limits
    are always absolute: ``1%`` there means one percentage point (0.01), because the relative change of a rate that
    is usually 0 is undefined. For higher-is-better metrics the limit is the largest allowed *decrease* (``-5%`` and
    ``5%`` both mean "may drop by at most 5 %").
    """

    metric: str
    percentile: str | None
    limit: float
    relative: bool
    line: int = 0

    @property
    def key(self) -> str:
        return self.metric if self.percentile is None else f"{self.metric}.{percentile_label(self.percentile)}"

    @property
    def higher_is_better(self) -> bool:
        return self.metric in HIGHER_IS_BETTER

    def describe(self) -> str:
        sign = "-" if self.higher_is_better else "+"
        if self.relative:
            return f"{sign}{abs(self.limit) * 100:g}%"
        return f"{sign}{abs(self.limit):g}"


@dataclass(frozen=True, slots=True)
class Regression:
    """Regression rules: baseline reference, per-metric limits, confidence, bootstrap settings."""

    baseline: str | None
    limits: tuple[RegressionLimit, ...]
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Contract:
    """A validated performance contract."""

    name: str
    slos: tuple[SloCheck, ...] = ()
    layers: tuple[LayerCheck, ...] = ()
    regression: Regression | None = None
    description: str = ""
    source: str = "<contract>"


# -- the semantics of regression keys and limits ---------------------------------------------------------------------

_LIMIT = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+)\s*(%?)\s*$")


def parse_limit_key(key: str) -> tuple[str, str | None]:
    """A regression key (``ttft_ms.p99``, ``error_rate``) as (metric, canonical percentile or None).

    Raises:
        ValueError: naming the key and what is allowed.
    """
    metric, _, pct = key.partition(".")
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r} in {key!r}; use one of {', '.join(METRICS)}")
    if metric in LATENCY_METRICS:
        if not pct:
            raise ValueError(f"{key!r}: latency metrics need a percentile, e.g. {metric}.p99")
        try:
            return metric, canonical_percentile(pct)
        except ValueError:
            raise ValueError(f"{key!r}: unknown percentile {pct!r}; use p50, p90, p95, p99, p99.9, mean") from None
    if pct:
        raise ValueError(f"{key!r}: {metric} is a rate over the run; write just {metric!r}")
    return metric, None


def parse_limit(key: str, limit: str | float) -> tuple[float, bool]:
    """A regression limit (``10%``, ``-5%``, ``50``) as (value, relative); ``10%`` → (0.10, True).

    Raises:
        ValueError: naming the key when the limit is not a number or a percentage.
    """
    if isinstance(limit, bool):
        raise ValueError(f"{key}: expected a limit like 10% or 50 (got {limit!r})")
    if isinstance(limit, int | float):
        return float(limit), False
    m = _LIMIT.match(limit)
    if not m:
        raise ValueError(f"{key}: expected a limit like 10%, -5% or an absolute number (got {limit!r})")
    value = float(m.group(1))
    return (value / 100.0, True) if m.group(2) else (value, False)
