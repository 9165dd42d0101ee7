"""Over-saturation detection: does latency keep growing through a stage whose offered rate is steady?

Below capacity, TTFT (and the queue time inside it) fluctuates around a level; past capacity the queue grows without
bound, so TTFT grows roughly linearly with the time a request was scheduled. For each steady stage we fit
``TTFT = a + b·t`` by least squares over successful requests scheduled in the stage (t = scheduled time in seconds)
and call the stage saturated when all three hold:

1. the slope is positive and significant: one-sided t-test on b with n − 2 degrees of freedom, p < ``alpha``;
2. the growth is material: the fitted TTFT rises by ≥ ``min_rise_ms`` over the stage;
3. and by ≥ ``min_rise_fraction`` of the fitted level at the stage start.

Then the run's steady-state numbers are not a steady state at all and the warning says so. Pure: records in, verdict
out. Failed requests are ignored for the fit, but a stage where more than half the requests failed is flagged too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from tailscope.records import RequestRecord, ServerSample

_NS = 1e9


@dataclass(frozen=True, slots=True)
class StageVerdict:
    """The growth test for one stage.

    Attributes:
        label: stage name used in messages (e.g. ``stage 3``).
        start_s, end_s: the window, seconds from the run start.
        n: successful requests in the window.
        slope_ms_per_s: fitted TTFT growth (ms of TTFT per second of schedule).
        p_value: one-sided p-value for slope > 0 (None under 3 points).
        rise_ms: fitted TTFT at the end minus at the start of the window.
        start_level_ms: fitted TTFT at the start of the window.
        failed_fraction: failed / all requests scheduled in the window.
        saturated: the verdict.
    """

    label: str
    start_s: float
    end_s: float
    n: int
    slope_ms_per_s: float | None
    p_value: float | None
    rise_ms: float | None
    start_level_ms: float | None
    failed_fraction: float
    saturated: bool
    rise_from_sent_ms: float | None = None  # the same fit on TTFT from the *actual* send
    queue_max: float | None = None  # the server's largest waiting queue in the window, when scraped
    cap: int | None = None  # a capped open loop's most requests in flight (the wait for a slot is send lag)

    @property
    def client_side(self) -> bool:
        """The growth is the client's: TTFT from the actual send rose less than half as much as from the intended
        send (the requests went out late, not slow), or the server's queue stayed empty."""
        if self.rise_ms is None or self.rise_ms <= 0:
            return False
        late = self.rise_from_sent_ms is not None and self.rise_from_sent_ms < 0.5 * self.rise_ms
        return late or self.queue_max == 0

    def message(self) -> str:
        """One line for the summary's warnings."""
        if self.client_side and self.failed_fraction <= 0.5 and self.cap is not None:
            return (
                f"CAP REACHED in {self.label} ({self.start_s:g}–{self.end_s:g} s): TTFT from the intended send grew "
                f"+{self.rise_ms or 0:.0f} ms but from the actual send only +{self.rise_from_sent_ms or 0:.0f} ms: "
                f"requests waited for one of the {self.cap} slots (send lag, counted in their latencies); with "
                f"{self.cap} in flight the target serves fewer requests/s than offered. Raise the cap, lower the rate "
                "or add capacity."
            )
        if self.client_side and self.failed_fraction <= 0.5:
            queue = "" if self.queue_max is None else f", the server's queue peaked at {self.queue_max:g}"
            return (
                f"CLIENT BEHIND in {self.label} ({self.start_s:g}–{self.end_s:g} s): TTFT from the intended send grew "
                f"+{self.rise_ms or 0:.0f} ms but from the actual send only +{self.rise_from_sent_ms or 0:.0f} ms"
                f"{queue}: the load generator fell behind its schedule; the server was not the bottleneck. Use "
                "--workers, fewer streams or a quieter machine."
            )
        if self.failed_fraction > 0.5 and (self.slope_ms_per_s is None or not self.saturated or self.n < 3):
            return (
                f"OVER-SATURATED in {self.label} ({self.start_s:g}–{self.end_s:g} s): {self.failed_fraction:.0%} of "
                "the requests failed; the target is past its capacity at this load."
            )
        return (
            f"OVER-SATURATED in {self.label} ({self.start_s:g}–{self.end_s:g} s): TTFT kept growing through a steady "
            f"load (+{self.slope_ms_per_s or 0:.1f} ms per second, +{self.rise_ms or 0:.0f} ms over the stage, "
            f"p = {self.p_value if self.p_value is not None else float('nan'):.2g}); the queue is not draining, so "
            "these latencies are not a steady state. The target is past its capacity: lower the rate or add replicas."
        )


