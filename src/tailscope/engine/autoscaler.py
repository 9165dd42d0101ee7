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

**Compound rules** (the method's custom-metric autoscaling, article 003 §4.2) replace the HPA rule when given: each
rule scales by ``step`` replicas once all its conditions have held for ``for_s`` seconds (counted over consecutive
scrapes), within the cooldowns and ``[min_replicas, max_replicas]``::

    rules:
      - {up: "ttft_p99 > 1000", for_s: 120}                      # P99 > 1 s for 2 min
      - {down: "gpu_util < 0.3 and ttft_p99 < 800", for_s: 300}  # GPU < 30 % and P99 < 0.8 s for 5 min
    min_replicas: 0            # scale to zero when idle; the first request waiting at the gateway starts one
    cold_start_s: 240          # a fixed cold start (the method's 4-minute weight load) instead of the formula

Condition metrics: ``queue_depth``, ``running`` (per ready replica), ``kv_usage`` (fraction), ``ttft_p99`` (ms, over
``window_s``), ``gpu_util`` (the share of the last scrape interval the ready replicas spent running engine steps, 0–1).
With no replica serving (scale from zero), a request waiting at the gateway starts ``max(1, min_replicas)`` replicas
at once — KEDA's activation.

**Rebuild, not scale** (the method's third rule): with a ``fragmentation:`` model the simulated replicas' KV memory
fragments as they serve, and a ``rebuild:`` rule replaces the most fragmented replica (a fresh one cold-starts beside
it, then the old one drains) instead of adding capacity::

    fragmentation: {max_share: 0.6, tau_s: 3600}   # share lost = 0.6 × (1 − exp(−busy seconds / 3600))
    rules:
      - {rebuild: "kv_fragmentation > 0.4", for_s: 60}

``kv_fragmentation`` is the largest share of KV blocks lost to fragmentation on any ready replica (0–1).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from tailscope.errors import ConfigError

METRICS = ("queue_depth", "running", "kv_usage", "ttft_p99")
#: what a compound rule's conditions can read
CONDITION_METRICS = (*METRICS, "gpu_util", "kv_fragmentation")
#: what a compound rule does when its conditions held long enough
ACTIONS = ("up", "down", "rebuild")
_COND = re.compile(r"^\s*([a-z_0-9]+)\s*(<|>)\s*([-+]?[0-9]*\.?[0-9]+)\s*$")


@dataclass(frozen=True, slots=True)
class Condition:
    """``metric > value`` or ``metric < value``."""

    metric: str
    op: str
    value: float

    def holds(self, observed: Mapping[str, float]) -> bool:
        v = observed.get(self.metric, 0.0)
        return v > self.value if self.op == ">" else v < self.value

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


def parse_conditions(text: str, *, where: str = "rule") -> tuple[Condition, ...]:
    """``"gpu_util < 0.3 and ttft_p99 < 800"`` → conditions (all must hold).

    Raises:
        ConfigError: naming ``where`` and the condition that cannot be read.
    """
    out = []
    for part in re.split(r"\band\b", text):
        m = _COND.match(part)
        if not m:
            raise ConfigError(f"{where}: {part.strip()!r}: expected METRIC > NUMBER or METRIC < NUMBER (joined by and)")
        if m.group(1) not in CONDITION_METRICS:
            raise ConfigError(f"{where}: metric {m.group(1)!r} must be one of {', '.join(CONDITION_METRICS)}")
        out.append(Condition(m.group(1), m.group(2), float(m.group(3))))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class FragmentationModel:
    """How a simulated replica's KV memory fragments while it serves (the memory a real engine's allocator can no
    longer hand out): the share of its KV blocks lost after ``busy_s`` seconds of engine steps is
    ``max_share × (1 − exp(−busy_s / tau_s))``; a rebuilt replica starts at 0."""

    max_share: float = 0.6
    tau_s: float = 3600.0

    def share(self, busy_s: float) -> float:
        return self.max_share * -math.expm1(-max(0.0, busy_s) / self.tau_s)


@dataclass(frozen=True, slots=True)
class ScaleRule:
    """Scale ``action`` (``up``/``down``) by ``step`` replicas once every condition has held for ``for_s``; or
    ``rebuild`` the most fragmented replica."""

    action: str
    when: tuple[Condition, ...]
    for_s: float = 0.0
    step: int = 1

    def __str__(self) -> str:
        return f"{self.action} when {' and '.join(map(str, self.when))} for {self.for_s:g} s"


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
    rules: tuple[ScaleRule, ...] = ()
    cold_start: float | None = None  # seconds; None = provisioning + weight load + engine init
    fragmentation: FragmentationModel | None = None

    def validate(self, where: str = "autoscale policy") -> AutoscalePolicy:
        if self.metric not in METRICS:
            raise ConfigError(f"{where}: metric {self.metric!r} must be one of {', '.join(METRICS)}")
        if not self.target > 0:
            raise ConfigError(f"{where}: target must be > 0 (got {self.target!r})")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ConfigError(
                f"{where}: need 0 ≤ min_replicas ≤ max_replicas, max_replicas ≥ 1 (got {self.min_replicas}, "
                f"{self.max_replicas})"
            )
        if self.min_replicas == 0 and not self.rules and self.metric != "queue_depth":
            raise ConfigError(f"{where}: min_replicas 0 (scale to zero) needs compound rules or metric queue_depth")
        for r in self.rules:
            if r.action not in ACTIONS or not r.when or r.for_s < 0 or r.step < 1:
                raise ConfigError(f"{where}: rule {r}: action up, down or rebuild, ≥ 1 condition, for_s ≥ 0, step ≥ 1")
            if self.fragmentation is None and any(c.metric == "kv_fragmentation" for c in r.when):
                raise ConfigError(
                    f"{where}: rule {r} reads kv_fragmentation, but the simulated KV cache fragments only with a "
                    "fragmentation: model (e.g. fragmentation: {max_share: 0.6, tau_s: 3600})"
                )
        frag = self.fragmentation
        if frag is not None and not (0 < frag.max_share <= 0.9 and frag.tau_s > 0):
            raise ConfigError(
                f"{where}: fragmentation: max_share in (0, 0.9], tau_s > 0 (got {frag.max_share}, {frag.tau_s})"
            )
        if self.cold_start is not None and self.cold_start < 0:
            raise ConfigError(f"{where}: cold_start_s must be ≥ 0")
        if not self.scrape_interval_s > 0 or not self.load_gbps > 0:
            raise ConfigError(f"{where}: scrape_interval_s and load_gbps must be > 0")
        for f in ("scale_up_cooldown_s", "scale_down_cooldown_s", "provisioning_s", "engine_init_s", "window_s"):
            if getattr(self, f) < 0:
                raise ConfigError(f"{where}: {f} must be ≥ 0")
        return self

    def cold_start_s(self, weight_bytes_per_gpu: float) -> float:
        """Seconds from the scale-up decision until the new replica serves."""
        if self.cold_start is not None:
            return self.cold_start
        return self.provisioning_s + weight_bytes_per_gpu / (self.load_gbps * 1e9) + self.engine_init_s


class Autoscaler:
    """Stateful decision maker: call :meth:`decide` at each scrape with the current observation."""

    def __init__(self, policy: AutoscalePolicy) -> None:
        self.policy = policy.validate()
        self._last_up = -math.inf
        self._last_change = -math.inf
        self._since: dict[int, float] = {}  # rule index → when its conditions started holding
        #: why the last non-zero decision was taken (for the simulation's scale events)
        self.reason = ""
        #: set when a rebuild rule fired at the last decision (why), for the caller to replace a replica
        self.rebuild: str | None = None

    def desired(self, ready: int, observed: float) -> int:
        """HPA rule, clamped."""
        p = self.policy
        base = max(ready, 1)
        want = math.ceil(base * observed / p.target - 1e-9) if observed > 0 else p.min_replicas
        return max(p.min_replicas, min(p.max_replicas, want))

    def decide(
        self,
        now_s: float,
        ready: int,
        pending: int,
        observed: float,
        *,
        observations: Mapping[str, float] | None = None,
        backlog: int = 0,
        rebuilding: int = 0,
    ) -> int:
        """Replica count change (+n start, −n stop, 0 nothing) at time ``now_s``.

        Args:
            ready: replicas serving; pending: replicas still cold-starting (they count toward the total).
            observed: the policy metric (see the module docstring).
            observations: every condition metric (for compound rules).
            backlog: requests waiting at the gateway for any replica (scale from zero).
            rebuilding: replacements still cold-starting (no second rebuild fires meanwhile).

        A rebuild rule that fires sets :attr:`rebuild` (else it is None after the call).
        """
        p = self.policy
        self.rebuild = None
        current = ready + pending
        if current == 0 and backlog > 0:
            self._last_up = self._last_change = now_s
            self.reason = f"scale from zero: {backlog} requests waiting"
            return min(p.max_replicas, max(1, p.min_replicas))
        if p.rules:
            return self._rules(now_s, ready, pending, dict(observations or {p.metric: observed}), rebuilding)
        want = self.desired(ready, observed)
        self.reason = f"{p.metric}={observed:.3g}"
        if want > current and now_s - self._last_up >= p.scale_up_cooldown_s:
            self._last_up = self._last_change = now_s
            return want - current
        if want < current and now_s - self._last_change >= p.scale_down_cooldown_s and pending == 0:
            self._last_change = now_s
            return want - current
        return 0

    def _rules(self, now_s: float, ready: int, pending: int, obs: Mapping[str, float], rebuilding: int = 0) -> int:
        p = self.policy
        current = ready + pending
        change = 0
        for i, rule in enumerate(p.rules):
            if all(c.holds(obs) for c in rule.when):
                start = self._since.setdefault(i, now_s)
            else:
                self._since.pop(i, None)
                continue
            shown = ", ".join(f"{c.metric}={obs.get(c.metric, 0.0):.3g}" for c in rule.when)
            if rule.action == "rebuild":
                if now_s - start >= rule.for_s and rebuilding == 0 and self.rebuild is None and ready > 0:
                    self.rebuild = f"{rule} ({shown})"
                    self._since.pop(i, None)
                continue
            if now_s - start < rule.for_s or change:
                continue
            if rule.action == "up" and current < p.max_replicas and now_s - self._last_up >= p.scale_up_cooldown_s:
                change = min(rule.step, p.max_replicas - current)
                self._last_up = self._last_change = now_s
            elif (
                rule.action == "down"
                and current > p.min_replicas
                and pending == 0
                and now_s - self._last_change >= p.scale_down_cooldown_s
            ):
                change = -min(rule.step, current - p.min_replicas)
                self._last_change = now_s
            if change:
                self.reason = f"{rule} ({shown})"
                self._since.pop(i, None)  # the condition must hold a full window again before the next step
        return change
