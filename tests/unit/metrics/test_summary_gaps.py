"""The vectorised token-gap samples of ``summarize`` equal the per-request functions of ``metrics.request``."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.metrics import request as rq
from tailscope.metrics.samples import gap_samples as _gap_samples
from tailscope.records import RequestRecord, Status


@st.composite
def records(draw: st.DrawFn) -> RequestRecord:
    n = draw(st.integers(0, 12))
    t0 = draw(st.integers(0, 10**13))
    steps = draw(st.lists(st.integers(-5, 10**9), min_size=max(n - 1, 0), max_size=max(n - 1, 0)))
    times = [t0]
    for s in steps:
        times.append(times[-1] + s)
    times = times[:n]
    toks = draw(
        st.one_of(
            st.just((1,) * n),
            st.lists(st.integers(0, 4), min_size=n, max_size=n).map(tuple),
            st.lists(st.integers(0, 3), max_size=n + 2).map(tuple),
        )
    )
    return RequestRecord(
        id=0,
        scheduled_ns=0,
        sent_ns=0,
        first_token_ns=times[0] if times else None,
        end_ns=times[-1] if times else 0,
        status=Status.OK,
        chunk_times_ns=tuple(times),
        chunk_tokens=toks,
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(records(), max_size=8))
def test_gap_samples_match_per_request_functions(recs: list[RequestRecord]) -> None:
    stall, itl, icl = _gap_samples(recs)
    want_stall = [v for r in recs if (v := rq.max_stall_ms(r)) is not None]
    want_itl = [x for r in recs for x in rq.itl_samples_ms(r)]
    want_icl = [x for r in recs for x in rq.icl_samples_ms(r)]
    # bit-for-bit and in order (the mean's rounding depends on the order of the samples)
    assert stall.tolist() == want_stall
    assert itl.tolist() == want_itl
    assert icl.tolist() == want_icl
    assert stall.dtype == itl.dtype == icl.dtype == np.float64


def test_gap_samples_beyond_int64_use_exact_arithmetic() -> None:
    big = 2**60  # beyond 2**53: exact integer arithmetic is needed
    r = RequestRecord(
        id=0,
        scheduled_ns=0,
        sent_ns=0,
        first_token_ns=big,
        end_ns=big + 3_000_000,
        status=Status.OK,
        chunk_times_ns=(big, big + 1_000_000, big + 3_000_000),
        chunk_tokens=(1, 1, 2),
    )
    stall, itl, icl = _gap_samples([r])
    assert stall.tolist() == [2.0]
    assert icl.tolist() == [1.0, 2.0]
    assert itl.tolist() == [1.0, 1.0, 1.0]


def test_gap_samples_of_float_times_follow_python_float_arithmetic() -> None:
    times = (0.1, 2_000_000.3, 2_500_000.0, 9_000_000.7)
    r = RequestRecord(
        id=0,
        scheduled_ns=0,
        sent_ns=0,
        first_token_ns=0,
        end_ns=9_000_000,
        status=Status.OK,
        chunk_times_ns=times,  # type: ignore[arg-type]  # records from hand-made exports may carry floats
        chunk_tokens=(1, 1, 1, 1),
    )
    stall, itl, icl = _gap_samples([r])
    assert icl.tolist() == rq.icl_samples_ms(r)
    assert itl.tolist() == rq.itl_samples_ms(r)
    assert stall.tolist() == [rq.max_stall_ms(r)]


@settings(max_examples=60, deadline=None)
@given(st.lists(records(), max_size=8), st.integers(1, 10**9))
def test_stall_counts_from_the_summarys_gaps_equal_counting_from_the_times(
    recs: list[RequestRecord], stall: int
) -> None:
    # the summary hands the perceived block its int64 token gaps; counting from the records' times is the oracle
    from tailscope.metrics.perceived import _stall_counts

    flat: list[tuple[np.ndarray, np.ndarray]] = []
    _gap_samples(recs, flat)
    oracle = _stall_counts(recs, float(stall))
    if flat:
        assert _stall_counts(recs, float(stall), flat[0]).tolist() == oracle.tolist()
    want = [sum(1 for a, b in itertools.pairwise(r.chunk_times_ns) if b - a >= stall) for r in recs]
    assert oracle.tolist() == want


_maybe_time = st.one_of(st.none(), st.integers(-(10**15), 10**15), st.integers(2**61, 2**64), st.floats(0, 1e12))


@st.composite
def scalar_records(draw: st.DrawFn) -> RequestRecord:
    toks = tuple(draw(st.lists(st.integers(0, 3), max_size=4)))
    return RequestRecord(
        id=0,
        scheduled_ns=draw(st.integers(-(10**15), 10**15) | st.integers(2**62, 2**63)),
        sent_ns=draw(_maybe_time),
        first_token_ns=draw(_maybe_time),
        end_ns=draw(_maybe_time),
        status=draw(st.sampled_from(list(Status))),
        output_tokens=draw(st.none() | st.integers(0, 300)),
        chunk_times_ns=tuple(range(len(toks))),
        chunk_tokens=toks,
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(scalar_records(), max_size=10))
def test_scalar_samples_column_by_column_equal_the_per_request_functions(recs: list[RequestRecord]) -> None:
    from tailscope.metrics.samples import _scalar_samples, _scalar_samples_py

    oracle = _scalar_samples_py(recs)
    fast = _scalar_samples(recs)
    plain = recs and all(
        type(v) is int and abs(v) < 2**62
        for r in recs
        for v in (r.scheduled_ns, r.sent_ns, r.first_token_ns, r.end_ns)
        if v is not None
    )
    assert (fast is not None) == bool(plain)  # anything else takes the per-request path
    if fast is not None:
        assert fast.keys() == oracle.keys()
        for k, v in oracle.items():
            assert fast[k].dtype == np.float64
            assert fast[k].tolist() == v.tolist(), k  # bit for bit, in record order
