"""Length and time distributions from profiles: moments within tolerance, clamps, seeds."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.io.profile import parse_profile
from tailscope.workload.dists import FloatDist
from tailscope.workload.lengths import LengthDist

N = 20_000


def _dist(spec: str) -> LengthDist:
    text = f"""
name: t
classes:
  - {{name: a, input_tokens: {spec}, output_tokens: 1}}
arrival: {{rate: 1}}
stop: {{requests: 1}}
"""
    return parse_profile(text).classes[0].input_tokens


def _samples(d: LengthDist | FloatDist, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [float(d.sample(rng)) for _ in range(N)]


@pytest.mark.parametrize(
    ("spec", "mean", "sd"),
    [
        ("{dist: fixed, value: 80}", 80.0, 0.0),
        ("{dist: uniform, min: 1000, max: 3000}", 2000.0, 2000 / math.sqrt(12)),
        ("{dist: normal, mean: 150, std: 50}", 150.0, 50.0),
        ("{dist: exponential, mean: 200}", 200.0, 200.0),
        (
            "{dist: lognormal, median: 40, sigma: 0.6}",
            40 * math.exp(0.18),
            40 * math.sqrt((math.exp(0.36) - 1) * math.exp(0.36)),
        ),
    ],
)
def test_moments_within_tolerance(spec: str, mean: float, sd: float) -> None:
    xs = _samples(_dist(spec))
    # rounding to whole tokens moves the mean by < 0.5 token; 20k samples: standard error ≈ sd/141
    assert statistics.fmean(xs) == pytest.approx(mean, abs=4 * sd / math.sqrt(N) + 0.5)
    assert statistics.pstdev(xs) == pytest.approx(sd, rel=0.05, abs=0.6)


def test_clamps_hold_and_pile_up_at_the_bounds() -> None:
    d = _dist("{dist: normal, mean: 150, std: 50, min: 100, max: 160}")
    xs = _samples(d)
    assert min(xs) == 100
    assert max(xs) == 160
    # P(x < 100) ≈ 16 %: the lower clamp collects them
    assert xs.count(100) / N == pytest.approx(0.1587, abs=0.015)


def test_issue_short_class_clamps() -> None:
    d = _dist("{dist: lognormal, median: 40, sigma: 0.6, min: 5, max: 300}")
    xs = _samples(d)
    assert min(xs) >= 5
    assert max(xs) <= 300
    assert statistics.median(xs) == pytest.approx(40, abs=1.5)


def test_same_seed_same_samples_different_seed_different() -> None:
    d = _dist("{dist: exponential, mean: 50}")
    assert _samples(d, 3)[:100] == _samples(d, 3)[:100]
    assert _samples(d, 3)[:100] != _samples(d, 4)[:100]


def test_think_time_distribution_moments() -> None:
    d = FloatDist("exponential", 3.0)
    xs = _samples(d)
    assert statistics.fmean(xs) == pytest.approx(3.0, rel=0.05)
    assert min(xs) >= 0.0
    u = FloatDist("uniform", 1.0, 2.0, lo=1.0, hi=2.0)
    ys = _samples(u)
    assert 1.0 <= min(ys) <= max(ys) <= 2.0
    assert statistics.fmean(ys) == pytest.approx(1.5, abs=0.02)


@settings(max_examples=60, deadline=None)
@given(
    lo=st.integers(1, 500),
    width=st.integers(0, 500),
    mean=st.floats(1, 2000),
    std=st.floats(0, 1000),
    seed=st.integers(0, 2**32),
)
def test_property_samples_stay_within_clamps(lo: int, width: int, mean: float, std: float, seed: int) -> None:
    d = LengthDist("normal", mean, std, lo=lo, hi=lo + width)
    rng = random.Random(seed)
    for _ in range(50):
        x = d.sample(rng)
        assert lo <= x <= lo + width
