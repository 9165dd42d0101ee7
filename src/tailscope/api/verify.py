"""Verify: :func:`gate` (a run against a performance contract), :func:`compare` (which differences between runs are
real), :func:`diagnose` (findings: symptom, evidence, cause, actions), :func:`alerts` (Prometheus rules from a
contract) and :func:`load_run`.

A run is given as a result of this API (:class:`~tailscope.BenchResult`, or any result with ``.run`` and
``.records``), a :class:`~tailscope.verify.rundata.RunData`, a store reference (a run id, a unique id prefix,
``latest`` or ``latest:TAG``) or the path of a ``tailscope bench --json`` export. References are looked up in
``store=`` (a path or a :class:`~tailscope.store.runs.RunStore`; default ``$TAILSCOPE_DB`` or
``./.tailscope/tailscope.duckdb``). These functions only read: they never write a store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tailscope.api._support import StorePath, default_store, open_store, public
from tailscope.errors import ConfigError, NotFoundError
from tailscope.io.contracts import contract_from_dict, load_contract
from tailscope.io.exports import read_export, read_json, read_trace_analysis
from tailscope.metrics.document import run_to_json
from tailscope.records import RequestRecord, Run
from tailscope.store.runs import RunStore
from tailscope.verify.alerts import (
    KV_USAGE_LIMIT,
    AlertOptions,
    AlertRules,
    alert_rules,
    check_options,
    golden_rules,
)
from tailscope.verify.compare import DEFAULT_STATS, ComparisonResult, compare_runs, parse_metrics
from tailscope.verify.contract import Contract, canonical_percentile
from tailscope.verify.diagnose import Diagnosis
from tailscope.verify.diagnose import diagnose as run_rules
from tailscope.verify.evaluate import GateResult, evaluate
from tailscope.verify.grafana import dashboard
from tailscope.verify.rundata import RunData


class RunResult(Protocol):
    """A result of the API that holds a run: :class:`~tailscope.BenchResult`, a simulation's result."""

    @property
    def run(self) -> Run: ...

    @property
    def records(self) -> Sequence[RequestRecord]: ...


#: what ``run=`` accepts: a store reference or export path, a RunData, or an API result with ``.run``/``.records``
RunRef = str | os.PathLike[str] | RunData | RunResult
#: what ``contract=`` accepts: a contract file, a dict of the file's shape, or a parsed Contract
ContractRef = str | os.PathLike[str] | Mapping[str, Any] | Contract


def is_export_ref(ref: str | os.PathLike[str]) -> bool:
    """True when ``ref`` names a JSON file rather than a stored run or trace set."""
    return not isinstance(ref, str) or ref.endswith(".json") or Path(ref).is_file()


def _reader(store: StorePath | RunStore | None) -> RunStore:
    return open_store(store) or default_store()


def as_contract(contract: ContractRef) -> Contract:
    """A parsed contract from a file path, a dict (``name`` optional) or a Contract."""
    if isinstance(contract, Contract):
        return contract
    if isinstance(contract, Mapping):
        data = dict(contract) if "name" in contract else {"name": "contract", **contract}
        return contract_from_dict(data, source="<contract dict>")
    if not isinstance(contract, str | os.PathLike):
        raise ConfigError(f"contract {contract!r}: expected a contract file, a dict of its shape or a Contract")
    return load_contract(contract)


def _from_result(result: RunResult) -> RunData:
    """RunData of an API result (BenchResult, a simulation's result): its run, records, samples and summary."""
    run = result.run
    summary: Any = getattr(result, "summary", None)
    if callable(getattr(result, "summary_dict", None)):
        summary = getattr(result, "summary_dict")()  # noqa: B009 (a capability, not every result has it)
    elif callable(getattr(summary, "to_dict", None)):
        summary = summary.to_dict()
    status = getattr(result, "status", run.status)
    return RunData(
        id=run.id,
        kind=run.kind.value,
        records=tuple(result.records),
        samples=tuple(getattr(result, "samples", ()) or ()),
        summary=summary if isinstance(summary, Mapping) else None,
        settings=run.settings,
        status=getattr(status, "value", str(status)),
        run=run_to_json(run),
    )


