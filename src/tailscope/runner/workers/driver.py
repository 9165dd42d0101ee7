"""A bench run spread over several load-generator workers: local processes, or Ray actors across a cluster.

The driver (this process) keeps everything that must happen once: the target's preflight, the whole schedule, the
/metrics scraper, the store writer and the live progress. Workers only send requests and measure:

1. The driver builds the schedule and splits it (:mod:`.partition`): open-loop shares keep their
   absolute target times, so the aggregate arrival process is exactly the requested one; closed-loop concurrency is
   split and requests are fed on demand in whole sessions.
2. It estimates each worker's clock offset with a few pings (offset = worker time − midpoint of the round trip,
   uncertainty = half the best round trip) and starts every worker at one common instant ``T``, expressed on each
   worker's own monotonic clock. Every record's times are relative to that instant.
3. It polls the workers for record batches (msgpack), writes them to the store, and keeps the live counters.
4. A worker that dies keeps the records it already delivered; the run is marked ``degraded`` with the lost share of
   the schedule, and the others continue.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tailscope.clock import Clock, MonotonicClock, unix_offset_ns
from tailscope.errors import ConfigError, TailscopeError
from tailscope.metrics.percentiles import Stats, compute_stats
from tailscope.records import RequestRecord, RunStatus, Target
from tailscope.runner.bench import RunSinks, client_spans, new_run
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.bench_result import BenchResult, finish_bench
from tailscope.runner.persist import RunPersistence
from tailscope.runner.progress import Progress
from tailscope.runner.target import auth_header, open_target, preopen_count, warm_path
from tailscope.runner.telemetry import RunScrapes
from tailscope.runner.workers.handles import WorkerHandle, WorkerLost, start_process_workers
from tailscope.runner.workers.partition import Feeder, partition_open, split_concurrency
from tailscope.runner.workers.report import WorkerState, lost_share, worker_rows, worker_warnings
from tailscope.runner.workers.wire import record_from_wire, spec_to_wire
from tailscope.signals import install_signal_handlers
from tailscope.workload.spec import RequestSpec

if TYPE_CHECKING:
    from tailscope.store.runs import RunStore

#: pings per worker for the clock-offset estimate (the best round trip wins).
PINGS = 7
#: how far ahead of "now" the common start barrier is placed (s), at least.
START_LEAD_S = 0.3
#: a worker that does not answer a poll within this many seconds is considered lost.
POLL_TIMEOUT_S = 30.0
#: how long setup (process start / actor placement + imports) may take per worker (s).
SETUP_TIMEOUT_S = 120.0


def check_worker_flags(workers: int | None, ray_address: str | None) -> int:
    """Validate ``--workers``/``--ray``; return the worker count.

    Raises:
        ConfigError: ``--ray`` without ``--workers``, or a count below 1.
    """
    if workers is None:
        raise ConfigError("--ray needs --workers N: how many Ray actors send the load")
    if workers < 1:
        raise ConfigError(f"--workers must be ≥ 1 (got {workers})")
    if ray_address is not None and not ray_address.strip():
        raise ConfigError("--ray needs a value: auto, local or a cluster address")
    return workers


def describe_workers(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per worker for the console: requests, send lag, loop lag, CPU, clock offset, verdict."""
    out: list[str] = []
    for row in rows:
        lag = row["send_lag_ms"].get("p99")
        loop = (row["loop_lag_ms"] or {}).get("p99")
        cpu = row["cpu_util"]
        state = "LOST: " + str(row["lost"]) if row["lost"] else ("BOTTLENECK" if row["bottleneck"] else "ok")
        out.append(
            f"worker {row['worker']} ({row['kind']}): {row['requests']}/{row['assigned']} requests · "
            f"send lag p99 {_ms(lag)} · loop lag p99 {_ms(loop)} · CPU {'-' if cpu is None else f'{cpu:.0%}'} · "
            f"clock ±{row['offset_uncertainty_ms']:.3f} ms · {state}"
        )
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} ms"


async def _start_pool(n: int, ray_address: str | None, ray_num_cpus: float) -> list[WorkerHandle]:
    if ray_address is None:
        return list(await start_process_workers(n))
    from tailscope.runner.workers.ray_actors import start_ray_workers

    return list(await start_ray_workers(n, ray_address, num_cpus=ray_num_cpus))


async def _shutdown_all(handles: Sequence[WorkerHandle]) -> None:
    await asyncio.gather(*(h.shutdown() for h in handles), return_exceptions=True)


