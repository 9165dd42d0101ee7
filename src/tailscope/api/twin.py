"""The digital twin: :func:`calibrate` (probe a real server, bounded, and fit its twin — or fit one from stored runs)
and :func:`twin_check` (predict a workload with the twin, measure it on the server, compare), each with an ``async``
twin.

The probe and the check send real load to the server; nothing is written unless asked: the probe's and the check's
bench runs go to ``store=`` when given, and the twin file to ``out=`` when given. The method (the probe's ladders,
the prediction interval, the anchors) is described in ``docs/engine.md``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tailscope.api._support import PathLike, StorePath, open_store, optional_path, public, sync_twin
from tailscope.api.sim import SimResult, sim_result
from tailscope.api.verify import _reader
from tailscope.engine.twin import ServerFacts, TwinModel
from tailscope.engine.twin_prior import TwinPrior
from tailscope.errors import ConfigError, PlanError
from tailscope.files import write_text
from tailscope.records import RequestRecord
from tailscope.runner.bench_result import BenchResult
from tailscope.store.runs import RunStore

#: ``on_phase=``: called with a line saying what starts now (a probe phase, a prediction, a measurement)
OnPhase = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Calibration:
    """A fitted digital twin.

    Attributes:
        twin: the fitted model: per-step cost coefficients (µs) with their standard errors, the server's facts
            (KV blocks, scheduler limits, prompt-token scale), fit residuals and the client's send lag.
        document: the twin file's content (what ``tailscope calibrate --out`` writes; ``--calibration`` reads it).
        path: where the twin file was written, or None (``out`` not given).
        notes: what the probe showed, in words (``probe runs``, ``anchor``, ``anchor, lone requests``, ``burst``).
        probe_runs: the probe's bench runs (empty when fitted from stored runs).
    """

    twin: TwinModel
    document: dict[str, Any]
    path: Path | None = None
    notes: dict[str, str] = field(default_factory=dict)
    probe_runs: tuple[BenchResult, ...] = ()

    def to_yaml(self) -> str:
        """The twin file as YAML text."""
        return yaml.safe_dump(self.document, sort_keys=False)


def _concurrencies(value: str | Sequence[int]) -> tuple[int, ...]:
    if not isinstance(value, str):
        return tuple(int(x) for x in value)
    try:
        return tuple(int(x) for x in value.split(","))
    except ValueError:
        raise ConfigError(f"--concurrencies {value!r}: expected numbers like 1,2,4,8") from None


@public
async def calibrate_async(
    url: str | None = None,
    *,
    model: str | None = None,
    out: PathLike | None = None,
    from_runs: Sequence[str] = (),
    budget: float = 180.0,
    concurrencies: str | Sequence[int] = "1,2,4,8",
    burst: bool = True,
    rounds: int | None = None,
    prefill_repeats: int | None = None,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 2048,
    block_size: int | None = None,
    num_blocks: int | None = None,
    seed: int = 0,
    prior: str | None = None,
    store: StorePath | RunStore | None = None,
    on_phase: OnPhase | None = None,
) -> Calibration:
    """Probe an OpenAI-compatible vLLM server (bounded by ``budget`` seconds) and fit its digital twin; or fit one
    from stored runs (``from_runs``), reading only the server's facts.

    Args:
        url: the server (``http://127.0.0.1:8000``); with ``from_runs``, default the first run's target.
        model: the served model's name (default: the first listed).
        out: write the twin file here (``--calibration`` of ``sim``, ``plan`` and ``twin check`` reads it).
        from_runs: fit from these stored runs (ids, prefixes, ``latest``) instead of probing.
        budget: the probe's time limit in seconds: fewer rounds when a round is slow; when it cuts the probe, the twin
            is fitted on what was measured, with ``document["partial"]`` and ``notes["partial"]`` naming what is
            missing.
        concurrencies: the decode probe's concurrencies (``"1,2,4,8"`` or a list).
        burst: finish with a burst that fills the KV cache.
        rounds, prefill_repeats: interleaved rounds of the ladders (default 8) and requests per prompt length in
            each round's prefill ladder (default 4); 1 to 50.
        max_num_seqs, max_num_batched_tokens: the server's scheduler limits.
        block_size, num_blocks: the KV cache's geometry when the server's ``/metrics`` lacks it.
        prior: ``MODEL@GPU`` or ``MODEL@GPUxTP`` (``llama-3.1-8b@h100x2``; MODEL a catalog id, a Hugging Face id or a
            ``config.json`` path, GPU a catalog id or a GPU YAML file): the trained step model of that deployment is
            the fit's prior and the probe its update — terms the probe cannot see come from the physics, each with
            its posterior standard error; ``document["fitted_on"]["prior"]`` says which terms the probe overruled.
        store: keep the probe's bench runs here (and look ``from_runs`` up here; default the CLI's store).
        on_phase: called with the name of each probe phase as it starts.

    Raises:
        ConfigError: no ``url`` and no ``from_runs``, or a bad option, or a budget that ran out before anything could
            be fitted (one line: what was measured, the budget to give, the stored runs). TargetError: the server
            cannot be reached.
    """
    from tailscope.engine.twin import noisy_fit_warning, send_lag_from
    from tailscope.runner.calibrate import ProbePlan, run_probe
    from tailscope.runner.server_facts import facts_from_labels, server_facts, stored_cache_labels
    from tailscope.runner.twin_from_runs import check_fit_inputs, fit_busy_frontend, fit_from_runs, open_loop_send_lags

    prior_of = _prior_from_ref(prior) if prior else None  # a bad reference fails before any load is sent
    records: list[list[RequestRecord]] = []
    notes: dict[str, str] = {}
    stored_modes: list[Any] = []
    stored: ServerFacts | None = None
    if from_runs:
        reader = _reader(store)
        runs = [reader.get_run(r) for r in from_runs]
        for sr in runs:
            records.append(reader.load_records(sr.run.id))
            stored_modes.append(sr.run.settings.get("mode"))
        caveat = check_fit_inputs([(sr.run.id, recs) for sr, recs in zip(runs, records, strict=True)])
        if caveat:
            notes["caveat"] = caveat
        # the engine facts the runs scraped (the server may be gone: a built-in engine always is)
        labels = next((lab for sr in runs if (lab := stored_cache_labels(reader.load_samples(sr.run.id)))), {})
        first = runs[0].run.target
        stored = facts_from_labels(
            labels,
            url=url or first.url,
            model=model or first.model or "",
            max_model_len=None,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size,
            num_blocks=num_blocks,
        )
        if stored is None and url is None:
            raise ConfigError(
                f"--from-runs {', '.join(sr.run.id for sr in runs)}: the runs did not scrape the server's KV geometry "
                "(vllm:cache_config_info); pass --block-size and --num-blocks, or --url of the running server"
            )
        if stored is not None:
            notes["server facts"] = "from the runs' scraped vllm:cache_config_info" if labels else "from the flags"
        url = url or first.url
    if url is None:
        raise ConfigError("give --url (the server to probe, or whose facts to read) or --from-runs RUN")
    facts: ServerFacts
    if stored is not None:
        facts = stored
    elif block_size is not None and num_blocks is not None:
        facts = ServerFacts(block_size, num_blocks, max_num_seqs, max_num_batched_tokens, url=url, model=model or "")
    else:
        facts = await server_facts(
            url,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size,
            num_blocks=num_blocks,
        )
    results: list[BenchResult] = []
    anchor_tpot: float | None = None
    anchor_lone: dict[Any, float] | None = None
    burst_info: dict[str, Any] = {}
    partial: dict[str, Any] | None = None
    if not from_runs:
        plan = ProbePlan(concurrencies=_concurrencies(concurrencies), burst=burst, time_budget_s=budget)
        for flag, value in (("--rounds", rounds), ("--prefill-repeats", prefill_repeats)):
            if value is not None and not 1 <= value <= 50:
                raise ConfigError(f"{flag} {value}: use 1 to 50")
        if rounds is not None:
            plan = replace(plan, rounds=rounds)
        if prefill_repeats is not None:
            plan = replace(plan, repeats=prefill_repeats)
        results, burst_info, facts = await run_probe(
            url, model, facts, plan, store=open_store(store), seed=seed, on_phase=on_phase
        )
        records += [res.records for res in results if res.run.settings.get("probe") != "burst"]
        notes["probe runs"] = ", ".join(r.run.id for r in results)
        if note := burst_info.pop("budget_note", None):
            notes["budget"] = note
        partial = burst_info.pop("partial", None)
        if partial is not None:
            caveat = _partial_fit(partial, records, [r.run.id for r in results], stored=store is not None)
            if caveat:
                notes["caveat"] = caveat
        anchor_tpot = burst_info.pop("anchor_tpot_ms", None)
        anchor_runs = burst_info.pop("anchor_runs", 0)
        anchor_lone = burst_info.pop("anchor_lone_ttft_ms", None)
        if anchor_tpot:
            notes["anchor"] = f"TPOT p50 {anchor_tpot:.2f} ms (mean of {anchor_runs} runs; the reference for --anchor)"
        if anchor_lone:
            notes["anchor, lone requests"] = "TTFT " + ", ".join(
                f"{v:.1f} ms at {k} tokens" for k, v in anchor_lone.items()
            )
        if burst_info:
            notes["burst"] = json.dumps(burst_info)
    twin_prior = prior_of(facts) if prior_of is not None else None
    twin = fit_from_runs(records, facts, seed=seed, prior=twin_prior)
    if twin_prior is not None:
        notes["prior"] = _prior_line(twin.fitted_on.get("prior") or {})
    # the client's open-loop send lag (the twin adds it to open-loop arrivals, as bench counts it in their latency)
    if from_runs:
        open_runs = [recs for mode, recs in zip(stored_modes, records, strict=True) if mode == "open"]
    else:
        open_runs = [r.records for r in results if r.run.settings.get("probe") == "open"]
    twin = replace(twin, send_lag=send_lag_from([v for recs in open_runs for v in open_loop_send_lags(recs)]))
    if not from_runs and open_runs and any(r.ok for r in open_runs[0]):
        twin = fit_busy_frontend(twin, open_runs[0])
    if noisy := noisy_fit_warning(twin):
        notes["noisy fit"] = noisy
        if on_phase:
            on_phase("warning: " + noisy)
    doc = twin.to_mapping()
    if anchor_tpot:
        doc["fitted_on"]["anchor_tpot_ms"] = anchor_tpot
    if anchor_lone:
        doc["fitted_on"]["anchor_lone_ttft_ms"] = {int(k): float(v) for k, v in anchor_lone.items()}
    if burst_info:
        doc["fitted_on"]["burst"] = burst_info
    doc["fitted_on"]["runs"] = list(from_runs) or [r.run.id for r in results]
    if partial is not None:
        doc["partial"] = partial
        notes["partial"] = _partial_line(partial)
        if on_phase:
            on_phase("warning: " + notes["partial"])
    result = Calibration(twin, doc, None, notes, tuple(results))
    if out is not None:
        result = replace(result, path=_write_twin(Path(out), result.to_yaml()))
    return result


def _prior_from_ref(ref: str) -> Callable[[ServerFacts], TwinPrior]:
    """Resolve ``--prior MODEL@GPU[xTP]`` now (a bad one fails before the probe); the prior itself needs the
    server's engine and limits, so it is computed from its facts later."""
    from tailscope.engine.gpus import resolve_gpu
    from tailscope.engine.residuals import residual_group
    from tailscope.engine.step_model import TrainedStepModel
    from tailscope.engine.step_terms import Parallelism
    from tailscope.engine.twin_prior import parse_prior_ref, twin_prior
    from tailscope.io.gpus import load_gpu_file
    from tailscope.io.models import resolve_model

    model_ref, gpu_ref, tp = parse_prior_ref(ref)
    arch = resolve_model(model_ref)
    if gpu_ref.endswith((".yaml", ".yml")):
        specs = load_gpu_file(gpu_ref)
        if not specs:
            raise ConfigError(f"--prior {ref!r}: {gpu_ref} lists no GPU")
        gpu = specs[0]
    else:
        gpu = resolve_gpu(gpu_ref)
    try:
        TrainedStepModel(arch, gpu, Parallelism(tp=tp)).kv_capacity_tokens()  # the weights must fit
    except PlanError as exc:
        raise ConfigError(f"--prior {ref!r}: {exc} (in --prior, more GPUs are MODEL@GPUxTP)") from exc

    def build(facts: ServerFacts) -> TwinPrior:
        engine = facts.engine if facts.engine in ("vllm", "sglang", "trtllm") else "vllm"
        step = TrainedStepModel(arch, gpu, Parallelism(tp=tp), engine=engine)
        return twin_prior(
            step,
            max_num_batched_tokens=facts.max_num_batched_tokens,
            max_model_len=facts.max_model_len,
            group=residual_group(engine, gpu.id, model_ref, "agg"),
            source=f"the trained step model: {model_ref} on {gpu.id} ×{tp}, {engine}, {step.weights_dtype}",
        )

    return build


