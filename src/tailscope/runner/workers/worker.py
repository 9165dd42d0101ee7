"""One load-generator worker: its share of the schedule → records, inside a worker process or a Ray actor.

The worker is driven by a few messages from the driver (see :mod:`.wire`): ``setup`` (target, request
shaping, its share or its closed-loop slots), ``ping`` (its monotonic clock, for the driver's offset estimate),
``start`` (the common start barrier ``t0`` on *this* worker's clock), ``feed`` (more closed-loop requests), ``poll``
(records finished since the last poll, live counters, and at the end its own report) and ``stop``. All record times
are measured on the worker's own monotonic clock relative to ``t0``, so they line up with the other workers up to the
driver's clock-offset estimate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from tailscope.client.openai import ClientOptions, Timeouts
from tailscope.client.transport import Transport
from tailscope.clock import Clock, MonotonicClock
from tailscope.io.tokenizer import load_tokenizer
from tailscope.records import RequestRecord
from tailscope.runner.gc_window import freeze_setup, thaw
from tailscope.runner.loadgen import DispatchConfig, LoadGenerator
from tailscope.runner.progress import Progress
from tailscope.runner.workers.wire import record_to_wire, spec_from_wire
from tailscope.workload.prompts import PromptSynthesizer
from tailscope.workload.spec import RequestSpec
from tailscope.workload.template import RequestTemplate

#: how long before the barrier the worker hands its share to the dispatcher (it then waits on absolute times).
_ARM_AHEAD_NS = 20_000_000


class _BufferIter:
    """A resumable iterator over a deque: ``StopIteration`` while empty, more items after a feed."""

    __slots__ = ("buf",)

    def __init__(self, buf: deque[RequestSpec]) -> None:
        self.buf = buf

    def __iter__(self) -> _BufferIter:
        return self

    def __next__(self) -> RequestSpec:
        if not self.buf:
            raise StopIteration
        return self.buf.popleft()


class FedGenerator(LoadGenerator):
    """A :class:`LoadGenerator` whose closed-loop slots pull from a buffer the driver tops up.

    Slots wait for the start barrier (``t0``) before the first send, and wait (counted in ``starved_s``) when the
    buffer runs dry before the driver said the stream ended.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.buffer: deque[RequestSpec] = deque()
        self.eof = False
        self.starved_s = 0.0
        self._fed = asyncio.Event()

    def feed(self, specs: list[RequestSpec], eof: bool) -> None:
        """Add requests (whole session groups) to the buffer; ``eof`` = the driver has no more."""
        self.buffer.extend(specs)
        self.eof = self.eof or eof
        self._fed.set()

    def buffered(self) -> int:
        """Requests fed but not yet taken by a slot."""
        return len(self.buffer) + (1 if self._lookahead is not None else 0)

    async def _worker(self, specs: Iterator[RequestSpec], start: int = 0) -> None:
        if not await self._sleep_until(start):  # the run's start, or this slot's share of --stagger
            return
        while not self._stop.is_set():
            if self._lookahead is None and not self.buffer and not self.eof:
                self._fed.clear()
                t = time.perf_counter()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._fed.wait(), 0.05)
                self.starved_s += time.perf_counter() - t
                continue
            prep = self._next(specs)
            if prep is None:
                return
            await self._run_prepared(prep, self._now_rel())


