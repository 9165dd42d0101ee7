"""Compare runs: per metric and statistic, each run's value against the first run's, with a bootstrap interval.

Works on any runs of the results model (bench, sim, trace, the twin's predictions): only request records are needed.
A difference is marked significant when its confidence interval excludes zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailscope.verify.bootstrap import DiffCI, bootstrap_rate_diff, bootstrap_stat_diff
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
class Comparison:
    run_ids: tuple[str, ...]
    rows: tuple[CompareRow, ...]
    confidence: float
    resamples: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": list(self.run_ids),
            "reference": self.run_ids[0] if self.run_ids else None,
            "confidence": self.confidence,
            "resamples": self.resamples,
            "rows": [r.to_dict() for r in self.rows],
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
) -> Comparison:
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
    return Comparison(tuple(r.id for r in runs), tuple(rows), confidence, resamples)


def _fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "—"
    if metric in LATENCY_METRICS:
        return f"{v:.1f}"
    return f"{v:.4g}"


def _fmt_diff(metric: str, d: DiffCI | None, direction: str) -> str:
    if d is None:
        return "—"
    mark = {"worse": " * worse", "better": " * better", "same": ""}[direction]
    if d.rel is not None and d.rel_low is not None and d.rel_high is not None:
        return f"{d.rel * 100:+.1f}% [{d.rel_low * 100:+.1f}, {d.rel_high * 100:+.1f}]{mark}"
    return f"{d.diff:+.4g} [{d.diff_low:+.4g}, {d.diff_high:+.4g}]{mark}"


def render_compare_text(cmp: Comparison) -> str:
    """One table: metric, each run's value, and each later run's change vs the first with its CI and a mark."""
    short = [rid if len(rid) <= 24 else rid[:23] + "…" for rid in cmp.run_ids]
    header = ["metric", *short] + [f"Δ {s} vs {short[0]}" for s in short[1:]]
    rows = [header]
    for r in cmp.rows:
        cells = [r.label] + [_fmt_value(r.metric, v) for v in r.values]
        cells += [_fmt_diff(r.metric, d, r.direction(i)) for i, d in enumerate(r.diffs)]
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"latencies in ms; Δ = relative change with its {cmp.confidence * 100:g}% bootstrap CI "
        f"({cmp.resamples} resamples); * = significant (CI excludes 0)"
    )
    return "\n".join(lines) + "\n"


def render_compare_markdown(cmp: Comparison) -> str:
    """The comparison table as markdown (e.g. for a pull-request comment)."""
    header = ["metric", *[f"`{r}`" for r in cmp.run_ids]] + [f"Δ `{r}`" for r in cmp.run_ids[1:]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in cmp.rows:
        cells = [f"`{r.label}`"] + [_fmt_value(r.metric, v) for v in r.values]
        for i, d in enumerate(r.diffs):
            text = _fmt_diff(r.metric, d, r.direction(i))
            cells.append(f"**{text}**" if r.direction(i) == "worse" else text)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"Latencies in ms; Δ = relative change vs `{cmp.run_ids[0]}` with its {cmp.confidence * 100:g}% bootstrap "
        "interval; * = significant (the interval excludes 0)."
    )
    return "\n".join(lines) + "\n"
