"""What each load-generator worker did, and whether it (rather than the server) limited the run. Pure functions.

A worker is flagged as a **bottleneck** when its own measurements say its timings may lie: its CPU was nearly
saturated, its event loop woke up late, or it sent requests late (send lag). Latencies are measured on each worker's
own clock, so the clock-offset uncertainty between workers does not bias them; it only blurs how the workers'
timelines line up with each other and with the server's metrics, which is why it is warned about only when it is large
next to the latencies measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.metrics import request as rq
from tailscope.metrics.percentiles import compute_stats
from tailscope.metrics.summary import LOOP_LAG_WARN_MS, SEND_LAG_WARN_MS
from tailscope.records import RequestRecord

#: a worker whose process used more than this fraction of one core was CPU-bound.
CPU_BOTTLENECK_FRACTION = 0.85
#: warn when the clock-offset uncertainty exceeds this fraction of the median TTFT.
OFFSET_WARN_FRACTION = 0.1
#: a closed-loop worker that waited for requests longer than this fraction of the run was starved by the driver.
STARVED_WARN_FRACTION = 0.05


@dataclass(slots=True)
class WorkerState:
    """The driver's bookkeeping for one worker (filled during the run).

    Attributes:
        index: worker number (``RequestRecord.worker``).
        kind: ``process`` or ``ray``.
        pid: the worker's process id (``None`` until it answered ``setup``); for Ray, the actor's.
        nice: the worker's scheduling niceness when known (Ray starts workers at 15).
        slots: closed-loop concurrency of this worker (``None`` in open loop).
        cap: its share of a capped open loop's in-flight limit (``None`` when uncapped); its send lag is then the
            cap's wait (the run's CAP REACHED warning), not a sign that the worker fell behind.
        assigned: requests handed to the worker.
        received: records received from it.
        clock_offset_ns: worker clock − driver clock, estimated from pings.
        offset_uncertainty_ns: half the best ping round trip (the offset is within ± this).
        report: the worker's own end-of-run report (CPU, loop lag, start lateness), ``None`` when it died.
        lost: why the worker was lost, ``None`` while it is fine.
    """

    index: int
    kind: str
    pid: int | None = None
    nice: int | None = None
    slots: int | None = None
    cap: int | None = None
    assigned: int = 0
    received: int = 0
    buffered: int = 0
    clock_offset_ns: int = 0
    offset_uncertainty_ns: int = 0
    progress: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] | None = None
    lost: str | None = None

    @property
    def finished(self) -> bool:
        return self.report is not None or self.lost is not None


def worker_rows(states: Sequence[WorkerState], records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """One JSON-ready row per worker: requests, send lag, loop lag, CPU, clock offset, bottleneck verdict."""
    by_worker: dict[int, list[RequestRecord]] = {s.index: [] for s in states}
    for r in records:
        by_worker.setdefault(r.worker, []).append(r)
    rows: list[dict[str, Any]] = []
    for s in states:
        recs = by_worker.get(s.index, [])
        lag = compute_stats([v for r in recs if (v := rq.send_lag_ms(r)) is not None])
        rep = s.report or {}
        loop = rep.get("loop_lag_ms") or {}
        cpu_util = rep.get("cpu_util")
        reasons: list[str] = []
        if cpu_util is not None and cpu_util >= CPU_BOTTLENECK_FRACTION:
            reasons.append(f"CPU {cpu_util:.0%}")
        if (loop.get("p99") or 0.0) > LOOP_LAG_WARN_MS:
            reasons.append(f"event-loop lag p99 {loop['p99']:.1f} ms")
        if lag.p99 is not None and lag.p99 > SEND_LAG_WARN_MS and s.cap is None:
            reasons.append(f"send lag p99 {lag.p99:.1f} ms")
        rows.append(
            {
                "worker": s.index,
                "kind": s.kind,
                "slots": s.slots,
                "cap": s.cap,
                "nice": s.nice,
                "assigned": s.assigned,
                "requests": len(recs),
                "send_lag_ms": lag.to_dict(),
                "loop_lag_ms": loop,
                "cpu_s": rep.get("cpu_s"),
                "wall_s": rep.get("wall_s"),
                "cpu_util": cpu_util,
                "starved_s": rep.get("starved_s"),
                "start_late_ms": rep.get("start_late_ms"),
                "clock_offset_ms": s.clock_offset_ns / 1e6,
                "offset_uncertainty_ms": s.offset_uncertainty_ns / 1e6,
                "error": rep.get("error"),
                "lost": s.lost,
                "bottleneck": bool(reasons),
                "bottleneck_reasons": reasons,
            }
        )
    return rows


def lost_share(states: Sequence[WorkerState], total_scheduled: int | None, concurrency: int | None) -> dict[str, Any]:
    """What the lost workers took with them.

    Open loop: ``share`` = requests assigned to lost workers that never came back / all scheduled requests.
    Closed loop: ``share`` = the lost workers' slots / the total concurrency (offered load lost from then on);
    ``requests`` counts requests handed to them that never came back (in flight or queued when they died).
    """
    lost = [s for s in states if s.lost is not None]
    missing = sum(max(0, s.assigned - s.received - (s.buffered if s.slots is not None else 0)) for s in lost)
    if concurrency is not None:
        share = sum(s.slots or 0 for s in lost) / concurrency if concurrency else 0.0
    else:
        share = missing / total_scheduled if total_scheduled else 0.0
    return {"workers": [s.index for s in lost], "requests": missing, "share": share}


def worker_warnings(rows: Sequence[dict[str, Any]], ttft_p50_ms: float | None, lost: dict[str, Any]) -> list[str]:
    """Human-readable warnings for the run summary."""
    out: list[str] = []
    for row in rows:
        if row["bottleneck"]:
            out.append(
                f"worker {row['worker']} was a bottleneck ({', '.join(row['bottleneck_reasons'])}): its timings "
                "may include client delay; add workers or lower the load per worker"
            )
        if row["starved_s"] and row["wall_s"] and row["starved_s"] > STARVED_WARN_FRACTION * row["wall_s"]:
            out.append(
                f"worker {row['worker']} waited {row['starved_s']:.1f} s for requests from the driver: "
                "the offered concurrency was lower than asked"
            )
    niced = [str(row["worker"]) for row in rows if (row.get("nice") or 0) > 0]
    if niced:
        out.append(
            f"worker(s) {', '.join(niced)} ran at a lowered CPU priority (Ray's worker niceness): on a busy node "
            "their timings suffer; start Ray with RAY_worker_niceness=0 (see docs/scale-out.md)"
        )
    unc = max((row["offset_uncertainty_ms"] for row in rows if row["lost"] is None), default=0.0)
    if ttft_p50_ms is not None and ttft_p50_ms > 0 and unc > OFFSET_WARN_FRACTION * ttft_p50_ms:
        out.append(
            f"worker clock offsets are uncertain by up to ±{unc:.2f} ms, large next to the median TTFT "
            f"({ttft_p50_ms:.2f} ms): per-request latencies are exact, but aligning workers' timelines is not"
        )
    if lost["workers"]:
        out.append(
            f"lost worker(s) {', '.join(str(w) for w in lost['workers'])}: {lost['share']:.1%} of the schedule "
            f"({lost['requests']} request(s) never reported); the run is degraded"
        )
    return out
