"""``tailscope sim`` end to end: resolve the deployment and the workload, simulate, store, summarize.

The deployment is resolved here (:func:`build_cluster`), the request stream in ``sim/workload.py``.

Used by the CLI (which only parses and renders) and by tests. The run is stored like a bench run (kind ``sim``),
so ``runs show``, compare and gates work on it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailscope import __version__
from tailscope.clock import utc_now_iso
from tailscope.engine.calibration import BUILTIN
from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.desync import DEFAULT as DESYNC
from tailscope.engine.desync import OFF
from tailscope.engine.engine_config import EngineSettings
from tailscope.engine.gpus import GpuSpec, resolve_gpu
from tailscope.io.models import resolve_model
from tailscope.metrics.chunk_times import ChunkTimes, flatten
from tailscope.metrics.summary import RunSummary
from tailscope.records import RequestRecord, Run, RunKind, RunStatus, ServerSample, Target
from tailscope.sim.simulator import SimResult, Simulation
from tailscope.sim.workload import Workload, resolve_specs
from tailscope.workload.spec import RequestSpec

if TYPE_CHECKING:
    from tailscope.store.runs import RunStore

#: records written to the store per batch (the simulation itself streams)
_BATCH = 20_000
#: up to this many records, the last insert, the summary and finishing the run hold one DuckDB instance (as bench's
#: ``runner.persist.HOLD_MAX_RECORDS``): a longer run's summary would keep other processes waiting for the store
_HOLD_MAX_RECORDS = 10_000


@dataclass(frozen=True, slots=True)
class SimArgs(EngineSettings):
    """Everything ``tailscope sim`` accepts (CLI > profile file > defaults is applied in :func:`resolve_specs`): the
    :class:`~tailscope.engine.engine_config.EngineSettings` that ``tailscope serve`` shares (``tp``, dtypes,
    scheduler limits, ``calibration``, ``gpu_file``, ``backend``, ``ep``, KV offload, speculative decoding) and the
    fields below."""

    model: str = "llama-3.1-8b"
    gpu: str = "h100-sxm"
    replicas: int = 1
    attention_dp: int = 1
    prefix_caching: bool = True
    router: str = "least_outstanding"
    autoscale: Path | None = None
    profile: Path | None = None
    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    requests: int | None = None
    duration: float | None = None
    input_tokens: str = "256"
    output_tokens: str = "128"
    warmup: int = 0
    seed: int = 0
    slo: tuple[str, ...] = ()
    disagg: str | None = None
    from_traces: str | None = None
    traces_db: Path | None = None
    time_scale: float = 1.0
    db: Path | None = None
    store: bool = True
    desync: bool = True
    stagger: float | None = None
    explicit: frozenset[str] = field(default_factory=frozenset)


@dataclass(slots=True)
class SimOutcome:
    """A finished simulation: the run row, its summary dict, records and simulator figures, the typed summary and
    the timeline as server samples."""

    run: Run
    summary: dict[str, Any]
    records: list[RequestRecord]
    result: SimResult
    run_summary: RunSummary | None = None
    samples: list[ServerSample] = field(default_factory=list)
    sessions: dict[str, Any] | None = None  # session metrics (``summary["sessions"]``), as bench reports them
    chunk_times: ChunkTimes | None = None  # the records' chunk times flattened (None for hand-made times)


def build_cluster(a: SimArgs) -> ClusterSpec:
    """The deployment from the flags (:meth:`ClusterSpec.from_settings`, as ``tailscope serve`` builds its replica).
    Raises ConfigError/CatalogError naming the flag, PlanError when the model does not fit."""
    a.check_dtypes()  # before any file is read
    # the file readers (YAML, pydantic) are imported only when a file is given: start-up is part of a run's time
    extra: tuple[GpuSpec, ...] = ()
    if a.gpu_file is not None:
        from tailscope.io.gpus import load_gpu_file

        extra = load_gpu_file(a.gpu_file)
    gpu = resolve_gpu(a.gpu, extra)
    model = resolve_model(a.model)
    calibration = BUILTIN
    if a.calibration is not None:
        from tailscope.io.calibration import load_calibration

        calibration = load_calibration(a.calibration)
    policy = None
    if a.autoscale is not None:
        from tailscope.io.autoscaler import load_policy  # pydantic: imported only when a policy is given

        policy = load_policy(a.autoscale)
    disagg = None
    if a.disagg is not None:
        from tailscope.engine.disagg import parse_disagg

        disagg = parse_disagg(a.disagg)
    return ClusterSpec.from_settings(
        a,
        model,
        gpu,
        calibration,
        model_id=a.model,
        prefix_caching=a.prefix_caching,
        replicas=a.replicas * a.attention_dp,  # each attention-DP rank schedules its own requests
        router=a.router,
        autoscale=policy,
        attention_dp=a.attention_dp,
        draft_model=resolve_model(a.spec_draft_model) if a.spec_draft_model and a.spec_draft else None,
        disagg=disagg,
    )


#: timeline column → the vLLM metric name it stands for (so dashboards treat sim runs like scraped ones)
_TIMELINE_METRICS = (
    ("running", "vllm:num_requests_running"),
    ("waiting", "vllm:num_requests_waiting"),
    ("kv_usage", "vllm:kv_cache_usage_perc"),
    ("replicas_ready", "tailscope:replicas_ready"),
    ("replicas_pending", "tailscope:replicas_pending"),
    ("ttft_p99_ms", "tailscope:ttft_p99_ms"),
)


def timeline_samples(timeline: list[dict[str, Any]]) -> list[ServerSample]:
    """The simulator's 10-second timeline as server samples (summed over replicas; KV usage is their mean)."""
    out: list[ServerSample] = []
    for row in timeline:
        t_ns = int(row["t_s"] * 1e9)
        for key, name in _TIMELINE_METRICS:
            v = row.get(key)
            if v is not None:
                out.append(ServerSample(t_ns=t_ns, name=name, value=float(v)))
    return out


