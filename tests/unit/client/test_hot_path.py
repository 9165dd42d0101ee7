"""The lean hot path gives the same records as the general one: a corpus of recorded streams fed through the raw
transport's push-mode fast path (one whole chunk per read) and through its general chunked decoder (the same bytes,
pulled as pieces, and re-cut at other boundaries) must leave identical request state, or raise the same error."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from tailscope.client import http1_conn
from tailscope.client.cost import hot_path_us, play, recorded_stream
from tailscope.client.http1_conn import Http1Connection as _Conn
from tailscope.client.openai import _consume, _State
from tailscope.client.sse import SSEParser

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def frame(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def ev(obj: Any, *, compact: bool = True) -> bytes:
    text = json.dumps(obj, separators=(",", ":")) if compact else json.dumps(obj)
    return b"data: " + text.encode() + b"\n\n"


def chat(content: Any = None, *, usage: int | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    d = dict(delta)
    if content is not None:
        d["content"] = content
    obj: dict[str, Any] = {"id": "r1", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}]}  # fmt: skip
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 9, "total_tokens": 9 + usage, "completion_tokens": usage}
    return obj


DONE = b"data: [DONE]\n\n"
USAGE = ev({"id": "r1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}})

CORPUS: dict[str, list[bytes]] = {
    "vllm continuous usage": recorded_stream(12, usage=True),
    "no usage": recorded_stream(12, usage=False),
    "finish_reason without [DONE]": recorded_stream(5, usage=True, finish_without_done=True),
    "role-only then tokens, python json spacing": [
        ev(chat("", role="assistant"), compact=False),
        *(ev(chat("tok ", usage=i), compact=False) for i in (1, 2, 3)),
        USAGE + DONE,
    ],
    "reasoning deltas": [
        ev(chat(None, role="assistant")),
        ev(chat(None, reasoning_content="think")),
        ev(chat(None, reasoning="more")),
        ev(chat("answer", finish="stop")),
        DONE,
    ],
    "multi-token events without usage": [ev(chat("ab cd")), ev(chat("ef gh", finish="length")), DONE],
    "completions text": [
        ev({"id": "c1", "choices": [{"index": 0, "text": "x", "finish_reason": None}]}),
        ev({"id": "c1", "choices": [{"index": 0, "text": "", "finish_reason": None}]}),
        ev({"id": "c1", "choices": [{"index": 0, "text": "y", "finish_reason": "length"}]}),
        DONE,
    ],
    "non-ascii and escapes": [ev(chat('héllo "q" \\n ✓')), ev(chat("日本")), DONE],
    "several events in one read": [ev(chat("a")) + ev(chat("b")) + ev(chat("c")), DONE],
    "usage jumps by several tokens": [ev(chat("a", usage=2)), ev(chat("b", usage=5)), ev(chat("c", usage=5)), DONE],
    "error event": [ev(chat("a")), ev({"error": {"message": "out of memory", "code": 500}})],
    "malformed json": [ev(chat("a")), b'data: {"choices":[{"delta":{"content":"b"}}\n\n'],
    "not an object": [ev(chat("a")), b"data: [1, 2]\n\n"],
    "comments and event fields": [b": keep-alive\n\n", b"event: message\n" + ev(chat("a")), DONE],
}


def _stamps(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = itertools.count(1_000_000, 1_000_000)
    monkeypatch.setattr(http1_conn.time, "perf_counter_ns", lambda: next(ticks))


def _snapshot(st: _State, exc: BaseException | None) -> tuple[Any, ...]:
    return (
        tuple(st.chunk_times), tuple(st.chunk_tokens), tuple(st.texts), st.first_event, st.input_tokens,
        st.completion_tokens, st.last_usage_completion, st.usage_per_chunk, st.request_id, st.done, st.finished,
        type(exc).__name__ if exc is not None else None, str(exc) if exc is not None else None,
    )  # fmt: skip


def _reads(events: list[bytes]) -> list[bytes]:
    return events if events[0].startswith(b"HTTP/") else [HEAD, *(frame(e) for e in events), b"0\r\n\r\n"]


class _Pool:
    def discard(self, c: Any) -> None:
        pass

    def release(self, c: Any) -> None:
        pass


def _conn() -> _Conn:
    return _Conn(_Pool())  # type: ignore[arg-type]


def push(reads: list[bytes]) -> tuple[Any, ...]:
    """Push mode: the protocol calls the client per read (the fast path takes whole single-chunk reads)."""
    st, conn = _State(), _conn()
    play(reads, st, conn=conn)
    return _snapshot(st, conn.error)


def pull(reads: list[bytes]) -> tuple[Any, ...]:
    """The general decoder: pieces collected by the protocol, consumed afterwards in order."""
    st, conn = _State(), _conn()
    parser = SSEParser()
    exc: BaseException | None = None
    for r in reads:
        conn.data_received(r)
        pieces, conn.pieces = conn.pieces, []
        for stamp, piece in pieces:
            if st.done or exc is not None:
                break
            try:
                _consume(parser.feed_data(piece), stamp, st, None)
            except Exception as e:
                exc = e
    return _snapshot(st, exc)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_push_fast_path_equals_the_general_decoder(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _reads(CORPUS[name])
    _stamps(monkeypatch)
    fast = push(reads)
    _stamps(monkeypatch)
    general = pull(reads)
    assert fast == general


@pytest.mark.parametrize("per_read", [2, 3, 5])
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_coalesced_reads_equal_the_general_decoder(name: str, per_read: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop that fell behind reads several whole chunks at once (the last chunk, ``0\\r\\n\\r\\n``, with the last
    ones): the fast path hands each chunk over in turn, with the read's one stamp, and leaves the same state or error
    as the general decoder."""
    reads = _reads(CORPUS[name])
    body = reads[1:]
    grouped = [reads[0], *(b"".join(body[i : i + per_read]) for i in range(0, len(body), per_read))]
    _stamps(monkeypatch)
    fast = push(grouped)
    _stamps(monkeypatch)
    general = pull(grouped)
    assert fast == general


def test_coalesced_reads_end_the_response_and_free_the_connection() -> None:
    """[DONE] and the last chunk in one read with other events: the handler stops at [DONE] and the response is
    complete (the connection can go back to the pool)."""
    reads = _reads(CORPUS["vllm continuous usage"])
    st, conn = _State(), _conn()
    play([reads[0], b"".join(reads[1:])], st, conn=conn)
    assert st.done
    assert len(st.chunk_times) == 12
    assert conn.handler_done
    assert conn.complete
    assert conn.error is None


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_any_read_boundaries_give_the_same_tokens(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-cut the body every 7 bytes (no fast path applies): same tokens, counts, text, ids and outcome."""
    reads = _reads(CORPUS[name])
    _stamps(monkeypatch)
    whole = push(reads)
    body = b"".join(reads[1:])
    _stamps(monkeypatch)
    cut = push([reads[0], *(body[i : i + 7] for i in range(0, len(body), 7))])
    # stamps differ (reads differ); everything else is the same
    assert len(cut[0]) == len(whole[0])
    assert cut[1:3] == whole[1:3]
    assert cut[4:] == whole[4:]


def test_recorded_stream_state_and_cost() -> None:
    st = play(recorded_stream(64, usage=True))
    assert len(st.chunk_times) == 64
    assert sum(st.chunk_tokens) == 64
    assert st.done
    assert st.usage_per_chunk
    assert st.completion_tokens == 64
    assert hot_path_us(streams=2, tokens=32, repeat=1) > 0
