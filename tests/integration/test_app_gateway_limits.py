"""The reference app's gateway refuses what real gateways refuse (issue 25): over its rate limit or a caller's quota
a request is answered 429 with ``Retry-After``, before any retrieval or model work, and its ``rate limit`` span says
why. Over real HTTP on loopback, bounded."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import tailscope
from tailscope.app import presets
from tailscope.records import Span
from tailscope.trace.receiver import OtlpReceiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BODY = {"model": "knowledge-assistant", "messages": [{"role": "user", "content": "how do I reset a password?"}]}


def _preset(tmp_path: Path, limits: str) -> Path:
    """The shipped knowledge-assistant preset with gateway limits added."""
    text = (Path(presets.__file__).parent / "presets" / "knowledge-assistant.yaml").read_text(encoding="utf-8")
    path = tmp_path / "limited.yaml"
    path.write_text(text.replace("gateway:\n", f"gateway:\n{limits}", 1), encoding="utf-8")
    return path


async def _post(http: aiohttp.ClientSession, url: str, user: int | None = None) -> tuple[int, dict[str, Any], str]:
    headers = {"X-User-Id": str(user)} if user is not None else {}
    async with http.post(f"{url}/v1/chat/completions", json=BODY, headers=headers) as r:
        return r.status, await r.json(), r.headers.get("Retry-After", "")


async def _limited(preset: Path) -> tuple[list[tuple[int, dict[str, Any], str]], tuple[int, ...], list[Span]]:
    spans: list[Span] = []
    receiver = OtlpReceiver(spans.extend, port=0, flush_interval_s=0.2)
    await receiver.start()
    try:
        app = tailscope.start_app(
            preset=preset, fixes="all", time_scale=0.02, seed=3, otlp_endpoint=f"http://127.0.0.1:{receiver.port}"
        )
        async with app, aiohttp.ClientSession() as http:
            burst = await asyncio.gather(*(_post(http, app.url) for _ in range(5)))  # all at once
            t0 = time.monotonic()
            quota = [(await _post(http, app.url, user=7))[0] for _ in range(3)]
            quota.append((await _post(http, app.url, user=8))[0])
            if int(t0 // 60) != int(time.monotonic() // 60):  # the quota's minute turned over meanwhile: once more
                quota = [(await _post(http, app.url, user=9))[0] for _ in range(3)]
                quota.append((await _post(http, app.url, user=10))[0])
            await app.flush_spans()
    finally:
        await asyncio.sleep(0.3)
        await receiver.stop()
    return list(burst), tuple(quota), spans


def test_the_gateway_answers_429_over_its_rate_limit_and_a_callers_quota(tmp_path: Path) -> None:
    preset = _preset(tmp_path, "  rate_limit_rps: 0.5\n  rate_limit_burst: 2\n")
    burst, _, spans = asyncio.run(_limited(preset))
    codes = sorted(status for status, _, _ in burst)
    assert codes == [200, 200, 429, 429, 429]  # the burst of two, then refused (a token every 2 s)
    for status, doc, retry in burst:
        if status == 429:
            assert doc["error"]["type"] == "rate_limit_error"
            assert "over the gateway's rate limit of 0.5/s" in doc["error"]["message"]
            assert int(retry) >= 1
    throttled = [s for s in spans if s.name == "rate limit" and s.attributes.get("app.throttled")]
    assert len(throttled) >= 3  # the refusals, each saying why in its span (the quota test's too)
    refused_traces = {s.trace_id for s in throttled}
    assert not [s for s in spans if s.trace_id in refused_traces and s.name == "retrieve"]  # no work after a refusal

    preset = _preset(tmp_path, "  user_quota_per_min: 2\n")
    _, quota, _ = asyncio.run(_limited(preset))
    assert quota == (200, 200, 429, 200)  # user 7's third request in the minute is refused; user 8 has its own
