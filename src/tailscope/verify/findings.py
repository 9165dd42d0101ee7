"""The vocabulary of diagnosis: a :class:`Finding`, and :class:`RunView` — a run's records and server samples as
numpy arrays computed once, so every rule is a short pure function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailscope.metrics import request as rq
from tailscope.metrics.server import GAUGES, PREFIX_COUNTERS, PREFIX_RATE_GAUGES
from tailscope.record_ops import record_dict
from tailscope.records import RequestRecord, ServerSample, Status

MS = 1e6


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosis: what users feel, the numbers that show it, the likely cause and what to do.

    Attributes:
        rule: the rule's id (``saturation``, ``kv_pressure``, …).
        title: a short headline.
        symptom: what is wrong, in user terms.
        evidence: numbers from the run, its server samples or its traces.
        cause: the likely cause.
        actions: concrete next steps, most effective first.
        impact: 0–1, how much of the problem this explains (orders findings; 1 = results untrustworthy).
        explained_by: the rule whose finding is this one's cause (this one is its symptom), when the rule saw so;
            :func:`~tailscope.verify.diagnose.diagnose` lists it right after that finding, whatever the impacts.
    """

    rule: str
    title: str
    symptom: str
    evidence: tuple[str, ...]
    cause: str
    actions: tuple[str, ...]
    impact: float
    explained_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**record_dict(self), "impact": round(self.impact, 3)}


