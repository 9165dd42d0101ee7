"""Seeded fault injection for drills and tests: errors, rate limits, stalls, cut streams, malformed lines.

Each request's faults are decided from ``(seed, request sequence number)`` alone, so the same seed gives the same
faults to the n-th request whatever the concurrency or timing. Injected errors are answered before the request reaches
the engine; stream faults happen mid-response at a token position drawn uniformly among the inner positions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tailscope.errors import ConfigError


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Probabilities and parameters of the injected faults (all off by default).

    Attributes:
        fail_rate: probability that a request is answered ``500`` at once.
        rate_limit_rate: probability that a request is answered ``429`` with ``Retry-After``.
        retry_after_s: the ``Retry-After`` value in whole seconds.
        stall_prob: probability that a response pauses once for ``stall_ms`` mid-stream.
        stall_ms: length of that pause in milliseconds.
        disconnect_prob: probability that the server cuts the connection mid-stream.
        malformed_rate: probability that a stream carries one ``data:`` line that is not JSON.
        seed: seed of the decisions.
    """

    fail_rate: float = 0.0
    rate_limit_rate: float = 0.0
    retry_after_s: int = 1
    stall_prob: float = 0.0
    stall_ms: float = 2000.0
    disconnect_prob: float = 0.0
    malformed_rate: float = 0.0
    seed: int = 0

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the flag whose value is out of range."""
        for flag, value in (
            ("--fail-rate", self.fail_rate),
            ("--rate-limit-rate", self.rate_limit_rate),
            ("--stall-prob", self.stall_prob),
            ("--disconnect-prob", self.disconnect_prob),
            ("--malformed-rate", self.malformed_rate),
        ):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{flag} must be a probability in [0, 1] (got {value!r})")
        if self.fail_rate + self.rate_limit_rate > 1.0:
            raise ConfigError(
                f"--fail-rate + --rate-limit-rate must be ≤ 1 (got {self.fail_rate} + {self.rate_limit_rate})"
            )
        if self.stall_ms < 0:
            raise ConfigError(f"--stall-ms must be ≥ 0 (got {self.stall_ms!r})")
        if self.retry_after_s < 0:
            raise ConfigError(f"retry_after_s must be ≥ 0 (got {self.retry_after_s!r})")

    @property
    def any(self) -> bool:
        """True when some fault can happen."""
        return (
            self.fail_rate > 0
            or self.rate_limit_rate > 0
            or self.stall_prob > 0
            or self.disconnect_prob > 0
            or self.malformed_rate > 0
        )


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The faults of one request.

    Attributes:
        status: ``500`` or ``429`` to answer at once instead of serving; ``None`` to serve.
        stall_after: pause after this many tokens were sent (``None`` = no stall).
        stall_s: length of the pause in seconds.
        disconnect_after: cut the connection after this many tokens were sent (``None`` = never).
        malformed_after: send one non-JSON ``data:`` line after this many tokens were sent (``None`` = never).
    """

    status: int | None = None
    stall_after: int | None = None
    stall_s: float = 0.0
    disconnect_after: int | None = None
    malformed_after: int | None = None


NO_FAULTS = FaultPlan()


class FaultInjector:
    """Decides each request's :class:`FaultPlan` from the seed and the request's sequence number.

    Args:
        config: the fault probabilities (validated here).
    """

    def __init__(self, config: FaultConfig) -> None:
        config.validate()
        self.config = config

    def plan(self, seq: int, output_tokens: int) -> FaultPlan:
        """Faults of the request with sequence number ``seq`` that will produce ``output_tokens`` tokens.

        Stream positions are drawn in ``[1, output_tokens - 1]`` (strictly inside the response) and collapse to
        ``1`` for one-token responses; a disconnect is only planned before the last token.
        """
        c = self.config
        if not c.any:
            return NO_FAULTS
        rng = random.Random((c.seed + 1) * 1_000_003 + seq * 7_919)
        u = rng.random()
        if u < c.rate_limit_rate:
            return FaultPlan(status=429)
        if u < c.rate_limit_rate + c.fail_rate:
            return FaultPlan(status=500)
        inner_hi = max(1, output_tokens - 1)
        stall_after = rng.randint(1, inner_hi) if rng.random() < c.stall_prob else None
        disconnect_after = rng.randint(1, inner_hi) if rng.random() < c.disconnect_prob and output_tokens > 1 else None
        malformed_after = rng.randint(1, inner_hi) if rng.random() < c.malformed_rate else None
        return FaultPlan(
            stall_after=stall_after,
            stall_s=c.stall_ms / 1000.0 if stall_after is not None else 0.0,
            disconnect_after=disconnect_after,
            malformed_after=malformed_after,
        )