class WorkerCore:
    """The worker's state machine; every method is called on the worker's event loop.

    Args:
        clock: the worker's monotonic clock.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or MonotonicClock()
        self.index = 0
        self.progress = Progress()
        self._out: list[list[Any]] = []
        self._gen: FedGenerator | None = None
        self._transport: Transport | None = None
        self._dispatch = DispatchConfig()
        self._open_specs: list[RequestSpec] | None = None
        self._task: asyncio.Task[None] | None = None
        self._report: dict[str, Any] | None = None
        self._frozen = False

    async def call(self, method: str, args: list[Any]) -> Any:
        """Run one driver message; returns a msgpack-able value."""
        if method == "ping":
            return self.clock.now_ns()
        if method == "setup":
            return await self._setup(args[0])
        if method == "start":
            return self._start(int(args[0]))
        if method == "feed":
            assert self._gen is not None
            self._gen.feed([spec_from_wire(s) for s in args[0]], bool(args[1]))
            return None
        if method == "poll":
            return self._poll()
        if method == "stop":
            if self._gen is not None:
                if args and args[0]:
                    self._gen.interrupt(str(args[0]))
                else:
                    self._gen.stop()
            return None
        if method == "close":
            await self._close()
            return None
        raise ValueError(f"unknown worker method {method!r}")

    async def _setup(self, s: dict[str, Any]) -> dict[str, Any]:
        self.index = int(s["index"])
        conc = s["concurrency"]
        cap = s.get("max_in_flight")
        self._dispatch = DispatchConfig(
            concurrency=conc,
            max_in_flight=int(cap) if cap is not None else None,
            duration_s=s["duration_s"],
            drain_timeout_s=float(s["drain_timeout_s"]),
            grace_s=float(s["grace_s"]),
            stagger_s=float(s.get("stagger_s") or 0.0),
            first_slot=int(s.get("first_slot") or 0),
            all_slots=s.get("all_slots"),
        )
        t = s["timeouts"]
        timeouts = Timeouts(float(t[0]), float(t[1]), float(t[2]))
        from tailscope.runner.target import make_transport

        self._transport = make_transport(
            s.get("http_client") or "aiohttp",
            s["base_url"],
            max_connections=conc or cap or 0,
            connect_timeout_s=timeouts.connect_s,
            auth_header=s["auth_header"],
            arrival_stamp=s.get("arrival_stamp") or "auto",
        )
        from tailscope.runner.target import preopen_transport

        await preopen_transport(self._transport, int(s.get("preopen") or 0), warm_path=s.get("warm_path"))
        tokenizer = load_tokenizer(s["tokenizer"]) if s["tokenizer"] else None
        synth = PromptSynthesizer(tokenizer, nonce=s.get("prompt_nonce"))
        tpl = s.get("template")
        opts = ClientOptions(
            endpoint=s["endpoint"],
            model=s["model"],
            ignore_eos=bool(s["ignore_eos"]),
            continuous_usage=bool(s["continuous_usage"]),
            stream_options=bool(s.get("stream_options", True)),
            extra_body=dict(s.get("extra_body") or {}),
            headers=tuple((str(k), str(v)) for k, v in s.get("headers") or ()),
            template=RequestTemplate.from_wire(tpl) if tpl else None,
            class_extra_body={str(k): dict(v) for k, v in (s.get("class_extra_body") or {}).items()},
            tracestate=s.get("tracestate"),
        )
        self._gen = FedGenerator(
            self._transport,
            opts,
            timeouts,
            synth,
            self._sink,
            self.clock,
            count_tokens=synth.counter(),
            progress=self.progress,
        )
        if s["specs"] is not None:
            self._open_specs = [spec_from_wire(x) for x in s["specs"]]
        self._frozen = freeze_setup()  # no collection pass over the set-up while tokens arrive (runner/gc_window.py)
        return {"pid": os.getpid()}

    def _sink(self, r: RequestRecord) -> None:
        self._out.append(record_to_wire(replace(r, worker=self.index)))

    def _start(self, t0_ns: int) -> None:
        self._task = asyncio.create_task(self._run(t0_ns))

    async def _run(self, t0_ns: int) -> None:
        gen = self._gen
        assert gen is not None
        report: dict[str, Any] = {"error": None, "start_late_ms": 0.0}
        arm_at = t0_ns - _ARM_AHEAD_NS
        delay = (arm_at - self.clock.now_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        now = self.clock.now_ns()
        report["start_late_ms"] = max(0, now - t0_ns) / 1e6
        lead_s = max(0, t0_ns - now) / 1e9
        dispatch = self._dispatch
        if dispatch.duration_s is not None:
            # the duration timer starts when run() is called; the run itself starts at the barrier
            dispatch = replace(dispatch, duration_s=dispatch.duration_s + lead_s)
        specs: Iterator[RequestSpec] = (
            iter(self._open_specs) if self._open_specs is not None else _BufferIter(gen.buffer)
        )
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            res = await gen.run(specs, dispatch, t0_ns=t0_ns)
            report["loop_lag_ms"] = res.loop_lag_ms.to_dict()
            report["interrupted"] = res.interrupted
        except Exception as exc:  # reported to the driver; the worker's records so far are still delivered
            report["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            wall = max(1e-9, time.perf_counter() - wall0 - lead_s)
            cpu = time.process_time() - cpu0
            report.update(cpu_s=cpu, wall_s=wall, cpu_util=cpu / wall, starved_s=gen.starved_s)
            report["planned"] = dict(gen.planned)  # agent sessions started here, with their planned calls
            stamps = getattr(self._transport, "arrival_stamps", None)  # kernel stamps: how the reads were stamped
            if stamps is not None:
                report["arrival_stamps"] = stamps
            batching = getattr(self._transport, "read_batching", None)  # kernel stamps: how the reads were batched
            if batching is not None:
                report["read_batching"] = batching
            if self._transport is not None:
                await self._transport.close()
                self._transport = None
            self._report = report

    def _poll(self) -> dict[str, Any]:
        p = self.progress
        out, self._out = self._out, []
        return {
            "records": out,
            "progress": {
                "sent": p.sent,
                "done": p.done,
                "failed": p.failed,
                "in_flight": p.in_flight,
                "output_tokens": p.output_tokens,
                "errors": dict(p.errors),
            },
            "buffered": self._gen.buffered() if self._gen is not None else 0,
            "report": self._report,
        }

    async def _close(self) -> None:
        if self._task is not None and not self._task.done():
            if self._gen is not None:
                self._gen.interrupt("SIGTERM")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 10)
        if self._transport is not None:
            await self._transport.close()
            self._transport = None
        thaw(self._frozen)
        self._frozen = False
