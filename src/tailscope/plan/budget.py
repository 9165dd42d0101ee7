"""Latency budgets: split an end-to-end target over layers with a reserved buffer, and turn it into a contract."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailscope.errors import PlanError

LAYERS = ("network", "gateway", "inference", "retrieval", "agent", "business", "other")


@dataclass(frozen=True, slots=True)
class LayerBudget:
    """One layer's budget and, when traces were given, its measured tail."""

    layer: str
    budget_ms: float
    share: float  # of the usable budget
    measured_p99_ms: float | None = None
    holds: bool | None = None  # measured ≤ buffered budget, when measured
    buffered_ms: float | None = None  # budget ÷ (1 + per-layer buffer): what the layer commits to

    @property
    def commit_ms(self) -> float:
        """The figure the layer is held to: its buffered budget (its budget when no per-layer buffer is kept)."""
        return self.budget_ms if self.buffered_ms is None else self.buffered_ms


@dataclass(frozen=True, slots=True)
class BudgetPlan:
    """The split of ``target_ms``: ``buffer`` reserved, the rest over the layers; each layer keeps
    ``buffer_per_layer`` of its own budget (it commits to ``budget ÷ (1 + buffer_per_layer)``)."""

    target_ms: float
    buffer: float
    usable_ms: float
    allocated_ms: float
    layers: tuple[LayerBudget, ...]
    over_by_ms: float
    findings: tuple[str, ...]
    buffer_per_layer: float = 0.0

    @property
    def ok(self) -> bool:
        return self.over_by_ms <= 0 and all(lb.holds is not False for lb in self.layers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_ms": self.target_ms,
            "buffer": self.buffer,
            "buffer_per_layer": self.buffer_per_layer,
            "usable_ms": self.usable_ms,
            "allocated_ms": self.allocated_ms,
            "over_by_ms": self.over_by_ms,
            "ok": self.ok,
            "layers": [
                {
                    "layer": lb.layer,
                    "budget_ms": lb.budget_ms,
                    "buffered_ms": lb.commit_ms,
                    "share": lb.share,
                    "measured_p99_ms": lb.measured_p99_ms,
                    "holds": lb.holds,
                }
                for lb in self.layers
            ],
            "findings": list(self.findings),
        }

    def contract(self, name: str = "latency-budget", percentile: str = "p99") -> dict[str, Any]:
        """The performance contract (``tailscope gate`` format) that enforces this budget."""
        return {
            "name": name,
            "slo": [{"metric": "e2e_ms", "percentile": percentile, "max": round(self.target_ms, 3)}],
            "layers": [
                {"layer": lb.layer, "percentile": percentile, "max_ms": round(lb.commit_ms, 3)} for lb in self.layers
            ],
        }


def plan_budget(
    target_ms: float,
    layers: Sequence[tuple[str, float]],
    *,
    buffer: float = 0.2,
    buffer_per_layer: float = 0.0,
    measured_p99_ms: Mapping[str, float] | None = None,
) -> BudgetPlan:
    """Check explicit per-layer budgets against ``target × (1 − buffer)``; with ``buffer_per_layer`` each layer
    keeps its own buffer and commits to ``budget ÷ (1 + buffer_per_layer)`` (the method: 300 ms over gateway 50 /
    inference 120 / retrieval 80 / network 50 with a 20 % buffer per segment → inference p99 ≤ 100 ms).

    Raises:
        PlanError: for a non-positive target, a buffer outside [0, 1), an unknown layer or a duplicate.
    """
    _check(target_ms, buffer)
    if not 0 <= buffer_per_layer < 10:
        raise PlanError(f"--buffer-per-layer is a fraction ≥ 0, e.g. 0.2 (got {buffer_per_layer})")
    seen: set[str] = set()
    for name, ms in layers:
        if name not in LAYERS:
            raise PlanError(f"--layer {name}={ms}: unknown layer; use one of {', '.join(LAYERS)}")
        if name in seen:
            raise PlanError(f"--layer {name} given twice")
        if ms <= 0:
            raise PlanError(f"--layer {name}: the budget must be > 0 ms")
        seen.add(name)
    usable = target_ms * (1 - buffer)
    allocated = sum(ms for _, ms in layers)
    findings: list[str] = []
    out: list[LayerBudget] = []
    for name, ms in layers:
        measured = (measured_p99_ms or {}).get(name)
        buffered = ms / (1 + buffer_per_layer) if buffer_per_layer else None
        commit = ms if buffered is None else buffered
        holds = None if measured is None else measured <= commit
        if holds is False:
            what = "budget" if buffered is None else f"buffered budget ({ms:.0f} ms ÷ {1 + buffer_per_layer:g})"
            findings.append(f"{name}: measured p99 {measured:.0f} ms exceeds its {commit:.0f} ms {what}")
        out.append(LayerBudget(name, ms, ms / usable, measured, holds, buffered))
    over = allocated - usable
    if over <= 1e-6 * usable:  # proportional splits add up to the usable budget up to float rounding
        over = min(over, 0.0)
    if over > 0:
        findings.insert(
            0,
            f"the layer budgets add up to {allocated:.0f} ms, {over:.0f} ms over the {usable:.0f} ms left after the "
            f"{buffer:.0%} buffer of {target_ms:.0f} ms: cut a layer or raise the target",
        )
    return BudgetPlan(target_ms, buffer, usable, allocated, tuple(out), over, tuple(findings), buffer_per_layer)


def budget_from_shares(
    target_ms: float,
    shares: Mapping[str, float],
    *,
    buffer: float = 0.2,
    buffer_per_layer: float = 0.0,
    measured_p99_ms: Mapping[str, float] | None = None,
) -> BudgetPlan:
    """Propose budgets proportional to measured critical-path shares (e.g. at the tail bucket of a trace set)."""
    _check(target_ms, buffer)
    total = sum(v for v in shares.values() if v > 0)
    if total <= 0:
        raise PlanError("the trace set has no critical-path time to share out")
    usable = target_ms * (1 - buffer)
    layers = [(name, usable * v / total) for name, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v > 0]
    return plan_budget(
        target_ms, layers, buffer=buffer, buffer_per_layer=buffer_per_layer, measured_p99_ms=measured_p99_ms
    )


def _check(target_ms: float, buffer: float) -> None:
    if target_ms <= 0:
        raise PlanError(f"--target must be > 0 (got {target_ms} ms)")
    if not 0 <= buffer < 1:
        raise PlanError(f"--buffer is a fraction in [0, 1), e.g. 0.2 (got {buffer})")