def new_run_id() -> str:
    """Sortable, unique run id: ``YYYYmmdd-HHMMSS-xxxxxx`` (the same form as bench runs)."""
    # os.urandom is what secrets.token_hex reads; importing secrets (hmac, base64, …) costs ~7–14 ms of start-up
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()


def run_sim(
    a: SimArgs,
    *,
    on_progress: Any = None,
    store: RunStore | None = None,
    amend_summary: Callable[[RunSummary | None, dict[str, Any]], None] | None = None,
) -> SimOutcome:
    """Simulate and store the run in ``store`` (or, without one, in ``a.db`` unless ``a.store`` is False).

    Args:
        on_progress: optional callable ``(records_done, virtual_seconds)`` called every few thousand records.
        store: the store to write the run to.
        amend_summary: called with the typed summary and the summary dict of a completed simulation before the run
            is finished in the store, to add to the dict (``simulate`` adds the prediction interval): one write of
            the run's row, not two.
    """
    from tailscope.metrics.summary import summarize

    cluster = build_cluster(a)
    wl = resolve_specs(a)
    desc = cluster.describe()
    dp = cluster.attention_dp
    if cluster.disagg is not None:
        shape, where = f"disaggregated {cluster.disagg.label()}", f"/{cluster.disagg.label()}"
    elif dp > 1:  # cluster.replicas counts the ranks (one simulated replica each); a replica has tp × dp GPUs
        shape = f"{cluster.replicas // dp} replica(s) × {dp} attention-DP ranks of TP{cluster.tp}"
        where = f"x{cluster.tp * dp}/dp{dp}"
    else:
        shape, where = f"{cluster.replicas} replica(s) × TP{cluster.tp}", f"x{cluster.tp}"
    target = Target(
        url=f"sim://{desc['model']}@{desc['gpu']}{where}",
        model=str(desc["model"]),
        builtin=True,
        description=f"{desc['model']} ({desc['weights_dtype']}), {shape} on {cluster.gpu.name}",
    )
    run = Run(
        id=new_run_id(),
        kind=RunKind.SIM,
        tool_version=__version__,
        started_at=utc_now_iso(),
        target=target,
        seed=a.seed,
        settings={"engine": desc, "load": wl.settings, "slo": [f"{s.key}={s.threshold_ms:g}ms" for s in wl.slos]},
        profile=wl.profile,
    )
    if store is None and a.store:
        from tailscope.store.runs import RunStore

        store = RunStore(a.db)
    if store is not None:
        store.create_run(run)
    specs = wl.specs
    twin = cluster.calibration.twin
    if twin is not None and (twin.facts.prompt_scale != 1.0 or twin.facts.prompt_offset != 0.0):
        specs = _server_prompts(specs, twin.facts.server_prompt_tokens)
    sim = Simulation(
        cluster,
        specs,
        concurrency=wl.concurrency,
        duration_s=wl.duration_s,
        ramp_s=a.stagger,
        desync=DESYNC if a.desync else OFF,
    )
    records: list[RequestRecord] = []
    batch: list[RequestRecord] = []
    # each batch's chunk times flattened once, for its insert, the summary and the export (a simulation's records
    # are plain ints: flatten() gives None only for hand-made times, and then every reader flattens its own way)
    flats: list[ChunkTimes | None] = []
    status = RunStatus.INCOMPLETE
    tail = contextlib.ExitStack()
    try:
        for rec in sim.run():
            records.append(rec)
            batch.append(rec)
            if len(batch) >= _BATCH:
                flats.append(flatten(batch))
                if store is not None:
                    store.write_records_bulk(run.id, batch, chunk_times=flats[-1])
                batch = []
                if on_progress is not None:
                    on_progress(len(records), rec.end_ns / 1e9 if rec.end_ns else 0.0)
        samples = timeline_samples(sim.result.timeline)
        if batch:
            flats.append(flatten(batch))
        if store is not None and len(records) <= _HOLD_MAX_RECORDS:
            # the last insert and finishing the run share one DuckDB instance (one open and one checkpoint fewer,
            # ≈ 30–50 ms); a long run's summary would keep other processes waiting for the store too long
            tail.enter_context(store.db.held())
        if store is not None and (batch or samples):
            # one columnar insert each, one transaction
            store.write_records_bulk(run.id, batch, samples, chunk_times=flats[-1] if batch else None)
        status = RunStatus.COMPLETE
    finally:
        with tail:
            chunk_times = _joined(flats, len(records))
            typed = summarize(records, slos=wl.slos, chunk_times=chunk_times) if records else None
            extra = (*wl.warnings, *_saturation(records, wl), *_waves(typed, records, sim.result.clients))
            if typed is not None and extra:
                typed = replace(typed, warnings=(*extra, *typed.warnings))
            summary = typed.to_dict() if typed is not None else {}
            sessions = _sessions(records, sim, wl)
            if sessions is not None:
                summary["sessions"] = sessions
            summary["sim"] = sim.result.to_dict()
            if amend_summary is not None and status is RunStatus.COMPLETE:
                amend_summary(typed, summary)
            if store is not None:
                store.finish_run(run.id, status, summary)
    return SimOutcome(replace(run, status=status), summary, records, sim.result, typed, samples, sessions, chunk_times)


