"""Any streaming HTTP API as a bench target: a request template and an answer reader (pure, no IO).

A :class:`RequestTemplate` says how to shape one request (path, headers, a JSON body with ``{{prompt}}``,
``{{messages}}``, ``{{max_tokens}}`` and ``{{model}}`` placeholders) and how to read the answer: server-sent events,
newline-delimited JSON, or one plain JSON body, with dotted paths to the text delta, the token counts and an error
field. The streaming client (:mod:`tailscope.client.openai`) times the exchange the same way whatever the shape, so an
application's own API gets the same TTFT, ITL and E2E as an OpenAI-compatible server.

The file that holds a template is read and validated in :mod:`tailscope.io.request_template`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, MutableSequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

#: the placeholders a body template may hold
PLACEHOLDERS = ("prompt", "messages", "max_tokens", "model")

_PLACEHOLDER = re.compile(r"\{\{\s*(" + "|".join(PLACEHOLDERS) + r")\s*\}\}")

#: a dotted path into a JSON value: keys, and list indexes as ints
JsonPath = tuple[str | int, ...]


def parse_path(text: str) -> JsonPath:
    """``choices.0.delta.content`` → ``("choices", 0, "delta", "content")``; raises ValueError when empty."""
    parts = [p for p in text.strip().split(".")]
    if not text.strip() or any(not p for p in parts):
        raise ValueError(f"a path of dot-separated keys, e.g. choices.0.delta.content (got {text!r})")
    return tuple(int(p) if p.isdigit() else p for p in parts)


def get_path(obj: Any, path: JsonPath) -> Any:
    """The value at ``path`` in ``obj``, or ``None`` where the path does not lead."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(obj, list) or key >= len(obj):
                return None
            obj = obj[key]
        else:
            if not isinstance(obj, dict):
                return None
            obj = obj.get(key)
            if obj is None:
                return None
    return obj


class Sink(Protocol):
    """The request accumulator the reader writes into (the client's ``_State``)."""

    @property
    def chunk_times(self) -> MutableSequence[int]: ...  # the client keeps compact arrays (array('q'))
    @property
    def chunk_tokens(self) -> MutableSequence[int]: ...

    texts: list[str]
    first_event: int | None
    input_tokens: int | None
    completion_tokens: int | None
    done: bool


class TemplateError(Exception):
    """The answer does not read as the template says (malformed JSON, an error field)."""

    def __init__(self, message: str, *, server_error: bool = False) -> None:
        super().__init__(message)
        self.server_error = server_error


