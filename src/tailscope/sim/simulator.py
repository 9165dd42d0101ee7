"""Drive a simulated cluster in virtual time from a stream of :class:`RequestSpec` and yield RequestRecords.

:class:`Simulation` runs the event loop over a heap of ``(time, priority, seq)`` events (:mod:`tailscope.sim.events`)
and the replicas' engine steps; headline times are from ``scheduled_ns`` as for bench, and records are yielded as
requests finish (memory stays bounded by what is in flight). The rest is one module per concept, each a part of
:class:`Simulation` over the shared :class:`~tailscope.sim.state.SimState`:

* ``clients.py``: the request stream, open and closed loop, sessions, shared prefixes and their block hashes;
* ``call_graphs.py``: agent call graphs (calls that wait for their predecessors);
* ``routing.py``: the router, the replica's API-server front end, the engine's intake;
* ``disagg.py``: the prefill → decode hand-off of disaggregated serving (``cluster.disagg``);
* ``autoscaling.py``: the autoscaler's scrapes, cold starts and rebuilds, and the timeline.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Iterable, Iterator

from tailscope.engine.autoscaler import Autoscaler
from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.desync import DEFAULT as _DESYNC
from tailscope.engine.desync import Desync
from tailscope.engine.router import Router
from tailscope.records import RequestRecord
from tailscope.sim.autoscaling import TIMELINE_NS, Autoscaling
from tailscope.sim.clients import Clients
from tailscope.sim.disagg import Disaggregation
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
from tailscope.sim.routing import Routing
from tailscope.sim.state import ReplicaSlot
from tailscope.workload.spec import RequestSpec

__all__ = ["SimResult", "Simulation"]


class Simulation(Clients, Routing, Disaggregation, Autoscaling):
    """One simulation run. Iterate :meth:`run` for records; read :attr:`result` afterwards.

    Args:
        cluster: the deployment.
        specs: the workload (any iterable; consumed lazily).
        concurrency: virtual clients for closed-loop specs (``at_ns`` None); ignored for open loop.
        duration_s: stop starting new closed-loop requests (and any call of a call graph) after this many virtual
            seconds.
        horizon_s: hard stop; requests still in flight become ``incomplete`` records.
        ramp_s: closed loop only — client i starts at ``i / concurrency × ramp_s``. None = one estimated
            request lifetime of the first request: a loop of fixed lengths started at once marches in lock-step
            waves of simultaneous prefills, which the measured closed loops of the corpus do not show. 0 = every
            client at t=0, as ``tailscope bench --concurrency`` starts them (against the built-in engine, whose
            step times have no noise, a bench does march in those waves; docs/engine.md, "tailscope sim").
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
        self._peek = None
        self._exhausted = False
        self.concurrency = concurrency
        self._stop_ns = int(duration_s * 1e9) if duration_s is not None else None
        self._horizon_ns = int(horizon_s * 1e9) if horizon_s is not None else None
        self._ramp_ns = int(ramp_s * 1e9) if ramp_s is not None else None
        #: the closed-loop clients' desynchronising delays, one per call, ns (None: off or an open loop)
        self._desync = desync
        self._gap = None  # set in run() for a closed loop
        self._perf = cluster.perf()
        self._speed = getattr(self._perf, "speed_factor", None)
        #: the trained model's partly synchronised closed-loop arrivals (closed-loop clients only) and the engine's
        #: wait before it schedules an arriving request (every request: its input cadence, attention-DP balancing)
        self._burst = getattr(self._perf, "arrival_burst_ns", None)
        self._pd_burst = None
        self._engine_wait = getattr(self._perf, "engine_wait_ns", None)
        self._prefill_pool = False
        self._pickup = None  # disaggregated: the decode worker's scheduler taking a request in (disagg.py)
        #: a calibrated twin's measured client send lag (open loop only): ``(seed, request id) -> ns``
        self._send_lag = getattr(self._perf, "send_lag_ns", None)
        self._block = cluster.engine_config().block_size
        self._router = Router(cluster.router)
        self._scaler = Autoscaler(cluster.autoscale) if cluster.autoscale is not None else None
        self._frag = cluster.autoscale.fragmentation if cluster.autoscale is not None else None
        self._rebuilding = 0
        self._max_request_blocks = 0  # the largest request seen (fragmentation never leaves less room than this)
        d = cluster.disagg
        if d is None:
            self._slots = [ReplicaSlot(cluster.new_replica(self._perf), tp=cluster.tp) for _ in range(cluster.replicas)]
            self._entry = None
        else:
            # each attention-DP rank of a pool's workers schedules its own batch (as the aggregated replicas do)
            self._perf = cluster.perf("prefill")
            dec = cluster.perf("decode")
            pre_tp, dec_tp = cluster.pool_parallelism("prefill").tp, cluster.pool_parallelism("decode").tp
            pre_ranks, dec_ranks = cluster.ranks("prefill"), cluster.ranks("decode")
            self._slots = [
                ReplicaSlot(cluster.new_replica(self._perf), tp=pre_tp, pool="prefill") for _ in range(pre_ranks)
            ] + [ReplicaSlot(cluster.new_replica(dec), tp=dec_tp, pool="decode") for _ in range(dec_ranks)]
            self._entry = list(range(pre_ranks))  # the router's choices: prefill ranks
            self._decode_idx = list(range(pre_ranks, len(self._slots)))
            self._xfer = cluster.kv_transfer()
            # the prefill pool's synchronised arrivals replace the aggregated replica's (same form, own share)
            self._burst = None
            self._pd_burst = getattr(self._perf, "disagg_arrival_burst_ns", None)
            self._engine_wait = getattr(self._perf, "engine_wait_ns", None)
            self._prefill_pool = True
            self._pickup = getattr(dec, "pickup_wait_ns", None)
        # the event heap (see SimState)
        self._heap = []
        self._seq = itertools.count(1)
        self._live = {}
        self._sessions = {}
        self._prefix_chains = {}
        self._ttft_window = deque()
        self._win_ttfts = []
        self._win_completed = 0
        self.result = SimResult()
        self.planned = {}
        self.step_names = {}
        self._live_at_horizon = False
        # open-loop traffic without autoscaling (and, checked per step, without live sessions)
        self._open_plain = concurrency is None and self._scaler is None

    # ---- engine side ---------------------------------------------------------------------------------------
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
        if slot.pool == "prefill":  # disagg.py
            self._hand_off(slot, done)
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
                self.result.clients, self.result.clients_stagger_s = n, ramp / 1e9
                self._start(first, 0, 0)
                for c in range(1, n):
                    push(ramp * c // n, CLIENT_START, c)
            else:
                push(first.at_ns, SPEC_DUE, (first, -1))
        if self._scaler is not None:
            push(0, SCRAPE, None)
        push(TIMELINE_NS, TIMELINE, None)
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
