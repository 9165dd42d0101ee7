"""Every parser of user or server input either succeeds or raises a TailscopeError naming the input (fuzzed)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailscope.testing.fuzzing import TARGETS, mutate, run_target


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_seeds_parse(name: str) -> None:
    _, seeds = TARGETS[name]
    for seed in seeds:
        assert run_target(name, seed) is None


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutations_never_escape_as_foreign_exceptions(name: str, data: st.DataObject) -> None:
    _, seeds = TARGETS[name]
    seed = data.draw(st.sampled_from(seeds))
    rng = random.Random(data.draw(st.integers(min_value=0, max_value=2**32)))
    case = mutate(seed, rng)
    exc = run_target(name, case)
    assert exc is None, f"{name}: {type(exc).__name__}: {exc} on {case[:200]!r}"


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=60, deadline=None)
@given(raw=st.binary(max_size=400))
def test_arbitrary_bytes_never_escape(name: str, raw: bytes) -> None:
    exc = run_target(name, raw)
    assert exc is None, f"{name}: {type(exc).__name__}: {exc} on {raw[:200]!r}"
