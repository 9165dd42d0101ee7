"""Request-template files: how to drive a non-OpenAI streaming API (``tailscope bench --request-template FILE``).

A template is YAML (or JSON)::

    method: POST                      # only POST
    path: /api/generate
    headers: {X-App: demo}            # optional
    body:                             # the JSON body; placeholders: {{prompt}} {{messages}} {{max_tokens}} {{model}}
      query: "{{prompt}}"
      history: "{{messages}}"         # exactly a placeholder: the value itself (a list here)
      limit: "{{max_tokens}}"         # ... an integer here
      stream: true
    response:
      format: sse                     # sse | ndjson | json
      text: delta.text                # dotted path to the text of each event (list indexes as numbers)
      output_tokens: usage.output_tokens   # optional: the API's own token count
      input_tokens: usage.input_tokens     # optional
      done: "[DONE]"                  # optional: sse: the data payload that ends the stream; ndjson: a path true on
                                      # the last line; absent: the answer ends with the body
      error: error                    # optional: an event carrying this field fails the request

Every problem is one line: ``file:line: field what is wrong (got …)``.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tailscope.errors import ConfigError
from tailscope.files import read_user_text
from tailscope.io._yaml import line_of, pydantic_problem, validate_yaml_mapping
from tailscope.workload.template import RequestTemplate, parse_path, placeholders_in

_FORBIDDEN_HEADERS = {"content-length", "host", "transfer-encoding", "connection"}


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResponseM(_M):
    format: Literal["sse", "ndjson", "json"] = "sse"
    text: str = Field(min_length=1)
    output_tokens: str | None = None
    input_tokens: str | None = None
    done: str | None = None
    error: str | None = None

    @field_validator("text", "output_tokens", "input_tokens", "error")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        if v is not None:
            parse_path(v)
        return v


class TemplateM(_M):
    method: Literal["POST", "post"] = "POST"
    path: str = Field(min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any
    response: ResponseM

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must start with / (a path under the target URL, e.g. /api/generate)")
        return v

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            check_header(name, value)
        return v


def check_header(name: str, value: str) -> None:
    """Raise ValueError for a header the client cannot send as given."""
    if not name or any(c in name for c in " \t\r\n:") or not name.isascii():
        raise ValueError(f"{name!r} is not a header name")
    if "\r" in value or "\n" in value:
        raise ValueError(f"the value of {name} holds a line break")
    if name.lower() in _FORBIDDEN_HEADERS:
        raise ValueError(f"{name} is set by the HTTP client; leave it out")


def load_request_template(path: str | os.PathLike[str]) -> RequestTemplate:
    """Read and validate a request template file.

    Raises:
        ConfigError: ``file:line: field problem`` for any problem.
    """
    text = read_user_text(path, what="request template", error=ConfigError)
    return parse_request_template(text, source=str(path))


def parse_request_template(text: str, *, source: str = "<template>") -> RequestTemplate:
    """Validate request-template YAML/JSON text."""
    tm, root = validate_yaml_mapping(
        text,
        TemplateM,
        source=source,
        error=ConfigError,
        shape="a request template is a mapping with path, body and response (see docs)",
        problem=pydantic_problem,
    )
    used = placeholders_in(tm.body)
    unknown = sorted(n[1:] for n in used if n.startswith("?"))
    if unknown:
        raise ConfigError(
            f"{source}:{line_of(root, ('body',))}: body has unknown placeholder {{{{{unknown[0]}}}}}: use "
            "{{prompt}}, {{messages}}, {{max_tokens}} or {{model}}"
        )
    if not used & {"prompt", "messages"}:
        raise ConfigError(
            f"{source}:{line_of(root, ('body',))}: body sends no prompt: put {{{{prompt}}}} or {{{{messages}}}} "
            "where the API expects the user's text"
        )
    r = tm.response
    if r.done is not None and r.format == "ndjson":
        try:
            parse_path(r.done)
        except ValueError as exc:
            raise ConfigError(f"{source}:{line_of(root, ('response', 'done'))}: response.done {exc}") from None
    return RequestTemplate(
        path=tm.path,
        body=tm.body,
        headers=tuple(tm.headers.items()),
        format=r.format,
        text=parse_path(r.text),
        output_tokens=parse_path(r.output_tokens) if r.output_tokens else None,
        input_tokens=parse_path(r.input_tokens) if r.input_tokens else None,
        done=r.done,
        error=parse_path(r.error) if r.error else None,
        source=source,
    )