@dataclass(frozen=True, slots=True)
class RequestTemplate:
    """How to send one request to a non-OpenAI streaming API and read its answer.

    Attributes:
        path: request path under the target URL (``/api/chat``).
        body: the JSON body with placeholders: a string that is exactly ``{{messages}}`` becomes the chat as a list
            of ``{"role", "content"}`` objects, exactly ``{{max_tokens}}`` an integer; inside longer strings
            placeholders are replaced by their text.
        headers: extra request headers.
        format: ``sse`` (server-sent events), ``ndjson`` (one JSON object per line) or ``json`` (one body; the whole
            answer is one event, so TTFT = E2E).
        text: path to the text in each event (``delta.text``); an event whose text is empty is no token.
        output_tokens: path to the output token count (cumulative, or the final count) when the API reports one.
        input_tokens: path to the prompt token count when the API reports one.
        done: the SSE ``data`` payload that ends the stream (``[DONE]``); ``None``: the stream ends when the
            connection's body ends. For NDJSON: a path that is true on the last line (``done``).
        error: path to an error field: an event carrying it fails the request as a server error event.
        source: where the template came from (for messages and the run's settings).
    """

    path: str
    body: Any
    headers: tuple[tuple[str, str], ...] = ()
    format: str = "sse"
    text: JsonPath = ("text",)
    output_tokens: JsonPath | None = None
    input_tokens: JsonPath | None = None
    done: str | None = None
    error: JsonPath | None = None
    source: str = ""
    _render: Callable[[dict[str, Any]], Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_render", _compile(self.body))

    def render(self, prompt: str | list[dict[str, str]], max_tokens: int, model: str) -> bytes:
        """The request body for one request."""
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
        values = {"prompt": text, "messages": messages, "max_tokens": max_tokens, "model": model}
        return json.dumps(self._render(values), separators=(",", ":")).encode()

    def settings(self) -> dict[str, Any]:
        """What a run stores about its template (never header values: they may hold secrets)."""
        return {
            "source": self.source,
            "path": self.path,
            "format": self.format,
            "headers": [k for k, _ in self.headers],
        }

    def parser(self) -> LineParser | WholeBody | None:
        """A fresh body parser with ``feed_data(chunk) -> list[bytes]`` and ``close_data() -> list[bytes]``;
        ``None`` for server-sent events (the client's own SSE parser reads those)."""
        if self.format == "sse":
            return None
        if self.format == "ndjson":
            return LineParser()
        return WholeBody()

    def consume(self, payloads: list[bytes], now: int, st: Sink, count_tokens: Callable[[str], int] | None) -> None:
        """Account the payloads that arrived together at ``now`` (the template's twin of the OpenAI reader)."""
        if st.first_event is None and payloads:
            st.first_event = now
        for data in payloads:
            if self.format == "sse" and self.done is not None and data == self.done.encode():
                st.done = True
                return
            if not data.strip():
                continue
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                raise TemplateError(f"the answer is not JSON as the template expects: {data[:120]!r}") from None
            if self.error is not None and (err := get_path(obj, self.error)) is not None:
                msg = err.get("message", err) if isinstance(err, dict) else err
                raise TemplateError(f"server sent an error: {msg}", server_error=True)
            if self.input_tokens is not None and type(pt := get_path(obj, self.input_tokens)) is int:
                st.input_tokens = pt
            ct = get_path(obj, self.output_tokens) if self.output_tokens is not None else None
            if type(ct) is int:
                st.completion_tokens = ct
            text = get_path(obj, self.text)
            if isinstance(text, str) and text:
                st.chunk_times.append(now)
                st.texts.append(text)
                st.chunk_tokens.append(max(count_tokens(text), 1) if count_tokens is not None else 1)
            if self.format == "ndjson" and self.done is not None and get_path(obj, parse_path(self.done)) is True:
                st.done = True
                return

    def to_wire(self) -> dict[str, Any]:
        """A plain-data form (for worker processes); :meth:`from_wire` is its inverse."""
        return {
            "path": self.path,
            "body": self.body,
            "headers": [list(h) for h in self.headers],
            "format": self.format,
            "text": list(self.text),
            "output_tokens": list(self.output_tokens) if self.output_tokens is not None else None,
            "input_tokens": list(self.input_tokens) if self.input_tokens is not None else None,
            "done": self.done,
            "error": list(self.error) if self.error is not None else None,
            "source": self.source,
        }

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> RequestTemplate:
        def path(v: Any) -> JsonPath | None:
            return None if v is None else tuple(v)

        return cls(
            path=d["path"],
            body=d["body"],
            headers=tuple((str(k), str(v)) for k, v in d["headers"]),
            format=d["format"],
            text=tuple(d["text"]),
            output_tokens=path(d["output_tokens"]),
            input_tokens=path(d["input_tokens"]),
            done=d["done"],
            error=path(d["error"]),
            source=d["source"],
        )

    def ends_with_body(self) -> bool:
        """Whether the answer is complete when the body ends (no end marker to wait for)."""
        return self.done is None or self.format == "json"


class LineParser:
    """Newline-delimited JSON: each complete line is one payload."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed_data(self, chunk: bytes) -> list[bytes]:
        data = self._buf + chunk
        lines = data.split(b"\n")
        self._buf = lines.pop()
        return [line for line in lines if line.strip()]

    def close_data(self) -> list[bytes]:
        rest, self._buf = self._buf, b""
        return [rest] if rest.strip() else []


class WholeBody:
    """One JSON body: the payload is the whole body, available when it ends."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def feed_data(self, chunk: bytes) -> list[bytes]:
        self._parts.append(chunk)
        return []

    def close_data(self) -> list[bytes]:
        body, self._parts = b"".join(self._parts), []
        return [body] if body.strip() else []


def _compile(node: Any) -> Callable[[dict[str, Any]], Any]:
    """A function that renders ``node`` with the placeholder values (the structure is walked once, here)."""
    if isinstance(node, dict):
        items = [(k, _compile(v)) for k, v in node.items()]
        return lambda vals: {k: f(vals) for k, f in items}
    if isinstance(node, list):
        parts = [_compile(v) for v in node]
        return lambda vals: [f(vals) for f in parts]
    if isinstance(node, str):
        whole = _PLACEHOLDER.fullmatch(node)
        if whole is not None:
            name = whole.group(1)
            return lambda vals: vals[name]
        if _PLACEHOLDER.search(node):
            text = node

            def fill(vals: dict[str, Any]) -> str:
                def one(m: re.Match[str]) -> str:
                    v = vals[m.group(1)]
                    return v if isinstance(v, str) else json.dumps(v)

                return _PLACEHOLDER.sub(one, text)

            return fill
    return lambda vals: node


def placeholders_in(node: Any) -> set[str]:
    """The placeholder names a body template uses (and any unknown ``{{name}}`` as ``?name``)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for v in node.values():
            found |= placeholders_in(v)
    elif isinstance(node, list):
        for v in node:
            found |= placeholders_in(v)
    elif isinstance(node, str):
        for name in re.findall(r"\{\{\s*([^}]*?)\s*\}\}", node):
            found.add(name if name in PLACEHOLDERS else "?" + name)
    return found