def _opt(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class Series:
    """A server metric over time (summed over label sets per scrape): ``t_ms`` since run start and ``values``."""

    name: str
    t_ms: np.ndarray
    values: np.ndarray

    def at(self, t_ms: np.ndarray) -> np.ndarray:
        """The last scraped value at or before each time (the first value before the first scrape)."""
        idx = np.clip(np.searchsorted(self.t_ms, t_ms, side="right") - 1, 0, self.t_ms.size - 1)
        return self.values[idx]

    @property
    def delta(self) -> float:
        """Increase of a counter over the run (resets ignored)."""
        return float(self.values[-1] - self.values[0]) if self.values.size >= 2 else 0.0


def series(samples: Sequence[ServerSample], name: str, *, agg: str = "sum") -> Series | None:
    """One metric's series (label sets combined per scrape by ``sum`` or ``max``), or ``None`` when not exposed."""
    acc: dict[int, float] = {}
    for s in samples:
        if s.name == name:
            prev = acc.get(s.t_ns)
            if prev is None:
                acc[s.t_ns] = s.value
            else:
                acc[s.t_ns] = max(prev, s.value) if agg == "max" else prev + s.value
    if not acc:
        return None
    t = np.asarray(sorted(acc), dtype=np.float64)
    return Series(name, t / MS, np.asarray([acc[int(k)] for k in t], dtype=np.float64))


def first_series(samples: Sequence[ServerSample], names: Sequence[str], *, agg: str = "sum") -> Series | None:
    """The first of ``names`` the server exposed."""
    for n in names:
        s = series(samples, n, agg=agg)
        if s is not None:
            return s
    return None


@dataclass(frozen=True, slots=True)
class RunView:
    """Per-request arrays of a run's measured (non-warmup) records, ordered by scheduled time.

    Times are ms since run start; latencies ms; ``nan`` where a value is undefined (failed request, < 2 tokens).
    """

    records: tuple[RequestRecord, ...]
    samples: tuple[ServerSample, ...]
    trace: Mapping[str, Any] | None
    settings: Mapping[str, Any]
    warmup_count: int
    sched_ms: np.ndarray
    sent_ms: np.ndarray
    end_ms: np.ndarray
    ok: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray
    max_gap: np.ndarray
    send_lag: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    shared_prefix: np.ndarray
    gap_start_ms: np.ndarray = field(repr=False)
    gap_end_ms: np.ndarray = field(repr=False)
    gap_ms: np.ndarray = field(repr=False)
    gap_req: np.ndarray = field(repr=False)

    @property
    def n(self) -> int:
        return len(self.records)

    def gauge(self, key: str) -> Series | None:
        """A semantic gauge: ``queue_depth``, ``running`` or ``kv_usage`` (vLLM, SGLang or TGI names).

        Queues and running counts add up over engines (label sets); KV usage is a fraction: the fullest engine counts.
        """
        return first_series(self.samples, GAUGES[key], agg="max" if key == "kv_usage" else "sum")

    def counter(self, name: str) -> Series | None:
        return series(self.samples, name)

    def prefix_hit_rate(self) -> float | None:
        """Prefix-cache hit rate over the run (hits / queried tokens), or ``None`` when not exposed."""
        for q_name, h_name in PREFIX_COUNTERS:
            q, h = series(self.samples, q_name), series(self.samples, h_name)
            if q is not None and h is not None and q.delta > 0:
                return h.delta / q.delta
        gauge = first_series(self.samples, PREFIX_RATE_GAUGES)
        return float(gauge.values.mean()) if gauge is not None else None

    def in_flight_at(self, t_ms: np.ndarray) -> np.ndarray:
        """Client-side concurrency: requests sent at or before ``t`` and not yet ended."""
        sent = np.sort(np.nan_to_num(self.sent_ms, nan=np.inf))
        end = np.sort(np.nan_to_num(self.end_ms, nan=np.inf))
        started = np.searchsorted(sent, t_ms, side="right")
        ended = np.searchsorted(end, t_ms, side="right")
        return (started - ended).astype(np.float64)


def build_view(
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample] = (),
    *,
    trace: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> RunView:
    """Arrays of the measured records (warmup excluded, counted) for the diagnosis rules."""
    measured = sorted((r for r in records if not r.warmup), key=lambda r: (r.scheduled_ns, r.id))
    gs: list[float] = []
    ge: list[float] = []
    greq: list[int] = []
    for i, r in enumerate(measured):
        if r.status is Status.OK and len(r.chunk_times_ns) > 1:
            t = np.asarray(r.chunk_times_ns, dtype=np.float64) / MS
            gs.extend(t[:-1])
            ge.extend(t[1:])
            greq.extend([i] * (t.size - 1))
    gap_start = np.asarray(gs, dtype=np.float64)
    gap_end = np.asarray(ge, dtype=np.float64)
    return RunView(
        records=tuple(measured),
        samples=tuple(sorted(samples, key=lambda s: s.t_ns)),
        trace=trace,
        settings=settings or {},
        warmup_count=len(records) - len(measured),
        sched_ms=np.asarray([r.scheduled_ns / MS for r in measured], dtype=np.float64),
        sent_ms=_opt([None if r.sent_ns is None else r.sent_ns / MS for r in measured]),
        end_ms=_opt([None if r.end_ns is None else r.end_ns / MS for r in measured]),
        ok=np.asarray([r.status is Status.OK for r in measured], dtype=bool),
        ttft=_opt([rq.ttft_ms(r) if r.ok else None for r in measured]),
        tpot=_opt([rq.tpot_ms(r) for r in measured]),
        e2e=_opt([rq.e2e_ms(r) for r in measured]),
        max_gap=_opt([rq.max_stall_ms(r) if r.ok else None for r in measured]),
        send_lag=_opt([rq.send_lag_ms(r) for r in measured]),
        input_tokens=_opt([r.input_tokens for r in measured]),
        output_tokens=_opt([rq.output_token_count(r) if r.ok else None for r in measured]),
        shared_prefix=np.asarray([r.shared_prefix for r in measured], dtype=bool),
        gap_start_ms=gap_start,
        gap_end_ms=gap_end,
        gap_ms=gap_end - gap_start,
        gap_req=np.asarray(greq, dtype=np.int64),
    )


def finite(a: np.ndarray) -> np.ndarray:
    out: np.ndarray = a[np.isfinite(a)]
    return out


def pct(a: np.ndarray, q: float) -> float | None:
    """Percentile (0–100) over the finite values, ``None`` when there are none."""
    f = finite(a)
    return float(np.percentile(f, q)) if f.size else None


def corr(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson correlation over pairs where both are finite; ``None`` under 10 pairs or with no variance."""
    mask = np.isfinite(x) & np.isfinite(y)
    if mask.sum() < 10:
        return None
    xs, ys = x[mask], y[mask]
    if xs.std() == 0 or ys.std() == 0:
        return None
    return float(np.corrcoef(xs, ys)[0, 1])


def clip01(x: float) -> float:
    return float(min(1.0, max(0.0, x)))