@public
def load_run(ref: RunRef, *, store: StorePath | RunStore | None = None) -> RunData:
    """A run's records, server samples, summary and metadata, from wherever it is.

    Args:
        ref: ``latest``, ``latest:TAG``, a run id or unique prefix (looked up in ``store``), the path of a
            ``bench --json`` export, a :class:`~tailscope.BenchResult` (or any result with ``.run`` and ``.records``)
            or a RunData (returned as is).
        store: the store to look references up in (default ``$TAILSCOPE_DB`` or ``./.tailscope/tailscope.duckdb``);
            only read.

    Raises:
        NotFoundError: no such run, or no store at all. ContractError: the export cannot be read or is not one.
    """
    if isinstance(ref, RunData):
        return ref
    if not isinstance(ref, str | os.PathLike):
        if hasattr(ref, "records") and hasattr(ref, "run"):
            return _from_result(ref)
        raise ConfigError(f"run {ref!r}: expected a run id, latest[:TAG], an export.json path or a BenchResult")
    if is_export_ref(ref):
        return read_export(ref)
    return load_stored_run(str(ref), store=store)


def load_stored_run(ref: str, *, store: StorePath | RunStore | None = None) -> RunData:
    """A run of the store only (an id, a unique prefix, ``latest`` or ``latest:TAG``), never a file.

    Raises:
        NotFoundError: no store, or no such run in it.
    """
    rs = _reader(store)
    if not rs.db.exists:
        raise NotFoundError(f"no store at {rs.db.path}: run `tailscope bench` first, or pass an export.json")
    stored = rs.get_run(ref)
    run_id = stored.run.id
    return RunData(
        id=run_id,
        kind=stored.run.kind.value,
        records=tuple(rs.load_records(run_id)),
        samples=tuple(rs.load_samples(run_id)),
        summary=stored.summary,
        settings=stored.run.settings,
        status=stored.run.status.value,
        run=run_to_json(stored.run),
        tags=tuple(stored.tags),
    )


def load_layer_samples(
    traces: str | os.PathLike[str] | Mapping[str, Any], *, store: StorePath | RunStore | None = None
) -> dict[str, Any]:
    """Per layer, the critical-path ms each trace spends in it: from a stored trace set, a spans JSON file, or a
    mapping ``{layer: samples in ms}`` (returned as is).

    Raises:
        ContractError: the file is malformed. NotFoundError: no store, or no such trace set.
    """
    from tailscope.verify.layers import layer_samples_from_facts, layer_samples_from_json

    if isinstance(traces, Mapping):
        return dict(traces)
    if is_export_ref(traces):
        return layer_samples_from_json(read_json(traces, what="spans JSON"), source=str(traces))
    return layer_samples_from_facts(_set_facts(str(traces), store))


def _set_facts(name: str, store: StorePath | RunStore | None) -> Any:
    from tailscope.store.spans import SpanStore
    from tailscope.trace.ingest.sets import set_facts

    spans = SpanStore(_reader(store).db)
    if not spans.db.exists:
        raise NotFoundError(
            f"no store at {spans.db.path}: ingest traces with `tailscope trace ingest FILES --set NAME`"
        )
    return set_facts(spans, name)


def _trace_analysis(traces: Any, store: StorePath | RunStore | None) -> Mapping[str, Any]:
    """A trace analysis dict: given, from a result with ``to_dict()``, a ``trace analyze --json`` file or a set."""
    if isinstance(traces, Mapping):
        return traces
    if callable(getattr(traces, "to_dict", None)):
        doc: Mapping[str, Any] = traces.to_dict()
        return doc
    if is_export_ref(traces):
        return read_trace_analysis(traces)
    from tailscope.trace.analysis import analyze_facts

    return analyze_facts(_set_facts(str(traces), store))