def _prior_line(report: dict[str, Any]) -> str:
    """What the prior did, in one line."""
    used = report.get("used") or []
    rejected = report.get("rejected") or {}
    parts = [f"used on {', '.join(used)}" if used else "used on no term"]
    if rejected:
        parts.append(f"overruled by the probe on {', '.join(rejected)}")
    return f"{'; '.join(parts)} ({report.get('source', '')})"


def _missing(partial: dict[str, Any]) -> str:
    """What a budget-cut probe did not measure, in words."""
    parts = [f"{partial['rounds_done']} of {partial['rounds_planned']} rounds"]
    if partial["phases_not_run"]:
        parts.append("not run: " + ", ".join(partial["phases_not_run"]))
    if partial["phases_cut"]:
        parts.append("cut: " + ", ".join(f"{k} ({v})" for k, v in partial["phases_cut"].items()))
    if partial["prompt_lengths_not_probed"]:
        parts.append("prompt lengths not probed: " + ", ".join(map(str, partial["prompt_lengths_not_probed"])))
    if partial["concurrencies_not_probed"]:
        parts.append("concurrencies not probed: " + ", ".join(map(str, partial["concurrencies_not_probed"])))
    return "; ".join(parts)


def _partial_line(partial: dict[str, Any]) -> str:
    return (
        f"the {partial['budget_s']:g} s budget ran out, so this twin is fitted on part of the probe "
        f"({_missing(partial)}); about {partial['budget_needed_s']:.0f} s would fit a full one (--budget)"
    )


