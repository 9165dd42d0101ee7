"""Degradation drills, the orchestration: a bounded load against the target while a fault is switched on at ``at_s``
and off ``for_s`` later — through the reference application's ``POST /admin/faults`` or a ``tailscope proxy``'s
``POST /rules`` — with the application's ``/admin/state`` counters polled to see when the fallback engaged.

The windows and the judgement are pure (:mod:`tailscope.verify.drill`); this module sends the load, drives the fault
and keeps the timeline. The fault is always switched off at the end, also when the load fails or is interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tailscope.errors import TargetError
from tailscope.runner.bench import run_bench
from tailscope.runner.bench_result import BenchResult
from tailscope.runner.options import BenchOptions
from tailscope.runner.progress import Progress
from tailscope.runner.resolve import resolve
from tailscope.store.runs import RunStore
from tailscope.verify.drill import PROXY_KIND, DrillFault, DrillSpec

#: How often the application's counters are read during a drill (seconds).
STATE_POLL_S = 0.25


@dataclass
class FaultTimeline:
    """What happened when, on the monotonic clock (``perf_counter_ns``); made relative to the load's start later."""

    start_ns: int | None = None
    end_ns: int | None = None
    fallback_ns: int | None = None  # the first fallback answer the application reported after the fault's start
    fallbacks_at_start: int | None = None
    fallbacks_at_end: int | None = None
    errors: list[str] = field(default_factory=list)


def _drill_rule(fault: DrillFault, drill_name: str) -> dict[str, Any]:
    rule = dict(fault.rule)
    if rule.get("name", "rule") == "rule":
        rule["name"] = f"drill-{drill_name}"
    return rule


class FaultDriver:
    """Switches one drill fault on and off over HTTP and watches the application's fallback counter."""

    def __init__(self, spec: DrillSpec, http: aiohttp.ClientSession) -> None:
        self.spec = spec
        self.fault = spec.fault
        self.http = http
        self.admin = (self.fault.admin or spec.url).rstrip("/")
        self.timeline = FaultTimeline()
        self._on = False
        self._rule = _drill_rule(self.fault, spec.name) if self.fault.kind == PROXY_KIND else {}

    async def _call(self, method: str, url: str, body: Any = None) -> Any:
        try:
            async with self.http.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    raise TargetError(f"{method} {url}: HTTP {resp.status} {text[:200]}")
                with contextlib.suppress(ValueError):
                    return await resp.json(content_type=None)
                return None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TargetError(f"{method} {url}: {exc or type(exc).__name__}") from None

    async def app_state(self) -> dict[str, Any] | None:
        """The application's ``/admin/state`` (None for a proxy fault, or when the target has no such endpoint)."""
        if self.fault.kind == PROXY_KIND:
            return None
        try:
            state = await self._call("GET", f"{self.admin}/admin/state")
        except TargetError:
            return None
        return state if isinstance(state, dict) else None

    async def preflight(self) -> None:
        """Reach the fault's switch before any load is sent.

        Raises:
            TargetError: the admin API does not answer (naming the URL and what to run).
        """
        if self.fault.kind == PROXY_KIND:
            try:
                await self._call("GET", f"{self.fault.proxy}/rules")
            except TargetError as exc:
                raise TargetError(
                    f"fault.proxy: the proxy's admin API does not answer ({exc}); start `tailscope proxy "
                    "--listen PORT --to URL --admin-port PORT` and give its admin URL"
                ) from None
            return
        try:
            state = await self._call("GET", f"{self.admin}/admin/state")
        except TargetError as exc:
            raise TargetError(
                f"fault {self.fault.kind!r}: {self.admin}/admin/state does not answer ({exc}); app faults need "
                "`tailscope app` as the target (or fault.admin), other systems a `tailscope proxy` (kind: proxy)"
            ) from None
        on = list(state.get("faults") or []) if isinstance(state, dict) else []
        if on or (isinstance(state, dict) and state.get("degrade")):
            what = f"faults {', '.join(on)} on" if on else f"degradation level {state['degrade']}"
            raise TargetError(
                f"{self.admin} is not healthy before the drill ({what}): the before-window would measure that; "
                f"clear it first (curl -X POST {self.admin}/admin/faults -d '{{\"clear\": true}}', "
                f'POST /admin/degrade {{"level": 0}})'
            )

    async def switch(self, on: bool) -> None:
        if self.fault.kind == PROXY_KIND:
            if on:
                await self._call("POST", f"{self.fault.proxy}/rules", self._rule)
            else:
                await self._call("DELETE", f"{self.fault.proxy}/rules/{self._rule['name']}")
        else:
            await self._call("POST", f"{self.admin}/admin/faults", {"fault": self.fault.kind, "on": on})
        self._on = on

    async def ensure_off(self) -> None:
        if self._on:
            try:
                await self.switch(False)
            except TargetError as exc:
                self.timeline.errors.append(f"could not switch the fault off: {exc}")
            if self.timeline.end_ns is None:
                self.timeline.end_ns = time.perf_counter_ns()

    async def drive(self, progress: Progress) -> None:
        """Wait for the load's first request, then switch the fault on at ``at_s`` and off at ``at_s + for_s``."""
        tl = self.timeline
        while progress.sent == 0:  # noqa: ASYNC110 (the load's counters are plain fields, no event to wait on)
            await asyncio.sleep(0.005)
        ref = time.perf_counter_ns()
        state = await self.app_state()
        base = int(state.get("fallbacks", 0)) if state else None
        await _sleep_until(ref + int(self.fault.at_s * 1e9))
        tl.start_ns = time.perf_counter_ns()
        await self.switch(True)
        tl.fallbacks_at_start = base
        end_at = tl.start_ns + int(self.fault.for_s * 1e9)
        while time.perf_counter_ns() < end_at:
            await asyncio.sleep(min(STATE_POLL_S, max(0.0, (end_at - time.perf_counter_ns()) / 1e9)))
            if base is not None and tl.fallback_ns is None:
                state = await self.app_state()
                if state and int(state.get("fallbacks", 0)) > base:
                    tl.fallback_ns = time.perf_counter_ns()
        tl.end_ns = time.perf_counter_ns()
        await self.switch(False)
        state = await self.app_state()
        if state is not None:
            tl.fallbacks_at_end = int(state.get("fallbacks", 0))
            if base is not None and tl.fallback_ns is None and tl.fallbacks_at_end > base:
                tl.fallback_ns = tl.end_ns