@public
def gate(
    contract: ContractRef,
    run: RunRef | None = "latest",
    *,
    baseline: RunRef | None = None,
    traces: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    store: StorePath | RunStore | None = None,
    strict: bool = False,
    seed: int | None = None,
    diagnose: bool = False,
) -> GateResult:
    """Check a run against a performance contract: SLOs, regressions against a baseline, dependency layers.

    Args:
        contract: a contract file, a dict of the same shape (``{"slo": [{"metric": "ttft_ms", "percentile": "p99",
            "max": 1500}]}``; ``name`` optional) or a parsed :class:`~tailscope.verify.contract.Contract`.
        run: the run under test (a result, a store reference or an export path; see the module).
        baseline: the baseline of the regression checks (default: the contract's ``regression.baseline``). A
            baseline that is not found makes those checks "missing", not an error.
        traces: a trace set name, a spans JSON file or ``{layer: samples ms}`` for the layer checks.
        store: where references are looked up (only read).
        strict: inconclusive regression checks fail the gate.
        seed: the bootstrap's seed (default: the contract's ``regression.seed``).
        diagnose: when the gate does not pass, attach the run's diagnosis (``result.findings``).

    A **trace-only** gate (``run=None`` with ``traces``) evaluates the contract's ``layers:`` SLOs on the trace set
    alone — no bench run needed; its SLO and regression checks are left out (and named in ``result.notes``).

    Returns:
        ``result.passed``, ``result.checks`` (each with its verdict, observed value, limit and interval),
        ``result.exit_code`` (0 pass, 1 fail, 2 missing data) and ``result.to_dict()`` (``tailscope gate --json``).

    Raises:
        ContractError: the contract or an export is invalid. NotFoundError: the run or the trace set is not there.
    """
    spec = as_contract(contract)
    if run is None:
        return _trace_only_gate(spec, traces, store=store)
    run_data = load_run(run, store=store)
    base_ref = baseline if baseline is not None else (spec.regression.baseline if spec.regression else None)
    base_data = None
    baseline_missing = None
    if spec.regression is not None and spec.regression.limits and base_ref:
        try:
            base_data = load_run(base_ref, store=store)
        except NotFoundError as exc:
            baseline_missing = f"baseline {base_ref!r}: {exc}"
    layer_samples = load_layer_samples(traces, store=store) if traces is not None else None
    result = evaluate(
        spec,
        run_data,
        baseline=base_data,
        baseline_missing=baseline_missing,
        layer_samples=layer_samples,
        strict=strict,
        rng=np.random.default_rng(seed) if seed is not None else None,
    )
    if diagnose and result.exit_code != 0 and run_data.records:
        found = run_rules(run_data.records, run_data.samples, settings=run_data.settings)
        result = replace(result, diagnosis=Diagnosis(run_data.id, tuple(found)))
    return result


def _trace_only_gate(
    spec: Contract, traces: str | os.PathLike[str] | Mapping[str, Any] | None, *, store: StorePath | RunStore | None
) -> GateResult:
    """The layer SLOs of a contract on a trace set, with no run."""
    if traces is None:
        raise ConfigError("a trace-only gate (no run) needs a trace set: pass --traces SET (or traces= in Python)")
    if not spec.layers:
        raise ConfigError(
            f"contract {spec.name!r} has no layers: SLOs, so a trace set alone checks nothing; add "
            "`layers: [{layer: retrieval, percentile: p99, max_ms: 200}]` or gate a run with --run"
        )
    samples = load_layer_samples(traces, store=store)
    label = traces if isinstance(traces, str) else "traces" if isinstance(traces, Mapping) else str(traces)
    result = evaluate(replace(spec, slos=(), regression=None), RunData(id=f"trace set {label}", kind="trace"),
                      layer_samples=samples)  # fmt: skip
    skipped = [s.name for s in spec.slos] + ([lim.key for lim in spec.regression.limits] if spec.regression else [])
    notes = (
        ("trace-only gate: the contract's run checks were not evaluated (" + ", ".join(skipped) + ")",)
        if skipped
        else ()
    )
    return replace(result, notes=result.notes + notes)