def _partial_fit(
    partial: dict[str, Any], records: list[list[RequestRecord]], run_ids: list[str], *, stored: bool
) -> str | None:
    """The caveat of a fit on a budget-cut probe's runs, or a one-line ConfigError when they cannot be fitted."""
    from tailscope.runner.twin_from_runs import check_fit_inputs, fit_inputs

    try:
        return check_fit_inputs(list(zip(run_ids, records, strict=False)))
    except ConfigError:
        lone, decode, _ = fit_inputs(records)
        seen = ", ".join(map(str, sorted(lone))) or "none"
        kept = "the measured run is" if len(run_ids) == 1 else f"the {len(run_ids)} measured runs are"
        runs = " ".join(f"--from-runs {r}" for r in run_ids)
        keep = f"; {kept} in the store: add runs and fit them with {runs}" if stored and run_ids else ""
        raise ConfigError(
            f"--budget {partial['budget_s']:g}: too little measured to fit a twin in {partial['elapsed_s']:g} s "
            f"(lone requests at {seen} tokens, {decode} decode requests; a fit needs lone requests at two or more "
            f"prompt lengths and 3 decode requests); give --budget {partial['budget_needed_s']:.0f} or more{keep}"
        ) from None


def _write_twin(path: Path, text: str) -> Path:
    write_text(path, text, "--out")
    return path


