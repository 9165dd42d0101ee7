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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tailscope.client.openai import ClientOptions, Outcome, Timeouts, execute
from tailscope.client.transport import Transport
from tailscope.clock import Clock
from tailscope.metrics.percentiles import Stats, compute_stats
from tailscope.records import RequestRecord
from tailscope.runner.progress import Progress
from tailscope.workload.answer_template import ANSWER_SEP, parse_template
from tailscope.workload.prompts import PromptSynthesizer
from tailscope.workload.spec import RequestSpec

#: below this much time left before a send, the dispatcher yields to the loop instead of arming a timer (seconds)
_SPIN_S = 0.0002


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
    """

    concurrency: int | None = None
    duration_s: float | None = None
    drain_timeout_s: float = 600.0
    grace_s: float = 5.0
    max_in_flight: int | None = None


@dataclass(frozen=True, slots=True)
class DispatchResult:
    """What the dispatcher observed about itself."""

    interrupted: bool
    signal_name: str | None
    loop_lag_ms: Stats
    t0_ns: int


@dataclass(slots=True)
class _Prepared:
    spec: RequestSpec
    prompt: str | list[dict[str, str]]
    followups: list[RequestSpec]


class LoadGenerator:
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

    def __init__(
        self,
        transport: Transport,
        options: ClientOptions,
        timeouts: Timeouts,
        synth: PromptSynthesizer,
        sink: Callable[[RequestRecord], None],
        clock: Clock,
        *,
        count_tokens: Callable[[str], int] | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.transport = transport
        self.options = options
        self.timeouts = timeouts
        self.synth = synth
        self.sink = sink
        self.clock = clock
        self.count_tokens = count_tokens
        self.progress = progress or Progress()
        self._stop = asyncio.Event()
        self._interrupt = asyncio.Event()
        self._signal: str | None = None
        self._lookahead: RequestSpec | None = None
        self._ready: deque[_Prepared] = deque()  # requests prepared before the run started (the first wave)
        self._t0 = 0
        self.step_names: dict[int, str] = {}  # request id → agent step name, for requests sent
        self.planned: dict[str, int] = {}  # agent session id → calls planned, for measured sessions that started

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

    def _next(self, specs: Iterator[RequestSpec]) -> _Prepared | None:
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
        return _Prepared(spec=spec, prompt=prompt, followups=followups)

    def _now_rel(self) -> int:
        return self.clock.now_ns() - self._t0

    async def _sleep_until(self, target_rel_ns: int) -> bool:
        """Sleep until ``t0 + target``, never returning before it; False when the run was stopped meanwhile.

        Never early: event-loop timers may fire up to a timer tick (uvloop: 1 ms) before their due time, so the
        remainder is slept again, and the last fraction of a millisecond is waited out by yielding to the loop.
        """
        while True:
            delay = (target_rel_ns - self._now_rel()) / 1e9
            if delay <= 0 or self._stop.is_set():
                break
            if delay > _SPIN_S:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
            else:
                await asyncio.sleep(0)
        return not self._stop.is_set()

    # -- sending ----------------------------------------------------------------------------------------------------
    async def _send(
        self,
        spec: RequestSpec,
        prompt: str | list[dict[str, str]],
        scheduled: int,
        input_hint: int,
        *,
        shared_prefix: bool | None = None,
    ) -> Outcome:
        p = self.progress
        p.sent += 1
        p.in_flight += 1
        try:
            out = await execute(
                self.transport,
                self.options,
                request_id=spec.id,
                prompt=prompt,
                max_tokens=spec.output_tokens,
                scheduled_ns=scheduled,
                t0_ns=self._t0,
                clock=self.clock,
                timeouts=self.timeouts,
                count_tokens=self.count_tokens,
                request_class=spec.request_class,
                session_id=spec.session_id,
                turn=spec.turn,
                warmup=spec.warmup,
                shared_prefix=spec.prefix_id is not None if shared_prefix is None else shared_prefix,
                input_tokens_hint=input_hint,
                trace_id=spec.trace_id,
                span_id=spec.span_id,
                step=spec.step,
                depends_on=tuple(d for d, _ in spec.after) if spec.after else (),
                session_calls=spec.session_calls,  # an agent call carries its session's plan: a cut one is told apart
            )
        finally:
            p.in_flight -= 1
        r = out.record
        p.done += 1
        if not r.ok:
            p.failed += 1
            key = r.error.value if r.error else "unknown"
            p.errors[key] = p.errors.get(key, 0) + 1
        p.output_tokens += sum(r.chunk_tokens)
        p.note_tokens(self._now_rel() / 1e9)
        self.sink(r)
        return out

    async def _run_prepared(self, prep: _Prepared, scheduled: int) -> None:
        """Send a request, then (for a session) its later turns with think time and growing history."""
        spec = prep.spec
        if spec.session_id is None:
            await self._send(spec, prep.prompt, scheduled, spec.input_tokens)
            return
        if spec.step is not None or any(t.after or t.at_ns is not None for t in prep.followups):
            await self._run_graph(prep, scheduled)
            return
        # Only turn 0 is built with the shared prefix (the workload contract); later turns carry it inside their
        # history, so they still start with it and are marked shared, and the prefix is never sent twice.
        shared = spec.prefix_id is not None
        history: list[dict[str, str]] = (
            list(prep.prompt) if isinstance(prep.prompt, list) else [{"role": "user", "content": prep.prompt}]
        )
        out = await self._send(spec, list(history), scheduled, spec.input_tokens)
        context = spec.input_tokens  # the conversation so far, in (synthesized) tokens
        for turn in prep.followups:
            if not out.record.ok or self._stop.is_set():
                return
            history.append({"role": "assistant", "content": out.text})
            text = turn.prompt if turn.prompt is not None else self.synth.make(turn.input_tokens, turn.seed)
            history.append({"role": "user", "content": text})
            context += (out.record.output_tokens or 0) + turn.input_tokens
            prev_end = out.record.end_ns if out.record.end_ns is not None else self._now_rel()
            due = prev_end + turn.think_time_ns
            if not await self._sleep_until(due):
                return
            out = await self._send(turn, list(history), due, context, shared_prefix=shared)

    async def _run_graph(self, prep: _Prepared, scheduled: int) -> None:
        """A session shaped as a call graph (trace → load, agent profiles): each call waits for the calls in its
        ``after``, then for its gap after the latest of their ends (or, depending on none, for its own ``at_ns``);
        calls with no path between them run concurrently. A call whose dependency failed (or was never sent) is not
        sent. A call with ``answers_from`` gets those calls' answer text when it is sent: after its own, or where its
        ``prompt_template`` says."""
        ends: dict[int, asyncio.Future[int | None]] = {}
        answers: dict[int, Outcome] = {}
        loop = asyncio.get_running_loop()
        for s in (prep.spec, *prep.followups):
            ends[s.id] = loop.create_future()
        if prep.spec.step is not None and not prep.spec.warmup and prep.spec.session_id is not None:
            # as drawn: a session the stream's request count cut is incomplete
            self.planned[prep.spec.session_id] = max(1 + len(prep.followups), prep.spec.session_calls or 0)

        async def call(spec: RequestSpec, due: int | None, prompt: str | list[dict[str, str]]) -> None:
            end: int | None = None
            try:
                if due is None:
                    due_at = spec.at_ns
                    for dep, gap in spec.after:
                        dep_end = await ends[dep] if dep in ends else None
                        if dep_end is None:
                            return
                        due_at = dep_end + gap if due_at is None else max(due_at, dep_end + gap)
                    due = due_at if due_at is not None else scheduled  # a first step's branch: the session's start
                    if not await self._sleep_until(due):
                        return
                hint = spec.input_tokens
                if spec.answers_from and isinstance(prompt, str):
                    prompt, hint = self._with_answers(spec, prompt, [answers[a] for a in spec.answers_from])
                if spec.step is not None:
                    self.step_names[spec.id] = spec.step
                out = await self._send(spec, prompt, due, hint)
                if out.record.ok:
                    r = out.record
                    end = r.stream_end_ns or r.end_ns or self._now_rel()
                    answers[spec.id] = out
            finally:
                fut = ends[spec.id]
                if not fut.done():
                    fut.set_result(end)

        tasks = [call(prep.spec, scheduled, prep.prompt)]
        for turn in prep.followups:
            text = turn.prompt
            if text is None:
                text = self.synth.make(
                    turn.input_tokens, turn.seed, prefix_id=turn.prefix_id, prefix_tokens=turn.prefix_tokens
                )
            tasks.append(call(turn, None, text))
        await asyncio.gather(*tasks)

    def _with_answers(self, spec: RequestSpec, prompt: str, outs: list[Outcome]) -> tuple[str, int]:
        """The prompt with the answers placed (after it, one paragraph each, or where ``spec.prompt_template`` says,
        a shared prefix staying in front), and its length in tokens: counted with the tokenizer when one is loaded,
        else from the planned lengths and each answer's output tokens (the server's own prompt count, when it
        reports usage, is what the record keeps)."""
        texts = [o.text for o in outs]
        sizes = [o.record.output_tokens or len(o.text.split()) for o in outs]
        if spec.prompt_template is None:
            text = ANSWER_SEP.join([prompt, *texts])
            estimate = spec.input_tokens + sum(sizes)
        else:
            head, own, n_head = "", prompt, 0
            if spec.prefix_id is not None and spec.prefix_tokens > 0:
                pre = self.synth.prefix(spec.prefix_id, min(spec.prefix_tokens, spec.input_tokens))
                if prompt.startswith(pre):  # the agent's system prompt stays first (a prefix-cache hit)
                    head, own, n_head = pre + " ", prompt[len(pre) :].lstrip(" "), spec.prefix_tokens
            tmpl = parse_template(spec.prompt_template)
            text = head + tmpl.render(own, texts)
            estimate = n_head + tmpl.tokens(spec.input_tokens - n_head, sizes)
        counted = self.synth.count(text)
        return text, counted if counted is not None else estimate

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
                workers = [asyncio.create_task(self._worker(specs)) for _ in range(cfg.concurrency)]
                tasks.update(workers)
            await self._drain(tasks, cfg)
        finally:
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

    async def _worker(self, specs: Iterator[RequestSpec]) -> None:
        # A slot's first request is due at the run start (every slot starts at once): the time the client takes to
        # get it out (prompt, body, a connection) is its send lag, not server latency. Later ones are due when the
        # slot's previous request ended.
        # The slot's next request (its prompt) is built while the current one streams — a callback that runs once
        # the request is out — not when it ends: in a closed loop requests end in waves, and building hundreds of
        # prompts then would hold the loop while the next wave's first tokens arrive.
        loop = asyncio.get_running_loop()
        ahead: list[_Prepared | None] = []

        def build_next() -> None:
            if not self._stop.is_set():
                ahead.append(self._next(specs))

        scheduled = 0
        prep = self._next(specs)
        while prep is not None and not self._stop.is_set():
            loop.call_soon(build_next)
            await self._run_prepared(prep, scheduled)
            scheduled = self._now_rel()
            prep = ahead.pop() if ahead else self._next(specs)

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
