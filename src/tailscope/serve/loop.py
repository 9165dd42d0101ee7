"""The wall-clock engine loop: one asyncio task steps a :class:`ReplicaEngine` and releases its tokens on time.

Engine time is wall time since the loop started, multiplied by ``speed``. While the engine has work the loop
repeatedly calls ``step(start)``, sleeps until the step's absolute end (``start + duration`` mapped to the wall
clock) and then releases the tokens the step produced to each request's :class:`LiveRequest`. Back-to-back steps
start exactly where the previous one ended in engine time, so a late wake-up never shifts later steps (no drift);
only when the loop falls more than ``max_catchup_s`` behind (the host is overloaded) does it restart the engine
timeline at "now" and count the step as late.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tailscope.clock import Clock, MonotonicClock
from tailscope.engine.api import EngineRequest, ReplicaEngine, StepResult
from tailscope.serve.metrics import ServeMetrics

_LATE_NS = 5_000_000  # a release more than 5 ms after its scheduled end counts as late

#: one prefill chunk of a request, on the loop's clock: (step start, step due end, chunk tokens, tokens computed
#: before the chunk, the step's prefill tokens, the step's decoding sequences, the pool that ran it: ``""`` on an
#: aggregated engine, ``prefill`` or ``decode`` on a disaggregated one)
Chunk = tuple[int, int, int, int, int, int, str]


class EngineLoopFailed(RuntimeError):
    """The engine loop's task failed: no request would ever be served (the exception that ended it is ``cause``)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(cause)
        self.cause = cause

    def __str__(self) -> str:
        return f"the engine loop failed ({type(self.cause).__name__}: {self.cause}); restart tailscope serve"