calibrate = sync_twin(calibrate_async)


@dataclass(frozen=True, slots=True)
class TwinCheck:
    """The twin's prediction of a workload against its measurement on the server.

    Attributes:
        report: the comparison (``tailscope twin check --json``): ``rows`` (per metric and percentile: predicted,
            its ±1σ interval, measured, relative error, whether it is gated and within the tolerance),
            ``passed``, ``failed``, ``tolerance``, the run ids, with anchors the measured speed factors, and
            ``steady_decode``: the server's decode gaps against the twin's at equal batch with no arrival in
            progress (``ratio``, measured ÷ predicted, and ``by_streams``; :func:`~tailscope.runner.twin_check.
            steady_decode_report`).
        measured: the bench runs of the workload (one per repeat).
        prediction: the twin's simulation of the workload (with its prediction interval).
    """

    report: dict[str, Any]
    measured: tuple[BenchResult, ...]
    prediction: SimResult

    @property
    def passed(self) -> bool:
        """Every gated row (TTFT and TPOT p50/p90) within the tolerance."""
        return bool(self.report["passed"])

    @property
    def failed(self) -> list[str]:
        """The gated rows beyond the tolerance (``ttft_ms.p50``, …)."""
        return list(self.report.get("failed") or [])

    def to_dict(self) -> dict[str, Any]:
        """The document ``tailscope twin check --json`` writes."""
        return self.report


