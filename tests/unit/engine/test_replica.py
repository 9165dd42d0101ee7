"""Replica scheduler: invariants under hypothesis, FCFS, chunked prefill, preemption, prefix-cache hits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.engine.api import EngineRequest
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.kv_cache import BlockPool, chain_hash, extend_hashes
from tailscope.engine.model_catalog import resolve_model
from tailscope.engine.perf import StepTimeModel
from tailscope.engine.replica import EngineConfig, Replica, vllm_default_limits
from tailscope.errors import ConfigError

PERF = StepTimeModel(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))


def _replica(blocks: int = 1000, seqs: int = 64, budget: int = 512, caching: bool = True) -> Replica:
    rep = Replica(
        PERF,
        EngineConfig(
            max_num_seqs=seqs, max_num_batched_tokens=budget, num_blocks=blocks, enable_prefix_caching=caching
        ),
    )
    rep.keep_history = True
    return rep


def _drain(rep: Replica, now: int = 0, limit: int = 100_000) -> tuple[int, dict[int, int]]:
    """Run steps until idle; check pool invariants every step; return (end time, tokens per request)."""
    tokens: dict[int, int] = {}
    for _ in range(limit):
        res = rep.step(now)
        pool = rep.pool
        assert 0 <= pool.used <= pool.total
        assert pool.used + pool.n_cached + pool.free_plain == pool.total
        if res is None:
            break
        assert res.duration_ns > 0
        now += res.duration_ns
        for rid, n in res.emitted:
            tokens[rid] = tokens.get(rid, 0) + n
    assert not rep.has_work()
    return now, tokens


requests = st.lists(st.tuples(st.integers(1, 300), st.integers(1, 60), st.integers(0, 40)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(
    reqs=requests,
    blocks=st.integers(30, 120),
    seqs=st.integers(1, 16),
    budget=st.integers(16, 400),
    caching=st.booleans(),
    shared=st.booleans(),
)
def test_scheduler_invariants(
    reqs: list[tuple[int, int, int]], blocks: int, seqs: int, budget: int, caching: bool, shared: bool
) -> None:
    budget = max(budget, seqs)
    rep = _replica(blocks, seqs, budget, caching)
    capacity = blocks * 16
    prefix = [chain_hash(1, 0)]
    extend_hashes(prefix, 20, 0)
    expected: dict[int, int] = {}
    now = 0
    pending = sorted(enumerate(reqs), key=lambda x: x[1][2])
    step_no = 0
    tokens: dict[int, int] = {}
    order: list[int] = []
    while pending or rep.has_work():
        while pending and pending[0][1][2] <= step_no:
            i, (prompt, out, _) = pending.pop(0)
            hashes = tuple(prefix[: min(prompt // 16, 20)]) if shared else ()
            req = EngineRequest(i, prompt, out, now, hashes)
            if prompt + out > capacity:
                with pytest.raises(ValueError, match="exceed"):
                    rep.add_request(req)
                continue
            rep.add_request(req)
            order.append(i)
            expected[i] = out
        res = rep.step(now)
        step_no += 1
        pool = rep.pool
        assert 0 <= pool.used <= pool.total  # never more blocks than capacity
        assert pool.used + pool.n_cached + pool.free_plain == pool.total
        assert rep.stats().running <= seqs
        if res is None:
            continue
        assert res.prefill_tokens + res.decode_tokens <= budget
        now += res.duration_ns
        for rid, n in res.emitted:
            tokens[rid] = tokens.get(rid, 0) + n
        assert step_no < 50_000
    # every admitted request finished (possibly after preemption and resume) with exactly its tokens
    assert tokens == expected
    assert sorted(c.id for c in rep.completions) == sorted(expected)
    for c in rep.completions:
        assert len(rep.token_times(c)) == expected[c.id]
        times = rep.token_times(c)
        assert list(times) == sorted(times)
    # FCFS: requests are first admitted in arrival order
    assert rep.admissions == order
    assert rep.pool.used == 0  # everything freed


def test_chunked_prefill_runs_decodes_first() -> None:
    rep = _replica(budget=256)
    rep.add_request(EngineRequest(0, 100, 50))
    first = rep.step(0)
    assert first is not None
    assert first.emitted == ((0, 1),)
    rep.add_request(EngineRequest(1, 1000, 5))
    res = rep.step(first.duration_ns)
    assert res is not None
    assert res.decode_tokens == 1
    assert res.prefill_tokens == 255
    assert (0, 1) in res.emitted
    assert all(rid != 1 for rid, _ in res.emitted)


def test_preemption_of_newest_under_kv_pressure_and_resume() -> None:
    rep = _replica(blocks=20, seqs=8, budget=512)  # 320 tokens of KV
    rep.add_request(EngineRequest(0, 100, 150))
    rep.add_request(EngineRequest(1, 100, 150))
    preempted: list[int] = []
    now = 0
    tokens = {0: 0, 1: 0}
    while rep.has_work():
        res = rep.step(now)
        assert res is not None
        now += res.duration_ns
        preempted.extend(res.preempted)
        for rid, n in res.emitted:
            tokens[rid] += n
    assert preempted
    assert set(preempted) == {1}
    assert tokens == {0: 150, 1: 150}
    assert rep.stats().preemptions == len(preempted)


def test_prefix_cache_hits_and_lower_prefill() -> None:
    chain = [chain_hash(7, 0)]
    extend_hashes(chain, 32, 0)
    rep = _replica(blocks=2000)
    rep.add_request(EngineRequest(0, 512, 4, 0, tuple(chain)))
    t_cold, _ = _drain(rep)
    rep.add_request(EngineRequest(1, 512, 4, t_cold, tuple(chain)))
    first = rep.step(t_cold)
    assert first is not None
    assert first.prefill_tokens == 512 - 31 * 16  # 31 blocks hit; the last block is recomputed to sample
    st_ = rep.stats()
    assert st_.prefix_hits_tokens == 31 * 16
    assert st_.prefix_queries_tokens == 1024
    # without caching nothing is reused
    cold = _replica(blocks=2000, caching=False)
    cold.add_request(EngineRequest(0, 512, 4, 0, tuple(chain)))
    _drain(cold)
    cold.add_request(EngineRequest(1, 512, 4, 0, tuple(chain)))
    res = cold.step(0)
    assert res is not None
    assert res.prefill_tokens == 512


def test_lru_eviction_of_free_cached_blocks() -> None:
    pool = BlockPool(4)
    assert pool.allocate(2)
    pool.release([], 0, [11, 12], 0)  # two full blocks become cached
    assert pool.n_cached == 2
    assert pool.free == 4
    assert pool.lookup([11, 12], 2) == 2
    assert pool.allocate(3)  # 2 empty + evict the LRU one: the tail (12) was freed first
    assert pool.lookup([11], 1) == 1
    assert pool.lookup([12], 1) == 0
    assert pool.evictions == 1
    assert not pool.allocate(2)


def test_abort_frees_blocks_and_limits_validate() -> None:
    rep = _replica()
    rep.add_request(EngineRequest(0, 300, 10))
    rep.step(0)
    assert rep.pool.used > 0
    rep.abort(0)
    assert rep.pool.used == 0
    assert not rep.has_work()
    with pytest.raises(ConfigError, match="max-num-batched-tokens"):
        EngineConfig(max_num_seqs=64, max_num_batched_tokens=32).validate()
    assert vllm_default_limits(resolve_gpu("h100-sxm")) == (1024, 8192)
    assert vllm_default_limits(resolve_gpu("a100-80gb")) == (256, 2048)


def test_step_times_stay_bounded_over_long_runs() -> None:
    """Old step end times are dropped once no live request needs them (memory stays bounded)."""
    rep = Replica(PERF, EngineConfig(max_num_seqs=8, max_num_batched_tokens=512))
    now = 0
    for i in range(400):
        rep.add_request(EngineRequest(i, 64, 100, now))
        for _ in range(60):
            res = rep.step_fast(now, now + 10**12)
            if res is None:
                break
            now += res[0]
    assert rep.steps > 20_000
    assert len(rep.step_end_ns) < 16_384


def test_long_outputs_keep_their_token_times_when_old_steps_are_trimmed() -> None:
    """Outputs longer than the step-time window (8,192 steps) that finish in a step that trims it still have every
    token time (the trim used to forget the completions of its own step)."""
    rep = Replica(PERF, EngineConfig(max_num_seqs=8, max_num_batched_tokens=2048, num_blocks=20_000))
    now = 0
    lengths = {}
    for rid, osl in enumerate((9000, 9001, 12_289, 16_385, 8193)):
        rep.add(rid, 64 + rid, osl, now)
        lengths[rid] = osl
    seen = 0
    for _ in range(100_000):
        res = rep.step_fast(now, now + 10**15, through_finishes=False)
        if res is None:
            break
        duration, done, _ = res
        now += duration
        for c in done:
            assert len(rep.token_times(c)) == lengths[c.id]
            seen += 1
    assert seen == len(lengths)
