"""``--workers auto``: how many load-generator processes a run needs, from its projected token-event rate and the
client's measured cost per event.

Projected rate: open loop — the requested rate × the mean output length (one event per token, the worst case);
closed loop — the concurrency × :data:`STREAM_EVENTS_PER_S` (a fast server's per-stream decode rate). Cost: the
in-process hot path (:func:`tailscope.client.cost.hot_path_us`, measured on this machine at start) plus what the
event loop, the kernel's receive path and the record keeping add around it per event (:data:`LOOP_US`, measured in
``benchmarks/client_overhead.py``). Each worker is planned to spend at most :data:`TARGET_UTIL` of a core on the
load, so its timestamps stay prompt.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from tailscope.runner.bench_config import BenchConfig

#: per-stream token events per second assumed for a closed loop (10 ms per token: a fast decode)
STREAM_EVENTS_PER_S = 100.0
#: whole-process CPU per event beyond the in-process hot path (loop wake-ups, recvmsg and the kernel's receive path,
#: records, the store), µs: client_overhead.py at 256 streams with read batching, 2026-12-05 — 9.1 µs whole against
#: 0.97 in process compiled (8.1), 14.1 against 3.44 pure Python (10.7). Added, not multiplied: the kernel's part does
#: not shrink with a faster hot path (as a factor it was 9.4 for the compiled loop and 4.1 for the pure-Python one)
LOOP_US = 9.0
#: share of one core a worker is planned to use
TARGET_UTIL = 0.5


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """The worker count ``--workers auto`` picked, and why."""

    workers: int
    events_per_s: float
    cost_us: float

    def describe(self) -> str:
        return (
            f"--workers auto: {self.workers} (projected {self.events_per_s:,.0f} token events/s × "
            f"{self.cost_us:.1f} µs CPU each, ≤ {TARGET_UTIL:.0%} of a core per worker)"
        )


def projected_events_per_s(cfg: BenchConfig) -> float:
    """Token events per second the run is expected to bring back."""
    out = max((b.output_tokens.mean() for b in cfg.lengths), default=128.0)
    if cfg.dispatch.concurrency:
        return cfg.dispatch.concurrency * STREAM_EVENTS_PER_S
    if cfg.requested_rate:
        return cfg.requested_rate * out
    return STREAM_EVENTS_PER_S


def workers_needed(events_per_s: float, cost_us: float, *, cap: int | None = None) -> int:
    """Processes that keep each under :data:`TARGET_UTIL` of a core at ``events_per_s`` × ``cost_us``."""
    n = max(1, math.ceil(events_per_s * cost_us * 1e-6 / TARGET_UTIL))
    limit = cap if cap is not None else max(1, os.cpu_count() or 1)
    return min(n, limit)


def plan_workers(cfg: BenchConfig, *, cost_us: float | None = None) -> WorkerPlan:
    """The worker count for ``cfg`` (closed loop: at most the concurrency; at most the machine's CPUs)."""
    if cost_us is None:
        from tailscope.client.cost import hot_path_us

        cost_us = hot_path_us() + LOOP_US
    eps = projected_events_per_s(cfg)
    n = workers_needed(eps, cost_us)
    if cfg.dispatch.concurrency:
        n = min(n, cfg.dispatch.concurrency)
    return WorkerPlan(workers=n, events_per_s=eps, cost_us=cost_us)
