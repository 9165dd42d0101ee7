"""Closed-loop desynchronising noise (engine/desync.py): the client's seeded delay before its next request."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterator

from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.desync import DEFAULT, OFF, Desync
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.records import RequestRecord
from tailscope.sim.run import SimArgs, run_sim
from tailscope.sim.simulator import Simulation
from tailscope.workload.spec import RequestSpec

MODEL = resolve_model("llama-3.1-8b")
GPU = resolve_gpu("h100-sxm")


def _cluster() -> ClusterSpec:
    return ClusterSpec(MODEL, GPU, model_id="llama-3.1-8b")


def _closed(n: int) -> Iterator[RequestSpec]:
    return (RequestSpec(i, 400, 40, seed=i) for i in range(n))


def _gaps(recs: list[RequestRecord], clients: int) -> list[int]:
    """For each follow-up request (ids from ``clients`` on: the first ``clients`` are the initial ramp), the time
    since the latest end before it was scheduled (the end that freed its client, or a later one)."""
    ends = sorted(r.end_ns or 0 for r in recs)
    out = []
    for r in recs:
        if r.id >= clients:
            out.append(r.scheduled_ns - ends[bisect.bisect_right(ends, r.scheduled_ns) - 1])
    return out


def test_gap_is_exponential_with_the_documented_mean_and_replays_under_a_seed() -> None:
    d = Desync(client_ms=0.5, client_us_per_stream=20.0)
    assert d.mean_ns(128) == 0.5e6 + 20e3 * 128
    draw = d.sampler(128, seed=3)
    gaps = [draw() for _ in range(20_000)]
    again = d.sampler(128, seed=3)
    assert gaps == [again() for _ in range(20_000)]
    other = d.sampler(128, seed=4)
    assert gaps[:50] != [other() for _ in range(50)]
    assert min(gaps) >= 0
    mean = sum(gaps) / len(gaps)
    assert abs(mean / d.mean_ns(128) - 1) < 0.05
    # exponential: the median is ln 2 of the mean
    assert abs(sorted(gaps)[len(gaps) // 2] / (math.log(2) * d.mean_ns(128)) - 1) < 0.05
    assert not OFF.enabled
    assert DEFAULT.enabled
    off = OFF.sampler(128, seed=3)
    assert all(off() == 0 for _ in range(100))


def test_closed_loop_clients_wait_the_gap_and_replay_under_a_seed() -> None:
    a = list(Simulation(_cluster(), _closed(300), concurrency=16).run())
    b = list(Simulation(_cluster(), _closed(300), concurrency=16).run())
    assert a == b  # deterministic: the delays are drawn from a stream seeded by the run's seed
    off = list(Simulation(_cluster(), _closed(300), concurrency=16, desync=OFF).run())
    assert off != a
    # without noise a client's next request is scheduled the moment its previous one ends (the few others
    # are the clients the initial ramp starts)
    g_off = _gaps(off, 16)
    assert sum(g == 0 for g in g_off) > 0.9 * len(g_off)
    # with it, later: by about the documented mean (0.5 ms + 16 × 20 µs = 0.82 ms; less where another request
    # ended in between), far below a request's lifetime
    g_on = sorted(_gaps(a, 16))
    assert sum(g == 0 for g in g_on) < 0.1 * len(g_on)
    assert 0.05e6 < g_on[len(g_on) // 2] < 0.82e6, g_on[len(g_on) // 2]
    assert len(a) == len(off) == 300


def test_noise_leaves_open_loops_alone() -> None:
    rng = random.Random(5)
    specs = [RequestSpec(i, rng.randint(50, 600), 30, at_ns=i * 40_000_000, seed=i) for i in range(200)]
    on = list(Simulation(_cluster(), iter(specs)).run())
    off = list(Simulation(_cluster(), iter(specs), desync=OFF).run())
    assert on == off


def test_sim_args_switch_it_off() -> None:
    base = SimArgs(concurrency=8, requests=80, input_tokens="300", output_tokens="20", store=False)
    on = run_sim(base)
    again = run_sim(base)
    off = run_sim(SimArgs(**{**_fields(base), "desync": False}))
    assert on.summary["ttft_ms"] == again.summary["ttft_ms"]
    assert [r.scheduled_ns for r in on.records] != [r.scheduled_ns for r in off.records]


def _fields(a: SimArgs) -> dict[str, object]:
    return {f: getattr(a, f) for f in a.__dataclass_fields__}
