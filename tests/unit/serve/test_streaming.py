"""StreamEncoder (vLLM's event order) and DirectSink (HTTP chunk framing, dropping dead or stalled clients)."""

from __future__ import annotations

import json

import pytest

from tailscope.serve.loop import LiveRequest
from tailscope.serve.sse import ChunkFactory
from tailscope.serve.streaming import MAX_UNREAD_BYTES, DirectSink, StreamEncoder


def _live(n: int) -> LiveRequest:
    return LiveRequest(id=1, prompt_tokens=5, output_tokens=n, finish_reason="length", max_tokens_param=n, arrival_ns=0)


def _events(data: bytes) -> list[object]:
    out: list[object] = []
    for block in data.decode().split("\n\n")[:-1]:
        payload = block.removeprefix("data: ")
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def _factory(kind: str = "chat") -> ChunkFactory:
    return ChunkFactory(kind=kind, response_id="chatcmpl-x", created=1, model="m", prompt_tokens=5)


def test_encoder_order_across_releases() -> None:
    enc = StreamEncoder(_factory(), key=3, chat=True, include_usage=True)
    live = _live(3)
    assert enc.take(live) == b""  # nothing released yet: not even the role chunk
    live.released = 1
    first = _events(enc.take(live))
    assert first[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # type: ignore[index]
    assert first[1]["choices"][0]["finish_reason"] is None  # type: ignore[index]
    live.released = 3
    live.done = True
    rest = _events(enc.take(live))
    assert [e["choices"][0]["finish_reason"] for e in rest[:2]] == [None, "length"]  # type: ignore[index]
    assert rest[2]["usage"]["completion_tokens"] == 3  # type: ignore[index]
    assert rest[3] == "[DONE]"
    assert enc.ended
    assert enc.take(live) == b""  # idempotent once ended


def test_encoder_finish_reported_after_last_token() -> None:
    enc = StreamEncoder(_factory("completion"), key=0, chat=False, include_usage=False)
    live = _live(2)
    live.released = 2
    assert len(_events(enc.take(live))) == 2  # no role chunk for completions
    live.done = True
    tail = _events(enc.take(live))
    assert tail[0]["choices"][0] == {  # type: ignore[index]
        "index": 0, "text": "", "logprobs": None, "finish_reason": "length", "stop_reason": None,
    }  # fmt: skip
    assert tail[1] == "[DONE]"


def test_encoder_upto_limits_tokens() -> None:
    enc = StreamEncoder(_factory(), key=0, chat=True, include_usage=False)
    live = _live(5)
    live.released = 5
    assert len(_events(enc.take(live, upto=2))) == 3  # role + 2 tokens
    assert enc.sent == 2


class FakeTransport:
    def __init__(self) -> None:
        self.data = bytearray()
        self.closing = False
        self.backlog = 0

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.data += data

    def get_write_buffer_size(self) -> int:
        return self.backlog


def test_sink_writes_http_chunks_and_drops_dead_clients() -> None:
    t = FakeTransport()
    enc = StreamEncoder(_factory(), key=0, chat=False, include_usage=False)
    sink = DirectSink(t, enc)  # type: ignore[arg-type]
    live = _live(2)
    live.released = 1
    sink(live)
    size, _, rest = bytes(t.data).partition(b"\r\n")
    assert int(size, 16) == len(rest) - 2
    assert rest.endswith(b"\n\n\r\n")
    t.backlog = MAX_UNREAD_BYTES + 1
    live.released = 2
    with pytest.raises(ConnectionResetError, match="not reading"):
        sink(live)
    t.closing = True
    with pytest.raises(ConnectionResetError, match="went away"):
        sink(live)
