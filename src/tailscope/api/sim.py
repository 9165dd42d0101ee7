"""Predict: :func:`simulate` — a deployment (model, GPU, parallelism, engine, replicas, autoscaler) under a workload,
in virtual time, no GPU needed. The result has the same typed summary as a bench run's, so gates, comparisons,
diagnoses and reports take either.

Every result carries a prediction interval. With a digital twin as ``calibration`` (``tailscope calibrate``'s
``twin.yaml``) the fitted costs replace the catalogs and the simulation is run at −1σ and +1σ of those costs too; the
interval is the range those give. Otherwise it is the 90 % interval of the step model's out-of-configuration residuals
on configurations like the one asked (:mod:`tailscope.engine.residuals`; ``prediction_interval_source`` names the
group). Nothing is written unless ``store=`` is given.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tailscope.api._support import PathLike, StorePath, open_store, optional_path, public
from tailscope.metrics.chunk_times import ChunkTimes
from tailscope.metrics.document import build_export, export_chunks
from tailscope.metrics.slo import Slo
from tailscope.metrics.summary import RunSummary, summarize
from tailscope.records import RequestRecord, Run, RunStatus, ServerSample
from tailscope.sim.result import SimResult as SimFigures
from tailscope.sim.run import SimArgs, SimOutcome, run_sim
from tailscope.store.runs import RunStore

#: ``progress=``: called with (requests simulated, virtual seconds) every few thousand requests
SimProgress = Callable[[int, float], None]


@dataclass(frozen=True, slots=True)
class SimResult:
    """A finished simulation.

    Attributes:
        run: the run's metadata (kind ``sim``; its target names the deployment).
        summary: the typed :class:`~tailscope.RunSummary` (``summary.ttft_ms.p99``, ``summary.requests.completed``),
            as for a bench run.
        records: every request, with virtual timings in ns since the run start.
        sim: the simulator's own figures: virtual and wall seconds, engine steps, preemptions, prefix-cache hit rate,
            GPU-seconds paid for, the 10-second timeline and the autoscaler's decisions.
        samples: the timeline as server samples (running, waiting, KV usage, replicas), as a scrape would give them.
        prediction_interval: ``{metric: {percentile: (low, high)}}`` in ms: with a digital twin, over the
            simulations at −1σ, fit and +1σ of the twin's costs; else the 90 % interval from the step model's
            residuals on like configurations (None when there is no such group, or no completed request).
        prediction_interval_source: where the interval comes from: ``{"kind": "twin"}`` or ``{"kind":
            "residuals", "label": ..., "group": {engine, gpu, family, mode}, "rows": ..., "configurations": ...,
            "confidence": 0.9}``.
        store_path: the store the run was written to, or None (nothing was written).
        sessions: session metrics (``summary["sessions"]``: duration, steps, time per step and per agent step) when
            the workload has sessions, as a bench run reports them; else None.
    """

    run: Run
    summary: RunSummary
    records: list[RequestRecord]
    sim: SimFigures
    samples: list[ServerSample] = field(default_factory=list)
    prediction_interval: dict[str, dict[str, tuple[float, float]]] | None = None
    store_path: str | None = None
    prediction_interval_source: dict[str, Any] | None = None
    sessions: dict[str, Any] | None = None
    #: ``records``' chunk times flattened once by the simulation (what the export reads; not part of the API)
    _chunk_times: ChunkTimes | None = field(default=None, repr=False, compare=False)

    @property
    def status(self) -> RunStatus:
        return self.run.status

    def summary_dict(self) -> dict[str, Any]:
        """The ``summary`` object of the export and of the store: the summary, ``sim`` and ``prediction_interval``."""
        doc = self.summary.to_dict() if self.records else {}
        if self.sessions is not None:
            doc["sessions"] = self.sessions
        doc["sim"] = self.sim.to_dict()
        if self.prediction_interval is not None:
            doc["prediction_interval"] = self.prediction_interval
            if self.prediction_interval_source is not None:
                doc["prediction_interval_source"] = self.prediction_interval_source
        return doc

    def to_dict(self) -> dict[str, Any]:
        """The export document (``run``, ``summary``, ``requests``), as ``tailscope sim --json`` writes it."""
        return build_export(self.run, self.summary_dict(), self.records)

    def export_chunks(self) -> Iterator[bytes]:
        """The export document as compact JSON in chunks (the same values as :meth:`to_dict`, streamed with orjson:
        what ``tailscope sim --json`` writes)."""
        return export_chunks(self.run, self.summary_dict(), self.records, self._chunk_times)

    def to_json(self, *, indent: int | None = 1) -> str:
        """The export document as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)


