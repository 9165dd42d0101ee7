"""tailscope serve over real sockets: routes, response shapes, usage, errors, client disconnects."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from tailscope.serve.embedded import EmbeddedServer, start_embedded_server
from tailscope.serve.engine_factory import build_replica
from tailscope.serve.tokenizer import ChatMessage, count_text, encode_chat, encode_text

pytestmark = pytest.mark.integration

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedServer]:
    engine, options = build_replica(MODEL, "h100-sxm", speed=4.0, max_num_seqs=64)
    with EmbeddedServer(engine, options) as srv:
        yield srv


async def _post(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, CIMultiDict[str], bytes]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        return r.status, CIMultiDict(r.headers), await r.read()


def post(server: EmbeddedServer, path: str, body: dict[str, Any], **kw: Any) -> tuple[int, CIMultiDict[str], bytes]:
    return asyncio.run(asyncio.wait_for(_post(server.base_url + path, body, **kw), 30))


def events(raw: bytes) -> list[Any]:
    """SSE body → decoded data payloads (``"[DONE]"`` kept as the string)."""
    text = raw.decode()
    assert text.endswith("\n\n")
    out: list[Any] = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        data = block[len("data: ") :]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def get(server: EmbeddedServer, path: str) -> tuple[int, str]:
    async def run() -> tuple[int, str]:
        async with aiohttp.ClientSession() as s, s.get(server.base_url + path) as r:
            return r.status, await r.text()

    return asyncio.run(asyncio.wait_for(run(), 30))


def test_models_health_tokenize(server: EmbeddedServer) -> None:
    status, text = get(server, "/v1/models")
    assert status == 200
    body = json.loads(text)
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [MODEL]
    assert body["data"][0]["max_model_len"] == server.options.max_model_len
    assert get(server, "/health") == (200, "")
    status, _, raw = post(server, "/tokenize", {"model": MODEL, "prompt": "Hello, world! 12345"})
    tok = json.loads(raw)
    assert status == 200
    assert tok["count"] == 6 == len(tok["tokens"])
    assert tok["tokens"] == encode_text("Hello, world! 12345")
    _, _, raw = post(server, "/tokenize", {"messages": [{"role": "user", "content": "hi there"}]})
    assert json.loads(raw)["count"] == 12


def test_chat_stream_shape_and_usage(server: EmbeddedServer) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "tell me a story"}],
        "max_tokens": 12,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, headers, raw = post(server, "/v1/chat/completions", body, headers={"X-Request-Id": "abc123"})
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert headers["x-request-id"] == "abc123"
    evs = events(raw)
    assert evs[-1] == "[DONE]"
    chunks = evs[:-1]
    assert {c["id"] for c in chunks} == {"chatcmpl-abc123"}
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = chunks[1:-1]
    assert len(content) == 12
    assert all(len(c["choices"]) == 1 for c in content)
    texts = [c["choices"][0]["delta"]["content"] for c in content]
    assert all(count_text(t) == 1 for t in texts)  # one token per chunk
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 11 + ["length"]
    assert all("usage" not in c for c in content)
    final = chunks[-1]
    assert final["choices"] == []
    prompt_tokens = len(encode_chat([ChatMessage("user", "tell me a story")]))
    assert prompt_tokens == 4 + 10
    assert final["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 12,
        "total_tokens": prompt_tokens + 12,
        "prompt_tokens_details": {"cached_tokens": 0},  # the prefix-cache hit, as vLLM reports it (a cold cache)
    }


def test_continuous_usage_and_completions_stream(server: EmbeddedServer) -> None:
    body = {
        "prompt": "one two three four",
        "max_tokens": 5,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    status, headers, raw = post(server, "/v1/completions", body)
    assert status == 200
    evs = events(raw)
    chunks = evs[:-1]
    assert chunks[0]["id"].startswith("cmpl-")
    assert chunks[0]["id"] == "cmpl-" + headers["x-request-id"]
    assert all(c["object"] == "text_completion" for c in chunks)
    token_chunks = [c for c in chunks if c["choices"]]
    assert len(token_chunks) == 5  # no role chunk for text completions
    assert [c["usage"]["completion_tokens"] for c in token_chunks] == [1, 2, 3, 4, 5]
    assert all(c["usage"]["prompt_tokens"] == 4 for c in chunks)
    assert chunks[-1]["usage"]["total_tokens"] == 9


def test_non_stream_chat_and_completion(server: EmbeddedServer) -> None:
    status, headers, raw = post(
        server,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 7, "ignore_eos": True},
    )
    assert status == 200
    body = json.loads(raw)
    assert body["object"] == "chat.completion"
    assert body["id"] == "chatcmpl-" + headers["x-request-id"]
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert count_text(choice["message"]["content"]) == 7
    assert choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    status, _, raw = post(server, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 3})
    body = json.loads(raw)
    assert body["usage"]["prompt_tokens"] == 3
    assert body["choices"][0]["finish_reason"] in {"length", "stop"}


def test_without_ignore_eos_the_model_stops_naturally_and_deterministically(server: EmbeddedServer) -> None:
    body = {"messages": [{"role": "user", "content": "write a long essay"}], "max_tokens": 5000}
    first = json.loads(post(server, "/v1/chat/completions", body)[2])
    again = json.loads(post(server, "/v1/chat/completions", body)[2])
    n = first["usage"]["completion_tokens"]
    lo, hi = server.options.natural_tokens
    assert lo <= n <= hi
    assert first["choices"][0]["finish_reason"] == "stop"
    assert again["usage"]["completion_tokens"] == n
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    capped = json.loads(post(server, "/v1/chat/completions", {**body, "max_tokens": 3})[2])
    assert capped["usage"]["completion_tokens"] == 3
    assert capped["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream_options": {}}, 400,
         "stream_options"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
        ("/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 10**9}, 400, "max_tokens"),
    ],
)  # fmt: skip
def test_errors_are_openai_json(
    server: EmbeddedServer, path: str, body: dict[str, Any], status: int, param: str
) -> None:
    got, headers, raw = post(server, path, body)
    assert got == status
    err = json.loads(raw)["error"]
    assert err["code"] == status
    assert err["param"] == param
    assert err["type"] in {"BadRequestError", "NotFoundError"}
    assert err["message"]
    assert headers["x-request-id"]


def test_invalid_json_body(server: EmbeddedServer) -> None:
    async def run() -> tuple[int, Any]:
        async with aiohttp.ClientSession() as s, s.post(server.base_url + "/v1/completions", data=b"{oops") as r:
            return r.status, await r.json()

    status, body = asyncio.run(run())
    assert status == 400
    assert "JSON" in body["error"]["message"]


def test_client_disconnect_aborts_in_engine() -> None:
    engine, options = build_replica(MODEL, "h100-sxm", speed=1.0)
    with EmbeddedServer(engine, options) as srv:

        async def run() -> None:
            body = {"prompt": "go", "max_tokens": 100_000, "ignore_eos": True, "stream": True}
            async with aiohttp.ClientSession() as s, s.post(srv.base_url + "/v1/completions", json=body) as r:
                n = 0
                async for line in r.content:
                    if line.startswith(b"data: "):
                        n += 1
                    if n >= 5:
                        break  # leave the response early: the connection closes

        asyncio.run(asyncio.wait_for(run(), 30))
        deadline = time.monotonic() + 5
        while srv.call(lambda st: st.loop.live_count) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert srv.call(lambda st: st.loop.live_count) == 0
        assert srv.call(lambda st: st.metrics.success["abort"]) == 1
        assert not srv.call(lambda st: st.loop.engine.has_work())


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_start_embedded_server(isolation: str) -> None:
    async def run() -> tuple[str, str, int, Any]:
        async with start_embedded_server(model=MODEL, gpu="l4", speed=10.0, isolation=isolation, max_num_seqs=8) as srv:
            async with aiohttp.ClientSession() as s, s.get(srv.base_url + "/v1/models") as r:
                models = await r.json()
            return srv.base_url, srv.description, len(models["data"]), srv

    base_url, description, n, srv = asyncio.run(asyncio.wait_for(run(), 60))
    assert base_url.startswith("http://127.0.0.1:")
    assert description.startswith("llama-3.1-8b on l4 ")
    assert "max_num_seqs 8" in description
    assert n == 1
    if isolation == "process":
        assert srv.pid is None  # the child was stopped and reaped


def test_child_server_exits_when_its_parent_goes_away() -> None:
    import subprocess

    from tailscope.serve.child import ChildServer, serve_cli_args
    from tailscope.serve.engine_factory import EngineFlags

    child = ChildServer(serve_cli_args(MODEL, "h100-sxm", EngineFlags()), description="x", model_name=MODEL)
    child.start()
    try:
        proc = child._proc
        assert proc is not None
        assert proc.stdin is not None
        proc.stdin.close()  # what the OS does when the parent dies
        proc.wait(20)
        assert proc.returncode == 0
    finally:
        if child._proc is not None and child._proc.poll() is None:
            child._proc.kill()
        child.stop()
    assert isinstance(proc, subprocess.Popen)


def test_bad_options_fail_before_anything_starts() -> None:
    from tailscope.errors import ConfigError

    async def run(**kw: Any) -> None:
        async with start_embedded_server(model=MODEL, gpu="h100-sxm", **kw):
            pass

    with pytest.raises(ConfigError, match="bogus"):
        asyncio.run(run(bogus=1))
    with pytest.raises(ConfigError, match="isolation"):
        asyncio.run(run(isolation="fiber"))


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_raw_http_versions(server: EmbeddedServer, version: str) -> None:
    """HTTP/1.1 streams use chunked encoding; HTTP/1.0 clients get a plain body closed by the server."""
    import socket

    body = json.dumps({"prompt": "hi", "max_tokens": 3, "ignore_eos": True, "stream": True}).encode()
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as c:
        c.sendall(
            f"POST /v1/completions HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data = b""
        while chunk := c.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/{version} 200".encode())
    if version == "1.1":
        assert b"Transfer-Encoding: chunked" in head
        decoded = b""
        while payload:
            size_line, _, payload = payload.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            decoded += payload[:size]
            payload = payload[size + 2 :]
        payload = decoded
    evs = events(payload)
    assert evs[-1] == "[DONE]"
    assert len(evs) == 4


def test_a_served_twin_counts_prompts_as_its_server(tmp_path: Any) -> None:
    """With a digital twin the engine, the length check and ``usage`` see the twin's server's prompt count
    (offset + scale × ours), as ``sim --calibration twin.yaml`` rescales its prompts."""
    import yaml

    from tailscope.engine.twin import ServerFacts, TwinCoefficients, TwinModel

    twin = TwinModel(
        coefficients=TwinCoefficients(3000, 100, 0.2, 20, 0.002, 5000, 0),
        stderr=TwinCoefficients(),
        facts=ServerFacts(block_size=16, num_blocks=400, max_model_len=2048, prompt_scale=1.7, prompt_offset=17.0),
    )
    path = tmp_path / "twin.yaml"
    path.write_text(yaml.safe_dump(twin.to_mapping()), encoding="utf-8")
    engine, options = build_replica(MODEL, "h100-sxm", speed=8.0, calibration=path)
    with EmbeddedServer(engine, options) as srv:
        status, _, raw = post(srv, "/v1/completions", {"model": MODEL, "prompt": list(range(1, 101)), "max_tokens": 3})
        assert status == 200, raw
        assert json.loads(raw)["usage"]["prompt_tokens"] == twin.facts.server_prompt_tokens(100) == 187
        assert srv.call(lambda st: st.loop.engine.stats().prompt_tokens_total) == 187
        # 1,200 of ours are 2,057 of the server's: past its 2,048-token context
        status, _, raw = post(srv, "/v1/completions", {"model": MODEL, "prompt": list(range(1, 1201)), "max_tokens": 3})
        assert status == 400, raw


def test_an_engine_loop_that_fails_is_reported_not_left_hanging(capfd: pytest.CaptureFixture[str]) -> None:
    """A bug in a step must not leave clients waiting for ever: the request in flight ends (503), ``/health`` says
    why, later requests are refused at once, and the traceback reaches the server's standard error."""
    engine, options = build_replica(MODEL, "h100-sxm", speed=4.0, max_num_seqs=8)
    real_step = engine.step
    calls = 0

    def step(now_ns: int) -> Any:
        nonlocal calls
        calls += 1
        if calls > 3:
            raise ZeroDivisionError("a step bug")
        return real_step(now_ns)

    engine.step = step  # type: ignore[method-assign]
    body = {"model": MODEL, "prompt": "hello there", "max_tokens": 50, "stream": False}
    with EmbeddedServer(engine, options) as srv:
        t0 = time.monotonic()
        status, _, raw = post(srv, "/v1/completions", body)
        assert status == 503, raw
        assert b"engine loop failed" in raw
        assert time.monotonic() - t0 < 10
        status, text = get(srv, "/health")
        assert status == 503
        assert "ZeroDivisionError" in text
        status, _, raw = post(srv, "/v1/completions", body)
        assert status == 503
        assert b"restart tailscope serve" in raw
    err = capfd.readouterr().err
    assert "a step bug" in err
    assert "Traceback" in err
