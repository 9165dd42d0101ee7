"""Open-loop arrival processes: absolute target send times, precomputed from a seeded RNG.

Times are offsets in nanoseconds from the run start. They are absolute targets: a late send never shifts the later
ones (that would be coordinated omission).

- ``constant``: one request every ``1/rate`` seconds.
- ``poisson``: exponential gaps with mean ``1/rate``.
- ``gamma``: gamma-distributed gaps with shape ``burstiness`` and mean ``1/rate``; burstiness < 1 is burstier than
  Poisson, 1 is Poisson, > 1 is smoother (the convention of vLLM's ``--burstiness``).
"""

from __future__ import annotations

import random

from tailscope.errors import ConfigError

PROCESSES = ("constant", "poisson", "gamma")


def gap_s(process: str, rate: float, rng: random.Random, burstiness: float = 1.0) -> float:
    """One inter-arrival gap in seconds."""
    if process == "constant":
        return 1.0 / rate
    if process == "poisson":
        return rng.expovariate(rate)
    if process == "gamma":
        return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
    raise ConfigError(f"--arrival {process!r}: use one of {', '.join(PROCESSES)}")


def arrival_offsets_ns(
    process: str,
    rate: float,
    rng: random.Random,
    *,
    count: int | None = None,
    duration_s: float | None = None,
    burstiness: float = 1.0,
    start_s: float = 0.0,
) -> list[int]:
    """Target send times (ns since run start) for ``count`` requests or until ``duration_s``.

    The first arrival is at ``start_s`` (a run starts with traffic at once); each later one follows a gap drawn
    from the process.

    Raises:
        ConfigError: for a non-positive rate/burstiness, an unknown process, or neither bound given.
    """
    if process not in PROCESSES:
        raise ConfigError(f"--arrival {process!r}: use one of {', '.join(PROCESSES)}")
    if not rate > 0:
        raise ConfigError(f"--rate must be > 0 requests/s (got {rate!r})")
    if not burstiness > 0:
        raise ConfigError(f"--burstiness must be > 0 (got {burstiness!r})")
    if count is None and duration_s is None:
        raise ConfigError("an open-loop schedule needs --requests or --duration (runs are always bounded)")
    out: list[int] = []
    t = start_s
    # compared in whole nanoseconds, as the schedule is kept: a sum of fifty 0.1 s gaps is 4.999999999999998 s, which
    # is 5 s on the schedule, and a constant 10/s for 5 s had sent a 51st request at the end whenever that send beat
    # the stop at 5 s (the window is [start, start + duration))
    end_ns = round((start_s + duration_s) * 1e9) if duration_s is not None else None
    while True:
        if count is not None and len(out) >= count:
            break
        at = round(t * 1e9)
        if end_ns is not None and at >= end_ns:
            break
        out.append(at)
        t += gap_s(process, rate, rng, burstiness)
    return out
