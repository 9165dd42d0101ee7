"""Mixed traffic: plain HTTP requests sent beside the LLM load, each target at its own open-loop rate.

Gateways, auth services and sidecars are often shared between LLM calls and ordinary API calls; a load test that
only sends LLM requests misses their contention. :func:`run_mixed` sends each target's requests at absolute
scheduled times (constant rate, or Poisson with a seeded RNG) until ``duration_s`` or until ``stop`` is set, to the
target's URL only, and :func:`summarize_mixed` gives each target its own latency summary (latency measured from the
scheduled time, like the LLM requests). A failure is a record, never an exception. :class:`MixedTraffic` runs it on
a bench run's event loop with the run's ``t0`` (so its times share the run's origin).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tailscope.clock import Clock, MonotonicClock
from tailscope.metrics.percentiles import Stats, compute_stats
from tailscope.workload.profile import MixedTarget

if TYPE_CHECKING:  # aiohttp costs ~0.3–0.8 s to import: only a run with mixed traffic loads it
    import aiohttp


@dataclass(frozen=True, slots=True)
class MixedRecord:
    """One plain HTTP request. Times in ns since the mixed-traffic start (the same origin as the run when
    ``t0_ns`` is the run's start)."""

    name: str
    scheduled_ns: int
    sent_ns: int | None
    end_ns: int | None
    status: int | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """2xx/3xx answer."""
        return self.error is None and self.status is not None and self.status < 400


@dataclass(frozen=True, slots=True)
class MixedSummary:
    """Per-target summary: counts, latency (ms, from the scheduled time) and achieved rate (requests/s)."""

    name: str
    total: int
    ok: int
    failed: int
    latency_ms: Stats
    requests_per_s: float
    errors: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "total": self.total,
            "ok": self.ok,
            "failed": self.failed,
            "latency_ms": self.latency_ms.to_dict(),
            "requests_per_s": self.requests_per_s,
            "errors": dict(self.errors),
        }


def summarize_mixed(records: Iterable[MixedRecord]) -> dict[str, MixedSummary]:
    """One summary per target name (sorted). Latency percentiles cover successful requests."""
    by_name: dict[str, list[MixedRecord]] = {}
    for r in records:
        by_name.setdefault(r.name, []).append(r)
    out: dict[str, MixedSummary] = {}
    for name in sorted(by_name):
        recs = by_name[name]
        good = [r for r in recs if r.ok and r.end_ns is not None]
        errors: dict[str, int] = {}
        for r in recs:
            if not r.ok:
                key = r.error or f"http_{r.status}"
                errors[key] = errors.get(key, 0) + 1
        lat = [(r.end_ns - r.scheduled_ns) / 1e6 for r in good if r.end_ns is not None]
        start = min(r.scheduled_ns for r in recs)
        ends = [r.end_ns for r in recs if r.end_ns is not None]
        span = (max(ends) - start) / 1e9 if ends else 0.0
        out[name] = MixedSummary(
            name=name,
            total=len(recs),
            ok=len(good),
            failed=len(recs) - len(good),
            latency_ms=compute_stats(lat),
            requests_per_s=len(good) / span if span > 0 else 0.0,
            errors=dict(sorted(errors.items())),
        )
    return out


def schedule_ns(target: MixedTarget, duration_s: float, *, poisson: bool, rng: random.Random) -> list[int]:
    """Absolute send times (ns from the start) for one target over ``duration_s``; the first at t = 0."""
    out: list[int] = []
    t = 0.0
    while t < duration_s:
        out.append(round(t * 1e9))
        t += rng.expovariate(target.rate) if poisson else 1.0 / target.rate
    return out


