"""Runs over time: the three numbers on the board (TTFT and TPOT percentiles, daily tokens) and their change points.

The weekly review of the method (../shared/method/001 §5.3, 003 §5.2): keep TTFT and TPOT percentiles and the day's
token total on the board, mark every step. A change point is found by binary segmentation of a per-run series
(:func:`change_points`): at the split that best fits two levels (the least sum of absolute deviations from the
medians of the runs before and after it), the step between the two medians is kept when it exceeds ``z`` times its
noise — the runs' robust spread σ from successive differences (1.4826 × median |xᵢ − xᵢ₋₁| ÷ √2, which a level
shift barely moves), scaled to the standard error of a difference of two medians (1.2533 × σ × √(1/n₁ + 1/n₂)) — and
is at least ``min_rel`` of the level before; both sides are then searched again. Medians make one odd run neither a
step nor a mask for one. docs/metrics.md documents it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

#: the per-run series watched: (label, summary key, statistic).
SERIES: tuple[tuple[str, str, str], ...] = (
    ("ttft_ms.p50", "ttft_ms", "p50"),
    ("ttft_ms.p99", "ttft_ms", "p99"),
    ("tpot_ms.p50", "tpot_ms", "p50"),
    ("tpot_ms.p99", "tpot_ms", "p99"),
)
#: defaults of :func:`change_points`.
MIN_SEGMENT = 2
Z_THRESHOLD = 4.0
MIN_RELATIVE_STEP = 0.05


@dataclass(frozen=True, slots=True)
class TrendPoint:
    """One run on the trend: its start, tags and the watched figures (``None`` where the run has none)."""

    run_id: str
    started_at: str
    kind: str
    tags: tuple[str, ...]
    values: Mapping[str, float | None]  # SERIES label → value
    input_tokens: float | None
    output_tokens: float | None
    changes: tuple[str, ...] = ()  # series with a change point at this run

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "kind": self.kind,
            "tags": list(self.tags),
            **dict(self.values),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "changes": list(self.changes),
        }


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """A step in a series: the first run at the new level, the medians before and after, and the step's z-score."""

    series: str
    index: int
    run_id: str
    started_at: str
    before: float
    after: float
    z: float

    @property
    def relative(self) -> float:
        return (self.after - self.before) / self.before if self.before else math.inf

    def describe(self) -> str:
        return (
            f"{self.series}: {self.before:,.1f} → {self.after:,.1f} ({self.relative:+.0%}) from run {self.run_id} "
            f"({self.started_at[:16].replace('T', ' ')}; z = {self.z:.1f})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "index": self.index,
            "run_id": self.run_id,
            "started_at": self.started_at,
            "before": self.before,
            "after": self.after,
            "relative": self.relative,
            "z": self.z,
        }


@dataclass(frozen=True, slots=True)
class DailyTokens:
    """Tokens of the runs started on one UTC day."""

    day: str
    runs: int
    input_tokens: float
    output_tokens: float

    @property
    def total_tokens(self) -> float:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "day": self.day,
            "runs": self.runs,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True, slots=True)
class RunsTrend:
    """Runs oldest first with their figures, the change points of each series and the tokens per day."""

    points: tuple[TrendPoint, ...]
    change_points: tuple[ChangePoint, ...]
    daily: tuple[DailyTokens, ...]
    method: str
    filters: Mapping[str, Any] = field(default_factory=dict)

    def series(self, label: str) -> list[float | None]:
        """One series' values, oldest run first."""
        return [p.values.get(label) for p in self.points]

    def to_dict(self) -> dict[str, Any]:
        return {
            "filters": dict(self.filters),
            "runs": [p.to_dict() for p in self.points],
            "change_points": [c.to_dict() for c in self.change_points],
            "daily_tokens": [d.to_dict() for d in self.daily],
            "method": self.method,
        }


