"""aiohttp's transport says how each request's connection was had, through aiohttp's trace hooks."""

from __future__ import annotations

import asyncio

from tailscope.client.transport import AioHttpTransport


def test_aiohttp_connection_phases_on_the_first_request_only() -> None:
    from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer

    async def go(url: str) -> list[tuple[bool | None, int | None, int | None, int | None]]:
        t = AioHttpTransport(url.replace("127.0.0.1", "localhost"))
        seen = []
        try:
            for _ in range(2):
                async with t.post(
                    "/v1/completions", b'{"max_tokens":2,"prompt":"a"}', {"Content-Type": "application/json"}
                ) as r:
                    seen.append(r.connection)  # type: ignore[attr-defined]
                    _ = [d async for d in r.iter_chunks()]
        finally:
            await t.close()
        return seen

    with ScriptedServer(ScriptedConfig(ttft_ms=1, itl_ms=1)) as srv:
        first, second = asyncio.run(go(srv.url))
    reused, dns, connect, tls = first
    assert reused is False
    assert dns is not None
    assert dns > 0  # localhost: a name aiohttp resolves (its cache is empty)
    assert connect is not None
    assert connect > 0
    assert tls is None  # aiohttp's connect includes the handshake: not told apart
    assert second == (True, None, None, None)
