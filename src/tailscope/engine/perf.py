"""Step-time model: how long one engine step takes on the hardware (a roofline with fixed costs).

For one step that runs prefill chunks ``(tokens c, context before p)`` and ``n`` decode sequences whose contexts
sum to ``D`` on a tensor-parallel group of ``t`` GPUs::

    T        = Σc + n                                       tokens in the step
    F_lin    = 2 · P_body · T + 2 · V · H · n_logits         matmul FLOPs (P_body: active params without LM head)
    F_attn   = 4 · q_dim · (Σ c·(p + (c+1)/2) + D)           QKᵀ and PV, per layer (window-capped on sliding layers)
    B        = W_touched + kv · (Σ(p + c) + D) + kv · T      weights read once + KV read + KV written
    compute  = (F_lin + F_attn) / t / (peak · MFU)
    memory   = B / t / (HBM · MBU)
    allreduce= 2 · L · (lat + 2(t−1)/t · T·H·2 bytes / (link · eff))        (t > 1)
    step     = max(compute, memory) + allreduce + overhead + per_seq · (Σ sequences)

``W_touched`` for an MoE layer counts only the experts the step's tokens reach: ``E · (1 − (1 − k/E)^T)``.
Everything is in seconds; :meth:`StepTimeModel.step_ns` rounds to integer nanoseconds for the schedulers.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tailscope.engine.calibration import Efficiency
from tailscope.engine.gpus import GpuSpec
from tailscope.engine.models import ModelArch, dtype_bytes
from tailscope.errors import ConfigError, PlanError


class StepModel(Protocol):
    """What the scheduler and the simulator need of a step-time model: :class:`StepTimeModel` (roofline) or a
    fitted digital twin (:class:`~tailscope.engine.twin_step.TwinStepModel`)."""

    weights_dtype: str
    kv_dtype: str
    eff: Efficiency

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, reserve_gb: float | None = None) -> int: ...

    def mixed_step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int
    ) -> int: ...

    def decode_step_ns(self, n_decode: int, decode_ctx_sum: int) -> int: ...

    def step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> int: ...

    def tokenize_ns(self, prompt_tokens: int) -> int: ...

    def frontend_delay_ns(self, in_flight: int, u: float = 0.5) -> int: ...

    def weight_load_bytes_per_gpu(self) -> float: ...


def frontend_jitter(seed: int, key: int) -> float:
    """The deterministic ``u`` in [0, 1) that :meth:`StepTimeModel.frontend_delay_ns` spreads a request's front end
    by: a hash of the seed and the request's key, taken apart (workload seeds are base + id, so a hash of
    ``seed ^ id`` gave every request of a seed-0 workload the same u = 0.87 — a front end 1.74× its mean)."""
    return (zlib.crc32(b"%d/%d" % (seed, key)) & 0xFFFF) / 65536.0


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Parts of one step's time, seconds."""

    compute_s: float
    memory_s: float
    allreduce_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.allreduce_s + self.overhead_s

    @property
    def bound(self) -> str:
        """``compute`` or ``memory``: which roofline side sets the step."""
        return "compute" if self.compute_s >= self.memory_s else "memory"


