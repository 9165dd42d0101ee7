"""A due request's way to a replica's engine: the router picks a replica (aggregated) or a prefill worker
(disaggregated), the replica's API server takes it in, and the engine queues it.

A request reaches a replica after the API-server latency (``Efficiency.frontend_ms``): the server handles requests
one at a time (HTTP, chat template, tokenization), and busy servers add a per-request-in-flight delay; a calibrated
twin adds its synchronised arrivals and its machine's speed noise.
"""

from __future__ import annotations

import heapq

from tailscope.engine.perf import frontend_jitter
from tailscope.records import RequestRecord
from tailscope.sim.events import ARRIVE, ROUTE
from tailscope.sim.state import LiveRequest, SimState

__all__ = ["Routing"]


class Routing(SimState):
    """Routing, the API-server front end and the engine's intake."""

    def _route(self, rid: int, now: int) -> None:
        self._route_live(self._live[rid], now)

    def _route_live(self, live: LiveRequest, now: int) -> None:
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
        if self._engine_wait is not None:  # the engine's input cadence, its attention-DP balancing
            delay += self._engine_wait(slot.outstanding, live.prompt, prefill_pool=self._prefill_pool)
        if live.client < 0:  # an open loop's arrivals are its own: the synchronised share is a closed loop's
            pass
        elif self._burst is not None:  # the trained model's partly synchronised closed-loop arrivals
            delay += self._burst(slot.outstanding, live.prompt)
        elif self._pd_burst is not None and self._entry is not None:  # disaggregated: per prefill worker
            delay += self._pd_burst((len(self._live) - 1) / len(self._entry), live.prompt)
        if self._speed is not None:  # a calibrated twin replays the machine's speed noise on the front end too
            delay = int(delay * self._speed(now))
        heapq.heappush(self._heap, (done + delay, ARRIVE, next(self._seq), rid))

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
            return self._refused(live, slot, now, exc)
        if not slot.busy:
            self._run_step(idx, now)
        return None
