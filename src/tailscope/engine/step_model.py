"""The trained step model: per-operation rooflines (:mod:`tailscope.engine.step_terms`) with efficiencies and
overheads learned from 4,255 real serving measurements, per engine and precision class (:mod:`~.step_params`).

:class:`TrainedStepModel` is what ``sim``, ``serve``, ``plan capacity`` and ``plan cost`` use by default. It
implements the :class:`~tailscope.engine.perf.StepModel` protocol the replica scheduler drives, for one
attention-DP rank of a worker (a worker with ``attention_dp`` ranks is simulated as that many replicas whose
expert layers see all ranks' tokens). The coefficients come from, in order: an explicit ``efficiency``, the learned
table for ``(engine, precision class)``, the learned table's engine-wide values for a precision it has not seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from tailscope.engine.calibration import Efficiency
from tailscope.engine.engine_profiles import engine_profile
from tailscope.engine.gpus import GpuSpec
from tailscope.engine.models import EXPERT_ONLY_DTYPES, ModelArch, dtype_bytes
from tailscope.engine.perf import StepBreakdown, kv_capacity_from_memory
from tailscope.engine.step_params import learned_efficiencies
from tailscope.engine.step_terms import (
    Efficiencies,
    Parallelism,
    StepCoefficients,
    coefficients,
    step_seconds,
    step_terms,
)


def precision_class(weights_dtype: str, gpu: GpuSpec | None = None) -> str:
    """The learned coefficients' precision key.

    ``bf16`` (and fp16), ``fp8`` (and int8: W8A8 on the same tensor cores), ``fp4`` (NVFP4 or MXFP4 on FP4 tensor
    cores) or ``int4`` — 4-bit weights multiplied at a higher precision after dequantising: INT4 weight-only, and
    FP4 on a GPU without FP4 tensor cores (gpt-oss's MXFP4 on an H100 runs the same kind of kernel).
    """
    w = weights_dtype.lower()
    if w in ("fp8", "int8"):
        return "fp8"
    if w in ("fp4", "mxfp4"):
        return "fp4" if gpu is None or gpu.fp4_tflops else "int4"
    if w == "int4":
        return "int4"
    return "bf16"


class TrainedStepModel:
    """Step time of one attention-DP rank of a worker (``par.tp`` GPUs; experts over ``par.gpus``).

    Args:
        model / gpu: what runs where.
        par: tensor, attention-data and expert parallelism of the worker.
        engine: ``vllm``, ``sglang`` or ``trtllm`` (selects the learned coefficients).
        weights_dtype / kv_dtype: precisions (None = the checkpoint's own).
        efficiency: coefficients to use instead of the learned ones.
    """

    def __init__(
        self,
        model: ModelArch,
        gpu: GpuSpec,
        par: Parallelism | None = None,
        *,
        engine: str = "vllm",
        weights_dtype: str | None = None,
        kv_dtype: str = "bf16",
        efficiency: Efficiencies | None = None,
        dp_balance_iters: int | None = None,
    ) -> None:
        self.model = model
        self.gpu = gpu
        self.par = (par or Parallelism()).validate()
        self.tp = self.par.tp
        self.engine = engine
        self.weights_dtype = (weights_dtype or model.default_weights_dtype).lower()
        dtype_bytes(self.weights_dtype, what="weights dtype")
        self.kv_dtype = kv_dtype.lower()
        self.precision_class = precision_class(self.weights_dtype, gpu)
        self.efficiency = efficiency or learned_efficiencies(engine, self.precision_class)
        if dp_balance_iters is not None:  # the deployment's own balancing timeout (0: it does not balance)
            self.efficiency = replace(self.efficiency, dp_wait=float(dp_balance_iters))
        self.terms = step_terms(model, gpu, self.par, weights_dtype=self.weights_dtype, kv_dtype=self.kv_dtype)
        self.coeffs: StepCoefficients = coefficients(self.terms, self.efficiency)
        e = self.efficiency
        #: the same figures in the roofline's vocabulary (``sim`` stores them with the run; plans print them)
        self.eff = Efficiency(
            mfu=min(1.0, e.gemm),
            mbu=min(1.0, e.mem),
            step_overhead_ms=e.step_ms + e.layer_us * model.layers / 1e3,
            per_seq_overhead_us=e.seq_us,
            allreduce_latency_us=e.comm_lat_us,
            allreduce_efficiency=min(1.0, e.comm),
            frontend_ms=e.frontend_ms,
            frontend_per_token_us=e.token_us,
            frontend_per_inflight_us=e.inflight_us,
        )
        self.kv_bytes_per_token = model.kv_bytes_per_token(self.kv_dtype)
        self._window = float(model.sliding_window or 0)
        self._front_ns = e.frontend_ms * 1e6 * 2.0
        self._inflight_ns = e.inflight_us * 1e3
        self._token_ns = e.token_us * 1e3
        self._burst = e.burst
        self._pd_burst = e.pd_burst
        #: the engine holds context requests until every attention-DP rank has one (TensorRT-LLM's balancing)
        self._balance = (
            self.par.attention_dp > 1 and engine_profile(engine).attention_dp_balance and dp_balance_iters != 0
        )
        self._prefill_alone: dict[int, float] = {}
        self._decode_ns = self._decode_fast()
        self._mixed_ns = self._mixed_fast()
        wb = self.weights_dtype
        experts = model.moe_layers * model.experts * model.expert_params_per_layer
        routed = experts * dtype_bytes(wb) if model.is_moe else 0.0
        self.weight_bytes_total = model.weight_bytes(wb)
        self._weights_per_gpu = (self.weight_bytes_total - routed) / self.par.tp + routed / self.par.gpus
        if wb in EXPERT_ONLY_DTYPES and not model.is_moe:
            self._weights_per_gpu = self.weight_bytes_total / self.par.tp

    # ---- capacity -------------------------------------------------------------------------------------------
    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, reserve_gb: float | None = None) -> int:
        """Tokens of KV cache one attention-DP rank holds.

        ``capacity = gpu_memory_utilization × memory − weights − reserve`` per GPU (weights: dense parts over
        ``tp``, experts over all the worker's GPUs; reserve 1 GB + 2 % of memory for activations, CUDA graphs and
        communication buffers — the corpus runs DeepSeek-V3 in FP8 on four B200s, which a larger reserve would
        forbid), divided by the KV bytes a token takes on one GPU (MLA latents are replicated across
        tensor-parallel ranks, GQA heads split up to the KV-head count). An engine that sizes its KV cache from the
        free memory (:attr:`~tailscope.engine.engine_profiles.EngineProfile.kv_of_free_memory`: TensorRT-LLM)
        takes the fraction of what the weights and the reserve leave: ``gpu_memory_utilization × (memory − weights
        − reserve)``.

        Raises:
            PlanError: when the weights do not fit.
        """
        return kv_capacity_from_memory(
            self,
            weights_per_gpu=self._weights_per_gpu,
            tp=self.par.tp,
            gpus=str(self.par.gpus),
            more_gpus="--tp (or --ep with --attention-dp)",
            gpu_memory_utilization=gpu_memory_utilization,
            reserve_gb=reserve_gb,
            default_reserve=(1.0e9, 0.02),
            of_free=engine_profile(self.engine).kv_of_free_memory,
        )

    # ---- step time ------------------------------------------------------------------------------------------
    def step_s(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> float:
        """Seconds for one step: ``prefill`` = ``(chunk tokens, tokens already cached)`` per chunk, ``n_decode``
        decodes whose KV lengths sum to ``decode_ctx_sum``; ``n_logits`` defaults to decodes + chunks."""
        w = self._window or 1.0
        tokens = 0
        pf = ps = kf = ks = 0.0
        for c, p in prefill:
            tokens += c
            mid = p + (c + 1) / 2.0
            pf += c * mid
            ps += c * (mid if mid < w else w)
            kf += p + c
            ks += p + c if p + c < w else w
        if n_logits is None:
            n_logits = n_decode + len(prefill)
        slide = decode_ctx_sum if decode_ctx_sum < n_decode * w else n_decode * w
        return float(
            step_seconds(self.coeffs, n_decode, decode_ctx_sum, slide, tokens, pf, ps, kf, ks, len(prefill), n_logits)
        )

    def step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> int:
        """Integer nanoseconds for one step (at least 1)."""
        ns = math.ceil(self.step_s(prefill, n_decode, decode_ctx_sum, n_logits) * 1e9)
        return ns if ns > 1 else 1

    def mixed_step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int
    ) -> int:
        """:meth:`step_ns` with the logit count given (the scheduler's call; :func:`step_seconds` inlined with the
        same float operations in the same order, so the same ns)."""
        return self._mixed_ns(prefill, n_decode, decode_ctx_sum, n_logits)

    def decode_step_ns(self, n_decode: int, decode_ctx_sum: int) -> int:
        """:meth:`step_ns` of a decode-only step (the simulator's hot path: :func:`step_seconds` with the prefill
        terms, which add exactly 0.0, left out — the same float operations in the same order, so the same ns)."""
        return self._decode_ns(n_decode, decode_ctx_sum)

    def _decode_fast(self) -> Callable[[int, int], int]:
        c = self.coeffs
        dense_c, dense_m, head_c, head_m = c.dense_c, c.dense_m, c.head_c, c.head_m
        moe = self.model.is_moe
        moe_c, moe_m, keep, mult = c.moe_c, c.moe_m, 1.0 - c.moe_frac, c.moe_tok_mult
        full, sliding, kv_layers = c.full_layers, c.sliding_layers, c.kv_layers
        attn_c, kv_m, lin_m = c.attn_dec_c, c.kv_m, c.lin_m
        fixed, comm, seq = c.fixed, c.comm_tok, c.seq
        w = self._window or 1.0
        ceil = math.ceil

        def decode_ns(n: int, ctx: int) -> int:
            slide = ctx if ctx < n * w else n * w
            a = dense_c * n
            b = head_c * n
            t = (a if a > dense_m else dense_m) + (b if b > head_m else head_m)
            if moe:
                a = moe_c * n
                b = moe_m * (1.0 - keep ** (mult * n))
                t = t + (a if a > b else b)
            units = full * ctx + sliding * slide
            a = attn_c * units
            b = kv_m * (units + kv_layers * n) + lin_m * n
            t = t + (a if a > b else b)
            ns = ceil((t + fixed + comm * n + seq * n) * 1e9)
            return ns if ns > 1 else 1

        return decode_ns

    def _mixed_fast(self) -> Callable[[Sequence[tuple[int, int]], int, int, int], int]:
        c = self.coeffs
        dense_c, dense_m, head_c, head_m = c.dense_c, c.dense_m, c.head_c, c.head_m
        moe = self.model.is_moe
        moe_c, moe_m, keep, mult = c.moe_c, c.moe_m, 1.0 - c.moe_frac, c.moe_tok_mult
        full, sliding, kv_layers = c.full_layers, c.sliding_layers, c.kv_layers
        attn_c, attn_pf, kv_m, lin_m = c.attn_dec_c, c.attn_pf_c, c.kv_m, c.lin_m
        fixed, pf_fixed, comm, seq = c.fixed, c.prefill_fixed, c.comm_tok, c.seq
        w = self._window or 1.0
        ceil = math.ceil

        def mixed_ns(prefill: Sequence[tuple[int, int]], n: int, ctx: int, logits: int) -> int:
            pf_tokens = 0
            pf = ps = kf = ks = 0.0
            for ch, p in prefill:
                pf_tokens += ch
                mid = p + (ch + 1) / 2.0
                pf += ch * mid
                ps += ch * (mid if mid < w else w)
                kf += p + ch
                ks += p + ch if p + ch < w else w
            n_pf = len(prefill)
            slide = ctx if ctx < n * w else n * w
            tokens = n + pf_tokens
            a = dense_c * tokens
            b = head_c * logits
            t = (a if a > dense_m else dense_m) + (b if b > head_m else head_m)
            if moe:
                a = moe_c * tokens
                b = moe_m * (1.0 - keep ** (mult * tokens))
                t = t + (a if a > b else b)
            units = full * ctx + sliding * slide
            a = attn_c * units
            b = kv_m * (units + kv_layers * n) + lin_m * n
            t = t + (a if a > b else b)
            units = full * pf + sliding * ps
            a = attn_pf * units
            b = kv_m * (full * kf + sliding * ks + kv_layers * pf_tokens) + lin_m * n_pf
            t = t + (a if a > b else b)
            ns = ceil((t + fixed + pf_fixed * n_pf + comm * tokens + seq * (n + n_pf)) * 1e9)
            return ns if ns > 1 else 1

        return mixed_ns

    def breakdown(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> StepBreakdown:
        """The step split into compute-bound, memory-bound, communication and overhead time (seconds)."""
        c = self.coeffs
        total = self.step_s(prefill, n_decode, decode_ctx_sum, n_logits)
        tokens = n_decode + sum(ch for ch, _ in prefill)
        comm = c.comm_tok * tokens + self.terms.collectives * self.efficiency.comm_lat_us * 1e-6
        overhead = float(c.fixed) - self.terms.collectives * self.efficiency.comm_lat_us * 1e-6
        overhead += float(c.seq) * (n_decode + len(prefill))
        compute = float(c.dense_c) * tokens + float(c.moe_c) * tokens
        weights = float(c.dense_m) + float(c.head_m)
        rest = max(0.0, total - comm - overhead)
        if compute >= weights:
            return StepBreakdown(rest, min(weights, rest), comm, overhead)
        return StepBreakdown(min(compute, rest), rest, comm, overhead)

    # ---- front end and start-up -------------------------------------------------------------------------------
    def tokenize_ns(self, prompt_tokens: int) -> int:
        """The front end's per-prompt-token work (chat template, tokenisation, the token ids handed to the engine):
        learned ``token_us`` per prompt token, ns. The simulator runs it on the replica's API server one request at a
        time; the closed-loop analysis adds it to the front end (:func:`tailscope.engine.fit.predict`)."""
        return int(self._token_ns * prompt_tokens)

    def frontend_delay_ns(self, in_flight: int, u: float = 0.5) -> int:
        """API-server latency requests do not queue for: ``frontend_ms`` spread uniformly over [0, 2×] by ``u``, plus
        ``inflight_us`` per request in flight on the replica (``in_flight`` counts this one), ns."""
        return int(self._front_ns * u + self._inflight_ns * in_flight)

    def balance_wait_ns(self, in_flight: int, prompt_tokens: int, *, prefill_pool: bool = False) -> int:
        """How long an engine that balances its attention-DP ranks' context requests holds an arriving one, ns.

        TensorRT-LLM (:attr:`~tailscope.engine.engine_profiles.EngineProfile.attention_dp_balance`) keeps a context
        request on an attention-DP rank until every rank has one, or ``dp_wait`` iterations have passed (learned,
        or the deployment's ``attention_dp_config`` timeout, ``dp_balance_iters``: 0 does not balance); charged at
        that cap: ``dp_wait`` decode steps of ``in_flight`` requests (``in_flight`` counts this one), or on a
        disaggregated prefill rank (``prefill_pool``) ``dp_wait`` idle prefill steps. The closed-loop analysis
        (:func:`tailscope.engine.closed_loop.balance_wait`) also bounds it by the time every other rank takes to
        receive a prompt, which this per-request hook does not know; that bound binds only at a few clients per
        rank. 0 where the arrival is the rank's only request (TensorRT-LLM releases the held requests at once when
        some rank has none decoding) and on every other deployment. An engine behaviour: charged whatever the
        arrivals.
        """
        if not self._balance:
            return 0
        if prefill_pool:
            return self._balance_ns(self.step_ns([], 0, 0))
        if in_flight <= 1:  # no other request decodes on this rank: TensorRT-LLM lets the prompt in at once
            return 0
        return self._balance_ns(self.decode_step_ns(in_flight, in_flight * prompt_tokens))

    def pickup_wait_ns(self, in_flight: int, prompt_tokens: int) -> int:
        """How long an arriving request waits for the engine's scheduler to take it in, ns.

        Engines take new requests into their loop at a cadence of their own: TensorRT-LLM's executor and vLLM's
        asynchronous scheduling fetch them an iteration or more later, SGLang's scheduler reads its input every
        ``--scheduler-recv-interval`` iterations where a deployment raises it (that part is its own setting,
        ``EngineConfig.recv_interval``, applied by the replica; this is the rest). ``sched_iters``, learned
        per engine (:attr:`Efficiencies.sched_iters`), is that mean wait in iterations, charged here as decode steps
        of ``in_flight`` requests (this one counted); the closed-loop analysis charges ``sched_iters × τ``, its mean
        step (:func:`tailscope.engine.closed_loop.aggregated`). An engine behaviour: charged whatever the arrivals,
        in ``sim`` and ``serve``.
        """
        return int(self.efficiency.sched_iters * self.decode_step_ns(in_flight, in_flight * prompt_tokens))

    def engine_wait_ns(self, in_flight: int, prompt_tokens: int, *, prefill_pool: bool = False) -> int:
        """Everything the engine adds before it schedules an arriving request, ns: :meth:`pickup_wait_ns` and
        :meth:`balance_wait_ns`. A disaggregated prefill pool (``prefill_pool``) pays only the balancing: the first
        token is sampled by the decode worker, whose scheduler takes the request in when its KV arrives (the
        simulator charges that worker's :meth:`pickup_wait_ns` there)."""
        if prefill_pool:
            return self.balance_wait_ns(in_flight, prompt_tokens, prefill_pool=True)
        # both are iterations of the same decode step (the simulator asks this per arriving request: one step)
        e = self.efficiency
        # TensorRT-LLM releases at once where a rank has no request decoding: this one, if it holds only the arrival
        iters = e.sched_iters + e.dp_wait if self._balance and in_flight > 1 else e.sched_iters
        return int(iters * self._decode_ns(in_flight, in_flight * prompt_tokens))

    def arrival_burst_ns(self, in_flight: int, prompt_tokens: int) -> int:
        """Extra arrival delay of a closed-loop request from the clients that arrive with it, ns.

        Measured closed loops with fixed lengths stay partly synchronised: a request arrives together with
        ``burst × (in_flight − 1)`` others and waits, on average, for half of their prefills. ``burst`` is learned
        (:attr:`Efficiencies.burst`); the closed-loop analysis charges the same term
        (:func:`tailscope.engine.closed_loop.aggregated`), and the simulator adds it to the front end of its
        closed-loop clients' requests, so the two agree. It describes how the corpus' load generators sent (closed
        loops of fixed lengths), not the server: an open loop's arrivals are its own, and ``tailscope serve``, which
        cannot tell what its client is, never charges it. ``in_flight`` counts this request.
        """
        if in_flight <= 1 or self._burst <= 0:
            return 0
        s1 = self._prefill_alone_s(prompt_tokens)
        return int(self._burst * (in_flight - 1) * 0.5 * s1 * 1e9)

    def _balance_ns(self, step_ns: int) -> int:
        """The attention-DP balancing wait at its cap, ``dp_wait`` iterations of ``step_ns``."""
        return int(self.efficiency.dp_wait * step_ns)

    def _prefill_alone_s(self, prompt_tokens: int) -> float:
        """One step prefilling ``prompt_tokens`` alone, s (memoised: the burst terms ask it per arriving request)."""
        s1 = self._prefill_alone.get(prompt_tokens)
        if s1 is None:
            s1 = self.step_s([(prompt_tokens, 0)], 0, 0)
            if len(self._prefill_alone) < 4096:
                self._prefill_alone[prompt_tokens] = s1
        return s1

    def disagg_arrival_burst_ns(self, others: float, prompt_tokens: int) -> int:
        """The same delay at a disaggregated deployment's prefill pool (this model is the prefill worker's), ns.

        A closed-loop request arrives together with ``pd_burst × others`` others — ``others``: the deployment's other
        requests per prefill worker — and waits for half of their prefills. ``pd_burst`` is learned apart from
        ``burst`` (:attr:`Efficiencies.pd_burst`): without prefill interference on the decode side, a disaggregated
        loop keeps a different share of its synchrony. :func:`tailscope.engine.closed_loop.disaggregated` charges the
        same term; the attention-DP balancing of a prefill rank is :meth:`balance_wait_ns` (``prefill_pool``).
        """
        if others <= 0 or self._pd_burst <= 0:
            return 0
        s1 = self._prefill_alone_s(prompt_tokens)
        return int(self._pd_burst * others * 0.5 * s1 * 1e9)

    def weight_load_bytes_per_gpu(self) -> float:
        """Bytes each GPU loads at start-up (for cold starts)."""
        return self._weights_per_gpu
