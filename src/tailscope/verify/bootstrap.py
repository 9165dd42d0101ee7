"""Bootstrap confidence intervals for the difference of a statistic between two runs.

Method: the two runs are resampled independently (nonparametric bootstrap, ``B`` replicates each, with replacement,
same size as the original), the statistic is computed on every replicate, and the interval of the difference
``candidate − baseline`` (and of the relative difference ``candidate / baseline − 1``) is the percentile interval of the
``B`` paired replicate differences.

Speed: percentiles are computed without sorting each replicate. The samples are sorted once; a replicate is a matrix of
random indices into the sorted array, and the k-th order statistic of the replicate is the sorted value at the k-th
smallest index (``np.partition`` on integers). Replicates are processed in chunks to bound memory (about 20 MB).
When ``n × B`` exceeds :data:`EXACT_LIMIT` (e.g. 10⁵ samples or more) the replicate percentile is drawn from
its asymptotic distribution instead: the empirical quantile at ``q + Z·sqrt(q(1−q)/n)``, ``Z ~ N(0, 1)`` (and the mean
from ``N(mean, sd²/n)``), which is what the exact bootstrap converges to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tailscope.metrics.percentiles import percentile_fraction
from tailscope.verify.values import stat_of

#: Largest ``n × B`` resampled exactly; above it the asymptotic draw is used.
EXACT_LIMIT = 60_000_000
_CHUNK_ELEMS = 2_500_000


def percentile_replicates(samples: np.ndarray, stat: str, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``resamples`` bootstrap replicates of a statistic (``p50``…``p999``, ``mean``, ``max``) of ``samples``.

    Percentiles use linear interpolation (numpy's default), exactly as the point estimate does.
    """
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = x.size
    if n == 0:
        raise ValueError("no samples to resample")
    if n * resamples > EXACT_LIMIT:
        return _asymptotic(x, stat, resamples, rng)
    out = np.empty(resamples, dtype=np.float64)
    rows = max(1, _CHUNK_ELEMS // n)
    if stat == "mean" or stat == "max":
        for start in range(0, resamples, rows):
            b = min(rows, resamples - start)
            idx = rng.integers(0, n, size=(b, n))
            out[start : start + b] = x[idx].mean(axis=1) if stat == "mean" else x[idx.max(axis=1)]
        return out
    h = (n - 1) * percentile_fraction(stat)
    lo = int(np.floor(h))
    hi = min(lo + 1, n - 1)
    frac = h - lo
    kth = [lo] if hi == lo else [lo, hi]
    for start in range(0, resamples, rows):
        b = min(rows, resamples - start)
        idx = rng.integers(0, n, size=(b, n))
        part = np.partition(idx, kth, axis=1)
        out[start : start + b] = x[part[:, lo]] + frac * (x[part[:, hi]] - x[part[:, lo]])
    return out


def _asymptotic(x: np.ndarray, stat: str, resamples: int, rng: np.random.Generator) -> np.ndarray:
    n = x.size
    z = rng.standard_normal(resamples)
    if stat == "mean":
        sd = float(x.std(ddof=1)) if n > 1 else 0.0
        return np.asarray(float(x.mean()) + z * (sd / np.sqrt(n)), dtype=np.float64)
    if stat == "max":
        return np.full(resamples, float(x[-1]))
    q = percentile_fraction(stat)
    qs = np.clip(q + z * np.sqrt(q * (1.0 - q) / n), 0.0, 1.0)
    return np.asarray(np.quantile(x, qs), dtype=np.float64)


def clustered_replicates(
    samples: np.ndarray, groups: np.ndarray, stat: str, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Replicates of a statistic of samples that come in clusters (``groups``: cluster id per sample).

    Percentiles (Woodruff): the cluster-robust variance of ``F̂(x_q)`` — a ratio estimator over clusters,
    ``Var ≈ k/(k−1) · Σ_i (a_i − F̂ m_i)² / M²`` with ``a_i`` the samples ≤ ``x_q`` in cluster ``i``, ``m_i`` its size,
    ``M = Σ m_i``, ``k`` clusters — is mapped back through the empirical quantile function: a replicate is the
    quantile at ``q + Z·sd``. The mean uses the same linearisation. With one sample per cluster this reduces to the
    asymptotic i.i.d. bootstrap. O(n) whatever the number of replicates.
    """
    x = np.asarray(samples, dtype=np.float64)
    g = np.unique(np.asarray(groups), return_inverse=True)[1]
    k = int(g.max()) + 1 if g.size else 0
    if x.size == 0:
        raise ValueError("no samples to resample")
    z = rng.standard_normal(resamples)
    if stat == "max" or k < 2:
        return np.full(resamples, float(x.max()) if stat == "max" else float(np.mean(x)))
    m = np.bincount(g, minlength=k).astype(np.float64)
    total = float(m.sum())
    inflate = k / (k - 1)
    if stat == "mean":
        mean = float(x.mean())
        s = np.bincount(g, weights=x, minlength=k)
        sd = float(np.sqrt(inflate * ((s - mean * m) ** 2).sum()) / total)
        return np.asarray(mean + z * sd, dtype=np.float64)
    q = percentile_fraction(stat)
    xq = float(np.quantile(x, q))
    a = np.bincount(g, weights=(x <= xq).astype(np.float64), minlength=k)
    f = float(a.sum()) / total
    sd_f = float(np.sqrt(inflate * ((a - f * m) ** 2).sum()) / total)
    qs = np.clip(q + z * sd_f, 0.0, 1.0)
    return np.asarray(np.quantile(x, qs), dtype=np.float64)


def sum_replicates(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap replicates of ``values.sum()`` (resampling the per-request contributions)."""
    return _sum_replicates(
        values,
        resamples,
        rng,
        normal_sd=lambda v: float(v.std(ddof=1)) * np.sqrt(v.size) if v.size > 1 else 0.0,
        draw=lambda v, b: v[rng.integers(0, v.size, size=(b, v.size))].sum(axis=1),
    )


def poisson_sum_replicates(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson-bootstrap replicates of ``values.sum()``: each value enters ``Poisson(1)`` times.

    Unlike the classic bootstrap the number of items varies between replicates, which is right for totals over a
    window (requests completed per second): a rerun would not complete exactly the same number of requests.
    """
    return _sum_replicates(
        values,
        resamples,
        rng,
        normal_sd=lambda v: float(np.sqrt((v * v).sum())),
        draw=lambda v, b: rng.poisson(1.0, size=(b, v.size)) @ v,
    )


def _sum_replicates(
    values: np.ndarray,
    resamples: int,
    rng: np.random.Generator,
    *,
    normal_sd: Callable[[np.ndarray], float],
    draw: Callable[[np.ndarray, int], np.ndarray],
) -> np.ndarray:
    """``resamples`` replicates of a sum: ``draw(v, b)`` gives ``b`` of them, drawn in chunks that bound the memory;
    past :data:`EXACT_LIMIT` draws, the normal approximation ``sum ± z · normal_sd(v)`` instead."""
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    if n == 0:
        raise ValueError("no values to resample")
    if n * resamples > EXACT_LIMIT:
        z = rng.standard_normal(resamples)
        return np.asarray(float(v.sum()) + z * normal_sd(v), dtype=np.float64)
    out = np.empty(resamples, dtype=np.float64)
    rows = max(1, _CHUNK_ELEMS // n)
    for start in range(0, resamples, rows):
        b = min(rows, resamples - start)
        out[start : start + b] = draw(v, b)
    return out


@dataclass(frozen=True, slots=True)
class DiffCI:
    """Point estimates and the confidence interval of ``candidate − baseline``.

    ``rel_*`` are relative differences (fractions; ``None`` when the baseline statistic is 0).
    """

    baseline: float
    candidate: float
    diff: float
    diff_low: float
    diff_high: float
    rel: float | None
    rel_low: float | None
    rel_high: float | None
    confidence: float

    @property
    def significant(self) -> bool:
        """True when the interval excludes zero."""
        return self.diff_low > 0 or self.diff_high < 0

    def to_dict(self) -> dict[str, float | bool | None]:
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "diff": self.diff,
            "diff_low": self.diff_low,
            "diff_high": self.diff_high,
            "rel": self.rel,
            "rel_low": self.rel_low,
            "rel_high": self.rel_high,
            "confidence": self.confidence,
            "significant": self.significant,
        }


def diff_ci(
    base_point: float,
    cand_point: float,
    base_reps: np.ndarray,
    cand_reps: np.ndarray,
    confidence: float,
) -> DiffCI:
    """Percentile interval of the paired replicate differences."""
    alpha = (1.0 - confidence) / 2.0
    d = cand_reps - base_reps
    d_lo, d_hi = (float(v) for v in np.quantile(d, [alpha, 1.0 - alpha]))
    rel = rel_lo = rel_hi = None
    if base_point != 0 and np.all(base_reps != 0):
        r = cand_reps / base_reps - 1.0
        rel_lo, rel_hi = (float(v) for v in np.quantile(r, [alpha, 1.0 - alpha]))
        rel = cand_point / base_point - 1.0
    return DiffCI(
        baseline=base_point,
        candidate=cand_point,
        diff=cand_point - base_point,
        diff_low=d_lo,
        diff_high=d_hi,
        rel=rel,
        rel_low=rel_lo,
        rel_high=rel_hi,
        confidence=confidence,
    )


def bootstrap_stat_diff(
    baseline: np.ndarray,
    candidate: np.ndarray,
    stat: str,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator,
    baseline_groups: np.ndarray | None = None,
    candidate_groups: np.ndarray | None = None,
) -> DiffCI:
    """CI of the difference of a latency statistic (``p99``, ``mean``, …) between two sets of raw samples.

    With ``*_groups`` (cluster id per sample, e.g. the request of each ITL gap) the replicates are cluster-robust.
    """
    b_point = stat_of(np.asarray(baseline, dtype=np.float64), stat)
    c_point = stat_of(np.asarray(candidate, dtype=np.float64), stat)
    if b_point is None or c_point is None:
        raise ValueError("no samples")
    if baseline_groups is not None and candidate_groups is not None:
        b = clustered_replicates(baseline, baseline_groups, stat, resamples, rng)
        c = clustered_replicates(candidate, candidate_groups, stat, resamples, rng)
    else:
        b = percentile_replicates(baseline, stat, resamples, rng)
        c = percentile_replicates(candidate, stat, resamples, rng)
    return diff_ci(b_point, c_point, b, c, confidence)


def bootstrap_rate_diff(
    base_values: np.ndarray,
    base_scale: float,
    cand_values: np.ndarray,
    cand_scale: float,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator,
    poisson: bool = False,
) -> DiffCI:
    """CI of the difference of a rate ``sum(values) × scale`` between two runs (windows held fixed).

    ``poisson``: use the Poisson bootstrap (the number of requests varies), for per-second rates.
    """
    draw = poisson_sum_replicates if poisson else sum_replicates
    b = draw(base_values, resamples, rng) * base_scale
    c = draw(cand_values, resamples, rng) * cand_scale
    return diff_ci(float(base_values.sum() * base_scale), float(cand_values.sum() * cand_scale), b, c, confidence)
