"""The load generator: request stream → dispatch (open or closed loop) → records.

Open loop: each request is sent at its precomputed absolute target time ``t0 + at_ns``; the dispatcher never waits
for responses, and a late send is recorded as send lag (``sent − scheduled``) while latencies stay measured from the
schedule. Closed loop: ``concurrency`` workers each send their next request as soon as their previous one ends; that
moment is the request's ``scheduled`` time. Multi-turn sessions: the turns of a session follow its turn 0 directly in
the request stream; each later turn is due ``think_time`` after the previous turn's last token and carries the whole
conversation so far. Call graphs (trace → load, agent profiles): each call waits for the calls in its ``after`` and
then for its gap; a call with ``answers_from`` has their answers' text placed into its prompt when it is sent (after
its own text, or where its ``prompt_template`` says).

A capped open loop (``max_in_flight``): a request due while every slot is taken waits for one; it keeps its
scheduled time, so the wait is send lag and counts in its latencies.

This module holds the dispatch (the stream, the open and closed loops, the stop and the drain);
``runner/session_dispatch.py`` runs sessions and call graphs, ``runner/sender.py`` times and sends one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tailscope.metrics.percentiles import Stats, compute_stats
from tailscope.runner.sender import Prepared
from tailscope.runner.session_dispatch import SessionDispatch
from tailscope.workload.spec import RequestSpec


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    """How the generator dispatches and when it stops.

    Attributes:
        concurrency: closed-loop slots; ``None`` = open loop (every spec must carry ``at_ns``).
        duration_s: stop starting requests after this many seconds (``None`` = when the stream ends).
        drain_timeout_s: after the stop, how long in-flight requests may take to finish before they are cancelled
            (and recorded as incomplete).
        grace_s: the same limit when the run is interrupted (SIGINT/SIGTERM).
        max_in_flight: open loop only: at most this many requests (sessions) in flight; a request due while every
            slot is taken waits for one, and its latencies still count from its scheduled time (the wait is send lag).
        stagger_s: closed loop only: slot ``i`` of ``all_slots`` sends its first request ``i / all_slots ×
            stagger_s`` after the start (0: every slot at once); that moment is the request's scheduled time.
        first_slot, all_slots: this generator's first slot among ``all_slots`` (a worker process holds a share of a
            run's slots; default: slot 0 of ``concurrency``).
    """

    concurrency: int | None = None
    duration_s: float | None = None
    drain_timeout_s: float = 600.0
    grace_s: float = 5.0
    max_in_flight: int | None = None
    stagger_s: float = 0.0
    first_slot: int = 0
    all_slots: int | None = None

    def slot_start_ns(self, slot: int) -> int:
        """When this generator's closed-loop slot ``slot`` sends its first request, ns after the start."""
        total = self.all_slots or self.concurrency or 1
        return int(self.stagger_s * 1e9) * (self.first_slot + slot) // total


@dataclass(frozen=True, slots=True)
class DispatchResult:
    """What the dispatcher observed about itself."""

    interrupted: bool
    signal_name: str | None
    loop_lag_ms: Stats
    t0_ns: int


