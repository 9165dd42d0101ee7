"""``tailscope serve`` builds its replica the way ``tailscope sim`` builds each of its replicas (issue 23): the same
limits, KV blocks and step costs for the same settings, a digital twin's included, and the same one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tailscope.engine.twin import ServerFacts, TwinCoefficients, TwinModel
from tailscope.errors import TailscopeError
from tailscope.serve.engine_factory import EngineFlags, build_replica
from tailscope.sim.run import SimArgs, build_cluster

# a server unlike the defaults on every fact a replica depends on
TWIN = TwinModel(
    coefficients=TwinCoefficients(4000, 300, 0.5, 20, 0.01, 10_000, 0),
    stderr=TwinCoefficients(100, 10, 0.05, 1, 0.001, 500, 0),
    facts=ServerFacts(
        block_size=32,
        num_blocks=1500,
        max_num_seqs=48,
        max_num_batched_tokens=1536,
        max_model_len=4096,
        enable_prefix_caching=False,
    ),
)


def twin_file(tmp_path: Path) -> Path:
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(TWIN.to_mapping()), encoding="utf-8")
    return path


def both(**settings: Any) -> tuple[Any, Any]:
    """(the served replica, a replica of the simulated cluster) for the same settings."""
    served, _ = build_replica(flags=EngineFlags(**settings))
    return served, build_cluster(SimArgs(**settings)).new_replica()


def assert_same_replica(served: Any, simulated: Any) -> None:
    assert served.config == simulated.config  # limits, block size, number of blocks, prefix caching, offload
    assert served.stats().kv_blocks_total == simulated.stats().kv_blocks_total
    assert type(served.perf) is type(simulated.perf)
    for prefill, n_decode, ctx in (([(512, 0)], 0, 0), ([], 8, 8 * 700), ([(256, 1024)], 16, 16 * 2000)):
        assert served.perf.step_ns(prefill, n_decode, ctx) == simulated.perf.step_ns(prefill, n_decode, ctx)
    assert served.perf.tokenize_ns(1000) == simulated.perf.tokenize_ns(1000)


def test_a_served_twin_has_the_servers_limits_and_kv_blocks(tmp_path: Path) -> None:
    path = twin_file(tmp_path)
    served, simulated = both(calibration=path, gpu_memory_utilization=0.8)
    assert_same_replica(served, simulated)
    cfg = served.config
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (48, 1536)
    assert (cfg.block_size, cfg.num_blocks, cfg.enable_prefix_caching) == (32, 1500, False)
    assert served.stats().kv_blocks_total == 1500
    _, opts = build_replica(flags=EngineFlags(calibration=path))
    assert opts.max_model_len == 4096  # the twin's server's context length
    assert opts.cache is not None
    assert (opts.cache.block_size, opts.cache.num_gpu_blocks, opts.cache.enable_prefix_caching) == (32, 1500, False)
    assert "48,000 KV tokens" in opts.description
    assert "max_num_seqs 48" in opts.description


def test_flags_given_explicitly_still_win_over_the_twin(tmp_path: Path) -> None:
    served, simulated = both(calibration=twin_file(tmp_path), max_num_seqs=96)
    assert_same_replica(served, simulated)
    assert (served.config.max_num_seqs, served.config.max_num_batched_tokens) == (96, 1536)
    served, simulated = both(calibration=twin_file(tmp_path), max_num_seqs=2000)
    assert_same_replica(served, simulated)
    assert served.config.max_num_batched_tokens == 2000  # raised to max_num_seqs, as vLLM requires


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"gpu_memory_utilization": 0.7, "kv_dtype": "fp8"},
        {"max_num_seqs": 10_000},  # the token budget is raised to it in both
        {"backend": "sglang", "max_num_batched_tokens": 4096},
    ],
)
def test_serve_and_sim_build_the_same_replica_without_a_twin(settings: dict[str, Any]) -> None:
    served, simulated = both(**settings)
    assert_same_replica(served, simulated)


def test_serve_without_prefix_caching_matches_sim() -> None:
    served, _ = build_replica(flags=EngineFlags(enable_prefix_caching=False))
    simulated = build_cluster(SimArgs(prefix_caching=False)).new_replica()
    assert_same_replica(served, simulated)
    assert served.config.enable_prefix_caching is False


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"weights_dtype": "fp3"}, "--weights-dtype 'fp3': use one of"),
        ({"kv_dtype": "int4"}, "--kv-dtype 'int4': use one of"),
        ({"model": "llama-3.1-70b", "gpu": "l4"}, "leaves no room for the KV cache"),
        ({"max_num_seqs": 64, "max_num_batched_tokens": 32}, "must be ≥ --max-num-seqs"),
    ],
)
def test_serve_and_sim_fail_with_the_same_line(settings: dict[str, Any], message: str) -> None:
    flags = {k: v for k, v in settings.items() if k not in ("model", "gpu")}
    where = {k: v for k, v in settings.items() if k in ("model", "gpu")}
    with pytest.raises(TailscopeError) as from_sim:
        build_cluster(SimArgs(**settings))
    with pytest.raises(TailscopeError) as from_serve:
        build_replica(**where, flags=EngineFlags(**flags))
    assert type(from_serve.value) is type(from_sim.value)
    assert str(from_serve.value) == str(from_sim.value)
    assert message in str(from_serve.value)
    assert "\n" not in str(from_serve.value)


def test_kv_offload_is_served_as_simulated() -> None:
    """``--kv-offload-gib`` is an engine setting both commands take: the served replica swaps preempted KV to host
    memory with the same capacity and bandwidth as a simulated one (it was sim-only)."""
    served, simulated = both(kv_offload_gib=8.0)
    assert_same_replica(served, simulated)
    assert served.config.kv_offload_gib == 8.0
    assert served._off_cap == simulated._off_cap > 0
    assert served._swap_ns_per_token == simulated._swap_ns_per_token
    with pytest.raises(TailscopeError, match="--kv-offload-gib"):
        build_replica(flags=EngineFlags(kv_offload_gib=-1.0))


def test_prompts_are_counted_as_the_twins_server_counts_them() -> None:
    from tailscope.serve.tokenizer import as_counted_by

    facts = ServerFacts(block_size=16, num_blocks=100, prompt_scale=1.69, prompt_offset=16.9)
    for n in (0, 1, 7, 100, 1000):
        ids = tuple(range(1, n + 1))
        assert len(as_counted_by(ids, 1.69, 16.9)) == facts.server_prompt_tokens(n)  # as sim rescales the specs
    a = as_counted_by(tuple(range(1, 201)), 1.69, 16.9)
    b = as_counted_by((*range(1, 101), *range(500, 600)), 1.69, 16.9)
    shared = 17 + int(1.69 * 100)  # our 100 shared tokens, stretched, after the template's 17
    assert a[:shared] == b[:shared]  # a shared prefix stays shared: the prefix cache sees what it would have
    assert a[shared + 2 :] != b[shared + 2 :]
    assert as_counted_by((5, 6, 7), 1.0, 0.0) == (5, 6, 7)


@pytest.mark.parametrize(
    "settings",
    [{"spec_draft": 3, "spec_accept": 0.6}, {"spec_draft": 4, "spec_accept": 0.8, "spec_draft_model": "phi-3-mini"}],
)
def test_speculative_decoding_is_served_as_simulated(settings: dict[str, Any]) -> None:
    """``--spec-draft``/``--spec-accept``/``--spec-draft-model`` are engine settings both commands take (they were
    sim-only): the served replica's decode steps are the simulated one's, to the nanosecond."""
    served, simulated = both(**settings)
    assert_same_replica(served, simulated)
    assert type(served.perf).__name__ == "SpeculativeStepModel"
    plain, _ = build_replica()
    assert served.perf.step_ns([], 8, 8 * 700) != plain.perf.step_ns([], 8, 8 * 700)


def test_speculative_errors_are_one_line_in_both() -> None:
    for settings, flag in (
        ({"spec_draft_model": "phi-3-mini"}, "--spec-draft"),
        ({"spec_draft": 2, "spec_accept": 2.0}, "--spec-accept"),
    ):
        with pytest.raises(TailscopeError, match=flag):
            build_replica(flags=EngineFlags(**settings))
        with pytest.raises(TailscopeError, match=flag):
            build_cluster(SimArgs(**settings))
