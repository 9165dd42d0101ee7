"""A deployment: identical replicas of one model behind a router, optionally autoscaled."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tailscope.engine.autoscaler import AutoscalePolicy
from tailscope.engine.calibration import BUILTIN, Calibration, Efficiency
from tailscope.engine.disagg import DisaggSpec, KvTransfer, kv_link_bytes_per_s
from tailscope.engine.engine_config import EngineSettings
from tailscope.engine.engine_profiles import engine_profile
from tailscope.engine.gpus import GpuSpec
from tailscope.engine.models import ModelArch
from tailscope.engine.perf import StepModel, StepTimeModel
from tailscope.engine.replica import EngineConfig, Replica
from tailscope.engine.router import ROUTERS
from tailscope.engine.speculative import SpecDecode, SpeculativeStepModel
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.step_terms import Efficiencies, Parallelism
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
        spec: speculative decoding (draft length, acceptance rate, draft cost); None = off.
        draft_model: the draft model when ``spec`` names one (priced on the same GPUs and TP).
        disagg: prefill and decode pools (then ``replicas`` is ignored, and ``tp``/``attention_dp``/``ep`` describe
            a pool only as :meth:`pool_parallelism` says); None = aggregated.
        dp_balance_iters: the attention-DP balancing's timeout in iterations (:class:`EngineSettings`; None: the
            engine's learned wait).
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
    spec: SpecDecode | None = None
    draft_model: ModelArch | None = None
    disagg: DisaggSpec | None = None
    dp_balance_iters: int | None = None

    @classmethod
    def from_settings(
        cls,
        settings: EngineSettings,
        model: ModelArch,
        gpu: GpuSpec,
        calibration: Calibration,
        *,
        model_id: str,
        prefix_caching: bool = True,
        **more: Any,
    ) -> ClusterSpec:
        """The deployment of ``model`` on ``gpu`` under the engine ``settings``: the one construction ``tailscope
        serve`` (one replica) and ``tailscope sim`` share, so a served replica behaves like a simulated one.

        The dtypes are checked, the scheduler limits and KV blocks resolved (:func:`replica_engine_config`: a twin's
        own limits and KV geometry unless a flag overrides them), the spec validated and the model checked to fit.

        Args:
            settings: ``tp``, dtypes, scheduler limits, ``gpu_memory_utilization``, ``backend``, ``ep``,
                ``kv_offload_gib``, speculative decoding (the files they name already read into ``gpu`` and
                ``calibration``; the draft model, when named, passed resolved as ``draft_model``).
            model_id: the id the user gave (catalog id or config path), for calibration lookups and descriptions.
            prefix_caching: the prefix cache flag (a twin whose server ran without it stays without).
            more: other fields (``replicas``, ``router``, ``disagg``, …).

        Raises:
            ConfigError: a bad dtype, limit or combination, naming the flag.
            PlanError: the model does not fit on the GPU (or on a worker of a disaggregated pool).
        """
        settings.check_dtypes()
        if settings.dp_balance_iters is not None and settings.dp_balance_iters < 0:
            raise ConfigError(f"--attention-dp-balance-iters must be ≥ 0 (got {settings.dp_balance_iters})")
        engine = replica_engine_config(
            gpu,
            calibration,
            backend=settings.backend,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            prefix_caching=prefix_caching,
            kv_offload_gib=settings.kv_offload_gib,
            # TensorRT-LLM batches its prompts this way, and SGLang skips receiving, only without attention DP
            batch_wait=(settings.batch_wait_iters, settings.batch_wait_ratio)
            if int(more.get("attention_dp", 1)) == 1
            else (0, 0.0),
            recv_interval=settings.recv_interval if int(more.get("attention_dp", 1)) == 1 else 1,
        )
        spec = cls(
            model=model,
            gpu=gpu,
            tp=settings.tp,
            weights_dtype=settings.weights_dtype,
            kv_dtype=settings.kv_dtype,
            engine=engine,
            calibration=calibration,
            model_id=model_id,
            backend=settings.backend,
            ep=settings.ep,
            spec=settings.speculative(),
            dp_balance_iters=settings.dp_balance_iters,
            **more,
        ).validate()
        spec.check_fits()
        return spec

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
        if self.spec is not None:
            self.spec.validate()
        if self.disagg is not None:
            if self.autoscale is not None:
                raise ConfigError("--disagg with --autoscale: autoscaling disaggregated pools is not simulated")
            if self.calibration.twin is not None:
                raise ConfigError(
                    "--disagg with a digital twin: the twin was measured on an aggregated server; "
                    "drop --calibration or --disagg"
                )
        return self

    def engine_config(self) -> EngineConfig:
        """The scheduler limits and KV blocks of a replica: ``engine``, or the defaults (a twin's own, else the
        backend's for the GPU)."""
        if self.engine is not None:
            return self.engine
        return replica_engine_config(self.gpu, self.calibration, backend=self.backend)

    def check_fits(self) -> None:
        """Raise PlanError when the model's weights leave no room for KV cache on a replica (on a worker of either
        pool when disaggregated)."""
        util = self.engine_config().gpu_memory_utilization
        pools = (None,) if self.disagg is None else ("prefill", "decode")
        for pool in pools:
            self.perf(pool).kv_capacity_tokens(util)

    def pool_parallelism(self, pool: str | None = None) -> Parallelism:
        """The parallelism of one worker's rank: the deployment's own (``pool`` None), or a disaggregated pool's —
        its ``:dpN``/``:epN`` where ``--disagg`` gives them; else, when the pool's worker has the deployment's
        ``tp × attention_dp`` GPUs, the deployment's attention-DP and expert parallelism; else plain tensor
        parallelism over the worker.

        Raises:
            ConfigError: a pool's ``dp`` or ``ep`` does not fit its worker (naming ``--disagg``).
        """
        own = Parallelism(self.tp, self.attention_dp, self.ep)
        d = self.disagg
        if pool is None or d is None:
            return own
        width, dp, ep = (
            (d.prefill_tp, d.prefill_dp, d.prefill_ep) if pool == "prefill" else (d.decode_tp, d.decode_dp, d.decode_ep)
        )
        if not dp and not ep:
            return own if width == self.tp * self.attention_dp else Parallelism(width)
        dp = dp or 1
        par = Parallelism(width // dp, dp, ep or 1)
        try:
            return par.validate()
        except ConfigError as exc:
            raise ConfigError(f"--disagg {d.label()}: the {pool} workers' {exc}") from exc

    def ranks(self, pool: str) -> int:
        """Ranks of a disaggregated pool that schedule their own batches: workers × attention-DP ranks."""
        d = self.disagg
        if d is None:
            raise ConfigError("no --disagg pools")
        workers = d.prefill_workers if pool == "prefill" else d.decode_workers
        return workers * self.pool_parallelism(pool).attention_dp

    def perf(self, pool: str | None = None) -> StepModel:
        """The step model of one rank — of the deployment's replica, or of a disaggregated ``pool``'s workers
        (``"prefill"``, ``"decode"``) — with speculative decoding when ``spec`` is set."""
        base = self._base_perf(pool)
        if self.spec is None:
            return base
        draft = None
        if self.draft_model is not None:
            draft = TrainedStepModel(
                self.draft_model,
                self.gpu,
                Parallelism(self.pool_parallelism(pool).tp),
                engine=self.backend,
                kv_dtype=self.kv_dtype,
            )
        return SpeculativeStepModel(base, self.spec, draft)

    def kv_transfer(self) -> KvTransfer:
        """The KV transfer between a prefill and a decode worker of ``disagg``."""
        d = self.disagg
        if d is None:
            raise ConfigError("no --disagg pools: there is no KV transfer")
        link = kv_link_bytes_per_s(self.gpu, d.prefill_tp, d.decode_tp)
        perf = self._base_perf("decode")
        eff = perf.efficiency if isinstance(perf, TrainedStepModel) else Efficiencies()
        return KvTransfer(float(self.model.kv_bytes_per_token(self.kv_dtype)), link, eff)

    def _base_perf(self, pool: str | None = None) -> StepModel:
        if pool is None and self.calibration.twin is not None:
            from tailscope.engine.twin_step import TwinStepModel

            return TwinStepModel(self.calibration.twin)
        par = self.pool_parallelism(pool)
        if self.calibration.has_overrides:
            eff = self.calibration.efficiency(self.gpu.id, self.model_id or self.model.name)
            return StepTimeModel(
                self.model, self.gpu, tp=par.tp, weights_dtype=self.weights_dtype, kv_dtype=self.kv_dtype,
                efficiency=eff,
            )  # fmt: skip
        return TrainedStepModel(
            self.model, self.gpu, par, engine=self.backend, weights_dtype=self.weights_dtype, kv_dtype=self.kv_dtype,
            dp_balance_iters=self.dp_balance_iters,
        )  # fmt: skip

    def _describe_pools(self) -> dict[str, Any]:
        assert self.disagg is not None
        doc = _picked(self.disagg, (*DisaggSpec.__dataclass_fields__, "gpus"))
        for pool in ("prefill", "decode"):
            doc[f"{pool}_parallelism"] = _pool_doc(self.pool_parallelism(pool), self.ranks(pool))
        return doc

    def new_replica(self, perf: StepModel | None = None) -> Replica:
        return Replica(perf or self.perf(), self.engine_config())

    def describe(self) -> dict[str, Any]:
        """Settings as stored with a sim run (a disaggregated deployment's step model and KV figures: its decode
        workers'; ``disagg`` has each pool's parallelism as simulated)."""
        perf = self.perf(None if self.disagg is None else "decode")
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
            "efficiency": _picked(perf.eff, Efficiency.__dataclass_fields__),
            "spec_decode": None
            if self.spec is None
            else {
                **_picked(self.spec, ("draft_tokens", "acceptance", "tokens_per_step", "draft_model")),
                "draft_cost": None if self.draft_model is not None else self.spec.draft_cost,
            },
            "disagg": None if self.disagg is None else self._describe_pools(),
            "kv_offload_gib": cfg.kv_offload_gib,
            "batch_wait": None
            if not (cfg.batch_wait_iters and cfg.batch_wait_ratio)
            else {"iters": cfg.batch_wait_iters, "ratio": cfg.batch_wait_ratio},
            "recv_interval": cfg.recv_interval,
            "dp_balance_iters": self.dp_balance_iters,
            "autoscale": None
            if self.autoscale is None
            else _picked(self.autoscale, self.autoscale.__dataclass_fields__),
        }


def _pool_doc(par: Parallelism, ranks: int) -> dict[str, int]:
    return {"tp": par.tp, "attention_dp": par.attention_dp, "ep": par.ep, "ranks": ranks}


def replica_engine_config(
    gpu: GpuSpec,
    calibration: Calibration,
    *,
    backend: str = "vllm",
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    gpu_memory_utilization: float = 0.9,
    prefix_caching: bool = True,
    kv_offload_gib: float = 0.0,
    batch_wait: tuple[int, float] = (0, 0.0),
    recv_interval: int = 1,
) -> EngineConfig:
    """The scheduler limits and KV blocks of one replica, validated; ``None`` limits take the defaults.

    Without a twin the defaults are the backend's for the GPU, and an unset ``max_num_batched_tokens`` is raised to
    ``max_num_seqs`` (as vLLM does). A digital twin carries the measured server's own limits, block size, number of
    blocks and prefix caching: they apply unless a limit is given here, and prefix caching stays on only when both
    the server and ``prefix_caching`` have it.

    Raises:
        ConfigError: a limit out of range, naming its flag.
    """
    twin = calibration.twin
    block_size, num_blocks = 16, None
    if twin is not None:
        f = twin.facts
        default_seqs, default_tokens = f.max_num_seqs, f.max_num_batched_tokens
        block_size, num_blocks = f.block_size, f.num_blocks
        prefix_caching = prefix_caching and f.enable_prefix_caching
    else:
        default_seqs, default_tokens = engine_profile(backend).limits(gpu)
    seqs = max_num_seqs or default_seqs
    return EngineConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=max_num_batched_tokens or max(default_tokens, seqs),
        block_size=block_size,
        gpu_memory_utilization=gpu_memory_utilization,
        enable_prefix_caching=prefix_caching,
        num_blocks=num_blocks,
        kv_offload_gib=kv_offload_gib,
        batch_wait_iters=batch_wait[0],
        batch_wait_ratio=batch_wait[1],
        recv_interval=recv_interval,
    ).validate()


def _picked(obj: object, names: Iterable[str]) -> dict[str, Any]:
    """``{name: obj.name}`` for each of ``names`` (a block of :meth:`ClusterSpec.describe`), in their order."""
    return {k: getattr(obj, k) for k in names}
