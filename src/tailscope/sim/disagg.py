"""Disaggregated serving in the simulation (``cluster.disagg``): the prefill pool hands each request's KV to the
decode pool.

The router picks a prefill worker (``routing.py``); the request runs its prompt there (one sampled token), its KV
crosses to the decode pool (:class:`~tailscope.engine.disagg.KvTransfer`), and the decode worker with the fewest
requests in flight admits it with that KV present: its first step computes the last prompt token and samples the
first output token the client sees (as vLLM's P/D proxy does). TTFT therefore includes the prefill, the transfer and
the decode worker's first step; decode steps never carry prefill chunks.
"""

from __future__ import annotations

import heapq

from tailscope.engine.replica import Completion
from tailscope.records import RequestRecord
from tailscope.sim.events import KV_ARRIVE
from tailscope.sim.state import ReplicaSlot, SimState

__all__ = ["Disaggregation"]


class Disaggregation(SimState):
    """The prefill → decode hand-off: the KV transfer and the decode worker's admission."""

    def _hand_off(self, slot: ReplicaSlot, done: list[Completion]) -> None:
        """A prefill worker finished prompts: each request's KV leaves for the decode pool when its first token is
        sampled and arrives after the transfer."""
        rep = slot.replica
        live_map = self._live
        for c in done:
            slot.outstanding -= 1
            t0 = rep.token_times(c)[0]
            xfer = self._xfer.ns(live_map[c.id].prompt)
            self.result.kv_transfer_s += xfer / 1e9
            heapq.heappush(self._heap, (t0 + xfer, KV_ARRIVE, next(self._seq), c.id))

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
            return self._refused(live, slot, now, exc)
        if not slot.busy:
            self._run_step(idx, now)
        return None
