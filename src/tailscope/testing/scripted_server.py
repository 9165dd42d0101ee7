"""A scripted OpenAI-compatible streaming server whose token send times are known (ground truth for tests/benchmarks).

Every request streams ``max_tokens`` tokens: the first ``ttft_ms`` after the request arrived, then one every
``itl_ms`` on absolute deadlines. The server logs the true send time (``time.perf_counter_ns``, the same monotonic
clock the client uses on Linux) of every token event, so a test can compare what the client measured with the truth.
A stall window pauses all token emission between two instants. Run it in a thread (:class:`ScriptedServer`) or as a
process: ``python -m tailscope.testing.scripted_server --port 8011 --ttft-ms 50 --itl-ms 10``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tailscope.serve.site import serve_site
from tailscope.testing.background import BackgroundServer


@dataclass(slots=True)
class ScriptedConfig:
    """Behaviour of the scripted server.

    Attributes:
        ttft_ms: delay from request arrival to the first token.
        itl_ms: gap between tokens.
        tokens_per_chunk: tokens carried by each content event.
        stall_start_s / stall_s: all emission pauses from ``stall_start_s`` (seconds after server start) for
            ``stall_s`` seconds.
        capacity: when set, at most this many requests stream at once; others queue, and a request's TTFT counts
            from when it got its slot, so the server completes at most ``capacity / (ttft + (n − 1)·itl)`` requests
            per second (a known capacity).
        mode: normal | html | unauthorized | error500 (for bad-target tests).
        continuous_usage: send per-chunk usage when the client asks for it.
        model: the model name served.
        reject_fields: request fields answered with HTTP 422 naming them (a strict server's dialect).
        send_done: end streams with ``data: [DONE]`` (False: finish_reason on the last token, then usage, then EOF).

    A request carrying ``X-Tailscope-Probe`` (bench's preflight probe of a server's dialect) is answered with one
    token and kept out of the truth log.
    """

    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    stall_start_s: float | None = None
    stall_s: float = 0.0
    capacity: int | None = None
    mode: str = "normal"
    continuous_usage: bool = True
    model: str = "scripted"
    log: bool = True
    reject_fields: tuple[str, ...] = ()  # answer 422 naming them, as transformers serve does for ignore_eos
    send_done: bool = True  # False: end the stream after finish_reason and usage, with no [DONE]
    reasoning_tokens: int = 0  # the first N tokens are reasoning (delta.reasoning_content), as reasoning models send
    cached_tokens: int | None = None  # reported as usage.prompt_tokens_details.cached_tokens
    tag_answers: bool = False  # each token's text names the response (``cmpl-3.0 cmpl-3.1 …``), so tests can find it
    max_model_len: int | None = None  # listed in /v1/models (as vLLM lists it)
    tokens_per_word: float | None = None  # a POST /tokenize counting each word as this many tokens (None: no endpoint)


@dataclass(slots=True)
class TruthLog:
    """Ground truth: per request id, arrival time and the send time of each token event (perf_counter_ns)."""

    arrived_ns: dict[str, int] = field(default_factory=dict)
    token_ns: dict[str, list[int]] = field(default_factory=dict)
    completed: int = 0
    authorization: list[str] = field(default_factory=list)  # Authorization headers seen (tests of key handling)
    bodies: list[dict[str, Any]] = field(default_factory=list)  # every request body received, in arrival order
    headers: list[dict[str, str]] = field(default_factory=list)  # every request's headers, in arrival order


class _App:
    def __init__(self, cfg: ScriptedConfig) -> None:
        self.cfg = cfg
        self.truth = TruthLog()
        self.t_start_ns = time.perf_counter_ns()
        self._ids = itertools.count()
        self._sem = asyncio.Semaphore(cfg.capacity) if cfg.capacity else None

    async def _sleep_until(self, deadline_ns: int) -> int:
        """Sleep until ``deadline_ns``, then (if inside the stall window) until it ends; returns the new deadline."""
        cfg = self.cfg
        if cfg.stall_start_s is not None and cfg.stall_s > 0:
            s0 = self.t_start_ns + int(cfg.stall_start_s * 1e9)
            s1 = s0 + int(cfg.stall_s * 1e9)
            if s0 <= deadline_ns < s1:
                deadline_ns = s1
        delay = (deadline_ns - time.perf_counter_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        return deadline_ns

    async def models(self, request: web.Request) -> web.Response:
        if self.cfg.mode == "html":
            return web.Response(
                text="<!DOCTYPE html><html><body>Welcome to nginx!</body></html>", content_type="text/html"
            )
        if self.cfg.mode == "unauthorized":
            return web.json_response({"error": {"message": "invalid api key"}}, status=401)
        entry: dict[str, Any] = {"id": self.cfg.model, "object": "model"}
        if self.cfg.max_model_len is not None:
            entry["max_model_len"] = self.cfg.max_model_len
        return web.json_response({"object": "list", "data": [entry]})

    async def tokenize(self, request: web.Request) -> web.Response:
        if self.cfg.tokens_per_word is None:
            raise web.HTTPNotFound()
        body = await request.json()
        count = round(len(str(body.get("prompt", "")).split()) * self.cfg.tokens_per_word)
        return web.json_response({"count": count, "max_model_len": self.cfg.max_model_len, "tokens": []})

    async def metrics(self, request: web.Request) -> web.Response:
        text = (
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{model_name="{self.cfg.model}"}} {self.truth.completed}\n'
        )
        return web.Response(text=text, content_type="text/plain")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter_ns()
        cfg = self.cfg
        if cfg.mode == "error500":
            return web.Response(text="<html><body>502 Bad Gateway</body></html>", status=502, content_type="text/html")
        if cfg.mode == "unauthorized":
            return web.json_response({"error": {"message": "invalid api key"}}, status=401)
        body: dict[str, Any] = await request.json()
        probe = "X-Tailscope-Probe" in request.headers  # bench's preflight probe: answered, not part of the truth
        refused = sorted(set(cfg.reject_fields) & _fields(body))
        if refused:
            return web.json_response({"detail": f"Unexpected fields in the request: {set(refused)}"}, status=422)
        if probe:
            return await self._stream(request, "probe", request.path.endswith("/chat/completions"), 1, False, 1,
                                      arrived, arrived, log=False)  # fmt: skip
        if cfg.log:
            self.truth.bodies.append(body)
            self.truth.headers.append(dict(request.headers))
        if "Authorization" in request.headers:
            self.truth.authorization.append(request.headers["Authorization"])
        rid = f"cmpl-{next(self._ids)}"
        chat = request.path.endswith("/chat/completions")
        n = int(body.get("max_tokens") or 16)
        per_chunk_usage = cfg.continuous_usage and bool(
            (body.get("stream_options") or {}).get("continuous_usage_stats")
        )
        prompt_tokens = _count_prompt(body)
        started = arrived
        if self._sem is not None:
            await self._sem.acquire()
            # a queued request is served from when it got its slot (else it would catch up on its missed
            # deadlines and the capacity would not be ``capacity / service time``)
            started = time.perf_counter_ns()
        try:
            return await self._stream(request, rid, chat, n, per_chunk_usage, prompt_tokens, arrived, started)
        finally:
            if self._sem is not None:
                self._sem.release()

    async def _stream(
        self,
        request: web.Request,
        rid: str,
        chat: bool,
        n: int,
        per_chunk_usage: bool,
        prompt_tokens: int,
        arrived: int,
        started: int,
        *,
        log: bool = True,
    ) -> web.StreamResponse:
        cfg = self.cfg
        log = log and cfg.log
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "x-request-id": rid})
        await resp.prepare(request)
        times: list[int] = []
        if log:
            self.truth.arrived_ns[rid] = arrived
            self.truth.token_ns[rid] = times
        if chat:
            await resp.write(_event(rid, chat, {"role": "assistant", "content": ""}, None))
        deadline = started + int(cfg.ttft_ms * 1e6)
        sent = 0
        while sent < n:
            k = min(cfg.tokens_per_chunk, n - sent)
            deadline = await self._sleep_until(deadline)
            sent += k
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sent} if per_chunk_usage else None
            content: Any = "tok " * k
            if cfg.tag_answers:
                content = "".join(f"{rid}.{sent - k + j} " for j in range(k))
            if chat and sent <= cfg.reasoning_tokens:
                content = {"reasoning_content": "think " * k}
            payload = _event(rid, chat, content, usage, finish="length" if sent >= n and not cfg.send_done else None)
            times.append(time.perf_counter_ns())
            await resp.write(payload)
            deadline += int(cfg.itl_ms * 1e6)
        usage_final: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n,
            "total_tokens": prompt_tokens + n,
        }
        if cfg.reasoning_tokens:
            usage_final["completion_tokens_details"] = {"reasoning_tokens": min(n, cfg.reasoning_tokens)}
        if cfg.cached_tokens is not None:
            usage_final["prompt_tokens_details"] = {"cached_tokens": min(prompt_tokens, cfg.cached_tokens)}
        tail = json.dumps({"id": rid, "object": "chat.completion.chunk", "choices": [], "usage": usage_final})
        done = "data: [DONE]\n\n" if cfg.send_done else ""
        await resp.write(f"data: {tail}\n\n{done}".encode())
        if log:
            self.truth.completed += 1
        await resp.write_eof()
        return resp

    async def app_api(self, request: web.Request) -> web.StreamResponse:
        """A non-OpenAI application API (``POST /api/generate``): ``{"query", "history", "limit"}`` in; SSE
        ``{"delta": {"text"}}`` events and a final ``{"done": true, "usage": {...}}`` out (``?format=ndjson``: the
        same objects one per line; ``?format=json``: one ``{"answer", "usage"}`` body)."""
        arrived = time.perf_counter_ns()
        cfg = self.cfg
        body: dict[str, Any] = await request.json()
        if cfg.log:
            self.truth.bodies.append(body)
            self.truth.headers.append(dict(request.headers))
        rid = f"app-{next(self._ids)}"
        n = int(body.get("limit") or 16)
        fmt = request.query.get("format", "sse")
        times: list[int] = []
        if cfg.log:
            self.truth.arrived_ns[rid] = arrived
            self.truth.token_ns[rid] = times
        usage = {"input_tokens": len(str(body.get("query", "")).split()), "output_tokens": n}
        if fmt == "json":
            await self._sleep_until(arrived + int((cfg.ttft_ms + (n - 1) * cfg.itl_ms) * 1e6))
            times.append(time.perf_counter_ns())
            self.truth.completed += 1
            return web.json_response({"answer": "tok " * n, "usage": usage})
        ctype = "application/x-ndjson" if fmt == "ndjson" else "text/event-stream"
        resp = web.StreamResponse(headers={"Content-Type": ctype, "x-request-id": rid})
        await resp.prepare(request)

        def frame(obj: dict[str, Any]) -> bytes:
            text = json.dumps(obj)
            return (text + "\n").encode() if fmt == "ndjson" else f"data: {text}\n\n".encode()

        deadline = arrived + int(cfg.ttft_ms * 1e6)
        for _ in range(n):
            deadline = await self._sleep_until(deadline)
            times.append(time.perf_counter_ns())
            await resp.write(frame({"delta": {"text": "tok "}}))
            deadline += int(cfg.itl_ms * 1e6)
        await resp.write(frame({"done": True, "usage": usage}))
        self.truth.completed += 1
        await resp.write_eof()
        return resp


def _count_prompt(body: dict[str, Any]) -> int:
    if "messages" in body:
        return sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    return len(str(body.get("prompt", "")).split())


def _fields(body: dict[str, Any]) -> set[str]:
    """A request body's field names, ``stream_options``' own included."""
    return set(body) | set(body.get("stream_options") or {})


def _event(rid: str, chat: bool, content: Any, usage: dict[str, int] | None, finish: str | None = None) -> bytes:
    if chat:
        delta = content if isinstance(content, dict) else {"content": content}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": content, "finish_reason": finish}
    obj: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "choices": [choice]}
    if usage is not None:
        obj["usage"] = usage
    return f"data: {json.dumps(obj)}\n\n".encode()


def build_app(cfg: ScriptedConfig) -> tuple[web.Application, _App]:
    """The aiohttp application and its state (truth log)."""
    state = _App(cfg)
    app = web.Application()
    app.router.add_get("/v1/models", state.models)
    app.router.add_get("/metrics", state.metrics)
    app.router.add_post("/tokenize", state.tokenize)
    app.router.add_post("/v1/chat/completions", state.completions)
    app.router.add_post("/v1/completions", state.completions)
    app.router.add_post("/api/generate", state.app_api)
    return app, state


class ScriptedServer(BackgroundServer):
    """The scripted server in a background thread with its own event loop, on 127.0.0.1 and a free port.

    Use as a context manager; ``url`` is the API root and ``truth`` the ground-truth log.
    """

    what = "scripted server"

    def __init__(self, cfg: ScriptedConfig | None = None, *, port: int = 0) -> None:
        super().__init__(port)
        self.cfg = cfg or ScriptedConfig()
        self.state: _App | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def truth(self) -> TruthLog:
        assert self.state is not None
        return self.state.truth

    async def _run_server(self) -> None:
        app, self.state = build_app(self.cfg)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self.port = await serve_site(runner, "127.0.0.1", self.port)
        await self._until_stopped()
        await runner.cleanup()


def main() -> None:
    """Run the scripted server as a process (for benchmarks)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--capacity", type=int, default=None, help="serve at most this many requests at once")
    p.add_argument("--truth-out", default=None, help="write the truth log as JSON here on SIGTERM/SIGINT")
    a = p.parse_args()
    cfg = ScriptedConfig(ttft_ms=a.ttft_ms, itl_ms=a.itl_ms, capacity=a.capacity)
    app, state = build_app(cfg)

    async def dump(_: web.Application) -> None:
        if a.truth_out:
            doc = {"arrived_ns": state.truth.arrived_ns, "token_ns": state.truth.token_ns}
            Path(a.truth_out).write_text(json.dumps(doc))  # noqa: ASYNC240 (shutdown hook, nothing else runs)

    app.on_shutdown.append(dump)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=a.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
