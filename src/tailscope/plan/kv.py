"""KV-cache and memory arithmetic: bytes per token, per sequence, weights, capacity and concurrency (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailscope.engine.calibration import Efficiency
from tailscope.engine.engine_profiles import engine_profile
from tailscope.engine.gpus import GpuSpec
from tailscope.engine.models import ModelArch, dtype_bytes
from tailscope.engine.perf import StepTimeModel
from tailscope.errors import PlanError
from tailscope.record_ops import record_dict

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class KvPlan:
    """The answer of ``tailscope plan kv``. Byte figures are exact integers where the formula is.

    Attributes:
        bytes_per_token: 2 × layers × kv_heads × head_dim × dtype bytes (MLA: one latent per token and layer).
        per_sequence_bytes: ``bytes_per_token × context``.
        weights_bytes: all weights at ``weights_dtype``; ``weights_per_gpu_bytes`` after tensor parallelism.
        kv_capacity_tokens / max_sequences: only with a GPU: tokens of KV the replica holds, and how many
            sequences of ``context`` tokens fit at once.
        assumptions: every assumption behind the numbers, in words.
    """

    model: str
    kv_dtype: str
    weights_dtype: str
    context: int
    bytes_per_token: int
    per_sequence_bytes: int
    weights_bytes: float
    weights_per_gpu_bytes: float
    gpu: str | None = None
    tp: int = 1
    kv_capacity_tokens: int | None = None
    max_sequences: int | None = None
    assumptions: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


def kv_formula(model: ModelArch, kv_dtype: str) -> str:
    """The KV-bytes formula with this model's numbers filled in."""
    b = dtype_bytes(kv_dtype, what="--kv-dtype")
    if model.is_mla:
        width = model.kv_lora_rank + model.qk_rope_head_dim
        return f"{model.layers} layers × {width} latent values × {b:g} B (MLA)"
    return f"2 × {model.layers} layers × {model.kv_heads} KV heads × {model.head_dim} head_dim × {b:g} B"


def plan_kv(
    model: ModelArch,
    *,
    context: int,
    kv_dtype: str = "bf16",
    weights_dtype: str | None = None,
    gpu: GpuSpec | None = None,
    tp: int = 1,
    gpu_memory_utilization: float = 0.9,
    efficiency: Efficiency | None = None,
    max_context: int | None = None,
    engine: str = "vllm",
) -> KvPlan:
    """KV and memory figures for ``model`` at ``context`` tokens per sequence; ``engine`` says how the KV cache is
    sized (TensorRT-LLM: the fraction of what the weights and the reserve leave).

    Raises:
        PlanError: context above the model's maximum, or weights that do not fit on ``gpu × tp``.
    """
    if context < 1:
        raise PlanError(f"--context must be ≥ 1 token (got {context})")
    if max_context and context > max_context:
        raise PlanError(
            f"--context {context:,} is above {model.name}'s maximum context of {max_context:,} tokens "
            "(max_position_embeddings); choose a shorter context or a long-context variant"
        )
    wd = (weights_dtype or model.default_weights_dtype).lower()
    per_token = model.kv_bytes_per_token(kv_dtype)
    weights = model.weight_bytes(wd)
    assumptions = [
        f"KV bytes/token = {kv_formula(model, kv_dtype)} = {per_token:,} B",
        f"weights at {wd}: {model.total_params / 1e9:.2f} B params",
    ]
    sources = {"model": model.source}
    capacity = max_seqs = None
    if gpu is not None:
        of_free = engine_profile(engine).kv_of_free_memory
        perf = StepTimeModel(model, gpu, tp=tp, weights_dtype=wd, kv_dtype=kv_dtype, efficiency=efficiency)
        capacity = perf.kv_capacity_tokens(gpu_memory_utilization, of_free=of_free)
        max_seqs = capacity // context
        memory = f"{gpu.memory_gb:g} GB − weights/GPU − reserve"
        assumptions.append(
            f"KV capacity = {gpu_memory_utilization:g} × ({memory}) — {engine_profile(engine).label} sizes it from "
            f"the free memory — (reserve: 1.5 GB + 4 % of memory for activations, CUDA graphs and runtime), on {tp} × "
            f"{gpu.id}"
            if of_free
            else f"KV capacity = {gpu_memory_utilization:g} × {memory} (1.5 GB + 4 % of memory for activations, CUDA "
            f"graphs and runtime), on {tp} × {gpu.id}"
        )
        if not model.is_mla and tp > model.kv_heads:
            assumptions.append(f"tp={tp} > {model.kv_heads} KV heads: KV heads are replicated across ranks")
        sources["gpu"] = gpu.source
        if max_seqs == 0:
            assumptions.append(f"one sequence of {context:,} tokens does not fit the KV cache")
    return KvPlan(
        model=model.name,
        kv_dtype=kv_dtype,
        weights_dtype=wd,
        context=context,
        bytes_per_token=per_token,
        per_sequence_bytes=per_token * context,
        weights_bytes=weights,
        weights_per_gpu_bytes=weights / tp,
        gpu=gpu.id if gpu else None,
        tp=tp,
        kv_capacity_tokens=capacity,
        max_sequences=max_seqs,
        assumptions=tuple(assumptions),
        sources=sources,
    )
