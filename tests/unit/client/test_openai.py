"""The streaming client against scripted responses on a manual clock: exact timings and error classes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tailscope.client.mock import MockTransport, Script
from tailscope.client.openai import ClientOptions, Timeouts, build_body, execute
from tailscope.clock import ManualClock
from tailscope.records import ErrorClass, Status, TokensSource

MS = 1_000_000


def ev(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def delta(text: str, usage: int | None = None) -> bytes:
    obj: dict[str, Any] = {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": text}}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": usage}
    return ev(obj)


ROLE = ev({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
USAGE = ev({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4}})
DONE = b"data: [DONE]\n\n"


def run(script: Script, *, scheduled_ns: int = 0, start_ns: int = 1000 * MS, **kw: Any) -> Any:
    clock = ManualClock(start_ns)
    t = MockTransport(clock, [script])
    opts = ClientOptions(model="m")
    timeouts = kw.pop("timeouts", Timeouts())
    return asyncio.run(
        execute(
            t,
            opts,
            request_id=3,
            prompt="hi",
            max_tokens=4,
            scheduled_ns=scheduled_ns,
            t0_ns=start_ns - scheduled_ns,
            clock=clock,
            timeouts=timeouts,
            **kw,
        )
    )


def test_timings_from_schedule_role_delta_not_a_token() -> None:
    t0 = 1000 * MS
    script = Script(
        chunks=[
            (t0 + 5 * MS, ROLE),
            (t0 + 50 * MS, delta("a", 1)),
            (t0 + 60 * MS, delta("b", 2)),
            (t0 + 70 * MS, delta("cd", 4)),  # one event carrying two tokens
            (t0 + 71 * MS, USAGE + DONE),
        ]
    )
    out = run(script, scheduled_ns=2 * MS, start_ns=t0)
    r = out.record
    assert r.status is Status.OK
    assert r.sent_ns == 2 * MS
    assert r.first_event_ns == 7 * MS
    assert r.first_token_ns == 52 * MS
    assert r.end_ns == 72 * MS
    assert r.stream_end_ns == 73 * MS
    assert r.chunk_times_ns == (52 * MS, 62 * MS, 72 * MS)
    assert r.chunk_tokens == (1, 1, 2)
    assert r.output_tokens == 4
    assert r.input_tokens == 7
    assert r.tokens_source is TokensSource.USAGE
    assert r.server_request_id == "chatcmpl-1"
    assert out.text == "abcd"


def test_without_usage_counts_one_per_chunk_or_tokenizer() -> None:
    t0 = 0
    chunks = [(t0 + 10 * MS, delta("hello world")), (t0 + 20 * MS, delta("x")), (t0 + 21 * MS, DONE)]
    r = run(Script(chunks=list(chunks)), start_ns=t0).record
    assert r.chunk_tokens == (1, 1)
    assert r.output_tokens == 2
    assert r.tokens_source is TokensSource.CHUNKS
    r2 = run(Script(chunks=list(chunks)), start_ns=t0, count_tokens=lambda s: len(s.split())).record
    assert r2.chunk_tokens == (2, 1)
    assert r2.output_tokens == 3
    assert r2.tokens_source is TokensSource.TOKENIZER


def test_completions_text_field() -> None:
    chunks = [(10 * MS, ev({"id": "cmpl-9", "choices": [{"text": "abc"}]})), (11 * MS, DONE)]
    r = run(Script(chunks=chunks), start_ns=0).record
    assert r.ok
    assert r.first_token_ns == 10 * MS
    assert r.server_request_id == "cmpl-9"


def test_reasoning_content_counts_as_first_token() -> None:
    chunks = [
        (5 * MS, ev({"choices": [{"delta": {"reasoning_content": "think"}}]})),
        (9 * MS, delta("answer")),
        (9 * MS, DONE),
    ]
    assert run(Script(chunks=chunks), start_ns=0).record.first_token_ns == 5 * MS


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (500, ErrorClass.HTTP_5XX),
        (502, ErrorClass.HTTP_5XX),
        (429, ErrorClass.HTTP_429),
        (401, ErrorClass.HTTP_401),
        (400, ErrorClass.HTTP_4XX),
    ],
)
def test_http_errors_are_records(status: int, expected: ErrorClass) -> None:
    body = b"<html><body>Bad Gateway</body></html>"
    r = run(Script(status=status, chunks=[(1 * MS, body)], headers={"Retry-After": "2"}), start_ns=0).record
    assert r.status is Status.ERROR
    assert r.error is expected
    assert r.http_status == status
    assert r.error_detail is not None
    assert "Retry-After: 2" in r.error_detail


def test_malformed_data_line_keeps_partial_timings() -> None:
    chunks = [(10 * MS, delta("a")), (20 * MS, b"data: {not json\n\n")]
    r = run(Script(chunks=chunks), start_ns=0).record
    assert r.error is ErrorClass.MALFORMED_SSE
    assert r.first_token_ns == 10 * MS
    assert r.chunk_times_ns == (10 * MS,)


def test_stream_cut_without_done_is_broken() -> None:
    r = run(Script(chunks=[(10 * MS, delta("a"))]), start_ns=0).record
    assert r.error is ErrorClass.STREAM_BROKEN
    r2 = run(Script(chunks=[(10 * MS, delta("a"))], raise_after=ConnectionResetError("reset")), start_ns=0).record
    assert r2.error is ErrorClass.STREAM_BROKEN
    assert r2.chunk_times_ns == (10 * MS,)


def test_error_event_in_stream() -> None:
    chunks = [(10 * MS, ev({"error": {"message": "overloaded", "code": 503}}))]
    r = run(Script(chunks=chunks), start_ns=0).record
    assert r.error is ErrorClass.SERVER_ERROR_EVENT
    assert "overloaded" in (r.error_detail or "")


def test_empty_stream_is_an_error() -> None:
    r = run(Script(chunks=[(1 * MS, ROLE + DONE)]), start_ns=0).record
    assert r.error is ErrorClass.EMPTY_RESPONSE


def test_first_token_and_total_timeouts() -> None:
    r = run(
        Script(chunks=[(1 * MS, ROLE)], hang=True), start_ns=0, timeouts=Timeouts(first_token_s=0.05, total_s=5)
    ).record
    assert r.error is ErrorClass.TIMEOUT_FIRST_TOKEN
    r2 = run(
        Script(chunks=[(1 * MS, delta("a"))], hang=True),
        start_ns=0,
        timeouts=Timeouts(first_token_s=0.05, total_s=0.15),
    ).record
    assert r2.error is ErrorClass.TIMEOUT_TOTAL
    assert r2.first_token_ns == 1 * MS


def test_body_shape() -> None:
    body = json.loads(build_body(ClientOptions(model="m", endpoint="chat"), "hello", 16))
    assert body == {
        "model": "m",
        "max_tokens": 16,
        "stream": True,
        "messages": [{"role": "user", "content": "hello"}],
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True,
    }
    plain = json.loads(
        build_body(ClientOptions(model="m", endpoint="completions", ignore_eos=False, continuous_usage=False), "x", 1)
    )
    assert plain == {
        "model": "m",
        "max_tokens": 1,
        "stream": True,
        "prompt": "x",
        "stream_options": {"include_usage": True},
    }
