"""Steady state: the part of a run that measures the load, not its ramp-up or its drain.

A run starts with a first wave (every closed-loop slot sends at once; an open-loop queue is still empty) and ends with
a drain (fewer and fewer requests in flight). Both give latencies the steady load never sees. With ``f(t)`` the
number of requests in flight and ``L`` its time-weighted median over the run:

* the **steady window** starts at the later of one full turnover (as many completions as ``L``: the first wave is
  over) and the first time ``f ≥ 0.9 L``, and ends at the last time ``f ≥ 0.9 L``;
* its **requests** are those scheduled at or after the start that ended by the end;
* it is **non-stationary** when TTFT still drifts inside it: a least-squares line of TTFT over scheduled time whose
  slope is significant (two-sided p < 0.01) and moves TTFT by ≥ 20 % of its level across the window.

:func:`slice_records` cuts any run to a time window (``summarize(slice_records(records, a, b))``). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailscope.metrics import request as rq
from tailscope.records import RequestRecord
from tailscope.units import NS_PER_S

#: fewer measured requests than this: no steady window is reported
MIN_REQUESTS = 20


@dataclass(frozen=True, slots=True)
class SteadyWindow:
    """The steady part of a run (seconds from the run start) and whether latency was stationary in it."""

    start_s: float
    end_s: float
    requests: int
    ramp_up: int  # measured requests left out before the window
    drain: int  # measured requests left out because they ended after it
    stationary: bool | None  # None: too few requests in the window to tell
    ttft_drift: float | None  # fitted TTFT change across the window ÷ its level at the start

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "requests": self.requests,
            "ramp_up": self.ramp_up,
            "drain": self.drain,
            "stationary": self.stationary,
            "ttft_drift": self.ttft_drift,
        }


def slice_records(records: Sequence[RequestRecord], start_s: float, end_s: float) -> list[RequestRecord]:
    """Records scheduled in ``[start_s, end_s)`` seconds from the run start."""
    lo, hi = start_s * NS_PER_S, end_s * NS_PER_S
    return [r for r in records if lo <= r.scheduled_ns < hi]


def _in_flight(spans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(event times, requests in flight just after each) of [send, end] intervals."""
    times = np.concatenate([spans[:, 0], spans[:, 1]])
    deltas = np.concatenate([np.ones(len(spans)), -np.ones(len(spans))])
    order = np.lexsort((deltas, times))  # at equal times, ends (-1) before sends
    return times[order], np.cumsum(deltas[order])


def steady_window(records: Sequence[RequestRecord]) -> SteadyWindow | None:
    """The steady window of a run (see the module docstring), or None with fewer than :data:`MIN_REQUESTS`."""
    measured = [r for r in records if not r.warmup and r.sent_ns is not None and r.end_ns is not None]
    if len(measured) < MIN_REQUESTS:
        return None
    spans = np.array([(r.sent_ns, r.end_ns) for r in measured], dtype=np.float64)
    times, level = _in_flight(spans)
    durations = np.diff(times)
    if durations.sum() <= 0:
        return None
    weights = durations / durations.sum()
    order = np.argsort(level[:-1])
    cum = np.cumsum(weights[order])
    typical = float(level[:-1][order][np.searchsorted(cum, 0.5)])
    high = level >= 0.9 * typical
    # one full turnover: as many requests completed as are typically in flight (the first wave and its echo pass)
    ends = np.sort(spans[:, 1])
    turnover = float(ends[min(len(ends) - 1, max(0, math.ceil(typical) - 1))])
    start = max(turnover, float(times[np.argmax(high)]))
    end = float(times[len(high) - 1 - int(np.argmax(high[::-1]))])
    if end <= start:
        return None
    inside = [r for r in measured if r.scheduled_ns >= start and (r.end_ns or 0) <= end]
    ramp = sum(1 for r in measured if r.scheduled_ns < start)
    drain = sum(1 for r in measured if r.scheduled_ns >= start and (r.end_ns or 0) > end)
    stationary, drift = _stationarity(inside, start, end)
    return SteadyWindow(start / NS_PER_S, end / NS_PER_S, len(inside), ramp, drain, stationary, drift)


def _stationarity(records: Sequence[RequestRecord], start: float, end: float) -> tuple[bool | None, float | None]:
    pts = [(r.scheduled_ns / NS_PER_S, v) for r in records if r.ok and (v := rq.ttft_ms(r)) is not None]
    if len(pts) < MIN_REQUESTS:
        return None, None
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    xm = x.mean()
    sxx = float(((x - xm) ** 2).sum())
    if sxx <= 0:
        return None, None
    slope = float(((x - xm) * (y - y.mean())).sum() / sxx)
    intercept = float(y.mean() - slope * xm)
    resid = y - (intercept + slope * x)
    dof = len(pts) - 2
    se = math.sqrt(float((resid**2).sum()) / dof / sxx) if dof > 0 else 0.0
    level = intercept + slope * (start / NS_PER_S)
    drift = slope * (end - start) / NS_PER_S / level if level > 0 else None
    if se == 0:
        return (drift is None or abs(drift) < 0.2), drift
    t = abs(slope / se)
    p = math.erfc(t / math.sqrt(2))  # two-sided, normal approximation (n ≥ 20)
    material = drift is not None and abs(drift) >= 0.2
    return not (p < 0.01 and material), drift
