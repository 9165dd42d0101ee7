"""Preflight has the server count a prompt (``POST /tokenize``) when the lengths are the load generator's estimate
(no ``--tokenizer``): a workload that fits by the estimate but not as the server counts is refused before any load,
and a server that counts far from the estimate is said in the run's warnings."""

from __future__ import annotations

import pytest

import tailscope
from tailscope.errors import ConfigError
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration


def _bench(srv: ScriptedServer, input_tokens: int) -> tailscope.BenchResult:
    return tailscope.bench(
        srv.url, concurrency=2, requests=4, input_tokens=input_tokens, output_tokens=8, metrics_url="off"
    )


def test_a_workload_too_long_as_the_server_counts_is_refused_before_any_load() -> None:
    cfg = ScriptedConfig(ttft_ms=5, itl_ms=1, max_model_len=2048, tokens_per_word=1.7)
    with ScriptedServer(cfg) as srv:
        with pytest.raises(ConfigError, match=r"counts the prompts ×1\.70.*serves a context of 2,048"):
            _bench(srv, 1200)  # 1,200 by the estimate, ≈ 2,040 as the server counts
        assert srv.truth.completed == 0  # refused before any load (the dialect probe is not logged)
        res = _bench(srv, 300)
    assert res.summary.requests.completed == 4
    said = [w for w in res.summary.warnings if w.startswith("PROMPTS:")]
    assert len(said) == 1
    assert "512-token prompt" in said[0]
    assert "870 tokens (×1.70)" in said[0]


@pytest.mark.parametrize("tokens_per_word", [1.0, None])
def test_a_server_counting_like_the_estimate_or_without_tokenize_says_nothing(tokens_per_word: float | None) -> None:
    cfg = ScriptedConfig(ttft_ms=5, itl_ms=1, max_model_len=2048, tokens_per_word=tokens_per_word)
    with ScriptedServer(cfg) as srv:
        res = _bench(srv, 300)
    assert res.summary.requests.completed == 4
    assert not [w for w in res.summary.warnings if w.startswith("PROMPTS:")]
