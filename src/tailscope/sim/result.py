"""What a finished simulation reports besides its records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SimResult:
    """What a finished simulation reports besides its records.

    Attributes:
        virtual_s: simulated seconds from the first event to the last.
        wall_s: seconds the simulation took on this machine.
        requests: records produced.
        steps: engine steps run (all replicas).
        prefix_queries_tokens / prefix_hits_tokens: prompt tokens looked up / found in prefix caches.
        preemptions: recompute preemptions (all replicas).
        timeline: one row per 10 s window (t_s, replicas_ready, replicas_pending, waiting, running, kv_usage,
            ttft_p99_ms, completed).
        scale_events: (t_s, change, reason) for every autoscaler decision that changed the replica count.
        gpu_seconds: GPU time paid for: every replica × TP from when it was requested (cold starts included) until
            it stopped or the simulation ended — multiply by a $/GPU-hour price for cost.
        recompute_tokens: prompt + output tokens computed again after recompute preemptions.
        kv_swapped_tokens / kv_swap_s: KV tokens copied to or from host memory (``--kv-offload-gib``) and the time
            those copies took.
        kv_transfer_s: total time of the prefill→decode KV transfers (disaggregated deployments).
        rebuilds: replicas replaced by an autoscale ``rebuild:`` rule (KV fragmentation).
        clients: a closed loop's clients (0 for an open loop).
        clients_stagger_s: a closed loop's start: client ``i`` of ``clients`` started at ``i / clients ×
            clients_stagger_s`` virtual seconds (0: all at once, as ``tailscope bench --concurrency`` starts them);
            None for an open loop.
    """

    virtual_s: float = 0.0
    wall_s: float = 0.0
    requests: int = 0
    steps: int = 0
    prefix_queries_tokens: int = 0
    prefix_hits_tokens: int = 0
    preemptions: int = 0
    timeline: list[dict[str, Any]] = field(default_factory=list)
    scale_events: list[tuple[float, int, str]] = field(default_factory=list)
    gpu_seconds: float = 0.0
    recompute_tokens: int = 0
    kv_swapped_tokens: int = 0
    kv_swap_s: float = 0.0
    kv_transfer_s: float = 0.0
    rebuilds: int = 0
    clients: int = 0
    clients_stagger_s: float | None = None

    @property
    def speedup(self) -> float:
        """Virtual seconds per wall second."""
        return self.virtual_s / self.wall_s if self.wall_s > 0 else math.inf

    @property
    def prefix_hit_rate(self) -> float | None:
        return self.prefix_hits_tokens / self.prefix_queries_tokens if self.prefix_queries_tokens else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "virtual_s": self.virtual_s,
            "wall_s": self.wall_s,
            "speedup": self.speedup,
            "requests": self.requests,
            "steps": self.steps,
            "prefix_hit_rate": self.prefix_hit_rate,
            "prefix_queries_tokens": self.prefix_queries_tokens,
            "prefix_hits_tokens": self.prefix_hits_tokens,
            "preemptions": self.preemptions,
            "gpu_seconds": self.gpu_seconds,
            "gpu_hours": self.gpu_seconds / 3600.0,
            "recompute_tokens": self.recompute_tokens,
            "kv_swapped_tokens": self.kv_swapped_tokens,
            "kv_swap_s": self.kv_swap_s,
            "kv_transfer_s": self.kv_transfer_s,
            "rebuilds": self.rebuilds,
            "clients": self.clients,
            "clients_stagger_s": self.clients_stagger_s,
            "timeline": self.timeline,
            "scale_events": [list(e) for e in self.scale_events],
        }