@public
def compare(
    runs: Sequence[RunRef],
    *,
    metrics: str | Sequence[str] | None = None,
    percentiles: str | Sequence[str] = DEFAULT_STATS,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    gpu_price: float | None = None,
    gpus: int | None = None,
    store: StorePath | RunStore | None = None,
) -> ComparisonResult:
    """Compare runs against the first: per metric and percentile, the change, its bootstrap interval and whether it
    is significant (the interval excludes zero). Works on bench, sim and trace runs and on export files alike.

    Args:
        runs: two or more runs (results, store references or export paths); the first is the reference.
        metrics: ``ttft_ms,tpot_ms`` or a list (``_ms`` optional); default TTFT, TPOT, ITL, E2E, output tokens/s,
            requests/s and the error rate.
        percentiles: the statistics of latency metrics (``p50,p90,p99``).
        confidence: the intervals' level, in (0.5, 1).
        resamples: bootstrap resamples (≥ 100).
        seed: the bootstrap's seed.
        gpu_price: USD per GPU-hour: adds each run's USD per 1M output tokens (``result.usd_per_million_output_tokens``)
            for the runs whose GPUs are known (``gpus``, or a sim run's own deployment).
        gpus: GPUs behind each run (bench runs do not know their own).
        store: where references are looked up (only read).

    Returns:
        ``result.rows`` (``result.row("ttft_ms.p99").direction(0)`` is ``worse``, ``better`` or ``same``) and
        ``result.to_dict()`` (``tailscope compare --json``).
    """
    if len(runs) < 2:
        raise ConfigError("compare needs at least two runs (e.g. `tailscope compare latest:main latest`)")
    if not 0.5 < confidence < 1.0:
        raise ConfigError(f"--confidence must be between 0.5 and 1 (got {confidence})")
    if resamples < 100:
        raise ConfigError(f"--resamples must be ≥ 100 (got {resamples})")
    pcts = percentiles.split(",") if isinstance(percentiles, str) else list(percentiles)
    try:
        names = parse_metrics(metrics if metrics is None or isinstance(metrics, str) else ",".join(metrics))
        stats = tuple(canonical_percentile(p.strip()) for p in pcts if p.strip())
    except ValueError as exc:
        raise ConfigError(f"--metrics/--percentiles: {exc}") from None
    if gpu_price is not None and gpu_price <= 0:
        raise ConfigError(f"--gpu-price must be > 0 USD per GPU-hour (got {gpu_price:g})")
    data = [load_run(ref, store=store) for ref in runs]
    result = compare_runs(
        data,
        metrics=names,
        stats=stats,
        confidence=confidence,
        resamples=resamples,
        rng=np.random.default_rng(seed),
    )
    if gpu_price is None:
        return result
    return replace(result, usd_per_million_output_tokens=_run_costs(data, result, gpu_price, gpus))


def _run_costs(
    data: Sequence[RunData], result: ComparisonResult, gpu_price: float, gpus: int | None
) -> tuple[float | None, ...]:
    """USD per 1M output tokens per run: GPUs × price ÷ 3600 ÷ output tokens/s × 10⁶ (None when unknown)."""
    from tailscope.api.cost import run_gpus

    try:
        rates: Sequence[float | None] = result.row("output_tokens_per_s").values
    except KeyError:
        rates = [(d.summary or {}).get("output_tokens_per_s") for d in data]
    out: list[float | None] = []
    for d, rate in zip(data, rates, strict=True):
        n = run_gpus(d, gpus)
        out.append(None if n is None or not rate else n * gpu_price / 3600.0 / float(rate) * 1e6)
    return tuple(out)


@public
def diagnose(
    run: RunRef = "latest",
    *,
    traces: Any = None,
    baseline: RunRef | None = None,
    store: StorePath | RunStore | None = None,
) -> Diagnosis:
    """Turn a run's numbers into findings — symptom, evidence, likely cause, next actions — highest impact first,
    and walk the method's troubleshooting trees on it.

    Rules: saturation, prefill-bound TTFT, prefix-cache misses, KV pressure, prefill interference, long-output tails,
    stalls, client bottleneck, rate limiting and error bursts, cold start; with ``traces``, engineering layers,
    waterfalls and retries on the critical path.

    Trees (``diagnosis.trees``, :mod:`tailscope.verify.trees`): TTFT high, TPOT high, stuttering, OOM under
    concurrency, P99 ≫ P50, throughput ceiling, smaller model slower, cost spike — each branch with a verdict
    (``yes``/``no``/``unknown``) from the run's records, server metrics and GPU telemetry (``bench --telemetry-url``).

    Args:
        run: the run (a result, a store reference or an export path).
        traces: a trace set name, a ``tailscope trace analyze --json`` file, or an analysis (a dict, or a result
            with ``to_dict()``), for the critical-path rules.
        baseline: a run to compare with for the "smaller model slower" and "cost spike" trees.
        store: where references are looked up (only read).

    Returns:
        ``diagnosis.findings`` (each with ``rule``, ``title``, ``evidence``, ``cause``, ``actions``, ``impact``),
        ``diagnosis.trees`` / ``diagnosis.symptoms`` and ``diagnosis.to_dict()`` (``tailscope diagnose --json``).
    """
    from tailscope.verify.findings import build_view
    from tailscope.verify.trees import walk_trees

    data = load_run(run, store=store)
    trace = _trace_analysis(traces, store) if traces is not None else None
    found = run_rules(data.records, data.samples, trace=trace, settings=data.settings)
    view = build_view(data.records, data.samples, trace=trace, settings=data.settings)
    base = load_run(baseline, store=store) if baseline is not None else None
    trees = walk_trees(
        view,
        gpu=(data.summary or {}).get("gpu") if data.summary else None,
        model=_model_of(data),
        baseline=build_view(base.records, base.samples, settings=base.settings) if base is not None else None,
        baseline_model=_model_of(base) if base is not None else None,
        summary=data.summary,
    )
    return Diagnosis(data.id, tuple(found), trees=trees)


