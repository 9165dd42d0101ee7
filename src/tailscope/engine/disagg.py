"""Prefill/decode disaggregation, the step-model side: the two pools' step models and the KV transfer between them.

A disaggregated deployment runs prompts on *prefill workers* and generation on *decode workers*; a request's KV
cache crosses from one to the other after its prefill. The scheduler side (pools, the router between them, the
request's life across them) lives in the simulator's cluster; it needs from the engine model:

* :func:`pool_step_models` — one :class:`~tailscope.engine.step_model.TrainedStepModel` per pool, each with its
  own parallelism (a prefill pool typically runs wide tensor parallelism, a decode pool attention-DP + EP). A
  prefill worker's steps carry prefill chunks only (``mixed_step_ns(prefill, 0, 0, n_logits)``), a decode worker's
  steps decodes only (``decode_step_ns``); the same learned coefficients price both.
* :func:`kv_transfer_seconds` / :meth:`KvTransfer.ns` — how long a prompt's KV takes to reach the decode worker::

      transfer = kv_xfer_ms + tokens · kv_bytes_per_token / (link · min(prefill GPUs, decode GPUs) · kv_xfer)

  ``kv_bytes_per_token`` covers every layer (the MLA latent for DeepSeek-style models); ``link`` is the per-GPU
  NVLink bandwidth when both workers fit one NVLink domain (GB200/GB300 NVL72) and the scale-out network's otherwise
  (one 400 Gb/s NIC per GPU); every GPU of the narrower worker sends or receives its shard in parallel. ``kv_xfer``
  (achieved fraction) and ``kv_xfer_ms`` (fixed cost: handshake, allocation on the decode side) are learned per
  engine with the other coefficients.

The request's TTFT is then front end + wait for a prefill rank + its prefill + the transfer; its TPOT is the
decode pool's step time (:func:`tailscope.engine.closed_loop.disaggregated` solves the closed loop).
"""

from __future__ import annotations

from dataclasses import dataclass

from tailscope.engine.gpus import GpuSpec
from tailscope.engine.models import ModelArch
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.step_terms import Efficiencies, Parallelism


def kv_link_bytes_per_s(gpu: GpuSpec, prefill_gpus: int, decode_gpus: int) -> float:
    """Aggregate bandwidth between one prefill and one decode worker, bytes/s (before efficiency)."""
    same_domain = prefill_gpus + decode_gpus <= gpu.nvlink_domain and gpu.nvlink_domain > 8
    per_gpu = gpu.interconnect_gbps if same_domain else gpu.scaleout_gbps
    return per_gpu * 1e9 * max(1, min(prefill_gpus, decode_gpus))


def kv_transfer_seconds(tokens: float, kv_bytes_per_token: float, link_bytes_per_s: float, eff: Efficiencies) -> float:
    """Seconds to move ``tokens`` of KV (see the module docstring)."""
    return eff.kv_xfer_ms * 1e-3 + tokens * kv_bytes_per_token / (link_bytes_per_s * eff.kv_xfer)


@dataclass(frozen=True, slots=True)
class KvTransfer:
    """The KV transfer of one deployment: ``ns(tokens)`` is what a request of ``tokens`` prompt tokens waits."""

    kv_bytes_per_token: float
    link_bytes_per_s: float
    eff: Efficiencies

    def ns(self, tokens: int) -> int:
        """Nanoseconds to move ``tokens`` tokens of KV from the prefill to the decode worker."""
        return int(kv_transfer_seconds(tokens, self.kv_bytes_per_token, self.link_bytes_per_s, self.eff) * 1e9)


def pool_step_models(
    model: ModelArch,
    gpu: GpuSpec,
    prefill: Parallelism,
    decode: Parallelism,
    *,
    engine: str = "vllm",
    weights_dtype: str | None = None,
    kv_dtype: str = "bf16",
    efficiency: Efficiencies | None = None,
) -> tuple[TrainedStepModel, TrainedStepModel, KvTransfer]:
    """``(prefill pool model, decode pool model, KV transfer)`` for one disaggregated deployment."""
    pre = TrainedStepModel(
        model, gpu, prefill, engine=engine, weights_dtype=weights_dtype, kv_dtype=kv_dtype, efficiency=efficiency
    )
    dec = TrainedStepModel(
        model, gpu, decode, engine=engine, weights_dtype=weights_dtype, kv_dtype=kv_dtype, efficiency=efficiency
    )
    link = kv_link_bytes_per_s(gpu, prefill.gpus, decode.gpus)
    return pre, dec, KvTransfer(float(model.kv_bytes_per_token(kv_dtype)), link, dec.efficiency)


