"""Sending one request of a run, on time: the load generator's state, its clock relative to the run start, the
never-early sleep to a target time, and the send itself (the progress counters and the record sink).

:class:`Sender` is the base of :class:`~tailscope.runner.loadgen.LoadGenerator`; ``runner/session_dispatch.py``
runs sessions and call graphs over it, ``runner/loadgen.py`` the open and closed loops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tailscope.client.openai import ClientOptions, Outcome, Timeouts, execute
from tailscope.client.transport import Transport
from tailscope.clock import Clock
from tailscope.records import RequestRecord
from tailscope.runner.progress import Progress
from tailscope.workload.prompts import PromptSynthesizer
from tailscope.workload.spec import RequestSpec

__all__ = ["Prepared", "Sender"]

#: below this much time left before a send, the dispatcher yields to the loop instead of arming a timer (seconds)
_SPIN_S = 0.0002


@dataclass(slots=True)
class Prepared:
    """A request ready to go: its prompt built, the later turns (or calls) of its session gathered."""

    spec: RequestSpec
    prompt: str | list[dict[str, str]]
    followups: list[RequestSpec]


class Sender:
    """The state of one run's dispatch and the sending of its requests (arguments: see
    :class:`~tailscope.runner.loadgen.LoadGenerator`)."""

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
        self._ready: deque[Prepared] = deque()  # requests prepared before the run started (the first wave)
        self._t0 = 0
        self.step_names: dict[int, str] = {}  # request id → agent step name, for requests sent
        self.planned: dict[str, int] = {}  # agent session id → calls planned, for measured sessions that started

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