METHOD = (
    f"binary segmentation of each per-run series (split at the least absolute deviation from two medians): the step "
    f"between the medians before and after the split is a change point when it exceeds {Z_THRESHOLD:g} × its noise "
    f"(σ = 1.4826 × median successive difference ÷ √2; × 1.2533 × √(1/n₁ + 1/n₂)) and {MIN_RELATIVE_STEP:.0%} of the "
    f"level before; at least {MIN_SEGMENT} runs per side"
)


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def change_points(
    values: Sequence[float],
    *,
    min_size: int = MIN_SEGMENT,
    z: float = Z_THRESHOLD,
    min_rel: float = MIN_RELATIVE_STEP,
) -> list[tuple[int, float, float, float]]:
    """Change points of a series: ``(index of the first value at the new level, median before, median after, z)``,
    in index order (see the module's docstring for the method)."""
    out: list[tuple[int, float, float, float]] = []
    # the runs' noise from successive differences: a level shift moves one difference, not their median
    diffs = [abs(b - a) for a, b in itertools.pairwise(values)]
    sigma = 1.4826 * _median(diffs) / math.sqrt(2) if diffs else 0.0

    def search(lo: int, hi: int) -> None:
        if hi - lo < 2 * min_size:
            return
        best: tuple[float, int, float, float] | None = None
        for k in range(lo + min_size, hi - min_size + 1):
            left, right = _median(values[lo:k]), _median(values[k:hi])
            cost = sum(abs(v - left) for v in values[lo:k]) + sum(abs(v - right) for v in values[k:hi])
            if best is None or cost < best[0] - 1e-12:
                best = (cost, k, left, right)
        assert best is not None
        _, k, left, right = best
        step = abs(right - left)
        se = 1.2533 * sigma * math.sqrt(1 / (k - lo) + 1 / (hi - k))
        score = step / se if se > 0 else (math.inf if step > 0 else 0.0)
        if score >= z and step >= min_rel * abs(left) and step > 0:
            out.append((k, left, right, score))
            search(lo, k)
            search(k, hi)

    search(0, len(values))
    return sorted(out)


def _value(summary: Mapping[str, Any] | None, key: str, stat: str) -> float | None:
    block = (summary or {}).get(key)
    v = block.get(stat) if isinstance(block, Mapping) else None
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def _tokens(summary: Mapping[str, Any] | None, key: str) -> float | None:
    s = summary or {}
    mean = _value(s, key, "mean")
    req = s.get("requests")
    done = req.get("completed") if isinstance(req, Mapping) else None
    if mean is None or not isinstance(done, int | float):
        return None
    return mean * float(done)


def build_trend(runs: Sequence[Mapping[str, Any]], filters: Mapping[str, Any] | None = None) -> RunsTrend:
    """The trend of ``runs`` (each ``{"id", "started_at", "kind", "tags", "summary"}``, any order).

    Per run the series of :data:`SERIES` from its summary; change points per series over the runs that have it;
    tokens (mean × completed requests) summed per UTC day of the run's start.
    """
    ordered = sorted(runs, key=lambda r: (str(r.get("started_at") or ""), str(r["id"])))
    base = [
        TrendPoint(
            run_id=str(r["id"]),
            started_at=str(r.get("started_at") or ""),
            kind=str(r.get("kind") or ""),
            tags=tuple(r.get("tags") or ()),
            values={label: _value(r.get("summary"), key, stat) for label, key, stat in SERIES},
            input_tokens=_tokens(r.get("summary"), "input_tokens"),
            output_tokens=_tokens(r.get("summary"), "output_tokens"),
        )
        for r in ordered
    ]
    found: list[ChangePoint] = []
    marks: dict[int, list[str]] = {}
    for label, _, _ in SERIES:
        idx = [i for i, p in enumerate(base) if p.values.get(label) is not None]
        vals = [float(base[i].values[label]) for i in idx]  # type: ignore[arg-type]
        for k, before, after, score in change_points(vals):
            p = base[idx[k]]
            found.append(ChangePoint(label, idx[k], p.run_id, p.started_at, before, after, score))
            marks.setdefault(idx[k], []).append(label)
    points = tuple(replace(p, changes=tuple(marks.get(i, ()))) for i, p in enumerate(base))
    days: dict[str, list[TrendPoint]] = {}
    for p in points:
        if p.started_at:
            days.setdefault(p.started_at[:10], []).append(p)
    daily = tuple(
        DailyTokens(
            day,
            len(ps),
            sum(p.input_tokens or 0.0 for p in ps),
            sum(p.output_tokens or 0.0 for p in ps),
        )
        for day, ps in sorted(days.items())
    )
    found.sort(key=lambda c: (c.index, c.series))
    return RunsTrend(points, tuple(found), daily, METHOD, dict(filters or {}))
