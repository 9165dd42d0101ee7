"""Splitting a schedule across workers: the aggregate is the unpartitioned schedule, sessions stay whole."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.errors import ConfigError
from tailscope.records import ErrorClass, RequestRecord, Status, TokensSource
from tailscope.runner.workers.partition import Feeder, group_sessions, partition_open, split_concurrency
from tailscope.runner.workers.wire import pack, record_from_wire, record_to_wire, spec_from_wire, spec_to_wire, unpack
from tailscope.workload.lengths import fixed
from tailscope.workload.simple import LoadShape, simple_requests
from tailscope.workload.spec import RequestSpec


def mixed_stream(seed: int, n: int, closed: bool = False) -> list[RequestSpec]:
    """Singles and multi-turn sessions (later turns directly after turn 0), in schedule order."""
    rng = random.Random(seed)
    out: list[RequestSpec] = []
    t = 0
    i = 0
    s = 0
    while len(out) < n:
        t += rng.randint(0, 50_000_000)
        cls = rng.choice(["chat", "code", "rag"])
        at = None if closed else t
        if rng.random() < 0.3:
            turns = rng.randint(1, 5)
            sid = f"s{s}"
            s += 1
            for k in range(turns):
                out.append(
                    RequestSpec(
                        id=i,
                        input_tokens=10,
                        output_tokens=5,
                        at_ns=at if k == 0 else None,
                        request_class=cls,
                        session_id=sid,
                        turn=k,
                        think_time_ns=1_000_000 * k,
                    )
                )
                i += 1
        else:
            out.append(RequestSpec(id=i, input_tokens=10, output_tokens=5, at_ns=at, request_class=cls))
            i += 1
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), workers=st.integers(1, 9))
def test_open_partition_is_the_schedule_split_without_loss_or_reordering(seed: int, n: int, workers: int) -> None:
    specs = mixed_stream(seed, n)
    shares = partition_open(iter(specs), workers)
    assert len(shares) == workers
    merged = sorted((s for share in shares for s in share), key=lambda s: s.id)
    assert merged == specs  # the aggregate is exactly the requested schedule (same target times, classes, turns)
    for share in shares:
        ids = [s.id for s in share]
        assert ids == sorted(ids)  # each share in schedule order
        times = [s.at_ns for s in share if s.at_ns is not None]
        assert times == sorted(times)
    owner = {s.id: w for w, share in enumerate(shares) for s in share}
    sessions: dict[str, set[int]] = {}
    for s in specs:
        if s.session_id is not None:
            sessions.setdefault(s.session_id, set()).add(owner[s.id])
    assert all(len(ws) == 1 for ws in sessions.values())  # a session never spans workers


def test_single_requests_are_dealt_round_robin() -> None:
    shape = LoadShape(rate=100, arrival="poisson", requests=1000)
    specs = list(simple_requests(shape, fixed(8), fixed(8), seed=3))
    shares = partition_open(iter(specs), 4)
    assert [len(s) for s in shares] == [250, 250, 250, 250]
    assert [s.id for s in shares[1][:3]] == [1, 5, 9]


def test_open_partition_needs_target_times() -> None:
    closed = mixed_stream(1, 10, closed=True)
    with pytest.raises(ConfigError, match="at_ns"):
        partition_open(iter(closed), 2)
    with pytest.raises(ConfigError, match="--workers"):
        partition_open(iter([]), 0)


@given(conc=st.integers(1, 500), workers=st.integers(1, 64))
def test_concurrency_split_is_even_and_complete(conc: int, workers: int) -> None:
    if conc < workers:
        with pytest.raises(ConfigError, match="exceeds --concurrency"):
            split_concurrency(conc, workers)
        return
    parts = split_concurrency(conc, workers)
    assert sum(parts) == conc
    assert max(parts) - min(parts) <= 1
    assert parts == sorted(parts, reverse=True)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 200), chunk=st.integers(1, 20))
def test_feeder_hands_out_whole_sessions_in_stream_order(seed: int, n: int, chunk: int) -> None:
    specs = mixed_stream(seed, n, closed=True)
    feeder = Feeder(iter(specs))
    got: list[RequestSpec] = []
    rng = random.Random(seed)
    while not feeder.exhausted:
        w = rng.randrange(3)
        part = feeder.take(w, chunk)
        if part:
            # whole groups: the first request of a part is never a later session turn
            assert (part[0].turn or 0) == 0
        got.extend(part)
    assert got == specs  # the global pull order is the single-process order
    assert len(feeder.owner) == len(specs)
    assert sum(feeder.handed_to(w) for w in range(3)) == len(specs)
    for group in group_sessions(specs):
        assert len({feeder.owner[s.id] for s in group}) == 1


def test_feeder_over_an_endless_stream_takes_what_it_is_asked() -> None:
    endless = simple_requests(LoadShape(concurrency=4, duration_s=10), fixed(8), fixed(8), seed=0)
    feeder = Feeder(endless)
    assert [s.id for s in feeder.take(0, 5)] == [0, 1, 2, 3, 4]
    assert [s.id for s in feeder.take(1, 2)] == [5, 6]
    assert not feeder.exhausted


def test_wire_round_trip_of_records_and_specs() -> None:
    r = RequestRecord(
        id=7,
        scheduled_ns=10,
        sent_ns=11,
        first_token_ns=50,
        end_ns=90,
        status=Status.ERROR,
        request_class="rag",
        session_id="s1",
        turn=2,
        error=ErrorClass.STREAM_BROKEN,
        error_detail="boom",
        tokens_source=TokensSource.USAGE,
        chunk_times_ns=(50, 70, 90),
        chunk_tokens=(1, 1, 2),
        worker=3,
    )
    assert record_from_wire(unpack(pack([record_to_wire(r)]))[0]) == r
    ok = RequestRecord(id=1, scheduled_ns=0, sent_ns=None, first_token_ns=None, end_ns=None, status=Status.OK)
    assert record_from_wire(unpack(pack(record_to_wire(ok)))) == ok
    for s in mixed_stream(5, 20):
        assert spec_from_wire(unpack(pack(spec_to_wire(s)))) == s


def _rec(i: int, worker: int, lag_ms: float) -> RequestRecord:
    return RequestRecord(
        id=i,
        scheduled_ns=i * 1_000_000,
        sent_ns=i * 1_000_000 + int(lag_ms * 1e6),
        first_token_ns=i * 1_000_000 + 50_000_000,
        end_ns=i * 1_000_000 + 90_000_000,
        status=Status.OK,
        worker=worker,
    )


def test_worker_report_flags_the_bottleneck_and_the_lost_share() -> None:
    from tailscope.runner.workers.report import WorkerState, lost_share, worker_rows, worker_warnings

    calm = {"cpu_util": 0.2, "cpu_s": 1.0, "wall_s": 5.0, "starved_s": 0.0, "loop_lag_ms": {"p99": 0.4}}
    hot = {"cpu_util": 0.97, "cpu_s": 4.9, "wall_s": 5.0, "starved_s": 0.0, "loop_lag_ms": {"p99": 12.0}}
    states = [
        WorkerState(0, "process", assigned=50, received=50, report=calm, offset_uncertainty_ns=20_000),
        WorkerState(1, "process", assigned=50, received=50, report=hot, offset_uncertainty_ns=20_000),
        WorkerState(2, "ray", assigned=50, received=20, lost="the Ray actor died"),
    ]
    records = [_rec(i, 0, 0.1) for i in range(50)] + [_rec(100 + i, 1, 30.0) for i in range(50)]
    records += [_rec(200 + i, 2, 0.1) for i in range(20)]
    rows = worker_rows(states, records)
    assert [r["bottleneck"] for r in rows] == [False, True, False]
    assert any("CPU" in reason for reason in rows[1]["bottleneck_reasons"])
    assert any("send lag" in reason for reason in rows[1]["bottleneck_reasons"])
    lost = lost_share(states, total_scheduled=150, concurrency=None)
    assert lost == {"workers": [2], "requests": 30, "share": pytest.approx(0.2)}
    warnings = worker_warnings(rows, ttft_p50_ms=50.0, lost=lost)
    assert any(w.startswith("worker 1 was a bottleneck") for w in warnings)
    assert any("20.0% of the schedule" in w for w in warnings)
    assert not any("clock offsets" in w for w in warnings)  # ±0.02 ms is nothing next to a 50 ms TTFT
    far = [WorkerState(0, "ray", report=calm, offset_uncertainty_ns=8_000_000)]
    assert any("clock offsets" in w for w in worker_warnings(worker_rows(far, []), 50.0, lost_share(far, 1, None)))


def test_closed_loop_lost_share_is_the_lost_slots() -> None:
    from tailscope.runner.workers.report import WorkerState, lost_share

    states = [
        WorkerState(0, "process", slots=3, assigned=40, received=35, buffered=5),
        WorkerState(1, "process", slots=2, assigned=30, received=20, buffered=4, lost="exited"),
    ]
    assert lost_share(states, None, 5) == {"workers": [1], "requests": 6, "share": pytest.approx(0.4)}


def test_dataset_content_crosses_the_worker_wire() -> None:
    from tailscope.runner.workers.wire import pack, spec_from_wire, spec_to_wire, unpack
    from tailscope.workload.spec import RequestSpec

    spec = RequestSpec(3, 12, 5, prompt=None, messages=(("system", "be terse"), ("user", "hello")))
    assert spec_from_wire(unpack(pack(spec_to_wire(spec)))) == spec
    text = RequestSpec(4, 2, 5, prompt="plain text")
    assert spec_from_wire(unpack(pack(spec_to_wire(text)))) == text


def test_agent_calls_cross_the_worker_wire() -> None:
    spec = RequestSpec(7, 20, 4, session_id="s1", turn=4, after=((4, 15_000_000), (5, 15_000_000)), step="a/b",
                       answers_from=(4, 5), prompt_template="{{answer_2}} then {{prompt}}")  # fmt: skip
    assert spec_from_wire(unpack(pack(spec_to_wire(spec)))) == spec
