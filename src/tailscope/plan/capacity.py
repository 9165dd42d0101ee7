"""SLO-backed capacity search: the cheapest (replica shape, replicas) that meets the SLOs at the target load (pure
driver). A replica's shape is its tensor parallelism × attention-DP ranks (:class:`ReplicaShape`: ``TP4``, or for an
MoE model the same four GPUs as four attention-DP ranks, ``DP4``, each scheduling its own batch).

Method, per shape:

1. **Analytic first cut.** With :func:`~tailscope.plan.estimate.estimate_request`, find the largest steady
   concurrency per replica whose TTFT/TPOT/E2E meet the SLO thresholds; one replica then serves
   ``concurrency / E2E`` requests/s. Replicas = ⌈target × (1 + headroom) / that⌉.
2. **Simulation.** The caller's ``simulate(shape, replicas)`` runs the discrete-event simulator at the target load
   (queueing, batching, KV limits included) and says whether every SLO holds at its percentile. From the first
   cut the search walks down while the SLO still holds, or doubles up until it holds and bisects back, so the answer
   is the smallest replica count the *simulator* accepts, to 1 % (capped at ``max_replicas``).

The cheapest configuration (GPU count × price) wins; the others are the runner-ups. Shapes are tried from the
fewest GPUs (a width's tensor-parallel shape before its attention-DP twin); a shape whose single replica already
uses as many GPUs as the best answer so far is not simulated (it cannot be cheaper), nor one whose replicas would
need as many even at :data:`SATURATION_MARGIN` times their analytic saturation throughput. An attention-DP replica's
analytic throughput is its ranks' (the step model prices one rank, with the all-to-all and balancing of the
others). The answer is the smallest passing count to 1 % (:data:`RESOLUTION`). The
winner's simulation is the re-check the answer carries. The driver is pure: simulation is injected, so the planner
needs no IO.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailscope.engine.perf import StepTimeModel
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.twin_step import TwinStepModel
from tailscope.errors import PlanError
from tailscope.metrics.slo import Slo
from tailscope.plan.estimate import estimate_request


@dataclass(frozen=True, slots=True, order=True)
class ReplicaShape:
    """How one replica spreads over its GPUs: ``tp``-way tensor parallelism in each of ``attention_dp`` ranks (each
    rank its own batch; an MoE model's experts over all of them)."""

    tp: int
    attention_dp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.attention_dp

    def label(self, sep: str = "") -> str:
        """``TP4``, ``DP4`` (four GPUs as attention-DP ranks) or ``TP2×DP4``; with ``sep=" "`` ``TP 2 × DP 4``."""
        tp, dp = f"TP{sep}{self.tp}", f"DP{sep}{self.attention_dp}"
        if self.attention_dp == 1:
            return tp
        return dp if self.tp == 1 else f"{tp}{sep}×{sep}{dp}"

    def words(self) -> str:
        """``TP 4``, ``DP 4`` or ``TP 2 × DP 4`` (notes and messages)."""
        return self.label(" ")


def _shape(option: int | ReplicaShape) -> ReplicaShape:
    return option if isinstance(option, ReplicaShape) else ReplicaShape(int(option))


def _skipped(shape: ReplicaShape, note: str) -> ConfigResult:
    """A shape the search did not simulate, and why."""
    return ConfigResult(shape.tp, None, None, None, None, None, 0, None, note=note, attention_dp=shape.attention_dp)


@dataclass(frozen=True, slots=True)
class SimCheck:
    """One simulation at a configuration: did every SLO hold, and the observed values (ms) per SLO key.

    Attributes:
        window_s: seconds of arrivals simulated (None: not said).
        needed_window_s: the window a queue needs to reach steady state at this load (None: not said).
        saturated: the over-saturation test (TTFT growing through the window) found a growing queue.
        scope: what was simulated: ``fleet`` or ``one replica`` (one replica's Poisson share of the load: at high
            rates the fleet's window would take too many requests; conservative, as the router only helps).
    """

    passed: bool
    observed: dict[str, float | None]
    requests: int = 0
    goodput_rps: float | None = None
    window_s: float | None = None
    needed_window_s: float | None = None
    saturated: bool = False
    scope: str = "fleet"

    @property
    def transient_only(self) -> bool:
        """The window was shorter than a queue needs to reach steady state: the figures are a transient's."""
        return self.window_s is not None and self.needed_window_s is not None and self.window_s < self.needed_window_s

    @property
    def steady(self) -> str:
        """``steady state``, ``transient only`` or ``queue grows`` (the over-saturation test failed)."""
        if self.saturated:
            return "queue grows"
        return "transient only" if self.transient_only else "steady state"

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "observed_ms": self.observed,
            "requests": self.requests,
            "window_s": self.window_s,
            "needed_window_s": self.needed_window_s,
            "saturated": self.saturated,
            "steady": self.steady,
            "scope": self.scope,
        }