async def _sleep_until(t_ns: int) -> None:
    delay = (t_ns - time.perf_counter_ns()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)


@dataclass
class DrillRun:
    """A drill's load and its fault timeline (monotonic ns; ``bench.t0_ns`` is the load's start)."""

    bench: BenchResult
    timeline: FaultTimeline
    state_before: dict[str, Any] | None
    state_after: dict[str, Any] | None


def bench_options(spec: DrillSpec, *, seed: int | None = None) -> BenchOptions:
    """The bench options of a drill's load (no warmup: every request is in a window)."""
    ld = spec.load
    return BenchOptions(
        url=spec.url,
        model=spec.model,
        endpoint=spec.endpoint,
        profile=ld.profile,
        rate=ld.rate,
        concurrency=ld.concurrency,
        duration=ld.duration_s,
        output_tokens=ld.output_tokens,
        input_tokens=ld.input_tokens,
        warmup=0,
        seed=seed,
        metrics_url="off",
    )


async def run_drill(
    spec: DrillSpec,
    *,
    store: RunStore | None = None,
    seed: int | None = None,
    progress: Progress | None = None,
) -> DrillRun:
    """Run the drill's load with its fault; the fault is switched off whatever happens.

    Raises:
        ConfigError: bad load options (before any load). TargetError: the target or the fault's switch cannot be
            reached (before any load).
    """
    resolved = resolve(bench_options(spec, seed=seed))
    live = resolved.progress
    if progress is not None:
        progress.total, progress.duration_s = live.total, live.duration_s
        live = progress
    async with aiohttp.ClientSession() as http:
        driver = FaultDriver(spec, http)
        await driver.preflight()
        before = await driver.app_state()
        task = asyncio.create_task(driver.drive(live))
        try:
            result = await run_bench(resolved.config, resolved.specs, store=store, progress=live)
        finally:
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except TargetError as exc:
                    driver.timeline.errors.append(str(exc))
            await driver.ensure_off()
        after = await driver.app_state()
    return DrillRun(result, driver.timeline, before, after)
