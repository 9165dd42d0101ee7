"""The client's own CPU cost per token event, measured in process on this machine (no network, no server).

A recorded vLLM-style stream (chunked transfer encoding, one SSE event per network read, per-chunk usage) is fed
through the raw transport's protocol (``Http1Connection.data_received`` in push mode) and the OpenAI client's consume
path — what runs per network read in a bench. ``benchmarks/hot_path.py`` prints it; ``--workers auto`` sizes itself
by it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tailscope.client import openai
from tailscope.client.http1_conn import Http1Connection
from tailscope.client.openai import _State
from tailscope.client.sse import SSEParser


def recorded_stream(
    tokens: int, *, usage: bool = True, rid: str = "chatcmpl-8f2c4a9be1d34b0f", finish_without_done: bool = False
) -> list[bytes]:
    """One streamed chat response as the network reads it: the head, then one chunked frame per SSE event."""

    def frame(payload: bytes) -> bytes:
        return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"

    def event(obj: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    base = {"id": rid, "object": "chat.completion.chunk", "created": 1764680000, "model": "meta-llama/Llama-3.1-8B"}
    reads = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"]
    choice0 = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    role: dict[str, Any] = {**base, "choices": [choice0]}
    if usage:
        role["usage"] = {"prompt_tokens": 64, "total_tokens": 64, "completion_tokens": 0}
    reads.append(frame(event(role)))
    for i in range(1, tokens + 1):
        choice = {"index": 0, "delta": {"content": " tok"}, "logprobs": None, "finish_reason": None}
        if i == tokens:
            choice["finish_reason"] = "length"
        obj: dict[str, Any] = {**base, "choices": [choice]}
        if usage:
            obj["usage"] = {"prompt_tokens": 64, "total_tokens": 64 + i, "completion_tokens": i}
        reads.append(frame(event(obj)))
    final = {
        **base,
        "choices": [],
        "usage": {"prompt_tokens": 64, "total_tokens": 64 + tokens, "completion_tokens": tokens},
    }
    reads.append(frame(event(final) + (b"" if finish_without_done else b"data: [DONE]\n\n")))
    reads.append(b"0\r\n\r\n")
    return reads


class _NullPool:
    def discard(self, c: Any) -> None:
        pass

    def release(self, c: Any) -> None:
        pass


def play(reads: list[bytes], st: _State | None = None, *, conn: Http1Connection | None = None) -> _State:
    """Push ``reads`` through the protocol and the client's consume path (as :func:`~tailscope.client.openai.execute`
    does in push mode); returns the request's accumulated state. ``reads[0]`` is the response head; pass ``conn`` to
    look at the connection afterwards (its error, whether the response is complete)."""
    conn = conn if conn is not None else Http1Connection(_NullPool())  # type: ignore[arg-type]
    st = st or _State()
    parser = SSEParser()

    conn.data_received(reads[0])
    conn.handler = openai.push_handler(parser, st, None, 0)  # what execute() hands the protocol
    for r in reads[1:]:
        conn.data_received(r)
    return st


def hot_path_us(*, streams: int = 20, tokens: int = 256, usage: bool = True, repeat: int = 3) -> float:
    """CPU µs per token event of the in-process hot path (best of ``repeat`` passes over ``streams`` streams)."""
    reads = recorded_stream(tokens, usage=usage)
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time_ns()
        for _ in range(streams):
            play(reads)
        best = min(best, time.process_time_ns() - t)
    return best / (streams * (tokens + 2)) / 1000.0
