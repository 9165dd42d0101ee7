"""Request-time estimates from the step-time model: prefill, TPOT and E2E at a steady concurrency (pure).

At a steady concurrency ``c`` every engine step decodes ``c`` sequences whose contexts average
``input + output / 2``. TTFT = front-end delay + the engine's wait before it schedules the request (the trained
model's ``engine_wait_ns``) + one prefill step of the request's prompt (chunked by the token budget) batched with the
other ``c − 1`` decodes. TPOT = the decode step at ``c`` plus the prefills of the other sequences spread over this
request's decode steps: each of the ``c − 1`` others restarts about once per request lifetime, adding its prefill
work to ``(c − 1)`` of this request's ``N − 1`` steps. Queueing beyond that is not
modelled here — that is what ``tailscope sim`` and ``plan capacity`` are for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tailscope.engine.perf import StepTimeModel
from tailscope.engine.step_model import TrainedStepModel
from tailscope.engine.twin_step import TwinStepModel
from tailscope.errors import PlanError
from tailscope.record_ops import record_dict


@dataclass(frozen=True, slots=True)
class Estimate:
    """Per-request times (ms) and the roofline regime that bounds each phase."""

    input_tokens: int
    output_tokens: int
    concurrency: int
    ttft_ms: float
    prefill_ms: float
    tpot_ms: float
    e2e_ms: float
    prefill_bound: str
    decode_bound: str
    decode_step_ms: float
    output_tokens_per_s: float
    requests_per_s: float
    assumptions: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


def estimate_request(
    perf: StepTimeModel | TrainedStepModel | TwinStepModel,
    *,
    input_tokens: int,
    output_tokens: int,
    concurrency: int = 1,
    max_num_batched_tokens: int = 8192,
) -> Estimate:
    """Analytic request times on one replica at a steady ``concurrency``.

    Raises:
        PlanError: for non-positive lengths/concurrency, or when ``concurrency`` sequences do not fit the KV cache.
    """
    if input_tokens < 1 or output_tokens < 1 or concurrency < 1:
        raise PlanError("--input-tokens, --output-tokens and --concurrency must be ≥ 1")
    capacity = perf.kv_capacity_tokens()
    need = concurrency * (input_tokens + output_tokens)
    if need > capacity:
        raise PlanError(
            f"{concurrency} sequences × {input_tokens + output_tokens:,} tokens = {need:,} KV tokens exceed the "
            f"replica's {capacity:,}: requests would queue or be preempted; lower --concurrency or add GPUs"
        )
    others = concurrency - 1
    avg_ctx = input_tokens + output_tokens / 2.0
    decode_ctx = int(others * avg_ctx)
    # prefill: the prompt in chunks of the token budget, each step also carrying the other decodes
    prefill_s = 0.0
    done = 0
    bounds = []
    while done < input_tokens:
        chunk = min(max_num_batched_tokens - others, input_tokens - done) if others < max_num_batched_tokens else 1
        chunk = max(chunk, 1)
        b = perf.breakdown([(chunk, done)], others, decode_ctx)
        prefill_s += b.total_s
        bounds.append((b.total_s, b.bound))
        done += chunk
    prefill_bound = max(bounds)[1]
    frontend_s = perf.frontend_delay_ns(concurrency) / 1e9 + perf.tokenize_ns(input_tokens) / 1e9
    # the trained model's engine: its scheduler takes the request in at its own cadence (attention-DP balancing too)
    wait = getattr(perf, "engine_wait_ns", None)
    engine_wait_s = wait(concurrency, input_tokens) / 1e9 if wait is not None else 0.0
    ttft_s = frontend_s + engine_wait_s + prefill_s
    decode = perf.breakdown([], concurrency, int(concurrency * avg_ctx))
    decode_s = decode.total_s
    # the other sequences' prefills, spread over this request's decode steps
    mixed = perf.step_s([(min(input_tokens, max_num_batched_tokens), 0)], concurrency, int(concurrency * avg_ctx))
    interference_s = others * max(0.0, mixed - decode_s) * math.ceil(input_tokens / max_num_batched_tokens)
    tpot_s = decode_s + (interference_s / (output_tokens - 1) if output_tokens > 1 else 0.0)
    e2e_s = ttft_s + (output_tokens - 1) * tpot_s
    return Estimate(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        concurrency=concurrency,
        ttft_ms=ttft_s * 1e3,
        prefill_ms=prefill_s * 1e3,
        tpot_ms=tpot_s * 1e3,
        e2e_ms=e2e_s * 1e3,
        prefill_bound=prefill_bound,
        decode_bound=decode.bound,
        decode_step_ms=decode_s * 1e3,
        output_tokens_per_s=concurrency * output_tokens / e2e_s,
        requests_per_s=concurrency / e2e_s,
        assumptions=(
            _describe(perf),
            f"efficiencies: MFU {perf.eff.mfu:g}, MBU {perf.eff.mbu:g}, step overhead {perf.eff.step_overhead_ms:g} ms",
            f"steady concurrency {concurrency}; decode contexts average input + output/2 = {avg_ctx:,.0f} tokens",
            f"front-end delay {frontend_s * 1e3:.1f} ms (HTTP, templating, tokenization); no queueing",
        )
        + (
            (f"the engine takes the request in after {engine_wait_s * 1e3:.1f} ms (its scheduler's cadence)",)
            if engine_wait_s > 0
            else ()
        ),
    )


def _describe(perf: StepTimeModel | TrainedStepModel | TwinStepModel) -> str:
    if isinstance(perf, TwinStepModel):
        f = perf.twin.facts
        return f"digital twin of {f.url or f.model} ({f.kv_capacity_tokens:,} KV tokens, costs fitted on the server)"
    return f"{perf.model.name} on {perf.tp} × {perf.gpu.id}, weights {perf.weights_dtype}, KV {perf.kv_dtype}"
