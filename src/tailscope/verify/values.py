"""Metric values of a run for the gate: raw samples for latencies, per-request contributions for rates.

Definitions match :func:`tailscope.metrics.summary.summarize` (warmup excluded, latencies over successful requests,
rates over the window from the first scheduled request to the last completion), so a gate value equals the number in the
run's summary. Rates are written as ``sum(per-request values) × scale`` so the bootstrap can resample requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailscope.metrics import request as rq
from tailscope.metrics.gpu import summarize_gpu
from tailscope.metrics.percentiles import percentile_fraction
from tailscope.metrics.slo import Slo, meets_slos
from tailscope.records import RequestRecord, ServerSample, Status
from tailscope.verify.contract import LATENCY_METRICS, SloCheck


def measured(records: Sequence[RequestRecord], request_class: str | None = None) -> list[RequestRecord]:
    """Non-warmup records, optionally of one class."""
    return [r for r in records if not r.warmup and (request_class is None or r.request_class == request_class)]


def latency_samples(records: Sequence[RequestRecord], metric: str) -> np.ndarray:
    """Samples (ms) of ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` (one per successful request) or ``itl_ms`` (per token)."""
    ok = [r for r in records if r.status is Status.OK]
    if metric == "itl_ms":
        out: list[float] = []
        for r in ok:
            out.extend(rq.itl_samples_ms(r))
        return np.asarray(out, dtype=np.float64)
    fn = {"ttft_ms": rq.ttft_ms, "tpot_ms": rq.tpot_ms, "e2e_ms": rq.e2e_ms}.get(metric)
    if fn is None:
        raise KeyError(metric)
    vals = [fn(r) for r in ok]
    return np.asarray([v for v in vals if v is not None], dtype=np.float64)


def latency_groups(records: Sequence[RequestRecord], metric: str) -> np.ndarray | None:
    """For ``itl_ms``, the index of the request each sample of :func:`latency_samples` came from (else ``None``):
    gaps of one stream are correlated, so the bootstrap treats requests as clusters."""
    if metric != "itl_ms":
        return None
    out: list[int] = []
    for i, r in enumerate(x for x in records if x.status is Status.OK):
        out.extend([i] * len(rq.itl_samples_ms(r)))
    return np.asarray(out, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class RateData:
    """A run-level rate as ``values.sum() * scale`` (``values``: one contribution per measured request).

    ``poisson`` says how the bootstrap treats the number of requests: fixed for ``error_rate`` (a fraction of the
    requests sent), random for per-second rates (how many requests complete in the window is itself uncertain — the
    Poisson bootstrap).
    """

    values: np.ndarray
    scale: float
    poisson: bool = False

    @property
    def value(self) -> float:
        return float(self.values.sum() * self.scale)


def window_s(records: Sequence[RequestRecord]) -> float:
    """Measurement window (s): first scheduled → last end, as in the run summary."""
    if not records:
        return 0.0
    ends = [r.end_ns for r in records if r.end_ns is not None]
    if not ends:
        return 0.0
    return max(0.0, (max(ends) - min(r.scheduled_ns for r in records)) / 1e9)


def goodput_slos(checks: Sequence[SloCheck], request_class: str) -> list[Slo]:
    """The per-request latency limits (``max`` of latency SLOs) that apply to a request of ``request_class``."""
    out: list[Slo] = []
    for c in checks:
        if c.metric in LATENCY_METRICS and c.max is not None and c.request_class in (None, request_class):
            out.append(Slo(metric=c.metric.removesuffix("_ms"), percentile=c.percentile or "p99", threshold_ms=c.max))
    return out


def rate_data(records: Sequence[RequestRecord], metric: str, checks: Sequence[SloCheck] = ()) -> RateData:
    """Contributions and scale of a rate metric over (already filtered, non-warmup) records.

    ``goodput_rps`` counts successful requests that meet every latency ``max`` in ``checks``
    that applies to their class.
    """
    n = len(records)
    if metric == "error_rate":
        vals = np.asarray([1.0 if r.status is Status.ERROR else 0.0 for r in records])
        return RateData(vals, 1.0 / n if n else 0.0)
    window = window_s(records)
    scale = 1.0 / window if window > 0 else 0.0
    if metric == "requests_per_s":
        vals = np.asarray([1.0 if r.ok else 0.0 for r in records])
    elif metric == "output_tokens_per_s":
        vals = np.asarray([float(rq.output_token_count(r)) if r.ok else 0.0 for r in records])
    elif metric == "total_tokens_per_s":
        vals = np.asarray([float(rq.output_token_count(r) + (r.input_tokens or 0)) if r.ok else 0.0 for r in records])
    elif metric == "goodput_rps":
        cache: dict[str, list[Slo]] = {}
        flags = []
        for r in records:
            slos = cache.setdefault(r.request_class, goodput_slos(checks, r.request_class))
            flags.append(1.0 if meets_slos(r, slos) else 0.0)
        vals = np.asarray(flags)
    else:
        raise KeyError(metric)
    return RateData(vals.astype(np.float64), scale, poisson=True)


def stat_of(samples: np.ndarray, percentile: str) -> float | None:
    """Point statistic of raw samples: ``mean``, ``max`` or a percentile (linear interpolation)."""
    if samples.size == 0:
        return None
    if percentile == "mean":
        return float(samples.mean())
    if percentile == "max":
        return float(samples.max())
    return float(np.quantile(samples, percentile_fraction(percentile)))


def value_from_records(
    records: Sequence[RequestRecord],
    metric: str,
    percentile: str | None,
    *,
    request_class: str | None = None,
    checks: Sequence[SloCheck] = (),
) -> tuple[float | None, int]:
    """Observed value of a metric over a run's records, and the number of samples behind it."""
    recs = measured(records, request_class)
    if metric in LATENCY_METRICS:
        s = latency_samples(recs, metric)
        return stat_of(s, percentile or "p99"), int(s.size)
    if not recs:
        return None, 0
    return rate_data(recs, metric, checks).value, len(recs)


def value_from_summary(
    summary: Mapping[str, Any], metric: str, percentile: str | None, *, request_class: str | None = None
) -> float | None:
    """Observed value read from a JSON run summary (``RunSummary.to_dict()``); ``None`` when it is not there.

    ``goodput_rps`` from a summary is the bench's own goodput (computed with the bench's ``--slo``), not the contract's.
    """
    s: Any = summary
    if request_class is not None:
        s = (summary.get("classes") or {}).get(request_class)
        if s is None:
            return None
    if metric in LATENCY_METRICS:
        stats = s.get(metric) or {}
        value = stats.get(percentile or "p99")
        return None if value is None else float(value)
    if metric == "error_rate":
        req = s.get("requests") or {}
        total = req.get("total") or 0
        return float(req.get("failed", 0)) / total if total else None
    value = s.get(metric)
    return None if value is None else float(value)


def resource_value(
    metric: str,
    samples: Sequence[ServerSample],
    summary: Mapping[str, Any] | None,
    records: Sequence[RequestRecord] = (),
) -> tuple[float | None, int]:
    """A resource metric (:data:`~tailscope.verify.contract.RESOURCE_METRICS`) of a run, and the scrapes behind it:
    from the run's scraped samples, else from its stored ``summary.gpu`` / ``summary.server``."""
    if metric == "kv_usage_max":
        from tailscope.metrics.server import GAUGES

        for name in GAUGES["kv_usage"]:
            vals = [s.value for s in samples if s.name == name]
            if vals:
                return max(vals), len({s.t_ns for s in samples if s.name == name})
        kv = ((summary or {}).get("server") or {}).get("kv_usage") or {}
        return (float(kv["max"]), int(kv.get("samples", 0))) if "max" in kv else (None, 0)
    tokens = sum(rq.output_token_count(r) for r in records if r.ok)
    gpu = summarize_gpu(samples, output_tokens=tokens or None) if samples else {}
    if not gpu:
        gpu = dict((summary or {}).get("gpu") or {})
    n = int((gpu.get("util_pct") or {}).get("samples", 0)) if isinstance(gpu.get("util_pct"), Mapping) else 0
    if metric == "gpu_memory_used_max":
        v = (gpu.get("memory_used_mib") or {}).get("max")
    elif metric == "gpu_memory_used_frac_max":
        v = (gpu.get("memory_used_frac") or {}).get("max")
    elif metric == "gpu_util_mean":
        v = (gpu.get("util_pct") or {}).get("mean")
    elif metric == "energy_per_output_token_j":
        v = gpu.get("energy_per_output_token_j")
    else:
        raise KeyError(metric)
    return (None if v is None else float(v)), n
