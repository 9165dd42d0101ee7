"""The physics of one engine step, split from the learned coefficients: per-operation roofline terms.

A deployment — a model (:class:`~tailscope.engine.models.ModelArch`) on GPUs of one kind
(:class:`~tailscope.engine.gpus.GpuSpec`) with tensor parallelism ``tp``, attention data parallelism ``adp`` and expert
parallelism ``ep`` (``G = tp × adp`` GPUs per worker, each expert split over ``G / ep`` of them) — is reduced to the
work one step does per GPU of one attention-DP rank, as a function of what the step carries:

=========  ============================================  ==========================================================
operation  compute (FLOP per GPU)                        memory or link (bytes per GPU)
=========  ============================================  ==========================================================
dense      2 · P_dense · T / tp                          W_dense / tp                                 (once per step)
LM head    2 · V · H · n_logits / tp                     V · H · 2 / tp
experts    2 · k · P_expert · (adp · T) / G              L_moe · E/ep · (1 − (1 − k/E)^(adp·T)) · W_expert · ep / G
attention  c_dec · Σ ctx (decode) + c_pf · Σ c·(p+c/2)   kv · (Σ ctx + Σ(p + c) + T) / kv_split + linear state
comm       —                                             TP all-reduce: 2 L per step, 2(tp−1)/tp · 2H bytes/token;
                                                         EP all-to-all (adp > 1): 2 L_moe per step, 3kH bytes/token
=========  ============================================  ==========================================================

``P_dense`` counts attention projections, dense MLP layers and shared experts; ``T`` the step's tokens on this rank.
Experts see the tokens of all ``adp`` ranks; only the experts those tokens reach are read. Attention layers are
charged per kind: full layers over the whole context, sliding layers capped at the window, linear-attention layers
(Qwen3.5) read and write a fixed state per sequence. MLA decodes in the absorbed form (attention over the 512 + 64
latent: ``c_dec = 2 · heads · (2 · kv_lora + rope)`` per context token and layer) and prefills in the expanded form
(``c_pf = 2 · heads · (qk_nope + rope + v_head)``); its latent KV is replicated across tensor-parallel ranks, GQA KV
is split over ``min(tp, kv_heads)``.

:class:`StepTerms` holds these per-GPU quantities (no efficiencies). :func:`coefficients` divides them by the
achieved rates — peak × learned efficiency — into seconds per unit of work (:class:`StepCoefficients`), and
:func:`step_seconds` adds the operations' rooflines::

    step = Σ_op max(compute_op / (peak_op · eff_op), bytes_op / (HBM · eff_mem))
         + n_collectives · latency + comm_bytes / (link · eff_comm)
         + step_overhead + layer_overhead · L + matmul_overhead · M + moe_layer_overhead · L_moe · E / 256
         + seq_overhead · sequences + prefill_layer_overhead · L · chunks

where ``M`` counts the weight matmuls of a forward pass (:attr:`~tailscope.engine.models.ModelArch.layer_matmuls`:
4 a Llama layer, 5 a gpt-oss or Qwen3-MoE layer, 11 a DeepSeek MoE layer with MLA and a shared expert) — each a
kernel with a floor that a small batch does not shrink — and the MoE layers' routing, token permutation and dispatch
scale with their ``E`` routed experts (128 for gpt-oss, 256 for DeepSeek, 512 for Qwen3.5).

Every function here is plain arithmetic on floats *or* numpy arrays (the ``maximum`` argument is ``max`` or
``numpy.maximum``): the simulator calls it with floats for one step, the fit with arrays over thousands of corpus
rows, and both get the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from tailscope.engine.gpus import GpuSpec
from tailscope.engine.models import EXPERT_ONLY_DTYPES, ModelArch, dtype_bytes
from tailscope.errors import ConfigError

Num = Any  # float or numpy.ndarray: the arithmetic below is written for both


def compute_dtype(weights_dtype: str) -> str:
    """Tensor-core precision the GEMMs run at for ``weights_dtype`` (weight-only INT4 dequantises to BF16)."""
    w = weights_dtype.lower()
    if w in ("fp8", "int8"):
        return "fp8"
    if w in ("fp4", "mxfp4"):
        return "fp4"
    return "bf16"


@dataclass(frozen=True, slots=True)
class Parallelism:
    """How one worker spreads the model over its GPUs.

    Attributes:
        tp: tensor parallelism of attention and dense layers within one attention-DP rank.
        attention_dp: attention data-parallel ranks (each schedules its own requests; MoE layers span them all).
        ep: expert parallelism; each expert is split over ``gpus / ep`` GPUs.
    """

    tp: int = 1
    attention_dp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.attention_dp

    def validate(self) -> Parallelism:
        if self.tp < 1:
            raise ConfigError(f"--tp must be ≥ 1 (got {self.tp})")
        if self.attention_dp < 1:
            raise ConfigError(f"--attention-dp must be ≥ 1 (got {self.attention_dp})")
        if self.ep < 1 or self.gpus % self.ep:
            raise ConfigError(
                f"--ep {self.ep} must divide the worker's GPUs (tp × attention-dp = {self.gpus}); experts are "
                "spread over ep GPUs and each split over the rest"
            )
        return self


@dataclass(frozen=True, slots=True)
class StepTerms:
    """Per-GPU work of one attention-DP rank's step, before efficiencies (see the module docstring).

    Attributes:
        dense_flops_tok: dense GEMM FLOPs per token (attention projections, dense MLPs, shared experts).
        dense_bytes: dense weight bytes read once per step.
        head_flops_tok / head_bytes: LM head FLOPs per logit token and its weight bytes.
        moe_flops_tok: expert FLOPs per token of this rank (all ranks' tokens are spread over all GPUs).
        moe_bytes_all: bytes of this GPU's experts over all MoE layers (all touched).
        moe_frac: k / E (0 for dense models): a token reaches an expert with this probability.
        moe_tok_mult: tokens the experts see per token of this rank (the attention-DP ranks).
        attn_dec_flops: attention FLOPs per decode context token and layer.
        attn_pf_flops: attention FLOPs per prefill (query, key) pair and layer.
        kv_bytes: KV bytes per token and layer read or written by this GPU.
        lin_bytes_seq: linear-attention state bytes read and written per sequence per step.
        full_layers / sliding_layers / window / kv_layers / layers: layer counts and the sliding window (0 = none).
        layer_matmuls: weight matmuls of a forward pass over all layers.
        routed_layers: MoE layers, each weighted by its routed experts / 256.
        collectives: collective operations per step (their latency is paid per step).
        comm_bytes_tok: bytes each GPU sends per token of the step, counted at ``link`` (a tensor-parallel
            all-reduce over more GPUs than one NVLink domain runs at :meth:`~tailscope.engine.gpus.GpuSpec.
            allreduce_gbps`, and its bytes count for that much fewer).
        scaleout_collectives: those of the collectives whose group spans more GPUs than one NVLink domain (their
            latency is the scale-out network's).
        dense_peak / moe_peak / attn_peak: tensor-core peaks of dense GEMMs, expert GEMMs (the weights' compute
            precision; expert-only formats keep dense GEMMs at BF16) and attention and the LM head (BF16), FLOP/s.
        hbm / link: memory bandwidth and one GPU's own link for a collective over the worker's GPUs, bytes/s.
    """

    dense_flops_tok: float
    dense_bytes: float
    head_flops_tok: float
    head_bytes: float
    moe_flops_tok: float
    moe_bytes_all: float
    moe_frac: float
    moe_tok_mult: float
    attn_dec_flops: float
    attn_pf_flops: float
    kv_bytes: float
    lin_bytes_seq: float
    full_layers: float
    sliding_layers: float
    window: float
    kv_layers: float
    layers: float
    layer_matmuls: float
    routed_layers: float
    collectives: float
    comm_bytes_tok: float
    dense_peak: float
    moe_peak: float
    attn_peak: float
    hbm: float
    link: float
    scaleout_collectives: float = 0.0


def step_terms(
    model: ModelArch,
    gpu: GpuSpec,
    par: Parallelism,
    *,
    weights_dtype: str | None = None,
    kv_dtype: str = "bf16",
) -> StepTerms:
    """The per-GPU work of ``model`` on ``gpu`` with ``par`` (pure; no efficiencies)."""
    par.validate()
    wd = (weights_dtype or model.default_weights_dtype).lower()
    expert_b = dtype_bytes(wd, what="weights dtype")
    expert_only = wd in EXPERT_ONLY_DTYPES and model.is_moe
    dense_b = 2.0 if expert_only else expert_b
    tp, adp, ep, g = par.tp, par.attention_dp, par.ep, par.gpus
    h = model.hidden
    # dense parameters a token multiplies through (attention projections + dense MLPs + shared experts + norms)
    expert_params = model.expert_params_per_layer
    routed_active = model.moe_layers * model.active_experts * expert_params
    dense_params = model.body_params - routed_active
    head_params = model.vocab * h
    moe_flops_tok = 2.0 * model.moe_layers * model.active_experts * expert_params * adp / g if model.is_moe else 0.0
    moe_bytes_all = model.moe_layers * model.experts * expert_params * expert_b / g
    # attention
    if model.is_mla:
        dec = 2.0 * model.heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
        pf = 2.0 * model.heads * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim)
        kv_split = 1
    else:
        dec = pf = 4.0 * model.heads * model.head_dim
        kv_split = max(1, min(tp, model.kv_heads))
    head_split = max(1, min(tp, model.heads))
    kv_layer = model.kv_bytes_per_token(kv_dtype) / max(1, model.kv_layers) / kv_split
    lin = 2.0 * model.linear_state_bytes_per_seq() / max(1, min(tp, model.linear_value_heads or 1))
    # communication: TP all-reduce after attention and MLP; EP all-to-all (dispatch + combine) with attention DP
    coll = 0.0
    scaleout = 0.0  # collectives whose group leaves the NVLink domain
    comm_tok = 0.0
    # each collective's bytes are priced at its own bandwidth and summed as bytes at ``link`` (one GPU's own link
    # for a collective over the worker's GPUs), so that one learned efficiency ``comm`` applies to all of them
    link = gpu.link_gbps(g) * 1e9
    if tp > 1:
        coll += 2 * model.layers
        scaleout += 2 * model.layers if tp > gpu.nvlink_domain else 0.0
        ring = 2 * model.layers * 2.0 * (tp - 1) / tp * h * 2.0
        comm_tok += ring * link / (gpu.allreduce_gbps(tp) * 1e9)
    if adp > 1 and model.is_moe:
        coll += 2 * model.moe_layers
        scaleout += 2 * model.moe_layers if g > gpu.nvlink_domain else 0.0
        spread = (ep - 1) / ep if ep > 1 else (g - 1) / g
        if g > gpu.nvlink_domain:
            # an all-to-all across domains: the share bound for other domains crosses this GPU's NIC (the share
            # for its own domain moves over NVLink at the same time, and in less time)
            spread *= (g - gpu.nvlink_domain) / (g - 1)
        comm_tok += model.moe_layers * model.active_experts * h * 3.0 * spread / tp
    cd = compute_dtype(wd)
    return StepTerms(
        dense_flops_tok=2.0 * dense_params / tp,
        dense_bytes=dense_params * dense_b / tp,
        head_flops_tok=2.0 * head_params / tp,
        head_bytes=head_params * 2.0 / tp,
        moe_flops_tok=moe_flops_tok,
        moe_bytes_all=moe_bytes_all,
        moe_frac=model.active_experts / model.experts if model.is_moe else 0.0,
        moe_tok_mult=float(adp),
        attn_dec_flops=dec / head_split,
        attn_pf_flops=pf / head_split,
        kv_bytes=kv_layer,
        lin_bytes_seq=lin,
        full_layers=float(model.full_layers),
        sliding_layers=float(model.sliding_layers),
        window=float(model.sliding_window or 0),
        kv_layers=float(model.kv_layers),
        layers=float(model.layers),
        layer_matmuls=float(model.layer_matmuls),
        routed_layers=float(model.moe_layers) * model.experts / 256.0,
        collectives=coll,
        comm_bytes_tok=comm_tok,
        scaleout_collectives=scaleout,
        dense_peak=gpu.peak_flops("bf16" if expert_only else cd),
        moe_peak=gpu.peak_flops(cd),
        attn_peak=gpu.peak_flops("bf16"),
        hbm=gpu.hbm_gbps * 1e9,
        link=link,
    )


@dataclass(frozen=True, slots=True)
class Efficiencies:
    """The learned part of the step model: achieved fractions of the peaks and the fixed costs.

    Attributes:
        gemm: fraction of the GEMM peak (at the weights' compute precision) in dense GEMMs.
        moe: fraction of that peak in grouped expert GEMMs.
        attn: fraction of the BF16 peak in attention kernels.
        mem: fraction of HBM bandwidth in memory-bound work.
        comm: fraction of the link bandwidth in collectives.
        comm_lat_us: latency of one collective, µs.
        scaleout_lat_us: added latency of a collective whose group spans NVLink domains (the scale-out network), µs.
        step_ms: fixed cost of one step (scheduling, input preparation, launch, sampling), ms.
        layer_us: per layer per step (kernel floors and launches that do not shrink with the work: norms,
            attention, activations), µs.
        matmul_us: per weight matmul per step (:attr:`~tailscope.engine.models.ModelArch.layer_matmuls`: each
            GEMM's floor and launch), µs.
        moe_layer_us: per MoE layer per step on top, at 256 routed experts and in proportion to them (routing over
            every expert, token permutation, expert dispatch), µs.
        prefill_layer_us: per layer and prefill chunk (chunks run outside the decode CUDA graphs: kernel launches,
            attention metadata; charged per chunk so that costs add up the same whether prompts share a step), µs.
        seq_us: per scheduled sequence per step (bookkeeping, sampling, detokenisation), µs.
        frontend_ms: latency before the engine sees a request that requests do not queue for (HTTP, the measuring
            client), ms.
        inflight_us: extra arrival delay per request already in flight on the replica (the API server also streams
            every running request), µs.
        kv_xfer: fraction of the link bandwidth a disaggregated KV transfer achieves.
        kv_xfer_ms: fixed cost of one KV transfer (handshake, allocation on the decode side), ms.
        burst: share of a closed loop's other clients that arrive together with a request (fixed-length loops stay
            partly synchronised); it waits for half of their prefills.
        pd_burst: the same share at a disaggregated deployment's prefill pool, learned apart (no prefill
            interference on the decode side desynchronises those loops).
        token_us: front-end cost per prompt token before the engine sees the request (chat template, tokenisation,
            the request body and its token ids handed to the engine), µs.
        dp_wait: iterations an engine that balances attention-DP ranks (:attr:`~tailscope.engine.engine_profiles.
            EngineProfile.attention_dp_balance`) holds a context request at most while it waits for every rank to
            have one; unused elsewhere.
        sched_iters: iterations of the engine's loop an arriving request waits, on average, before its scheduler
            takes it (SGLang polls its input every ``scheduler_recv_interval`` iterations; the others' input
            pipelines), charged in decode steps.
        spec_accept: per-token acceptance of multi-token-prediction (MTP) drafts in the corpus' speculatively
            decoded runs (:mod:`tailscope.engine.speculative`); used only where a run decodes speculatively.
    """

    gemm: float = 0.6
    moe: float = 0.4
    attn: float = 0.4
    mem: float = 0.75
    comm: float = 0.5
    comm_lat_us: float = 15.0
    scaleout_lat_us: float = 30.0
    step_ms: float = 2.0
    layer_us: float = 20.0
    matmul_us: float = 2.0
    moe_layer_us: float = 10.0
    prefill_layer_us: float = 50.0
    seq_us: float = 20.0
    frontend_ms: float = 30.0
    inflight_us: float = 500.0
    kv_xfer: float = 0.5
    kv_xfer_ms: float = 5.0
    burst: float = 0.05
    pd_burst: float = 0.05
    token_us: float = 1.0
    dp_wait: float = 5.0
    sched_iters: float = 1.0
    spec_accept: float = 0.7

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True, slots=True)
class StepCoefficients:
    """Seconds per unit of work: :class:`StepTerms` divided by achieved rates (floats or arrays)."""

    dense_c: Num  # s per token
    dense_m: Num  # s per step
    head_c: Num  # s per logit token
    head_m: Num  # s per step
    moe_c: Num  # s per token of this rank
    moe_m: Num  # s per step when every local expert is read
    moe_frac: Num
    moe_tok_mult: Num
    attn_dec_c: Num  # s per decode context token·layer
    attn_pf_c: Num  # s per prefill pair·layer
    kv_m: Num  # s per KV token·layer
    lin_m: Num  # s per sequence
    full_layers: Num
    sliding_layers: Num
    window: Num
    kv_layers: Num
    fixed: Num  # s per step: overheads + collective latencies
    prefill_fixed: Num  # s per prefill chunk
    comm_tok: Num  # s per token
    seq: Num  # s per sequence


def coefficients(t: StepTerms | Any, e: Efficiencies | Any) -> StepCoefficients:
    """Combine physics and efficiencies (``t`` and ``e`` may hold arrays of the same length)."""
    bw = t.hbm * e.mem
    return StepCoefficients(
        dense_c=t.dense_flops_tok / (t.dense_peak * e.gemm),
        dense_m=t.dense_bytes / bw,
        head_c=t.head_flops_tok / (t.attn_peak * e.gemm),
        head_m=t.head_bytes / bw,
        moe_c=t.moe_flops_tok / (t.moe_peak * e.moe),
        moe_m=t.moe_bytes_all / bw,
        moe_frac=t.moe_frac,
        moe_tok_mult=t.moe_tok_mult,
        attn_dec_c=t.attn_dec_flops / (t.attn_peak * e.attn),
        attn_pf_c=t.attn_pf_flops / (t.attn_peak * e.attn),
        kv_m=t.kv_bytes / bw,
        lin_m=t.lin_bytes_seq / bw,
        full_layers=t.full_layers,
        sliding_layers=t.sliding_layers,
        window=t.window,
        kv_layers=t.kv_layers,
        fixed=e.step_ms * 1e-3
        + e.layer_us * 1e-6 * t.layers
        + e.moe_layer_us * 1e-6 * t.routed_layers
        + e.matmul_us * 1e-6 * t.layer_matmuls
        + t.collectives * e.comm_lat_us * 1e-6
        + t.scaleout_collectives * e.scaleout_lat_us * 1e-6,
        prefill_fixed=e.prefill_layer_us * 1e-6 * t.layers,
        comm_tok=t.comm_bytes_tok / (t.link * e.comm),
        seq=e.seq_us * 1e-6,
    )


def step_seconds(
    c: StepCoefficients,
    n_dec: Num,
    dec_ctx: Num,
    dec_ctx_slide: Num,
    pf_tokens: Num,
    pf_pairs_full: Num,
    pf_pairs_slide: Num,
    pf_kv_full: Num,
    pf_kv_slide: Num,
    n_pf: Num,
    n_logits: Num,
    maximum: Callable[[Num, Num], Num] = max,
) -> Num:
    """Duration of one step, seconds.

    Args:
        c: the coefficients.
        n_dec: decode sequences (one token each).
        dec_ctx: their KV lengths summed (full-attention context).
        dec_ctx_slide: the same with each sequence capped at the sliding window.
        pf_tokens: prefill tokens (chunks summed).
        pf_pairs_full / pf_pairs_slide: Σ c·(p + (c+1)/2) over chunks (capped at the window for sliding layers).
        pf_kv_full / pf_kv_slide: Σ (p + c) over chunks (capped likewise): KV tokens the chunks read.
        n_pf: prefill chunks.
        n_logits: tokens that produce logits.
        maximum: ``max`` for floats, ``numpy.maximum`` for arrays.
    """
    tokens = n_dec + pf_tokens
    t = maximum(c.dense_c * tokens, c.dense_m) + maximum(c.head_c * n_logits, c.head_m)
    t = t + maximum(c.moe_c * tokens, c.moe_m * (1.0 - (1.0 - c.moe_frac) ** (c.moe_tok_mult * tokens)))
    dec_units = c.full_layers * dec_ctx + c.sliding_layers * dec_ctx_slide
    t = t + maximum(c.attn_dec_c * dec_units, c.kv_m * (dec_units + c.kv_layers * n_dec) + c.lin_m * n_dec)
    pf_units = c.full_layers * pf_pairs_full + c.sliding_layers * pf_pairs_slide
    pf_kv = c.full_layers * pf_kv_full + c.sliding_layers * pf_kv_slide + c.kv_layers * pf_tokens
    t = t + maximum(c.attn_pf_c * pf_units, c.kv_m * pf_kv + c.lin_m * n_pf)
    return t + c.fixed + c.prefill_fixed * n_pf + c.comm_tok * tokens + c.seq * (n_dec + n_pf)


def chunk_sums(chunk: Num, done: Num, window: Num, minimum: Callable[[Num, Num], Num] = min) -> tuple[Num, ...]:
    """``(pairs_full, pairs_slide, kv_full, kv_slide)`` of one prefill chunk of ``chunk`` tokens after ``done``
    (``window`` 0 = no sliding layers; their terms are then unused)."""
    mid = done + (chunk + 1) / 2.0
    w = window + (window == 0)  # no sliding layers: any positive cap (their terms are multiplied by 0)
    return chunk * mid, chunk * minimum(mid, w), done + chunk, minimum(done + chunk, w)
