"""Simulation driver: determinism, open/closed loop, sessions, shared prefixes, autoscaling timeline."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tailscope.engine.autoscaler import AutoscalePolicy
from tailscope.engine.calibration import calibration_from_mapping
from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.engine.replica import EngineConfig
from tailscope.metrics.summary import summarize
from tailscope.records import Status, TokensSource
from tailscope.sim.events import EventQueue
from tailscope.sim.simulator import Simulation
from tailscope.workload.spec import RequestSpec

MODEL = resolve_model("llama-3.1-8b")
GPU = resolve_gpu("h100-sxm")


def _cluster(**kw: object) -> ClusterSpec:
    return ClusterSpec(MODEL, GPU, model_id="llama-3.1-8b", **kw)  # type: ignore[arg-type]


def _open(n: int, rate: float, seed: int = 3, **kw: object) -> Iterator[RequestSpec]:
    rng = random.Random(seed)
    t = 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        yield RequestSpec(i, rng.randint(50, 800), rng.randint(10, 120), at_ns=int(t * 1e9), seed=i, **kw)  # type: ignore[arg-type]


def test_event_queue_orders_by_time_priority_then_insertion() -> None:
    q = EventQueue()
    q.push(5, 2, "c")
    q.push(5, 0, "a")
    q.push(1, 9, "first")
    q.push(5, 0, "b")
    assert [q.pop()[2] for _ in range(4)] == ["first", "a", "b", "c"]


def test_open_loop_records_and_determinism() -> None:
    a = list(Simulation(_cluster(), _open(300, 20.0)).run())
    b = list(Simulation(_cluster(), _open(300, 20.0)).run())
    assert a == b  # same seed, same everything
    assert len(a) == 300
    assert all(r.status is Status.OK for r in a)
    for r in a:
        assert r.tokens_source is TokensSource.ENGINE
        assert r.output_tokens == r.requested_output_tokens == len(r.chunk_times_ns)
        assert r.first_token_ns is not None
        assert r.scheduled_ns < r.first_token_ns <= r.end_ns
        assert list(r.chunk_times_ns) == sorted(r.chunk_times_ns)
    c = list(Simulation(_cluster(), _open(300, 20.0, seed=4)).run())
    assert c != a


def test_closed_loop_keeps_concurrency() -> None:
    specs = (RequestSpec(i, 500, 50, seed=i) for i in range(200))
    sim = Simulation(_cluster(), specs, concurrency=16)
    recs = list(sim.run())
    assert len(recs) == 200
    # at any time at most 16 requests are between scheduled and end
    events = sorted(
        [(r.scheduled_ns, 1) for r in recs] + [(r.end_ns or 0, -1) for r in recs], key=lambda e: (e[0], e[1])
    )
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    assert peak <= 16


def test_load_raises_latency_and_overload_queues() -> None:
    light = summarize(list(Simulation(_cluster(), _open(400, 5.0)).run()))
    heavy = summarize(list(Simulation(_cluster(), _open(400, 80.0)).run()))
    assert heavy.ttft_ms.p99 > 3 * light.ttft_ms.p99  # type: ignore[operator]
    assert heavy.tpot_ms.mean > light.tpot_ms.mean  # type: ignore[operator]


def test_shared_prefix_lowers_ttft() -> None:
    def specs(prefix: bool) -> Iterator[RequestSpec]:
        for i in range(200):
            yield RequestSpec(
                i,
                2000,
                20,
                at_ns=i * 100_000_000,
                prefix_id=0 if prefix else None,
                prefix_tokens=1800 if prefix else 0,
                seed=i,
            )

    # without the API-server latency, TTFT is the engine's queue + prefill
    no_frontend = calibration_from_mapping(
        {"default": {"frontend_ms": 0, "frontend_per_inflight_us": 0}}, source="test"
    )
    sim = Simulation(_cluster(calibration=no_frontend), specs(True))
    shared = summarize(list(sim.run()))
    plain = summarize(list(Simulation(_cluster(calibration=no_frontend), specs(False)).run()))
    assert sim.result.prefix_hit_rate is not None
    assert sim.result.prefix_hit_rate > 0.8
    assert shared.ttft_ms.mean < 0.4 * plain.ttft_ms.mean  # type: ignore[operator]


def test_sessions_grow_history_and_hit_previous_turns() -> None:
    def specs() -> Iterator[RequestSpec]:
        i = 0
        for s in range(20):
            for turn in range(3):
                yield RequestSpec(
                    i,
                    300,
                    40,
                    at_ns=s * 200_000_000 if turn == 0 else None,
                    session_id=f"s{s}",
                    turn=turn,
                    think_time_ns=500_000_000,
                    seed=i,
                )
                i += 1

    sim = Simulation(_cluster(), specs())
    recs = sorted(sim.run(), key=lambda r: r.id)
    assert len(recs) == 60
    by_session: dict[str, list] = {}  # type: ignore[type-arg]
    for r in recs:
        by_session.setdefault(r.session_id, []).append(r)  # type: ignore[arg-type]
    for turns in by_session.values():
        t0, t1, t2 = turns
        assert t1.input_tokens == 300 + 40 + 300
        assert t2.input_tokens == t1.input_tokens + 40 + 300
        assert t1.scheduled_ns == t0.end_ns + 500_000_000  # think time after the previous answer
    assert sim.result.prefix_hits_tokens > 0.5 * 20 * (340 + 680)


def test_too_long_request_is_an_error_record() -> None:
    cl = _cluster(engine=EngineConfig(max_num_seqs=8, max_num_batched_tokens=512, num_blocks=10))
    recs = list(Simulation(cl, [RequestSpec(0, 1000, 10, at_ns=0), RequestSpec(1, 10, 5, at_ns=0)]).run())
    by_id = {r.id: r for r in recs}
    assert by_id[0].status is Status.ERROR
    assert "exceed" in (by_id[0].error_detail or "")
    assert by_id[1].ok


def test_autoscaler_scale_up_arrives_after_cold_start() -> None:
    policy = AutoscalePolicy(
        metric="queue_depth",
        target=2,
        min_replicas=1,
        max_replicas=4,
        scrape_interval_s=5,
        scale_up_cooldown_s=30,
        provisioning_s=40,
        load_gbps=1.0,
        engine_init_s=10,
    )
    cl = _cluster(autoscale=policy, replicas=1)
    specs = (RequestSpec(i, 1500, 100, at_ns=i * 25_000_000, seed=i) for i in range(5000))  # 40/s for 125 s
    sim = Simulation(cl, specs)
    recs = list(sim.run())
    assert len(recs) == 5000
    res = sim.result
    assert res.scale_events
    assert res.scale_events[0][1] > 0
    first_up = res.scale_events[0][0]
    cold = policy.cold_start_s(MODEL.weight_bytes("bf16"))  # 40 + 16 GB / 1 GB/s + 10 ≈ 66 s
    assert cold == pytest.approx(66.06, abs=0.1)
    rows = res.timeline
    before = [r for r in rows if r["t_s"] < first_up + cold - 1]
    after = [r for r in rows if r["t_s"] >= first_up + cold + 10]
    assert all(r["replicas_ready"] == 1 for r in before)
    assert after
    assert max(r["replicas_ready"] for r in after) > 1
    assert {"t_s", "replicas_ready", "waiting", "kv_usage", "ttft_p99_ms"} <= set(rows[0])


def test_horizon_marks_in_flight_incomplete() -> None:
    recs = list(Simulation(_cluster(), _open(200, 100.0), horizon_s=1.0).run())
    assert any(r.status is Status.INCOMPLETE for r in recs)


def test_kv_exhaustion_cliff() -> None:
    """When concurrency × context outgrows the KV cache, requests queue and preempt: TTFT jumps by ×10 or more."""
    cl = ClusterSpec(MODEL, resolve_gpu("l4"), model_id="llama-3.1-8b")
    cap = cl.perf().kv_capacity_tokens(0.9)
    assert 20_000 < cap < 45_000  # 24 GB − 16 GB of weights − the reserve, at 128 KiB per token

    def ttft(c: int) -> tuple[float, int]:
        specs = (RequestSpec(i, 2000, 300, warmup=i < c, seed=i) for i in range(c * 4))
        sim = Simulation(cl, specs, concurrency=c)
        s = summarize(list(sim.run()))
        assert s.ttft_ms.mean is not None
        return s.ttft_ms.mean, sim.result.preemptions

    holds = cap // 2300
    fits, pre_fits = ttft(holds // 2)  # half of what the cache holds at 2300 tokens each
    cliff, pre_cliff = ttft(holds * 3 // 2)  # half as many again as it holds
    assert pre_fits == 0
    assert pre_cliff > 0
    assert cliff > 10 * fits


def test_closed_loop_endless_stream_stops_at_duration() -> None:
    def endless() -> Iterator[RequestSpec]:
        i = 0
        while True:
            yield RequestSpec(i, 300, 30, seed=i)
            i += 1

    sim = Simulation(_cluster(), endless(), concurrency=4, duration_s=5.0)
    recs = list(sim.run())
    assert recs
    assert max(r.scheduled_ns for r in recs) < 5_000_000_000
    assert all(r.ok for r in recs)


def test_gpu_seconds_count_every_replica_and_gpu() -> None:
    specs = (RequestSpec(i, 200, 20, at_ns=i * 50_000_000, seed=i) for i in range(100))
    sim = Simulation(_cluster(replicas=2, tp=2), specs)
    list(sim.run())
    assert sim.result.gpu_seconds == pytest.approx(sim.result.virtual_s * 2 * 2)


def test_prefix_affinity_keeps_prefixes_on_one_replica() -> None:
    def specs() -> Iterator[RequestSpec]:
        rng = random.Random(5)
        for i in range(240):
            yield RequestSpec(
                i, 1200, 10, at_ns=i * 40_000_000, prefix_id=rng.randrange(16), prefix_tokens=1024, seed=i
            )

    rates = {}
    for router in ("round_robin", "prefix_affinity"):
        # a small cache per replica, so where a prefix lands decides whether it is still cached
        cl = _cluster(replicas=4, router=router, engine=EngineConfig(max_num_seqs=64, num_blocks=500))
        sim = Simulation(cl, specs())
        list(sim.run())
        rates[router] = sim.result.prefix_hit_rate or 0.0
    assert rates["prefix_affinity"] > rates["round_robin"] + 0.1, rates
