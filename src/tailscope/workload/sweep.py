"""Sweeps and capacity search, as pure logic the bench command drives.

- :func:`parse_sweep`: ``concurrency=1,2,4,8`` (a list) or ``rate=1:20:8`` (8 evenly spaced points from 1 to 20).
- :func:`find_knee`: on (load, throughput, latency) points, the last point before latency starts rising faster than
  throughput: the first step i where the relative latency increase exceeds the relative throughput increase (and
  is at least ``min_latency_rise``) marks the knee at point i − 1.
- :func:`find_max`: the highest rate whose goodput still meets the SLO, by bracketing (doubling from ``start``) then
  bisection until the bracket is within ``rel_tol``, re-measuring the boundary ``repeats`` times. ``measure(rate)``
  runs a real bench (or a simulation) and returns ``(ok, summary)``; the driver never touches IO itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.errors import ConfigError

SWEEP_PARAMS = ("concurrency", "rate")


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """The points of a sweep: ``param`` (concurrency | rate) at each of ``values``."""

    param: str
    values: tuple[float, ...]

    def as_ints(self) -> tuple[int, ...]:
        """Values as integers (concurrency)."""
        return tuple(round(v) for v in self.values)


def parse_sweep(text: str) -> SweepSpec:
    """Parse ``PARAM=V1,V2,…`` or ``PARAM=START:STOP:POINTS``.

    Raises:
        ConfigError: naming the text and the accepted forms.
    """
    help_ = "use concurrency=1,2,4,8 or rate=1:20:8 (START:STOP:POINTS, evenly spaced)"
    param, eq, rest = text.partition("=")
    param = param.strip().lower()
    if not eq or param not in SWEEP_PARAMS:
        raise ConfigError(f"--sweep {text!r}: {help_}")
    rest = rest.strip()
    try:
        if ":" in rest:
            parts = rest.split(":")
            if len(parts) != 3:
                raise ConfigError(f"--sweep {text!r}: a range is START:STOP:POINTS; {help_}")
            start, stop, n = float(parts[0]), float(parts[1]), int(parts[2])
            if n < 1 or start <= 0 or stop < start:
                raise ConfigError(f"--sweep {text!r}: need 0 < START ≤ STOP and POINTS ≥ 1")
            values = [start] if n == 1 else [start + (stop - start) * i / (n - 1) for i in range(n)]
        else:
            values = [float(v) for v in rest.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--sweep {text!r}: values must be numbers; {help_}") from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"--sweep {text!r}: values must be > 0; {help_}")
    if param == "concurrency":
        if any(v != int(v) for v in values) and ":" not in rest:
            raise ConfigError(f"--sweep {text!r}: concurrency values are whole numbers")
        values = sorted({float(round(v)) for v in values})
    return SweepSpec(param, tuple(values))


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One measured point: offered load, achieved throughput (any unit), and a latency (e.g. TTFT p99 ms)."""

    load: float
    throughput: float
    latency: float


def find_knee(points: Sequence[SweepPoint], *, min_latency_rise: float = 0.1) -> int | None:
    """Index of the knee point in the points sorted by load, or None when latency never outgrows throughput.

    Args:
        points: measured points (any order; sorted by load here).
        min_latency_rise: relative latency increase below which a step never counts (noise guard).
    """
    pts = sorted(points, key=lambda p: p.load)
    for i in range(1, len(pts)):
        a, b = pts[i - 1], pts[i]
        if a.latency <= 0 or a.throughput <= 0:
            continue
        d_lat = (b.latency - a.latency) / a.latency
        d_thr = (b.throughput - a.throughput) / a.throughput
        if d_lat >= min_latency_rise and d_lat > d_thr:
            return i - 1
    return None


def knee_of(points: Sequence[tuple[float, float | None, float | None]]) -> int | None:
    """The knee of ``(load, requests/s, E2E p50 ms)`` points, as an index into ``points`` — the one definition the
    console, the JSON and the HTML report share (points with an undefined value are skipped)."""
    usable = [(i, SweepPoint(load, rps, e2e)) for i, (load, rps, e2e) in enumerate(points)
              if rps is not None and e2e is not None]  # fmt: skip
    k = find_knee([p for _, p in usable])
    if k is None:
        return None
    load = sorted(p.load for _, p in usable)[k]
    return next(i for i, p in usable if p.load == load)


@dataclass(frozen=True, slots=True)
class Probe:
    """One measurement of the search."""

    rate: float
    ok: bool
    summary: Any = None
    phase: str = "bracket"  # bracket | bisect | repeat


