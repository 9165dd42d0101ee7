"""The aiohttp application of ``tailscope serve``: OpenAI-compatible routes driven by an :class:`EngineLoop`.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``, ``GET /health``,
``POST /tokenize``, ``GET /metrics``. Run it with :func:`make_runner` (handler cancellation on, so a client that
goes away aborts its request in the engine).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from aiohttp import web

from tailscope.clock import Clock
from tailscope.engine.api import ReplicaEngine
from tailscope.serve.faults import FaultInjector
from tailscope.serve.frontend import Frontend, FrontendModel
from tailscope.serve.loop import EngineLoop, EngineLoopFailed, LiveRequest
from tailscope.serve.metrics import ServeMetrics
from tailscope.serve.options import ServeOptions
from tailscope.serve.otlp import PrefillChunk, RequestTiming, SpanExporter, parse_traceparent
from tailscope.serve.protocol import (
    ApiError,
    CompletionRequest,
    parse_chat,
    parse_completion,
    parse_json_body,
    parse_tokenize,
)
from tailscope.serve.sse import ChunkFactory
from tailscope.serve.streaming import ENGINE_ID_HEADER, Answer, cut, stream_response
from tailscope.serve.tokenizer import as_counted_by, block_hashes, filler_text, stable_key

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ServeState:
    """Everything the handlers share: options, the engine loop, metrics, faults and id generation."""

    def __init__(self, engine: ReplicaEngine, options: ServeOptions, *, clock: Clock | None = None) -> None:
        options.validate()
        self.options = options
        self.metrics = ServeMetrics(options.model_name, max_model_len=options.max_model_len, cache=options.cache)
        phases = options.otlp_endpoint is not None and options.otlp_spans == "phases"
        self.loop = EngineLoop(engine, self.metrics, clock=clock, speed=options.speed, record_chunks=phases)
        self.faults = FaultInjector(options.faults)
        perf = getattr(engine, "perf", None)
        model = perf if options.frontend_latency and isinstance(perf, FrontendModel) else None
        self.frontend = Frontend(model, seed=options.seed)
        self._ids = random.Random(options.seed)
        self.tracer: SpanExporter | None = None
        if options.otlp_endpoint is not None:
            self.tracer = SpanExporter(
                options.otlp_endpoint,
                model=options.model_name,
                service=options.service_name,
                seed=options.seed,
                spans=options.otlp_spans,
            )
        self._seq = 0
        self.created = int(time.time())

    def next_seq(self) -> int:
        """Sequence number of the next completion request (the key of its fault decisions)."""
        self._seq += 1
        return self._seq

    def new_request_id(self) -> str:
        """A fresh 32-hex-digit request id (seeded, so repeatable per server)."""
        return f"{self._ids.getrandbits(128):032x}"

    def output_length(self, req: CompletionRequest) -> tuple[int, str]:
        """Tokens to generate and the finish reason to report for ``req``.

        With ``ignore_eos`` exactly ``max_tokens`` (``"length"``); otherwise the simulated model stops after a
        natural length drawn from the prompt (``"stop"``) unless ``max_tokens`` comes first (``"length"``). Without
        ``max_tokens`` the limit is the rest of the context window, as in vLLM.
        """
        limit = req.max_tokens if req.max_tokens is not None else self.options.max_model_len - len(req.prompt_ids)
        if req.ignore_eos:
            return limit, "length"
        lo, hi = self.options.natural_tokens
        natural = lo + (stable_key(req.prompt_ids) ^ self.options.seed) % (hi - lo + 1)
        return (natural, "stop") if natural < limit else (limit, "length")


STATE: web.AppKey[ServeState] = web.AppKey("tailscope_serve_state", ServeState)


def _json(payload: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8"),
        content_type="application/json",
        headers=headers,
    )


def error_response(err: ApiError, *, request_id: str | None = None, retry_after: int | None = None) -> web.Response:
    """An OpenAI error JSON response for ``err``."""
    headers: dict[str, str] = {}
    if request_id:
        headers["x-request-id"] = request_id
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return _json(err.body(), status=err.status, headers=headers)


@web.middleware
async def _errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as err:
        return error_response(err)
    except web.HTTPException:
        raise
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as exc:  # a bug in the server: answer it as a 500 instead of dropping the connection
        return error_response(ApiError(500, f"internal error in the built-in server: {exc!r}"))


def _check_model(state: ServeState, model: str | None) -> None:
    if model is not None and model != state.options.model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", param="model")


def _check_length(state: ServeState, prompt_len: int, max_tokens: int | None) -> None:
    limit = state.options.max_model_len
    if prompt_len >= limit:
        raise ApiError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your request has {prompt_len} "
            "input tokens. Please reduce the length of the input messages.",
            param="messages",
        )
    if max_tokens is not None and prompt_len + max_tokens > limit:
        raise ApiError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_len + max_tokens} tokens ({prompt_len} in the messages, {max_tokens} in the completion). "
            "Please reduce the length of the messages or completion.",
            param="max_tokens",
        )


async def _completions(request: web.Request, kind: str) -> web.StreamResponse:
    state = request.app[STATE]
    received_ns = state.loop.clock.now_ns()
    received_engine_ns = state.loop.engine_now()
    base_id = request.headers.get("X-Request-Id") or state.new_request_id()
    try:
        body = parse_json_body(await request.read())
        req = parse_chat(body) if kind == "chat" else parse_completion(body)
        opts = state.options
        if opts.prompt_scale != 1.0 or opts.prompt_offset != 0.0:  # a twin: its server's token count
            req = replace(req, prompt_ids=as_counted_by(req.prompt_ids, opts.prompt_scale, opts.prompt_offset))
        _check_model(state, req.model)
        prompt_len = len(req.prompt_ids)
        _check_length(state, prompt_len, req.max_tokens)
        output_tokens, finish_reason = state.output_length(req)
        seq = state.next_seq()
        plan = state.faults.plan(seq, output_tokens)
        if plan.status == 429:
            err = ApiError(429, "Rate limit reached (injected by tailscope serve --rate-limit-rate); retry later.")
            return error_response(err, request_id=base_id, retry_after=state.options.faults.retry_after_s)
        if plan.status is not None:
            err = ApiError(plan.status, "Internal server error (injected by tailscope serve --fail-rate).")
            return error_response(err, request_id=base_id)
        hashes = block_hashes(req.prompt_ids, state.options.block_size)
        loop = state.loop
        in_flight = loop.live_count + state.frontend.pending + 1
        delay_ns = state.frontend.delay_ns(received_engine_ns, prompt_len, in_flight, seq)
        if delay_ns > 0:
            # the API server's latency as sim models it, counted from receipt: our own parsing and tokenizing time
            # is part of it, not added to it (a client that leaves here never reached the engine)
            state.frontend.pending += 1
            try:
                wait_ns = loop.to_wall(received_engine_ns + delay_ns) - loop.clock.now_ns()
                await asyncio.sleep(max(0.0, wait_ns / 1e9))
            finally:
                state.frontend.pending -= 1
        try:
            live = loop.submit(
                prompt_tokens=prompt_len,
                output_tokens=output_tokens,
                block_hashes=hashes,
                finish_reason=finish_reason,
                max_tokens_param=req.max_tokens,
                received_ns=received_ns,
            )
        except EngineLoopFailed as exc:
            raise ApiError(503, str(exc)) from None
        except ValueError as exc:
            raise ApiError(400, f"the request cannot be served by the simulated engine: {exc}") from None
    except ApiError as err:
        return error_response(err, request_id=base_id)
    factory = ChunkFactory(
        kind=kind,
        response_id=("chatcmpl-" if kind == "chat" else "cmpl-") + base_id,
        created=int(time.time()),
        model=state.options.model_name,
        prompt_tokens=prompt_len,
        continuous_usage=req.continuous_usage,
        reasoning_tokens=state.options.reasoning_tokens,
    )
    key = stable_key(req.prompt_ids)
    try:
        answer = Answer(request, state, req, live, plan, factory, key, base_id)
        return await stream_response(answer) if req.stream else await _full(answer)
    finally:
        state.loop.abort(live)  # no-op when it finished; frees the engine when the client went away
        if state.tracer is not None:
            _trace(state.tracer, request, live, base_id, received_ns, state.loop.clock.now_ns())


def _trace(
    tracer: SpanExporter, request: web.Request, live: LiveRequest, request_id: str, received: int, now: int
) -> None:
    """Queue the request's ``llm_request`` span (and its phases): in the caller's trace when it sent a sampled
    ``traceparent``."""
    context = parse_traceparent(request.headers.get("traceparent"))
    if context is not None and not context[2]:
        return  # the caller decided not to sample this trace
    trace_id, parent = (context[0], context[1]) if context is not None else (tracer.new_trace_id(), None)
    off = tracer.unix_offset_ns
    done = live.done and live.last_token_ns is not None
    end = live.last_token_ns if done and live.last_token_ns is not None else now
    chunks = tuple(PrefillChunk(a + off, b + off, n, c, p, d, pool) for a, b, n, c, p, d, pool in live.chunks or ())
    xfer = None if live.kv_transfer is None else (live.kv_transfer[0] + off, live.kv_transfer[1] + off)
    tracer.add(
        RequestTiming(
            trace_id=trace_id,
            parent_span_id=parent,
            request_id=request_id,
            received_ns=received + off,
            queued_ns=live.queued_ns + off,
            scheduled_ns=None if live.scheduled_ns is None else live.scheduled_ns + off,
            first_token_ns=None if live.first_token_ns is None else live.first_token_ns + off,
            last_token_ns=None if live.last_token_ns is None else live.last_token_ns + off,
            end_ns=end + off,
            prompt_tokens=live.prompt_tokens,
            completion_tokens=live.released,
            max_tokens=live.max_tokens_param,
            aborted=not done,
            chunks=chunks,
            finish_reason=live.finish_reason if done else None,
            kv_transfer=xfer,
        )
    )


async def _full(a: Answer) -> web.StreamResponse:
    request, live, plan = a.request, a.live, a.plan
    if plan.disconnect_after is None:
        await live.wait_finished()  # one wake-up at the end, not one per step
    seen = 0
    while not live.done and not live.aborted:
        await live.wait_beyond(seen)
        seen = live.released
        if plan.disconnect_after is not None and seen >= plan.disconnect_after:
            a.state.loop.abort(live)
            cut(request)
            return web.Response(status=200)
    if live.aborted:
        failure = a.state.loop.failure
        raise ApiError(503, str(failure) if failure else "the built-in server is shutting down")
    if plan.stall_after is not None:
        await asyncio.sleep(plan.stall_s)
    text = filler_text(a.key, live.released)
    if a.req.echo:
        text = a.req.prompt_text + text
    payload = a.factory.full_response(text, live.released, live.finish_reason)
    headers = {"x-request-id": a.base_id, ENGINE_ID_HEADER: str(live.id)}
    if plan.malformed_after is not None:
        body = json.dumps(payload).encode("utf-8")
        return web.Response(body=body[: len(body) // 2], content_type="application/json", headers=headers)
    return _json(payload, headers=headers)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``."""
    return await _completions(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions``."""
    return await _completions(request, "completion")


async def models(request: web.Request) -> web.StreamResponse:
    """``GET /v1/models``: the one served model, shaped like vLLM's answer."""
    state = request.app[STATE]
    name = state.options.model_name
    card = {
        "id": name,
        "object": "model",
        "created": state.created,
        "owned_by": "tailscope",
        "root": name,
        "parent": None,
        "max_model_len": state.options.max_model_len,
        "permission": [
            {
                "id": f"modelperm-{name}",
                "object": "model_permission",
                "created": state.created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
    return _json({"object": "list", "data": [card]})


async def health(request: web.Request) -> web.StreamResponse:
    """``GET /health``: 200 with an empty body while the engine loop runs; 503 with the reason once it failed."""
    failure = request.app[STATE].loop.failure
    if failure is not None:
        return web.Response(status=503, text=str(failure))
    return web.Response(status=200)


async def tokenize(request: web.Request) -> web.StreamResponse:
    """``POST /tokenize`` (vLLM's): ``{"count", "max_model_len", "tokens", "token_strs"}``."""
    state = request.app[STATE]
    model, ids = parse_tokenize(parse_json_body(await request.read()))
    _check_model(state, model)
    return _json({"count": len(ids), "max_model_len": state.options.max_model_len, "tokens": ids, "token_strs": None})


async def metrics(request: web.Request) -> web.StreamResponse:
    """``GET /metrics``: Prometheus text exposition with vLLM's metric names."""
    state = request.app[STATE]
    text = state.metrics.render(state.loop.engine.stats())
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Version": "0.0.4"})


def build_app(engine: ReplicaEngine, options: ServeOptions, *, clock: Clock | None = None) -> web.Application:
    """The aiohttp application serving ``engine`` under ``options``.

    The engine loop starts with the application and stops (aborting live requests) when it shuts down.
    """
    app = web.Application(middlewares=[_errors], client_max_size=256 * 1024 * 1024)
    state = ServeState(engine, options, clock=clock)
    app[STATE] = state

    async def _start(_: web.Application) -> None:
        state.loop.start()
        if state.tracer is not None:
            state.tracer.start(state.loop.clock)

    async def _stop(_: web.Application) -> None:
        await state.loop.stop()
        if state.tracer is not None:
            await state.tracer.stop()

    app.on_startup.append(_start)
    app.on_shutdown.append(_stop)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/metrics", metrics)
    return app


def make_runner(app: web.Application) -> web.AppRunner:
    """An :class:`~aiohttp.web.AppRunner` for ``app`` with handler cancellation (client gone → abort)."""
    return web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
