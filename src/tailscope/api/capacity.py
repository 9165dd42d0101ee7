"""Plan: :func:`plan_capacity` — the cheapest configuration (TP degree × replicas, or a prefill/decode split) that
meets the SLOs at a target load: analytic estimates bound the search, every answer is re-checked by simulation.
Nothing is written."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tailscope.api._support import PathLike, optional_path, public
from tailscope.api.plan import PerfModel, perf_model
from tailscope.errors import ConfigError, PlanError
from tailscope.io.calibration import load_calibration
from tailscope.io.models import resolve_model
from tailscope.metrics.slo import Slo, parse_slo
from tailscope.plan.capacity import CapacityPlan, ReplicaShape, SimCheck, search_capacity
from tailscope.plan.estimate import estimate_request
from tailscope.records import RequestRecord


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
        """The cheapest configuration that met the SLOs (``tp``, ``attention_dp``, ``replicas``, ``gpus``,
        ``usd_per_hour``), or None."""
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


def _tp_options(tp: str | Sequence[int | ReplicaShape]) -> tuple[ReplicaShape, ...]:
    """The replica shapes ``--tp`` names: a degree ``4`` (tensor parallelism), ``dp4`` (four attention-DP ranks of
    one GPU each) or, from the library, a :class:`~tailscope.plan.capacity.ReplicaShape`."""

    def one(x: int | str | ReplicaShape) -> ReplicaShape:
        if isinstance(x, ReplicaShape):
            return x
        text = str(x).strip().lower()
        ranks = text.startswith("dp")
        n = int(text[2:] if ranks else text)
        return ReplicaShape(1, n) if ranks else ReplicaShape(n)

    items = [x for x in tp.split(",") if x.strip()] if isinstance(tp, str) else list(tp)
    try:
        shapes = tuple(one(x) for x in items)
    except ValueError:
        raise ConfigError(f"--tp {tp!r}: expected degrees like 1,2,4 (dpN: N attention-DP ranks)") from None
    if not shapes or any(s.tp < 1 or s.attention_dp < 1 for s in shapes):
        raise ConfigError(f"--tp {tp!r}: expected degrees ≥ 1 like 1,2,4 (dpN: N attention-DP ranks)")
    return shapes


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
    tp: str | Sequence[int | ReplicaShape] = "1,2,4,8",
    max_replicas: int = 1024,
    gpu_price: float | None = None,
    weights_dtype: str | None = None,
    kv_dtype: str = "bf16",
    calibration: PathLike | None = None,
    sim_requests: int = 1500,
    engine: str = "vllm",
    steady_window_s: float = 120.0,
    max_sim_requests: int = 20_000,
    confidence: bool = False,
    disagg: str | None = None,
) -> CapacityResult:
    """The cheapest configuration (replica shape × replicas) that meets the SLOs at ``target_rps × (1 + headroom)``:
    analytic estimates bound the search, and every answer is re-checked by simulation (nothing is stored).

    Args:
        model, gpu: catalog ids (a ``config.json`` path for the model).
        target_rps: requests/s the fleet must serve.
        slo: SLOs like ``ttft_p99=1.5s`` (or parsed :class:`~tailscope.Slo`).
        profile: a workload profile (its lengths and mix); else ``input_tokens``/``output_tokens`` length specs.
        headroom: extra load fraction to plan for.
        tp: TP degrees to consider (``"1,2,4"`` or a list). For an MoE model each degree above 1 is also tried as
            that many attention-DP ranks with the experts over them (shape ``DP4``: four GPUs, four batches), right
            after its tensor-parallel shape (not with a twin or roofline efficiencies, which price TP only) — unless
            ``tp`` names attention-DP shapes itself (``"4,dp8"``, or :class:`~tailscope.plan.capacity.ReplicaShape`
            entries): then exactly the shapes named are tried.
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
    given = _tp_options(tp)
    tps = sorted({s.gpus for s in given})  # the widths (the disaggregated search's worker sizes)
    slos = tuple(s if isinstance(s, Slo) else parse_slo(s) for s in slo)
    slo_texts = tuple(s if isinstance(s, str) else f"{s.key}={s.threshold_ms:g}ms" for s in slo)
    mean_in, mean_out = _mean_lengths(profile, input_tokens, output_tokens)
    load = target_rps * (1 + headroom)
    # with a twin the fitted costs and KV facts replace the catalogs; the simulator still wants catalog ids
    sim_model, sim_gpu = model, gpu
    cal_path = optional_path(calibration)
    cal = load_calibration(cal_path)
    if cal.twin is not None:
        sim_model, sim_gpu = "llama-3.1-8b", "h100-sxm"
    high = _confidence_bounds(engine, gpu, model) if confidence else None
    moe = resolve_model(model).is_moe
    # an MoE model's replicas are also tried as attention-DP ranks over the same GPUs (as DeepSeek-style models are
    # served), each width after its tensor-parallel shape; the trained step model prices them
    shapes = list(given)
    dp_priced = moe and cal.twin is None and not cal.has_overrides  # twins and roofline efficiencies price TP only
    if any(s.attention_dp > 1 for s in given):
        if not dp_priced:
            raise ConfigError(
                f"--tp {tp!r}: attention-DP replicas (dpN) are for MoE models priced by the trained model"
            )
    elif dp_priced:
        shapes += [ReplicaShape(1, t) for t in tps if t > 1]  # none named: each width as attention-DP ranks too
    splits = _disagg_candidates(disagg, tps, min(max_replicas, 16), moe) if disagg is not None else None
    if splits is not None and moe:  # an MoE model spreads its experts over each worker's GPUs, as aggregated
        splits = [
            replace(d, prefill_ep=d.prefill_ep or _experts(d.prefill_tp),
                    decode_ep=d.decode_ep or _experts(d.decode_tp))
            for d in splits
        ]  # fmt: skip

    def perf_for(shape: ReplicaShape) -> PerfModel:
        # an MoE model spreads its experts over the replica's GPUs (expert parallelism = its GPUs)
        return perf_model(
            model,
            gpu,
            tp=shape.tp,
            weights_dtype=weights_dtype,
            kv_dtype=kv_dtype,
            calibration=calibration,
            engine=engine,
            ep=shape.gpus,
            attention_dp=shape.attention_dp,
        )

    unloaded_e2e_s: dict[ReplicaShape, float] = {}

    def needed_window(shape: ReplicaShape) -> float:
        """Seconds of arrivals a queue needs to settle: ≥ ``steady_window_s`` and ≥ 20 unloaded request times."""
        if shape not in unloaded_e2e_s:
            try:
                est = estimate_request(perf_for(shape), input_tokens=mean_in, output_tokens=mean_out)
                unloaded_e2e_s[shape] = est.e2e_ms / 1000
            except PlanError:
                unloaded_e2e_s[shape] = 0.0
        return max(steady_window_s, 20 * unloaded_e2e_s[shape])

    def judged(window: float, rate: float, scope: str, group: Any, **deployment: Any) -> SimCheck:
        """Simulate ``deployment`` at ``rate`` over ``window`` seconds of Poisson arrivals and judge the SLOs."""
        from tailscope.metrics.saturation import detect_saturation
        from tailscope.sim.run import SimArgs, run_sim

        # Poisson arrivals: n requests span n/rate seconds only on average. Ask for 3 standard deviations more, so the
        # last arrival lands past the window (with just rate × window, half the checks were "transient only").
        expected = rate * window
        covering = math.ceil(expected + 3 * math.sqrt(expected)) + 1
        requests = min(max(sim_requests, covering), max(sim_requests, max_sim_requests))
        warmup = requests // 10  # the queue fills from empty first: not part of the steady state
        args = SimArgs(
            **deployment,
            weights_dtype=weights_dtype,
            kv_dtype=kv_dtype,
            profile=optional_path(profile),
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
        # a percentile from one window's samples is itself a draw: the SLO must hold at its 95 % upper bound, or a
        # count that passes by 1 % fails a longer run of the same load (seen at 10,000 req/s)
        passed = passed and all(
            _quantile_upper_ms(out.records, c.slo.metric, c.slo.percentile) <= c.slo.threshold_ms for c in checks
        )
        if group is not None:  # the SLO must hold at the interval's high end too
            passed = passed and all(
                c.observed_ms is not None and c.observed_ms * group.bounds(c.slo.metric)[1] <= c.slo.threshold_ms
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

    def check(shape: ReplicaShape, replicas: int) -> SimCheck:
        window = needed_window(shape)
        scope, sim_replicas, rate = "fleet", replicas, load
        if load * window > max_sim_requests and replicas > 1:
            scope, sim_replicas, rate = "one replica", 1, load / replicas
        return judged(
            window, rate, scope, high[0] if high is not None else None,
            model=sim_model, gpu=sim_gpu, tp=shape.tp, attention_dp=shape.attention_dp, replicas=sim_replicas,
            backend=engine, ep=shape.gpus if moe and sim_model == model else 1, calibration=cal_path,
        )  # fmt: skip

    disagg_group = _confidence_bounds(engine, gpu, model, "disagg")[0] if confidence and splits else None

    def check_disagg(split: Any) -> SimCheck:
        # the same window and SLO test as the aggregated checks (the decode workers' unloaded request time)
        window = needed_window(ReplicaShape(split.decode_tp))
        return judged(window, load, "fleet", disagg_group, model=model, gpu=gpu, backend=engine, disagg=split.label())

    t0 = time.perf_counter()
    plan = search_capacity(
        perf_for,
        check,
        tp_options=shapes,
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
            *([_DP_NOTE] if any(sh.attention_dp > 1 for sh in shapes) else []),
        ),
    )
    split = None
    if splits is not None:
        split = _search_disagg(splits, gpu_price, check_disagg)
    return CapacityResult(plan, model, gpu, time.perf_counter() - t0, high[1] if high is not None else None, split)


#: the assumption a plan that tried attention-DP replicas states
_DP_NOTE = (
    "DPn: one replica of n GPUs as n attention-DP ranks, each scheduling its own batch, the experts over all n (the "
    "step model prices one rank with the others' all-to-all and balancing)"
)

#: simulations a ``disagg="auto"`` search may run
_DISAGG_MAX_SIMS = 40


def _disagg_candidates(text: str, tps: Sequence[int], max_workers: int, moe: bool = False) -> list[Any]:
    """The splits a search tries, fewest GPUs first: the given ones, or (``auto``) prefill and decode workers of each
    TP degree — for an MoE model also the same workers as attention-DP ranks (``:dpN:epN``, as wide-EP deployments
    of DeepSeek-style models run), each after its tensor-parallel twin."""
    from tailscope.engine.disagg import DisaggSpec, parse_disagg

    if text.strip() != "auto":
        return sorted(
            (parse_disagg(c, what="--disagg") for c in text.split(";") if c.strip()), key=lambda d: (d.gpus, d.label())
        )
    shapes = [(t, 0) for t in tps] + ([(t, t) for t in tps if t > 1] if moe else [])
    out = [
        DisaggSpec(p, t, n - p, t, dp, dp, dp, dp)
        for t, dp in shapes
        for n in range(2, max(2, max_workers) + 1)
        for p in range(1, n)
    ]
    return sorted(out, key=lambda d: (d.gpus, d.decode_workers, d.prefill_dp > 0, d.label()))


def _experts(gpus: int) -> int:
    """An MoE worker's expert parallelism in a search: over all its GPUs (0, none, on one GPU)."""
    return gpus if gpus > 1 else 0


def _widths(d: Any) -> str:
    """A split's pools without their worker counts: what decides whether a worker holds the model."""

    def pool(name: str, width: int, dp: int, ep: int) -> str:
        expert = f"EP {ep}" if ep > 1 else ""
        if dp > 1:
            return f"{name} {width} GPUs as {dp} attention-DP ranks" + (f" ({expert})" if expert else "")
        return f"{name} TP{width}" + (f" ({expert})" if expert else "")

    pre = pool("prefill", d.prefill_tp, d.prefill_dp, d.prefill_ep)
    return f"{pre}, {pool('decode', d.decode_tp, d.decode_dp, d.decode_ep)}"


def _search_disagg(splits: list[Any], gpu_price: float | None, check: Callable[[Any], SimCheck]) -> dict[str, Any]:
    """The cheapest disaggregated split the simulator accepts, as ``CapacityResult.disagg``.

    A split whose workers cannot hold the model (its weights leave no room for KV cache at that width) is not
    simulated: the first such split of each pair of widths says why in ``unfit`` ("prefill TP1, decode TP1" →
    the message), the others of that pair are skipped without counting against the simulations allowed."""
    tried: list[dict[str, Any]] = []
    unfit: dict[str, str] = {}
    for d in splits:
        if len(tried) >= _DISAGG_MAX_SIMS:
            break
        widths = _widths(d)
        if widths in unfit:
            continue
        try:
            res = check(d)
        except PlanError as exc:
            unfit[widths] = str(exc)
            continue
        tried.append({
            "deployment": d.label(), "gpus": d.gpus, "passed": res.passed, "observed": res.observed,
            "requests": res.requests, "window_s": res.window_s, "saturated": res.saturated,
        })  # fmt: skip
        if res.passed:
            return {
                "answer": f"{d.prefill_workers} prefill + {d.decode_workers} decode workers",
                "prefill_workers": d.prefill_workers,
                "deployment": d.label(),
                "prefill_tp": d.prefill_tp,
                "decode_workers": d.decode_workers,
                "decode_tp": d.decode_tp,
                "gpus": d.gpus,
                "usd_per_hour": d.gpus * gpu_price if gpu_price is not None else None,
                "observed": res.observed,
                "tried": tried,
                "unfit": unfit,
            }
    return {"answer": None, "tried": tried, "unfit": unfit}


def _confidence_bounds(engine: str, gpu: str, model: str, mode: str = "agg") -> tuple[Any, dict[str, Any]]:
    """The residual group a ``confidence`` plan sizes its intervals from, and how the plan reports it."""
    from tailscope.engine.gpus import resolve_gpu
    from tailscope.engine.residuals import residual_group

    group = residual_group(engine, resolve_gpu(gpu).id, model, mode)
    if group is None:
        raise ConfigError("--confidence: the step model has no residuals for this engine (no interval to size)")
    doc = {"level": 0.9, "rule": "every SLO holds at the high end of the 90% prediction interval", **group.to_dict()}
    return group, doc


def _quantile_upper_ms(records: Sequence[RequestRecord], metric: str, percentile: str) -> float:
    """A one-sided 95 % upper confidence bound (ms) on a percentile of a request metric. −∞ (no constraint) for
    means, maxima, ITL (a percentile of gaps, not of requests) and a window without samples.

    The larger of two bounds: the distribution-free order statistic of rank ``nq + 1.645·√(nq(1 − q))``, right for
    independent samples, and batch means over the window's four quarters in arrival order (each quarter's
    percentile; their mean + t₀.₉₅,₃ × sd / 2) where each quarter holds at least two samples beyond the percentile.
    A loaded replica's latencies are correlated over seconds — a queue that builds up holds for many requests — so
    the independent-sample bound is too narrow there: at 10,000 req/s (Llama-3.1-8B on H100, 55 req/s a replica)
    the quarters of one 30-second window had TTFT p99 645, 975, 1,032 and 781 ms, the whole window 976 ms (its
    order-statistic bound 997 ms), and the same load run twice as long 1,033 ms.
    """
    from tailscope.metrics.percentiles import percentile_fraction
    from tailscope.metrics.slo import request_value_ms

    if metric not in ("ttft", "tpot", "e2e") or percentile in ("mean", "max"):
        return -math.inf
    kept = sorted((r for r in records if r.ok and not r.warmup), key=lambda r: r.scheduled_ns)
    ordered = [v for r in kept if (v := request_value_ms(r, metric)) is not None]
    values = sorted(ordered)
    q = percentile_fraction(percentile)
    n = len(values)
    if n == 0:
        return -math.inf
    rank = math.ceil(n * q + 1.645 * math.sqrt(n * q * (1 - q)))
    bound = values[min(max(rank, 1), n) - 1]
    size = n // 4
    if size * (1 - q) < 2:  # too few samples beyond the percentile in a quarter for its own estimate
        return bound
    quarters = [sorted(ordered[i * size : (i + 1) * size])[min(math.ceil(size * q), size) - 1] for i in range(4)]
    mean = sum(quarters) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in quarters) / 3)
    return max(bound, mean + 2.353 * sd / 2)  # one-sided 95 % Student t, 3 degrees of freedom
