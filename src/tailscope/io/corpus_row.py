"""A calibration corpus row (:mod:`tailscope.io.corpus`) and its deployment: what the reader makes of a CSV record,
what the fit and cross-validation take, and the ``tailscope sim`` flags that run it."""

from __future__ import annotations

from dataclasses import dataclass

from tailscope.engine.fit import corpus_kv_fraction
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.launch import NOT_SET, LaunchSettings


@dataclass(frozen=True, slots=True)
class PoolDeployment:
    """One pool of identical workers (an aggregated deployment is one pool).

    Attributes:
        gpus: GPUs per worker.
        tp: tensor parallelism of attention within one attention-DP rank (``gpus = tp × attention_dp``).
        attention_dp: attention data-parallel ranks per worker (each schedules its own batch; MoE layers span all).
        ep: expert parallelism (experts spread over ``ep`` GPUs; the rest of the worker's GPUs split each expert).
        workers: workers in the pool.
        batch: requests per DP rank as recorded (None = not recorded).
    """

    gpus: int
    tp: int
    attention_dp: int
    ep: int
    workers: int = 1
    batch: int | None = None


@dataclass(frozen=True, slots=True)
class CorpusRow:
    """One measurement with its normalised deployment.

    Attributes:
        id: the corpus row id.
        line: line in the CSV (for messages).
        engine / engine_version: ``vllm``, ``sglang`` or ``trtllm`` and its version string.
        model: the Hugging Face id (a catalog alias).
        system: the GPU system name (a catalog alias).
        precision: weight precision (``bf16``, ``fp8``, ``fp4``, ``mxfp4``, ``int4``), the checkpoint's own filled in.
        kv_dtype: KV-cache precision assumed (rule 6).
        mode: ``agg`` or ``disagg``.
        isl / osl / concurrency: input tokens, output tokens, closed-loop clients.
        agg / prefill / decode: the pools (``agg`` for aggregated rows, ``prefill`` and ``decode`` for disaggregated).
        ttft_ms / tpot_ms: measured means.
        workers: where the pools' worker counts come from — ``recorded`` (aggregated rows, and disaggregated rows
            that record them), ``duplicate`` (copied from a recorded row with the same measurement, rule 5 a) or
            ``imputed`` (rule 5 b), or ``recipe`` (rule 10).
        spec: speculative decoding of the run as its public recipe states it (rule 10): ``none``, ``mtp`` or
            ``unknown``; empty where no recipe is known (most rows: none was used).
        spec_draft: an ``mtp`` run's draft tokens where its recipe names them (0: none, or not known).
        launch: the scheduler settings the run's launch script gave the server (rule 10; none where it set none,
            or no script is known).
    """

    id: str
    line: int
    engine: str
    engine_version: str
    model: str
    system: str
    precision: str
    kv_dtype: str
    mode: str
    isl: int
    osl: int
    concurrency: int
    agg: PoolDeployment | None
    prefill: PoolDeployment | None
    decode: PoolDeployment | None
    ttft_ms: float
    tpot_ms: float
    workers: str = "recorded"
    spec: str = ""
    spec_draft: int = 0
    launch: LaunchSettings = NOT_SET

    @property
    def config_key(self) -> tuple[str, str, str, str, str]:
        """The configuration this row belongs to: (model, system, engine, precision, mode)."""
        return (self.model, self.system, self.engine, self.precision, self.mode)

    def spec_accept(self) -> float:
        """The draft-token acceptance the committed fit learned for this row's engine and precision (what an MTP
        run is simulated with)."""
        from tailscope.engine.step_model import precision_class
        from tailscope.engine.step_params import learned_efficiencies

        return learned_efficiencies(self.engine, precision_class(self.precision, resolve_gpu(self.system))).spec_accept

    def sim_flags(self) -> list[str]:
        """``tailscope sim`` flags that run this row's deployment and workload."""
        flags = [
            "--model",
            self.model,
            "--gpu",
            self.system,
            "--engine",
            self.engine,
            "--weights-dtype",
            self.precision,
            "--kv-dtype",
            self.kv_dtype,
            "--gpu-memory-utilization",
            f"{corpus_kv_fraction(self.engine):g}",
        ]
        if self.agg is not None:
            flags += _pool_flags(self.agg)
            flags += ["--replicas", str(self.agg.workers)]
        else:
            assert self.prefill is not None
            assert self.decode is not None
            flags += ["--disagg", f"prefill={_pool_text(self.prefill)},decode={_pool_text(self.decode)}"]
        if self.spec_draft:
            # an MTP run (rule 10): its draft length, and the acceptance the corpus' MTP runs were fitted with
            flags += ["--spec-draft", str(self.spec_draft), "--spec-accept", f"{self.spec_accept():.3g}"]
        flags += self.launch.sim_flags()  # the launch script's scheduler settings (rule 10)
        flags += [
            "--concurrency",
            str(self.concurrency),
            "--input-tokens",
            str(self.isl),
            "--output-tokens",
            str(self.osl),
        ]
        return flags


def _pool_text(p: PoolDeployment) -> str:
    """A disaggregated pool as ``--disagg`` takes it: ``WORKERSxGPUS`` and its attention-DP ranks and expert
    parallelism where they are more than one."""
    return (
        f"{p.workers}x{p.gpus}"
        + (f":dp{p.attention_dp}" if p.attention_dp > 1 else "")
        + (f":ep{p.ep}" if p.ep > 1 else "")
    )


def _pool_flags(p: PoolDeployment) -> list[str]:
    out = ["--tp", str(p.tp)]
    if p.attention_dp > 1:
        out += ["--attention-dp", str(p.attention_dp)]
    if p.ep > 1:
        out += ["--ep", str(p.ep)]
    return out
