"""``build_body``'s cached JSON shape against the plain dict + ``json.dumps`` body it replaces (the oracle)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tailscope.client.request import ClientOptions, _encode_str, build_body


def reference_body(
    opts: ClientOptions, prompt: Any, max_tokens: Any, extra_body: dict[str, Any] | None = None
) -> bytes:
    """The body as built before the cached shape: a dict, then ``json.dumps`` (the bytes the fast path must match)."""
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
    return json.dumps(body, separators=(",", ":")).encode()


# every code point, lone surrogates included (json escapes them), and plain ASCII (the quote-only fast path)
_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | st.text(
    st.characters(max_codepoint=0x7F), max_size=40
)
_TRICKY = st.sampled_from(["{0}", "{1}", "{{", "}", "\x00tailscope-prompt", '"\x00tailscope-prompt', "\\u0000"])
_STR = _TRICKY | _TEXT
_SCALAR = st.none() | st.booleans() | st.integers() | st.floats() | _STR
_VALUE = st.recursive(
    _SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_STR, inner, max_size=3), max_leaves=8
)
_BODY_KEYS = st.sampled_from(["model", "max_tokens", "stream", "messages", "prompt", "stream_options", "ignore_eos"])
_EXTRA = st.none() | st.dictionaries(_BODY_KEYS | _STR | st.integers() | st.booleans() | st.none(), _VALUE, max_size=4)
_MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]), "content": _TEXT}), max_size=3)


@st.composite
def _options(draw: st.DrawFn) -> ClientOptions:
    extra = draw(_EXTRA) or {}
    return ClientOptions(
        endpoint=draw(st.sampled_from(["chat", "completions"])),
        model=draw(_STR),
        ignore_eos=draw(st.booleans()),
        continuous_usage=draw(st.booleans()),
        stream_options=draw(st.booleans()),
        extra_body=extra,
    )


@settings(max_examples=400, deadline=None)
@given(
    opts=_options(),
    prompts=st.lists(_STR | _MESSAGES, min_size=1, max_size=3),
    max_tokens=st.integers() | st.booleans(),
    extra=_EXTRA,
)
def test_build_body_gives_exactly_the_bytes_of_dict_and_json_dumps(
    opts: ClientOptions, prompts: list[Any], max_tokens: int, extra: dict[str, Any] | None
) -> None:
    # several prompts through one (opts, extra) pair: the second and later calls use the cached shape
    for prompt in prompts:
        try:
            want = reference_body(opts, prompt, max_tokens, extra)
        except (TypeError, ValueError) as exc:  # e.g. a key json cannot encode: the same error either way
            try:
                build_body(opts, prompt, max_tokens, extra)
            except type(exc):
                continue
            raise AssertionError("build_body encoded a body json.dumps refuses") from exc
        assert build_body(opts, prompt, max_tokens, extra) == want
        assert build_body(opts, prompt, max_tokens + 7, extra) == reference_body(opts, prompt, max_tokens + 7, extra)


def test_a_class_extra_body_overriding_the_prompt_and_max_tokens_wins() -> None:
    opts = ClientOptions(model="m", endpoint="completions")
    extra = {"prompt": "fixed", "max_tokens": 3}
    for prompt in ("a", "b"):
        body = build_body(opts, prompt, 99, extra)
        assert body == reference_body(opts, prompt, 99, extra)
        assert json.loads(body)["prompt"] == "fixed"
        assert json.loads(body)["max_tokens"] == 3


def test_the_string_encoder_matches_json_for_every_code_point() -> None:
    for c in range(0x110000):
        for text in (chr(c), f"a{chr(c)}b c"):
            assert _encode_str(text) == json.dumps(text), hex(c)
