"""Building the replica engine that ``tailscope serve`` and the embedded bench target drive.

One place turns (model id, GPU id, engine flags) into a :class:`~tailscope.engine.replica.Replica` plus the
:class:`ServeOptions` the HTTP layer needs (served name, context length, cache facts, a one-line description).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tailscope.engine.api import ReplicaEngine
from tailscope.engine.engine_config import EngineSettings
from tailscope.errors import ConfigError
from tailscope.serve.faults import FaultConfig
from tailscope.serve.metrics import CacheInfo
from tailscope.serve.options import ServeOptions

#: Context length used when the model's config does not state one.
DEFAULT_MAX_MODEL_LEN = 131_072


@dataclass(frozen=True, slots=True)
class EngineFlags(EngineSettings):
    """Engine settings with vLLM's flag names: the :class:`~tailscope.engine.engine_config.EngineSettings` that
    ``tailscope sim`` shares (``tp``, dtypes, scheduler limits, ``calibration``, ``gpu_file``, ``backend``, ``ep``,
    KV offload, speculative decoding) and the serving-only ones below.

    Attributes:
        enable_prefix_caching: reuse cached KV blocks across requests.
        max_model_len: context length; default = the model's, capped by the KV cache capacity.
        disagg: serve a prefill/decode-disaggregated deployment instead of one replica, given as ``tailscope sim
            --disagg`` takes it (``prefill=2x4:dp4:ep4,decode=1x8:dp8:ep8``); None: one replica.
        attention_dp: the replica's attention data-parallel ranks (each with ``tp`` GPUs and its own batch, as
            ``tailscope sim --attention-dp``); with ``disagg``, the ranks of a pool given without ``:dpN``.
    """

    enable_prefix_caching: bool = True
    max_model_len: int | None = None
    disagg: str | None = None
    attention_dp: int = 1


def _model_max_len(model: str) -> int:
    from tailscope.engine.model_catalog import get_model_entry

    try:
        cfg = get_model_entry(model).config
    except ConfigError:
        return DEFAULT_MAX_MODEL_LEN  # a config.json path: the engine's loader does not keep the context length
    value = cfg.get("max_position_embeddings")
    return int(value) if isinstance(value, int) and value > 0 else DEFAULT_MAX_MODEL_LEN


def build_replica(
    model: str = "llama-3.1-8b",
    gpu: str = "h100-sxm",
    *,
    flags: EngineFlags | None = None,
    options: ServeOptions | None = None,
    served_model_name: str | None = None,
    speed: float = 1.0,
    seed: int = 0,
    faults: FaultConfig | None = None,
    frontend_latency: bool = True,
    **engine_flags: Any,
) -> tuple[ReplicaEngine, ServeOptions]:
    """The engine for ``model`` on ``gpu`` and the serving options that describe it.

    Args:
        model: catalog model id or a path to a Hugging Face ``config.json``.
        gpu: catalog GPU id.
        flags: engine settings (or give them as keyword arguments named like :class:`EngineFlags` fields).
        options: serving options to start from (their model facts are filled in here).
        served_model_name: the name clients use (default: ``model``).
        speed: engine seconds per wall second.
        seed: seed of response ids and natural output lengths.
        faults: fault injection settings.
        frontend_latency: model the API server's latency before the engine (as ``sim`` does).

    Raises:
        ConfigError / CatalogError: an unknown model or GPU or an invalid flag, naming it.
        PlanError: the model does not fit on the GPU.
    """
    from tailscope.engine.cluster import ClusterSpec
    from tailscope.engine.gpus import resolve_gpu
    from tailscope.io.calibration import load_calibration
    from tailscope.io.gpus import load_gpu_file
    from tailscope.io.models import resolve_model

    if engine_flags:
        unknown = set(engine_flags) - set(EngineFlags.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"unknown engine option(s) {', '.join(sorted(unknown))}")
        flags = replace(flags or EngineFlags(), **engine_flags)
    flags = flags or EngineFlags()
    flags.check_dtypes()  # before any file is read, as sim
    extra = load_gpu_file(flags.gpu_file) if flags.gpu_file is not None else ()
    gpu_spec = resolve_gpu(gpu, extra)
    arch = resolve_model(model)
    calibration = load_calibration(flags.calibration)
    # the construction `tailscope sim` uses (one replica of its ClusterSpec): the same dtype and fit checks, scheduler
    # limits and KV blocks (a twin's own), so the served engine is the simulated one
    draft = resolve_model(flags.spec_draft_model) if flags.spec_draft_model and flags.spec_draft else None
    pools = None
    if flags.disagg is not None:
        from tailscope.engine.disagg import parse_disagg

        pools = parse_disagg(flags.disagg)
    spec = ClusterSpec.from_settings(
        flags,
        arch,
        gpu_spec,
        calibration,
        model_id=model,
        prefix_caching=flags.enable_prefix_caching,
        draft_model=draft,
        disagg=pools,
        attention_dp=flags.attention_dp,
    )
    config = spec.engine_config()
    engine: ReplicaEngine
    if pools is None and flags.attention_dp > 1:  # the ranks of `tailscope sim --attention-dp`, behind one engine
        from tailscope.engine.disagg_engine import DataParallelEngine

        ranks = DataParallelEngine.from_cluster(spec)
        engine, weights, capacity = ranks, ranks.perf.weights_dtype, ranks.capacity_tokens
        shape = f" ×{flags.tp * flags.attention_dp} as {flags.attention_dp} attention-DP ranks of TP {flags.tp}"
        shape += f" (EP {flags.ep})" if flags.ep > 1 else ""
    elif pools is None:
        replica = spec.new_replica()
        engine, weights, capacity = replica, replica.perf.weights_dtype, replica.capacity_tokens
        shape = (f" ×{flags.tp}" if flags.tp > 1 else "") + (f" (EP {flags.ep})" if flags.ep > 1 else "")
    else:  # the pools of `tailscope sim --disagg`, behind one engine
        from tailscope.engine.disagg_engine import DisaggregatedEngine

        spec.check_fits()
        both = DisaggregatedEngine.from_cluster(spec)
        engine, weights, capacity = both, both.perf.weights_dtype, both.capacity_tokens
        shape = f", disaggregated {pools.label()}"
    blocks = engine.stats().kv_blocks_total
    twin = calibration.twin
    # a twin's server had a context length of its own; else the model's, capped by what the KV cache holds
    model_len = twin.facts.max_model_len if twin is not None and twin.facts.max_model_len else _model_max_len(model)
    max_len = flags.max_model_len or min(model_len, capacity)
    if flags.max_model_len is not None and flags.max_model_len > capacity:
        raise ConfigError(
            f"--max-model-len {flags.max_model_len} exceeds the KV cache of {capacity} tokens on {gpu_spec.id} "
            f"(tp={flags.tp}); lower it or raise --gpu-memory-utilization / --tp"
        )
    name = served_model_name or model
    # the engine whose costs run is named unless it is the default (a built-in run's target is its description:
    # runs of other engines must not compare as one target, and vLLM runs keep the description they always had)
    costs = f"{flags.backend} costs, " if flags.backend != "vllm" else ""
    description = (
        f"{arch.name} on {gpu_spec.id}{shape} "
        f"({costs}weights {weights}, KV {flags.kv_dtype}, {capacity:,} KV tokens, "
        f"max_num_seqs {config.max_num_seqs}, speed {speed:g}×)"
    )
    base = options or ServeOptions(model_name=name)
    opts = replace(
        base,
        model_name=served_model_name or base.model_name or name,
        max_model_len=max_len,
        block_size=config.block_size,
        speed=speed if options is None else base.speed,
        seed=seed if options is None else base.seed,
        faults=faults if faults is not None else base.faults,
        frontend_latency=frontend_latency if options is None else base.frontend_latency,
        cache=CacheInfo(
            block_size=config.block_size,
            num_gpu_blocks=blocks,
            gpu_memory_utilization=config.gpu_memory_utilization,
            cache_dtype="auto" if flags.kv_dtype == "bf16" else flags.kv_dtype,
            enable_prefix_caching=config.enable_prefix_caching,
        ),
        description=description,
        prompt_scale=twin.facts.prompt_scale if twin is not None else base.prompt_scale,
        prompt_offset=twin.facts.prompt_offset if twin is not None else base.prompt_offset,
    )
    opts.validate()
    return engine, opts
