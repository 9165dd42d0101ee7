"""The digital twin as a step-time model: :class:`TwinStepModel` offers the methods the replica scheduler and the
simulator call on a :class:`~tailscope.engine.perf.StepTimeModel`, so a twin (``engine/twin.py``) drops into ``sim``
unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tailscope.engine.calibration import Efficiency
from tailscope.engine.perf import StepBreakdown, frontend_jitter
from tailscope.engine.twin import TwinModel

__all__ = ["TwinStepModel"]


class TwinStepModel:
    """The twin as a step-time model (the methods the replica scheduler and the simulator use)."""

    def __init__(self, twin: TwinModel) -> None:
        c = twin.coefficients
        self.twin = twin
        self.model_name = twin.facts.model
        self.weights_dtype = "as served"
        self.kv_dtype = "as served"
        self.tp = 1
        self._o = c.step_overhead_us * 1e3
        self._seq = c.per_seq_us * 1e3
        self._kv = c.per_kv_token_us * 1e3
        self._p = c.prefill_per_token_us * 1e3
        self._pa = c.prefill_attn_us * 1e3
        self._busy = c.frontend_busy_us * 1e3
        self.eff = Efficiency(
            frontend_ms=c.frontend_us / 1e3,
            frontend_per_token_us=0.0,
            frontend_per_inflight_us=c.frontend_per_inflight_us,
            step_overhead_ms=c.step_overhead_us / 1e3,
            per_seq_overhead_us=c.per_seq_us,
        )
        #: the machine's speed factor at a virtual time (ns), or None; the replica and the simulator scale step and
        #: front-end times by it
        self.speed_factor: Callable[[int], float] | None = twin.speed.factor_at() if twin.speed is not None else None
        self._lag = twin.send_lag

    def send_lag_ns(self, seed: int, key: int) -> int:
        """How late the measuring client sends open-loop request ``key`` (its :class:`SendLag`; 0 without one)."""
        if self._lag is None:
            return 0
        return self._lag.lag_ns(frontend_jitter(seed ^ 0x5E4D, key))

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, reserve_gb: float | None = None) -> int:
        return self.twin.facts.kv_capacity_tokens

    def mixed_step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> int:
        tokens = sum(c for c, _ in prefill)
        attn = sum(c * (p + c / 2.0) for c, p in prefill)
        t = self._o + self._p * tokens + self._pa * attn + self._seq * (n_decode + len(prefill))
        return max(1, math.ceil(t + self._kv * decode_ctx_sum))

    def step_ns(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> int:
        return self.mixed_step_ns(prefill, n_decode, decode_ctx_sum, n_logits)

    def step_s(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> float:
        return self.mixed_step_ns(prefill, n_decode, decode_ctx_sum) / 1e9

    def decode_step_ns(self, n_decode: int, decode_ctx_sum: int) -> int:
        return max(1, math.ceil(self._o + self._seq * n_decode + self._kv * decode_ctx_sum))

    def breakdown(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_ctx_sum: int, n_logits: int | None = None
    ) -> StepBreakdown:
        total = self.mixed_step_ns(prefill, n_decode, decode_ctx_sum) / 1e9
        return StepBreakdown(
            compute_s=max(0.0, total - self._o / 1e9), memory_s=0.0, allreduce_s=0.0, overhead_s=self._o / 1e9
        )

    def tokenize_ns(self, prompt_tokens: int) -> int:
        return 0

    def frontend_delay_ns(self, in_flight: int, u: float = 0.5) -> int:
        busy = self._busy if in_flight > 1 else 0.0  # ``in_flight`` counts this request
        return int(self.eff.frontend_ms * 1e6 * 2.0 * u + self.eff.frontend_per_inflight_us * 1e3 * in_flight + busy)

    def weight_load_bytes_per_gpu(self) -> float:
        return 0.0


# ---- fitting ------------------------------------------------------------------------------------------------
