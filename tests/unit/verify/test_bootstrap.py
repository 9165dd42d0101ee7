"""Bootstrap replicates: exact order statistics, agreement with the naive bootstrap, asymptotic fallback, speed."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.verify import bootstrap as bs


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=60),
    st.sampled_from(["p50", "p90", "p99", "p999", "mean", "max"]),
    st.integers(0, 2**32 - 1),
)
def test_replicates_equal_naive_resampling(values: list[float], stat: str, seed: int) -> None:
    """Same index draws → the fast replicate equals the quantile of the explicitly resampled array."""
    x = np.asarray(values)
    fast = bs.percentile_replicates(x, stat, 7, np.random.default_rng(seed))
    xs = np.sort(x)
    idx = np.random.default_rng(seed).integers(0, x.size, size=(7, x.size))
    if stat == "mean":
        naive = xs[idx].mean(axis=1)
    elif stat == "max":
        naive = xs[idx].max(axis=1)
    else:
        q = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p999": 0.999}[stat]
        naive = np.quantile(xs[idx], q, axis=1)
    np.testing.assert_allclose(fast, naive, rtol=1e-12, atol=1e-9)


def test_asymptotic_spread_matches_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(3).lognormal(5, 0.6, 5000)
    exact = bs.percentile_replicates(x, "p99", 2000, np.random.default_rng(1))
    monkeypatch.setattr(bs, "EXACT_LIMIT", 1)
    approx = bs.percentile_replicates(x, "p99", 2000, np.random.default_rng(1))
    assert np.std(approx) == pytest.approx(np.std(exact), rel=0.2)
    assert np.mean(approx) == pytest.approx(np.mean(exact), rel=0.02)
    sums_exact = bs.sum_replicates(x, 2000, np.random.default_rng(1))
    sums_approx = bs.sum_replicates(x, 2000, np.random.default_rng(1))
    assert np.std(sums_approx) == pytest.approx(np.std(sums_exact), rel=0.15)


def test_ci_covers_a_known_shift_and_excludes_zero() -> None:
    rng = np.random.default_rng(7)
    a = rng.lognormal(5, 0.5, 4000)
    b = rng.lognormal(5, 0.5, 4000) * 1.3
    ci = bs.bootstrap_stat_diff(a, b, "p90", rng=np.random.default_rng(0))
    assert ci.significant
    assert ci.rel_low is not None
    assert ci.rel_high is not None
    assert ci.rel_low < 0.3 < ci.rel_high
    same = bs.bootstrap_stat_diff(a, rng.lognormal(5, 0.5, 4000), "p90", rng=np.random.default_rng(0))
    assert same.diff_low < 0 < same.diff_high


def test_same_seed_same_interval() -> None:
    x = np.random.default_rng(1).normal(100, 10, 500)
    y = x + 1
    one = bs.bootstrap_stat_diff(x, y, "p99", rng=np.random.default_rng(42))
    two = bs.bootstrap_stat_diff(x, y, "p99", rng=np.random.default_rng(42))
    assert one == two


def test_rate_ci() -> None:
    base = np.ones(1000)
    cand = np.r_[np.ones(900), np.zeros(100)]  # 10 % fewer successes in the same window
    ci = bs.bootstrap_rate_diff(base, 0.1, cand, 0.1, rng=np.random.default_rng(0))
    assert ci.rel == pytest.approx(-0.1)
    assert ci.rel_high is not None
    assert ci.rel_high < 0


def test_two_runs_of_10k_with_2000_resamples_is_fast() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(5, 1, 10_000), rng.lognormal(5, 1, 10_000)
    t0 = time.perf_counter()
    bs.bootstrap_stat_diff(a, b, "p99", resamples=2000, rng=np.random.default_rng(0))
    elapsed = time.perf_counter() - t0
    assert elapsed < 5.0, f"bootstrap of 2×10k records × 2000 resamples took {elapsed:.2f} s"


def test_poisson_bootstrap_varies_the_count() -> None:
    ones = np.ones(2500)
    classic = bs.sum_replicates(ones, 500, np.random.default_rng(0))
    assert np.ptp(classic) == 0  # identical requests: the classic bootstrap sees no uncertainty
    poisson = bs.poisson_sum_replicates(ones, 2000, np.random.default_rng(0))
    assert np.mean(poisson) == pytest.approx(2500, rel=0.01)
    assert np.std(poisson) == pytest.approx(50, rel=0.1)  # sqrt(n)


def _cluster_data(k: int, per: int, seed: int, *, correlated: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(k), per)
    if correlated:  # each stream has its own speed: gaps within a request are alike
        level = rng.lognormal(3, 0.5, k)
        x = level[groups] * rng.lognormal(0, 0.05, k * per)
    else:
        x = rng.lognormal(3, 0.5, k * per)
    return x, groups


@pytest.mark.parametrize("stat", ["p50", "p90", "mean"])
def test_clustered_replicates_match_a_brute_force_cluster_bootstrap(stat: str) -> None:
    x, groups = _cluster_data(300, 20, seed=4, correlated=True)
    rng = np.random.default_rng(0)
    by_group = [x[groups == i] for i in range(300)]
    brute = []
    for _ in range(400):  # resample whole requests
        pick = rng.integers(0, 300, 300)
        sample = np.concatenate([by_group[i] for i in pick])
        brute.append(sample.mean() if stat == "mean" else np.quantile(sample, {"p50": 0.5, "p90": 0.9}[stat]))
    fast = bs.clustered_replicates(x, groups, stat, 2000, np.random.default_rng(1))
    assert np.std(fast) == pytest.approx(np.std(brute), rel=0.3)
    naive = bs.percentile_replicates(x, stat, 400, np.random.default_rng(1))
    assert np.std(naive) < 0.5 * np.std(brute)  # treating gaps as independent would be far too confident


def test_clustered_equals_iid_for_independent_samples() -> None:
    x, groups = _cluster_data(2000, 1, seed=5, correlated=False)
    fast = bs.clustered_replicates(x, groups, "p90", 2000, np.random.default_rng(1))
    iid = bs.percentile_replicates(x, "p90", 2000, np.random.default_rng(1))
    assert np.std(fast) == pytest.approx(np.std(iid), rel=0.2)
