"""Drive a simulated cluster in virtual time from a stream of :class:`RequestSpec` and yield RequestRecords.

* Open loop: a request is due at ``spec.at_ns``.
* Closed loop (``at_ns`` None): ``concurrency`` virtual clients each start their next request when the previous
  one ends; a client runs a whole session (turn k+1 is due ``think_time_ns`` after turn k ends).
* Sessions: turn k+1's prompt = history (all earlier prompts and outputs) + its new text; its block hashes extend
  the session's chain, so the previous turn's KV blocks are prefix-cache hits if they were not evicted.
* Shared prefixes: ``prefix_id``/``prefix_tokens`` become the same leading block hashes for every request of that
  variant.
* Call graphs (agent profiles, trace → load: a session whose calls carry ``step``, ``after`` or their own ``at_ns``):
  as the load generator runs them. The session's first call is due at its arrival (closed loop: when its client is
  free); a call with ``after`` is due at the latest ``predecessor end + gap`` (and no earlier than its own ``at_ns``
  when it has one); a call depending on nothing keeps its ``at_ns``. Calls with no path between them run
  concurrently. A call whose predecessor failed (or is not in the session) is not sent, nor anything after it. A
  call's prompt is its own text plus the output tokens of its ``answers_from`` calls (placed after its text, so they
  are never a prefix-cache hit); a shared prefix stays in front of every call. With a ``prompt_template`` the prompt
  is as long as the template renders (:meth:`~tailscope.workload.answer_template.AnswerTemplate.tokens`: each
  placeholder's tokens, the literal text at one token per word, as bench counts it without a tokenizer). A
  closed-loop client runs a whole call graph: it is free when the last call of the session has ended (or was
  dropped). With ``duration_s`` no call of a graph is sent after the stop (the session is cut), as bench does.

A request reaches a replica after the API-server latency (``Efficiency.frontend_ms``); headline times are from
``scheduled_ns`` as for bench. Records are yielded as requests finish (memory stays bounded by what is in flight).

Disaggregated (``cluster.disagg``): the router picks a prefill worker; the request runs its prompt there (one
sampled token), its KV crosses to the decode pool (:class:`~tailscope.engine.disagg.KvTransfer`), and the decode
worker with the fewest requests in flight admits it with that KV present: its first step computes the last prompt
token and samples the first output token the client sees (as vLLM's P/D proxy does). TTFT therefore includes the
prefill, the transfer and the decode worker's first step; decode steps never carry prefill chunks.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tailscope.engine.autoscaler import Autoscaler
from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.desync import DEFAULT as _DESYNC
from tailscope.engine.desync import Desync
from tailscope.engine.kv_cache import chain_hash, extend_hashes
from tailscope.engine.perf import frontend_jitter
from tailscope.engine.replica import Completion, Replica
from tailscope.engine.router import Router
from tailscope.records import RequestRecord
from tailscope.sim.events import (
    ARRIVE,
    CLIENT_START,
    KV_ARRIVE,
    REPLICA_READY,
    ROUTE,
    SCRAPE,
    SPEC_DUE,
    STEP_END,
    TIMELINE,
)
from tailscope.sim.records import record_error, record_ok
from tailscope.sim.result import SimResult
from tailscope.workload.answer_template import parse_template
from tailscope.workload.spec import RequestSpec

__all__ = ["SimResult", "Simulation"]

_PREFIX_SEED = 0x7A11_5C0E
_TIMELINE_NS = 10_000_000_000


@dataclass(slots=True)
class _Graph:
    """A call-graph session's state once its first call started."""

    waiting: dict[int, RequestSpec]  # calls whose predecessors have not all ended, by id
    deps_left: dict[int, int]  # id → predecessors still to end
    due: dict[int, int]  # id → the latest predecessor end + gap so far (its own ``at_ns`` at least)
    dependents: dict[int, list[tuple[int, int]]]  # id → (dependent id, gap ns)
    outputs: dict[int, int] = field(default_factory=dict)  # output tokens of the calls that ended
    left: int = 0  # calls not yet ended or dropped


@dataclass(slots=True)
class _Session:
    chain: list[int]
    history: int = 0  # tokens of earlier prompts + outputs
    turns: deque[RequestSpec] = field(default_factory=deque)
    client: int = -1
    call_graph: bool = False  # its calls follow ``after`` (a call graph), not one another (a conversation)
    graph: _Graph | None = None