@dataclass(eq=False, slots=True)
class LiveRequest:
    """A request being served: the handler reads tokens from it as the loop releases them.

    Attributes:
        id: engine request id.
        prompt_tokens: prompt length in tokens.
        output_tokens: tokens the engine will produce for it.
        finish_reason: reason reported when all tokens are out (``"length"`` or ``"stop"``).
        max_tokens_param: the client's ``max_tokens`` (``None`` when not given).
        arrival_ns: clock time the HTTP request was received (its TTFT and E2E start there).
        queued_ns: clock time it was handed to the engine (after the API server's latency).
        scheduled_ns: clock time of the start of the step that first scheduled it (its queue wait ends), when the
            engine reports admissions; else None.
        released: tokens released so far.
        first_token_ns / last_token_ns: clock times of the first and latest release.
        done: all tokens released.
        aborted: dropped before finishing (client gone or server stopping).
        sink: when set, called synchronously by the loop on every release instead of waking the handler (the
            streaming fast path writes to the socket from there); the handler is then woken only at the end.
        chunks: with the loop's ``record_chunks``, one :data:`Chunk` per prefill chunk the engine ran for it (its
            step's clock start and due end, the chunk's tokens, the tokens computed before it, the step's prefill
            tokens and decoding sequences, and the pool); else None.
        kv_transfer: with ``record_chunks`` on a disaggregated engine, the clock times its KV left the prefill rank
            and reached the decode worker; else None.
    """

    id: int
    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    max_tokens_param: int | None
    arrival_ns: int
    queued_ns: int = 0
    scheduled_ns: int | None = None
    released: int = 0
    cached_tokens: int | None = None  # prompt tokens found in the prefix cache when first scheduled
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    done: bool = False
    aborted: bool = False
    sink: Callable[[LiveRequest], None] | None = None
    chunks: list[Chunk] | None = None
    kv_transfer: tuple[int, int] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_beyond(self, seen: int) -> None:
        """Return once more than ``seen`` tokens are released, or the request is done or aborted."""
        while self.released <= seen and not self.done and not self.aborted:
            self._changed.clear()
            await self._changed.wait()

    async def wait_finished(self) -> None:
        """Return once the request is done or aborted."""
        while not self.done and not self.aborted:
            self._changed.clear()
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One executed step on the wall clock (for tests and debugging).

    Attributes:
        due_ns: clock time the step's tokens were due (its end on the engine timeline).
        released_ns: clock time they were actually released.
        result: the engine's step result.
    """

    due_ns: int
    released_ns: int
    result: StepResult


class EngineLoop:
    """Drives one engine on the wall clock.

    Args:
        engine: the replica engine (only this loop touches it, from the event loop's thread).
        metrics: where request histograms and loop lag are recorded.
        clock: monotonic nanosecond clock (must match the event loop's clock for sleeping).
        speed: engine seconds per wall second (2.0 = twice as fast as the modelled hardware).
        max_catchup_s: how far behind schedule (wall seconds) the loop may run before it gives up catching up.
        spin_s: the last stretch before a step's end (seconds) is waited by yielding to the event loop in a loop
            rather than by a timer, whose wake-up is up to 1 ms late; costs a little CPU while steps run.
        step_log: how many recent :class:`StepRecord` to keep (each holds its step's emitted list: bounded memory).
        record_chunks: keep each request's prefill chunks (:attr:`LiveRequest.chunks`, from the engine's ``on_chunk``
            hook, or a disaggregated engine's ``watch_phases``, which also reports the KV transfers) for its per-phase
            spans; off, the engine is not asked.
    """

    def __init__(
        self,
        engine: ReplicaEngine,
        metrics: ServeMetrics,
        *,
        clock: Clock | None = None,
        speed: float = 1.0,
        max_catchup_s: float = 0.25,
        step_log: int = 512,
        spin_s: float = 0.001,
        record_chunks: bool = False,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0 (got {speed!r})")
        self.engine = engine
        self.metrics = metrics
        self.clock: Clock = clock or MonotonicClock()
        self.speed = speed
        self._max_catchup_ns = int(max_catchup_s * 1e9)
        self._spin_ns = int(spin_s * 1e9)
        self._origin_ns = self.clock.now_ns()
        self._live: dict[int, LiveRequest] = {}
        self._next_id = 1
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.failure: EngineLoopFailed | None = None  # set when the loop task failed; ``.cause`` ended it (see _run)
        self.steps: deque[StepRecord] = deque(maxlen=step_log)
        self._step_start = 0  # engine time of the step being run (admissions are stamped with it)
        if hasattr(engine, "on_admit"):
            engine.on_admit = self._admitted
        self._step_chunks: list[tuple[int, int, int]] = []  # (request id, tokens, computed before) of this step
        self.record_chunks = False
        if record_chunks and hasattr(engine, "watch_phases"):  # ranks on their own timelines: they stamp their chunks
            engine.watch_phases(self._chunk_at, self._transfer)
            self.record_chunks = True
        elif record_chunks and hasattr(engine, "on_chunk"):
            engine.on_chunk = self._chunk
            self.record_chunks = True

    # -- time mapping ---------------------------------------------------------------------------------------------

    def engine_now(self) -> int:
        """Current engine time in ns."""
        return round((self.clock.now_ns() - self._origin_ns) * self.speed)

    def to_wall(self, engine_ns: int) -> int:
        """Clock time (ns) at which engine time ``engine_ns`` is reached."""
        return self._origin_ns + round(engine_ns / self.speed)

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop task on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tailscope-engine-loop")

    async def stop(self) -> None:
        """Stop the loop and abort every live request (their handlers see ``aborted``)."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for live in list(self._live.values()):
            self.abort(live)

    @property
    def live_count(self) -> int:
        """Requests submitted and not yet finished or aborted."""
        return len(self._live)

    # -- requests -------------------------------------------------------------------------------------------------

    def submit(
        self,
        *,
        prompt_tokens: int,
        output_tokens: int,
        block_hashes: tuple[int, ...] = (),
        finish_reason: str = "length",
        max_tokens_param: int | None = None,
        received_ns: int | None = None,
    ) -> LiveRequest:
        """Queue a request on the engine; ``received_ns`` (clock ns, default now) starts its TTFT and E2E.

        Raises:
            ValueError: from the engine when the prompt can never fit its KV cache.
            EngineLoopFailed: when the loop task has failed (no request would ever be served).
        """
        if self.failure is not None:
            raise EngineLoopFailed(self.failure.cause)
        rid = self._next_id
        self._next_id += 1
        now = self.clock.now_ns()
        live = LiveRequest(
            id=rid,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            finish_reason=finish_reason,
            max_tokens_param=max_tokens_param,
            arrival_ns=now if received_ns is None else received_ns,
            queued_ns=now,
        )
        self.engine.add_request(
            EngineRequest(
                id=rid,
                prompt_tokens=prompt_tokens,
                max_tokens=output_tokens,
                arrival_ns=self.engine_now(),
                block_hashes=block_hashes,
            )
        )
        self._live[rid] = live
        self._wake.set()
        return live

    def _admitted(self, rid: int, hit_tokens: int = 0, at_ns: int | None = None) -> None:
        """The engine first scheduled ``rid`` in the step starting at ``at_ns`` (engine ns; default: this step)."""
        live = self._live.get(rid)
        if live is not None and live.scheduled_ns is None:
            live.scheduled_ns = max(self.to_wall(self._step_start if at_ns is None else at_ns), live.queued_ns)
            live.cached_tokens = hit_tokens

    def _chunk(self, rid: int, tokens: int, computed: int) -> None:
        self._step_chunks.append((rid, tokens, computed))

    def _chunk_at(
        self, rid: int, tokens: int, computed: int, start: int, end: int, prefill: int, decodes: int, pool: str
    ) -> None:
        """A ranked engine's chunk (disaggregated pools, attention-DP ranks), with its rank step's engine times."""
        live = self._live.get(rid)
        if live is None:
            return
        chunk = (self.to_wall(start), self.to_wall(end), tokens, computed, prefill, decodes, pool)
        if live.chunks is None:
            live.chunks = [chunk]
        else:
            live.chunks.append(chunk)

    def _transfer(self, rid: int, start: int, end: int) -> None:
        live = self._live.get(rid)
        if live is not None:
            live.kv_transfer = (self.to_wall(start), self.to_wall(end))

    def _stamp_chunks(self, result: StepResult) -> None:
        """Give this step's prefill chunks their clock times (the step's start and due end, exact engine times)."""
        start = self.to_wall(result.start_ns)
        due = self.to_wall(result.start_ns + result.duration_ns)
        n_dec = result.decode_tokens
        for rid, tokens, computed in self._step_chunks:
            live = self._live.get(rid)
            if live is None:
                continue
            chunk = (start, due, tokens, computed, result.prefill_tokens, n_dec, "")
            if live.chunks is None:
                live.chunks = [chunk]
            else:
                live.chunks.append(chunk)
        self._step_chunks.clear()

    def abort(self, live: LiveRequest) -> None:
        """Drop ``live`` from the engine (no-op once it finished); counts it as ``finished_reason="abort"``."""
        if self._live.pop(live.id, None) is None:
            return
        self.engine.abort(live.id)
        live.aborted = True
        now = self.clock.now_ns()
        self.metrics.observe_finished(
            reason="abort",
            e2e_s=(now - live.arrival_ns) / 1e9,
            prompt_tokens=live.prompt_tokens,
            generation_tokens=live.released,
            max_tokens=live.max_tokens_param,
        )
        live._notify()

    # -- the loop -------------------------------------------------------------------------------------------------

    async def _sleep_until(self, due_ns: int) -> None:
        delay = (due_ns - self.clock.now_ns() - self._spin_ns) / 1e9
        # sleep(0) still yields, so handlers write the previous step's tokens even when we are behind
        await asyncio.sleep(delay if delay > 0 else 0)
        # timers wake up to ~1 ms late (epoll's millisecond resolution); the last stretch yields in a loop instead
        while self.clock.now_ns() < due_ns:  # noqa: ASYNC110 (a deliberate short spin, not waiting on an event)
            await asyncio.sleep(0)

    async def _run(self) -> None:
        """Step the engine until stopped. Should a step raise (a bug), the loop must not die silently with requests
        waiting on it for ever: the failure is kept (:attr:`failure`, ``/health`` answers 503 from then on), printed
        to standard error with its traceback, every live request is aborted (their clients see the stream end) and
        later submissions are refused."""
        try:
            await self._steps()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failure = EngineLoopFailed(exc)
            print("tailscope serve: the engine loop failed; requests are refused from now on:", file=sys.stderr)
            traceback.print_exception(exc, file=sys.stderr)
            for live in list(self._live.values()):
                self.abort(live)

    async def _steps(self) -> None:
        prev_end: int | None = None
        while not self._stopping:
            if not self.engine.has_work():
                prev_end = None
                self._wake.clear()
                await self._wake.wait()
                continue
            now = self.engine_now()
            if prev_end is not None and now - prev_end <= self._max_catchup_ns * self.speed:
                start = prev_end  # continue the engine timeline exactly where the last step ended
            else:
                start = now
            self._step_start = start
            result = self.engine.step(start)
            if result is None:  # work exists but nothing can be scheduled right now
                self._step_chunks.clear()
                prev_end = None
                await asyncio.sleep(0.001)
                continue
            if self._step_chunks:
                self._stamp_chunks(result)
            end = result.start_ns + result.duration_ns
            due = self.to_wall(end)
            await self._sleep_until(due)
            released = self.clock.now_ns()
            lag = released - due
            if lag > _LATE_NS:
                self.metrics.loop_late_steps += 1
            self.metrics.loop_lag_max_s = max(self.metrics.loop_lag_max_s, lag / 1e9)
            self._release(result, released)
            self.steps.append(StepRecord(due_ns=due, released_ns=released, result=result))
            prev_end = end

    def _release(self, result: StepResult, now: int) -> None:
        work = result.prefill_tokens + result.decode_tokens
        if work > 0:
            self.metrics.iteration_tokens.observe(work)
        finished = set(result.finished)
        for rid, n in result.emitted:
            live = self._live.get(rid)
            if live is None or n <= 0:
                continue
            if live.last_token_ns is None:
                live.first_token_ns = now
                self.metrics.ttft.observe((now - live.arrival_ns) / 1e9)
            else:
                self.metrics.itl.observe((now - live.last_token_ns) / 1e9)
            live.last_token_ns = now
            live.released += n
            if rid in finished:
                live.done = True  # before the writer sees the tokens, so that the last one carries finish_reason
            if live.sink is not None:
                self._call_sink(live)
            else:
                live._notify()
        for rid in finished:
            live = self._live.pop(rid, None)
            if live is None:
                continue
            live.done = True
            self.metrics.observe_finished(
                reason=live.finish_reason,
                e2e_s=(now - live.arrival_ns) / 1e9,
                prompt_tokens=live.prompt_tokens,
                generation_tokens=live.released,
                max_tokens=live.max_tokens_param,
                decode_s=(now - live.first_token_ns) / 1e9 if live.first_token_ns is not None else None,
            )
            if live.sink is not None:
                self._call_sink(live)  # idempotent: writes the end of the stream if the tokens did not
            live._notify()

    def flush(self, live: LiveRequest) -> None:
        """Call ``live``'s sink now (for what was released before the sink was set); no-op once aborted."""
        if live.sink is not None and not live.aborted:
            self._call_sink(live)

    def _call_sink(self, live: LiveRequest) -> None:
        sink = live.sink
        assert sink is not None
        try:
            sink(live)
        except Exception:  # a broken writer must not stop the engine loop: drop that one request
            live.sink = None
            self.abort(live)
