"""The written-out quantiles against the oracle they replace: ``np.quantile`` (linear method), value for value."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.metrics.percentiles import PERCENTILES, compute_stats, quantile, quantiles

_QS = (*(f for _, f in PERCENTILES), 0.0, 0.25, 1 / 3, 0.5, 1.0)

_values = st.floats(allow_nan=False, allow_infinity=True, width=64) | st.integers(-5, 5).map(float)


@settings(max_examples=400, deadline=None)
@given(st.lists(_values, min_size=1, max_size=80))
def test_quantiles_equal_numpy_bit_for_bit(values: list[float]) -> None:
    arr = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # ∞ − ∞ between two infinite neighbours: NaN in both
        expected = np.quantile(arr, _QS)
        got = quantiles(arr, _QS)
    assert np.array_equal(expected, got, equal_nan=True)
    assert np.array_equal(np.signbit(expected), np.signbit(got))
    assert got.dtype == np.float64


@pytest.mark.parametrize("n", [1, 2, 3, 10, 999, 1000, 1001, 12_345])
def test_quantiles_large_samples_equal_numpy(n: int) -> None:
    arr = np.random.default_rng(n).lognormal(3.0, 1.0, size=n)
    arr[::7] = arr[0]  # ties
    assert np.array_equal(np.quantile(arr, _QS), quantiles(arr, _QS))
    assert quantile(arr, 0.99) == float(np.quantile(arr, 0.99))


def test_nan_gives_nan_as_numpy_does() -> None:
    arr = np.asarray([1.0, float("nan"), 3.0])
    assert np.isnan(quantiles(arr, (0.5, 0.99))).all()
    assert np.isnan(np.quantile(arr, (0.5, 0.99))).all()


def test_input_is_left_unsorted() -> None:
    arr = np.asarray([3.0, 1.0, 2.0])
    quantiles(arr, (0.5,))
    assert arr.tolist() == [3.0, 1.0, 2.0]


def test_compute_stats_does_not_import_numpy_ma() -> None:
    # np.quantile reaches np.unique, which imports numpy.ma (≈ 50 ms of a fresh `tailscope sim`)
    code = (
        "import sys; from tailscope.metrics.percentiles import compute_stats; "
        "compute_stats([1.0, 2.0, 5.0]); print('numpy.ma' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert compute_stats([1.0, 2.0, 5.0]).p50 == 2.0
