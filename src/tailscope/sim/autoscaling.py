"""The simulation's periodic observers: the autoscaler (its scrape, decisions, cold starts and rebuilds) and the
timeline (one row of replica and latency figures every 10 virtual seconds).
"""

from __future__ import annotations

import math

from tailscope.sim.events import REPLICA_READY, SCRAPE, TIMELINE
from tailscope.sim.state import ReplicaSlot, SimState

__all__ = ["TIMELINE_NS", "Autoscaling"]

#: virtual time between two timeline rows
TIMELINE_NS = 10_000_000_000


class Autoscaling(SimState):
    """Scrapes, scaling decisions and replica life cycles; the timeline rows."""

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
                ReplicaSlot(self.cluster.new_replica(self._perf), state="pending", created_ns=now, replaces=worst)
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
                self._slots.append(ReplicaSlot(self.cluster.new_replica(self._perf), state="pending", created_ns=now))
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
            self._push(now + TIMELINE_NS, TIMELINE, None)
