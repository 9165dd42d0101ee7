"""The disaggregated deployment behind one ReplicaEngine (what ``tailscope serve --disagg`` drives): a request's
first token is its prefill, the KV transfer, the decode worker's pickup and the decode rank's first step — the
simulator's account — and the pools run side by side."""

from __future__ import annotations

import pytest

from tailscope.engine.api import EngineRequest, StepResult
from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.disagg import parse_disagg
from tailscope.engine.disagg_engine import DisaggregatedEngine
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model


def _cluster(disagg: str = "prefill=1x1,decode=1x1", model: str = "llama-3.1-8b") -> ClusterSpec:
    return ClusterSpec(
        model=resolve_model(model), gpu=resolve_gpu("h100-sxm"), model_id=model, disagg=parse_disagg(disagg)
    )


def _run(engine: DisaggregatedEngine, arrivals: dict[int, list[EngineRequest]]) -> list[StepResult]:
    """Drive the engine as the serve loop does: back-to-back steps; requests added at their engine times (added
    while a step is in flight, as a server's handler would)."""
    out: list[StepResult] = []
    now = 0
    pending = sorted(arrivals.items())
    while pending or engine.has_work():
        while pending and pending[0][0] <= now:
            for req in pending.pop(0)[1]:
                engine.add_request(req)
        res = engine.step(now)
        if res is None:
            now = pending[0][0]
            continue
        out.append(res)
        now = res.start_ns + res.duration_ns
    return out


def _token_times(results: list[StepResult]) -> dict[int, list[int]]:
    times: dict[int, list[int]] = {}
    for res in results:
        for rid, n in res.emitted:
            times.setdefault(rid, []).extend([res.start_ns + res.duration_ns] * n)
    return times


def test_first_token_is_prefill_transfer_pickup_and_the_decode_ranks_first_step() -> None:
    cluster = _cluster()
    engine = DisaggregatedEngine.from_cluster(cluster)
    results = _run(engine, {1_000: [EngineRequest(7, 3000, 5, arrival_ns=1_000)]})
    times = _token_times(results)[7]
    assert len(times) == 5  # the decode rank's tokens only: the prefill pool's sampled token is not the client's
    assert sum(len(r.finished) for r in results) == 1
    # the same account with the pools' own replicas
    pre, dec = cluster.new_replica(cluster.perf("prefill")), cluster.new_replica(cluster.perf("decode"))
    pre.add(7, 3000, 1, 1_000)
    p = pre.step(1_000)
    assert p is not None
    ready = 1_000 + p.duration_ns + cluster.kv_transfer().ns(3000) + cluster.perf("decode").pickup_wait_ns(1, 3000)
    dec.add(7, 3000, 5, ready, kv_ready=3000)
    d = dec.step(ready)
    assert d is not None
    assert times[0] == ready + d.duration_ns
    assert engine.transfers == 1
    assert engine.stats().extra["kv_transfers"] == 1.0
    assert not engine.has_work()


def test_a_request_reaching_an_idle_prefill_rank_starts_at_once() -> None:
    """A decode step in flight does not hold back a new prompt on an idle prefill rank: its prefill starts at its
    arrival, as on a real deployment (the serve loop only calls between the engine's steps)."""
    long_decode = EngineRequest(1, 500, 400, arrival_ns=0)
    late = EngineRequest(2, 2000, 4, arrival_ns=50_000_123)  # arrives while request 1 decodes
    alone = DisaggregatedEngine.from_cluster(_cluster())
    both = DisaggregatedEngine.from_cluster(_cluster())
    t_alone = _token_times(_run(alone, {late.arrival_ns: [late]}))[2][0]
    t_both = _token_times(_run(both, {0: [long_decode], late.arrival_ns: [late]}))[2][0]
    # request 2's prefill step on the idle prefill rank ends exactly when it does with nothing else running: it
    # started at the request's arrival, not at the end of the decode step in flight then
    assert alone.prefill[0].steps == 1
    assert both.prefill[0].steps == 2  # request 1's prefill, then request 2's
    assert both.prefill[0].step_end_ns[-1] == alone.prefill[0].step_end_ns[-1] > late.arrival_ns
    # its decode rank is busy with request 1, so its first token comes no earlier than alone
    assert t_alone <= t_both


