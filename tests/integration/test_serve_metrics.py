"""/metrics of tailscope serve is consistent with the requests sent and with the engine's own counters."""

from __future__ import annotations

import asyncio
import itertools
import re

import aiohttp
import pytest

from tailscope.serve.embedded import EmbeddedServer
from tailscope.serve.engine_factory import build_replica
from tailscope.serve.tokenizer import ChatMessage, block_hashes, encode_chat

pytestmark = pytest.mark.integration

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def scrape(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = _LINE.match(line)
        assert m, line
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def _messages(system: str, i: int) -> list[ChatMessage]:
    return [ChatMessage("system", system), ChatMessage("user", f"question number {i} " + "detail " * (i * 7))]


def test_metrics_match_requests_sent() -> None:
    engine, options = build_replica("llama-3.1-8b", "h100-sxm", speed=5.0)
    system = "You are a helpful assistant. " * 48  # a shared prefix: ≥ 16 full blocks of identical tokens
    lab = '{model_name="llama-3.1-8b",engine="0"}'
    with EmbeddedServer(engine, options) as srv:

        async def run() -> tuple[list[dict[str, object]], str, str]:
            async with aiohttp.ClientSession() as s:
                before = await (await s.get(srv.base_url + "/metrics")).text()

                async def one(i: int) -> dict[str, object]:
                    body = {
                        "messages": [{"role": m.role, "content": m.content} for m in _messages(system, i)],
                        "max_tokens": 10 + i,
                        "ignore_eos": True,
                    }
                    async with s.post(srv.base_url + "/v1/chat/completions", json=body) as r:
                        assert r.status == 200
                        data: dict[str, object] = await r.json()
                        return data

                first = await one(0)  # warms the prefix cache
                rest = await asyncio.gather(*(one(i) for i in range(1, 12)))
                after = await (await s.get(srv.base_url + "/metrics")).text()
                return [first, *rest], before, after

        bodies, before_text, after_text = asyncio.run(asyncio.wait_for(run(), 60))
        stats = srv.call(lambda st: st.loop.engine.stats())

    before, after = scrape(before_text), scrape(after_text)
    prompt = sum(b["usage"]["prompt_tokens"] for b in bodies)  # type: ignore[index]
    completion = sum(b["usage"]["completion_tokens"] for b in bodies)  # type: ignore[index]
    assert completion == sum(10 + i for i in range(12))
    assert before["vllm:request_success_total" + lab[:-1] + ',finished_reason="length"}'] == 0
    assert after["vllm:request_success_total" + lab[:-1] + ',finished_reason="length"}'] == 12
    assert after["vllm:request_success_total" + lab[:-1] + ',finished_reason="abort"}'] == 0
    assert after["vllm:time_to_first_token_seconds_count" + lab] == 12
    assert after["vllm:e2e_request_latency_seconds_count" + lab] == 12
    assert after["vllm:inter_token_latency_seconds_count" + lab] == completion - 12
    assert after["vllm:request_prompt_tokens_sum" + lab] == prompt
    assert after["vllm:request_generation_tokens_sum" + lab] == completion
    # token counters and gauges are the engine's own
    assert after["vllm:generation_tokens_total" + lab] == stats.generation_tokens_total == completion
    assert after["vllm:prompt_tokens_total" + lab] == stats.prompt_tokens_total
    assert after["vllm:num_requests_running" + lab] == 0
    assert after["vllm:num_requests_waiting" + lab] == 0
    # the shared system prompt hits the prefix cache after the first request
    hashes = [block_hashes(encode_chat(_messages(system, i))) for i in range(12)]
    shared = [
        sum(1 for _ in itertools.takewhile(lambda ab: ab[0] == ab[1], zip(hashes[0], h, strict=False)))
        for h in hashes[1:]
    ]
    assert min(shared) >= 16
    assert after["vllm:prefix_cache_queries_total" + lab] == prompt == stats.prefix_queries_tokens
    assert after["vllm:prefix_cache_hits_total" + lab] == 16 * sum(shared) == stats.prefix_hits_tokens
    # TTFT/E2E sums are wall seconds at --speed 5: positive and ordered
    assert 0 < after["vllm:time_to_first_token_seconds_sum" + lab] < after["vllm:e2e_request_latency_seconds_sum" + lab]
    assert any(k.startswith("vllm:cache_config_info{") for k in after)
