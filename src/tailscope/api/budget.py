"""Plan: :func:`plan_budget` — per-layer latency budgets under an end-to-end target, optionally judged on a trace
set's critical paths. Writes its contract only when given ``out=``; trace sets are only read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tailscope.api._support import PathLike, StorePath, public
from tailscope.errors import ConfigError, PlanError
from tailscope.files import make_folder
from tailscope.plan import budget as budget_core
from tailscope.plan.budget import BudgetPlan, TailFacts
from tailscope.store.runs import RunStore
from tailscope.units import parse_duration_s


def _ms(value: str | float, what: str) -> float:
    if isinstance(value, int | float):
        return float(value)
    return parse_duration_s(value, what=what, default_unit="ms") * 1000


def _layers(layers: Mapping[str, str | float] | Sequence[str]) -> list[tuple[str, float]]:
    if isinstance(layers, Mapping):
        return [(name, _ms(v, f"--layer {name}")) for name, v in layers.items()]
    out = []
    for text in layers:
        name, sep, value = text.partition("=")
        if not sep:
            raise ConfigError(f"--layer {text!r}: expected LAYER=DURATION, e.g. gateway=50ms")
        out.append((name.strip(), _ms(value, f"--layer {name}")))
    return out


def trace_tail(
    traces: str, *, store: StorePath | RunStore | None = None
) -> tuple[dict[str, float], TailFacts, dict[str, float]]:
    """A stored trace set's tail on the critical path — the attribution ``trace analyze`` shows in its ``≥ p99``
    column: per layer, its share of the tail traces' critical-path time and what it adds to their end-to-end time;
    and, for information, each layer's own p99 of critical-path time per trace (ms).

    Raises:
        PlanError: the set has no traces. NotFoundError: no store, or no such set.
    """
    import numpy as np

    from tailscope.api.verify import _set_facts
    from tailscope.trace.analysis import buckets, composition

    facts = _set_facts(traces, store)
    if not facts:
        raise PlanError(f"trace set {traces!r} has no traces")
    tail = buckets(facts)["tail_bucket"]
    comp = composition(tail, "path_layer")
    e2e_p99 = float(np.quantile([f.duration_ns / 1e6 for f in facts], 0.99))
    tail_e2e = sum(f.duration_ns for f in tail.facts) / len(tail.facts) / 1e6
    facts_tail = TailFacts(
        layer_ms={k: float(v["ms_per_trace"]) for k, v in comp.items()},
        e2e_p99_ms=e2e_p99,
        tail_e2e_ms=tail_e2e,
        traces=len(tail.facts),
    )
    names = {k for f in facts for k in f.path_layer}
    own = {k: float(np.quantile([f.path_layer.get(k, 0) / 1e6 for f in facts], 0.99)) for k in sorted(names)}
    return {k: v["share"] for k, v in comp.items()}, facts_tail, own


@public
def plan_budget(
    target: str | float,
    *,
    layers: Mapping[str, str | float] | Sequence[str] = (),
    buffer: float | None = None,
    buffer_per_layer: float = 0.0,
    traces: str | None = None,
    out: PathLike | None = None,
    store: StorePath | RunStore | None = None,
) -> BudgetPlan:
    """Per-layer latency budgets under an end-to-end target, with a buffer held back; flags layers that cannot hold.

    Args:
        target: the end-to-end target (``"300ms"``, ``"2s"``, or a number of ms).
        layers: explicit budgets, ``{"gateway": "50ms", "inference": 120}`` or ``["gateway=50ms", …]``.
        buffer: the fraction of the target held back (default 0.2, or 0 when ``buffer_per_layer`` is given).
        buffer_per_layer: each layer keeps this buffer of its own budget and commits to
            ``budget ÷ (1 + buffer_per_layer)`` (written into the contract): the method's "each segment keeps 20 %".
        traces: a stored trace set: each layer is judged on what it adds to the tail traces' end-to-end time along
            their critical paths (the traces ≥ the set's end-to-end p99, as ``trace analyze`` attributes them);
            without ``layers`` the budgets are proportional to those shares.
        out: write the budgets as a performance contract (``tailscope gate`` format) to this file.
        store: where the trace set is looked up (only read).

    Returns:
        ``plan.layers`` (each ``layer``, ``budget_ms``, ``buffered_ms``, ``share``, ``tail_ms`` — its contribution to
        the tail traces' end-to-end time, which decides ``holds`` — and ``measured_p99_ms``, its own p99, for
        information), ``plan.e2e_p99_ms``, ``plan.ok``, ``plan.findings``, ``plan.contract()`` (the contract as a
        dict) and ``plan.to_dict()``.

    Raises:
        ConfigError: neither layers nor traces, a malformed layer or duration, or ``out`` cannot be written.
    """
    target_ms = _ms(target, "--target")
    if buffer is None:
        buffer = 0.0 if buffer_per_layer else 0.2
    if traces is not None:
        shares, tail, measured = trace_tail(traces, store=store)
        if layers:  # explicit budgets, judged on the tail's critical path
            plan = budget_core.plan_budget(
                target_ms, _layers(layers), buffer=buffer, buffer_per_layer=buffer_per_layer,
                measured_p99_ms=measured, tail=tail,
            )  # fmt: skip
        else:
            plan = budget_core.budget_from_shares(
                target_ms, shares, buffer=buffer, buffer_per_layer=buffer_per_layer, measured_p99_ms=measured, tail=tail
            )
    else:
        if not layers:
            raise ConfigError("give --layer LAYER=DURATION (repeatable) or --from-traces SET")
        plan = budget_core.plan_budget(target_ms, _layers(layers), buffer=buffer, buffer_per_layer=buffer_per_layer)
    if out is not None:
        import yaml

        path = Path(out)
        make_folder(path.parent, "--out", out)
        try:
            path.write_text(yaml.safe_dump(plan.contract(), sort_keys=False), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot write it ({exc.strerror})") from None
    return plan
