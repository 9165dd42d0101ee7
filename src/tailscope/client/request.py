"""How a request is shaped: the client's options and per-request limits, the JSON body (built from a cached shape,
with the prompt and ``max_tokens`` spliced in) and the headers (W3C trace context when traced).

:mod:`tailscope.client.openai` sends what this builds and turns the answer into a record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring_ascii
from typing import Any

from tailscope.workload.template import RequestTemplate


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-request limits in seconds (connect is enforced by the transport)."""

    connect_s: float = 10.0
    first_token_s: float = 120.0
    total_s: float = 600.0


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How requests are shaped.

    Attributes:
        endpoint: ``chat`` (/v1/chat/completions) or ``completions`` (/v1/completions).
        model: the model name sent in every request.
        ignore_eos: send vLLM/SGLang's ``ignore_eos`` so outputs run to ``max_tokens``.
        continuous_usage: ask vLLM for usage on every chunk (``stream_options.continuous_usage_stats``).
        stream_options: send ``stream_options`` (usage in the stream); off for servers that refuse it.
        extra_body: extra JSON fields merged into every request body (sampling parameters, tools, reasoning
            options, …); a request's class may add its own on top.
        headers: extra request headers sent with every request.
        template: a non-OpenAI API's request shape and answer reader; ``None`` = the OpenAI API.
        class_extra_body: per request class, body fields merged over ``extra_body`` (profile ``extra_body``).
        extra_body: extra JSON fields merged into every request body.
        tracestate: W3C ``tracestate`` sent beside ``traceparent`` on traced requests (``None`` = not sent).
    """

    endpoint: str = "chat"
    model: str = ""
    ignore_eos: bool = True
    continuous_usage: bool = True
    stream_options: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()
    template: RequestTemplate | None = None
    class_extra_body: dict[str, dict[str, Any]] = field(default_factory=dict)
    tracestate: str | None = None

    @property
    def path(self) -> str:
        if self.template is not None:
            return self.template.path
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    def post_headers(self) -> dict[str, str]:
        """The headers of every request: JSON content, the template's headers, then the user's."""
        out = {"Content-Type": "application/json"}
        if self.template is not None:
            out.update(self.template.headers)
        out.update(self.headers)
        return out


def build_body(
    opts: ClientOptions,
    prompt: str | list[dict[str, str]],
    max_tokens: int,
    extra_body: dict[str, Any] | None = None,
) -> bytes:
    """The JSON request body for a streaming request (``extra_body``: the request class's own fields, merged last).

    The bytes are those of ``json.dumps(body, separators=(",", ":"))`` over the body's dict. For a plain string prompt
    the JSON around the prompt and ``max_tokens`` is built once per ``(opts, extra_body)`` pair and cached by object
    identity, so ``opts`` and its dicts (and a passed ``extra_body``) must not be changed in place once requests are
    built from them (:class:`ClientOptions` is frozen; build a new one instead).
    """
    if opts.template is not None:
        return opts.template.render(prompt, max_tokens, opts.model)
    if type(prompt) is str and type(max_tokens) is int:
        key = (id(opts), id(extra_body))
        entry = _SHAPES.get(key)
        if entry is None or entry[0] is not opts or entry[1] is not extra_body:
            if len(_SHAPES) >= _SHAPES_MAX:
                _SHAPES.clear()
            # the entry holds opts and extra_body, so their ids cannot be reused while it lives
            entry = _SHAPES[key] = (opts, extra_body, _body_shape(opts, extra_body))
        shape = entry[2]
        if shape is not None:
            return shape.format(_encode_str(prompt), max_tokens).encode()
    return _ENCODER.encode(_body_dict(opts, prompt, max_tokens, extra_body)).encode()


def _body_dict(
    opts: ClientOptions, prompt: str | list[dict[str, str]], max_tokens: int, extra_body: dict[str, Any] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": opts.model, "max_tokens": max_tokens, "stream": True}
    if opts.endpoint == "chat":
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
    if opts.stream_options:
        stream_options: dict[str, Any] = {"include_usage": True}
        if opts.continuous_usage:
            stream_options["continuous_usage_stats"] = True
        body["stream_options"] = stream_options
    if opts.ignore_eos:
        body["ignore_eos"] = True
    if opts.extra_body:
        body.update(opts.extra_body)
    if extra_body:
        body.update(extra_body)
    return body


# json.dumps(o, separators=(",", ":")) builds this encoder on every call; one instance gives the same bytes
_ENCODER = json.JSONEncoder(separators=(",", ":"))
# the bytes json writes unescaped: printable ASCII but the quote and the backslash
_JSON_PLAIN = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')


def _encode_str(text: str) -> str:
    """What ``_ENCODER`` writes for a str (``encode_basestring_ascii``); text that needs no escape (checked with one
    ``bytes.translate``, ~4x cheaper than the escaper's own scan of a long prompt) is only quoted."""
    if text.isascii() and not text.encode("ascii").translate(None, _JSON_PLAIN):
        return '"' + text + '"'
    out: str = encode_basestring_ascii(text)
    return out


_SHAPES: dict[tuple[int, int], tuple[ClientOptions, dict[str, Any] | None, str | None]] = {}
_SHAPES_MAX = 256
# private marker objects: only identity counts, so no user value can be mistaken for them
_PROMPT_MARK = "".join(("\x00", "tailscope-prompt"))
_MAX_MARK = int("987654321987654321987654321")


def _body_shape(opts: ClientOptions, extra_body: dict[str, Any] | None) -> str | None:
    """The body's JSON as a ``str.format`` template: ``{0}`` = the JSON-encoded prompt, ``{1}`` = ``max_tokens``.

    Each top-level item is encoded on its own (a dict's JSON is ``{`` + its items' JSON joined by ``,`` + ``}``); the
    items still carrying the marker prompt or ``max_tokens`` (not overridden by an extra body) become slots. ``None``
    when the body cannot be encoded (the plain path then raises the same error).
    """
    body = _body_dict(opts, _PROMPT_MARK, _MAX_MARK, extra_body)
    mark_json = _encode_str(_PROMPT_MARK)
    items: list[str] = []
    try:
        for k, v in body.items():
            if v is _MAX_MARK and k == "max_tokens":
                items.append(_ENCODER.encode({k: 0})[1:-2].replace("{", "{{").replace("}", "}}") + "{1}")
                continue
            text = _ENCODER.encode({k: v})[1:-1].replace("{", "{{").replace("}", "}}")
            if (k == "prompt" and v is _PROMPT_MARK) or (
                k == "messages"
                and type(v) is list
                and len(v) == 1
                and type(v[0]) is dict
                and v[0].get("content") is _PROMPT_MARK
            ):
                head, sep, tail = text.partition(mark_json)
                if not sep or mark_json in tail:
                    return None
                text = head + "{0}" + tail
            items.append(text)
    except (TypeError, ValueError, RecursionError):
        return None
    return "{{" + ",".join(items) + "}}"


def extension_flags(opts: Any, refused: frozenset[str]) -> dict[str, Any]:
    """The ``ignore_eos``/``continuous_usage``/``stream_options`` switches of ``opts`` (client options or a bench
    config) with the extensions a server refused turned off."""
    return {
        "ignore_eos": opts.ignore_eos and "ignore_eos" not in refused,
        "continuous_usage": opts.continuous_usage and "continuous_usage_stats" not in refused,
        "stream_options": opts.stream_options and "stream_options" not in refused,
    }


def without_extensions(opts: ClientOptions, refused: frozenset[str]) -> ClientOptions:
    """``opts`` without the API extensions a server refused (``ignore_eos``, ``continuous_usage_stats``,
    ``stream_options``)."""
    return replace(opts, **extension_flags(opts, refused)) if refused else opts


_JSON_HEADERS = {"Content-Type": "application/json"}


def request_headers(opts: ClientOptions, trace_id: str | None, span_id: str | None) -> dict[str, str]:
    """The request's headers: JSON, the template's and the user's, plus W3C ``traceparent`` (sampled flag set) and
    ``tracestate`` when traced."""
    base = _JSON_HEADERS if opts.template is None and not opts.headers else opts.post_headers()
    if trace_id is None or span_id is None:
        return base
    headers = {**base, "traceparent": f"00-{trace_id}-{span_id}-01"}
    if opts.tracestate:
        headers["tracestate"] = opts.tracestate
    return headers
