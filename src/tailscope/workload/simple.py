"""Workloads built from command-line flags (no profile file): one class, one arrival process."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from tailscope.errors import ConfigError
from tailscope.workload.arrivals import PROCESSES, arrival_offsets_ns
from tailscope.workload.lengths import LengthDist
from tailscope.workload.spec import RequestSpec

#: the largest values a load flag accepts: beyond them a number is a typo, refused before any load
MAX_REQUESTS = 100_000_000
MAX_DURATION_S = 7 * 24 * 3600.0
MAX_CONCURRENCY = 100_000
MAX_RATE = 1_000_000.0
#: the smallest rate a flag accepts: one request in MAX_DURATION_S (below it the gaps overflow the clock)
MIN_RATE = 1 / MAX_DURATION_S


def check_bounds(*checks: tuple[str, float | None, float]) -> None:
    """Refuse a value above its bound (or NaN) with one line naming the flag: ``(flag, value, bound)``."""
    for flag, value, bound in checks:
        if value is None:
            continue
        if value != value:  # NaN
            raise ConfigError(f"{flag} {value}: not a number")
        if value > bound:
            raise ConfigError(f"{flag} {value:g}: above the largest accepted value {bound:,g}; check the number")


@dataclass(frozen=True, slots=True)
class LoadShape:
    """How load is offered and when it stops.

    Attributes:
        concurrency: closed loop with this many in-flight requests (exclusive with ``rate``).
        rate: open loop at this many requests/s.
        max_concurrency: open loop only: at most this many requests in flight (a capped open loop; a request due
            while every slot is taken waits, and the wait counts in its latencies as send lag).
        arrival: constant | poisson | gamma (open loop).
        burstiness: gamma shape (open loop).
        requests: stop after this many requests (warmup included).
        duration_s: stop scheduling after this many seconds.
        warmup: the first N requests are warmup (stored, excluded from statistics).
    """

    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    max_concurrency: int | None = None

    def validate(self) -> None:
        """Raise :class:`ConfigError` for an unbounded, contradictory or out-of-range shape."""
        if self.requests is None and self.duration_s is None:
            raise ConfigError("give --requests N or --duration SECONDS: every run is bounded")
        check_bounds(
            ("--requests", self.requests, MAX_REQUESTS),
            ("--duration", self.duration_s, MAX_DURATION_S),
            ("--concurrency", self.concurrency, MAX_CONCURRENCY),
            ("--concurrency", self.max_concurrency, MAX_CONCURRENCY),
            ("--rate", self.rate, MAX_RATE),
            ("--warmup", self.warmup, MAX_REQUESTS),
            ("--burstiness", self.burstiness, 1000.0),
        )
        if self.requests is not None and self.requests < 1:
            raise ConfigError(f"--requests must be ≥ 1 (got {self.requests})")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ConfigError(f"--duration must be > 0 seconds (got {self.duration_s})")
        if self.concurrency is not None and self.rate is not None:
            raise ConfigError(
                "--concurrency (closed loop) and --rate (open loop) exclude each other here (the simulator runs no "
                "capped open loop); give one"
            )
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"--concurrency must be ≥ 1 (got {self.concurrency})")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ConfigError(f"--concurrency must be ≥ 1 (got {self.max_concurrency})")
        if self.max_concurrency is not None and self.rate is None:
            raise ConfigError("a cap on requests in flight shapes an open loop: give --rate with it")
        if self.rate is not None and not self.rate > 0:
            raise ConfigError(f"--rate must be > 0 requests/s (got {self.rate})")
        if self.rate is not None and self.rate < MIN_RATE:
            raise ConfigError(
                f"--rate {self.rate:g}: below the smallest accepted rate {MIN_RATE:.3g}/s (one request a week); "
                "check the number"
            )
        if self.rate is not None and math.isinf(self.rate):
            raise ConfigError(
                "--rate inf: every request at once is a burst, not a rate; use --concurrency N (closed loop) or a "
                "profile burst stage"
            )
        if self.arrival not in PROCESSES:
            raise ConfigError(f"--arrival {self.arrival!r}: use one of {', '.join(PROCESSES)}")
        if not self.burstiness > 0:
            raise ConfigError(f"--burstiness must be > 0 (got {self.burstiness})")
        if self.warmup < 0:
            raise ConfigError(f"--warmup must be ≥ 0 (got {self.warmup})")
        if self.requests is not None and self.warmup >= self.requests:
            raise ConfigError(
                f"--warmup {self.warmup} ≥ --requests {self.requests}: no request would be measured; "
                "raise --requests or lower --warmup"
            )

    @property
    def open_loop(self) -> bool:
        return self.rate is not None


def simple_requests(
    shape: LoadShape,
    input_tokens: LengthDist,
    output_tokens: LengthDist,
    *,
    seed: int,
    request_class: str = "default",
) -> Iterator[RequestSpec]:
    """The request stream for a flag-only run.

    Open loop: precomputed absolute send times. Closed loop: ``at_ns=None`` and the stream is endless when only a
    duration bounds the run (the runner stops pulling). Same seed and shape → the same requests.
    """
    shape.validate()
    rng_len = random.Random(seed)
    rng_arr = random.Random(seed ^ 0x5EED_A77)
    offsets: list[int] | None = None
    if shape.open_loop:
        assert shape.rate is not None
        offsets = arrival_offsets_ns(
            shape.arrival,
            shape.rate,
            rng_arr,
            count=shape.requests,
            duration_s=shape.duration_s,
            burstiness=shape.burstiness,
        )
    i = 0
    while True:
        if shape.requests is not None and i >= shape.requests:
            return
        if offsets is not None and i >= len(offsets):
            return
        yield RequestSpec(
            id=i,
            input_tokens=input_tokens.sample(rng_len),
            output_tokens=output_tokens.sample(rng_len),
            at_ns=offsets[i] if offsets is not None else None,
            request_class=request_class,
            warmup=i < shape.warmup,
            seed=seed * 1_000_003 + i,
        )
        i += 1
