"""Plan: :func:`plan_kv` (KV bytes, capacity, concurrency), :func:`plan_estimate` (request times and their roofline
regime), :func:`plan_capacity` (the cheapest configuration that meets the SLOs, re-checked by simulation),
:func:`plan_napkin` (the napkin form of capacity), :func:`plan_cost` ($ per 1M tokens from a run) and
:func:`plan_budget` (per-layer latency budgets, optionally from a trace set's critical paths).

Models and GPUs are catalog ids (``tailscope catalog models``) or a ``config.json`` path for a model. Nothing is
written unless asked: :func:`plan_budget` writes its contract only when given ``out=``; runs and trace sets are only
read.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tailscope.api._support import StorePath, public
from tailscope.api.verify import RunRef, load_run
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import get_model_entry
from tailscope.engine.perf import StepTimeModel
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.step_terms import Parallelism
from tailscope.engine.twin import TwinStepModel
from tailscope.errors import ConfigError, PlanError
from tailscope.io.calibration import load_calibration
from tailscope.io.models import resolve_model
from tailscope.metrics.slo import Slo, parse_slo
from tailscope.plan import budget as budget_core
from tailscope.plan import kv as kv_core
from tailscope.plan import napkin as napkin_core
from tailscope.plan.budget import BudgetPlan, TailFacts
from tailscope.plan.capacity import CapacityPlan, SimCheck, search_capacity
from tailscope.plan.estimate import Estimate, estimate_request
from tailscope.plan.kv import KvPlan
from tailscope.plan.napkin import CostPlan, NapkinCapacity, UnitCost
from tailscope.store.runs import RunStore
from tailscope.units import parse_duration_s

PathLike = str | os.PathLike[str]
PerfModel = StepTimeModel | TrainedStepModel | TwinStepModel


def _max_context(model_ref: str) -> int | None:
    try:
        cfg = get_model_entry(model_ref).config
    except Exception:  # a config.json path or an unknown id: the model's own file says nothing here
        return None
    value = cfg.get("max_position_embeddings")
    return int(value) if value else None


def perf_model(
    model: str,
    gpu: str,
    *,
    tp: int = 1,
    weights_dtype: str | None = None,
    kv_dtype: str = "bf16",
    calibration: PathLike | None = None,
    engine: str = "vllm",
    ep: int = 1,
) -> PerfModel:
    """The step-time model plans use: a digital twin's fitted costs, the roofline with a calibration's efficiencies,
    or the trained step model of ``engine``.

    Raises:
        PlanError: a twin with ``tp`` other than 1. CatalogError: an unknown model or GPU.
    """
    cal = load_calibration(Path(calibration) if calibration is not None else None)
    if cal.twin is not None:
        if tp != 1:
            raise PlanError("a digital twin describes one deployment as it was measured: plan it with --tp 1")
        return TwinStepModel(cal.twin)  # the twin's fitted costs and KV capacity replace the catalogs
    arch = resolve_model(model)
    spec = resolve_gpu(gpu)
    if cal.has_overrides:  # roofline efficiencies given: the plain roofline with them
        eff = cal.efficiency(spec.id, model)
        return StepTimeModel(arch, spec, tp=tp, weights_dtype=weights_dtype, kv_dtype=kv_dtype, efficiency=eff)
    par = Parallelism(tp, 1, ep if arch.is_moe else 1)
    return TrainedStepModel(arch, spec, par, engine=engine, weights_dtype=weights_dtype, kv_dtype=kv_dtype)


@public
def plan_kv(
    model: str,
    *,
    context: int,
    kv_dtype: str = "bf16",
    weights_dtype: str | None = None,
    gpu: str | None = None,
    tp: int = 1,
    gpu_memory_utilization: float = 0.9,
) -> KvPlan:
    """KV bytes per token and per sequence, weights, and (with ``gpu``) KV capacity and max concurrent sequences.

    Args:
        model: catalog id or a ``config.json`` path.
        context: tokens per sequence (prompt + output).
        kv_dtype: ``bf16``, ``fp8`` or ``int8``.
        weights_dtype: ``bf16``, ``fp8``, ``int8`` or ``int4`` (default: the checkpoint's own).
        gpu: GPU catalog id; None: no capacity figures.
        tp: tensor-parallel degree.
        gpu_memory_utilization: the fraction of GPU memory the engine may use.

    Returns:
        ``plan.bytes_per_token``, ``plan.per_sequence_bytes``, ``plan.kv_capacity_tokens``, ``plan.max_sequences``,
        ``plan.assumptions`` and ``plan.to_dict()`` (``tailscope plan kv --json``).

    Raises:
        PlanError: a context above the model's maximum, or weights that do not fit. CatalogError: unknown ids.
    """
    return kv_core.plan_kv(
        resolve_model(model),
        context=context,
        kv_dtype=kv_dtype,
        weights_dtype=weights_dtype,
        gpu=resolve_gpu(gpu) if gpu else None,
        tp=tp,
        gpu_memory_utilization=gpu_memory_utilization,
        max_context=_max_context(model),
    )


@public
def plan_estimate(
    model: str,
    gpu: str,
    *,
    input_tokens: int,
    output_tokens: int,
    concurrency: int = 1,
    tp: int = 1,
    weights_dtype: str | None = None,
    kv_dtype: str = "bf16",
    calibration: PathLike | None = None,
) -> Estimate:
    """Prefill time, TTFT, TPOT and E2E of one request at a steady concurrency, and which roofline regime bounds
    each phase (analytic: no simulation).

    Args:
        model, gpu: catalog ids (a ``config.json`` path for the model).
        input_tokens, output_tokens: the request's lengths.
        concurrency: requests in flight on the replica.
        calibration: a calibration file (a digital twin's ``twin.yaml``, or roofline efficiencies).

    Returns:
        ``e.prefill_ms``, ``e.ttft_ms``, ``e.tpot_ms``, ``e.e2e_ms``, ``e.prefill_bound``, ``e.decode_bound``,
        ``e.output_tokens_per_s`` and ``e.to_dict()`` (``tailscope plan estimate --json``).

    Raises:
        PlanError: non-positive lengths, or sequences that do not fit the KV cache.
    """
    perf = perf_model(model, gpu, tp=tp, weights_dtype=weights_dtype, kv_dtype=kv_dtype, calibration=calibration)
    return estimate_request(perf, input_tokens=input_tokens, output_tokens=output_tokens, concurrency=concurrency)


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """The answer of :func:`plan_capacity`: the plan (``.best``, ``.options``), for which model and GPU, and how
    long the search took."""

    plan: CapacityPlan
    model: str
    gpu: str
    search_seconds: float
    confidence: dict[str, Any] | None = None
    disagg: dict[str, Any] | None = None

    @property
    def best(self) -> Any:
        """The cheapest configuration that met the SLOs (``tp``, ``replicas``, ``gpus``, ``usd_per_hour``), or None."""
        return self.plan.best

    def to_dict(self) -> dict[str, Any]:
        """The document ``tailscope plan capacity --json`` writes."""
        doc = self.plan.to_dict()
        doc["search_seconds"] = self.search_seconds
        doc["model"], doc["gpu"] = self.model, self.gpu
        if self.confidence is not None:
            doc["confidence"] = self.confidence
        if self.disagg is not None:
            doc["disagg"] = self.disagg
        return doc


def _tp_options(tp: str | Sequence[int]) -> tuple[int, ...]:
    if isinstance(tp, str):
        try:
            tps = tuple(int(x) for x in tp.split(",") if x.strip())
        except ValueError:
            raise ConfigError(f"--tp {tp!r}: expected degrees like 1,2,4") from None
    else:
        tps = tuple(int(x) for x in tp)
    if not tps or any(t < 1 for t in tps):
        raise ConfigError(f"--tp {tp!r}: expected degrees ≥ 1 like 1,2,4")
    return tps


def _mean_lengths(profile: PathLike | None, input_tokens: str, output_tokens: str) -> tuple[int, int]:
    from tailscope.workload.lengths import parse_length_spec

    if profile is None:
        return (
            round(parse_length_spec(input_tokens, what="--input-tokens").mean()),
            round(parse_length_spec(output_tokens, what="--output-tokens").mean()),
        )
    from tailscope.io.profile import load_profile

    p = load_profile(Path(profile))
    total = sum(c.weight for c in p.classes)
    mean_in = sum(c.weight * c.input_tokens.mean() for c in p.classes) / total
    mean_out = sum(c.weight * c.output_tokens.mean() for c in p.classes) / total
    return max(1, round(mean_in)), max(1, round(mean_out))


@public
def plan_capacity(
    model: str,
    gpu: str,
    *,
    target_rps: float,
    slo: Sequence[str | Slo] = (),
    profile: PathLike | None = None,
    input_tokens: str = "512",
    output_tokens: str = "256",
    headroom: float = 0.2,
    tp: str | Sequence[int] = "1,2,4,8",
    max_replicas: int = 1024,
    gpu_price: float | None = None,
    weights_dtype: str | None = None,
    kv_dtype: str = "bf16",
    calibration: PathLike | None = None,
    sim_requests: int = 1500,
    engine: str = "vllm",
    steady_window_s: float = 30.0,
    max_sim_requests: int = 20_000,
    confidence: bool = False,
    disagg: str | None = None,
) -> CapacityResult:
    """The cheapest configuration (TP degree × replicas) that meets the SLOs at ``target_rps × (1 + headroom)``:
    analytic estimates bound the search, and every answer is re-checked by simulation (nothing is stored).

    Args:
        model, gpu: catalog ids (a ``config.json`` path for the model).
        target_rps: requests/s the fleet must serve.
        slo: SLOs like ``ttft_p99=1.5s`` (or parsed :class:`~tailscope.Slo`).
        profile: a workload profile (its lengths and mix); else ``input_tokens``/``output_tokens`` length specs.
        headroom: extra load fraction to plan for.
        tp: TP degrees to consider (``"1,2,4"`` or a list).
        max_replicas: the most replicas of one configuration.
        gpu_price: USD per GPU-hour (ranks the options by cost, else by GPUs).
        calibration: a calibration file (a digital twin's ``twin.yaml``: its fitted costs replace the catalogs).
        sim_requests: the fewest requests per simulation of a configuration (more when the steady-state window
            needs them).
        engine: the serving engine's costs and defaults: ``vllm``, ``sglang`` or ``trtllm``.
        steady_window_s: the fewest seconds of arrivals each simulation covers (and at least 20 × a request's
            unloaded E2E time), so that a queue that grows has time to show it: at high rates 1,500 requests last
            under a second and no queue forms. The over-saturation test (TTFT growing through the window, as
            ``bench`` runs it) then fails a configuration whose queue keeps growing.
        max_sim_requests: the most requests one simulation may take; a fleet whose window needs more is checked
            on one replica at its Poisson share of the load (conservative: the router only helps), and a window cut
            short by this cap is reported as ``transient only``.
        confidence: a configuration passes only when every SLO holds at the high end of the simulated figure's 90 %
            prediction interval (the step model's residuals on like configurations, :mod:`tailscope.engine.residuals`):
            it "meets the SLO with ≥ 90 % confidence". ``result.confidence`` names the residual group.
        disagg: also size a prefill/decode-disaggregated deployment: ``auto`` (prefill and decode workers of each
            ``tp`` degree, fewest GPUs first) or candidates ``prefill=1x2,decode=2x1;prefill=2x2,decode=3x1``; the
            cheapest one the simulator accepts is ``result.disagg`` ("2 prefill + 3 decode workers").

    Returns:
        ``result.best`` (None when no configuration meets the SLOs within the limits), ``result.plan.options`` and
        ``result.to_dict()`` (``tailscope plan capacity --json``).
    """
    tps = _tp_options(tp)
    slos = tuple(s if isinstance(s, Slo) else parse_slo(s) for s in slo)
    slo_texts = tuple(s if isinstance(s, str) else f"{s.key}={s.threshold_ms:g}ms" for s in slo)
    mean_in, mean_out = _mean_lengths(profile, input_tokens, output_tokens)
    load = target_rps * (1 + headroom)
    # with a twin the fitted costs and KV facts replace the catalogs; the simulator still wants catalog ids
    sim_model, sim_gpu = model, gpu
    cal_path = Path(calibration) if calibration is not None else None
    if load_calibration(cal_path).twin is not None:
        sim_model, sim_gpu = "llama-3.1-8b", "h100-sxm"
    high = _confidence_bounds(engine, gpu, model) if confidence else None
    splits = _disagg_candidates(disagg, tps, min(max_replicas, 16)) if disagg is not None else None

    def perf_for_tp(degree: int) -> PerfModel:
        # an MoE model spreads its experts over the replica's GPUs (expert parallelism = TP degree)
        return perf_model(
            model,
            gpu,
            tp=degree,
            weights_dtype=weights_dtype,
            kv_dtype=kv_dtype,
            calibration=calibration,
            engine=engine,
            ep=degree,
        )

    unloaded_e2e_s: dict[int, float] = {}

    def needed_window(degree: int) -> float:
        """Seconds of arrivals a queue needs to settle: ≥ ``steady_window_s`` and ≥ 20 unloaded request times."""
        if degree not in unloaded_e2e_s:
            try:
                est = estimate_request(perf_for_tp(degree), input_tokens=mean_in, output_tokens=mean_out)
                unloaded_e2e_s[degree] = est.e2e_ms / 1000
            except PlanError:
                unloaded_e2e_s[degree] = 0.0
        return max(steady_window_s, 20 * unloaded_e2e_s[degree])

    def check(degree: int, replicas: int) -> SimCheck:
        from tailscope.metrics.saturation import detect_saturation
        from tailscope.sim.run import SimArgs, run_sim

        window = needed_window(degree)
        scope, sim_replicas, rate = "fleet", replicas, load
        if load * window > max_sim_requests and replicas > 1:
            scope, sim_replicas, rate = "one replica", 1, load / replicas
        requests = min(max(sim_requests, math.ceil(rate * window)), max(sim_requests, max_sim_requests))
        warmup = requests // 10  # the queue fills from empty first: not part of the steady state
        args = SimArgs(
            model=sim_model,
            gpu=sim_gpu,
            tp=degree,
            replicas=sim_replicas,
            backend=engine,
            ep=degree if resolve_model(model).is_moe and sim_model == model else 1,
            weights_dtype=weights_dtype,
            kv_dtype=kv_dtype,
            calibration=cal_path,
            profile=Path(profile) if profile is not None else None,
            rate=rate,
            arrival="poisson",
            requests=requests,
            warmup=warmup,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            slo=slo_texts,
            store=False,
            explicit=frozenset({"rate", "requests", "arrival", "warmup"}),
        )
        out = run_sim(args)
        summary = out.run_summary
        if summary is None:  # no request finished at all
            return SimCheck(passed=False, observed={}, scope=scope)
        span_s = max((r.scheduled_ns for r in out.records), default=0) / 1e9
        saturated = any(v.saturated for v in detect_saturation(out.records, labels=["the window"]))
        checks = summary.slo
        passed = bool(checks) and all(c.passed for c in checks) and summary.requests.failed == 0
        if high is not None:  # the SLO must hold at the interval's high end too
            passed = passed and all(
                c.observed_ms is not None and c.observed_ms * high[0].bounds(c.slo.metric)[1] <= c.slo.threshold_ms
                for c in checks
            )
        return SimCheck(
            passed=passed and not saturated,
            observed={c.slo.key: c.observed_ms for c in checks},
            requests=summary.requests.total,
            goodput_rps=summary.goodput_rps,
            window_s=span_s,
            needed_window_s=window,
            saturated=saturated,
            scope=scope,
        )

    def check_disagg(split: str) -> SimCheck:
        from tailscope.sim.run import SimArgs, run_sim

        args = SimArgs(
            model=model, gpu=gpu, backend=engine, weights_dtype=weights_dtype, kv_dtype=kv_dtype,
            profile=Path(profile) if profile is not None else None, rate=load, arrival="poisson",
            requests=sim_requests, input_tokens=input_tokens, output_tokens=output_tokens, slo=slo_texts,
            store=False, disagg=split, explicit=frozenset({"rate", "requests", "arrival"}),
        )  # fmt: skip
        summary = run_sim(args).run_summary
        if summary is None:
            return SimCheck(passed=False, observed={})
        checks = summary.slo
        passed = bool(checks) and all(c.passed for c in checks) and summary.requests.failed == 0
        if confidence:
            group = _confidence_bounds(engine, gpu, model, "disagg")[0]
            passed = passed and all(
                c.observed_ms is not None and c.observed_ms * group.bounds(c.slo.metric)[1] <= c.slo.threshold_ms
                for c in checks
            )
        return SimCheck(passed=passed, observed={c.slo.key: c.observed_ms for c in checks})

    t0 = time.perf_counter()
    plan = search_capacity(
        perf_for_tp,
        check,
        tp_options=tps,
        target_rps=target_rps,
        slos=slos,
        input_tokens=mean_in,
        output_tokens=mean_out,
        headroom=headroom,
        gpu_price_per_hour=gpu_price,
        max_replicas=max_replicas,
    )
    plan = replace(
        plan,
        assumptions=(
            *plan.assumptions,
            f"each simulation covers ≥ {steady_window_s:g} s of arrivals and ≥ 20 unloaded request times (first 10 % "
            "of requests warm-up), and fails when the over-saturation test finds TTFT growing through the window; "
            f"a fleet needing more than {max_sim_requests:,} requests is checked on one replica at its share of the "
            "load",
        ),
    )
    split = None
    if splits is not None:
        split = _search_disagg(splits, gpu_price, check_disagg)
    return CapacityResult(plan, model, gpu, time.perf_counter() - t0, high[1] if high is not None else None, split)


#: simulations a ``disagg="auto"`` search may run
_DISAGG_MAX_SIMS = 40


def _disagg_candidates(text: str, tps: Sequence[int], max_workers: int) -> list[Any]:
    from tailscope.engine.disagg import DisaggSpec, parse_disagg

    if text.strip() != "auto":
        return sorted(
            (parse_disagg(c, what="--disagg") for c in text.split(";") if c.strip()), key=lambda d: (d.gpus, d.label())
        )
    out = [DisaggSpec(p, t, n - p, t) for t in tps for n in range(2, max(2, max_workers) + 1) for p in range(1, n)]
    return sorted(out, key=lambda d: (d.gpus, d.decode_workers, d.label()))


def _search_disagg(splits: list[Any], gpu_price: float | None, check: Callable[[str], SimCheck]) -> dict[str, Any]:
    """The cheapest disaggregated split the simulator accepts, as ``CapacityResult.disagg``."""
    tried: list[dict[str, Any]] = []
    for d in splits:
        if len(tried) >= _DISAGG_MAX_SIMS:
            break
        res = check(d.label())
        tried.append({"deployment": d.label(), "gpus": d.gpus, "passed": res.passed, "observed": res.observed})
        if res.passed:
            return {
                "answer": f"{d.prefill_workers} prefill + {d.decode_workers} decode workers",
                "prefill_workers": d.prefill_workers,
                "prefill_tp": d.prefill_tp,
                "decode_workers": d.decode_workers,
                "decode_tp": d.decode_tp,
                "gpus": d.gpus,
                "usd_per_hour": d.gpus * gpu_price if gpu_price is not None else None,
                "observed": res.observed,
                "tried": tried,
            }
    return {"answer": None, "tried": tried}


def _confidence_bounds(engine: str, gpu: str, model: str, mode: str = "agg") -> tuple[Any, dict[str, Any]]:
    """The residual group a ``confidence`` plan sizes its intervals from, and how the plan reports it."""
    from tailscope.engine.gpus import resolve_gpu
    from tailscope.engine.residuals import residual_group

    group = residual_group(engine, resolve_gpu(gpu).id, model, mode)
    if group is None:
        raise ConfigError("--confidence: the step model has no residuals for this engine (no interval to size)")
    doc = {"level": 0.9, "rule": "every SLO holds at the high end of the 90% prediction interval", **group.to_dict()}
    return group, doc


@public
def plan_napkin(
    *,
    users: int,
    tokens_per_user_s: float | None = None,
    gpu_tokens_s: float,
    headroom: float = 0.2,
    slo: Sequence[str | Slo] = (),
    output_tokens: float | None = None,
) -> NapkinCapacity:
    """Capacity on a napkin: users × tokens/s each × (1 + headroom) ÷ tokens/s one GPU gives, rounded up.

    Args:
        users: concurrent streams.
        tokens_per_user_s: the generation rate each stream gets (optional when an SLO gives it).
        gpu_tokens_s: tokens/s one GPU sustains.
        headroom: extra load fraction to plan for.
        slo: latency SLOs; an E2E one (``e2e_p95=8s``, less a TTFT one if given) over ``output_tokens`` or a TPOT
            one sets the least rate per stream (the method: 350 tokens within a P95 of 8 s → ≥ 45 tok/s), and the
            larger of that and ``tokens_per_user_s`` is planned for. Other SLOs are refused, not ignored.
        output_tokens: mean output tokens per request (for an E2E SLO).

    Returns:
        ``n.gpus``, ``n.slo_tokens_per_user_s``, ``n.steps()`` (the arithmetic, one line per step) and ``n.to_dict()``.

    Raises:
        ConfigError: an SLO the napkin form cannot use, or an E2E SLO without ``output_tokens``.
        PlanError: non-positive inputs.
    """
    slos = [s if isinstance(s, Slo) else parse_slo(s) for s in slo]
    by_metric = {s.metric: s for s in slos}
    for s in slos:
        if s.metric not in ("e2e", "ttft", "tpot"):
            raise ConfigError(f"--slo {s.key}: the napkin form can use e2e, ttft (with e2e) and tpot SLOs only")
    if "ttft" in by_metric and "e2e" not in by_metric:
        raise ConfigError(f"--slo {by_metric['ttft'].key}: the napkin form uses a TTFT SLO only beside an E2E one")
    rates: list[tuple[float, str]] = []
    if "e2e" in by_metric:
        if output_tokens is None:
            raise ConfigError(f"--slo {by_metric['e2e'].key} needs --output-tokens N (mean output tokens per request)")
        ttft = by_metric.get("ttft")
        rates.append(
            napkin_core.stream_rate_for_slo(
                output_tokens, by_metric["e2e"].threshold_ms / 1000, ttft.threshold_ms / 1000 if ttft else 0.0
            )
        )
    if "tpot" in by_metric:
        t = by_metric["tpot"]
        rates.append((1000.0 / t.threshold_ms, f"TPOT {t.percentile} ≤ {t.threshold_ms:g} ms"))
    slo_rate = max(rates, default=None, key=lambda r: r[0])
    return napkin_core.napkin_capacity(users, tokens_per_user_s, gpu_tokens_s, headroom, slo_rate=slo_rate)


@public
def plan_unit_cost(
    *,
    tokens_per_day: float,
    gpu_hours: float | None = None,
    bill: float | None = None,
    gpu_price: float | None = None,
) -> UnitCost:
    """Cost per 1M tokens from a day's figures (the method's unit cost): the bill ÷ the day's tokens × 10⁶.

    Args:
        tokens_per_day: tokens served in the day (input + output, or what you bill on).
        gpu_hours: GPU-hours used that day (also gives tokens per GPU-hour).
        bill: the day's bill in USD; without it, ``gpu_hours × gpu_price``.
        gpu_price: USD per GPU-hour.

    Returns:
        ``u.usd_per_million_tokens``, ``u.tokens_per_gpu_hour``, ``u.steps()`` and ``u.to_dict()``.

    Raises:
        PlanError: non-positive figures, or neither a bill nor GPU-hours with a price.
    """
    return napkin_core.unit_cost(tokens_per_day=tokens_per_day, gpu_hours=gpu_hours, bill=bill, gpu_price=gpu_price)


@public
def plan_cost(
    *,
    gpu_price: float,
    run: RunRef,
    gpus: int | None = None,
    api_price_in: float | None = None,
    api_price_out: float | None = None,
    daily_requests: int | None = None,
    ops_usd_per_month: float = 0.0,
    cached_share: float = 0.0,
    cache_write_share: float = 0.0,
    cache_read_mult: float = 0.1,
    cache_write_mult: float = 1.25,
    store: StorePath | RunStore | None = None,
) -> CostPlan:
    """$ per 1M output tokens and per request at a measured or simulated run's throughput, and the break-even
    against an API's prices.

    Args:
        gpu_price: USD per GPU-hour.
        run: the run (a result of this API, a store reference such as ``latest``, or a ``--json`` export).
        gpus: GPUs behind the run (a sim run knows its own deployment).
        api_price_in, api_price_out: an API's USD per 1M input / output tokens.
        daily_requests: size a self-hosted fleet for this many requests a day and compare the daily cost.
        ops_usd_per_month: operations cost of self-hosting (people, on-call, monitoring), added to its side of the
            break-even (÷ 30 per day).
        cached_share: share of the API's input tokens read from its prompt cache, billed at ``cache_read_mult`` ×
            the input price (0.1×); ``cache_write_share`` of them are cache writes at ``cache_write_mult`` (1.25×).
        store: where references are looked up (only read).

    Raises:
        ConfigError: a bench run without ``gpus``. NotFoundError: no such run.
    """
    data = load_run(run, store=store)
    s = data.summary or {}
    n_gpus = run_gpus(data, gpus)
    if n_gpus is None:
        raise ConfigError(f"run {data.id} is a {data.kind} run: say how many GPUs served it with --gpus N")
    return napkin_core.plan_cost(
        gpus=n_gpus,
        gpu_price_per_hour=gpu_price,
        output_tokens_per_s=float(s.get("output_tokens_per_s") or 0.0),
        requests_per_s=float(s.get("requests_per_s") or 0.0),
        mean_input_tokens=float((s.get("input_tokens") or {}).get("mean") or 0.0),
        mean_output_tokens=float((s.get("output_tokens") or {}).get("mean") or 0.0),
        source=f"{data.kind} run {data.id}",
        api_price_in=api_price_in,
        api_price_out=api_price_out,
        daily_requests=daily_requests,
        ops_usd_per_month=ops_usd_per_month,
        cached=napkin_core.CachedPricing(cached_share, cache_write_share, cache_read_mult, cache_write_mult),
    )


def run_gpus(data: Any, gpus: int | None = None) -> int | None:
    """The GPUs behind a loaded run: ``gpus`` when given, else what a sim run's deployment says (replicas × TP)."""
    if gpus is not None:
        return gpus
    engine = data.settings.get("engine") if isinstance(data.settings, Mapping) else None
    if isinstance(engine, Mapping):
        return int(engine.get("replicas", 1)) * int(engine.get("tp", 1))
    return None


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
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(plan.contract(), sort_keys=False), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot write it ({exc.strerror})") from None
    return plan