@dataclass(slots=True)
class _Live:
    spec: RequestSpec
    scheduled_ns: int
    prompt: int
    replica: int = -1
    client: int = -1
    hashes: tuple[int, ...] = ()
    sent_ns: int | None = None  # later than scheduled_ns when the twin models the client's open-loop send lag
    decoding: bool = False  # disaggregated: the request has left the prefill pool


@dataclass(slots=True)
class _Slot:
    replica: Replica
    state: str = "ready"  # pending | ready | draining | stopped
    busy: bool = False
    outstanding: int = 0
    frontend_free_ns: int = 0
    created_ns: int = 0  # when the replica was requested (GPUs are paid from then on)
    stopped_ns: int | None = None
    busy_ns: int = 0  # time spent running engine steps (the autoscaler's gpu_util)
    busy_mark_ns: int = 0  # busy_ns at the previous scrape
    pending_done: list[Completion] = field(default_factory=list)
    tp: int = 1  # GPUs of the replica (GPU-seconds)
    pool: str = "agg"  # agg | prefill | decode
    replaces: int | None = None  # a rebuild: the slot this one retires once it is ready


class Simulation:
    """One simulation run. Iterate :meth:`run` for records; read :attr:`result` afterwards.

    Args:
        cluster: the deployment.
        specs: the workload (any iterable; consumed lazily).
        concurrency: virtual clients for closed-loop specs (``at_ns`` None); ignored for open loop.
        duration_s: stop starting new closed-loop requests (and any call of a call graph) after this many virtual
            seconds.
        horizon_s: hard stop; requests still in flight become ``incomplete`` records.
        ramp_s: closed loop only — client i starts at ``i / concurrency × ramp_s``. None = one estimated
            request lifetime of the first request. Real clients desynchronise through jitter (network, tokenizer,
            variable step times); a simulation with fixed lengths would otherwise march in lock-step waves that
            no real server shows. 0 = every client at t=0.
        desync: closed loop only — the client's seeded delay between a response's end and its next request
            (:mod:`tailscope.engine.desync`; :data:`~tailscope.engine.desync.OFF` for exact, noise-free steps).
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        specs: Iterable[RequestSpec],
        *,
        concurrency: int | None = None,
        duration_s: float | None = None,
        horizon_s: float | None = None,
        ramp_s: float | None = None,
        desync: Desync = _DESYNC,
    ) -> None:
        self.cluster = cluster.validate()
        self._specs = iter(specs)
        self._peek: RequestSpec | None = None
        self._exhausted = False
        self.concurrency = concurrency
        self._stop_ns = int(duration_s * 1e9) if duration_s is not None else None
        self._horizon_ns = int(horizon_s * 1e9) if horizon_s is not None else None
        self._ramp_ns = int(ramp_s * 1e9) if ramp_s is not None else None
        #: the closed-loop clients' desynchronising delays, one per call, ns (None: off or an open loop)
        self._desync = desync
        self._gap: Callable[[], int] | None = None  # set in run() for a closed loop
        self._perf = cluster.perf()
        self._speed: Callable[[int], float] | None = getattr(self._perf, "speed_factor", None)
        self._burst: Callable[[int, int], int] | None = getattr(self._perf, "arrival_burst_ns", None)
        self._pd_burst: Callable[[float, int], int] | None = None
        #: a calibrated twin's measured client send lag (open loop only): ``(seed, request id) -> ns``
        self._send_lag: Callable[[int, int], int] | None = getattr(self._perf, "send_lag_ns", None)
        self._block = cluster.engine_config().block_size
        self._router = Router(cluster.router)
        self._scaler = Autoscaler(cluster.autoscale) if cluster.autoscale is not None else None
        self._frag = cluster.autoscale.fragmentation if cluster.autoscale is not None else None
        self._rebuilding = 0
        self._max_request_blocks = 0  # the largest request seen (fragmentation never leaves less room than this)
        d = cluster.disagg
        if d is None:
            self._slots: list[_Slot] = [
                _Slot(cluster.new_replica(self._perf), tp=cluster.tp) for _ in range(cluster.replicas)
            ]
            self._entry: list[int] | None = None
        else:
            self._perf = cluster.perf(d.prefill_tp)
            dec = cluster.perf(d.decode_tp)
            self._slots = [
                _Slot(cluster.new_replica(self._perf), tp=d.prefill_tp, pool="prefill")
                for _ in range(d.prefill_workers)
            ] + [_Slot(cluster.new_replica(dec), tp=d.decode_tp, pool="decode") for _ in range(d.decode_workers)]
            self._entry = list(range(d.prefill_workers))  # the router's choices: prefill workers
            self._decode_idx = list(range(d.prefill_workers, len(self._slots)))
            self._xfer = cluster.kv_transfer()
            # the prefill pool's synchronised arrivals replace the aggregated replica's (same form, own share)
            self._burst = None
            self._pd_burst = getattr(self._perf, "disagg_arrival_burst_ns", None)
        # the event heap of ``(time_ns, priority, seq, payload)`` (see :mod:`tailscope.sim.events`), kept inline:
        # pushing and popping are the simulator's most frequent operations
        self._heap: list[tuple[int, int, int, Any]] = []
        self._seq = itertools.count(1)
        self._live: dict[int, _Live] = {}
        self._sessions: dict[str, _Session] = {}
        self._prefix_chains: dict[int, list[int]] = {}
        self._ttft_window: deque[tuple[int, float]] = deque()
        self._win_ttfts: list[float] = []
        self._win_completed = 0
        self.result = SimResult()
        #: agent sessions (calls with a step name) that started, with their planned calls (as the load generator)
        self.planned: dict[str, int] = {}
        #: request id → agent step name, for the calls started
        self.step_names: dict[int, str] = {}
        self._live_at_horizon = False
        # open-loop traffic without autoscaling (and, checked per step, without live sessions)
        self._open_plain = concurrency is None and self._scaler is None

    def _push(self, time_ns: int, priority: int, payload: Any) -> None:
        heapq.heappush(self._heap, (time_ns, priority, next(self._seq), payload))

    # ---- workload intake -----------------------------------------------------------------------------------
    def _next_unit(self) -> RequestSpec | None:
        """Next turn-0/single spec; its later session turns are queued on the session."""
        while True:
            spec: RequestSpec | None = self._peek
            self._peek = None
            if spec is None:
                spec = next(self._specs, None)
                if spec is None:
                    self._exhausted = True
                    return None
            if spec.session_id is not None and (spec.turn or 0) > 0:
                ses = self._sessions.get(spec.session_id)
                if ses is not None:
                    ses.turns.append(spec)
                continue  # a stray later turn (its turn 0 unseen) is dropped
            if spec.session_id is not None:
                ses = _Session(chain=[])
                self._sessions[spec.session_id] = ses
                nxt = next(self._specs, None)
                while nxt is not None and nxt.session_id == spec.session_id and (nxt.turn or 0) > 0:
                    ses.turns.append(nxt)
                    nxt = next(self._specs, None)
                self._peek = nxt
                if nxt is None:
                    self._exhausted = True
                ses.call_graph = spec.step is not None or any(t.after or t.at_ns is not None for t in ses.turns)
            return spec

    def _hashes(self, spec: RequestSpec, prompt: int) -> tuple[int, ...]:
        if spec.session_id is None and spec.prefix_id is None:
            return ()  # unique content: the engine tracks it without hashes
        bs = self._block
        full = prompt // bs
        if full == 0:
            return ()
        ses = self._sessions.get(spec.session_id) if spec.session_id is not None else None
        if ses is not None and ses.call_graph:
            ses = None  # a call's own text is unique to it: only a shared prefix is common
        if ses is not None and ses.chain:
            extend_hashes(ses.chain, full, 0)
            return tuple(ses.chain[:full])
        chain: list[int] = []
        n_prefix = min(spec.prefix_tokens, prompt) // bs if spec.prefix_id is not None else 0
        if n_prefix:
            pc = self._prefix_chains.setdefault(spec.prefix_id or 0, [chain_hash(_PREFIX_SEED, spec.prefix_id or 0)])
            extend_hashes(pc, n_prefix, 0)
            chain = pc[:n_prefix]
        if ses is None:
            return tuple(chain)  # the shared prefix only; the rest is unique to the request
        if full > len(chain):
            key = zlib.crc32(spec.session_id.encode()) if spec.session_id is not None else spec.id
            own = ((key << 20) ^ spec.seed ^ (1 << 62)) if spec.session_id is None else (key | (1 << 61))
            chain.append(chain_hash(chain[-1] if chain else _PREFIX_SEED, own))
            extend_hashes(chain, full, 0)
        if ses is not None:
            ses.chain = chain
        return tuple(chain)

    def _start(self, spec: RequestSpec, now: int, client: int) -> None:
        """The request is due at ``now``: route it, then it passes the replica's API server."""
        prompt = spec.input_tokens
        ses = self._sessions.get(spec.session_id) if spec.session_id is not None else None
        if ses is not None:
            ses.client = client
            if ses.call_graph:
                g = ses.graph
                if g is None:
                    g = ses.graph = self._graph_start(ses, spec, now, client)
                elif self._stop_ns is not None and now >= self._stop_ns:
                    # the run's stop: no call is sent after it (the session is cut: incomplete), as in bench
                    self._graph_end(ses, g, spec, now, None, 0)
                    if g.left == 0:
                        del self._sessions[spec.session_id]  # type: ignore[arg-type]
                        if client >= 0:
                            self._client_next(client, now)
                    return
                elif spec.answers_from:  # the answers' text: after the call's own, or where its template says
                    sizes = [g.outputs.get(a, 0) for a in spec.answers_from]
                    if spec.prompt_template is None:
                        prompt += sum(sizes)
                    else:
                        n_head = spec.prefix_tokens if spec.prefix_id is not None else 0
                        prompt = n_head + parse_template(spec.prompt_template).tokens(prompt - n_head, sizes)
                if spec.step is not None:
                    self.step_names[spec.id] = spec.step
            else:
                prompt += ses.history
        live = _Live(spec, now, prompt, -1, client)
        if spec.session_id is not None or spec.prefix_id is not None:
            live.hashes = self._hashes(spec, prompt)
        self._live[spec.id] = live
        if client < 0 and self._send_lag is not None:
            lag = self._send_lag(spec.seed, spec.id)
            if lag > 0:  # the measuring client sends it this late; latency still counts from the intended time
                live.sent_ns = now + lag
                self._push(now + lag, ROUTE, spec.id)
                return
        self._route_live(live, now)

    def _graph_start(self, ses: _Session, first: RequestSpec, now: int, client: int) -> _Graph:
        """The session's first call starts at ``now``: its other calls wait for their predecessors, or (depending
        on none) are due at their own ``at_ns`` (else with the first call)."""
        calls = list(ses.turns)
        ses.turns.clear()
        g = _Graph(waiting={}, deps_left={}, due={}, dependents={}, left=1 + len(calls))
        if first.step is not None and not first.warmup and first.session_id is not None:
            self.planned[first.session_id] = max(g.left, first.session_calls or 0)  # as drawn (see RequestSpec)
        ids = {first.id}
        dropped: set[int] = set()
        for c in calls:
            ids.add(c.id)
            if any(d not in ids or d in dropped for d, _ in c.after):
                dropped.add(c.id)  # a predecessor outside the session, or one never sent: never sent either
                g.left -= 1
                continue
            if not c.after:
                self._push(max(now, c.at_ns if c.at_ns is not None else now), SPEC_DUE, (c, client))
                continue
            g.waiting[c.id] = c
            g.deps_left[c.id] = len(c.after)
            g.due[c.id] = c.at_ns or 0
            for d, gap in c.after:
                g.dependents.setdefault(d, []).append((c.id, gap))
        return g

    def _graph_end(self, ses: _Session, g: _Graph, spec: RequestSpec, now: int, end: int | None, output: int) -> None:
        """A call ended at ``end`` with ``output`` tokens (``end`` None: it failed): release or drop the calls that
        wait for it."""
        g.left -= 1
        fail: list[int] = []
        if end is None:
            fail.append(spec.id)
        else:
            g.outputs[spec.id] = output
            for rid, gap in g.dependents.pop(spec.id, ()):
                if rid not in g.waiting:
                    continue
                t = end + gap
                if t > g.due[rid]:
                    g.due[rid] = t
                g.deps_left[rid] -= 1
                if g.deps_left[rid] == 0:
                    call = g.waiting.pop(rid)
                    due = g.due.pop(rid)
                    del g.deps_left[rid]
                    self._push(due if due > now else now, SPEC_DUE, (call, ses.client))
        while fail:  # a failed call's dependents are never sent, nor theirs
            for rid, _ in g.dependents.pop(fail.pop(), ()):
                if g.waiting.pop(rid, None) is not None:
                    del g.deps_left[rid], g.due[rid]
                    g.left -= 1
                    fail.append(rid)

    def _route(self, rid: int, now: int) -> None:
        self._route_live(self._live[rid], now)

    def _route_live(self, live: _Live, now: int) -> None:
        spec = live.spec
        rid = spec.id
        slots = self._slots
        if len(slots) == 1 and slots[0].state == "ready":
            idx = 0
        else:
            ready = self._ready_indices() if self._entry is None else self._entry
            if not ready:  # every replica is cold: the request waits at the gateway for the first one
                self._push(now + 100_000_000, ROUTE, rid)
                return
            key = live.hashes[0] if live.hashes and (spec.prefix_id is not None or spec.session_id) else None
            idx = self._router.choose(ready, [s.outstanding for s in slots], key)
        slot = slots[idx]
        live.replica = idx
        slot.outstanding += 1
        # the replica's API server handles requests one at a time (HTTP, chat template, tokenization), then
        # the engine sees the request; busy servers add a per-request-in-flight delay
        perf = self._perf
        start = now if now > slot.frontend_free_ns else slot.frontend_free_ns
        done = start + perf.tokenize_ns(live.prompt)
        slot.frontend_free_ns = done
        delay = perf.frontend_delay_ns(slot.outstanding, frontend_jitter(spec.seed, rid))
        if self._burst is not None:  # the trained model's partly synchronised closed-loop arrivals
            delay += self._burst(slot.outstanding, live.prompt)
        elif self._pd_burst is not None and self._entry is not None:  # disaggregated: per prefill worker
            delay += self._pd_burst((len(self._live) - 1) / len(self._entry), live.prompt)
        if self._speed is not None:  # a calibrated twin replays the machine's speed noise on the front end too
            delay = int(delay * self._speed(now))
        heapq.heappush(self._heap, (done + delay, ARRIVE, next(self._seq), rid))

    def _client_next(self, client: int, now: int) -> None:
        """A closed-loop client is free at ``now``: start its next request (if the run goes on)."""
        if self._stop_ns is not None and now >= self._stop_ns:
            self._exhausted = True  # an endless closed-loop stream stops here
            return
        spec = self._next_unit()
        if spec is not None:
            self._start(spec, now, client)

    # ---- engine side ---------------------------------------------------------------------------------------
    def _ready_indices(self) -> list[int]:
        return [i for i, s in enumerate(self._slots) if s.state == "ready"]

    def _arrive(self, rid: int, now: int) -> RequestRecord | None:
        live = self._live[rid]
        idx = live.replica
        slot = self._slots[idx]
        spec = live.spec
        if self._frag is not None:
            need = -(-(live.prompt + spec.output_tokens) // self._block)
            self._max_request_blocks = max(self._max_request_blocks, need)
            pool = slot.replica.pool
            if need > pool.total - pool.lost:  # never fragmented past the point where this request cannot fit
                pool.fragment_to(pool.total - need)
        try:
            if slot.pool == "prefill":  # the prompt only: one sampled token, then the KV moves to a decode worker
                slot.replica.add(rid, live.prompt, 1, now, live.hashes, priority=spec.priority)
            else:
                slot.replica.add(rid, live.prompt, spec.output_tokens, now, live.hashes, priority=spec.priority)
        except ValueError as exc:
            del self._live[rid]
            slot.outstanding -= 1
            rec = record_error(
                live.spec, live.scheduled_ns, live.prompt, live.replica, now, str(exc), sent_ns=live.sent_ns
            )
            self._after_request(live, now)
            return rec
        if not slot.busy:
            self._run_step(idx, now)
        return None

    def _run_step(self, idx: int, now: int) -> None:
        slot = self._slots[idx]
        # open-loop traffic without sessions: a completion's time matters only through its token times
        through = self._open_plain and not self._sessions
        heap = self._heap
        res = slot.replica.step_fast(now, heap[0][0] if heap else None, through_finishes=through)
        if res is None:
            slot.busy = False
            if slot.state == "draining":
                slot.state = "stopped"
                slot.stopped_ns = now
            return
        duration, done, _ = res
        slot.busy = True
        slot.busy_ns += duration
        slot.pending_done = done
        self.result.steps += 1
        heapq.heappush(heap, (now + duration, STEP_END, next(self._seq), idx))

    def _step_end(self, idx: int, now: int) -> list[RequestRecord]:
        slot = self._slots[idx]
        done = slot.pending_done
        if not done:
            self._run_step(idx, now)
            return []
        slot.pending_done = []
        out: list[RequestRecord] = []
        rep = slot.replica
        live_map = self._live
        if slot.pool == "prefill":
            for c in done:
                slot.outstanding -= 1
                t0 = rep.token_times(c)[0]
                xfer = self._xfer.ns(live_map[c.id].prompt)
                self.result.kv_transfer_s += xfer / 1e9
                heapq.heappush(self._heap, (t0 + xfer, KV_ARRIVE, next(self._seq), c.id))
            self._run_step(idx, now)
            return out
        win = self._win_ttfts
        scaled = self._scaler is not None
        for c in done:
            live = live_map.pop(c.id)
            slot.outstanding -= 1
            times = rep.token_times(c)
            spec = live.spec
            out.append(record_ok(spec, live.scheduled_ns, live.prompt, live.replica, times, live.sent_ns))
            t0 = times[0]
            ttft = (t0 - live.scheduled_ns) / 1e6
            win.append(ttft)
            if scaled:
                self._ttft_window.append((t0, ttft))
            if live.client >= 0 or spec.session_id is not None:
                self._after_request(live, now, output=len(times), end=times[-1])
        self._win_completed += len(done)
        self._run_step(idx, now)
        return out

    def _kv_arrive(self, rid: int, now: int) -> RequestRecord | None:
        """A disaggregated request's KV reached the decode pool: the least-loaded decode worker admits it."""
        live = self._live[rid]
        slots = self._slots
        idx = min(self._decode_idx, key=lambda i: (slots[i].outstanding, i))
        slot = slots[idx]
        live.replica = idx
        live.decoding = True
        slot.outstanding += 1
        spec = live.spec
        try:
            slot.replica.add(rid, live.prompt, spec.output_tokens, now, priority=spec.priority, kv_ready=live.prompt)
        except ValueError as exc:
            del self._live[rid]
            slot.outstanding -= 1
            rec = record_error(spec, live.scheduled_ns, live.prompt, idx, now, str(exc), sent_ns=live.sent_ns)
            self._after_request(live, now)
            return rec
        if not slot.busy:
            self._run_step(idx, now)
        return None

    def _after_request(self, live: _Live, now: int, output: int = 0, end: int | None = None) -> None:
        """Session bookkeeping and the closed-loop client's next move (``end``: the last token's time; None when
        the request failed)."""
        spec = live.spec
        ses = self._sessions.get(spec.session_id) if spec.session_id is not None else None
        if ses is not None and ses.graph is not None:
            g = ses.graph
            self._graph_end(ses, g, spec, now, end, output)
            if g.left > 0:
                return
            del self._sessions[spec.session_id]  # type: ignore[arg-type]
        elif ses is not None:
            ses.history = live.prompt + output
            if ses.turns:
                nxt = ses.turns.popleft()
                self._push(now + nxt.think_time_ns, SPEC_DUE, (nxt, live.client))
                return
            del self._sessions[spec.session_id]  # type: ignore[arg-type]
        if live.client >= 0:
            if self._gap is not None and end is not None:
                # the client's own delay before its next request: the request is scheduled (and routed) for
                # ``now + gap`` at once rather than through an event of its own — a third of the closed loop's events
                # otherwise; its routing sees the replicas' load a few ms early (and a twin's serial front end may
                # take it in ahead of a request due within those ms), which nothing measurable depends on
                self._client_next(live.client, now + self._gap())
                return
            self._client_next(live.client, now)

    # ---- autoscaling and timeline --------------------------------------------------------------------------
    def _observe(self, now: int) -> dict[str, float]:
        """Every metric the autoscaler may read (its policy metric, and its rules' conditions)."""
        assert self._scaler is not None
        pol = self._scaler.policy
        ready = [s for s in self._slots if s.state == "ready"]
        n = max(len(ready), 1)
        stats = [s.replica.stats() for s in ready]
        interval = pol.scrape_interval_s * 1e9
        util = [min(1.0, (s.busy_ns - s.busy_mark_ns) / interval) for s in ready]
        for s in self._slots:
            s.busy_mark_ns = s.busy_ns
        lo = now - int(pol.window_s * 1e9)
        win = self._ttft_window
        while win and win[0][0] < lo:
            win.popleft()
        vals = sorted(v for _, v in win)
        frag = 0.0
        if self._frag is not None:
            for s in ready:
                pool = s.replica.pool
                target = round(self._frag.share(s.busy_ns / 1e9) * pool.total)
                pool.fragment_to(min(target, pool.total - self._max_request_blocks))
                frag = max(frag, pool.lost / pool.total)
        return {
            "kv_fragmentation": frag,
            "queue_depth": sum(x.waiting for x in stats) / n,
            "running": sum(x.running for x in stats) / n,
            "kv_usage": sum(x.kv_usage for x in stats) / n,
            "ttft_p99": vals[min(len(vals) - 1, math.ceil(0.99 * len(vals)) - 1)] if vals else 0.0,
            "gpu_util": sum(util) / len(util) if util else 0.0,
        }

    def _scrape(self, now: int) -> None:
        assert self._scaler is not None
        pol = self._scaler.policy
        ready = sum(1 for s in self._slots if s.state == "ready")
        pending = sum(1 for s in self._slots if s.state == "pending")
        obs = self._observe(now)
        backlog = sum(1 for live in self._live.values() if live.replica < 0) if ready == 0 else 0
        change = self._scaler.decide(
            now / 1e9, ready, pending, obs[pol.metric], observations=obs, backlog=backlog, rebuilding=self._rebuilding
        )
        cold = int(pol.cold_start_s(self._perf.weight_load_bytes_per_gpu()) * 1e9)
        if self._scaler.rebuild is not None:
            cand = self._ready_indices()
            worst = max(cand, key=lambda i: (self._slots[i].replica.pool.lost, -i))
            self._slots.append(
                _Slot(self.cluster.new_replica(self._perf), state="pending", created_ns=now, replaces=worst)
            )
            self._push(now + cold, REPLICA_READY, len(self._slots) - 1)
            self._rebuilding += 1
            self.result.rebuilds += 1
            self.result.scale_events.append(
                (now / 1e9, 0, f"rebuild replica {worst}: a fresh one starts, the old one drains when it is ready "
                 f"({self._scaler.rebuild})")
            )  # fmt: skip
        if change > 0:
            for _ in range(change):
                self._slots.append(_Slot(self.cluster.new_replica(self._perf), state="pending", created_ns=now))
                self._push(now + cold, REPLICA_READY, len(self._slots) - 1)
            self.result.scale_events.append((now / 1e9, change, self._scaler.reason))
        elif change < 0:
            keep = 1 if pol.min_replicas > 0 else 0
            for _ in range(-change):
                cand = [i for i, s in enumerate(self._slots) if s.state == "ready"]
                if len(cand) <= keep:
                    break
                victim = self._slots[cand[-1]]
                victim.state = "draining" if victim.busy else "stopped"
                if victim.state == "stopped":
                    victim.stopped_ns = now
            self.result.scale_events.append((now / 1e9, change, self._scaler.reason))
        if self._live or not self._exhausted:
            self._push(now + int(pol.scrape_interval_s * 1e9), SCRAPE, None)

    def _replica_ready(self, idx: int, now: int) -> None:
        """A cold start ended; a rebuild's replacement retires the replica it replaces (it drains its requests)."""
        slot = self._slots[idx]
        slot.state = "ready"
        if slot.replaces is not None:
            self._rebuilding -= 1
            old = self._slots[slot.replaces]
            if old.state == "ready":
                old.state = "draining" if old.busy else "stopped"
                if old.state == "stopped":
                    old.stopped_ns = now

    def _timeline(self, now: int) -> None:
        ready = [s for s in self._slots if s.state == "ready"]
        stats = [s.replica.stats() for s in self._slots]
        t = sorted(self._win_ttfts)
        p99 = t[min(len(t) - 1, math.ceil(0.99 * len(t)) - 1)] if t else None
        self.result.timeline.append(
            {
                "t_s": now / 1e9,
                "replicas_ready": len(ready),
                "replicas_pending": sum(1 for s in self._slots if s.state == "pending"),
                "waiting": sum(st.waiting for st in stats),
                "running": sum(st.running for st in stats),
                "kv_usage": (sum(s.replica.pool.used / s.replica.pool.total for s in ready) / len(ready))
                if ready
                else 0.0,
                "ttft_p99_ms": p99,
                "completed": self._win_completed,
            }
        )
        if self._frag is not None:  # the largest share of KV blocks lost to fragmentation on a ready replica
            row = self.result.timeline[-1]
            row["kv_fragmentation"] = max((s.replica.pool.lost / s.replica.pool.total for s in ready), default=0.0)
        self._win_ttfts = []
        self._win_completed = 0
        if self._live or not self._exhausted or any(s.busy for s in self._slots):
            self._push(now + _TIMELINE_NS, TIMELINE, None)

    def _lifetime_ns(self, spec: RequestSpec, n: int) -> int:
        """Rough lifetime of ``spec`` among ``n`` clients in steady state: each decode step also carries the
        prefill of the requests that replace finished ones (``n × input / output`` tokens per step)."""
        perf = self._perf
        isl, osl = spec.input_tokens, max(spec.output_tokens, 1)
        per_step = min(n * isl // osl, self.cluster.engine_config().max_num_batched_tokens)
        ctx = n * (isl + osl // 2)
        prefill = [(per_step, isl // 2)] if per_step else []
        step = perf.step_ns(prefill, n, ctx)
        return perf.tokenize_ns(isl) + perf.frontend_delay_ns(n) + perf.step_ns([(isl, 0)], 0, 0) + osl * step

    # ---- main loop -----------------------------------------------------------------------------------------
    def run(self) -> Iterator[RequestRecord]:
        """Simulate to the end, yielding each request's record when it completes."""
        wall0 = time.perf_counter()
        push = self._push
        first = self._next_unit()
        if first is not None:
            if first.at_ns is None:
                n = self.concurrency or 1
                if self._desync.enabled and self.concurrency is not None:
                    self._gap = self._desync.sampler(n, first.seed)
                ramp = self._ramp_ns if self._ramp_ns is not None else self._lifetime_ns(first, n)
                self._start(first, 0, 0)
                for c in range(1, n):
                    push(ramp * c // n, CLIENT_START, c)
            else:
                push(first.at_ns, SPEC_DUE, (first, -1))
        if self._scaler is not None:
            push(0, SCRAPE, None)
        push(_TIMELINE_NS, TIMELINE, None)
        now = last = 0
        n_rec = 0
        heap = self._heap
        pop = heapq.heappop
        horizon = self._horizon_ns
        while heap:
            now, kind, _, payload = pop(heap)
            if horizon is not None and now > horizon:
                now = horizon
                break
            if kind == STEP_END:
                for rec in self._step_end(payload, now):
                    n_rec += 1
                    last = now
                    yield rec
            elif kind == ARRIVE:
                err = self._arrive(payload, now)
                if err is not None:
                    n_rec += 1
                    yield err
            elif kind == SPEC_DUE:
                spec, client = payload
                self._start(spec, now, client)
                if client < 0 and (spec.turn or 0) == 0:
                    nxt = self._next_unit()
                    if nxt is not None:
                        push(max(nxt.at_ns or now, now), SPEC_DUE, (nxt, -1))
            elif kind == CLIENT_START:
                self._client_next(payload, now)
            elif kind == KV_ARRIVE:
                err = self._kv_arrive(payload, now)
                if err is not None:
                    n_rec += 1
                    yield err
            elif kind == ROUTE:
                self._route(payload, now)
            elif kind == SCRAPE:
                self._scrape(now)
            elif kind == TIMELINE:
                self._timeline(now)
            elif kind == REPLICA_READY and self._slots[payload].state == "pending":
                self._replica_ready(payload, now)
        self._live_at_horizon = bool(self._live)
        for live in list(self._live.values()):
            n_rec += 1
            yield record_error(
                live.spec,
                live.scheduled_ns,
                live.prompt,
                live.replica,
                now,
                "in flight at the simulation horizon",
                incomplete=True,
                sent_ns=live.sent_ns,
            )
        self._live.clear()
        res = self.result
        res.requests = n_rec
        # simulated time: up to the last token (the timeline's trailing ticks do not count), or the horizon
        res.virtual_s = (now if self._live_at_horizon else max(last, 1)) / 1e9
        res.wall_s = time.perf_counter() - wall0
        end_ns = int(res.virtual_s * 1e9)
        for s in self._slots:
            stop = s.stopped_ns if s.stopped_ns is not None else end_ns
            res.gpu_seconds += max(0, stop - s.created_ns) / 1e9 * s.tp
            st = s.replica.stats()
            res.prefix_queries_tokens += st.prefix_queries_tokens
            res.prefix_hits_tokens += st.prefix_hits_tokens
            res.preemptions += st.preemptions
            res.recompute_tokens += int(st.extra.get("recompute_tokens", 0))
            res.kv_swapped_tokens += int(st.extra.get("kv_swapped_tokens", 0))
            res.kv_swap_s += st.extra.get("kv_swap_s", 0.0)
