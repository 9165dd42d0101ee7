"""The reference application's HTTP service: OpenAI-compatible chat completions in front, admin endpoints aside.

* ``POST /v1/chat/completions`` — SSE streaming (``"stream": true``) or one JSON body; the answer is capped at the
  preset's ``answer_tokens``; an incoming W3C ``traceparent`` becomes the root span's parent.
* ``GET /v1/models``, ``GET /health``.
* ``GET /admin/state``; ``POST /admin/degrade`` ``{"level": 0-3}`` (1: no retrieval, 2: FAQ search only and no
  agent, 3: a static answer); ``POST /admin/faults`` ``{"fault": "llm-down", "on": true}`` or ``{"clear": true}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from tailscope.app.business import SqlitePool
from tailscope.app.inference import Engines, ModelError, delta_text
from tailscope.app.options import AppOptions
from tailscope.app.pipeline import FAULTS, Outcome, Pipeline, Throttled
from tailscope.app.tracing import AppTracer, SpanRef
from tailscope.errors import TargetError
from tailscope.serve.site import serve_site
from tailscope.workload.app_preset import AppPreset

PIPELINE: web.AppKey[Pipeline] = web.AppKey("pipeline", Pipeline)


def _json(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return _json({"error": {"message": message, "type": kind, "code": status}}, status)


def _chunk(rid: str, model: str, text: str | None, usage: dict[str, int] | None = None) -> bytes:
    choices = [] if text is None else [{"index": 0, "delta": {"content": text}, "finish_reason": None}]
    body: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)


def _fallback_payloads(rid: str, model: str, text: str) -> list[bytes]:
    words = text.split(" ")
    out = [_chunk(rid, model, w if k == 0 else " " + w) for k, w in enumerate(words)]
    out.append(
        _chunk(rid, model, None, {"prompt_tokens": 0, "completion_tokens": len(words), "total_tokens": len(words)})
    )
    return out


def _question(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    last = messages[-1]
    content = last.get("content") if isinstance(last, dict) else None
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    pipe = request.app[PIPELINE]
    try:
        body = orjson.loads(await request.read())
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        question = _question(body)
    except (orjson.JSONDecodeError, ValueError) as exc:
        return _error(400, str(exc))
    cap = pipe.preset.answer_tokens
    asked = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = min(asked, cap) if isinstance(asked, int) and asked > 0 else cap
    stream = bool(body.get("stream"))
    pipe.state.requests += 1
    attrs = {"http.request.method": "POST", "http.route": "/v1/chat/completions", "app.preset": pipe.preset.name}
    if "X-Tailscope-Probe" in request.headers:  # bench's preflight probe: tell it apart from the load in the traces
        attrs["app.probe"] = request.headers["X-Tailscope-Probe"]
    caller = request.headers.get("X-User-Id")
    parent = pipe.tracer.extract(request.headers)
    with pipe.tracer.span("POST /v1/chat/completions", "gateway", attrs, kind="server", parent=parent) as root:
        outcome = Outcome()
        try:
            return await _answer(request, pipe, root, outcome, question, max_tokens, stream, _user(caller))
        except Throttled as exc:  # the gateway's limits: 429 with when to retry, as real gateways answer
            pipe.state.throttled += 1
            root.error(str(exc))
            root.set("http.response.status_code", 429)
            resp = _error(429, f"rate limited: {exc}", "rate_limit_error")
            resp.headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
            return resp
        finally:
            pipe.release(outcome)


def _user(header: str | None) -> int | None:
    """The caller's user id from ``X-User-Id`` (an integer), else None (the gateway draws one)."""
    try:
        return int(header) if header is not None else None
    except ValueError:
        return None


async def _answer(
    request: web.Request,
    pipe: Pipeline,
    root: SpanRef,
    outcome: Outcome,
    question: str,
    max_tokens: int,
    stream: bool,
    caller: int | None = None,
) -> web.StreamResponse:
    rng, messages = await pipe.prepare(question, outcome, caller)
    rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    model = pipe.preset.served_model
    payloads: list[bytes] = []
    resp: web.StreamResponse | None = None
    text_parts: list[str] = []
    usage: dict[str, Any] | None = None

    async def emit(payload: bytes) -> None:
        nonlocal resp
        if not stream or pipe.preset.sse_buffering:
            payloads.append(payload)
            return
        if resp is None:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
        await resp.write(b"data: " + payload + b"\n\n")

    failed: str | None = None
    if messages is None:
        for payload in _fallback_payloads(rid, model, pipe.canned_text(outcome, max_tokens)):
            await emit(payload)
    else:
        try:
            async for payload in pipe.answer(rng, messages, max_tokens, small=outcome.simple):
                text, u = delta_text(payload)
                text_parts.append(text)
                usage = u or usage
                await emit(payload)
        except ModelError as exc:
            if not pipe.options.fallback:
                failed = str(exc)
            else:
                outcome.fallback = "faq" if outcome.faq_hits else "static"
                pipe.state.fallbacks += 1
                for payload in _fallback_payloads(rid, model, pipe.canned_text(outcome, max_tokens)):
                    await emit(payload)
    if outcome.fallback:
        root.set("app.fallback", outcome.fallback)
    if failed is not None:
        pipe.state.errors += 1
        root.error(failed)
        root.set("http.response.status_code", 502)
        if resp is None:
            return _error(502, f"the model failed and fallback is off: {failed}", "upstream_error")
        with contextlib.suppress(ConnectionError):
            await resp.write(b'data: {"error": {"message": "the model failed mid-stream", "code": 502}}\n\n')
        return resp
    answer = "".join(text_parts)
    await pipe.finish(rng, question, answer, outcome)
    root.set("http.response.status_code", 200)
    if not stream:
        return _json(_completion(rid, model, payloads, usage))
    if resp is None:  # buffered (the sse-buffering incident): everything leaves at once
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(b"".join(b"data: " + p + b"\n\n" for p in payloads))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def _completion(rid: str, model: str, payloads: list[bytes], usage: dict[str, Any] | None) -> dict[str, Any]:
    text = ""
    for p in payloads:
        t, u = delta_text(p)
        text += t
        usage = u or usage
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


