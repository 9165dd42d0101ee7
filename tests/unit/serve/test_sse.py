"""SSE framing and the shape of chunks and responses (vLLM's)."""

from __future__ import annotations

import json

from tailscope.serve.sse import DONE, ChunkFactory, frame, usage


def _decode(event: bytes) -> dict[str, object]:
    assert event.startswith(b"data: ")
    assert event.endswith(b"\n\n")
    assert event.count(b"\n") == 2  # one data line, then the blank line
    out = json.loads(event[len(b"data: ") : -2])
    assert isinstance(out, dict)
    return out


def test_frame_is_one_compact_data_line() -> None:
    event = frame({"a": 1, "b": "é\nx"})
    assert event == 'data: {"a":1,"b":"é\\nx"}\n\n'.encode()
    assert DONE == b"data: [DONE]\n\n"


def test_chat_chunks() -> None:
    f = ChunkFactory(kind="chat", response_id="chatcmpl-abc", created=1, model="m", prompt_tokens=7)
    role = _decode(frame(f.role_chunk()))
    assert role == {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        ],
    }
    tok = _decode(frame(f.token_chunk(" word", 1)))
    assert tok["choices"] == [{"index": 0, "delta": {"content": " word"}, "logprobs": None, "finish_reason": None}]
    assert "usage" not in tok
    last = _decode(frame(f.token_chunk(" end", 3, "length")))
    assert last["choices"] == [
        {"index": 0, "delta": {"content": " end"}, "logprobs": None, "finish_reason": "length", "stop_reason": None}
    ]
    fin = _decode(frame(f.usage_chunk(3)))
    assert fin["choices"] == []
    assert fin["usage"] == {"prompt_tokens": 7, "total_tokens": 10, "completion_tokens": 3}


def test_continuous_usage_in_every_chunk() -> None:
    f = ChunkFactory(kind="chat", response_id="x", created=1, model="m", prompt_tokens=5, continuous_usage=True)
    assert f.role_chunk()["usage"] == usage(5, 0)
    assert f.token_chunk("a", 1)["usage"] == {"prompt_tokens": 5, "total_tokens": 6, "completion_tokens": 1}
    assert f.token_chunk("b", 2, "stop")["usage"]["completion_tokens"] == 2


def test_completion_chunks_and_full_responses() -> None:
    f = ChunkFactory(kind="completion", response_id="cmpl-1", created=2, model="m", prompt_tokens=3)
    tok = f.token_chunk("hi", 1)
    assert tok["object"] == "text_completion"
    assert tok["choices"] == [{"index": 0, "text": "hi", "logprobs": None, "finish_reason": None}]
    full = f.full_response("hi there", 2, "length")
    assert full["object"] == "text_completion"
    assert full["choices"][0]["text"] == "hi there"
    assert full["usage"] == usage(3, 2)
    chat = ChunkFactory(kind="chat", response_id="c", created=2, model="m", prompt_tokens=3)
    body = chat.full_response("ok", 1, "stop")
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "ok", "tool_calls": []}
    assert body["choices"][0]["finish_reason"] == "stop"


def test_token_event_fast_path_is_byte_identical() -> None:
    for kind in ("chat", "completion"):
        for cont in (False, True):
            f = ChunkFactory(
                kind=kind, response_id="r-1", created=3, model='m"x', prompt_tokens=4, continuous_usage=cont
            )
            for text, n, finish in ((" the", 1, None), ('"quoted"\n', 2, None), ("é", 3, "length"), ("", 4, "stop")):
                assert f.token_event(text, n, finish) == frame(f.token_chunk(text, n, finish))