async def run_mixed(
    targets: Sequence[MixedTarget],
    *,
    duration_s: float,
    stop: asyncio.Event | None = None,
    clock: Clock | None = None,
    t0_ns: int | None = None,
    poisson: bool = False,
    seed: int = 0,
    session: aiohttp.ClientSession | None = None,
) -> list[MixedRecord]:
    """Send every target's requests on schedule until ``duration_s`` passes or ``stop`` is set.

    Args:
        targets: plain HTTP targets (only their URLs are contacted).
        duration_s: how long to schedule requests (seconds).
        stop: set it to stop scheduling early (requests in flight finish or time out).
        clock: monotonic clock (default ``perf_counter_ns``).
        t0_ns: the clock reading that is time 0 (default: now); pass the run's t0 to share its time origin.
        poisson: exponential gaps instead of constant ones.
        seed: seeds the Poisson gaps (one stream per target).
        session: an aiohttp session to reuse; by default one is opened and closed here.

    Returns:
        Every request as a record (sent or not, scheduled before the stop), in completion order.
    """
    clk = clock or MonotonicClock()
    origin = clk.now_ns() if t0_ns is None else t0_ns
    stop = stop or asyncio.Event()
    own = session is None
    import aiohttp

    sess = session or aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    records: list[MixedRecord] = []
    try:
        await asyncio.gather(
            *(
                _drive(t, schedule_ns(t, duration_s, poisson=poisson, rng=random.Random(seed * 7919 + i)),
                       sess, clk, origin, stop, records)
                for i, t in enumerate(targets)
            )
        )  # fmt: skip
    finally:
        if own:
            await sess.close()
    return records


async def _drive(
    target: MixedTarget,
    times: list[int],
    sess: aiohttp.ClientSession,
    clk: Clock,
    origin: int,
    stop: asyncio.Event,
    out: list[MixedRecord],
) -> None:
    tasks: set[asyncio.Task[None]] = set()
    for at in times:
        delay = (origin + at - clk.now_ns()) / 1e9
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
        if stop.is_set():
            break
        task = asyncio.create_task(_one(target, at, sess, clk, origin, out))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)


async def _one(
    target: MixedTarget, at: int, sess: aiohttp.ClientSession, clk: Clock, origin: int, out: list[MixedRecord]
) -> None:
    import aiohttp

    sent = clk.now_ns() - origin
    headers = dict(target.headers)
    data = target.body.encode() if target.body is not None else None
    if data is not None and target.body is not None and target.body.lstrip().startswith(("{", "[")):
        headers.setdefault("Content-Type", "application/json")
    try:
        async with sess.request(
            target.method,
            target.url,
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=target.timeout_s),
        ) as resp:
            await resp.read()
            out.append(MixedRecord(target.name, at, sent, clk.now_ns() - origin, resp.status))
    except TimeoutError:
        out.append(MixedRecord(target.name, at, sent, clk.now_ns() - origin, None, "timeout"))
    except aiohttp.ClientConnectionError:
        out.append(MixedRecord(target.name, at, sent, clk.now_ns() - origin, None, "connect"))
    except aiohttp.ClientError as exc:
        out.append(MixedRecord(target.name, at, sent, clk.now_ns() - origin, None, type(exc).__name__))


#: mixed traffic of a run bounded only by a request count is scheduled this far ahead and stopped with the LLM load.
MIXED_HORIZON_S = 3600.0


class MixedTraffic:
    """Plain HTTP targets sent beside the LLM load, from the run's start until the load stops.

    Args:
        targets: the profile's ``mixed_traffic`` entries.
        clock: the run's clock.
        t0_ns: the run's start on ``clock`` (mixed records share the run's time origin).
        duration_s: the run's duration bound, or None when only a request count bounds it (then the traffic runs
            until :meth:`finish`, at most :data:`MIXED_HORIZON_S`).
        seed: the run's seed.
    """

    def __init__(
        self,
        targets: Sequence[MixedTarget],
        *,
        clock: Clock,
        t0_ns: int,
        duration_s: float | None,
        seed: int = 0,
    ) -> None:
        self._stop = asyncio.Event()
        self._task: asyncio.Task[list[MixedRecord]] | None = None
        if targets:
            self._task = asyncio.create_task(
                run_mixed(
                    targets,
                    duration_s=duration_s if duration_s is not None else MIXED_HORIZON_S,
                    stop=self._stop,
                    clock=clock,
                    t0_ns=t0_ns,
                    seed=seed,
                )
            )

    async def finish(self, *, grace_s: float = 15.0) -> dict[str, Any]:
        """Stop scheduling, let requests in flight finish (each has its own timeout) and summarize per target.

        Returns:
            ``{target name: MixedSummary.to_dict()}`` (empty without targets).
        """
        if self._task is None:
            return {}
        self._stop.set()
        try:
            records = await asyncio.wait_for(asyncio.shield(self._task), grace_s)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            return {}
        return {name: s.to_dict() for name, s in summarize_mixed(records).items()}

    async def cancel(self) -> None:
        """Stop at once (the run failed)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