@dataclass(frozen=True, slots=True)
class FindMaxResult:
    """The answer of a capacity search.

    Attributes:
        rate: highest rate that met the SLO (every measurement of it passed); None when even the start failed.
        lower, upper: the final bracket (the true capacity lies between them); ``upper`` is None when the search
            hit ``max_rate`` without a failure.
        probes: every measurement in order.
    """

    rate: float | None
    lower: float | None
    upper: float | None
    probes: tuple[Probe, ...] = field(default_factory=tuple)

    @property
    def uncertainty(self) -> float | None:
        """Half the width of the final bracket (requests/s), or None when unbounded."""
        if self.lower is None or self.upper is None:
            return None
        return (self.upper - self.lower) / 2.0

    def describe(self) -> str:
        """One line for the console."""
        if self.rate is None:
            return f"no rate met the SLO (even {self.probes[0].rate:g} req/s failed)" if self.probes else "no probes"
        if self.upper is None:
            return f"≥ {self.rate:.3g} req/s met the SLO (the search stopped at max_rate before any failure)"
        return (
            f"max rate meeting the SLO: {self.rate:.3g} req/s (capacity between {self.lower:.3g} and "
            f"{self.upper:.3g} req/s, ±{self.uncertainty:.2g}) after {len(self.probes)} runs"
        )


def find_max(
    measure: Callable[[float], tuple[bool, Any]],
    *,
    start: float = 1.0,
    max_rate: float = 10_000.0,
    rel_tol: float = 0.05,
    repeats: int = 1,
    max_probes: int = 40,
) -> FindMaxResult:
    """Search the highest rate whose goodput meets the SLO.

    Bracket: measure ``start``, then double while it passes (up to ``max_rate``); if ``start`` fails, halve down to
    ``start / 64``. Bisect the bracket until ``upper − lower ≤ rel_tol · lower``. Then re-measure the best passing
    rate ``repeats`` times; a failure there moves the upper bound down to it and the bisection continues below.

    Args:
        measure: runs one load level, returns (met the SLO, summary for the record).
        start: first rate to try (requests/s, > 0).
        max_rate: never probe above this.
        rel_tol: relative bracket width at which to stop.
        repeats: boundary re-measurements (0 = none).
        max_probes: hard cap on measurements.

    Raises:
        ConfigError: for non-positive ``start`` or ``rel_tol``.
    """
    if not start > 0 or not rel_tol > 0:
        raise ConfigError(f"find-max needs start > 0 and rel_tol > 0 (got {start}, {rel_tol})")
    probes: list[Probe] = []

    def run(rate: float, phase: str) -> bool:
        ok, summary = measure(rate)
        probes.append(Probe(rate, bool(ok), summary, phase))
        return bool(ok)

    lower: float | None = None
    upper: float | None = None
    rate = min(start, max_rate)
    if run(rate, "bracket"):
        lower = rate
        while len(probes) < max_probes and rate < max_rate:
            rate = min(rate * 2.0, max_rate)
            if run(rate, "bracket"):
                lower = rate
            else:
                upper = rate
                break
        if upper is None:
            return FindMaxResult(lower, lower, None, tuple(probes))
    else:
        upper = rate
        floor = start / 64.0
        while len(probes) < max_probes and rate > floor:
            rate /= 2.0
            if run(rate, "bracket"):
                lower = rate
                break
            upper = rate
        if lower is None:
            return FindMaxResult(None, None, upper, tuple(probes))
    repeats_left = repeats
    while len(probes) < max_probes:
        assert lower is not None
        assert upper is not None
        if upper - lower > rel_tol * lower:
            mid = (lower + upper) / 2.0
            if run(mid, "bisect"):
                lower = mid
            else:
                upper = mid
            continue
        if repeats_left <= 0:
            break
        repeats_left -= 1
        if not run(lower, "repeat"):
            # the boundary point is flaky: it is not a pass; search below it
            upper = lower
            lower = _last_pass_below(probes, upper)
            if lower is None:
                return FindMaxResult(None, None, upper, tuple(probes))
            repeats_left = repeats
    return FindMaxResult(lower, lower, upper, tuple(probes))


def _last_pass_below(probes: Sequence[Probe], rate: float) -> float | None:
    """The highest rate below ``rate`` whose every measurement passed."""
    by_rate: dict[float, bool] = {}
    for p in probes:
        by_rate[p.rate] = by_rate.get(p.rate, True) and p.ok
    passing = [r for r, ok in by_rate.items() if ok and r < rate]
    return max(passing) if passing else None
