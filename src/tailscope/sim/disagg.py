"""Disaggregated serving in the simulation (``cluster.disagg``): the prefill pool hands each request's KV to the
decode pool.

The router picks a prefill worker (``routing.py``); the request runs its prompt there (one sampled token), its KV
crosses to the decode pool (:class:`~tailscope.engine.disagg.KvTransfer`), and the decode worker with the fewest
requests in flight admits it with that KV present once its scheduler takes the request in (the trained model's
``pickup_wait_ns``, at that worker's load when the prefill ends): its first step computes the last prompt token and
samples the first output token the client sees (as vLLM's P/D proxy does). TTFT therefore includes the prefill, the
transfer, the decode scheduler's pickup and the decode worker's first step; decode steps never carry prefill chunks.
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
        pickup = self._pickup
        if pickup is not None:  # the decode worker's scheduler takes the request in at its own cadence
            slots = self._slots
            least = min(slots[i].outstanding for i in self._decode_idx) + 1
        for c in done:
            slot.outstanding -= 1
            t0 = rep.token_times(c)[0]
            prompt = live_map[c.id].prompt
            xfer = self._xfer.ns(prompt)
            self.result.kv_transfer_s += xfer / 1e9
            wait = pickup(least, prompt) if pickup is not None else 0
            heapq.heappush(self._heap, (t0 + xfer + wait, KV_ARRIVE, next(self._seq), c.id))

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