def test_requests_spread_over_the_ranks_of_both_pools() -> None:
    engine = DisaggregatedEngine.from_cluster(_cluster("prefill=2x1,decode=1x2:dp2"))
    assert (len(engine.prefill), len(engine.decode)) == (2, 2)
    reqs = [EngineRequest(i, 1000, 8, arrival_ns=0) for i in range(4)]
    results = _run(engine, {0: reqs})
    times = _token_times(results)
    assert sorted(times) == [0, 1, 2, 3]
    assert all(len(t) == 8 for t in times.values())
    # each rank of each pool took two of the four (the fewest requests first)
    assert [r.stats().prompt_tokens_total for r in engine.prefill] == [2000, 2000]
    assert [r.stats().generation_tokens_total for r in engine.decode] == [16, 16]
    stats = engine.stats()
    assert stats.prompt_tokens_total == 4 * 1000
    assert stats.generation_tokens_total >= 4 * 8
    assert (stats.running, stats.waiting) == (0, 0)


def test_abort_in_every_phase_frees_the_engine() -> None:
    engine = DisaggregatedEngine.from_cluster(_cluster())
    for rid in (1, 2, 3):
        engine.add_request(EngineRequest(rid, 2000, 50, arrival_ns=0))
    engine.abort(1)  # waiting on the prefill rank
    res = engine.step(0)
    assert res is not None
    now = res.start_ns + res.duration_ns
    while engine.stats().extra["kv_transfers_in_flight"] == 0:  # until the prompts' KV is on its way
        res = engine.step(now)
        assert res is not None
        now = res.start_ns + res.duration_ns
    assert engine.stats().extra["kv_transfers_in_flight"] == 2  # 2 and 3 shared the prefill rank's step
    engine.abort(2)  # its KV on the way
    engine.abort(99)  # unknown: no-op
    results = _run(engine, {})
    assert [rid for r in results for rid in r.finished] == [3]
    assert not engine.has_work()
    assert engine.stats().running == 0


def test_bad_requests_and_pools_are_refused() -> None:
    engine = DisaggregatedEngine.from_cluster(_cluster())
    with pytest.raises(ValueError, match="exceed a decode rank's KV cache"):
        engine.add_request(EngineRequest(1, engine.capacity_tokens, 1))
    engine.add_request(EngineRequest(2, 10, 1))
    with pytest.raises(ValueError, match="already queued"):
        engine.add_request(EngineRequest(2, 10, 1))
    with pytest.raises(ValueError, match="no --disagg pools"):
        DisaggregatedEngine.from_cluster(ClusterSpec(model=resolve_model("llama-3.1-8b"), gpu=resolve_gpu("h100-sxm")))


# ---- one replica's attention-DP ranks (serve --attention-dp) ---------------------------------------------------
def test_attention_dp_ranks_run_whole_requests_each_on_its_own_timeline() -> None:
    """``DataParallelEngine``: the requests spread over the ranks (fewest first), each runs prefill and decode on its
    rank as that rank's replica alone would run it, and the counters are every rank's."""
    from tailscope.engine.disagg_engine import DataParallelEngine

    cluster = ClusterSpec(
        model=resolve_model("llama-3.1-8b"), gpu=resolve_gpu("h100-sxm"), model_id="llama-3.1-8b", attention_dp=2,
        replicas=2,
    )  # fmt: skip
    engine = DataParallelEngine.from_cluster(cluster)
    assert (len(engine.prefill), len(engine.decode)) == (0, 2)
    reqs = [EngineRequest(i, 800, 6, arrival_ns=0) for i in range(4)]
    times = _token_times(_run(engine, {0: reqs}))
    assert sorted(times) == [0, 1, 2, 3]
    assert all(len(t) == 6 for t in times.values())
    # requests 0 and 2 on rank 0, 1 and 3 on rank 1: each rank's tokens are those of its replica alone
    alone = cluster.new_replica(cluster.perf())
    for rid in (0, 2):
        alone.add(rid, 800, 6, 0)
    ref: dict[int, list[int]] = {}
    now = 0
    while alone.has_work():
        res = alone.step(now)
        assert res is not None
        now = res.start_ns + res.duration_ns
        for rid, n in res.emitted:
            ref.setdefault(rid, []).extend([now] * n)
    assert times[0] == ref[0]
    assert times[2] == ref[2]
    assert times[1] == ref[0]  # the other rank, the same work
    stats = engine.stats()
    assert (stats.prompt_tokens_total, stats.generation_tokens_total) == (4 * 800, 4 * 6)
    assert "kv_transfers" not in stats.extra
    # the API server's prices: a rank's share of the requests in flight
    front = engine.perf
    assert front.frontend_delay_ns(8) == cluster.perf().frontend_delay_ns(4)
    with pytest.raises(ValueError, match="no prefill pool"):
        DataParallelEngine([cluster.new_replica()], [cluster.new_replica()])
