"""Plan: :func:`plan_kv` (KV bytes, capacity, concurrency), :func:`plan_estimate` (request times and their roofline
regime), and :func:`perf_model`, the step-time model every plan uses. The other calculators: capacity
(:mod:`tailscope.api.capacity`), napkin capacity and cost (:mod:`tailscope.api.cost`), latency budgets
(:mod:`tailscope.api.budget`).

Models and GPUs are catalog ids (``tailscope catalog models``) or a ``config.json`` path for a model. Nothing is
written.
"""

from __future__ import annotations

from dataclasses import replace

from tailscope.api._support import PathLike, optional_path, public
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import get_model_entry
from tailscope.engine.perf import StepTimeModel
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.step_terms import Parallelism
from tailscope.engine.twin_step import TwinStepModel
from tailscope.errors import PlanError
from tailscope.io.calibration import load_calibration
from tailscope.io.models import resolve_model
from tailscope.plan import kv as kv_core
from tailscope.plan.estimate import Estimate, estimate_request
from tailscope.plan.kv import KvPlan

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
    attention_dp: int = 1,
) -> PerfModel:
    """The step-time model plans use: a digital twin's fitted costs, the roofline with a calibration's efficiencies,
    or the trained step model of ``engine`` — of one attention-DP rank when ``attention_dp`` > 1 (a worker of
    ``tp × attention_dp`` GPUs whose ranks each schedule their own batch).

    Raises:
        PlanError: a twin with ``tp`` or ``attention_dp`` other than 1; attention DP with roofline efficiencies.
        CatalogError: an unknown model or GPU.
    """
    cal = load_calibration(optional_path(calibration))
    if cal.twin is not None:
        if tp != 1 or attention_dp != 1:
            raise PlanError("a digital twin describes one deployment as it was measured: plan it with --tp 1")
        return TwinStepModel(cal.twin)  # the twin's fitted costs and KV capacity replace the catalogs
    arch = resolve_model(model)
    spec = resolve_gpu(gpu)
    if cal.has_overrides:  # roofline efficiencies given: the plain roofline with them
        if attention_dp != 1:
            raise PlanError("attention DP is priced by the trained step model: plan it without roofline efficiencies")
        eff = cal.efficiency(spec.id, model)
        return StepTimeModel(arch, spec, tp=tp, weights_dtype=weights_dtype, kv_dtype=kv_dtype, efficiency=eff)
    par = Parallelism(tp, attention_dp, ep if arch.is_moe else 1)
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
    engine: str = "vllm",
) -> KvPlan:
    """KV bytes per token and per sequence, weights, and (with ``gpu``) KV capacity and max concurrent sequences.

    Args:
        model: catalog id or a ``config.json`` path.
        context: tokens per sequence (prompt + output).
        kv_dtype: ``bf16``, ``fp8`` or ``int8``.
        weights_dtype: ``bf16``, ``fp8``, ``int8`` or ``int4`` (default: the checkpoint's own).
        gpu: GPU catalog id; None: no capacity figures.
        tp: tensor-parallel degree.
        gpu_memory_utilization: the fraction of GPU memory the engine may use — for TensorRT-LLM, of what the weights
            leave (its ``free_gpu_memory_fraction``).
        engine: ``vllm``, ``sglang`` or ``trtllm``: how the KV cache is sized from the memory.

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
        engine=engine,
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
    engine: str = "vllm",
    ep: int = 1,
    attention_dp: int = 1,
) -> Estimate:
    """Prefill time, TTFT, TPOT and E2E of one request at a steady concurrency, and which roofline regime bounds
    each phase (analytic: no simulation).

    Args:
        model, gpu: catalog ids (a ``config.json`` path for the model).
        input_tokens, output_tokens: the request's lengths.
        concurrency: requests in flight on the replica (with ``attention_dp`` ranks: spread evenly over them).
        tp: tensor-parallel GPUs (of each attention-DP rank).
        calibration: a calibration file (a digital twin's ``twin.yaml``, or roofline efficiencies).
        engine: ``vllm``, ``sglang`` or ``trtllm``: the trained step model's costs and defaults.
        ep: expert parallelism of an MoE model (divides ``tp × attention_dp``).
        attention_dp: attention data-parallel ranks of the replica, each scheduling its own batch of
            ``concurrency / attention_dp`` requests; the times are a request's on its rank, the throughput every
            rank's.

    Returns:
        ``e.prefill_ms``, ``e.ttft_ms``, ``e.tpot_ms``, ``e.e2e_ms``, ``e.prefill_bound``, ``e.decode_bound``,
        ``e.output_tokens_per_s`` and ``e.to_dict()`` (``tailscope plan estimate --json``).

    Raises:
        PlanError: non-positive lengths, or sequences that do not fit the KV cache. ConfigError: a bad
            parallelism (``attention_dp`` < 1, ``ep`` not dividing the GPUs).
    """
    Parallelism(tp, attention_dp, ep).validate()
    perf = perf_model(
        model, gpu, tp=tp, weights_dtype=weights_dtype, kv_dtype=kv_dtype, calibration=calibration, engine=engine,
        ep=ep, attention_dp=attention_dp,
    )  # fmt: skip
    if attention_dp == 1:
        return estimate_request(perf, input_tokens=input_tokens, output_tokens=output_tokens, concurrency=concurrency)
    per_rank = -(-concurrency // attention_dp)  # the busiest rank's share: the figures a request sees at worst
    est = estimate_request(perf, input_tokens=input_tokens, output_tokens=output_tokens, concurrency=per_rank)
    ranks = concurrency / per_rank  # every rank serves its share at its rate
    return replace(
        est,
        concurrency=concurrency,
        output_tokens_per_s=est.output_tokens_per_s * ranks,
        requests_per_s=est.requests_per_s * ranks,
        assumptions=(
            *est.assumptions,
            f"{attention_dp} attention-DP ranks of TP {tp}: {per_rank} of the {concurrency} requests on a rank (its "
            "step carries the others' all-to-all); the throughput is every rank's",
        ),
    )