def detect_saturation(
    records: Iterable[RequestRecord],
    *,
    windows: Sequence[tuple[float, float]] | None = None,
    labels: Sequence[str] | None = None,
    alpha: float = 0.01,
    min_rise_ms: float = 50.0,
    min_rise_fraction: float = 0.5,
    min_points: int = 10,
) -> list[StageVerdict]:
    """Test each steady window for growing TTFT.

    Args:
        records: the run's records (warmup records are skipped).
        windows: steady stages as (start_s, end_s) from the run start; None = the whole run as one window.
        labels: names for the windows (default ``stage 1`` …).
        alpha: significance level of the one-sided slope test.
        min_rise_ms: smallest fitted rise over a window that counts as growth.
        min_rise_fraction: smallest rise relative to the fitted level at the window start.
        min_points: windows with fewer successful requests are reported but never flagged for growth.

    Returns:
        One verdict per window, in order.
    """
    recs = [r for r in records if not r.warmup]
    if windows is None:
        if not recs:
            return []
        lo = min(r.scheduled_ns for r in recs) / _NS
        hi = max(r.scheduled_ns for r in recs) / _NS
        windows = [(lo, hi + 1e-9)]
    out: list[StageVerdict] = []
    for k, (a, b) in enumerate(windows):
        label = labels[k] if labels is not None and k < len(labels) else f"stage {k + 1}"
        inside = [r for r in recs if a <= r.scheduled_ns / _NS < b]
        xs: list[float] = []
        ys: list[float] = []
        ys_sent: list[float] = []
        for r in inside:
            if r.ok and r.first_token_ns is not None:
                xs.append(r.scheduled_ns / _NS)
                ys.append((r.first_token_ns - r.scheduled_ns) / 1e6)
                ys_sent.append((r.first_token_ns - (r.sent_ns if r.sent_ns is not None else r.scheduled_ns)) / 1e6)
        failed = sum(1 for r in inside if not r.ok)
        frac = failed / len(inside) if inside else 0.0
        slope = p = rise = level = rise_sent = None
        sat = False
        if len(xs) >= 3:
            fit = _ols(xs, ys)
            fit_sent = _ols(xs, ys_sent)
            if fit_sent is not None:
                rise_sent = fit_sent[1] * (b - a)
            if fit is not None:
                intercept, slope, se = fit
                level = intercept + slope * a
                rise = slope * (b - a)
                p = _t_sf(slope / se, len(xs) - 2) if se > 0 else (0.0 if slope > 0 else 1.0)
                sat = (
                    len(xs) >= min_points
                    and slope > 0
                    and p < alpha
                    and rise >= min_rise_ms
                    and rise >= min_rise_fraction * max(level, 0.0)
                )
        sat = sat or (len(inside) >= min_points and frac > 0.5)
        out.append(StageVerdict(label, a, b, len(xs), slope, p, rise, level, frac, sat, rise_sent))
    return out


def saturation_warnings(verdicts: Iterable[StageVerdict]) -> tuple[str, ...]:
    """The warning lines for the saturated windows (empty when none is)."""
    return tuple(v.message() for v in verdicts if v.saturated)


def _ols(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float] | None:
    """Least-squares line: (intercept, slope, standard error of the slope); None when x does not vary."""
    n = len(xs)
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    sse = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    se = math.sqrt(sse / (n - 2) / sxx) if n > 2 else 0.0
    return intercept, slope, se


def _t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (regularized incomplete beta)."""
    if df <= 0:
        return 0.5
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return tail if t > 0 else 1.0 - tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) by Lentz's continued fraction (Numerical Recipes §6.4)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        m2 = 2 * m
        num = m * (b - m) * x / ((a + m2 - 1) * (a + m2))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c if abs(1.0 + num / c) > tiny else tiny
        f *= d * c
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c if abs(1.0 + num / c) > tiny else tiny
        step = d * c
        f *= step
        if abs(step - 1.0) < 1e-12:
            break
    return math.exp(ln_front) * f / a


def _with_queue(verdicts: list[StageVerdict], samples: Sequence[ServerSample]) -> list[StageVerdict]:
    """The verdicts with the server's largest waiting queue in each window, when the run scraped one."""
    from tailscope.metrics.server import GAUGES

    for name in GAUGES["queue_depth"]:
        points = [(s.t_ns / _NS, s.value) for s in samples if s.name == name]
        if points:
            return [
                replace(v, queue_max=max((q for t, q in points if v.start_s <= t < v.end_s + 1.0), default=None))
                for v in verdicts
            ]
    return verdicts


def saturation_check(
    records: Sequence[RequestRecord],
    windows: Sequence[tuple[float, float]] | None,
    *,
    open_loop: bool,
    constant_rate: bool,
    samples: Sequence[ServerSample] = (),
    cap: int | None = None,
) -> tuple[str, ...]:
    """Over-saturation warnings for the steady stages of a run.

    Args:
        records: the run's records.
        windows: the steady (constant-rate) stages as (start_s, end_s) from the run start; ``None`` = decide from
            the load: a flag-only open-loop run at one constant rate is one steady window over the whole run.
        open_loop: the run was open loop (a closed loop regulates itself: its TTFT cannot grow without bound).
        constant_rate: the whole open-loop run offered one constant rate.
        samples: the scraped server telemetry: a window whose server queue stayed 0 is the client's, not the server's.
        cap: a capped open loop's most requests in flight: a late send is then a wait for a slot, not a slow client.

    Returns:
        One warning per saturated window (empty when none is, or there is nothing steady to test).
    """
    if not open_loop:
        return ()
    if windows is None:
        if not constant_rate:
            return ()
        found = detect_saturation(records, windows=None, labels=["the run"])
    elif not windows:
        return ()
    else:
        labels = [f"steady stage {i + 1}" for i in range(len(windows))]
        found = detect_saturation(records, windows=list(windows), labels=labels)
    if cap is not None:
        found = [replace(v, cap=cap) for v in found]
    return saturation_warnings(_with_queue(found, samples))
