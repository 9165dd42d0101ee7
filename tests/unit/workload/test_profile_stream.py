"""From profile to request stream: stage shapes, bursts, class mix, sessions, shared prefixes, warmup, stop, seeds."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.errors import ConfigError
from tailscope.io.profile import load_profile
from tailscope.workload.dists import FloatDist
from tailscope.workload.lengths import fixed
from tailscope.workload.profile import (
    Arrival,
    Overrides,
    Profile,
    RequestClass,
    SessionShape,
    SharedPrefix,
    Stage,
    Stop,
    Warmup,
)
from tailscope.workload.profile_stream import arrival_times_s, offered_rate, profile_requests, stage_windows

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "support-chat.yaml"


def _profile(**kw: object) -> Profile:
    base: dict[str, object] = {
        "name": "t",
        "classes": (RequestClass("a", 1.0, fixed(10), fixed(5)),),
        "arrival": Arrival(stages=(Stage("rate", 5.0, 10.0),)),
        "stop": Stop(),
    }
    base.update(kw)
    return Profile(**base)  # type: ignore[arg-type]


def _counts(times: list[float], edges: list[float]) -> list[int]:
    return [int(x) for x in np.histogram(times, bins=edges)[0]]


def test_constant_process_is_exact_and_phase_carries_across_stages() -> None:
    arr = Arrival(process="constant", stages=(Stage("rate", 2.0, 3.0), Stage("rate", 4.0, 1.0)))
    t = arrival_times_s(arr, random.Random(0))
    assert t == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.25, 3.5, 3.75])


def test_constant_ramp_follows_the_integrated_rate() -> None:
    # rate goes 0 → 10 over 10 s: Λ(t) = t²/2, so the k-th arrival is at sqrt(2k)
    arr = Arrival(process="constant", stages=(Stage("ramp", 10.0, 10.0, ramp_from=0.0),))
    t = arrival_times_s(arr, random.Random(0))
    assert len(t) == 50  # Λ(10) = 50; arrivals at Λ = 0 … 49
    assert t[:4] == pytest.approx([0.0, 2**0.5, 2.0, 6**0.5])


def test_poisson_stage_shape_matches_the_rate_curve() -> None:
    # 30 s at 20/s, 60 s ramp 20 → 100/s, 30 s at 100/s: expected counts per 10 s bin are the curve's integral
    arr = Arrival(stages=(Stage("rate", 20.0, 30.0), Stage("ramp", 100.0, 60.0), Stage("rate", 100.0, 30.0)))
    t = arrival_times_s(arr, random.Random(42))
    edges = [float(x) for x in range(0, 121, 10)]
    got = _counts(t, edges)
    expected = []
    for a, b in itertools.pairwise(edges):
        xs = np.linspace(a, b, 101)
        ys = [offered_rate(arr.stages, float(x)) for x in xs]
        expected.append(sum((ys[i] + ys[i + 1]) / 2 * (xs[i + 1] - xs[i]) for i in range(100)))
    for g, e in zip(got, expected, strict=True):
        assert abs(g - e) <= 4 * e**0.5 + 2, (got, expected)
    assert max(t) < 120


def test_bursts_add_requests_at_one_instant() -> None:
    arr = Arrival(process="constant", stages=(Stage("rate", 1.0, 10.0), Stage("burst", count=40, at_s=5.5)))
    t = arrival_times_s(arr, random.Random(0))
    assert len(t) == 50
    assert Counter(t)[5.5] == 40
    assert t == sorted(t)


def test_duration_cuts_the_curve_and_a_last_open_stage_runs_to_the_stop() -> None:
    arr = Arrival(process="constant", stages=(Stage("rate", 1.0, 5.0), Stage("rate", 2.0, None)))
    t = arrival_times_s(arr, random.Random(0), duration_s=8.0)
    assert t == pytest.approx([0, 1, 2, 3, 4, 5, 5.5, 6, 6.5, 7, 7.5])
    w = stage_windows(arr, duration_s=8.0)
    assert [(x.kind, x.start_s, x.end_s) for x in w] == [("rate", 0.0, 5.0), ("rate", 5.0, 8.0)]
    with pytest.raises(ConfigError, match="bounded"):
        arrival_times_s(arr, random.Random(0))


def test_gamma_burstiness_changes_dispersion_not_rate() -> None:
    smooth = arrival_times_s(
        Arrival(process="gamma", burstiness=8.0, stages=(Stage("rate", 50.0, 200.0),)), random.Random(1)
    )
    bursty = arrival_times_s(
        Arrival(process="gamma", burstiness=0.25, stages=(Stage("rate", 50.0, 200.0),)), random.Random(1)
    )
    for t in (smooth, bursty):
        assert len(t) == pytest.approx(10_000, rel=0.1)
    cv = [float(np.std(np.diff(t)) / np.mean(np.diff(t))) for t in (smooth, bursty)]
    assert cv[0] == pytest.approx(1 / 8**0.5, rel=0.1)
    assert cv[1] == pytest.approx(1 / 0.25**0.5, rel=0.1)


def test_example_profile_stream_is_deterministic_and_mixed() -> None:
    p = load_profile(EXAMPLE)
    a = list(profile_requests(p, seed=5))
    b = list(profile_requests(p, seed=5))
    c = list(profile_requests(p, seed=6))
    assert a == b
    assert a != c
    assert [s.id for s in a] == list(range(len(a)))
    assert sum(s.warmup for s in a) == 10
    assert all(s.warmup == (s.id < 10) for s in a)
    # arrivals (turn-0 and single requests) by class follow the weights 0.60 / 0.15 / 0.25
    firsts = Counter(s.request_class for s in a if s.turn in (None, 0))
    n = sum(firsts.values())
    assert firsts["short"] / n == pytest.approx(0.60, abs=0.04)
    assert firsts["long_context"] / n == pytest.approx(0.15, abs=0.03)
    assert firsts["conversation"] / n == pytest.approx(0.25, abs=0.04)
    # the burst of 40 at 90 s is there
    assert Counter(s.at_ns for s in a if s.at_ns is not None)[90 * 10**9] == 40


def test_sessions_turns_follow_turn_zero_with_think_time() -> None:
    sess = SessionShape(turns=fixed(4), think_time_s=FloatDist("fixed", 2.5))
    p = _profile(classes=(RequestClass("conv", 1.0, fixed(80), fixed(120), sess),), stop=Stop(requests=40))
    specs = list(profile_requests(p, seed=1))
    assert len(specs) == 40
    for k in range(0, 40, 4):
        group = specs[k : k + 4]
        assert len({s.session_id for s in group}) == 1
        assert [s.turn for s in group] == [0, 1, 2, 3]
        assert group[0].at_ns is not None
        assert all(s.at_ns is None for s in group[1:])
        assert [s.think_time_ns for s in group] == [0, 2_500_000_000, 2_500_000_000, 2_500_000_000]
        assert all(s.input_tokens == 80 for s in group)  # new text only; the runner carries the history


def test_session_turn_counts_follow_their_distribution() -> None:
    p = load_profile(EXAMPLE)
    specs = list(profile_requests(p, seed=2))
    per_session = Counter(s.session_id for s in specs if s.session_id is not None)
    counts = Counter(per_session.values())
    assert set(counts) <= {2, 3, 4, 5, 6}
    assert min(counts.values()) > 0.1 * sum(counts.values())


def test_shared_prefix_share_variants_and_token_accounting() -> None:
    p = _profile(shared_prefix=SharedPrefix(tokens=500, variants=4, share=0.8), stop=Stop(requests=4000))
    specs = list(profile_requests(p, seed=3, overrides=Overrides(rate=1000.0)))
    shared = [s for s in specs if s.prefix_id is not None]
    assert len(shared) / len(specs) == pytest.approx(0.8, abs=0.03)
    assert set(s.prefix_id for s in shared) == {0, 1, 2, 3}
    assert all(s.input_tokens == 510 and s.prefix_tokens == 500 for s in shared)
    assert all(s.input_tokens == 10 and s.prefix_tokens == 0 for s in specs if s.prefix_id is None)


def test_only_turn_zero_carries_the_prefix() -> None:
    sess = SessionShape(turns=fixed(3), think_time_s=FloatDist("fixed", 0.0))
    p = _profile(
        classes=(RequestClass("conv", 1.0, fixed(20), fixed(5), sess),),
        shared_prefix=SharedPrefix(tokens=100, share=1.0),
        stop=Stop(requests=9),
    )
    specs = list(profile_requests(p, seed=0))
    assert [s.prefix_id for s in specs] == [0, None, None] * 3
    assert [s.input_tokens for s in specs] == [120, 20, 20] * 3


def test_closed_loop_stream_is_endless_under_a_duration() -> None:
    p = _profile(arrival=Arrival(mode="closed", concurrency=4), stop=Stop(duration_s=5.0))
    it = profile_requests(p, seed=0)
    first = [next(it) for _ in range(1000)]
    assert all(s.at_ns is None for s in first)


def test_warmup_by_duration_marks_whole_sessions() -> None:
    sess = SessionShape(turns=fixed(2), think_time_s=FloatDist("fixed", 1.0))
    p = _profile(
        classes=(RequestClass("c", 1.0, fixed(1), fixed(1), sess),),
        arrival=Arrival(process="constant", stages=(Stage("rate", 1.0, 10.0),)),
        warmup=Warmup(duration_s=3.0),
    )
    specs = list(profile_requests(p, seed=0))
    assert [s.warmup for s in specs] == [True] * 6 + [False] * 14


def test_unbounded_or_contradictory_profiles_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="bounded"):
        list(profile_requests(_profile(arrival=Arrival(stages=(Stage("rate", 1.0),))), seed=0))
    with pytest.raises(ConfigError, match="open loop needs"):
        list(profile_requests(_profile(arrival=Arrival(), stop=Stop(requests=3)), seed=0))


def test_overrides_replace_rate_curve_and_stop() -> None:
    p = load_profile(EXAMPLE)
    specs = list(profile_requests(p, seed=0, overrides=Overrides(rate=5.0, duration_s=10.0, warmup=0)))
    firsts = [s for s in specs if s.at_ns is not None]
    assert max(s.at_ns or 0 for s in firsts) < 10 * 10**9
    assert len(firsts) == pytest.approx(50, abs=25)
    assert not any(s.warmup for s in specs)


def test_ramp_down_inverts_the_integrated_rate() -> None:
    # 1 s at 10/s, then 10 → 0 over 10 s: Λ(t) = 10t − t²/2 after the first second
    arr = Arrival(process="constant", stages=(Stage("rate", 10.0, 1.0), Stage("ramp", 0.0, 10.0)))
    t = arrival_times_s(arr, random.Random(0))
    expected = [k / 10 for k in range(10)] + [1 + 10 - (100 - 2 * k) ** 0.5 for k in range(50)]
    assert t == pytest.approx(expected)


@settings(max_examples=80, deadline=None)
@given(
    stages=st.lists(
        st.one_of(
            st.tuples(st.just("rate"), st.floats(0, 50), st.floats(0.1, 20)),
            st.tuples(st.just("ramp"), st.floats(0, 50), st.floats(0.1, 20)),
            st.tuples(st.just("burst"), st.integers(1, 20), st.floats(0, 30)),
        ),
        min_size=1,
        max_size=5,
    ),
    process=st.sampled_from(["constant", "poisson", "gamma"]),
    seed=st.integers(0, 1000),
)
def test_property_times_are_sorted_and_inside_the_curve(
    stages: list[tuple[str, float, float]], process: str, seed: int
) -> None:
    built = tuple(
        Stage("burst", count=int(a), at_s=b) if kind == "burst" else Stage(kind, a, b) for kind, a, b in stages
    )
    arr = Arrival(process=process, burstiness=0.5, stages=built)
    t = arrival_times_s(arr, random.Random(seed), duration_s=40.0)
    assert t == sorted(t)
    assert all(0.0 <= x < 40.0 for x in t)
    bursts = sum(s.count for s in built if s.kind == "burst" and s.at_s < 40.0)
    assert len(t) >= bursts
