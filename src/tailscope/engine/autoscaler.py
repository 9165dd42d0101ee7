"""Autoscaling policy, as production autoscalers (Kubernetes HPA / KEDA) apply it to LLM replicas.

Every ``scrape_interval_s`` the policy reads one metric and computes the HPA rule
``desired = ceil(ready × observed / target)`` (for ``queue_depth`` and ``running`` the observed value is the
per-replica average; for ``kv_usage`` the mean fraction; for ``ttft_p99`` the P99 TTFT of requests whose first
token arrived in the last ``window_s``), clamped to ``[min_replicas, max_replicas]``. Scale-ups wait
``scale_up_cooldown_s`` after the previous scale-up; scale-downs wait ``scale_down_cooldown_s`` after any change.

A new replica serves only after its cold start::

    cold_start = provisioning_s + weight bytes per GPU / (load_gbps · 10⁹) + engine_init_s

so a scale-up decided during a burst arrives minutes late, as it does in reality. Policy file (YAML, read by
:mod:`tailscope.io.autoscaler`)::

    metric: queue_depth        # queue_depth | running | kv_usage | ttft_p99
    target: 8                  # per replica (ttft_p99: milliseconds; kv_usage: fraction)
    min_replicas: 1
    max_replicas: 8
    scrape_interval_s: 15
    scale_up_cooldown_s: 60
    scale_down_cooldown_s: 300
    provisioning_s: 90         # node/pod scheduling + image pull
    load_gbps: 2.0             # weight download/load bandwidth per GPU
    engine_init_s: 30          # CUDA graphs, profiling, warm-up
    window_s: 60               # for ttft_p99
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailscope.errors import ConfigError

METRICS = ("queue_depth", "running", "kv_usage", "ttft_p99")


@dataclass(frozen=True, slots=True)
class AutoscalePolicy:
    """See the module docstring for each field's meaning; times in seconds."""

    metric: str = "queue_depth"
    target: float = 8.0
    min_replicas: int = 1
    max_replicas: int = 8
    scrape_interval_s: float = 15.0
    scale_up_cooldown_s: float = 60.0
    scale_down_cooldown_s: float = 300.0
    provisioning_s: float = 90.0
    load_gbps: float = 2.0
    engine_init_s: float = 30.0
    window_s: float = 60.0

    def validate(self, where: str = "autoscale policy") -> AutoscalePolicy:
        if self.metric not in METRICS:
            raise ConfigError(f"{where}: metric {self.metric!r} must be one of {', '.join(METRICS)}")
        if not self.target > 0:
            raise ConfigError(f"{where}: target must be > 0 (got {self.target!r})")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ConfigError(
                f"{where}: need 1 ≤ min_replicas ≤ max_replicas (got {self.min_replicas}, {self.max_replicas})"
            )
        if not self.scrape_interval_s > 0 or not self.load_gbps > 0:
            raise ConfigError(f"{where}: scrape_interval_s and load_gbps must be > 0")
        for f in ("scale_up_cooldown_s", "scale_down_cooldown_s", "provisioning_s", "engine_init_s", "window_s"):
            if getattr(self, f) < 0:
                raise ConfigError(f"{where}: {f} must be ≥ 0")
        return self

    def cold_start_s(self, weight_bytes_per_gpu: float) -> float:
        """Seconds from the scale-up decision until the new replica serves."""
        return self.provisioning_s + weight_bytes_per_gpu / (self.load_gbps * 1e9) + self.engine_init_s


class Autoscaler:
    """Stateful decision maker: call :meth:`decide` at each scrape with the current observation."""

    def __init__(self, policy: AutoscalePolicy) -> None:
        self.policy = policy.validate()
        self._last_up = -math.inf
        self._last_change = -math.inf

    def desired(self, ready: int, observed: float) -> int:
        """HPA rule, clamped."""
        p = self.policy
        base = max(ready, 1)
        want = math.ceil(base * observed / p.target - 1e-9) if observed > 0 else p.min_replicas
        return max(p.min_replicas, min(p.max_replicas, want))

    def decide(self, now_s: float, ready: int, pending: int, observed: float) -> int:
        """Replica count change (+n start, −n stop, 0 nothing) at time ``now_s``.

        Args:
            ready: replicas serving; pending: replicas still cold-starting (they count toward the total).
            observed: the policy metric (see the module docstring).
        """
        p = self.policy
        current = ready + pending
        want = self.desired(ready, observed)
        if want > current and now_s - self._last_up >= p.scale_up_cooldown_s:
            self._last_up = self._last_change = now_s
            return want - current
        if want < current and now_s - self._last_change >= p.scale_down_cooldown_s and pending == 0:
            self._last_change = now_s
            return want - current
        return 0