def _model_of(data: RunData) -> str | None:
    target = data.run.get("target") if isinstance(data.run, Mapping) else None
    model = target.get("model") if isinstance(target, Mapping) else None
    return str(model) if model else None


@public
def alerts(
    contract: ContractRef | None = None,
    *,
    for_: str = "5m",
    window: str = "5m",
    selector: str = "",
    queue_limit: float = 0.0,
    kv_limit: float = KV_USAGE_LIMIT,
    golden: bool = False,
    layer_metrics: Mapping[str, str] | Sequence[str] = (),
    oom_metric: str = "llm_out_of_memory_errors_total",
) -> AlertRules:
    """Prometheus recording and alerting rules (and a Grafana dashboard) from a contract, and/or the method's five
    golden alerts.

    P99 TTFT/E2E from the engine's histograms, the error ratio, queue waiting, KV usage, preemptions and
    engine-down — each with ``for:`` (the SLO's own ``for:``, else ``for_``), a severity label (the SLO's
    ``severity:``, else critical/warning) and a runbook annotation holding the diagnosis checklist.

    Args:
        contract: a contract file, a dict of the same shape or a parsed Contract (optional with ``golden``).
        for_: how long a condition must hold before an alert fires (a Prometheus duration: ``5m``), for SLOs that do
            not say their own.
        window: the rate window of quantiles and ratios.
        selector: label matchers added to every engine metric (``job="vllm"``).
        queue_limit: the backlog alert fires when the queue stayed above this all window.
        kv_limit: KV-cache usage (0–1) that counts as near full.
        golden: add the method's five golden alerts (LLM P99 > 1.2 s for 2m, vector search P99.9 > 200 ms for 1m,
            OOM errors > 0 within 5m, unavailable ratio > 1 % for 30s, prompt rejection > 5 % for 1m), each with its
            root-cause checklist as the runbook. Without a contract, the rule file holds only these.
        layer_metrics: ``{"retrieval": "vector_search_duration_seconds"}`` or ``["retrieval=HISTOGRAM", …]``: the
            histogram of a layer's durations; the contract's SLOs on that layer become alerts on it.
        oom_metric: the counter of out-of-memory errors the golden OOM alert reads.

    Returns:
        ``rules.to_yaml()`` (the rule file), ``rules.alert_names``, ``rules.skipped`` (every SLO that could not become
        a rule, with the reason) and ``rules.grafana`` (the dashboard JSON).

    Raises:
        ConfigError: an option Prometheus would reject (checked before the contract is read), or neither a contract
            nor ``golden``.
    """
    pairs: list[tuple[str, str]] = []
    items = (
        layer_metrics.items() if isinstance(layer_metrics, Mapping) else [t.partition("=")[::2] for t in layer_metrics]
    )
    for layer, metric in items:
        if not layer.strip() or not metric.strip():
            raise ConfigError(
                f"--layer-metric {layer}={metric}: expected LAYER=HISTOGRAM, "
                "e.g. retrieval=vector_search_duration_seconds"
            )
        pairs.append((layer.strip(), metric.strip()))
    opts = AlertOptions(
        for_=for_,
        window=window,
        selector=selector,
        queue_limit=queue_limit,
        kv_limit=kv_limit,
        layer_metrics=tuple(pairs),
        oom_metric=oom_metric,
    )
    check_options(opts)
    if contract is None:
        if not golden:
            raise ConfigError("give a contract file, or --golden for the method's five golden alerts")
        rules = golden_rules(opts)
        return replace(rules, grafana=dashboard(Contract(name="golden")))
    spec = as_contract(contract)
    return replace(alert_rules(spec, opts, golden=golden), grafana=dashboard(spec))
