"""Request templates: the file's errors name line and field; bodies render with typed placeholders; the reader counts
tokens, usage, end markers and error events as the template says."""

from __future__ import annotations

import json

import pytest

from tailscope.errors import ConfigError
from tailscope.io.request_template import parse_request_template
from tailscope.workload.template import RequestTemplate, TemplateError, get_path, parse_path

GOOD = """\
path: /api/chat
headers: {X-App: demo}
body:
  input: "{{ prompt }}"
  chat: "{{messages}}"
  max: "{{max_tokens}}"
  meta: {model: "{{model}}", label: "n={{max_tokens}}"}
  fixed: [1, true, null]
response:
  format: sse
  text: choices.0.delta.text
  output_tokens: usage.out
  done: "[DONE]"
  error: error
"""


class _St:
    def __init__(self) -> None:
        self.chunk_times: list[int] = []
        self.chunk_tokens: list[int] = []
        self.texts: list[str] = []
        self.first_event: int | None = None
        self.input_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.done = False


def test_a_good_template_renders_typed_placeholders() -> None:
    t = parse_request_template(GOOD, source="t.yaml")
    body = json.loads(t.render("hello there", 7, "m1"))
    assert body == {
        "input": "hello there",
        "chat": [{"role": "user", "content": "hello there"}],
        "max": 7,
        "meta": {"model": "m1", "label": "n=7"},
        "fixed": [1, True, None],
    }
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert json.loads(t.render(msgs, 3, "m1"))["chat"] == msgs
    assert t.headers == (("X-App", "demo"),)
    assert t.settings() == {"source": "t.yaml", "path": "/api/chat", "format": "sse", "headers": ["X-App"]}
    assert RequestTemplate.from_wire(t.to_wire()) == t


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("path: api\nbody: {q: '{{prompt}}'}\nresponse: {text: t}\n", "t.yaml:1: path must start with /"),
        ("path: /a\nbody: {q: '{{prompt}}'}\nresponse:\n  text: t\n  format: xml\n", "t.yaml:5: response.format"),
        ("path: /a\nbody: {q: '{{prompt}}'}\nresponse: {text: 'a..b'}\n", "t.yaml:3: response.text"),
        ("path: /a\nbody: {q: 'hi'}\nresponse: {text: t}\n", "t.yaml:2: body sends no prompt"),
        ("path: /a\nbody: {q: '{{promt}}'}\nresponse: {text: t}\n", "t.yaml:2: body has unknown placeholder"),
        ("path: /a\nmethod: GET\nbody: {q: '{{prompt}}'}\nresponse: {text: t}\n", "t.yaml:2: method"),
        ("path: /a\nheaders: {Host: x}\nbody: {q: '{{prompt}}'}\nresponse: {text: t}\n", "t.yaml:2: headers"),
        ("path: /a\nbody: {q: '{{prompt}}'}\nresponse: {text: t}\nextra: 1\n", "t.yaml:4: extra"),
        ("- a\n", "t.yaml:1: a request template is a mapping"),
    ],
)
def test_template_errors_name_line_and_field(text: str, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_request_template(text, source="t.yaml")
    assert str(info.value).startswith(where), str(info.value)


def test_the_reader_counts_tokens_usage_and_the_end_marker() -> None:
    t = parse_request_template(GOOD, source="t.yaml")
    st = _St()
    ev = [json.dumps({"choices": [{"delta": {"text": s}}]}).encode() for s in ("a", "", "b")]
    t.consume([ev[0]], 10, st, None)
    t.consume([ev[1], ev[2], json.dumps({"usage": {"out": 5}}).encode()], 20, st, None)
    assert st.chunk_times == [10, 20]
    assert st.texts == ["a", "b"]
    assert st.first_event == 10
    assert st.completion_tokens == 5
    assert not st.done
    t.consume([b"[DONE]"], 30, st, None)
    assert st.done
    with pytest.raises(TemplateError) as info:
        t.consume([json.dumps({"error": {"message": "overloaded"}}).encode()], 40, _St(), None)
    assert info.value.server_error
    assert "overloaded" in str(info.value)
    with pytest.raises(TemplateError):
        t.consume([b"{not json"], 50, _St(), None)


def test_ndjson_and_json_parsers() -> None:
    nd = parse_request_template(
        "path: /a\nbody: {q: '{{prompt}}'}\nresponse: {format: ndjson, text: t, done: end}\n", source="n"
    )
    p = nd.parser()
    assert p.feed_data(b'{"t": "x"}\n{"t"') == [b'{"t": "x"}']
    assert p.feed_data(b': "y"}\n') == [b'{"t": "y"}']
    st = _St()
    nd.consume([b'{"t": "x"}', b'{"end": true}', b'{"t": "late"}'], 5, st, None)
    assert st.done
    assert st.texts == ["x"]
    js = parse_request_template("path: /a\nbody: {q: '{{prompt}}'}\nresponse: {format: json, text: a}\n", source="j")
    w = js.parser()
    assert w.feed_data(b'{"a": "wh') == []
    assert w.feed_data(b'ole"}') == []
    assert w.close_data() == [b'{"a": "whole"}']
    assert js.ends_with_body()


def test_paths() -> None:
    assert parse_path("choices.0.delta.content") == ("choices", 0, "delta", "content")
    assert get_path({"a": [{"b": 1}]}, ("a", 0, "b")) == 1
    assert get_path({"a": []}, ("a", 0, "b")) is None
    assert get_path({"a": "s"}, ("a", "b")) is None
    with pytest.raises(ValueError, match="dot-separated"):
        parse_path("")
