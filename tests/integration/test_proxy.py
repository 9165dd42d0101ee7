"""``tailscope proxy`` over real sockets in front of the scripted server (whose token times are known): the latency
bench measures is the rule's, errors are counted per class, a stall is an ITL stall, a reset a broken stream, a black
hole a first-token timeout; rules change live over the admin API; TCP mode passes bytes with its delays.

Latency judgements allow generous slack and are made on a quiet machine only (the ``judgement`` fixture: on a busy one
the run's summary lists the figures as not judged); the functional ones always run.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from typing import Any

import aiohttp
import pytest

import tailscope
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

pytestmark = pytest.mark.integration

TOKENS = 20


async def _bench(url: str, n: int, **kw: Any) -> tailscope.BenchResult:
    args: dict[str, Any] = {"requests": n, "concurrency": 2, "output_tokens": TOKENS, "warmup": 0, "seed": 1}
    return await tailscope.bench_async(url=url + "/v1", **(args | kw))


@pytest.fixture(scope="module")
def upstream() -> Any:
    with ScriptedServer(ScriptedConfig(ttft_ms=20, itl_ms=5, log=False)) as srv:
        yield srv.url.removesuffix("/v1")


def test_latency_errors_stall_reset_blackhole_and_live_rules(upstream: str, judgement: Any) -> None:
    async def main() -> None:
        async with tailscope.start_proxy(to=upstream, seed=3) as px:
            base = await _bench(px.url, 16)
            assert base.summary.errors == {}
            px.set_rules([{"name": "lat", "latency": {"dist": "fixed", "ms": 150}}])
            slow = await _bench(px.url, 16)
            added = (slow.summary.ttft_ms.p50 or 0) - (base.summary.ttft_ms.p50 or 0)
            assert added >= 100, added  # a delay is never shorter than asked
            judgement.holds(120 <= added <= 220, f"the proxy's fixed 150 ms latency: TTFT p50 {added:.0f} ms added")

            # errors for a share of requests, set live over the admin API, counted per class
            async with aiohttp.ClientSession() as s:
                rule = {"name": "err", "share": 0.5, "path": "/v1/chat", "error": {"status": 503}}
                async with s.put(px.admin_url + "/rules", json=rule) as resp:
                    assert resp.status == 200
                    assert [r["name"] for r in (await resp.json())["rules"]] == ["err"]
                async with s.post(px.admin_url + "/rules", json={"latency": {"dist": "fixed"}}) as resp:
                    assert resp.status == 400
                    assert "a fixed latency needs ms" in (await resp.json())["error"]
                errs = await _bench(px.url, 60)
                failed = errs.summary.errors.get("http_5xx", 0)
                assert set(errs.summary.errors) == {"http_5xx"}
                assert 15 <= failed <= 45, failed  # 60 × 0.5 ± 4σ
                # bench's one-request dialect probe goes through the proxy too
                assert failed <= px.stats["errors_injected"] <= failed + 1
                async with s.delete(px.admin_url + "/rules/err") as resp:
                    assert (await resp.json())["rules"] == []
                async with s.delete(px.admin_url + "/rules/err") as resp:
                    assert resp.status == 404

            # a stall mid-stream is an ITL stall
            px.set_rules([{"name": "stall", "path": "/v1/chat", "stall": {"after_bytes": 600, "ms": 400}}])
            stalled = await _bench(px.url, 4)
            assert stalled.summary.errors == {}
            assert (stalled.summary.max_stall_ms.p50 or 0) >= 350
            assert px.stats["stalls"] >= 4

            # a reset is a broken stream
            px.set_rules([{"name": "reset", "path": "/v1/chat", "reset": {"after_bytes": 400}}])
            broken = await _bench(px.url, 4)
            assert broken.summary.errors == {"stream_broken": 4}

            # a black hole accepts and never answers (a client sees its own timeout)
            px.set_rules([{"name": "bh", "path": "/v1/chat", "blackhole": True}])
            async with aiohttp.ClientSession() as s:
                body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
                with pytest.raises(TimeoutError):
                    await s.post(px.url + "/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=0.5))
                async with s.get(px.url + "/v1/models") as resp:  # other paths still pass
                    assert resp.status == 200
            assert px.stats["blackholed"] == 1

            # a bandwidth cap slows the stream down
            px.set_rules([{"name": "bw", "path": "/v1/chat", "bandwidth_kbps": 4}])
            thin = await _bench(px.url, 2, concurrency=1)
            assert thin.summary.errors == {}
            assert (thin.summary.e2e_ms.p50 or 0) > 3 * (base.summary.e2e_ms.p50 or 0)

    asyncio.run(main())


def test_tcp_mode_forwards_bytes_with_the_rules(upstream: str) -> None:
    host_port = upstream.removeprefix("http://")
    request = f"GET /v1/models HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\n\r\n".encode()

    async def fetch(url: str) -> tuple[float, bytes]:
        host, port = url.removeprefix("tcp://").split(":")
        t0 = time.perf_counter()
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        first = await reader.read(1)
        ttfb = time.perf_counter() - t0
        rest = b""
        with contextlib.suppress(ConnectionError):
            rest = await reader.read()
        writer.close()
        return ttfb, first + rest

    async def main() -> None:
        rules = [{"name": "slow", "latency_down": {"dist": "fixed", "ms": 150}}]
        async with tailscope.start_proxy(to=host_port, mode="tcp", rules=rules) as px:
            ttfb, body = await fetch(px.url)
            assert body.startswith(b"HTTP/1.1 200")
            assert b"scripted" in body
            assert ttfb >= 0.14
            px.set_rules([{"name": "cut", "reset": {"after_bytes": 40}}])
            _, cut = await fetch(px.url)
            assert len(cut) == 40
            assert px.stats["resets"] == 1
            assert px.stats["forwarded"] == 2

    asyncio.run(main())


def test_bad_flags_fail_in_one_line_before_listening() -> None:
    cases = [
        (["--latency", "fast"], "--latency takes 200 (ms)"),
        (["--error", "200"], "--error: the status must be 400–599"),
        (["--mode", "udp"], "--mode 'udp': use http or tcp"),
    ]
    for extra, expected in cases:
        out = subprocess.run(
            [sys.executable, "-m", "tailscope", "proxy", "--listen", "0", "--to", "http://127.0.0.1:1", *extra],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 1, out
        assert out.stderr.strip().count("\n") == 0, out.stderr
        assert expected in out.stderr


def test_a_drill_switches_a_proxy_rule_and_sees_the_errors(upstream: str) -> None:
    async def main() -> None:
        async with tailscope.start_proxy(to=upstream) as px:
            result = await tailscope.drill_async(
                {
                    "name": "upstream-503",
                    "target": {"url": px.url},
                    "load": {"rate": 8, "duration_s": 3, "output_tokens": 8},
                    "fault": {
                        "at_s": 1,
                        "for_s": 1,
                        "kind": "proxy",
                        "proxy": px.admin_url,
                        "rule": {"path": "/v1/chat", "error": {"status": 503}},
                    },
                    "expect": {"error_rate_max": 0.01},
                },
                timing=False,
            )
            assert px.rules == []  # the drill removed its rule
        assert not result.passed
        assert result.exit_code == 1
        assert result.before.failed == 0
        assert result.during.requests > 0
        assert result.during.errors == {"http_5xx": result.during.failed}
        assert result.during.error_rate >= 0.8  # a request sent just before the switch may pass
        assert result.after.error_rate <= 0.2
        assert result.fallbacks is None  # a proxy has no fallback counter

    asyncio.run(main())