async def _estimate_offset(h: WorkerHandle, st: WorkerState, clock: Clock) -> int:
    """Ping ``h`` a few times; store the offset of the best round trip; return that round trip (ns)."""
    best: tuple[int, int] | None = None
    for _ in range(PINGS):
        t1 = clock.now_ns()
        w = int(await h.call("ping", [], timeout_s=SETUP_TIMEOUT_S))
        t2 = clock.now_ns()
        rtt = t2 - t1
        if best is None or rtt < best[0]:
            best = (rtt, w - (t1 + t2) // 2)
    assert best is not None
    st.offset_uncertainty_ns = best[0] // 2
    st.clock_offset_ns = best[1]
    return best[0]


def _setup_doc(
    cfg: BenchConfig, base_url: str, model: str, index: int, slots: int | None, workers: int = 1
) -> dict[str, Any]:
    d = cfg.dispatch
    return {
        "index": index,
        "base_url": base_url,
        "model": model,
        "endpoint": cfg.endpoint,
        "http_client": cfg.http_client,
        "arrival_stamp": cfg.arrival_stamp,
        "ignore_eos": cfg.ignore_eos,
        "continuous_usage": cfg.continuous_usage,
        "stream_options": cfg.stream_options,
        "extra_body": cfg.extra_body,
        "class_extra_body": cfg.class_extra_body,
        "headers": [list(h) for h in cfg.headers],
        "template": cfg.template.to_wire() if cfg.template is not None else None,
        "timeouts": [cfg.timeouts.connect_s, cfg.timeouts.first_token_s, cfg.timeouts.total_s],
        "tokenizer": cfg.tokenizer,
        "prompt_nonce": cfg.prompt_nonce,
        "tracestate": cfg.tracestate,
        "auth_header": auth_header(cfg.api_key_env),
        "concurrency": slots,
        "stagger_s": d.stagger_s,
        "all_slots": d.concurrency,
        "max_in_flight": None,
        "duration_s": d.duration_s,
        "drain_timeout_s": d.drain_timeout_s,
        "grace_s": d.grace_s,
        "specs": None,
        # a closed-loop worker opens its slots' connections, an open-loop one its share of the auto count
        "preopen": preopen_count(cfg, slots) if slots is not None else -(-preopen_count(cfg) // max(1, workers)),
        "warm_path": warm_path(cfg),
    }


@dataclass(eq=False, slots=True)
class _Driver:
    """The poll loop: collects batches, feeds closed-loop workers, tracks losses and live counters."""

    handles: Sequence[WorkerHandle]
    states: list[WorkerState]
    feeder: Feeder | None
    sink: Callable[[list[RequestRecord]], None]
    progress: Progress
    clock: Clock
    poll_interval_s: float
    grace_s: float
    signal_name: str | None = field(default=None, init=False)
    _eof_sent: set[int] = field(default_factory=set, init=False)
    _rate: dict[int, float] = field(default_factory=dict, init=False)
    _stop_sent: bool = field(default=False, init=False)
    _interrupted_at: float | None = field(default=None, init=False)

    def interrupt(self, name: str) -> None:
        """Stop every worker (safe from a signal handler): in-flight requests get the grace period."""
        if self.signal_name is None:
            self.signal_name = name
            self._interrupted_at = asyncio.get_running_loop().time()

    def initial_feed(self, i: int) -> list[RequestSpec]:
        assert self.feeder is not None
        st = self.states[i]
        specs = self.feeder.take(i, max(8, 2 * (st.slots or 1)))
        st.assigned += len(specs)
        return specs

    async def _feed(self, i: int) -> None:
        st, h = self.states[i], self.handles[i]
        if self.feeder is None or st.finished or i in self._eof_sent:
            return
        if self.signal_name is not None:
            return
        target = max(8, 2 * (st.slots or 1), math.ceil(self._rate.get(i, 0.0) * 1.0))
        specs: list[RequestSpec] = []
        if st.buffered < target and not self.feeder.exhausted:
            specs = self.feeder.take(i, target - st.buffered)
            st.assigned += len(specs)
        eof = self.feeder.exhausted
        if specs or eof:
            await h.call("feed", [[spec_to_wire(s) for s in specs], eof], timeout_s=POLL_TIMEOUT_S)
            st.buffered += len(specs)
            if eof:
                self._eof_sent.add(i)

    def _lose(self, i: int, why: str) -> None:
        st = self.states[i]
        if st.report is None and st.lost is None:
            st.lost = why

    async def _poll_one(self, i: int) -> None:
        st, h = self.states[i], self.handles[i]
        try:
            res = await h.call("poll", [], timeout_s=POLL_TIMEOUT_S)
            batch = [record_from_wire(row) for row in res["records"]]
            if batch:
                st.received += len(batch)
                self._rate[i] = 0.7 * self._rate.get(i, 0.0) + 0.3 * len(batch) / self.poll_interval_s
                self.sink(batch)
            st.progress = res["progress"]
            st.buffered = int(res["buffered"])
            if res["report"] is not None:
                st.report = res["report"]
                if st.report.get("error"):
                    st.lost = f"the worker failed: {st.report['error']}"
                return
            await self._feed(i)
        except WorkerLost as exc:
            self._lose(i, str(exc))

    async def _stop_all(self) -> None:
        self._stop_sent = True
        live = [i for i, st in enumerate(self.states) if not st.finished]
        calls = [self.handles[i].call("stop", [self.signal_name], timeout_s=POLL_TIMEOUT_S) for i in live]
        for i, res in zip(live, await asyncio.gather(*calls, return_exceptions=True), strict=True):
            if isinstance(res, WorkerLost):
                self._lose(i, str(res))

    def _update_progress(self, t0_ns: int) -> None:
        p = self.progress
        agg: dict[str, int] = {"sent": 0, "done": 0, "failed": 0, "in_flight": 0, "output_tokens": 0}
        errors: dict[str, int] = {}
        for st in self.states:
            for k in agg:
                agg[k] += int(st.progress.get(k, 0)) if not (k == "in_flight" and st.finished) else 0
            for k, v in (st.progress.get("errors") or {}).items():
                errors[k] = errors.get(k, 0) + int(v)
        p.sent, p.done, p.failed = agg["sent"], agg["done"], agg["failed"]
        p.in_flight, p.output_tokens, p.errors = agg["in_flight"], agg["output_tokens"], errors
        p.elapsed_s = max(0.0, (self.clock.now_ns() - t0_ns) / 1e9)
        p.note_tokens(p.elapsed_s)

    async def run(self, t0_ns: int) -> None:
        """Poll until every worker finished or was lost."""
        loop = asyncio.get_running_loop()
        while True:
            live = [i for i, st in enumerate(self.states) if not st.finished]
            if not live:
                return
            if self.signal_name is not None and not self._stop_sent:
                await self._stop_all()
            if self._interrupted_at is not None and loop.time() > self._interrupted_at + self.grace_s + 15.0:
                for i in live:  # past the grace period and then some: give up on these workers
                    self._lose(i, "did not stop after the interrupt")
                return
            await asyncio.gather(*(self._poll_one(i) for i in live))
            self._update_progress(t0_ns)
            if any(not st.finished for st in self.states):
                await asyncio.sleep(self.poll_interval_s)


def _worst_loop_lag(states: Iterable[WorkerState]) -> Stats:
    worst: dict[str, Any] | None = None
    for st in states:
        lag = (st.report or {}).get("loop_lag_ms")
        if lag and lag.get("p99") is not None and (worst is None or lag["p99"] > worst["p99"]):
            worst = lag
    if worst is None:
        return compute_stats([])
    vals = {k: worst.get(k) for k in ("mean", "p50", "p90", "p95", "p99", "p999", "max", "min")}
    return Stats(int(worst.get("count") or 0), **vals)


async def run_bench_distributed(
    cfg: BenchConfig,
    specs: Iterable[RequestSpec],
    *,
    workers: int,
    ray_address: str | None = None,
    store: RunStore | None = None,
    progress: Progress | None = None,
    on_target: Callable[[Target], None] | None = None,
    on_workers: Callable[[list[WorkerState]], None] | None = None,
    clock: Clock | None = None,
    ray_num_cpus: float = 1.0,
    poll_interval_s: float = 0.2,
) -> BenchResult:
    """Run one bench with ``workers`` load-generator workers; same result model as :func:`run_bench`.

    Args:
        specs: the request stream; an open-loop stream is materialized and split up front, a closed-loop stream is
            pulled on demand (it may be endless when a duration bounds the run).
        workers: number of worker processes / actors (≥ 1; closed loop: ≤ concurrency).
        ray_address: ``None`` = local processes; else ``auto``, ``local`` or a Ray cluster address.
        on_workers: called once every worker is set up (worker pids and clock offsets are known).
        ray_num_cpus: CPUs each Ray actor reserves (placement; a worker uses about one core when saturated).
        poll_interval_s: how often record batches are collected from the workers.

    Raises:
        ConfigError: bad worker count, Ray missing or unreachable, the built-in engine with Ray.
        TailscopeError: a worker could not be set up (nothing was sent then).
    """
    if workers < 1:
        raise ConfigError(f"--workers must be ≥ 1 (got {workers})")
    if ray_address is not None and cfg.url is None:
        raise ConfigError("--ray needs --url: the built-in engine listens on this machine's loopback only")
    # a capped open loop: each worker holds its share of the cap (as even as possible, summing to it), so the run
    # never has more in flight than the cap; a request waits for its own worker's slot even when another has room
    caps: list[int | None] = (
        list(split_concurrency(cfg.dispatch.max_in_flight, workers))
        if cfg.dispatch.max_in_flight is not None
        else [None] * workers
    )
    clock = clock or MonotonicClock()
    progress = progress or Progress()
    conc = cfg.dispatch.concurrency
    feeder: Feeder | None = None
    shares: list[list[RequestSpec]] | None = None
    if conc is not None:
        slots: list[int | None] = list(split_concurrency(conc, workers))
        feeder = Feeder(iter(specs))
    else:
        slots = [None] * workers
        shares = partition_open(specs, workers)
    total_scheduled = sum(len(s) for s in shares) if shares is not None else None
    writer = RunPersistence(store, flush_interval_s=cfg.flush_interval_s)
    if ray_address is not None:
        from tailscope.runner.workers.ray_actors import connect_ray

        # before anything else runs on the loop: ray.init blocks for seconds, and it wants the main thread
        connect_ray(ray_address)
    async with AsyncExitStack() as stack:
        # spawning processes / placing actors takes a while: overlap it with the preflight
        pool_task = asyncio.create_task(_start_pool(workers, ray_address, ray_num_cpus))
        try:
            ts = await open_target(cfg, stack, on_target)
            cfg = cfg.without(ts.refused)
        except BaseException:
            with contextlib.suppress(Exception):
                await _shutdown_all(await pool_task)
            raise
        handles = await pool_task
        stack.push_async_callback(_shutdown_all, handles)
        states = [WorkerState(index=i, kind=h.kind, slots=slots[i], cap=caps[i]) for i, h in enumerate(handles)]

        async def setup(i: int) -> None:
            doc = _setup_doc(cfg, ts.base_url, ts.target.model, i, slots[i], workers)
            doc["max_in_flight"] = caps[i]
            # --stagger: the run's slots start in order, worker 0's first (each worker holds a run of them)
            doc["first_slot"] = sum(n or 0 for n in slots[:i])
            if shares is not None:
                doc["specs"] = [spec_to_wire(s) for s in shares[i]]
                states[i].assigned = len(shares[i])
            info = await handles[i].call("setup", [doc], timeout_s=SETUP_TIMEOUT_S)
            states[i].pid = info.get("actor_pid") or info.get("pid")  # a Ray worker: the actor process
            states[i].nice = info.get("nice")

        try:
            await asyncio.gather(*(setup(i) for i in range(workers)))
            # one worker at a time, once all are idle: concurrent pings (or a neighbour still importing) inflate the
            # round trips and so the offset uncertainty
            rtts = [await _estimate_offset(h, st, clock) for h, st in zip(handles, states, strict=True)]
        except WorkerLost as exc:
            raise TailscopeError(f"could not start the load-generator workers: {exc}") from None

        run = new_run(cfg, ts, workers=workers, worker_kind=handles[0].kind)
        writer.begin(run)
        sinks = RunSinks(writer, client_spans(cfg, ts.target))
        records, samples, spans = sinks.records, sinks.samples, sinks.spans

        driver = _Driver(
            handles, states, feeder, sinks.record_batch, progress, clock, poll_interval_s, grace_s=cfg.dispatch.grace_s
        )
        restore_signals: Callable[[], None] | None = None
        scrapes = RunScrapes(
            ts.transport,
            ts.metrics_url,
            cfg.telemetry_urls,
            sinks.sample_batch,
            clock,
            interval_s=cfg.scrape_interval_s,
        )
        try:
            if feeder is not None:
                await asyncio.gather(
                    *(
                        handles[i].call("feed", [[spec_to_wire(s) for s in driver.initial_feed(i)], False])
                        for i in range(workers)
                    )
                )
            if on_workers is not None:
                on_workers(states)
            restore_signals = install_signal_handlers(driver.interrupt, enabled=cfg.handle_signals)
            t0 = clock.now_ns() + max(int(START_LEAD_S * 1e9), 10 * max(rtts))
            await asyncio.gather(
                *(h.call("start", [t0 + st.clock_offset_ns]) for h, st in zip(handles, states, strict=True))
            )
            if spans is not None:  # record times are on the driver's clock: one reading maps them to Unix time
                spans.t0_unix_ns = t0 + unix_offset_ns(clock)
                spans.sender.start()
            await asyncio.sleep(max(0.0, (t0 - clock.now_ns()) / 1e9))
            scrapes.start(t0)
            await driver.run(t0)
        finally:
            await scrapes.stop()
            if spans is not None:
                await spans.sender.stop()
            if restore_signals is not None:
                restore_signals()
            writer.close()
        records.sort(key=lambda r: r.id)
        rows = worker_rows(states, records)
        lost = lost_share(states, total_scheduled, conc)
        interrupted = driver.signal_name is not None
        if interrupted or writer.store_error:
            status = RunStatus.INCOMPLETE
        elif lost["workers"]:
            status = RunStatus.DEGRADED
        else:
            status = RunStatus.COMPLETE
        from tailscope.metrics.request import ttft_ms

        ttft = compute_stats([v for r in records if r.ok and not r.warmup and (v := ttft_ms(r)) is not None])
        warnings = worker_warnings(rows, ttft.p50, lost)
        return finish_bench(
            cfg,
            writer,
            run,
            status=status,
            records=records,
            samples=samples,
            loop_lag_ms=_worst_loop_lag(states),
            signal_name=driver.signal_name,
            t0_ns=t0,
            extra_warnings=(*ts.warnings, *warnings),
            extra_summary={
                **_client_summary(states),
                "workers": rows,
                "lost": lost,
                "bottleneck_workers": [row["worker"] for row in rows if row["bottleneck"]],
                # sessions run whole inside one worker: each reports the agent sessions it started and their planned
                # calls; the step names come with the records
                **({"sessions": _sessions(cfg, records, states)} if any(r.session_id for r in records) else {}),
                # each worker's clock has its own offset: no run-wide Unix start, so the join checks no bracket
                **(
                    {
                        "trace_context": {
                            "ratio": cfg.trace_ratio,
                            "traced": sum(1 for r in records if r.trace_id),
                            **({"client_spans": spans.sender.outcome()} if spans is not None else {}),
                        }
                    }
                    if cfg.trace_ratio > 0
                    else {}
                ),
            },
            scrapes=scrapes,
        )


def _client_summary(states: list[WorkerState]) -> dict[str, Any]:
    """The client section of a distributed run: which hot loop ran and, with kernel arrival stamps, the workers' read
    counts summed (``client.arrival_stamps`` and ``client.read_batching``, as a one-process run reports them — the
    window is the workers' largest; each absent when no worker reported it)."""
    total: dict[str, int] = {}
    batching: dict[str, int] = {}
    for st in states:
        for kind, n in ((st.report or {}).get("arrival_stamps") or {}).items():
            total[kind] = total.get(kind, 0) + int(n)
        for key, n in ((st.report or {}).get("read_batching") or {}).items():
            batching[key] = max(batching.get(key, 0), int(n)) if key == "window_us" else batching.get(key, 0) + int(n)
    from tailscope.client.hot import hot_loop

    # the workers run this install's client (TAILSCOPE_HOT_LOOP is inherited): the driver's own answer is theirs
    client: dict[str, Any] = {"hot_loop": hot_loop()}
    if total:
        client["arrival_stamps"] = total
    if batching:
        client["read_batching"] = batching
    return {"client": client}


def _sessions(cfg: BenchConfig, records: list[RequestRecord], states: list[WorkerState]) -> dict[str, Any] | None:
    """Session-level metrics of a distributed run, against the planned calls per session: trace → load's plan, else
    the agent sessions the workers started (a lost worker's sessions are judged by the records it delivered)."""
    from tailscope.metrics.sessions import session_summary

    planned: dict[str, int] | None = (cfg.settings.get("trace_load") or {}).get("planned")
    if planned is None:
        started = {sid: int(n) for st in states for sid, n in ((st.report or {}).get("planned") or {}).items()}
        planned = started or None
    return session_summary(records, planned)
