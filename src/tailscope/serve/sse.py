"""OpenAI/vLLM response bodies and server-sent-event framing of the built-in server.

Streaming chat answers are shaped like vLLM's: a first chunk whose delta carries ``role`` (and empty content), then
one chunk per token whose delta carries that token's text, the last of them also carrying ``finish_reason``; with
``stream_options.include_usage`` a final chunk with ``"choices": []`` and ``usage``; then ``data: [DONE]``. Text
completions have no role chunk. Fields vLLM leaves unset are omitted, as vLLM's ``exclude_unset`` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tailscope.serve.tokenizer import FILLER_WORDS

DONE = b"data: [DONE]\n\n"

# JSON strings of every filler token text, encoded once (the hot path of streaming)
_ENCODED: dict[str, bytes] = {
    text: json.dumps(text, ensure_ascii=False).encode("utf-8") for w in FILLER_WORDS for text in (w, " " + w)
}


def frame(payload: dict[str, Any]) -> bytes:
    """One SSE event: ``data: <compact JSON>`` and a blank line."""
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    """OpenAI ``usage`` object (with ``prompt_tokens_details.cached_tokens`` when the prefix cache is known)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return out


@dataclass(frozen=True, slots=True)
class ChunkFactory:
    """Builds the chunks of one response.

    Attributes:
        kind: ``"chat"`` or ``"completion"``.
        response_id: the ``id`` of every chunk (``chatcmpl-…`` / ``cmpl-…``).
        created: Unix seconds of the response.
        model: served model name.
        prompt_tokens: for usage objects.
        continuous_usage: put usage (so far) in every chunk (vLLM's ``continuous_usage_stats``).
        reasoning_tokens: the first N tokens of a chat response are reasoning (``delta.reasoning_content``).
    """

    kind: str
    response_id: str
    created: int
    model: str
    prompt_tokens: int
    continuous_usage: bool = False
    reasoning_tokens: int = 0
    _token_head: bytes = field(init=False, repr=False, compare=False, default=b"")
    _token_tail: bytes = field(init=False, repr=False, compare=False, default=b"")

    def __post_init__(self) -> None:
        # the common token event differs only in its text: encode the envelope once and splice the text in
        marker = "\ue000tailscope\ue000"
        encoded = frame(self.token_chunk(marker, 0)) if not self.continuous_usage else b""
        needle = json.dumps(marker, ensure_ascii=False).encode("utf-8")
        if encoded.count(needle) == 1:
            head, tail = encoded.split(needle)
            object.__setattr__(self, "_token_head", head)
            object.__setattr__(self, "_token_tail", tail)

    def token_event(self, text: str, completion_tokens: int, finish_reason: str | None = None) -> bytes:
        """``frame(token_chunk(...))``, byte for byte, with a fast path for the common mid-stream token."""
        if finish_reason is None and self._token_head and completion_tokens > self.reasoning_tokens:
            encoded = _ENCODED.get(text)
            if encoded is None:
                encoded = json.dumps(text, ensure_ascii=False).encode("utf-8")
            return self._token_head + encoded + self._token_tail
        return frame(self.token_chunk(text, completion_tokens, finish_reason))

    @property
    def _object(self) -> str:
        return "chat.completion.chunk" if self.kind == "chat" else "text_completion"

    def _envelope(self, choices: list[dict[str, Any]], completion_tokens: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.response_id,
            "object": self._object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if completion_tokens is not None and self.continuous_usage:
            out["usage"] = usage(self.prompt_tokens, completion_tokens)
        return out

    def role_chunk(self) -> dict[str, Any]:
        """The first chat chunk: ``delta = {"role": "assistant", "content": ""}``."""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        return self._envelope([choice], 0)

    def token_chunk(self, text: str, completion_tokens: int, finish_reason: str | None = None) -> dict[str, Any]:
        """A chunk carrying one token's ``text``; ``completion_tokens`` counts tokens sent including this one."""
        choice: dict[str, Any]
        if self.kind == "chat":
            key = "reasoning_content" if 0 < completion_tokens <= self.reasoning_tokens else "content"
            choice = {"index": 0, "delta": {key: text}, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        if finish_reason is not None:
            choice["stop_reason"] = None
        return self._envelope([choice], completion_tokens)

    def usage_chunk(self, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
        """The final ``include_usage`` chunk: empty ``choices`` and the request's usage."""
        out = self._envelope([], None)
        out["usage"] = usage(self.prompt_tokens, completion_tokens, cached_tokens)
        if self.kind == "chat" and self.reasoning_tokens:
            out["usage"]["completion_tokens_details"] = {
                "reasoning_tokens": min(self.reasoning_tokens, completion_tokens)
            }
        return out

    def full_response(self, text: str, completion_tokens: int, finish_reason: str) -> dict[str, Any]:
        """The non-streaming response body."""
        choice: dict[str, Any]
        if self.kind == "chat":
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            obj = "text_completion"
        return {
            "id": self.response_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage(self.prompt_tokens, completion_tokens),
        }
