"""What modern servers return: reasoning before the answer, and cached prompt tokens — measured per request against
a server that sends them, and the built-in engine reports its prefix-cache hits in usage."""

from __future__ import annotations

from pathlib import Path

import pytest

import tailscope
from tailscope.metrics.request import ttft_ms
from tailscope.testing.judgement import Judgement
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration


def test_reasoning_tokens_and_the_first_answer_token_are_measured(judgement: Judgement) -> None:
    cfg = ScriptedConfig(ttft_ms=10, itl_ms=5, reasoning_tokens=6, cached_tokens=3)
    with ScriptedServer(cfg) as srv:
        res = tailscope.bench(srv.url, requests=5, output_tokens=10, metrics_url="off")
    assert res.summary.requests.completed == 5
    for r in res.records:
        assert r.reasoning_tokens == 6
        assert r.output_tokens == 10
        assert r.first_answer_ns is not None
        assert r.first_token_ns is not None
        assert r.first_answer_ns >= r.first_token_ns
        assert r.cached_tokens == 3
    # the answer starts after the six reasoning tokens: five inter-token gaps of 5 ms later than the first token — a
    # timing judgement (a starved client reads several events in one go, then the two arrive together)
    gaps = [(r.first_answer_ns - r.first_token_ns) / 1e6 for r in res.records if r.first_answer_ns and r.first_token_ns]
    judgement.holds(min(gaps) >= 6 * 5 * 0.8, f"first answer token ≥ 24 ms after the first reasoning token: {gaps}")
    doc = res.summary_dict()
    block = doc["reasoning"]
    assert block["requests"] == 5
    assert block["reasoning_tokens"]["p50"] == 6
    assert block["answer_tokens"]["p50"] == 4
    assert block["ttfa_ms"]["p50"] > min(t for r in res.records if (t := ttft_ms(r)) is not None)
    assert doc["prompt_cache"]["cached_tokens"] == 15


def test_the_built_in_engine_reports_its_prefix_cache_hits_in_usage(tmp_path: Path) -> None:
    profile = tmp_path / "shared.yaml"
    profile.write_text(
        "name: shared\n"
        "classes: [{name: q, input_tokens: 40, output_tokens: 4}]\n"
        "shared_prefix: {tokens: 512, variants: 1, share: 1.0}\n"
        "arrival: {mode: closed, concurrency: 1}\n"
        "stop: {requests: 8}\n"
    )
    res = tailscope.bench(profile=profile)
    assert all(r.cached_tokens is not None for r in res.records)
    cache = res.summary.prompt_cache
    assert cache is not None
    assert cache.hit_rate is not None
    # after the first request the 512-token system prompt (whole blocks of it) comes from the cache
    assert cache.hit_rate > 0.5, cache
    assert res.records[0].cached_tokens == 0


def test_the_built_in_engine_can_act_as_a_reasoning_model() -> None:
    from tailscope.testing.builtin_server import built_in_server

    with built_in_server(speed=20.0, extra_args=["--reasoning-tokens", "5"]) as url:
        res = tailscope.bench(url, requests=4, output_tokens=12, metrics_url="off")
    assert res.summary.requests.completed == 4
    for r in res.records:
        assert r.reasoning_tokens == 5
        assert r.first_answer_ns is not None
        assert r.first_token_ns is not None
        assert r.first_answer_ns >= r.first_token_ns  # (a read can carry the last reasoning and first answer tokens)
    assert res.summary.reasoning is not None
    assert res.summary.reasoning.answer_tokens.p50 == 7


def test_a_profile_aiming_at_a_prefix_hit_rate_gets_it_from_the_built_in_engine(tmp_path: Path) -> None:
    """``shared_prefix: {hit_rate: 0.5}`` solves the prefix length from the class's prompt length (200 tokens → a
    200-token system prompt); the engine's own ``cached_tokens`` then add up to about half the prompt tokens (whole
    cache blocks, and the chat template's few tokens per prompt, keep it a few points off). The warmup request fills
    the cache."""
    profile = tmp_path / "aim.yaml"
    profile.write_text(
        "name: aim\n"
        "classes: [{name: q, input_tokens: 200, output_tokens: 4}]\n"
        "shared_prefix: {hit_rate: 0.5}\n"
        "arrival: {mode: closed, concurrency: 1}\n"
        "warmup: {requests: 1}\n"
        "stop: {requests: 13}\n"
    )
    res = tailscope.bench(profile=profile)
    assert res.run.settings["shared_prefix"] == {"tokens": 200, "variants": 1, "share": 1.0, "hit_rate_target": 0.5}
    cache = res.summary.prompt_cache
    assert cache is not None
    assert cache.requests == 12
    assert cache.hit_rate == pytest.approx(0.5, abs=0.05), cache  # measured 0.47: 192 of 411 prompt tokens
    # the server's own counters over the run (the warmup's miss included) tell the same
    server_rate = res.summary_dict()["server"]["prefix_cache_hit_rate"]
    assert server_rate == pytest.approx(0.5, abs=0.1), server_rate  # measured 0.43