@dataclass(frozen=True, slots=True)
class ConfigResult:
    """The smallest replica count the simulator accepted for one replica shape (or why there is none): ``tp`` ×
    ``attention_dp`` GPUs a replica."""

    tp: int
    replicas: int | None
    gpus: int | None
    usd_per_hour: float | None
    analytic_replicas: int | None
    per_replica_rps: float | None
    sims: int
    check: SimCheck | None
    note: str = ""
    attention_dp: int = 1

    @property
    def shape(self) -> ReplicaShape:
        return ReplicaShape(self.tp, self.attention_dp)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "attention_dp": self.attention_dp,
            "shape": self.shape.label(),
            "replicas": self.replicas,
            "gpus": self.gpus,
            "usd_per_hour": self.usd_per_hour,
            "analytic_replicas": self.analytic_replicas,
            "per_replica_rps": self.per_replica_rps,
            "simulations": self.sims,
            "check": None if self.check is None else self.check.to_dict(),
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """The answer of ``plan capacity`` with SLOs."""

    best: ConfigResult | None
    options: tuple[ConfigResult, ...]
    target_rps: float
    headroom: float
    slos: tuple[Slo, ...]
    assumptions: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "best": None if self.best is None else self.best.to_dict(),
            "options": [o.to_dict() for o in self.options],
            "target_rps": self.target_rps,
            "headroom": self.headroom,
            "load_rps": self.target_rps * (1 + self.headroom),
            "slo": [f"{s.key}={s.threshold_ms:g}ms" for s in self.slos],
            "assumptions": list(self.assumptions),
        }


#: a TP degree is not simulated when even this multiple of one replica's analytic saturation throughput (the
#: closed loop at its largest concurrency, no SLO) would need as many GPUs as the best answer so far: every TP
#: degree's simulated answer ran its replicas at 0.57–1.17 × that throughput (nine scenarios, 30–10,000 req/s:
#: Llama-3.1-8B and -70B on H100, Qwen2.5-7B on L40S, the support-chat profile; docs/planning.md), and with the
#: pruning all nine answered as the full search did
SATURATION_MARGIN = 1.5

#: the search's resolution: the answer is the smallest passing replica count to within this share of it (one
#: replica below 200): at hundreds of replicas a tighter answer costs simulations and says less than the Poisson draw
#: of one check's window
RESOLUTION = 0.01


def _meets(est: Any, slos: Sequence[Slo]) -> bool:
    for s in slos:
        value = {"ttft": est.ttft_ms, "tpot": est.tpot_ms, "itl": est.tpot_ms, "e2e": est.e2e_ms}[s.metric]
        if value > s.threshold_ms:
            return False
    return True


