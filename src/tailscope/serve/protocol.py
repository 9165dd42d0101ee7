"""Parsing and validating OpenAI request bodies for the built-in server.

Validation errors become :class:`ApiError`, answered as OpenAI's error JSON
(``{"error": {"message", "type", "param", "code"}}``) with the matching HTTP status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from tailscope.serve.tokenizer import ChatMessage, encode_chat, encode_text

#: The HTTP status of each OpenAI error type.
ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ApiError(Exception):
    """An error answered to the client as OpenAI error JSON.

    Args:
        status: HTTP status (400, 404, 429, 500, …).
        message: what is wrong and how to fix it.
        param: the offending request field, if any.
    """

    def __init__(self, status: int, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response."""
        return {
            "error": {
                "message": self.message,
                "type": ERROR_TYPES.get(self.status, "APIError"),
                "param": self.param,
                "code": self.status,
            }
        }


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """A validated chat or text completion request.

    Attributes:
        kind: ``"chat"`` or ``"completion"``.
        model: requested model name (``None`` = the served one).
        prompt_ids: prompt token ids (template applied for chat).
        max_tokens: the client's ``max_tokens`` / ``max_completion_tokens`` (``None`` = up to the context end).
        ignore_eos: generate exactly ``max_tokens`` (vLLM's ``ignore_eos``).
        stream: answer with server-sent events.
        include_usage: ``stream_options.include_usage``: a final chunk with usage and empty choices.
        continuous_usage: ``stream_options.continuous_usage_stats`` (vLLM): usage in every chunk.
        echo: completions only: prepend the prompt text to the output (non-stream only here).
        prompt_text: the prompt text (completions with a string prompt), for ``echo``.
    """

    kind: str
    model: str | None
    prompt_ids: tuple[int, ...]
    max_tokens: int | None
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    echo: bool = False
    prompt_text: str = ""


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """Decode a request body that must be a JSON object."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"request body must be a JSON object (got {type(body).__name__})")
    return body


def _int_field(body: dict[str, Any], name: str, *, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be an integer (got {value!r})", param=name)
    if value < minimum:
        raise ApiError(400, f"{name} must be at least {minimum}, got {value}.", param=name)
    return value


def _bool_field(body: dict[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false (got {value!r})", param=name)
    return value


def _message_text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise ApiError(
                    400,
                    f"messages[{index}].content: only text parts are supported by the simulated engine "
                    f"(got {part!r:.80})",
                    param="messages",
                )
        return "".join(parts)
    raise ApiError(400, f"messages[{index}].content must be a string or a list of text parts", param="messages")


def parse_messages(body: dict[str, Any]) -> list[ChatMessage]:
    """The ``messages`` of a chat body as :class:`ChatMessage` (role + text)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects", param="messages")
    out: list[ChatMessage] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string role", param="messages")
        out.append(ChatMessage(role=msg["role"], content=_message_text(msg.get("content"), i)))
    return out


def _request(body: dict[str, Any], kind: str) -> CompletionRequest:
    """The fields chat and text completions share, validated (``prompt_ids`` left empty for the caller)."""
    n = _int_field(body, "n", minimum=1)
    if n is not None and n != 1:
        raise ApiError(400, f"n must be 1: the simulated engine returns one choice (got n={n})", param="n")
    best_of = _int_field(body, "best_of", minimum=1)
    if best_of is not None and best_of != 1:
        raise ApiError(400, f"best_of must be 1 (got {best_of})", param="best_of")
    if kind == "chat":
        max_tokens = _int_field(body, "max_completion_tokens", minimum=1)
        if max_tokens is None:
            max_tokens = _int_field(body, "max_tokens", minimum=1)
    else:
        max_tokens = _int_field(body, "max_tokens", minimum=1)
        if max_tokens is None and "max_tokens" not in body:
            max_tokens = 16  # the OpenAI completions default, which vLLM also applies
    ignore_eos = _bool_field(body, "ignore_eos")
    stream = _bool_field(body, "stream")
    options = body.get("stream_options")
    include_usage = continuous = False
    if options is not None:
        if not stream:
            raise ApiError(400, "Stream options can only be defined when `stream=True`.", param="stream_options")
        if not isinstance(options, dict):
            raise ApiError(400, "stream_options must be an object", param="stream_options")
        include_usage = _bool_field(options, "include_usage")
        continuous = _bool_field(options, "continuous_usage_stats")
    return CompletionRequest(
        kind=kind,
        model=_model(body),
        prompt_ids=(),
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
    )


def _model(body: dict[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, f"model must be a string (got {model!r})", param="model")
    return model


def parse_chat(body: dict[str, Any]) -> CompletionRequest:
    """Validate a ``/v1/chat/completions`` body."""
    messages = parse_messages(body)
    req = _request(body, "chat")
    ids = encode_chat(messages, add_generation_prompt=_bool_field(body, "add_generation_prompt", True))
    return replace(req, prompt_ids=tuple(ids))


def parse_completion(body: dict[str, Any]) -> CompletionRequest:
    """Validate a ``/v1/completions`` body (``prompt`` is a string, one-element list or a token-id list)."""
    prompt = body.get("prompt")
    text = ""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        text = prompt
        ids = encode_text(prompt)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = [int(t) for t in prompt]
    elif isinstance(prompt, list):
        raise ApiError(400, "prompt: batched prompts are not supported; send one prompt per request", param="prompt")
    else:
        raise ApiError(400, "prompt must be a string or a list of token ids", param="prompt")
    if not ids:
        raise ApiError(400, "prompt must contain at least one token", param="prompt")
    if any(t < 0 for t in ids):
        raise ApiError(400, "prompt token ids must be ≥ 0", param="prompt")
    req = _request(body, "completion")
    echo = _bool_field(body, "echo")
    if echo and req.stream:
        raise ApiError(400, "echo is only supported without stream by the built-in server", param="echo")
    return replace(req, prompt_ids=tuple(ids), echo=echo, prompt_text=text)


def parse_tokenize(body: dict[str, Any]) -> tuple[str | None, list[int]]:
    """Validate a ``/tokenize`` body (vLLM's: ``prompt`` or ``messages``); returns ``(model, token ids)``."""
    if "messages" in body:
        messages = parse_messages(body)
        return _model(body), encode_chat(
            messages, add_generation_prompt=_bool_field(body, "add_generation_prompt", True)
        )
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise ApiError(400, "tokenize: give prompt (a string) or messages (a list)", param="prompt")
    return _model(body), encode_text(prompt)
