"""Speculative decoding as a step model: a draft proposes ``k`` tokens, the target verifies them in one pass.

With per-token acceptance probability ``p`` (independent), a verification step emits on average::

    E = (1 − p^(k+1)) / (1 − p)        (k + 1 when p = 1)

tokens per sequence: the accepted prefix of the draft plus the target's own token. One round costs ``k`` draft
decode steps plus one target step that scores ``k + 1`` tokens per sequence; the target's weights and each
sequence's KV are read once, so the verify pass is priced as a decode step over ``n·(k+1)`` tokens at the same
context. The draft is a second model on the same GPUs (``draft``) or, without one, ``draft_cost`` × the target's
decode step per draft token.

The scheduler keeps emitting one token per sequence per step, so a decode-only step is priced at one round's cost
divided by ``E`` (the mean time per token — TPOT is right, ITL is smoothed: real speculative decoding emits
bursts). A mixed step (prefill chunks + decodes) adds the decodes' per-token difference to the target's mixed step.
The engine's own waits counted in iterations — its scheduler's cadence and attention-DP balancing
(``engine_wait_ns``, ``pickup_wait_ns``) — are rounds, as in the fit's closed loop
(:func:`tailscope.engine.closed_loop.speculative_tokens`): an engine takes new requests in between rounds.
KV capacity shrinks by the draft's weights (its own KV is small and ignored).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tailscope.engine.calibration import Efficiency
from tailscope.engine.perf import StepModel
from tailscope.errors import ConfigError

#: a draft's cost per draft token when no draft model is named: this fraction of the target's decode step
DRAFT_COST = 0.1


@dataclass(frozen=True, slots=True)
class SpecDecode:
    """Speculative decoding settings: ``draft_tokens`` (k), ``acceptance`` (p), and the draft's cost when no draft
    model is named (fraction of the target's decode step per draft token)."""

    draft_tokens: int
    acceptance: float
    draft_cost: float = DRAFT_COST
    draft_model: str | None = None

    def validate(self) -> SpecDecode:
        if self.draft_tokens < 1:
            raise ConfigError(f"--spec-draft must be ≥ 1 draft tokens (got {self.draft_tokens})")
        if not 0.0 <= self.acceptance <= 1.0:
            raise ConfigError(f"--spec-accept must be an acceptance rate in [0, 1] (got {self.acceptance:g})")
        if self.draft_cost < 0:
            raise ConfigError(f"the draft cost must be ≥ 0 (got {self.draft_cost:g})")
        return self

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a verification step emits per sequence."""
        k, p = self.draft_tokens, self.acceptance
        return float(k + 1) if p >= 1.0 else (1.0 - p ** (k + 1)) / (1.0 - p)


class SpeculativeStepModel:
    """``target``'s step model with speculative decoding (see the module docstring); anything else is the
    target's."""

    def __init__(self, target: StepModel, spec: SpecDecode, draft: StepModel | None = None) -> None:
        self.target = target
        self.spec = spec.validate()
        self.draft = draft
        self._k = spec.draft_tokens
        self._e = spec.tokens_per_step
        self.weights_dtype: str = target.weights_dtype
        self.kv_dtype: str = target.kv_dtype
        self.eff: Efficiency = target.eff

    def __getattr__(self, name: str) -> Any:
        if name == "target":  # not set yet (copying): avoid recursing
            raise AttributeError(name)
        return getattr(self.target, name)

    def _round_ns(self, n: int, ctx: int) -> float:
        t = self.target
        verify = t.decode_step_ns(n * (self._k + 1), ctx)
        draft: float
        if self.draft is not None:
            draft = self.draft.decode_step_ns(n, ctx)
        else:
            draft = self.spec.draft_cost * t.decode_step_ns(n, ctx)
        return verify + self._k * draft

    def decode_step_ns(self, n_decode: int, decode_ctx_sum: int) -> int:
        if n_decode <= 0:
            return self.target.decode_step_ns(n_decode, decode_ctx_sum)
        return max(1, int(self._round_ns(n_decode, decode_ctx_sum) / self._e))

    def mixed_step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int
    ) -> int:
        t = self.target
        base = t.mixed_step_ns(prefill, n_decode, decode_ctx_sum, n_logits)
        if n_decode <= 0:
            return base
        extra = self.decode_step_ns(n_decode, decode_ctx_sum) - t.decode_step_ns(n_decode, decode_ctx_sum)
        return max(1, base + extra)

    def step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> int:
        if not prefill:
            return self.decode_step_ns(n_decode, decode_ctx_sum)
        logits = n_logits if n_logits is not None else n_decode + len(prefill)
        return self.mixed_step_ns(prefill, n_decode, decode_ctx_sum, logits)

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, reserve_gb: float | None = None) -> int:
        cap = self.target.kv_capacity_tokens(gpu_memory_utilization, reserve_gb)
        if self.draft is None:
            return cap
        per_token = float(getattr(self.target, "kv_bytes_per_token", 0) or 0)
        gpus = max(1, int(getattr(self.target, "tp", 1) or 1))
        if per_token <= 0:
            return cap
        return max(0, cap - int(self.draft.weight_load_bytes_per_gpu() * gpus / per_token))

    def tokenize_ns(self, prompt_tokens: int) -> int:
        return self.target.tokenize_ns(prompt_tokens)

    def frontend_delay_ns(self, in_flight: int, u: float = 0.5) -> int:
        return self.target.frontend_delay_ns(in_flight, u)

    def engine_wait_ns(self, in_flight: int, prompt_tokens: int, *, prefill_pool: bool = False) -> int:
        """The target engine's wait before it schedules an arriving request, its iterations counted in rounds (0 for
        a model without one). A disaggregated prefill pool's balancing waits on prefill steps: unchanged."""
        wait = getattr(self.target, "engine_wait_ns", None)
        if wait is None:
            return 0
        ns = int(wait(in_flight, prompt_tokens, prefill_pool=prefill_pool))
        return ns if prefill_pool else self._in_rounds(ns, in_flight, prompt_tokens)

    def pickup_wait_ns(self, in_flight: int, prompt_tokens: int) -> int:
        """The target's scheduler cadence (a disaggregated decode worker's, when a request's KV arrives), in rounds."""
        wait = getattr(self.target, "pickup_wait_ns", None)
        return self._in_rounds(int(wait(in_flight, prompt_tokens)), in_flight, prompt_tokens) if wait else 0

    def _in_rounds(self, ns: int, in_flight: int, prompt_tokens: int) -> int:
        """A wait the target counts in its decode steps of ``in_flight`` requests, stretched to rounds."""
        if ns <= 0:
            return ns
        n = max(1, in_flight)
        plain = self.target.decode_step_ns(n, n * prompt_tokens)
        return int(ns * self._round_ns(n, n * prompt_tokens) / max(1, plain))

    def weight_load_bytes_per_gpu(self) -> float:
        own = self.target.weight_load_bytes_per_gpu()
        return own + (self.draft.weight_load_bytes_per_gpu() if self.draft is not None else 0.0)
