"""Measure: :func:`bench` (one run), :func:`sweep` (several loads) and :func:`find_max` (the highest rate that meets
the SLOs), each with an ``async`` twin.

Nothing is written unless ``store=`` is given, and no signal handler is installed unless ``handle_signals=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from tailscope.api._support import StorePath, open_store, public, sync_twin
from tailscope.errors import ConfigError
from tailscope.metrics.slo import Slo
from tailscope.metrics.verdict import DEFAULT_MAX_ERROR_RATE, Verdict, run_verdict
from tailscope.records import Target
from tailscope.runner.base_config import Resolved
from tailscope.runner.bench import run_bench
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.options import BenchOptions, PathLike
from tailscope.runner.progress import Progress
from tailscope.runner.resolve import resolve
from tailscope.store.runs import RunStore
from tailscope.workload.spec import RequestSpec
from tailscope.workload.sweep import parse_sweep

if TYPE_CHECKING:  # tailscope.verify loads the whole verify package (yaml, …): only repeated benches need it
    from tailscope.metrics.summary import RunSummary  # numpy: summaries come after the run
    from tailscope.runner.bench_result import BenchResult
    from tailscope.runner.sweep_run import FindMaxOutcome, SweepOutcome
    from tailscope.verify.precision import Precision, PrecisionTarget

#: ``watch=``: called with a run's live counters; the context it returns is entered around the run (a display)
Watch = Callable[[Progress], AbstractContextManager[Any]]


def _options_from(given: BenchOptions | None, values: dict[str, Any]) -> BenchOptions:
    """``options=`` or the keyword options, not both."""
    kw = BenchOptions(**{f.name: values[f.name] for f in fields(BenchOptions)})
    if given is None:
        return kw
    if kw != BenchOptions():
        changed = sorted(f.name for f in fields(BenchOptions) if getattr(kw, f.name) != getattr(BenchOptions(), f.name))
        raise ConfigError(f"give options= or keyword options, not both (also given: {', '.join(changed)})")
    return given


async def _run_one(
    resolved: Resolved,
    options: BenchOptions,
    store: RunStore | None,
    *,
    handle_signals: bool,
    watch: Watch | None,
    on_target: Callable[[Target], None] | None,
    progress: Progress | None = None,
) -> BenchResult:
    cfg = replace(resolved.config, handle_signals=handle_signals)
    live = resolved.progress
    if progress is not None:  # the caller's counters, with the resolved bounds
        progress.total, progress.duration_s = live.total, live.duration_s
        live = progress
    workers = options.workers
    if workers == "auto":
        from tailscope.runner.workers.auto import plan_workers

        plan = plan_workers(cfg)
        workers = plan.workers if plan.workers > 1 or options.ray is not None else None
        cfg = replace(cfg, settings={**cfg.settings, "workers_auto": plan.describe()})
    with watch(live) if watch is not None else nullcontext():
        if workers is not None or options.ray is not None:
            from tailscope.runner.workers.driver import check_worker_flags, run_bench_distributed

            n = check_worker_flags(workers if isinstance(workers, int) else None, options.ray)
            return await run_bench_distributed(
                cfg, resolved.specs, workers=n, ray_address=options.ray, store=store, progress=live,
                on_target=on_target,
            )  # fmt: skip
        return await run_bench(cfg, resolved.specs, store=store, progress=live, on_target=on_target)


@public
async def bench_async(
    url: str | None = None,
    *,
    options: BenchOptions | None = None,
    model: str | None = None,
    endpoint: str | None = None,
    profile: PathLike | None = None,
    replay: PathLike | None = None,
    replay_format: str = "auto",
    time_scale: float = 1.0,
    replay_prefix_tokens: int = 0,
    concurrency: int | None = None,
    stagger: float | None = None,
    rate: float | None = None,
    arrival: str | None = None,
    burstiness: float | None = None,
    requests: int | None = None,
    duration: float | None = None,
    warmup: int | None = None,
    input_tokens: str | int | None = None,
    output_tokens: str | int | None = None,
    seed: int | None = None,
    slo: Sequence[str | Slo] = (),
    tokenizer: PathLike | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    ignore_eos: bool = True,
    continuous_usage: bool = True,
    timeout_connect: float = 10.0,
    timeout_first_token: float = 120.0,
    timeout_total: float = 600.0,
    metrics_url: str = "auto",
    scrape_interval: float = 1.0,
    max_rate: float | None = None,
    workers: int | str | None = None,
    ray: str | None = None,
    builtin_model: str = "llama-3.1-8b",
    builtin_gpu: str = "h100-sxm",
    http_client: str = "raw",
    arrival_stamp: str = "auto",
    dataset: str | None = None,
    dataset_turns: str = "first",
    dataset_sample: str = "random",
    dataset_min_input: int | None = None,
    dataset_max_input: int | None = None,
    same_prompts: bool = False,
    extra_body: Mapping[str, Any] | str | None = None,
    headers: Sequence[str] = (),
    request_template: PathLike | None = None,
    trace_context: str | float | bool = "off",
    tracestate: str | None = None,
    telemetry_url: str | Sequence[str] = (),
    from_traces: str | None = None,
    traces_db: PathLike | None = None,
    preopen_connections: int | None = None,
    warm_connections: bool = False,
    stream_records: bool = False,
    otlp_endpoint: str | None = None,
    otlp_protocol: str = "protobuf",
    store: StorePath | RunStore | None = None,
    handle_signals: bool = False,
    progress: Progress | None = None,
    watch: Watch | None = None,
    on_target: Callable[[Target], None] | None = None,
) -> BenchResult:
    """Load-test an OpenAI-compatible endpoint — or the built-in engine when ``url`` is None — and summarize.

    The options are those of :class:`~tailscope.runner.options.BenchOptions` (documented there; the same as the
    flags of ``tailscope bench``); pass them as keywords or as one ``options=BenchOptions(...)``.

    Args:
        store: a DuckDB store path or :class:`~tailscope.store.runs.RunStore` to keep the run in; None (default)
            writes nothing.
        handle_signals: stop gracefully on SIGINT/SIGTERM (keeping what completed) instead of raising.
        progress: live counters the caller reads while the run goes (e.g. from another thread).
        watch: called with the live counters; the context manager it returns is entered around the run.
        on_target: called once the target is known (the built-in engine's address, the served model).

    Returns:
        The run: ``result.summary`` (a typed :class:`~tailscope.metrics.summary.RunSummary`), ``result.records``,
        ``result.run`` and ``result.to_json()`` (the document ``tailscope bench --json`` writes).

    Raises:
        ConfigError: bad options (before any load is sent). TargetError: the target cannot be reached.
    """
    opts = _options_from(options, locals())
    if opts.from_traces is not None and opts.traces_db is None and store is not None:
        runs_store = open_store(store)
        opts = replace(opts, traces_db=None if runs_store is None else runs_store.db.path)
    resolved = resolve(opts)
    return await _run_one(
        resolved,
        opts,
        open_store(store),
        handle_signals=handle_signals,
        watch=watch,
        on_target=on_target,
        progress=progress,
    )


bench = sync_twin(bench_async)


def _point(options: BenchOptions, param: str, value: float) -> BenchOptions:
    """The options of one point: ``concurrency`` or ``rate`` set (the other one cleared)."""
    if param == "concurrency":
        return replace(options, concurrency=round(value), rate=None)
    return replace(options, rate=value, concurrency=None)


def _runner(
    options: BenchOptions, store: RunStore | None, handle_signals: bool, watch: Watch | None, on_target: Any
) -> tuple[Callable[[str, float], tuple[BenchConfig, Iterator[RequestSpec], Progress]], Any]:
    from tailscope.api._support import run_sync

    if options.workers is not None or options.ray is not None:
        raise ConfigError("sweeps and capacity searches run in one process: drop --workers/--ray")

    def build(param: str, value: float) -> tuple[BenchConfig, Iterator[RequestSpec], Progress]:
        r = resolve(_point(options, param, value))
        return r.config, r.specs, r.progress

    def execute(cfg: BenchConfig, specs: Iterator[RequestSpec], progress: Progress) -> BenchResult:
        resolved = Resolved(cfg, specs, progress)
        return run_sync(
            _run_one(resolved, options, store, handle_signals=handle_signals, watch=watch, on_target=on_target)
        )

    return build, execute


@public
def sweep(
    points: str,
    options: BenchOptions | None = None,
    *,
    store: StorePath | RunStore | None = None,
    handle_signals: bool = False,
    watch: Watch | None = None,
    on_target: Callable[[Target], None] | None = None,
) -> SweepOutcome:
    """Run one bench per load point and find the knee (the last load before latency grows faster than throughput).

    Args:
        points: ``concurrency=1,2,4,8`` or ``rate=1:20:8`` (START:STOP:POINTS).
        options: the bench options of every point (the swept one is set per point).

    Returns:
        The points (each a :class:`~tailscope.runner.bench_result.BenchResult`), linked by a sweep id, and the knee.
        A point in which the target answered none of its requests ends the sweep (``stopped`` says why).
    """
    options = options or BenchOptions()
    spec = parse_sweep(points)
    build, execute = _runner(options, open_store(store), handle_signals, watch, on_target)
    build(spec.param, spec.values[0])  # bad options fail before any load
    from tailscope.runner.sweep_run import run_sweep

    return run_sweep(spec, build, execute)


@public
def find_max(
    options: BenchOptions | None = None,
    *,
    tolerance: float = 0.05,
    store: StorePath | RunStore | None = None,
    handle_signals: bool = False,
    watch: Watch | None = None,
    on_target: Callable[[Target], None] | None = None,
) -> FindMaxOutcome:
    """Search the highest open-loop rate whose bounded run meets every SLO (bracket, then bisection). A probe in
    which the target answered none of its requests ends the search without an answer (``stopped`` says why).

    Args:
        options: the bench options of every probe (``rate`` is the start rate, default 1/s; ``max_rate`` the
            ceiling, default 10,000/s; SLOs from ``slo`` or the profile).
        tolerance: stop when the bracket is within this fraction.
    """
    options = options or BenchOptions()
    if options.concurrency is not None:
        raise ConfigError("--find-max searches open-loop rates; drop --concurrency (--rate sets the start rate)")
    if not tolerance > 0:
        raise ConfigError(f"--find-max-tolerance must be > 0 (got {tolerance})")
    start = options.rate if options.rate is not None else 1.0
    build, execute = _runner(options, open_store(store), handle_signals, watch, on_target)
    cfg, _specs, _progress = build("rate", start)
    if not cfg.slos:
        raise ConfigError("--find-max needs an SLO to search against: --slo ttft_p99=1.5s (or slo: in the profile)")
    max_rate = options.max_rate if options.max_rate is not None else 10_000.0
    from tailscope.runner.sweep_run import run_find_max

    return run_find_max(build, execute, start=start, max_rate=max_rate, rel_tol=tolerance)


@dataclass(frozen=True, slots=True)
class RepeatedBench:
    """The same bench run several times (``--repeat``/``--until-precise``).

    Attributes:
        runs: every run, each complete on its own (and stored when a store was given).
        pooled: the summary of all runs' records together: latency percentiles over every sample (rates in it are
            not meaningful across runs; see ``across``).
        across: per figure, the median, min and max over the runs (:func:`tailscope.verify.precision.across_runs`).
        precision: the ``until_precise`` target's estimate and 95 % interval over the pooled samples, when asked.
        stopped: why the repetition ended: ``repeats`` (all done), ``precise`` (the target was met),
            ``max-repeats`` (it was not, within the limit) or ``interrupted``.
    """

    runs: tuple[BenchResult, ...]
    pooled: RunSummary
    across: dict[str, dict[str, float | None]]
    precision: Precision | None
    stopped: str

    def verdict(self, *, max_error_rate: float = DEFAULT_MAX_ERROR_RATE) -> Verdict:
        """The pooled run's verdict (SLOs over every sample, failures over every request); an ``until_precise``
        target not reached within the runs made fails it too."""
        pooled = run_verdict(self.pooled, max_error_rate=max_error_rate)
        if self.precision is None or self.precision.met:
            return pooled
        why = "interrupted" if self.stopped == "interrupted" else "--max-repeats"
        missed = f"{self.precision.target} not reached within {len(self.runs)} runs ({why})"
        return replace(pooled, passed=False, reasons=(*pooled.reasons, missed))

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [r.run.id for r in self.runs],
            "stopped": self.stopped,
            "across": self.across,
            "pooled": self.pooled.to_dict(),
            "precision": None if self.precision is None else self.precision.to_dict(),
        }

    def export(self) -> dict[str, Any]:
        """The ``bench --repeat --json`` document: the repetition, then each run and its summary."""
        from tailscope.metrics.document import clean_json

        doc: dict[str, Any] = clean_json({"repeat": self.to_dict(), "runs": [r.brief() for r in self.runs]})
        return doc


@public
def bench_repeat(
    options: BenchOptions | None = None,
    *,
    repeat: int | None = None,
    until_precise: str | PrecisionTarget | None = None,
    max_repeats: int = 10,
    store: StorePath | RunStore | None = None,
    handle_signals: bool = False,
    watch: Watch | None = None,
    on_target: Callable[[Target], None] | None = None,
) -> RepeatedBench:
    """Run the same bench ``repeat`` times, or until a percentile is known precisely enough.

    Every run has the same schedule, lengths and classes (the options' seed) and fresh prompt text, so caches are
    not flattered by the repetition.

    Args:
        repeat: how many runs (≥ 2); exclusive with ``until_precise``.
        until_precise: ``ttft_ms.p99=5%``: repeat until the 95 % bootstrap interval of that percentile over the
            pooled samples is within ±5 % of its estimate, at most ``max_repeats`` runs.
    """
    options = options or BenchOptions()
    from tailscope.verify.precision import across_runs, parse_precision, precision_of

    target = parse_precision(until_precise) if isinstance(until_precise, str) else until_precise
    if (repeat is None) == (target is None):
        raise ConfigError("give --repeat N or --until-precise METRIC.PCT=X%, one of them")
    if repeat is not None and not 2 <= repeat <= 1000:
        raise ConfigError(f"--repeat {repeat}: use 2 to 1000 runs")
    if not 1 <= max_repeats <= 1000:
        raise ConfigError(f"--max-repeats {max_repeats}: use 1 to 1000")
    limit = repeat if repeat is not None else max_repeats
    resolve(options)  # bad options fail before any load
    opened = open_store(store)
    runs: list[BenchResult] = []
    precision: Precision | None = None
    stopped = "repeats" if repeat is not None else "max-repeats"
    from tailscope.api._support import run_sync

    while len(runs) < limit:
        result = run_sync(
            _run_one(resolve(options), options, opened, handle_signals=handle_signals, watch=watch,
                     on_target=on_target)
        )  # fmt: skip
        runs.append(result)
        if result.signal_name:
            stopped = "interrupted"
            break
        if target is not None:
            precision = precision_of([r for run in runs for r in run.records], target)
            if precision.met:
                stopped = "precise"
                break
    records = [r for run in runs for r in run.records]
    from tailscope.metrics.summary import summarize

    pooled = summarize(records, slos=tuple(x.slo for x in runs[0].summary.slo))
    return RepeatedBench(tuple(runs), pooled, across_runs([r.summary_dict() for r in runs]), precision, stopped)