def sim_result(
    out: SimOutcome, *, interval: Any = None, store: RunStore | None = None, source: dict[str, Any] | None = None
) -> SimResult:
    """The public result of a finished :func:`tailscope.sim.run.run_sim`."""
    return SimResult(
        run=out.run,
        summary=out.run_summary if out.run_summary is not None else summarize([]),
        records=out.records,
        sim=out.result,
        samples=out.samples,
        prediction_interval=interval,
        store_path=str(store.db.path) if store is not None else None,
        prediction_interval_source=source,
        sessions=out.sessions,
        _chunk_times=out.chunk_times,
    )


#: the latency figures an interval is given for
_INTERVAL_FIGURES = (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"), ("e2e_ms", "e2e"))


def residual_interval(
    summary: RunSummary, *, engine: str, gpu: str, model: str, disaggregated: bool = False
) -> tuple[dict[str, dict[str, tuple[float, float]]] | None, dict[str, Any] | None]:
    """The 90 % interval of ``summary``'s latency figures from the step model's residuals on configurations like
    this one, and its source; ``(None, None)`` when no group of the residual table fits."""
    from tailscope.engine.gpus import resolve_gpu
    from tailscope.engine.residuals import interval, residual_group
    from tailscope.errors import TailscopeError

    try:
        gpu_id = resolve_gpu(gpu).id
    except TailscopeError:  # a GPU from a --gpu-file: the coarser groups still apply
        gpu_id = gpu
    group = residual_group(engine, gpu_id, model, "disagg" if disaggregated else "agg")
    if group is None or not summary.requests.completed:
        return None, None
    figures: dict[str, dict[str, float | None]] = {}
    for attr, name in _INTERVAL_FIGURES:
        st = getattr(summary, attr)
        figures[name] = {"p50": st.p50, "p90": st.p90, "p99": st.p99}
    rows = interval(figures, group)
    out = {f"{name}_ms": rows[name] for name in ("ttft", "tpot", "itl", "e2e") if name in rows}
    return out, {"kind": "residuals", **group.to_dict()}


#: the options a profile's fields can be overridden by
_PROFILE_OPTIONS = (
    "model", "gpu", "tp", "replicas", "ep", "attention_dp", "weights_dtype", "kv_dtype", "max_num_seqs",
    "max_num_batched_tokens", "gpu_memory_utilization", "prefix_caching", "router", "concurrency", "rate",
    "arrival", "burstiness", "requests", "duration", "input_tokens", "output_tokens", "warmup", "seed", "slo",
)  # fmt: skip


def _twin_free(path: Path) -> bool:
    from tailscope.io.calibration import load_calibration  # YAML: imported only when a file is given

    return load_calibration(path).twin is None


@public
def simulate(
    *,
    model: str = "llama-3.1-8b",
    gpu: str = "h100-sxm",
    tp: int = 1,
    engine: str = "vllm",
    ep: int = 1,
    attention_dp: int = 1,
    replicas: int = 1,
    router: str = "least_outstanding",
    weights_dtype: str | None = None,
    kv_dtype: str = "bf16",
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    gpu_memory_utilization: float = 0.9,
    prefix_caching: bool = True,
    calibration: PathLike | None = None,
    gpu_file: PathLike | None = None,
    autoscale: PathLike | None = None,
    profile: PathLike | None = None,
    concurrency: int | None = None,
    rate: float | None = None,
    arrival: str = "poisson",
    burstiness: float = 1.0,
    requests: int | None = None,
    duration: float | None = None,
    input_tokens: str | int = "256",
    output_tokens: str | int = "128",
    warmup: int = 0,
    seed: int = 0,
    slo: Sequence[str | Slo] = (),
    disagg: str | None = None,
    spec_draft: int = 0,
    spec_accept: float = 0.7,
    spec_draft_model: str | None = None,
    kv_offload_gib: float = 0.0,
    batch_wait_iters: int = 0,
    batch_wait_ratio: float = 0.0,
    recv_interval: int = 1,
    dp_balance_iters: int | None = None,
    from_traces: str | None = None,
    traces_db: PathLike | None = None,
    time_scale: float = 1.0,
    closed_loop_noise: bool = True,
    stagger: float | None = None,
    store: StorePath | RunStore | None = None,
    progress: SimProgress | None = None,
    explicit: Collection[str] | None = None,
) -> SimResult:
    """Simulate a deployment under a workload in virtual time: TTFT/TPOT/ITL/E2E, throughput, KV cache, queueing.

    The options are those of ``tailscope sim`` (the same names as its flags; ``duration`` in virtual seconds).

    Args:
        model, gpu: catalog ids (``tailscope catalog models``/``gpus``); a ``config.json`` path for the model.
        tp, ep, attention_dp, replicas: tensor, expert and attention-data parallelism per replica, and replicas
            behind the ``router`` (``round_robin``, ``least_outstanding`` or ``prefix_affinity``).
        engine: the serving engine whose costs and defaults apply: ``vllm``, ``sglang`` or ``trtllm``.
        calibration: roofline efficiencies, or a digital twin (then the result has a ``prediction_interval``).
        gpu_file, autoscale: a YAML file of extra GPUs; an autoscaling policy.
        profile: a workload profile; the options listed in ``explicit`` override its fields (default: those given
            a value other than their default).
        concurrency, rate: closed loop (requests in flight; default 16) or open loop (requests/s, ``arrival``
            ``constant``, ``poisson`` or ``gamma`` with ``burstiness``).
        requests, duration: stop after N requests (warmup included) or after this many virtual seconds.
        input_tokens, output_tokens: length specs: ``N``, ``uniform:A:B``, ``normal:M:S``, ``lognormal:MED:SIG``.
        slo: SLOs like ``ttft_p99=1.5s``.
        disagg: prefill/decode disaggregation, ``prefill=WORKERSxGPUS,decode=WORKERSxGPUS``, each pool optionally
            with ``:dpN`` (attention-DP ranks per worker, each scheduling its own batch) and ``:epN`` (expert
            parallelism), e.g. ``prefill=2x4:dp4:ep4,decode=1x8:dp8:ep8``; a pool without them whose workers have
            ``tp × attention_dp`` GPUs runs ``tp``, ``attention_dp`` and ``ep``, another plain tensor parallelism
            (``replicas`` is ignored); the KV transfer between the pools is priced from the interconnect.
        spec_draft, spec_accept, spec_draft_model: speculative decoding with ``spec_draft`` draft tokens per step
            accepted with probability ``spec_accept`` each; the draft is ``spec_draft_model`` on the same GPUs, or
            priced at 0.1 × the target's decode step per draft token.
        kv_offload_gib: host memory per replica that preempted requests' KV is swapped to (instead of recompute).
        batch_wait_iters, batch_wait_ratio: batch waiting, as TensorRT-LLM's ``batch_wait_timeout_iters`` and
            ``batch_wait_max_tokens_ratio``: while requests decode, new prompts wait until the step's tokens reach
            the ratio × the token budget, or for that many steps at most (0: off; not under attention DP).
        recv_interval: SGLang's ``--scheduler-recv-interval``: new requests are taken in every that many decode
            steps (at once after a step with prompts; 1: every step; not under attention DP).
        dp_balance_iters: TensorRT-LLM's attention-DP balancing (``attention_dp_config``'s ``timeout_iters``): a
            prompt waits for every attention-DP rank to have one, or that many steps (0: no balancing; None: the
            engine's learned wait).
        from_traces: an ingested trace set whose LLM calls are simulated as call-graph sessions, as ``bench
            --from-traces`` replays them: the first ``requests`` traces with LLM calls (default 100), sessions at
            their traces' start offsets × ``time_scale``, each call after the calls it followed in the trace.
        traces_db: the store holding the trace set (default: ``store`` when it is a path or a store, else the
            default store).
        closed_loop_noise: a closed loop's clients wait a small seeded random delay between a response's end and
            their next request, as real clients do (docs/engine.md); False sends at once (exact steps, for tests).
        stagger: a closed loop's start: client ``i`` of ``C`` starts at ``i / C × stagger`` virtual seconds. None (the
            default): one request's lifetime, so that a loop of fixed lengths does not start in lock-step (it can
            still bunch into waves over the run: the summary then warns ``WAVES``); 0: every client at once, as
            ``tailscope bench --concurrency`` starts them — what to simulate to predict such a bench against the
            built-in engine (docs/engine.md, "tailscope sim"). ``result.sim.clients_stagger_s`` says which was used.
        store: a store path or RunStore to keep the run in (then ``runs show``, compare and gates find it); None
            writes nothing.
        progress: called with (requests simulated, virtual seconds) every few thousand requests.

    Returns:
        ``result.summary`` (typed, as for a bench), ``result.sim`` (steps, preemptions, GPU-hours, timeline),
        ``result.records`` and ``result.to_json()`` (the document ``tailscope sim --json`` writes).

    Raises:
        ConfigError: a bad option, naming its flag. CatalogError: an unknown model or GPU. PlanError: the model does
        not fit the GPUs.
    """
    args = SimArgs(
        model=model, gpu=gpu, tp=tp, replicas=replicas, backend=engine, ep=ep, attention_dp=attention_dp,
        weights_dtype=weights_dtype, kv_dtype=kv_dtype, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, gpu_memory_utilization=gpu_memory_utilization,
        prefix_caching=prefix_caching, router=router, calibration=optional_path(calibration),
        gpu_file=optional_path(gpu_file), autoscale=optional_path(autoscale), profile=optional_path(profile),
        concurrency=concurrency, rate=rate, arrival=arrival, burstiness=burstiness, requests=requests,
        duration=duration, input_tokens=str(input_tokens), output_tokens=str(output_tokens), warmup=warmup, seed=seed,
        slo=tuple(s if isinstance(s, str) else f"{s.key}={s.threshold_ms:g}ms" for s in slo), disagg=disagg,
        spec_draft=spec_draft, spec_accept=spec_accept, spec_draft_model=spec_draft_model,
        kv_offload_gib=kv_offload_gib, batch_wait_iters=batch_wait_iters, batch_wait_ratio=batch_wait_ratio,
        recv_interval=recv_interval, dp_balance_iters=dp_balance_iters, from_traces=from_traces,
        traces_db=optional_path(traces_db),
        time_scale=time_scale, store=False, desync=closed_loop_noise, stagger=stagger,
    )  # fmt: skip
    if explicit is None:  # the options given a value other than their default override the profile's fields
        default = SimArgs()
        explicit = {n for n in _PROFILE_OPTIONS if getattr(args, n) != getattr(default, n)}
    args = replace(args, explicit=frozenset(explicit))
    rs = open_store(store)
    if from_traces is not None and traces_db is None and rs is not None:
        args = replace(args, traces_db=rs.db.path)
    if args.calibration is None or _twin_free(args.calibration):
        found: list[tuple[Any, dict[str, Any] | None]] = []

        def add_interval(typed: RunSummary | None, doc: dict[str, Any]) -> None:
            # before the run is finished in the store: its stored summary is summary_dict()'s in one write
            band, source = residual_interval(
                typed if typed is not None else summarize([]), engine=engine, gpu=gpu, model=model,
                disaggregated=args.disagg is not None,
            )  # fmt: skip
            found.append((band, source))
            if band is not None:
                doc["prediction_interval"] = band
                if source is not None:
                    doc["prediction_interval_source"] = source

        outcome = run_sim(args, on_progress=progress, store=rs, amend_summary=add_interval)
        band, source = found[0] if found else (None, None)
        return sim_result(outcome, interval=band, store=rs, source=source)
    # a digital twin carries coefficient errors: simulate at −1σ and +1σ too and report the range
    from tailscope.runner.twin_check import interval_of, predict

    pred = predict(args, store=rs, on_progress=progress)
    interval = interval_of(pred)
    result = sim_result(pred.outcome, interval=interval, store=rs, source={"kind": "twin", "sigma": 1.0})
    if rs is not None:
        rs.finish_run(result.run.id, result.run.status, result.summary_dict())
    return result