@dataclass(frozen=True, slots=True)
class DisaggSpec:
    """The pools of a disaggregated deployment in the simulator: ``prefill_workers`` workers of ``prefill_tp`` GPUs
    run prompts, ``decode_workers`` workers of ``decode_tp`` GPUs generate; a router in front picks the prefill
    rank, and the decode rank is picked (least outstanding) when the prompt's KV has been transferred.

    A pool's worker may run attention data parallelism and expert parallelism (``prefill_dp``/``prefill_ep``,
    ``decode_dp``/``decode_ep``; ``:dpN:epN`` after the pool in ``--disagg``): ``dp`` ranks of ``tp ÷ dp`` GPUs,
    each scheduling its own batch, with the experts spread over ``ep`` of the worker's GPUs. 0 (not given): the
    deployment's ``--tp × --attention-dp`` worker takes its ``--attention-dp``/``--ep`` when its width is that
    pool's, else plain tensor parallelism (:meth:`~tailscope.engine.cluster.ClusterSpec.pool_parallelism`).
    """

    prefill_workers: int
    prefill_tp: int
    decode_workers: int
    decode_tp: int
    prefill_dp: int = 0
    prefill_ep: int = 0
    decode_dp: int = 0
    decode_ep: int = 0

    @property
    def gpus(self) -> int:
        return self.prefill_workers * self.prefill_tp + self.decode_workers * self.decode_tp

    def label(self) -> str:
        def pool(name: str, workers: int, width: int, dp: int, ep: int) -> str:
            extra = (f":dp{dp}" if dp else "") + (f":ep{ep}" if ep else "")
            return f"{name}={workers}x{width}{extra}"

        return (
            f"{pool('prefill', self.prefill_workers, self.prefill_tp, self.prefill_dp, self.prefill_ep)},"
            f"{pool('decode', self.decode_workers, self.decode_tp, self.decode_dp, self.decode_ep)}"
        )


def parse_disagg(text: str, *, what: str = "--disagg") -> DisaggSpec:
    """``prefill=WORKERSxGPUS[:dpN][:epN],decode=WORKERSxGPUS[:dpN][:epN]`` (``xGPUS`` optional, default 1) →
    :class:`DisaggSpec` (``GPUS`` per worker — its tensor parallelism unless ``dpN`` splits it into attention-DP
    ranks; ``epN`` its expert parallelism; each divides ``GPUS``).

    Raises:
        ConfigError: naming ``what`` and the expected form.
    """
    from tailscope.errors import ConfigError

    form = (
        f"{what} {text!r}: use prefill=WORKERSxGPUS,decode=WORKERSxGPUS (e.g. prefill=2x4,decode=3x1), each pool "
        "optionally with :dpN (attention-DP ranks) and :epN (expert parallelism), e.g. decode=1x8:dp8:ep8"
    )
    pools: dict[str, tuple[int, int, int, int]] = {}
    for part in text.split(","):
        key, sep, val = part.strip().partition("=")
        if not sep or key.strip() not in ("prefill", "decode"):
            raise ConfigError(form)
        shape, *opts = val.strip().lower().split(":")
        n, _, tp = shape.partition("x")
        par = {"dp": 0, "ep": 0}
        given: set[str] = set()
        try:
            workers, width = int(n), int(tp or 1)
            for opt in opts:
                name, number = opt.strip()[:2], opt.strip()[2:]
                if name not in par or name in given:
                    raise ValueError(opt)
                given.add(name)
                par[name] = int(number)
        except ValueError:
            raise ConfigError(form) from None
        if workers < 1 or width < 1:
            raise ConfigError(f"{form}; workers and GPUs must be ≥ 1")
        for name in sorted(given):
            if par[name] < 1 or width % par[name]:
                raise ConfigError(f"{what}: {key.strip()} {name}{par[name]} must divide the worker's {width} GPUs")
        pools[key.strip()] = (workers, width, par["dp"], par["ep"])
    if set(pools) != {"prefill", "decode"}:
        raise ConfigError(form)
    (pw, pt, pd, pe), (dw, dt, dd, de) = pools["prefill"], pools["decode"]
    return DisaggSpec(pw, pt, dw, dt, pd, pe, dd, de)
