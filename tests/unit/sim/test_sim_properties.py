"""Property test: sessions + shared prefixes + a tiny KV cache (preemptions) never lose or duplicate a token."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.engine.cluster import ClusterSpec
from tailscope.engine.gpus import resolve_gpu
from tailscope.engine.model_catalog import resolve_model
from tailscope.engine.replica import EngineConfig
from tailscope.records import Status
from tailscope.sim.simulator import Simulation
from tailscope.workload.spec import RequestSpec

units = st.lists(
    st.tuples(
        st.integers(1, 3),  # turns
        st.integers(10, 200),  # new tokens per turn
        st.integers(1, 80),  # output tokens
        st.sampled_from([None, 0, 1]),  # shared prefix variant
        st.integers(0, 300),  # start offset ms
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(units=units, blocks=st.integers(40, 120), seqs=st.integers(2, 8), replicas=st.integers(1, 2))
def test_every_request_completes_with_its_tokens(
    units: list[tuple[int, int, int, int | None, int]], blocks: int, seqs: int, replicas: int
) -> None:
    def specs() -> Iterator[RequestSpec]:
        i = 0
        for u, (turns, new, out, prefix, start) in enumerate(sorted(units, key=lambda x: x[4])):
            for turn in range(turns):
                yield RequestSpec(
                    i,
                    new + (64 if prefix is not None and turn == 0 else 0),
                    out,
                    at_ns=start * 1_000_000 if turn == 0 else None,
                    prefix_id=prefix if turn == 0 else None,
                    prefix_tokens=64 if prefix is not None and turn == 0 else 0,
                    session_id=f"s{u}" if turns > 1 else None,
                    turn=turn if turns > 1 else None,
                    think_time_ns=10_000_000,
                    seed=i,
                )
                i += 1

    expected = {i: s.output_tokens for i, s in enumerate(specs())}
    engine = EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=256, num_blocks=blocks)
    cluster = ClusterSpec(
        resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), engine=engine, replicas=replicas,
        router="prefix_affinity",
    )  # fmt: skip
    sim = Simulation(cluster, specs())
    recs = list(sim.run())
    assert sorted(r.id for r in recs) == sorted(expected)
    for r in recs:
        if r.status is Status.OK:
            assert r.output_tokens == expected[r.id] == len(r.chunk_times_ns)
            assert list(r.chunk_times_ns) == sorted(r.chunk_times_ns)
        else:  # only a context that can never fit the cache is refused
            assert r.status is Status.ERROR
            assert (r.input_tokens or 0) + expected[r.id] > blocks * 16
    for slot in sim._slots:
        pool = slot.replica.pool
        assert pool.used == 0
        assert pool.used + pool.n_cached + pool.free_plain == pool.total
