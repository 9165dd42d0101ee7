"""Request validation: OpenAI error shape, n=1 only, stream options, max_tokens, prompts."""

from __future__ import annotations

from typing import Any

import pytest

from tailscope.serve.protocol import ApiError, parse_chat, parse_completion, parse_json_body, parse_tokenize
from tailscope.serve.tokenizer import ChatMessage, encode_chat, encode_text

MSG = [{"role": "user", "content": "hello there"}]


def _err(fn: Any, body: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(body)
    return info.value


def test_error_body_is_openai_shaped() -> None:
    err = ApiError(400, "n must be 1", param="n")
    assert err.body() == {"error": {"message": "n must be 1", "type": "BadRequestError", "param": "n", "code": 400}}
    assert ApiError(429, "slow down").body()["error"]["type"] == "RateLimitError"


def test_json_body() -> None:
    assert parse_json_body(b'{"a": 1}') == {"a": 1}
    assert _err(parse_json_body, b"{nope").status == 400
    assert "JSON object" in _err(parse_json_body, b"[1]").message


def test_chat_fields() -> None:
    req = parse_chat({"model": "m", "messages": MSG, "max_tokens": 8, "ignore_eos": True, "stream": True,
                      "stream_options": {"include_usage": True, "continuous_usage_stats": True}})  # fmt: skip
    assert req.kind == "chat"
    assert req.model == "m"
    assert req.prompt_ids == tuple(encode_chat([ChatMessage("user", "hello there")]))
    assert len(req.prompt_ids) == 2 + 10
    assert (req.max_tokens, req.ignore_eos, req.stream, req.include_usage, req.continuous_usage) == (
        8,
        True,
        True,
        True,
        True,
    )
    assert parse_chat({"messages": MSG, "max_completion_tokens": 5, "max_tokens": 9}).max_tokens == 5
    assert parse_chat({"messages": MSG}).max_tokens is None
    parts = parse_chat({"messages": [{"role": "user", "content": [{"type": "text", "text": "a b"}]}]})
    assert len(parts.prompt_ids) == 2 + 10


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": MSG, "n": 2}, "n"),
        ({"messages": MSG, "max_tokens": 0}, "max_tokens"),
        ({"messages": MSG, "max_tokens": "5"}, "max_tokens"),
        ({"messages": MSG, "stream_options": {"include_usage": True}}, "stream_options"),
        ({"messages": MSG, "stream": "yes"}, "stream"),
        ({"messages": []}, "messages"),
        ({"messages": [{"content": "x"}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
        ({"messages": MSG, "model": 3}, "model"),
    ],
)
def test_chat_rejections(body: dict[str, Any], param: str) -> None:
    err = _err(parse_chat, body)
    assert err.status == 400
    assert err.param == param


def test_completion_prompts() -> None:
    req = parse_completion({"prompt": "one two three"})
    assert req.prompt_ids == tuple(encode_text("one two three"))
    assert req.max_tokens == 16  # OpenAI/vLLM default for completions
    assert parse_completion({"prompt": "x", "max_tokens": None}).max_tokens is None
    assert parse_completion({"prompt": [5, 6, 7]}).prompt_ids == (5, 6, 7)
    assert parse_completion({"prompt": ["a b"]}).prompt_ids == tuple(encode_text("a b"))
    assert parse_completion({"prompt": [[1, 2]]}).prompt_ids == (1, 2)
    assert _err(parse_completion, {"prompt": ["a", "b"]}).param == "prompt"
    assert _err(parse_completion, {"prompt": ""}).param == "prompt"
    assert _err(parse_completion, {"prompt": 5}).param == "prompt"
    assert _err(parse_completion, {"prompt": "a", "n": 3}).param == "n"
    assert _err(parse_completion, {"prompt": "a", "best_of": 2}).param == "best_of"
    assert _err(parse_completion, {"prompt": "a", "echo": True, "stream": True}).param == "echo"


def test_tokenize_bodies() -> None:
    assert parse_tokenize({"prompt": "a b c"}) == (None, encode_text("a b c"))
    model, ids = parse_tokenize({"model": "m", "messages": MSG})
    assert model == "m"
    assert len(ids) == 12
    assert _err(parse_tokenize, {"nothing": 1}).status == 400
