"""The official ``openai`` Python client works against tailscope serve (streaming and non-streaming)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

openai = pytest.importorskip("openai")

from tailscope.serve.embedded import EmbeddedServer  # noqa: E402
from tailscope.serve.engine_factory import build_replica  # noqa: E402
from tailscope.serve.tokenizer import count_text  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    engine, options = build_replica("llama-3.1-8b", "h100-sxm", speed=4.0)
    with EmbeddedServer(engine, options) as srv:
        c = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0, timeout=30)
        try:
            yield c
        finally:
            c.close()


def test_models_list(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["llama-3.1-8b"]


def test_chat_non_stream(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="llama-3.1-8b",
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=9,
        extra_body={"ignore_eos": True},
    )
    assert r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert count_text(r.choices[0].message.content or "") == 9
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None
    assert r.usage.completion_tokens == 9
    assert r.usage.prompt_tokens == 3 + 10  # "Say something." + the chat template


def test_chat_stream_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="llama-3.1-8b",
        messages=[{"role": "user", "content": "Count to ten."}],
        max_completion_tokens=15,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    pieces: list[str] = []
    finish = None
    usage = None
    roles = []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    assert roles == ["assistant"]
    assert len(pieces) == 15
    assert count_text("".join(pieces)) == 15
    assert finish == "length"
    assert usage is not None
    assert usage.completion_tokens == 15


def test_completions_stream_and_non_stream(client: openai.OpenAI) -> None:
    r = client.completions.create(model="llama-3.1-8b", prompt="Once upon a time", max_tokens=6)
    assert r.usage is not None
    assert r.usage.prompt_tokens == 4
    assert r.usage.completion_tokens == 6
    texts = [
        c.choices[0].text
        for c in client.completions.create(model="llama-3.1-8b", prompt="Hello", max_tokens=4, stream=True)
        if c.choices
    ]
    assert len(texts) == 4


def test_errors_raise_the_openai_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="llama-3.1-8b", messages=[{"role": "user", "content": "x"}], n=2)
    assert "n must be 1" in str(info.value)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