@public
async def twin_check_async(
    calibration: PathLike,
    url: str,
    *,
    model: str | None = None,
    profile: PathLike | None = None,
    rate: float | None = None,
    concurrency: int | None = None,
    arrival: str = "poisson",
    requests: int | None = None,
    duration: float | None = None,
    input_tokens: str | int = "256",
    output_tokens: str | int = "64",
    stagger: float | None = None,
    seed: int = 0,
    tolerance: float = 0.25,
    anchor: bool = False,
    repeat: int = 1,
    store: StorePath | RunStore | None = None,
    on_phase: OnPhase | None = None,
) -> TwinCheck:
    """Predict a workload with a digital twin (fit, −1σ, +1σ), measure the same request stream on the server and
    compare TTFT/TPOT/E2E percentiles and throughput.

    Args:
        calibration: the twin file (``tailscope calibrate``'s output).
        url: the real server to measure; ``model`` its served model (default: the first listed).
        profile, rate, concurrency, arrival, requests, duration, input_tokens, output_tokens, seed: the workload,
            as for :func:`tailscope.simulate` (bounded: ``requests`` or ``duration`` is required).
        stagger: a closed loop's start, the same in the measurement and the prediction: client ``i`` of ``C`` starts
            at ``i / C × stagger`` seconds; None starts them all at once, as :func:`tailscope.bench` does (the
            simulation is told so: ``sim``'s own default spreads them, docs/engine.md "tailscope sim").
        tolerance: the largest relative error allowed on TTFT/TPOT p50 and p90.
        anchor: re-read the server's current speed with small fixed runs before and after the workload and scale
            the twin's costs to it (for machines whose speed drifts).
        repeat: measure the workload this many times (1 to 20) and compare with the median of each percentile.
        store: keep the bench runs and the prediction here; None writes nothing.
        on_phase: called with a line as each prediction and measurement starts.

    Returns:
        ``check.passed``, ``check.failed``, ``check.report`` (rows of predicted vs measured) and the runs.

    Raises:
        ConfigError: an unbounded workload, a bad ``repeat``, or a calibration that is not a twin file.
    """
    from tailscope.client.openai import Timeouts
    from tailscope.io.calibration import load_calibration
    from tailscope.runner.bench import run_bench
    from tailscope.runner.bench_config import BenchConfig
    from tailscope.runner.loadgen import DispatchConfig
    from tailscope.runner.twin_check import (
        ANCHOR,
        COMPARED,
        LONE_ANCHOR,
        anchor_specs,
        anchored_calibration,
        compare,
        fresh_prompts,
        interval_of,
        lone_anchor_specs,
        lone_ttfts,
        median_summary,
        merge_ttfts,
        predict,
        steady_decode_report,
    )
    from tailscope.sim.run import SimArgs
    from tailscope.sim.workload import resolve_specs

    say = on_phase or (lambda _line: None)
    if requests is None and duration is None:
        raise ConfigError("give --requests N or --duration SECONDS: the check is a bounded run")
    if not 1 <= repeat <= 20:
        raise ConfigError(f"--repeat {repeat}: measure the workload 1 to 20 times")
    given = {"rate": rate, "concurrency": concurrency, "requests": requests, "duration": duration}
    explicit = {name for name, value in given.items() if value is not None}
    cal_path = Path(calibration)
    args = SimArgs(
        calibration=cal_path,
        profile=optional_path(profile),
        rate=rate,
        concurrency=concurrency,
        arrival=arrival,
        requests=requests,
        duration=duration,
        input_tokens=str(input_tokens),
        output_tokens=str(output_tokens),
        seed=seed,
        store=False,
        explicit=frozenset(explicit | {"arrival", "input_tokens", "output_tokens"}),
        stagger=stagger,
    )
    wl = resolve_specs(args)  # refuses a stagger with an open loop
    if wl.concurrency is not None:  # the bench's start, simulated: all at once unless told otherwise
        args = replace(args, stagger=stagger or 0.0)
        wl = resolve_specs(args)
    rs = open_store(store)
    say("predicting with the twin (fit, −1σ, +1σ) …")
    pred = predict(args, store=rs)
    say(f"measuring {url} …")
    cfg = BenchConfig(
        url=url,
        model=model,
        seed=seed,
        dispatch=DispatchConfig(
            concurrency=wl.concurrency,
            duration_s=wl.duration_s,
            drain_timeout_s=300,
            stagger_s=args.stagger or 0.0,  # None only for an open loop
        ),
        requested_rate=rate,
        timeouts=Timeouts(first_token_s=300, total_s=600),
        settings={"twin_check": str(calibration), **wl.settings},
        profile_name=wl.profile,
        handle_signals=False,
        probe="twin-check",
    )
    anchors: list[tuple[float, float]] = []
    lone: list[dict[int, list[float]]] = []
    twin = load_calibration(cal_path).twin
    max_prompt = (twin.facts.max_model_len or 2048) - 64 - LONE_ANCHOR[2] if twin is not None else None

    async def measure_anchor(when: str) -> None:
        say(
            f"anchor ({when}): {ANCHOR[1]} requests at concurrency {ANCHOR[0]}, then "
            f"{len(LONE_ANCHOR[0]) * LONE_ANCHOR[1] + 1} one at a time …"
        )
        a_cfg = replace(
            cfg,
            dispatch=DispatchConfig(concurrency=ANCHOR[0], drain_timeout_s=120),
            requested_rate=None,
            settings={"twin_check_anchor": when, "twin_check": str(calibration)},
            profile_name=None,
        )
        res = await run_bench(a_cfg, iter(anchor_specs(seed)), store=rs)
        anchors.append((float(res.summary.ttft_ms.p50 or 0.0), float(res.summary.tpot_ms.p50 or 0.0)))
        specs = lone_anchor_specs(seed, 1_000 + len(lone), max_prompt)
        l_cfg = replace(
            a_cfg,
            dispatch=DispatchConfig(concurrency=1, drain_timeout_s=120),
            settings={"twin_check_anchor": when + " (lone requests)", "twin_check": str(calibration)},
        )
        lone.append(lone_ttfts((await run_bench(l_cfg, iter(specs), store=rs)).records, specs))

    runs: list[BenchResult] = []
    for k in range(repeat):
        if anchor:
            await measure_anchor(f"before measurement {k + 1}")
        if k:
            say(f"measuring again ({k + 1} of {repeat}) …")
        specs = fresh_prompts(resolve_specs(args).specs, k) if k else wl.specs
        runs.append(await run_bench(cfg, specs, store=rs))
    summaries = [r.summary.to_dict() for r in runs]
    msum = summaries[0] if repeat == 1 else median_summary(summaries)
    anchor_info: dict[str, Any] | None = None
    if anchor:
        await measure_anchor("after")
        unanchored = compare(pred, msum, tolerance)
        lone_now = merge_ttfts(lone)
        with tempfile.TemporaryDirectory() as tmp:
            a = anchored_calibration(cal_path, [b for _, b in anchors], Path(tmp), lone_now)
            speed = f"the server decodes at {a.decode:.2f}×"
            if a.prefill is not None:
                speed += f" and prefills at {a.prefill:.2f}×"
            else:
                speed += " (no lone-request reference in the twin: prefill path as calibrated)"
            say(f"anchored: {speed} the calibration's time; predicting again …")
            pred = predict(replace(args, calibration=a.path), store=rs)
        anchor_info = {
            "measured_ttft_ms": [x for x, _ in anchors],
            "measured_tpot_ms": [y for _, y in anchors],
            "lone_ttft_ms": {str(k): v for k, v in lone_now.items()},
            "decode_factor": a.decode,
            "prefill_factor": a.prefill,
            "unanchored_errors": {f"{r['metric']}.{r['percentile']}": r["error"] for r in unanchored["rows"]},
        }
    report = compare(pred, msum, tolerance)
    if anchor_info is not None:
        report["anchor"] = anchor_info
    report["steady_decode"] = steady_decode_report([r.records for r in runs], pred.outcome.records)
    report["prediction_run"] = pred.outcome.run.id
    report["measured_run"] = runs[-1].run.id
    if repeat > 1:
        report["measured_runs"] = [r.run.id for r in runs]
        report["repeats"] = {f"{key}.{pct}": [(s.get(key) or {}).get(pct) for s in summaries] for key, pct in COMPARED}
    prediction = sim_result(pred.outcome, interval=interval_of(pred), store=rs)
    return TwinCheck(report, tuple(runs), prediction)


twin_check = sync_twin(twin_check_async)
