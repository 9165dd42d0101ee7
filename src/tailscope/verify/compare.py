"""Compare runs: per metric and statistic, each run's value against the first run's, with a bootstrap interval.

Works on any runs of the results model (bench, sim, trace, the twin's predictions): only request records are needed.
A difference is marked significant when its confidence interval excludes zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailscope.record_ops import find_record
from tailscope.verify.bootstrap import DiffCI, bootstrap_rate_diff, bootstrap_stat_diff
from tailscope.verify.comparable import comparability
from tailscope.verify.contract import HIGHER_IS_BETTER, LATENCY_METRICS, METRICS, percentile_label
from tailscope.verify.rundata import RunData
from tailscope.verify.values import latency_groups, latency_samples, measured, rate_data, stat_of

DEFAULT_METRICS: tuple[str, ...] = (
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "output_tokens_per_s",
    "requests_per_s",
    "error_rate",
)
DEFAULT_STATS: tuple[str, ...] = ("p50", "p90", "p99")


@dataclass(frozen=True, slots=True)
class CompareRow:
    """One metric (and statistic) across runs; ``diffs[i]`` compares run ``i + 1`` with run 0 (``None``: no data)."""

    metric: str
    stat: str | None
    values: tuple[float | None, ...]
    diffs: tuple[DiffCI | None, ...]

    @property
    def label(self) -> str:
        return self.metric if self.stat is None else f"{self.metric}.{percentile_label(self.stat)}"

    def direction(self, i: int) -> str:
        """``worse``, ``better`` or ``same`` (not significant) for the i-th comparison."""
        d = self.diffs[i]
        if d is None or not d.significant:
            return "same"
        up = d.diff > 0
        return "better" if up == (self.metric in HIGHER_IS_BETTER) else "worse"

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "stat": self.stat,
            "values": list(self.values),
            "diffs": [
                None if d is None else {**d.to_dict(), "direction": self.direction(i)} for i, d in enumerate(self.diffs)
            ],
        }


@dataclass(frozen=True, slots=True)
class ComparisonResult:
    """Runs compared with the first one (the reference).

    Attributes:
        run_ids: the runs, the reference first.
        rows: one per metric (and statistic, for latencies).
        confidence: the level of every interval (0.95).
        resamples: bootstrap resamples per interval.
    """

    run_ids: tuple[str, ...]
    rows: tuple[CompareRow, ...]
    confidence: float
    resamples: int
    warnings: tuple[str, ...] = ()  # the runs did not measure the same thing (verify/comparable.py)
    #: USD per 1M output tokens per run (GPUs × price ÷ output tokens/s), when GPUs and a price are known.
    usd_per_million_output_tokens: tuple[float | None, ...] = ()

    def row(self, label: str) -> CompareRow:
        """The row of ``ttft_ms.p99``, ``requests_per_s``, … (KeyError when it was not compared)."""
        return find_record(self.rows, lambda r: r.label, label)

    def to_dict(self) -> dict[str, Any]:
        """The document ``tailscope compare --json`` prints."""
        return {
            "runs": list(self.run_ids),
            "reference": self.run_ids[0] if self.run_ids else None,
            "confidence": self.confidence,
            "resamples": self.resamples,
            "rows": [r.to_dict() for r in self.rows],
            "warnings": list(self.warnings),
            "usd_per_million_output_tokens": list(self.usd_per_million_output_tokens) or None,
        }


def parse_metrics(text: str | None) -> tuple[str, ...]:
    """``ttft_ms,tpot_ms`` (``_ms`` optional) → metric names; raises ValueError naming an unknown one."""
    if not text:
        return DEFAULT_METRICS
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name = part if part in METRICS else f"{part}_ms"
        if name not in METRICS:
            raise ValueError(f"unknown metric {part!r}; use some of {', '.join(METRICS)}")
        out.append(name)
    return tuple(out)


def compare_runs(
    runs: Sequence[RunData],
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    stats: Sequence[str] = DEFAULT_STATS,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator | None = None,
) -> ComparisonResult:
    """Compare ``runs[1:]`` with ``runs[0]`` on every metric (and, for latencies, every statistic)."""
    gen = rng if rng is not None else np.random.default_rng(0)
    recs = [measured(r.records) for r in runs]
    rows: list[CompareRow] = []
    for metric in metrics:
        if metric in LATENCY_METRICS:
            samples = [latency_samples(rs, metric) for rs in recs]
            groups = [latency_groups(rs, metric) for rs in recs]
            for stat in stats:
                values = tuple(stat_of(s, stat) for s in samples)
                diffs: list[DiffCI | None] = []
                for s, g in zip(samples[1:], groups[1:], strict=True):
                    if samples[0].size < 2 or s.size < 2:
                        diffs.append(None)
                        continue
                    diffs.append(
                        bootstrap_stat_diff(
                            samples[0],
                            s,
                            stat,
                            confidence=confidence,
                            resamples=resamples,
                            rng=gen,
                            baseline_groups=groups[0],
                            candidate_groups=g,
                        )
                    )
                rows.append(CompareRow(metric, stat, values, tuple(diffs)))
        else:
            data = [rate_data(rs, metric) if rs else None for rs in recs]
            values = tuple(None if d is None else d.value for d in data)
            rate_diffs: list[DiffCI | None] = []
            base = data[0]
            for d in data[1:]:
                if base is None or d is None or base.values.size < 2 or d.values.size < 2:
                    rate_diffs.append(None)
                    continue
                rate_diffs.append(
                    bootstrap_rate_diff(
                        base.values,
                        base.scale,
                        d.values,
                        d.scale,
                        confidence=confidence,
                        resamples=resamples,
                        rng=gen,
                        poisson=base.poisson,
                    )
                )
            rows.append(CompareRow(metric, None, values, tuple(rate_diffs)))
    warnings = tuple(w for other in runs[1:] for w in comparability(runs[0], other))
    return ComparisonResult(tuple(r.id for r in runs), tuple(rows), confidence, resamples, warnings)
