"""Token-length distributions and their text specs.

Spec grammar (``--input-tokens`` / ``--output-tokens``)::

    N                          fixed
    uniform:A:B                integers uniformly in [A, B]
    normal:MEAN:STD            rounded normal
    lognormal:MEDIAN:SIGMA     rounded log-normal (median = exp(mu))
    exponential:MEAN           rounded exponential

Any spec may end in clamps ``:min=X`` and/or ``:max=Y``. Every sample is clamped to ``[max(1, min), max]``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tailscope.errors import ProfileError


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A distribution of token lengths.

    Attributes:
        kind: fixed | uniform | normal | lognormal | exponential | empirical.
        a, b: parameters (fixed: value; uniform: low, high; normal: mean, std; lognormal: median, sigma;
            exponential: mean).
        lo, hi: clamps (inclusive); ``hi`` None = unbounded.
        values: observed lengths for ``empirical`` (sampled uniformly with replacement).
    """

    kind: str
    a: float = 0.0
    b: float = 0.0
    lo: int = 1
    hi: int | None = None
    values: tuple[int, ...] = ()

    def clamp(self, x: float) -> int:
        v = max(self.lo, round(x))
        if self.hi is not None:
            v = min(self.hi, v)
        return max(1, v)

    def sample(self, rng: random.Random) -> int:
        """One length (≥ 1 token) drawn with ``rng``."""
        k = self.kind
        if k == "fixed":
            return self.clamp(self.a)
        if k == "uniform":
            return self.clamp(rng.randint(int(self.a), int(self.b)))
        if k == "normal":
            return self.clamp(rng.gauss(self.a, self.b))
        if k == "lognormal":
            return self.clamp(rng.lognormvariate(math.log(self.a), self.b))
        if k == "exponential":
            return self.clamp(rng.expovariate(1.0 / self.a))
        if k == "empirical":
            return self.clamp(self.values[rng.randrange(len(self.values))])
        raise ValueError(f"unknown length distribution {k!r}")

    def mean(self) -> float:
        """Approximate mean before clamping (for planning and display)."""
        k = self.kind
        if k == "fixed":
            return self.a
        if k == "uniform":
            return (self.a + self.b) / 2
        if k == "normal":
            return self.a
        if k == "lognormal":
            return self.a * math.exp(self.b**2 / 2)
        if k == "exponential":
            return self.a
        return sum(self.values) / len(self.values) if self.values else 0.0

    def max_value(self) -> int | None:
        """The largest value the distribution can produce, when bounded."""
        if self.hi is not None:
            return self.hi
        if self.kind == "fixed":
            return self.clamp(self.a)
        if self.kind == "uniform":
            return int(self.b)
        if self.kind == "empirical" and self.values:
            return max(self.values)
        return None

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        if self.kind == "empirical":
            return f"empirical(n={len(self.values)})"
        params = f"{self.a:g}" if self.kind == "exponential" else f"{self.a:g}:{self.b:g}"
        return f"{self.kind}:{params}"


def fixed(n: int) -> LengthDist:
    """A fixed length."""
    return LengthDist("fixed", float(n))


def empirical(values: Sequence[int], *, lo: int = 1, hi: int | None = None, what: str = "empirical") -> LengthDist:
    """A distribution that resamples observed lengths."""
    vals = tuple(int(v) for v in values)
    if not vals:
        raise ProfileError(f"{what}: no observed lengths")
    if any(v < 0 for v in vals):
        raise ProfileError(f"{what}: lengths must be ≥ 0")
    return LengthDist("empirical", lo=lo, hi=hi, values=vals)


_ARITY = {"uniform": 2, "normal": 2, "lognormal": 2, "exponential": 1}

#: no model serves a context this long: a length beyond it is a typo (refused before any prompt is synthesized)
MAX_LENGTH_TOKENS = 10_000_000


def _check_bound(what: str, text: str, value: float) -> None:
    if value > MAX_LENGTH_TOKENS:
        raise ProfileError(
            f"{what}: {value:,.0f} tokens in {text!r} is beyond any model's context ({MAX_LENGTH_TOKENS:,} at most); "
            "check the number"
        )


def parse_length_spec(text: str | int, *, what: str = "length") -> LengthDist:
    """Parse a length spec (see module doc).

    Raises:
        ProfileError: naming ``what`` and the accepted forms.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    help_ = "use N, uniform:A:B, normal:MEAN:STD, lognormal:MEDIAN:SIGMA or exponential:MEAN (optionally :min=X:max=Y)"
    if not isinstance(text, str) or not text.strip():
        raise ProfileError(f"{what}: empty length spec; {help_}")
    parts = [p.strip() for p in text.strip().split(":")]
    lo, hi = 1, None
    while parts and "=" in parts[-1]:
        key, _, val = parts.pop().partition("=")
        try:
            num = int(val)
        except ValueError:
            raise ProfileError(f"{what}: clamp {key}={val!r} must be an integer") from None
        if key == "min":
            lo = num
        elif key == "max":
            hi = num
        else:
            raise ProfileError(f"{what}: unknown clamp {key!r} in {text!r}; use min= or max=")
    if hi is not None and hi < lo:
        raise ProfileError(f"{what}: min must be ≤ max (got {lo} > {hi})")
    _check_bound(what, text, lo)
    head = parts[0].lower() if parts else ""
    try:
        if len(parts) == 1 and head.isdigit():
            n = int(head)
            if n < 1:
                raise ProfileError(f"{what}: length must be ≥ 1 (got {n})")
            _check_bound(what, text, n)
            return LengthDist("fixed", float(n), lo=lo, hi=hi)
        if head == "fixed" and len(parts) == 2:
            _check_bound(what, text, int(parts[1]))
            return LengthDist("fixed", float(int(parts[1])), lo=lo, hi=hi)
        if head not in _ARITY:
            raise ProfileError(f"{what}: unknown length spec {text!r}; {help_}")
        if len(parts) - 1 != _ARITY[head]:
            raise ProfileError(f"{what}: {head} takes {_ARITY[head]} parameter(s) in {text!r}; {help_}")
        nums = [float(p) for p in parts[1:]]
    except ValueError:
        raise ProfileError(f"{what}: parameters must be numbers in {text!r}; {help_}") from None
    a = nums[0]
    b = nums[1] if len(nums) > 1 else 0.0
    if not all(math.isfinite(x) for x in nums):
        raise ProfileError(f"{what}: parameters must be finite numbers in {text!r}; {help_}")
    _check_bound(what, text, a if head != "uniform" else b)
    if head == "uniform" and (a < 1 or b < a):
        raise ProfileError(f"{what}: uniform:A:B needs 1 ≤ A ≤ B (got {text!r})")
    if head in ("normal", "lognormal") and (a <= 0 or b < 0):
        raise ProfileError(f"{what}: {head} needs a positive centre and a non-negative spread (got {text!r})")
    if head == "exponential" and a <= 0:
        raise ProfileError(f"{what}: exponential:MEAN needs MEAN > 0 (got {text!r})")
    return LengthDist(head, a, b, lo=lo, hi=hi)
