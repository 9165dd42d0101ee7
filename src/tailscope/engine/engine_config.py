"""Scheduler limits of one replica (vLLM engine arguments) and vLLM's defaults for them; the engine settings
``tailscope serve`` and ``tailscope sim`` share.

:class:`EngineConfig` is re-exported by :mod:`tailscope.engine.replica`, where the scheduler that obeys it lives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tailscope.engine.gpus import GpuSpec
from tailscope.engine.models import KV_DTYPES, WEIGHT_DTYPES
from tailscope.errors import ConfigError

if TYPE_CHECKING:
    from tailscope.engine.speculative import SpecDecode


def vllm_default_limits(gpu: GpuSpec) -> tuple[int, int]:
    """vLLM's OpenAI-server defaults ``(max_num_seqs, max_num_batched_tokens)`` for ``gpu``.

    vLLM (``EngineArgs.get_batch_defaults``) uses 1024 / 8192 on GPUs with ≥ 70 GiB that are not A100s and
    256 / 2048 elsewhere.
    """
    if gpu.memory_gb * 1e9 >= 70 * 2**30 and not gpu.id.startswith("a100"):
        return 1024, 8192
    return 256, 2048


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The engine settings of ``tailscope serve`` (:class:`~tailscope.serve.engine_factory.EngineFlags`) and
    ``tailscope sim`` (:class:`~tailscope.sim.run.SimArgs`), written once; vLLM's flag names, ``None`` = the
    engine's (vLLM's) default for the GPU.

    Attributes:
        tp: tensor-parallel degree.
        weights_dtype / kv_dtype: precisions (bf16, fp8, int8, int4 / bf16, fp8).
        max_num_seqs / max_num_batched_tokens: scheduler limits.
        gpu_memory_utilization: fraction of GPU memory for weights + KV + activations.
        calibration: calibration YAML overriding the efficiency defaults (or a digital twin's twin.yaml).
        gpu_file: YAML with extra GPUs.
        backend: serving engine whose learned step costs and defaults apply (vllm, sglang, trtllm).
        ep: expert parallelism of an MoE model (divides ``tp``).
        kv_offload_gib: host memory per replica that preempted requests' KV is swapped to and back from instead of
            being recomputed (0: recompute, vLLM v1's default).
        spec_draft / spec_accept / spec_draft_model: speculative decoding — draft tokens per step (0: off), each
            draft token's acceptance rate, the draft model's id (None: 0.1 × the target's decode step per token).
        batch_wait_iters / batch_wait_ratio: batch waiting (:class:`EngineConfig`; 0: off).
        recv_interval: SGLang's ``--scheduler-recv-interval`` (:class:`EngineConfig`; 1: every step).
        dp_balance_iters: TensorRT-LLM's attention-DP balancing (``attention_dp_config``: ``enable_balance`` with
            ``timeout_iters``): a context request waits for every rank to have one, or this many iterations (0:
            no balancing; None: the engine's learned wait, :attr:`~tailscope.engine.step_terms.Efficiencies.dp_wait`).
    """

    tp: int = 1
    weights_dtype: str | None = None
    kv_dtype: str = "bf16"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float = 0.9
    calibration: Path | None = None
    gpu_file: Path | None = None
    backend: str = "vllm"
    ep: int = 1
    kv_offload_gib: float = 0.0
    spec_draft: int = 0
    spec_accept: float = 0.7
    spec_draft_model: str | None = None
    batch_wait_iters: int = 0
    batch_wait_ratio: float = 0.0
    recv_interval: int = 1
    dp_balance_iters: int | None = None

    def speculative(self) -> SpecDecode | None:
        """The speculative decoding these settings ask for, validated (None: off).

        Raises:
            ConfigError: naming ``--spec-draft``, ``--spec-accept`` or ``--spec-draft-model``.
        """
        from tailscope.engine.speculative import SpecDecode

        if self.spec_draft:
            return SpecDecode(self.spec_draft, self.spec_accept, draft_model=self.spec_draft_model).validate()
        if self.spec_draft_model is not None:
            raise ConfigError("--spec-draft-model needs --spec-draft K (draft tokens per step)")
        return None

    def check_dtypes(self) -> None:
        """Raise ConfigError naming ``--weights-dtype`` / ``--kv-dtype`` when either is not a known precision."""
        if self.weights_dtype is not None and self.weights_dtype.lower() not in WEIGHT_DTYPES:
            raise ConfigError(f"--weights-dtype {self.weights_dtype!r}: use one of {', '.join(WEIGHT_DTYPES)}")
        if self.kv_dtype.lower() not in KV_DTYPES:
            raise ConfigError(f"--kv-dtype {self.kv_dtype!r}: use one of {', '.join(KV_DTYPES)}")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Scheduler limits of one replica (vLLM engine arguments of the same names).

    Attributes:
        max_num_seqs: running requests at most.
        max_num_batched_tokens: tokens per step at most (decodes + prefill chunks).
        block_size: tokens per KV block.
        gpu_memory_utilization: fraction of GPU memory vLLM may use (weights + KV + activations).
        enable_prefix_caching: reuse cached blocks across requests.
        num_blocks: force the KV capacity (tests, what-ifs); None = computed from memory.
        kv_offload_gib: CPU memory (GiB per replica) a preempted request's KV is swapped out to and back from at
            ``kv_offload_gbps`` (per GPU, over PCIe) instead of being recomputed; 0 = recompute (vLLM v1's default).
        kv_offload_gbps: achieved host↔GPU bandwidth per GPU in GB/s (PCIe Gen5 x16 ≈ 50 of its 64 GB/s).
        batch_wait_iters / batch_wait_ratio: batch waiting, TensorRT-LLM's ``batch_wait_timeout_iters`` and
            ``batch_wait_max_tokens_ratio``: while requests decode, new prompts are held until the next step's tokens
            (held prompts + decodes) reach ``batch_wait_ratio × max_num_batched_tokens`` or they have been held
            ``batch_wait_iters`` steps; 0 (either): no waiting. TensorRT-LLM does not wait under attention DP, and
            the simulator's attention-DP replicas do not either.
        recv_interval: SGLang's ``--scheduler-recv-interval``: the scheduler takes new requests in only once its
            count of steps since it last did reaches this (a decode step counts 1, a step with prompts counts enough
            to take them in at once); 1: every step. SGLang does not allow it with attention DP; the simulator's
            attention-DP replicas take requests every step.
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    num_blocks: int | None = None
    kv_offload_gib: float = 0.0
    kv_offload_gbps: float = 50.0
    batch_wait_iters: int = 0
    batch_wait_ratio: float = 0.0
    recv_interval: int = 1

    def validate(self) -> EngineConfig:
        if self.max_num_seqs < 1:
            raise ConfigError(f"--max-num-seqs must be ≥ 1 (got {self.max_num_seqs})")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"--max-num-batched-tokens ({self.max_num_batched_tokens}) must be ≥ --max-num-seqs "
                f"({self.max_num_seqs}), as vLLM requires"
            )
        if self.block_size < 1:
            raise ConfigError(f"block size must be ≥ 1 (got {self.block_size})")
        if self.kv_offload_gib < 0 or self.kv_offload_gbps <= 0:
            raise ConfigError(
                f"--kv-offload-gib must be ≥ 0 (got {self.kv_offload_gib:g}) and the offload bandwidth > 0 "
                f"(got {self.kv_offload_gbps:g} GB/s)"
            )
        if self.recv_interval < 1:
            raise ConfigError(f"--scheduler-recv-interval must be ≥ 1 (got {self.recv_interval})")
        if self.batch_wait_iters < 0 or not 0.0 <= self.batch_wait_ratio <= 1.0:
            raise ConfigError(
                f"--batch-wait-iters must be ≥ 0 (got {self.batch_wait_iters}) and --batch-wait-ratio within 0–1 "
                f"(got {self.batch_wait_ratio:g})"
            )
        return self
