"""Serving-engine profiles (``--engine vllm|sglang|trtllm``): the defaults each engine schedules with.

The learned step costs (:mod:`tailscope.engine.step_params`) are per engine too; a profile holds what is documented
rather than fitted:

========================  ==============================  ==============================  ==============================
                          vLLM (V1)                       SGLang                          TensorRT-LLM (PyTorch flow)
========================  ==============================  ==============================  ==============================
token budget per step     ``max_num_batched_tokens``      ``chunked_prefill_size``        ``max_num_tokens`` 8192
                          8192 (≥ 70 GiB GPUs), 2048      8192 (< 160 GiB), 16384 above
running requests at most  ``max_num_seqs`` 1024 / 256     ``max_running_requests`` (KV)   ``max_batch_size`` 2048
chunked prefill           on                              on (by the chunk size)          off by default
CUDA graphs (decode)      batch ≤ 512 captured            batch ≤ ``cuda_graph_max_bs``   batch ≤ its configured sizes
                                                          (160 / 256)
scheduling                decode first, then prefill      a waiting prefill batch runs    in-flight batching: context
                          chunks in the same step         on its own, decodes pause       and generation in one step
attention-DP balancing    —                               —                               context requests held until
                                                                                          every rank has one, or
                                                                                          ``timeout_iters`` iterations
========================  ==============================  ==============================  ==============================

What the simulator uses: the token budget and running-request limit become the replica's ``EngineConfig`` and every
engine is scheduled as vLLM does (decodes first, prefill chunks in the same step). SGLang's separate prefill batches
and TensorRT-LLM's unchunked contexts cost the same GEMM work; what differs — the decodes that wait out a whole
prefill batch, the launch costs of eager steps — is in that engine's learned overheads rather than in the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailscope.engine.gpus import GpuSpec
from tailscope.errors import ConfigError

_GIB = 2**30


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """One serving engine's defaults.

    Attributes:
        name: ``vllm``, ``sglang`` or ``trtllm``.
        label: what to print.
        chunked_prefill: the engine splits long prompts into budget-sized chunks by default.
        cuda_graph_max_batch: largest decode batch replayed from a CUDA graph by default.
        scheduling: one line on how a step is composed.
        source: where the defaults are documented.
        attention_dp_balance: with attention DP, a context request waits for every rank to have one (or for a
            number of iterations, learned as :attr:`~tailscope.engine.step_terms.Efficiencies.dp_wait`) before it
            is scheduled — TensorRT-LLM's ``attention_dp_config`` balancing, which its wide-attention-DP serving
            recipes turn on.
        kv_of_free_memory: the memory fraction (``--gpu-memory-utilization``) is of what the weights and the
            runtime's reserve leave, all of it for the KV cache — TensorRT-LLM's ``KvCacheConfig.
            free_gpu_memory_fraction`` (0.9 by default) — rather than of all the GPU's memory for weights, KV cache
            and reserve together (vLLM's ``gpu_memory_utilization``, SGLang's ``mem_fraction_static``). Where the
            weights nearly fill the GPU the two differ by much: DeepSeek-V3 in FP8 on four B200s keeps 24,498 KV
            tokens at 0.9 of all memory and 517,113 at 0.9 of the free memory (the trained step model's reserve).
    """

    name: str
    label: str
    chunked_prefill: bool
    cuda_graph_max_batch: int
    scheduling: str
    source: str
    attention_dp_balance: bool = False
    kv_of_free_memory: bool = False

    def limits(self, gpu: GpuSpec) -> tuple[int, int]:
        """Default ``(running requests at most, tokens per step)`` on ``gpu``."""
        mem = gpu.memory_bytes
        if self.name == "vllm":
            if mem >= 70 * _GIB and not gpu.id.startswith("a100"):
                return 1024, 8192
            return 256, 2048
        if self.name == "sglang":
            return 1024, 16384 if mem >= 160 * _GIB else 8192
        return 2048, 8192


PROFILES: dict[str, EngineProfile] = {
    "vllm": EngineProfile(
        "vllm",
        "vLLM (V1 engine)",
        chunked_prefill=True,
        cuda_graph_max_batch=512,
        scheduling="decodes first, then prefill chunks up to the token budget in the same step (FCFS)",
        source="vLLM EngineArgs.get_batch_defaults; CompilationConfig cudagraph capture sizes (≤ 512)",
    ),
    "sglang": EngineProfile(
        "sglang",
        "SGLang",
        chunked_prefill=True,
        cuda_graph_max_batch=256,
        scheduling="waiting prefills run as their own batch (up to chunked_prefill_size tokens), decodes pause",
        source="SGLang ServerArgs: chunked_prefill_size and cuda_graph_max_bs chosen by GPU memory",
    ),
    "trtllm": EngineProfile(
        "trtllm",
        "TensorRT-LLM",
        chunked_prefill=False,
        cuda_graph_max_batch=128,
        scheduling="in-flight batching: context and generation requests in one step, contexts unchunked",
        source="TensorRT-LLM LLM API / trtllm-serve defaults (max_num_tokens 8192, max_batch_size 2048; "
        "DecodeCudaGraphConfig: max_batch_size 128 when none is given; AttentionDpConfig: timeout_iters 50; "
        "KvCacheConfig: free_gpu_memory_fraction 0.9 of the memory left after the weights)",
        attention_dp_balance=True,
        kv_of_free_memory=True,
    ),
}

ENGINES = tuple(PROFILES)


def engine_profile(name: str) -> EngineProfile:
    """The profile called ``name``.

    Raises:
        ConfigError: naming ``--engine`` and the choices.
    """
    try:
        return PROFILES[name.lower()]
    except KeyError:
        raise ConfigError(f"--engine {name!r}: use one of {', '.join(PROFILES)}") from None
