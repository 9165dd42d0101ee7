"""Real-valued distributions for times (think time between session turns, in seconds).

Token lengths use :class:`tailscope.workload.lengths.LengthDist` (integers ≥ 1); times need real values ≥ 0, so they
get this small twin with the same kinds (except ``empirical``) and clamps.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

KINDS = ("fixed", "uniform", "normal", "lognormal", "exponential")


@dataclass(frozen=True, slots=True)
class FloatDist:
    """A distribution of non-negative real values (seconds).

    Attributes:
        kind: fixed | uniform | normal | lognormal | exponential.
        a, b: parameters (fixed: value; uniform: low, high; normal: mean, std; lognormal: median, sigma;
            exponential: mean).
        lo, hi: clamps (inclusive); ``hi`` None = unbounded. Samples are never below 0.
    """

    kind: str
    a: float = 0.0
    b: float = 0.0
    lo: float = 0.0
    hi: float | None = None

    def clamp(self, x: float) -> float:
        v = max(self.lo, x, 0.0)
        if self.hi is not None:
            v = min(self.hi, v)
        return v

    def sample(self, rng: random.Random) -> float:
        """One value drawn with ``rng`` (clamped, ≥ 0)."""
        k = self.kind
        if k == "fixed":
            return self.clamp(self.a)
        if k == "uniform":
            return self.clamp(rng.uniform(self.a, self.b))
        if k == "normal":
            return self.clamp(rng.gauss(self.a, self.b))
        if k == "lognormal":
            return self.clamp(rng.lognormvariate(math.log(self.a), self.b))
        if k == "exponential":
            return self.clamp(rng.expovariate(1.0 / self.a) if self.a > 0 else 0.0)
        raise ValueError(f"unknown distribution {k!r}")

    def mean(self) -> float:
        """Mean before clamping."""
        k = self.kind
        if k == "uniform":
            return (self.a + self.b) / 2
        if k == "lognormal":
            return self.a * math.exp(self.b**2 / 2)
        return self.a


def fixed_s(value: float) -> FloatDist:
    """A constant time in seconds."""
    return FloatDist("fixed", float(value))
