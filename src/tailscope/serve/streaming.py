"""Writing a streamed completion: SSE events for released tokens, on the fast path or with injected faults.

Fast path (no stream faults): the engine loop calls a :class:`DirectSink` synchronously on every release, which
encodes the new tokens and writes them to the socket as one HTTP chunk; the handler only waits for the end. This
avoids a task wake-up per stream per step, which is what limits how many streams one process keeps on schedule.
Fault path: the handler task wakes per release and writes token by token so stalls, cuts and malformed lines can
happen between any two tokens.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from tailscope.serve.faults import FaultPlan
from tailscope.serve.loop import LiveRequest
from tailscope.serve.protocol import CompletionRequest
from tailscope.serve.sse import DONE, ChunkFactory, frame
from tailscope.serve.tokenizer import filler_token

if TYPE_CHECKING:
    from asyncio import Transport

    from tailscope.serve.app import ServeState

#: The body of a malformed-line fault: a ``data:`` line that is not JSON.
MALFORMED_LINE = b'data: {"id": "malformed", "choices": [{"delta": {"content": \n\n'
#: Response header carrying the engine's id of the request (correlates a response with the engine's step log).
ENGINE_ID_HEADER = "x-tailscope-engine-request-id"
#: A client that lets this much of its stream pile up unread is dropped (its request aborted).
MAX_UNREAD_BYTES = 4 * 1024 * 1024


class StreamEncoder:
    """The SSE bytes of one response, produced incrementally as tokens are released.

    vLLM's order: the role chunk (chat only) with the first token, one chunk per token, the last token's chunk
    carrying ``finish_reason``; then the usage chunk (``include_usage``) and ``data: [DONE]``.
    """

    __slots__ = ("ended", "factory", "finish_sent", "include_usage", "key", "role_pending", "sent")

    def __init__(self, factory: ChunkFactory, key: int, *, chat: bool, include_usage: bool) -> None:
        self.factory = factory
        self.key = key
        self.include_usage = include_usage
        self.role_pending = chat
        self.sent = 0
        self.finish_sent = False
        self.ended = False

    def take(self, live: LiveRequest, upto: int | None = None) -> bytes:
        """Events for tokens ``sent .. min(released, upto)`` and, once everything is out, the end of the stream."""
        if self.ended:
            return b""
        buf = bytearray()
        target = live.released if upto is None else min(live.released, upto)
        if self.role_pending and (target > self.sent or live.done):
            buf += frame(self.factory.role_chunk())
            self.role_pending = False
        while self.sent < target:
            finish = live.finish_reason if live.done and self.sent + 1 == live.released else None
            buf += self.factory.token_event(filler_token(self.key, self.sent), self.sent + 1, finish)
            self.sent += 1
            self.finish_sent = finish is not None
        if live.done and self.sent >= live.released:
            if not self.finish_sent:  # the engine reported the finish after the last token: an empty delta says so
                buf += frame(self.factory.token_chunk("", self.sent, live.finish_reason))
            if self.include_usage:
                buf += frame(self.factory.usage_chunk(self.sent, live.cached_tokens))
            buf += DONE
            self.ended = True
        return bytes(buf)


class DirectSink:
    """Called by the engine loop on every release: writes the new events to the socket as one HTTP/1.1 chunk.

    Raises (so the loop aborts the request) when the connection is gone or the client stopped reading.
    """

    __slots__ = ("encoder", "transport")

    def __init__(self, transport: Transport, encoder: StreamEncoder) -> None:
        self.transport = transport
        self.encoder = encoder

    def __call__(self, live: LiveRequest) -> None:
        if self.transport.is_closing():
            raise ConnectionResetError("client went away")
        data = self.encoder.take(live)
        if data:
            self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        if self.transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
            raise ConnectionResetError("client is not reading its stream")


def cut(request: web.Request) -> None:
    """Drop the connection at once (the disconnect fault)."""
    transport = request.transport
    if transport is not None:
        transport.abort()


@dataclass(frozen=True, slots=True)
class Answer:
    """What answering one admitted completion takes, streamed or whole: the HTTP request and server state, the parsed
    request and its live engine request, its fault plan, its chunk factory, the text key and the response id."""

    request: web.Request
    state: ServeState
    req: CompletionRequest
    live: LiveRequest
    plan: FaultPlan
    factory: ChunkFactory
    key: int
    base_id: str


async def stream_response(a: Answer) -> web.StreamResponse:
    """Answer ``a.req`` as server-sent events while ``a.live`` produces tokens."""
    request, state, req, live, plan, base_id = a.request, a.state, a.req, a.live, a.plan, a.base_id
    resp = web.StreamResponse(
        status=200,
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "x-request-id": base_id,
            ENGINE_ID_HEADER: str(live.id),
        },
    )
    await resp.prepare(request)
    # headers leave now, before the first token, as from vLLM (aiohttp would otherwise hold them for the body)
    send_headers = getattr(request.writer, "send_headers", None)
    if callable(send_headers):
        send_headers()
    encoder = StreamEncoder(a.factory, a.key, chat=req.kind == "chat", include_usage=req.include_usage)
    transport = request.transport
    faults = plan.stall_after is not None or plan.disconnect_after is not None or plan.malformed_after is not None
    # the fast path frames HTTP/1.1 chunks itself: only when aiohttp chose chunked encoding without compression
    chunked = bool(getattr(request.writer, "chunked", False)) and not resp.compression
    if callable(send_headers) and transport is not None and chunked and not faults:
        sink = DirectSink(transport, encoder)
        live.sink = sink
        state.loop.flush(live)  # tokens released while the headers were prepared
        await live.wait_finished()
        if live.aborted or not encoder.ended:
            cut(request)  # mid-stream: end the connection rather than the chunked body
            return resp
        await resp.write_eof()
        return resp
    while True:
        await live.wait_beyond(encoder.sent)
        if live.aborted:  # the server is shutting down
            return resp
        while encoder.sent < live.released:
            data = encoder.take(live, upto=encoder.sent + 1)
            sent = encoder.sent
            if plan.malformed_after == sent:
                data += MALFORMED_LINE
            if plan.disconnect_after == sent:
                await resp.write(data)
                state.loop.abort(live)
                cut(request)
                return resp
            if plan.stall_after == sent:
                await resp.write(data)
                await asyncio.sleep(plan.stall_s)
                continue
            await resp.write(data)
        tail = encoder.take(live)  # the end of the stream once done
        if tail:
            await resp.write(tail)
        if encoder.ended:
            break
    await resp.write_eof()
    return resp