def _joined(flats: list[ChunkTimes | None], n: int) -> ChunkTimes | None:
    """The batches' chunk times as one, when every batch of the ``n`` records was flattened (else None)."""
    parts = [f for f in flats if f is not None]
    if not parts or len(parts) != len(flats) or sum(len(p.lengths) for p in parts) != n:
        return None
    return ChunkTimes.concat(parts)


def _sessions(records: list[RequestRecord], sim: Simulation, wl: Workload) -> dict[str, Any] | None:
    """Session metrics as bench reports them: sessions judged whole (agent call graphs against the calls planned
    when they started, trace → load against the set's calls, with each agent step's time)."""
    if not any(r.session_id is not None for r in records):
        return None
    from tailscope.metrics.sessions import session_summary

    planned = (wl.settings.get("trace_load") or {}).get("planned") or sim.planned or None
    return session_summary(records, planned, sim.step_names or None)


def _saturation(records: list[RequestRecord], wl: Workload) -> tuple[str, ...]:
    """The over-saturation check bench runs, on the simulated records of an open loop at one constant rate."""
    from tailscope.metrics.saturation import saturation_check

    constant = wl.concurrency is None and wl.settings.get("rate") is not None
    return saturation_check(records, None, open_loop=wl.concurrency is None, constant_rate=constant)


def _waves(summary: RunSummary | None, records: list[RequestRecord], clients: int) -> tuple[str, ...]:
    """What a closed loop of fixed lengths whose TTFT kept rising did (the summary's NON-STATIONARY says only that it
    did): its simulated clients bunched into waves of prefills (docs/engine.md, *Closed loops and desynchronising
    noise*). Nothing for an open loop, lengths with a spread, or a stationary run."""
    steady = summary.steady if summary is not None else None
    if not clients or steady is None or steady.stationary is not False or not (steady.ttft_drift or 0.0) > 0:
        return ()
    if len({(r.input_tokens, r.output_tokens) for r in records if r.ok}) != 1:
        return ()
    return (
        f"WAVES: a closed loop of fixed lengths, and its TTFT rose {steady.ttft_drift:+.0%} over the run — the "
        "simulated clients bunched into waves of prefills (requests prefilled together finish together, and a long "
        "prefill step gathers every request that returns during it). Measured loops of fixed lengths bunched less on "
        "four of the five short-output corpus rows compared, so this TTFT likely overstates a real one; lengths "
        "with a spread (e.g. --output-tokens uniform:102:128) show the loop without the waves (docs/engine.md, "
        "Closed loops and desynchronising noise).",
    )


def _server_prompts(specs: Iterator[RequestSpec], count: Callable[[int], int]) -> Iterator[RequestSpec]:
    """The request stream with prompt lengths as the twin's server counts them (its tokenizer and chat template
    turn N synthesized tokens into ``count(N)``); shared prefixes scale the same way."""
    from dataclasses import replace as _replace

    for s in specs:
        prefix = count(s.prefix_tokens) if s.prefix_tokens else 0
        yield _replace(s, input_tokens=max(count(s.input_tokens), prefix), prefix_tokens=prefix)