class LoadGenerator(SessionDispatch):
    """Drives one run.

    Args:
        transport: the HTTP transport (shared pool).
        options: request shaping (endpoint, model, extensions).
        timeouts: per-request limits.
        synth: prompt synthesizer.
        sink: called with every finished record (from the event loop thread).
        clock: monotonic clock.
        count_tokens: local tokenizer counter for per-chunk counts, if configured.
        progress: live counters for the display.
    """

    _builder: _Builder | None = None  # the closed loop's next-request builder, while it runs

    # -- control -----------------------------------------------------------------------------------------------
    def interrupt(self, signal_name: str = "SIGINT") -> None:
        """Stop scheduling now; in-flight requests get the grace period (safe from signal handlers)."""
        self._signal = signal_name
        self._interrupt.set()
        self._stop.set()

    def stop(self) -> None:
        """Stop scheduling new requests (in-flight ones drain)."""
        self._stop.set()

    # -- stream handling -----------------------------------------------------------------------------------------
    def prepare(self, specs: Iterator[RequestSpec], n: int) -> None:
        """Build the first ``n`` requests (prompt text, session turns) now, before the run starts: the first wave
        then goes out without the client synthesizing hundreds of prompts while its first tokens arrive."""
        for _ in range(n):
            prep = self._next(specs)
            if prep is None:
                return
            self._ready.append(prep)

    def _next(self, specs: Iterator[RequestSpec]) -> Prepared | None:
        """Next spec to dispatch, with the later turns of its session gathered (they follow it in the stream)."""
        if self._ready:
            return self._ready.popleft()
        spec: RequestSpec | None
        if self._lookahead is not None:
            spec, self._lookahead = self._lookahead, None
        else:
            spec = next(specs, None)
        if spec is None:
            return None
        followups: list[RequestSpec] = []
        if spec.session_id is not None:
            for nxt in specs:
                if nxt.session_id == spec.session_id and (nxt.turn or 0) > 0:
                    followups.append(nxt)
                else:
                    self._lookahead = nxt
                    break
        prompt: str | list[dict[str, str]]
        if spec.messages is not None:  # a dataset's chat, sent verbatim
            prompt = [{"role": role, "content": content} for role, content in spec.messages]
        elif spec.prompt is not None:  # a dataset's prompt
            prompt = spec.prompt
        else:
            prompt = self.synth.make(
                spec.input_tokens, spec.seed, prefix_id=spec.prefix_id, prefix_tokens=spec.prefix_tokens
            )
        return Prepared(spec=spec, prompt=prompt, followups=followups)

    # -- loops -----------------------------------------------------------------------------------------------------
    async def run(
        self, specs: Iterator[RequestSpec], cfg: DispatchConfig, *, t0_ns: int | None = None
    ) -> DispatchResult:
        """Dispatch the whole stream; returns when every request finished, drained or was cancelled.

        Args:
            t0_ns: the run's start on ``clock`` (default: now); schedules are relative to it.
        """
        self._t0 = self.clock.now_ns() if t0_ns is None else t0_ns
        lag = array("d")  # 100 samples/s all run long: 8 bytes each, not a float object each (hours of soak)
        monitor = asyncio.create_task(self._monitor_loop(lag))
        tasks: set[asyncio.Task[None]] = set()
        stopper = None
        if cfg.duration_s is not None:
            stopper = asyncio.get_running_loop().call_later(cfg.duration_s, self._stop.set)
        try:
            if cfg.concurrency is None:
                await self._open_loop(specs, tasks, cfg.max_in_flight)
            else:
                self._builder = _Builder(self, specs, asyncio.get_running_loop())
                workers = [
                    asyncio.create_task(self._worker(specs, cfg.slot_start_ns(i))) for i in range(cfg.concurrency)
                ]
                tasks.update(workers)
            await self._drain(tasks, cfg)
        finally:
            self._builder = None  # the closed loop's builder (and the specs it holds) ends with the run
            if stopper is not None:
                stopper.cancel()
            monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await monitor
        return DispatchResult(
            interrupted=self._interrupt.is_set(),
            signal_name=self._signal,
            loop_lag_ms=compute_stats(lag),
            t0_ns=self._t0,
        )

    async def _open_loop(
        self, specs: Iterator[RequestSpec], tasks: set[asyncio.Task[None]], cap: int | None = None
    ) -> None:
        slots = asyncio.Semaphore(cap) if cap is not None else None

        def free_slot(_task: asyncio.Task[None]) -> None:
            if slots is not None:
                slots.release()

        while not self._stop.is_set():
            prep = self._next(specs)
            if prep is None:
                return
            at = prep.spec.at_ns if prep.spec.at_ns is not None else self._now_rel()
            if not await self._sleep_until(at):
                return
            if slots is not None and not await self._take_slot(slots):
                return
            task = asyncio.create_task(self._run_prepared(prep, at))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            if slots is not None:
                task.add_done_callback(free_slot)

    async def _take_slot(self, slots: asyncio.Semaphore) -> bool:
        """A capped open loop: wait for a free slot (the request keeps its scheduled time, so the wait is send lag
        and counts in its latencies: no coordinated omission); False when the run stopped meanwhile."""
        if not slots.locked():
            await slots.acquire()
            return True
        take = asyncio.ensure_future(slots.acquire())
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({take, stop}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            take.cancel()
            raise
        finally:
            stop.cancel()
        if take.done() and not take.cancelled():
            if self._stop.is_set():
                slots.release()
                return False
            return True
        take.cancel()
        return False

    async def _worker(self, specs: Iterator[RequestSpec], start: int = 0) -> None:
        # A slot's first request is due at its start — the run start, or its share of --stagger: the time the client
        # takes to get it out (prompt, body, a connection) is its send lag, not server latency. Later ones are due
        # when the slot's previous request ended.
        # The slot's next request (its prompt) is built while the current one streams — asked of the shared builder
        # as the current one goes out — not when it ends: in a closed loop requests end in waves, and building
        # hundreds of prompts then would hold the loop while the next wave's first tokens arrive. The builder makes
        # one per event-loop turn: 256 slots started (or freed) together would otherwise run 256 builds (≈ 50 µs
        # each) back to back in one turn, and every token read that arrived meanwhile would be stamped that late.
        builder = self._builder
        assert builder is not None
        slot = _Slot()
        scheduled = start
        if start > 0 and not await self._sleep_until(start):
            return
        prep = self._next(specs)
        while prep is not None and not self._stop.is_set():
            builder.want(slot)
            await self._run_prepared(prep, scheduled)
            scheduled = self._now_rel()
            prep = builder.take(slot)

    async def _drain(self, tasks: set[asyncio.Task[None]], cfg: DispatchConfig) -> None:
        """Wait for in-flight work; cancel what outlives the drain (or, after an interrupt, the grace) period."""
        pending: set[asyncio.Future[Any]] = set(tasks)
        if not pending:
            return
        deadline = time.monotonic() + cfg.drain_timeout_s
        interrupted_at: float | None = time.monotonic() if self._interrupt.is_set() else None
        interrupt_wait = asyncio.ensure_future(self._interrupt.wait())
        try:
            while pending:
                limit = deadline if interrupted_at is None else min(deadline, interrupted_at + cfg.grace_s)
                timeout = limit - time.monotonic()
                if timeout <= 0:
                    for t in pending:
                        t.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    return
                waitset = set(pending)
                if not interrupt_wait.done():
                    waitset.add(interrupt_wait)
                done, _ = await asyncio.wait(waitset, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if interrupt_wait in done and interrupted_at is None:
                    interrupted_at = time.monotonic()
                done.discard(interrupt_wait)
                pending -= done
                for t in done:
                    exc = None if t.cancelled() else t.exception()
                    if exc is not None:
                        raise exc
        finally:
            interrupt_wait.cancel()

    async def _monitor_loop(self, lag: array[float]) -> None:
        """Event-loop lag: how late a 10 ms sleep wakes up (ms), sampled all run long."""
        interval = 0.01
        while True:
            t = time.perf_counter()
            await asyncio.sleep(interval)
            lag.append(max(0.0, (time.perf_counter() - t - interval) * 1000.0))
            self.progress.elapsed_s = self._now_rel() / 1e9


class _Slot:
    """A closed-loop slot's next request, once the builder made it (``ready``)."""

    __slots__ = ("prep", "ready")

    def __init__(self) -> None:
        self.prep: Prepared | None = None
        self.ready = False


class _Builder:
    """Builds the closed loop's next requests (prompts) one per event-loop turn, in the order the slots asked.

    Between two builds the loop polls the network, so a token read is never stamped behind a burst of builds; a slot
    whose request ended before its next one was built takes it straight from the stream (``take``).
    """

    def __init__(self, gen: LoadGenerator, specs: Iterator[RequestSpec], loop: asyncio.AbstractEventLoop) -> None:
        self._gen = gen
        self._specs = specs
        self._loop = loop
        self._wanting: deque[_Slot] = deque()
        self._armed = False

    def want(self, slot: _Slot) -> None:
        slot.ready = False
        slot.prep = None
        self._wanting.append(slot)
        if not self._armed:
            self._armed = True
            self._loop.call_soon(self._build_one)

    def _build_one(self) -> None:
        self._armed = False
        if not self._wanting:
            return
        slot = self._wanting.popleft()
        if not self._gen._stop.is_set():
            slot.prep = self._gen._next(self._specs)
            slot.ready = True
        if self._wanting:
            self._armed = True
            self._loop.call_soon(self._build_one)

    def take(self, slot: _Slot) -> Prepared | None:
        """The slot's next request: the one built for it, else the next from the stream now."""
        if slot.ready:
            slot.ready = False
            prep, slot.prep = slot.prep, None
            return prep
        with contextlib.suppress(ValueError):
            self._wanting.remove(slot)
        return self._gen._next(self._specs)