async def models(request: web.Request) -> web.StreamResponse:
    name = request.app[PIPELINE].preset.served_model
    return _json({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "tailscope"}]})


async def health(request: web.Request) -> web.StreamResponse:
    return _json({"status": "ok"})


async def admin_state(request: web.Request) -> web.StreamResponse:
    pipe = request.app[PIPELINE]
    s = pipe.state
    return _json(
        {
            "preset": pipe.preset.name,
            "degrade": s.degrade,
            "faults": sorted(s.faults),
            "requests": s.requests,
            "fallbacks": s.fallbacks,
            "errors": s.errors,
            "throttled": s.throttled,
            "fallback": pipe.options.fallback,
            "time_scale": pipe.options.time_scale,
        }
    )


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError as exc:
        raise web.HTTPBadRequest(text=f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="expected a JSON object")
    return body


async def admin_degrade(request: web.Request) -> web.StreamResponse:
    body = await _body(request)
    level = body.get("level")
    if not isinstance(level, int) or not 0 <= level <= 3:
        return _error(400, f"level must be 0 (normal), 1 (no retrieval), 2 (FAQ only) or 3 (static) (got {level!r})")
    request.app[PIPELINE].state.degrade = level
    return await admin_state(request)


async def admin_faults(request: web.Request) -> web.StreamResponse:
    body = await _body(request)
    faults = request.app[PIPELINE].state.faults
    if body.get("clear"):
        faults.clear()
        return await admin_state(request)
    name = body.get("fault")
    if name not in FAULTS:
        return _error(400, f'fault must be one of {", ".join(FAULTS)} (got {name!r}); or send {{"clear": true}}')
    if body.get("on", True):
        faults.add(name)
    else:
        faults.discard(name)
    return await admin_state(request)


def build_app(pipeline: Pipeline) -> web.Application:
    """The aiohttp application around ``pipeline`` (started and stopped by :class:`ReferenceApp`)."""
    app = web.Application(client_max_size=8 * 1024 * 1024)
    app[PIPELINE] = pipeline
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/admin/state", admin_state)
    app.router.add_post("/admin/degrade", admin_degrade)
    app.router.add_post("/admin/faults", admin_faults)
    return app


class ReferenceApp:
    """One running reference application: engines, database pool, tracer and HTTP server.

    Args:
        preset: the application (fixes and incidents already applied).
        options: where it listens, its time scale, model server, span collector, seed and fallback.
    """

    def __init__(self, preset: AppPreset, options: AppOptions | None = None) -> None:
        options = options or AppOptions()
        self.preset = preset
        self.host = options.host
        self.port = options.port
        self.tracer = AppTracer(options.otlp_endpoint, service=f"tailscope-app:{preset.name}")
        self.engines = Engines(preset, options)
        self.pool = SqlitePool(preset.pool_size)
        self.pipeline = Pipeline(preset, self.tracer, self.engines, self.pool, options)
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> str:
        """Start everything; returns the base URL (``http://HOST:PORT``, no ``/v1``).

        Raises:
            TargetError: the address cannot be bound or an engine cannot start.
        """
        await asyncio.to_thread(self.pool.open)
        try:
            await self.engines.start()
            self._runner = web.AppRunner(build_app(self.pipeline), access_log=None, handle_signals=False)
            await self._runner.setup()
            try:
                self.port = await serve_site(self._runner, self.host, self.port)
            except OSError as exc:
                raise TargetError(
                    f"cannot listen on {self.host}:{self.port} ({exc.strerror or exc}); pick another --port"
                ) from None
        except BaseException:
            await self.stop()
            raise
        return self.base_url

    async def stop(self) -> None:
        """Stop serving, flush the spans, close the engines and the database."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.engines.stop()
        await asyncio.to_thread(self.tracer.shutdown)
        await asyncio.to_thread(self.pool.close)

    async def flush_spans(self) -> None:
        """Export the spans buffered so far."""
        await asyncio.to_thread(self.tracer.flush)
