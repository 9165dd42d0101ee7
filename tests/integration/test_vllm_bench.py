"""`tailscope bench` against a real vLLM CPU server (issue 2, "Tests that must exist").

Every request must succeed, output token counts must equal ``max_tokens`` (``ignore_eos``), and the number of
requests we count as completed must equal the server's own ``vllm:request_success_total`` delta.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tailscope.testing.judgement import Judgement
from tailscope.testing.vllm import VllmServer

# The first test here may start the session's vLLM server (2-3 min on a loaded 2-core machine): allow for it.
pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(480)]

REQUESTS = 20
OUTPUT_TOKENS = 32
SUCCESS = "vllm:request_success_total"


def _finished_by_reason(server: VllmServer) -> dict[str, float]:
    series = server.metrics().get(SUCCESS, {})
    return {dict(labels)["finished_reason"]: value for labels, value in series.items()}


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after.keys() | before.keys()}


def _bench(server: VllmServer, tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "out.json"
    argv = [
        sys.executable, "-m", "tailscope", "bench",
        "--url", server.base_url, "--model", server.model,
        "--requests", str(REQUESTS), "--concurrency", "4",
        "--input-tokens", "64", "--output-tokens", str(OUTPUT_TOKENS),
        "--json", str(out), "--quiet", *extra,
    ]  # fmt: skip
    env = {**os.environ, "TAILSCOPE_DB": str(tmp_path / "store.duckdb")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, check=False)
    assert proc.returncode == 0, f"tailscope bench exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _server_delta(server: VllmServer, before: dict[str, float], expected: int) -> dict[str, float]:
    """The success-counter delta; polled briefly because the API server updates it just after the last chunk."""
    deadline = time.monotonic() + 5.0
    while True:
        delta = _delta(before, _finished_by_reason(server))
        if sum(delta.values()) >= expected or time.monotonic() > deadline:
            return delta
        time.sleep(0.1)


def test_bench_counts_match_the_server(vllm_server: VllmServer, tmp_path: Path) -> None:
    before = _finished_by_reason(vllm_server)
    doc = _bench(vllm_server, tmp_path)

    summary = doc["summary"]
    counts = summary["requests"]
    assert counts["total"] == REQUESTS
    assert counts["completed"] == REQUESTS
    assert counts["failed"] == 0
    assert counts["incomplete"] == 0
    assert summary["errors"] == {}

    records = doc["requests"]
    assert len(records) == REQUESTS
    for r in records:
        assert r["status"] == "ok", r
        assert r["error"] in (None, ""), r
        assert r["output_tokens"] == OUTPUT_TOKENS, r
        assert r["tokens_source"] == "usage", r  # vLLM reports usage; we must prefer it to chunk counting
        assert r["input_tokens"] > 0, r
        assert sum(r["chunk_tokens"]) == OUTPUT_TOKENS, r
        assert r["server_request_id"], r
        assert r["scheduled_s"] <= r["sent_s"] <= r["first_token_s"] <= r["end_s"], r
    assert len({r["server_request_id"] for r in records}) == REQUESTS

    delta = _server_delta(vllm_server, before, counts["completed"])
    assert sum(delta.values()) == counts["completed"], delta
    # ignore_eos + max_tokens: every request ends by length, none stopped, aborted or failed on the server.
    assert delta.get("length") == REQUESTS, delta

    assert summary["ttft_ms"]["count"] == REQUESTS
    assert summary["output_tokens_per_s"] > 0
    # Our own telemetry found vLLM's gauges under their real names.
    server = summary["server"]
    assert server["queue_depth"]["metric"] == "vllm:num_requests_waiting"
    assert server["running"]["metric"] == "vllm:num_requests_running"
    assert server["kv_usage"]["metric"] == "vllm:kv_cache_usage_perc"
    assert server["queue_depth"]["samples"] >= 1


def test_bench_with_tokenizer_sends_exact_prompt_lengths(
    vllm_server: VllmServer, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from tokenizers import Tokenizer

    tokenizer_path = tiny_model_dir / "tokenizer.json"
    doc = _bench(vllm_server, tmp_path, "--tokenizer", str(tokenizer_path))
    # The server counts the chat template's tokens too; they split cleanly at the special tokens.
    template = Tokenizer.from_file(str(tokenizer_path)).encode("<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n")
    assert {r["input_tokens"] for r in doc["requests"]} == {64 + len(template.ids)}
    assert {r["output_tokens"] for r in doc["requests"]} == {OUTPUT_TOKENS}


def test_bench_sees_the_queue_when_the_kv_cache_is_full(
    vllm_server: VllmServer, tiny_model_dir: Path, tmp_path: Path, judgement: Judgement
) -> None:
    info = dict(next(iter(vllm_server.metrics()["vllm:cache_config_info"])))
    kv_tokens = int(info["kv_cache_size_tokens"])
    per_request = 1000 + 12 + OUTPUT_TOKENS  # prompt + chat template + output
    n = -(-2 * kv_tokens // per_request)  # twice what fits: about half the requests must wait for KV space
    if n > 64:
        pytest.skip(f"this server's KV cache ({kv_tokens} tokens) is too large to fill quickly")
    before = _finished_by_reason(vllm_server)
    doc = _bench(
        vllm_server,
        tmp_path,
        "--tokenizer", str(tiny_model_dir / "tokenizer.json"),
        "--input-tokens", "1000",
        "--requests", str(n),
        "--concurrency", str(n),
        "--scrape-interval", "0.1",  # the queue lasts about a second on a quiet machine: scrape it often
    )  # fmt: skip
    assert doc["summary"]["requests"]["completed"] == n
    assert {r["output_tokens"] for r in doc["requests"]} == {OUTPUT_TOKENS}
    server = doc["summary"]["server"]
    if server["scrapes"]["failed"] and server["queue_depth"]["max"] < 1:
        # a busy machine: the API server answered too few scrapes to catch the queue (the run says so)
        assert any("scrapes of" in w for w in doc["summary"]["warnings"])
        judgement.cannot_judge(f"{server['scrapes']} scrapes, the queue was not caught")
        return
    assert server["queue_depth"]["max"] >= 1, server
    assert server["kv_usage"]["max"] > 0.5, server
    assert sum(_server_delta(vllm_server, before, n).values()) == n