def analytic_replica_rps(
    perf: StepTimeModel | TrainedStepModel | TwinStepModel,
    *,
    input_tokens: int,
    output_tokens: int,
    slos: Sequence[Slo],
    max_num_seqs: int = 256,
) -> float | None:
    """Requests/s one replica serves at the largest steady concurrency meeting the SLO thresholds (None: none)."""
    best: float | None = None
    lo, hi = 1, max_num_seqs
    # concurrency → SLO is monotone (more concurrency, slower requests): bisect the largest passing value
    while lo <= hi:
        mid = (lo + hi) // 2
        try:
            est = estimate_request(perf, input_tokens=input_tokens, output_tokens=output_tokens, concurrency=mid)
        except PlanError:  # KV capacity exceeded
            hi = mid - 1
            continue
        if _meets(est, slos):
            best = est.requests_per_s
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def search_capacity(
    perf_for: Callable[[ReplicaShape], StepTimeModel | TrainedStepModel | TwinStepModel],
    simulate: Callable[[ReplicaShape, int], SimCheck],
    *,
    tp_options: Sequence[int | ReplicaShape],
    target_rps: float,
    slos: Sequence[Slo],
    input_tokens: int,
    output_tokens: int,
    headroom: float = 0.2,
    gpu_price_per_hour: float | None = None,
    max_replicas: int = 64,
    max_num_seqs: int = 256,
) -> CapacityPlan:
    """Search every replica shape; see the module doc.

    Args:
        perf_for: the step-time model of one replica of a shape — of one attention-DP rank where it has several
            (raises PlanError when it does not fit).
        simulate: ``(shape, replicas) → SimCheck`` at ``target_rps × (1 + headroom)``.
        tp_options: the shapes to try (a TP degree stands for its tensor-parallel shape).
        input_tokens / output_tokens: mean lengths of the workload (for the analytic cut).
    """
    if target_rps <= 0:
        raise PlanError(f"--target-rps must be > 0 (got {target_rps})")
    if not slos:
        raise PlanError("plan capacity with a target needs at least one --slo (e.g. ttft_p99=1.5s)")
    load = target_rps * (1 + headroom)
    results: list[ConfigResult] = []
    best_gpus: int | None = None
    best = ReplicaShape(0)  # the shape of the best answer so far
    for shape in sorted({_shape(o) for o in tp_options}, key=lambda sh: (sh.gpus, sh.attention_dp, sh.tp)):
        width, dp = shape.gpus, shape.attention_dp
        if best_gpus is not None and width >= best_gpus:
            # even one replica of this shape uses as many GPUs as the best answer so far: it cannot be cheaper
            results.append(_skipped(
                shape,
                f"skipped: one replica at {shape.words()} already needs {width} GPUs, and {best.words()} meets the "
                f"SLO with {best_gpus}"
            ))  # fmt: skip
            continue
        try:
            perf = perf_for(shape)
            perf.kv_capacity_tokens()
        except PlanError as exc:
            results.append(_skipped(shape, str(exc)))
            continue
        rank_rps = analytic_replica_rps(
            perf, input_tokens=input_tokens, output_tokens=output_tokens, slos=slos, max_num_seqs=max_num_seqs
        )
        rps = None if rank_rps is None else rank_rps * dp  # every attention-DP rank serves its own requests
        if best_gpus is not None:
            sat = analytic_replica_rps(
                perf, input_tokens=input_tokens, output_tokens=output_tokens, slos=(), max_num_seqs=max_num_seqs
            )
            sat = None if sat is None else sat * dp
            floor = math.ceil(load / (SATURATION_MARGIN * sat)) if sat else None
            if floor is not None and floor * width >= best_gpus:
                results.append(_skipped(
                    shape,
                    f"skipped: at {shape.words()} even {SATURATION_MARGIN:g} × a replica's analytic saturation "
                    f"throughput ({sat:.1f} req/s) needs {floor} replicas = {floor * width} GPUs, and "
                    f"{best.words()} meets the SLO with {best_gpus}"
                ))  # fmt: skip
                continue
        first = max_replicas if rps is None else min(max_replicas, max(1, math.ceil(load / rps)))
        found = _search_shape(shape, first, rps, simulate, max_replicas, gpu_price_per_hour)
        results.append(found)
        if found.gpus is not None and (best_gpus is None or found.gpus < best_gpus):
            best_gpus, best = found.gpus, shape
    feasible = [r for r in results if r.replicas is not None]
    feasible.sort(
        key=lambda r: (r.usd_per_hour if r.usd_per_hour is not None else r.gpus or 0, r.gpus, r.attention_dp, r.tp)
    )
    others = [r for r in results if r.replicas is None]
    return CapacityPlan(
        best=feasible[0] if feasible else None,
        options=tuple(feasible + others),
        target_rps=target_rps,
        headroom=headroom,
        slos=tuple(slos),
        assumptions=(
            f"load simulated at target × (1 + headroom) = {load:g} requests/s",
            f"analytic first cut at mean lengths {input_tokens} in / {output_tokens} out tokens",
            "the answer is the smallest replica count whose simulation met every SLO at its percentile (to 1 %; exact "
            "below 200 replicas)",
        ),
    )


def _search_shape(
    shape: ReplicaShape,
    first: int,
    rps: float | None,
    simulate: Callable[[ReplicaShape, int], SimCheck],
    max_replicas: int,
    price: float | None,
) -> ConfigResult:
    cache: dict[int, SimCheck] = {}

    def check(r: int) -> SimCheck:
        if r not in cache:
            cache[r] = simulate(shape, r)
        return cache[r]

    def smallest_passing(lo: int, hi: int) -> int:
        """The smallest passing count in [lo, hi] to :data:`RESOLUTION` of ``hi`` (exact below 200 replicas),
        given that ``hi`` passes (more replicas never hurt): the passing end of the last bracket, never a failed one."""
        while hi - lo >= max(1, int(hi * RESOLUTION)):
            mid = (lo + hi) // 2
            if check(mid).passed:
                hi = mid
            else:
                lo = mid + 1
        return hi

    good: int | None = None
    if check(first).passed:
        # the analytic cut is usually a little above the simulator's answer (0–15 % on Llama-3.1-8B/H100 at 1,000 and
        # 10,000 req/s): bracket below it by a tenth of it, walking further down (doubling the step) while that passes
        hi, step = first, max(1, first // 10)
        while True:
            probe = max(1, hi - step)
            if probe == hi:
                break
            if not check(probe).passed:
                break
            hi, step = probe, step * 2
        good = smallest_passing(1 if probe == hi else probe + 1, hi)
    else:
        bad = first
        while bad < max_replicas:
            nxt = min(max_replicas, bad * 2)
            if check(nxt).passed:
                good = smallest_passing(bad + 1, nxt)
                break
            bad = nxt
    if good is None:
        return ConfigResult(
            shape.tp,
            None,
            None,
            None,
            first,
            rps,
            len(cache),
            cache.get(max_replicas),
            note=f"the SLO is not met even with {max_replicas} replicas",
            attention_dp=shape.attention_dp,
        )
    return ConfigResult(
        tp=shape.tp,
        replicas=good,
        gpus=good * shape.gpus,
        usd_per_hour=good * shape.gpus * price if price is not None else None,
        analytic_replicas=first,
        per_replica_rps=rps,
        sims=len(cache),
        check=check(good),
        attention_dp=shape.attention_dp,
    )
