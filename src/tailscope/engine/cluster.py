"""A deployment: identical replicas of one model behind a router, optionally autoscaled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailscope.engine.autoscaler import AutoscalePolicy
from tailscope.engine.calibration import BUILTIN, Calibration
from tailscope.engine.engine_profiles import engine_profile
from tailscope.engine.gpus import GpuSpec
from tailscope.engine.models import ModelArch
from tailscope.engine.perf import StepModel, StepTimeModel
from tailscope.engine.replica import EngineConfig, Replica
from tailscope.engine.router import ROUTERS
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.step_terms import Parallelism
from tailscope.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """What to simulate.

    Attributes:
        model / gpu / tp: one replica = ``model`` on ``tp`` GPUs of kind ``gpu``.
        weights_dtype / kv_dtype: precisions (None = the checkpoint's own).
        engine: scheduler limits; None = vLLM's defaults for the GPU.
        replicas: replicas at start (the autoscaler's min/max bound it later).
        router: round_robin | least_outstanding | prefix_affinity.
        autoscale: None = fixed replica count.
        calibration: a digital twin, or roofline efficiency overrides (which select the plain roofline,
            :class:`~tailscope.engine.perf.StepTimeModel`); the built-in default is the trained step model.
        backend: serving engine whose learned costs and defaults apply: ``vllm``, ``sglang`` or ``trtllm``.
        ep / attention_dp: expert parallelism and attention data parallelism of a worker (``tp × attention_dp``
            GPUs). The simulator runs each attention-DP rank as a replica of ``tp`` GPUs, so callers give
            ``replicas`` = workers × ``attention_dp``.
    """

    model: ModelArch
    gpu: GpuSpec
    tp: int = 1
    weights_dtype: str | None = None
    kv_dtype: str = "bf16"
    engine: EngineConfig | None = None
    replicas: int = 1
    router: str = "least_outstanding"
    autoscale: AutoscalePolicy | None = None
    calibration: Calibration = field(default=BUILTIN)
    model_id: str = ""
    backend: str = "vllm"
    ep: int = 1
    attention_dp: int = 1

    def validate(self) -> ClusterSpec:
        from_zero = self.autoscale is not None and self.autoscale.min_replicas == 0
        if self.replicas < (0 if from_zero else 1):
            raise ConfigError(
                f"--replicas must be ≥ 1 (got {self.replicas}); 0 only with an autoscale policy of min_replicas 0"
            )
        if self.router not in ROUTERS:
            raise ConfigError(f"router {self.router!r}: use one of {', '.join(ROUTERS)}")
        engine_profile(self.backend)
        Parallelism(self.tp, self.attention_dp, self.ep).validate()
        return self

    def engine_config(self) -> EngineConfig:
        if self.engine is not None:
            return self.engine
        twin = self.calibration.twin
        if twin is not None:
            f = twin.facts
            return EngineConfig(
                max_num_seqs=f.max_num_seqs,
                max_num_batched_tokens=max(f.max_num_batched_tokens, f.max_num_seqs),
                block_size=f.block_size,
                num_blocks=f.num_blocks,
                enable_prefix_caching=f.enable_prefix_caching,
            )
        seqs, tokens = engine_profile(self.backend).limits(self.gpu)
        return EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=tokens)

    def perf(self) -> StepModel:
        if self.calibration.twin is not None:
            from tailscope.engine.twin import TwinStepModel

            return TwinStepModel(self.calibration.twin)
        if self.calibration.has_overrides:
            eff = self.calibration.efficiency(self.gpu.id, self.model_id or self.model.name)
            return StepTimeModel(
                self.model,
                self.gpu,
                tp=self.tp,
                weights_dtype=self.weights_dtype,
                kv_dtype=self.kv_dtype,
                efficiency=eff,
            )
        return TrainedStepModel(
            self.model,
            self.gpu,
            Parallelism(self.tp, self.attention_dp, self.ep),
            engine=self.backend,
            weights_dtype=self.weights_dtype,
            kv_dtype=self.kv_dtype,
        )

    def new_replica(self, perf: StepModel | None = None) -> Replica:
        return Replica(perf or self.perf(), self.engine_config())

    def describe(self) -> dict[str, Any]:
        """Settings as stored with a sim run."""
        perf = self.perf()
        cfg = self.engine_config()
        return {
            "model": self.model_id or self.model.name,
            "gpu": self.gpu.id,
            "tp": self.tp,
            "backend": self.backend,
            "ep": self.ep,
            "attention_dp": self.attention_dp,
            "step_model": type(perf).__name__,
            "weights_dtype": perf.weights_dtype,
            "kv_dtype": perf.kv_dtype,
            "replicas": self.replicas,
            "router": self.router,
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "block_size": cfg.block_size,
            "kv_capacity_tokens": perf.kv_capacity_tokens(cfg.gpu_memory_utilization),
            "calibration": self.calibration.source,
            "efficiency": {
                k: getattr(perf.eff, k)
                for k in (
                    "mfu",
                    "mbu",
                    "step_overhead_ms",
                    "per_seq_overhead_us",
                    "allreduce_latency_us",
                    "allreduce_efficiency",
                    "frontend_ms",
                    "frontend_per_token_us",
                    "frontend_per_inflight_us",
                )
            },
            "autoscale": None
            if self.autoscale is None
            else {k: getattr(self.autoscale, k) for k in self.autoscale.__dataclass_fields__},
        }
