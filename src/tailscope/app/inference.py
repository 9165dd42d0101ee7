"""The application's model calls: streaming chat completions from an OpenAI-compatible engine.

By default the built-in simulated engines run in the application's own event loop on free 127.0.0.1 ports (the
large model and the small model of small-model-routing, each ``tailscope serve``'s aiohttp app over the engine model,
at ``speed / time_scale``); with ``llm_url`` every call goes to that server instead. Without keep-alive every call
opens a new TCP connection (``force_close``), as an SDK client created per request does.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from tailscope.app.options import AppOptions
from tailscope.errors import TargetError
from tailscope.workload.app_preset import AppPreset


class ModelError(Exception):
    """A model call failed (connection refused, HTTP error, a cut stream): the caller falls back or answers 502."""


class Engines:
    """The model endpoints of one application: start them (when built in), stream from them, stop them.

    Args:
        preset: its ``engine`` answers (and plans agent steps), its ``small_engine`` is the small model of
            small-model-routing; ``keep_alive`` reuses connections (else one TCP connection per call).
        options: ``time_scale`` (every built-in engine runs ``1 / time_scale`` times faster than its modelled
            hardware), ``llm_url`` (an OpenAI-compatible server to call instead of the built-in engines) and
            ``seed`` (of the built-in engines).
    """

    def __init__(self, preset: AppPreset, options: AppOptions) -> None:
        self.large = preset.engine
        self.small = preset.small_engine
        self.keep_alive = preset.keep_alive
        self.options = options
        self.llm_url = options.llm_url.rstrip("/").removesuffix("/v1") if options.llm_url else None
        self.urls: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self._runners: list[web.AppRunner] = []
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Start the built-in engines (or ask ``llm_url`` for its model) and open the client session.

        Raises:
            TargetError: the engine cannot start, or ``llm_url`` does not answer ``/v1/models``.
        """
        connector = aiohttp.TCPConnector(limit=0, force_close=not self.keep_alive)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600))
        if self.llm_url is not None:
            name = await self._remote_model(self.llm_url)
            for role in ("large", "small"):
                self.urls[role], self.names[role] = self.llm_url, name
            return
        from tailscope.serve.app import build_app, make_runner
        from tailscope.serve.engine_factory import build_replica
        from tailscope.serve.site import serve_site

        for role, spec in (("large", self.large), ("small", self.small)):
            engine, options = build_replica(
                spec.model, spec.gpu, tp=spec.tp, speed=spec.speed / self.options.time_scale, seed=self.options.seed
            )
            runner = make_runner(build_app(engine, options))
            await runner.setup()
            self._runners.append(runner)
            port = await serve_site(runner, "127.0.0.1", 0)
            self.urls[role], self.names[role] = f"http://127.0.0.1:{port}", options.model_name

    async def _remote_model(self, url: str) -> str:
        assert self._session is not None
        try:
            async with self._session.get(f"{url}/v1/models") as resp:
                data = await resp.json(content_type=None)
            return str(data["data"][0]["id"])
        except (aiohttp.ClientError, OSError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise TargetError(f"--llm-url {url}: GET /v1/models failed ({exc}); is the server up?") from None

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        for runner in self._runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()
        self._runners.clear()

    async def stream(self, role: str, messages: list[dict[str, str]], max_tokens: int) -> AsyncIterator[bytes]:
        """The SSE ``data:`` payloads of one streaming chat completion (``[DONE]`` excluded).

        Raises:
            ModelError: the call failed before or during the stream.
        """
        if self._session is None:
            raise ModelError("the model client is not started")
        body = {
            "model": self.names[role],
            "messages": messages,
            "max_tokens": max_tokens,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
        try:
            async with self._session.post(
                f"{self.urls[role]}/v1/chat/completions",
                data=orjson.dumps(body),
                headers={"Content-Type": "application/json"},
            ) as resp:
                if resp.status != 200:
                    raise ModelError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
                done = False
                async for line in resp.content:
                    if done or not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        # read on to the body's end: a response left unread closes its connection instead of
                        # returning it to the pool, which would defeat keep-alive
                        done = True
                        continue
                    yield payload
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ModelError(f"{type(exc).__name__}: {exc}") from None
        if not done:
            raise ModelError("the stream ended without [DONE]")


def delta_text(payload: bytes) -> tuple[str, dict[str, Any] | None]:
    """The text and the usage (None when absent) of one chat-completion chunk."""
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return "", None
    text = ""
    for choice in chunk.get("choices") or ():
        text += (choice.get("delta") or {}).get("content") or ""
    return text, chunk.get("usage")