class StepTimeModel:
    """Roofline step time of one replica (a model on ``tp`` GPUs of one kind)."""

    def __init__(
        self,
        model: ModelArch,
        gpu: GpuSpec,
        *,
        tp: int = 1,
        weights_dtype: str | None = None,
        kv_dtype: str = "bf16",
        efficiency: Efficiency | None = None,
    ) -> None:
        if tp < 1:
            raise ConfigError(f"--tp must be ≥ 1 (got {tp})")
        self.model = model
        self.gpu = gpu
        self.tp = tp
        self.weights_dtype = (weights_dtype or model.default_weights_dtype).lower()
        self.kv_dtype = kv_dtype.lower()
        self.eff = efficiency or Efficiency()
        wb = dtype_bytes(self.weights_dtype, what="weights dtype")
        self.kv_bytes_per_token = model.kv_bytes_per_token(self.kv_dtype)
        compute_dtype = "fp8" if self.weights_dtype == "fp8" else "bf16"
        self._peak = gpu.peak_flops(compute_dtype) * self.eff.mfu
        self._bw = gpu.hbm_gbps * 1e9 * self.eff.mbu
        self.weight_bytes_total = model.weight_bytes(self.weights_dtype)
        # KV heads are split across TP ranks only up to the number of KV heads; MLA latents are replicated.
        kv_split = 1 if model.is_mla else max(1, min(tp, model.kv_heads))
        self._kv_per_gpu_token_layer = self.kv_bytes_per_token / model.layers / kv_split
        expert_bytes = model.expert_params_per_layer * wb
        self._moe_layers = model.moe_layers
        self._expert_bytes_per_layer = expert_bytes
        routed = model.experts * expert_bytes * self._moe_layers
        self._static_weight_bytes = (self.weight_bytes_total - routed) / tp
        self._expert_bytes_per_gpu = expert_bytes / tp
        self._body_flops_per_token = 2.0 * model.body_params / tp
        self._head_flops_per_token = 2.0 * model.vocab * model.hidden / tp
        self._attn_flops_coeff = 4.0 * model.q_dim / tp  # per (query token × context token × layer)
        self._full_layers = model.layers - model.sliding_layers
        self._sliding_layers = model.sliding_layers
        self._window = model.sliding_window or 0
        self._overhead_s = self.eff.step_overhead_ms / 1e3
        self._per_seq_s = self.eff.per_seq_overhead_us / 1e6
        # hot-path constants (the same values the general formulas compute, so step times are bit-identical)
        self._decode_flops_per_token = self._body_flops_per_token + self._head_flops_per_token
        self._layers = model.layers
        self._tokenize_ns_per_token = self.eff.frontend_per_token_us * 1e3
        self._frontend_jitter_ns = self.eff.frontend_ms * 1e6 * 2.0
        self._frontend_inflight_ns = self.eff.frontend_per_inflight_us * 1e3
        if tp > 1:
            link = gpu.interconnect_gbps * 1e9 * self.eff.allreduce_efficiency
            self._ar_count = 2 * model.layers
            self._ar_lat = self.eff.allreduce_latency_us / 1e6
            self._ar_per_token = 2.0 * (tp - 1) / tp * model.hidden * 2.0 / link
        else:
            self._ar_count = 0
            self._ar_lat = 0.0
            self._ar_per_token = 0.0

    # ---- capacity -------------------------------------------------------------------------------------------
    def kv_capacity_tokens(
        self, gpu_memory_utilization: float = 0.9, reserve_gb: float | None = None, *, of_free: bool = False
    ) -> int:
        """Tokens of KV cache the replica can hold.

        ``capacity = gpu_memory_utilization × memory − weights − reserve`` per GPU, where the reserve holds
        activations, CUDA graphs and the NCCL/runtime context (default 1.5 GB + 4 % of memory, vLLM's profiled
        peak is of that order); with ``of_free`` (TensorRT-LLM) the fraction is of what the weights and the reserve
        leave.

        Raises:
            PlanError: when the weights do not fit.
        """
        return kv_capacity_from_memory(
            self,
            weights_per_gpu=self.weight_bytes_total / self.tp,
            tp=self.tp,
            gpus=f"tp={self.tp}",
            more_gpus="--tp",
            gpu_memory_utilization=gpu_memory_utilization,
            reserve_gb=reserve_gb,
            default_reserve=(1.5e9, 0.04),
            of_free=of_free,
        )

    # ---- step time ------------------------------------------------------------------------------------------
    def _weights_touched(self, tokens: int) -> float:
        if self._moe_layers == 0:
            return self._static_weight_bytes
        e = self.model.experts
        k = self.model.active_experts
        touched = e * (1.0 - (1.0 - k / e) ** tokens)
        return self._static_weight_bytes + self._moe_layers * touched * self._expert_bytes_per_gpu

    def breakdown(
        self,
        prefill: Sequence[tuple[int, int]],
        n_decode: int,
        decode_ctx_sum: int,
        n_logits: int | None = None,
    ) -> StepBreakdown:
        """Time parts of a step.

        Args:
            prefill: ``(chunk tokens, tokens already in the KV cache)`` per prefill chunk.
            n_decode: decode sequences (one token each).
            decode_ctx_sum: sum of the decode sequences' KV lengths before the step.
            n_logits: tokens that produce logits (defaults to decodes + prefill chunks).
        """
        acc = self.accumulate_prefill(prefill)
        return self._parts(n_decode, decode_ctx_sum, n_logits, *acc)

    def accumulate_prefill(self, prefill: Sequence[tuple[int, int]]) -> tuple[int, float, float, float, float, int]:
        """Sums over prefill chunks: (tokens, attention full, attention sliding, KV read full, KV read sliding, n)."""
        tokens = 0
        attn_full = attn_slide = kv_full = kv_slide = 0.0
        w = self._window
        for c, p in prefill:
            tokens += c
            mid = p + (c + 1) / 2.0
            attn_full += c * mid
            kv_full += p + c
            if w:
                attn_slide += c * min(mid, w)
                kv_slide += min(p + c, w)
        return tokens, attn_full, attn_slide, kv_full, kv_slide, len(prefill)

    def _parts(
        self,
        n_decode: int,
        decode_ctx_sum: int,
        n_logits: int | None,
        p_tokens: int,
        p_attn_full: float,
        p_attn_slide: float,
        p_kv_full: float,
        p_kv_slide: float,
        n_prefill: int,
    ) -> StepBreakdown:
        tokens = n_decode + p_tokens
        if n_logits is None:
            n_logits = n_decode + n_prefill
        full = self._full_layers * (decode_ctx_sum + p_attn_full)
        kv = self._full_layers * (decode_ctx_sum + p_kv_full)
        if self._sliding_layers:
            capped = min(decode_ctx_sum, n_decode * self._window)
            full += self._sliding_layers * (capped + p_attn_slide)
            kv += self._sliding_layers * (capped + p_kv_slide)
        flops = self._body_flops_per_token * tokens + self._head_flops_per_token * n_logits
        flops += self._attn_flops_coeff * full
        mem = self._weights_touched(tokens) + self._kv_per_gpu_token_layer * (kv + tokens * self.model.layers)
        ar = self._ar_count * (self._ar_lat + self._ar_per_token * tokens) if self._ar_count else 0.0
        overhead = self._overhead_s + self._per_seq_s * (n_decode + n_prefill)
        return StepBreakdown(flops / self._peak, mem / self._bw, ar, overhead)

    def mixed_step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int
    ) -> int:
        """:meth:`step_ns` with the logit count given (the scheduler's call; this roofline is the model a calibration
        file of efficiencies selects, not the default, so it keeps one path: :meth:`breakdown`)."""
        return self.step_ns(prefill, n_decode, decode_ctx_sum, n_logits)

    def step_s(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> float:
        """Seconds for one step (see :meth:`breakdown`)."""
        return self.breakdown(prefill, n_decode, decode_ctx_sum, n_logits).total_s

    def step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> int:
        """Integer nanoseconds for one step (at least 1)."""
        return max(1, math.ceil(self.step_s(prefill, n_decode, decode_ctx_sum, n_logits) * 1e9))

    def decode_step_ns(self, n_decode: int, decode_ctx_sum: int) -> int:
        """:meth:`step_ns` for a decode-only step, with the terms specialised (the simulator's hot path).

        The operations (and so the float rounding) are those of the general formula; only lookups are saved.
        """
        flops = self._decode_flops_per_token * n_decode
        attn = self._full_layers * decode_ctx_sum  # = the KV tokens read, for decodes
        if self._sliding_layers:
            capped = min(decode_ctx_sum, n_decode * self._window)
            attn += self._sliding_layers * capped
        flops += self._attn_flops_coeff * attn
        weights = self._weights_touched(n_decode) if self._moe_layers else self._static_weight_bytes
        mem = weights + self._kv_per_gpu_token_layer * (attn + n_decode * self._layers)
        c = flops / self._peak
        m = mem / self._bw
        t = (c if c >= m else m) + self._overhead_s + self._per_seq_s * n_decode
        if self._ar_count:
            t += self._ar_count * (self._ar_lat + self._ar_per_token * n_decode)
        ns = math.ceil(t * 1e9)
        return ns if ns > 1 else 1

    def tokenize_ns(self, prompt_tokens: int) -> int:
        """API-server work on one request that is done one request at a time (tokenization), ns."""
        return int(self._tokenize_ns_per_token * prompt_tokens)

    def frontend_delay_ns(self, in_flight: int, u: float = 0.5) -> int:
        """API-server latency that requests do not queue for: fixed part + per request in flight, ns.

        ``u`` in [0, 1) spreads the fixed part uniformly over ``[0.5, 1.5] × frontend_ms`` (same mean): real
        requests do not reach the engine at identical offsets, and that jitter is what keeps closed-loop clients
        from marching in lock-step waves (u = 0.5 gives the mean).
        """
        return int(self._frontend_jitter_ns * u + self._frontend_inflight_ns * in_flight)

    def weight_load_bytes_per_gpu(self) -> float:
        """Bytes each GPU loads at start-up (for cold starts)."""
        return self.weight_bytes_total / self.tp


class _Resident(Protocol):
    """What :func:`kv_capacity_from_memory` reads of a step model: what runs where, at which precisions."""

    model: ModelArch
    gpu: GpuSpec
    weights_dtype: str
    kv_dtype: str


def kv_capacity_from_memory(
    m: _Resident,
    *,
    weights_per_gpu: float,
    tp: int,
    gpus: str,
    more_gpus: str,
    gpu_memory_utilization: float,
    reserve_gb: float | None,
    default_reserve: tuple[float, float],
    of_free: bool = False,
) -> int:
    """Tokens of KV cache a replica (or attention-DP rank) of step model ``m`` holds, for both step models.

    ``capacity = gpu_memory_utilization × memory − weights_per_gpu − reserve`` per GPU, divided by the KV bytes a
    token takes on one GPU (MLA latents are replicated across tensor-parallel ranks, GQA heads split up to the
    KV-head count). The reserve is ``reserve_gb`` when given, else ``default_reserve`` = (bytes, share of the GPU's
    memory): the model's own allowance for activations, CUDA graphs and runtime buffers. With ``of_free`` (an engine
    that sizes its KV cache from the free memory, TensorRT-LLM) the fraction is of what the weights and the reserve
    leave: ``capacity = gpu_memory_utilization × (memory − weights_per_gpu − reserve)``. ``gpus`` and ``more_gpus``
    word the error: the GPUs that hold the weights, and the flags that add GPUs.

    Raises:
        ConfigError: when ``gpu_memory_utilization`` is not in (0, 1].
        PlanError: when the weights leave no room for 16 tokens.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(f"--gpu-memory-utilization must be in (0, 1] (got {gpu_memory_utilization})")
    model, gpu, mem = m.model, m.gpu, m.gpu.memory_bytes
    base, share = default_reserve
    reserve_bytes = reserve_gb * 1e9 if reserve_gb is not None else base + share * mem
    if of_free:
        free = gpu_memory_utilization * (mem - weights_per_gpu - reserve_bytes)
    else:
        free = gpu_memory_utilization * mem - weights_per_gpu - reserve_bytes
    split = 1 if model.is_mla else max(1, min(tp, model.kv_heads))
    per_token = model.kv_bytes_per_token_resident(m.kv_dtype) / split
    if free <= per_token * 16:
        raise PlanError(
            f"{model.name} ({m.weights_dtype}) needs {weights_per_gpu / 1e9:.1f} GB of weights per GPU; "
            f"{gpu.id} × {gpus} leaves no room for the KV cache at gpu_memory_utilization={gpu_memory_utilization}. "
            f"Raise {more_gpus}, use a smaller --weights-dtype or a larger GPU"
        )
    return int(free // per_token)
