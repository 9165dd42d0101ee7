"""Latency budgets: split an end-to-end target over layers with a reserved buffer, and turn it into a contract.

Judged on the critical path: with a trace set, a layer is held to what it *adds to the tail traces' end-to-end time*
(its mean critical-path time per trace over the traces at or above the set's end-to-end p99 — the ``≥ p99`` column of
``trace analyze``), not to its own p99: the layers' own p99s come from different traces and add up to more than any
request waits, so comparing them with shares of the tail would mark layers over budget on a set far inside its
target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailscope.errors import PlanError

LAYERS = ("network", "gateway", "inference", "retrieval", "agent", "business", "other")


@dataclass(frozen=True, slots=True)
class TailFacts:
    """A trace set's tail on the critical path: the traces at or above its end-to-end p99.

    Attributes:
        layer_ms: per layer, its mean critical-path time per tail trace (ms): what it adds to their end-to-end time.
        e2e_p99_ms: the set's end-to-end p99 (ms).
        tail_e2e_ms: the tail traces' mean end-to-end time (ms).
        traces: how many traces the tail holds.
    """

    layer_ms: Mapping[str, float]
    e2e_p99_ms: float
    tail_e2e_ms: float
    traces: int


@dataclass(frozen=True, slots=True)
class LayerBudget:
    """One layer's budget and, when traces were given, its measured tail."""

    layer: str
    budget_ms: float
    share: float  # of the usable budget
    measured_p99_ms: float | None = None  # the layer's own p99 of critical-path time per trace (information)
    holds: bool | None = None  # its tail contribution (else its own p99) ≤ its buffered budget, when measured
    buffered_ms: float | None = None  # budget ÷ (1 + per-layer buffer): what the layer commits to
    tail_ms: float | None = None  # what it adds to the tail traces' end-to-end time (critical path, traces ≥ p99)

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
    e2e_p99_ms: float | None = None  # the trace set's end-to-end p99, when judged on traces
    tail_e2e_ms: float | None = None  # the tail traces' mean end-to-end time (what the layers' tail_ms add up to)
    tail_traces: int | None = None  # how many traces are at or above the p99
    unbudgeted: tuple[str, ...] = ()  # layers on the tail's critical path that no budget covers

    @property
    def ok(self) -> bool:
        e2e_ok = self.e2e_p99_ms is None or self.e2e_p99_ms <= self.target_ms
        layers_ok = all(lb.holds is not False for lb in self.layers) and not self.unbudgeted
        return self.over_by_ms <= 0 and layers_ok and e2e_ok

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_ms": self.target_ms,
            "buffer": self.buffer,
            "buffer_per_layer": self.buffer_per_layer,
            "usable_ms": self.usable_ms,
            "allocated_ms": self.allocated_ms,
            "over_by_ms": self.over_by_ms,
            "ok": self.ok,
            "e2e_p99_ms": self.e2e_p99_ms,
            "tail_e2e_ms": self.tail_e2e_ms,
            "tail_traces": self.tail_traces,
            "unbudgeted": list(self.unbudgeted),
            "layers": [
                {
                    "layer": lb.layer,
                    "budget_ms": lb.budget_ms,
                    "buffered_ms": lb.commit_ms,
                    "share": lb.share,
                    "measured_p99_ms": lb.measured_p99_ms,
                    "tail_ms": lb.tail_ms,
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
    tail: TailFacts | None = None,
) -> BudgetPlan:
    """Check explicit per-layer budgets against ``target × (1 − buffer)``; with ``buffer_per_layer`` each layer
    keeps its own buffer and commits to ``budget ÷ (1 + buffer_per_layer)`` (the method: 300 ms over gateway 50 /
    inference 120 / retrieval 80 / network 50 with a 20 % buffer per segment → inference p99 ≤ 100 ms).

    With ``tail`` (a trace set's tail on the critical path) each layer is judged on what it adds to the tail traces'
    end-to-end time; ``measured_p99_ms`` alone (a layer's own p99) is the judge only when no tail is given.

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
        added = None if tail is None else tail.layer_ms.get(name, 0.0)
        buffered = ms / (1 + buffer_per_layer) if buffer_per_layer else None
        commit = ms if buffered is None else buffered
        judged = added if tail is not None else measured
        holds = None if judged is None else judged <= commit * (1 + 1e-9)
        if holds is False:
            what = "budget" if buffered is None else f"buffered budget ({ms:.0f} ms ÷ {1 + buffer_per_layer:g})"
            if tail is not None:
                findings.append(
                    f"{name}: adds {added:.0f} ms to the tail traces' end-to-end time (critical path, the "
                    f"{tail.traces} traces ≥ p99), over its {commit:.0f} ms {what}"
                )
            else:
                findings.append(f"{name}: measured p99 {measured:.0f} ms exceeds its {commit:.0f} ms {what}")
        out.append(LayerBudget(name, ms, ms / usable, measured, holds, buffered, added))
    unbudgeted: tuple[str, ...] = ()
    if tail is not None:
        unbudgeted = tuple(sorted(k for k, v in tail.layer_ms.items() if v > 0 and k not in {n for n, _ in layers}))
        for name in unbudgeted:
            findings.append(
                f"{name}: adds {tail.layer_ms[name]:.0f} ms to the tail traces' end-to-end time but has no budget"
            )
        if tail.e2e_p99_ms > target_ms:
            findings.insert(
                0,
                f"the trace set's end-to-end p99 is {tail.e2e_p99_ms:.0f} ms, over the {target_ms:.0f} ms target: "
                "the budget cannot hold",
            )
    over = allocated - usable
    if over <= 1e-6 * usable:  # proportional splits add up to the usable budget up to float rounding
        over = min(over, 0.0)
    if over > 0:
        findings.insert(
            0,
            f"the layer budgets add up to {allocated:.0f} ms, {over:.0f} ms over the {usable:.0f} ms left after the "
            f"{buffer:.0%} buffer of {target_ms:.0f} ms: cut a layer or raise the target",
        )
    return BudgetPlan(
        target_ms, buffer, usable, allocated, tuple(out), over, tuple(findings), buffer_per_layer,
        e2e_p99_ms=None if tail is None else tail.e2e_p99_ms,
        tail_e2e_ms=None if tail is None else tail.tail_e2e_ms,
        tail_traces=None if tail is None else tail.traces,
        unbudgeted=unbudgeted,
    )  # fmt: skip


def budget_from_shares(
    target_ms: float,
    shares: Mapping[str, float],
    *,
    buffer: float = 0.2,
    buffer_per_layer: float = 0.0,
    measured_p99_ms: Mapping[str, float] | None = None,
    tail: TailFacts | None = None,
) -> BudgetPlan:
    """Propose budgets proportional to measured critical-path shares (e.g. at the tail bucket of a trace set); with
    ``tail`` each layer is judged on what it adds to the tail traces' end-to-end time."""
    _check(target_ms, buffer)
    total = sum(v for v in shares.values() if v > 0)
    if total <= 0:
        raise PlanError("the trace set has no critical-path time to share out")
    usable = target_ms * (1 - buffer)
    layers = [(name, usable * v / total) for name, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v > 0]
    return plan_budget(
        target_ms, layers, buffer=buffer, buffer_per_layer=buffer_per_layer, measured_p99_ms=measured_p99_ms, tail=tail
    )


def _check(target_ms: float, buffer: float) -> None:
    if target_ms <= 0:
        raise PlanError(f"--target must be > 0 (got {target_ms} ms)")
    if not 0 <= buffer < 1:
        raise PlanError(f"--buffer is a fraction in [0, 1), e.g. 0.2 (got {buffer})")
