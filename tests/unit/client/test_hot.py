"""The compiled hot loop (``tailscope.client._hot``) and its pure-Python twins give identical results: the same state,
the same return values, the same exceptions (type and message) — on the recorded corpus, on generated streams and
payloads of every JSON shape, on chunk framing with odd size lines, and on a real loopback socket. Under ``CI=true``
the compiled loop must be built (the suite then tests both)."""

from __future__ import annotations

import itertools
import json
import os
import socket
import struct
import sys
import time
from array import array
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from test_hot_path import CORPUS, _conn, _reads, _snapshot

from tailscope.client import http1_conn, kstamp, openai
from tailscope.client.cost import play
from tailscope.client.hot import HOT, WHY, forced, hot_loop
from tailscope.client.openai import _State
from tailscope.client.sse import SSEParser

compiled = pytest.mark.skipif(HOT is None, reason=f"the compiled hot loop is not built here: {WHY}")


def test_the_compiled_loop_is_built_under_ci() -> None:
    if os.environ.get("CI") != "true":
        pytest.skip("checked under CI=true, where the machine has a C compiler")
    assert HOT is not None, WHY
    assert hot_loop() == "compiled"


# -- state and outcome ----------------------------------------------------------------------------------------------
def state(st: _State) -> tuple[Any, ...]:
    return tuple((k, list(v) if isinstance(v, array | list) else v) for k in _State.__slots__ if (v := getattr(st, k)))


def outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", fn())
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))


def _event_py(chunk: bytes, now: int, parser: SSEParser, st: _State, count_tokens: Any) -> bool:
    """``_hot.event``'s twin: one piece through ``push_handler``'s pure-Python closure (stamp = now, t0 = 0)."""
    return openai.push_handler(parser, st, count_tokens, 0, openai._consume_py)(now, chunk)


def both(run: Callable[[Callable[..., Any], Callable[..., Any]], Any]) -> None:
    """``run(consume, event)`` with the Python twins and with the compiled ones: the same result."""
    assert HOT is not None
    assert run(openai._consume_py, _event_py) == run(HOT.consume, HOT.event)


# -- consume: one read's payloads -----------------------------------------------------------------------------------
scalars = hs.one_of(
    hs.none(), hs.booleans(), hs.integers(-3, 2**63 - 1), hs.floats(allow_nan=False), hs.text(max_size=4)
)
json_values = hs.recursive(
    scalars,
    lambda inner: hs.lists(inner, max_size=3) | hs.dictionaries(hs.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


def maybe(*keys_values: tuple[str, Any]) -> Any:
    """A dict with any of these keys (each a strategy), or any JSON value in its place."""
    return hs.fixed_dictionaries({}, optional=dict(keys_values)) | json_values


usage_objs = maybe(
    ("prompt_tokens", hs.integers(0, 99) | json_values),
    ("completion_tokens", hs.integers(0, 99) | json_values),
    ("prompt_tokens_details", maybe(("cached_tokens", hs.integers(0, 9) | json_values))),
    ("completion_tokens_details", maybe(("reasoning_tokens", hs.integers(0, 9) | json_values))),
)
short = hs.text(max_size=3) | json_values
deltas = maybe(("content", short), ("reasoning_content", short), ("reasoning", short), ("role", hs.just("assistant")))
choices = maybe(
    ("delta", deltas), ("text", short), ("finish_reason", hs.sampled_from([None, "stop", ""]) | json_values)
)
events = maybe(
    ("id", hs.text(max_size=4) | json_values),
    ("choices", hs.lists(choices, max_size=2) | json_values),
    ("usage", usage_objs),
    ("error", maybe(("message", json_values))),
)
payloads = hs.one_of(
    events.map(lambda o: json.dumps(o).encode()),
    hs.sampled_from([b"[DONE]", b"", b"{", b"nul", b'{"a":1}x', b"\xff\xfe", b"[DONE] ", b'"x"', b"1e999"]),
)


def counter(text: Any) -> Any:
    """A tokenizer stand-in with Python's own behaviour on odd inputs (a TypeError on a non-string)."""
    return len(text.split()) - 1


@compiled
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(hs.lists(payloads, max_size=4), max_size=4), hs.booleans())
def test_consume_is_the_same_on_any_payloads(reads: list[list[bytes]], tokenizer: bool) -> None:
    def run(consume: Callable[..., Any], _: Any) -> Any:
        st = _State()
        results = [
            outcome(lambda r=r, n=n: consume(r, n * 10, st, counter if tokenizer else None))
            for n, r in enumerate(reads)
        ]  # type: ignore[misc]
        return results, state(st)

    both(run)


@compiled
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_consume_is_the_same_on_the_corpus(name: str) -> None:
    events = [e for e in CORPUS[name] if not e.startswith(b"HTTP/")]

    def run(consume: Callable[..., Any], _: Any) -> Any:
        st, parser = _State(), SSEParser()
        return [outcome(lambda e=e: consume(parser.feed_data(e), 5, st, None)) for e in events], state(st)  # type: ignore[misc]

    both(run)


# -- event: the SSE parser's fast path ------------------------------------------------------------------------------
sse_pieces = hs.lists(
    hs.one_of(
        payloads.map(lambda p: b"data: " + p + b"\n\n"),
        hs.sampled_from([b"data: {}\n", b"\n", b"\r\n", b": c\n\n", b"event: x\n", b"data:", b"data: [DONE]\r\n\r\n"]),
        hs.binary(max_size=6),
    ),
    max_size=8,
)


@compiled
@settings(max_examples=400, deadline=None)
@given(sse_pieces)
def test_event_is_the_same_on_any_pieces(pieces: list[bytes]) -> None:
    def run(_: Any, event: Callable[..., Any]) -> Any:
        st, parser = _State(), SSEParser()
        out = [outcome(lambda p=p, n=n: event(p, n, parser, st, None)) for n, p in enumerate(pieces)]  # type: ignore[misc]
        return out, state(st), parser._buf, parser._data

    both(run)


# -- push: chunk framing --------------------------------------------------------------------------------------------
size_lines = hs.sampled_from(
    [None, "0x{:x}", " {:x}", "+{:x}", "{:X}", "-1", "0", "zz", "1_0", "{:x} ", "\x00{:x}", "fffffffff"]
)


@hs.composite
def framed(draw: hs.DrawFn) -> bytes:
    out = b""
    for _ in range(draw(hs.integers(0, 4))):
        body = draw(hs.binary(min_size=1, max_size=20))
        form = draw(size_lines)
        line = f"{len(body):x}" if form is None else form.format(len(body))
        out += line.encode("latin-1") + b"\r\n" + body + draw(hs.sampled_from([b"\r\n", b"\r\n", b"\n", b""]))
    return out + draw(hs.sampled_from([b"", b"0\r\n\r\n", b"5\r\nab", b"\r\n"]))


@compiled
@settings(max_examples=500, deadline=None)
@given(framed(), hs.integers(0, 5), hs.booleans())
def test_push_frames_the_same(data: bytes, stop_after: int, raise_instead: bool) -> None:
    assert HOT is not None

    def run(push: Callable[..., tuple[int, bool]]) -> Any:
        seen: list[tuple[int, bytes]] = []

        def handler(now: int, piece: bytes) -> Any:
            seen.append((now, piece))
            if len(seen) > stop_after:
                if raise_instead:
                    raise ValueError(f"stop at {len(seen)}")
                return len(seen)  # any truthy value
            return 0

        return outcome(lambda: push(data, 7, handler)), seen

    assert run(http1_conn._push_frames_py) == run(HOT.push)


@compiled
def test_push_takes_a_bytearray_as_bytes() -> None:
    assert HOT is not None
    data = bytearray(b"3\r\nabc\r\n")
    assert HOT.push(data, 1, lambda n, p: False) == http1_conn._push_frames_py(bytes(data), 1, lambda n, p: False)


# -- whole responses through the protocol ---------------------------------------------------------------------------
def _conn_state(conn: Any) -> tuple[Any, ...]:
    err = conn.error
    return (
        conn.complete, conn.handler_done, conn.handler is None, conn.keep_alive, conn.status, conn.headers,
        conn.pieces, conn._chunk_state, bytes(conn._line), type(err).__name__ if err else None,
        str(err) if err else None,
    )  # fmt: skip


@compiled
@pytest.mark.parametrize("per_read", [1, 3, 7])
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_whole_responses_leave_the_same_state(name: str, per_read: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each recorded response fed through ``Http1Connection`` in push mode — whole chunks per read, several chunks
    per read, and cut every 7 bytes — with every twin bound compiled and with every one bound pure Python (the
    protocol's receive, the chunk framing, the handler, the SSE fast path, the accounting): identical request and
    connection state."""
    reads = _reads(CORPUS[name])
    body = b"".join(reads[1:])
    if per_read == 7:
        shaped = [reads[0], *(body[i : i + 7] for i in range(0, len(body), 7))]
    else:
        shaped = [reads[0], *(b"".join(reads[1:][i : i + per_read]) for i in range(0, len(reads) - 1, per_read))]

    def run(kind: str) -> tuple[Any, ...]:
        ticks = itertools.count(1_000_000, 1_000_000)
        monkeypatch.setattr(http1_conn.time, "perf_counter_ns", lambda: next(ticks))
        with forced(kind):
            st, conn = _State(), _conn()
            play(shaped, st, conn=conn)
        return _snapshot(st, conn.error), state(st), _conn_state(conn)

    assert run("python") == run("compiled")


@compiled
@settings(max_examples=300, deadline=None)
@given(hs.lists(hs.binary(max_size=40) | framed(), max_size=6), hs.integers(0, 3))
def test_receive_is_the_same_on_any_reads(reads: list[bytes], stop_after: int) -> None:
    """Arbitrary reads after a chunked head (framing errors, partial chunks, junk) into a connection in push mode:
    ``_hot.receive`` and ``Http1Connection.data_received_at`` leave the same connection state and hand the handler
    the same pieces."""
    assert HOT is not None

    def run(receive: Callable[..., None]) -> Any:
        conn = _conn()
        conn.data_received_at(_reads([b"x"])[0], 1)
        seen: list[tuple[int, bytes]] = []

        def handler(now: int, piece: bytes) -> bool:
            seen.append((now, piece))
            if piece.startswith(b"!"):
                raise ValueError("a malformed piece")
            return len(seen) > stop_after

        conn.handler = handler
        for n, r in enumerate(reads):
            receive(conn, r, n)
        return _conn_state(conn), seen

    assert run(http1_conn.Http1Connection.data_received_at) == run(HOT.receive)


@compiled
@settings(max_examples=300, deadline=None)
@given(
    hs.lists(hs.tuples(hs.none() | hs.integers(0, 3_000), hs.integers(0, 3_000), hs.integers(0, 3_000)), max_size=12),
    hs.integers(1, 500),
)
def test_stamp_is_the_same(reads: list[tuple[int | None, int, int]], resync: int) -> None:
    """``_hot.stamp`` is ``RealtimeMap.stamp``: the same stamps, counters and re-measured offsets."""
    assert HOT is not None

    def run(stamp: Callable[..., int]) -> Any:
        offsets = itertools.count(1_000, 7)
        m = kstamp.RealtimeMap(offset_ns=lambda: next(offsets), resync_ns=resync)
        out = [stamp(m, None if rt is None else rt + 1_000, read, floor) for rt, read, floor in reads]
        return out, m.kernel, m.user, m.clamped, m.offset_ns, m.next_sync_ns

    assert run(kstamp.RealtimeMap.stamp) == run(HOT.stamp)


def _feed(on_data: Callable[[int, bytes], Any], pieces: list[bytes]) -> list[tuple[Any, ...]]:
    return [outcome(lambda e=e, n=n: on_data(5_000 + n, e)) for n, e in enumerate(pieces)]  # type: ignore[misc]


@compiled
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_sink_is_the_handler_closure(name: str) -> None:
    """``_hot.Sink`` is ``execute``'s ``on_data``: the stamp made relative to the run's start, the piece accounted,
    ``st.done`` returned."""
    assert HOT is not None
    body = [e for e in CORPUS[name] if not e.startswith(b"HTTP/")]
    st, parser = _State(), SSEParser()

    on_data = openai.push_handler(parser, st, None, 1_000, openai._consume_py)  # execute()'s pure-Python handler
    expected = _feed(on_data, body), state(st)
    st2 = _State()
    assert (_feed(HOT.Sink(SSEParser(), st2, None, 1_000), body), state(st2)) == expected


# -- recv_stamped on a real loopback socket -------------------------------------------------------------------------
@compiled
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")
def test_recv_stamped_reads_as_the_python_twin_does() -> None:
    assert HOT is not None
    lsock = socket.create_server(("127.0.0.1", 0))
    with lsock:
        socks = []
        for _ in range(2):
            c = socket.create_connection(lsock.getsockname())
            c.setsockopt(socket.SOL_SOCKET, kstamp.SO_TIMESTAMPNS, 1)
            c.setblocking(False)
            s, _ = lsock.accept()
            socks.append((c, s))
        try:
            for fn, (c, s) in zip((kstamp._recv_stamped_py, HOT.recv_stamped), socks, strict=True):
                assert fn(c, c.fileno(), 1024) is None  # nothing there yet
                before = time.perf_counter_ns()
                s.sendall(b"x" * 3000)
                time.sleep(0.02)
                got = fn(c, c.fileno(), 1024)
                after = time.perf_counter_ns()
                assert got is not None
                data, rt, read_ns = got
                assert data == b"x" * 1024  # no more than asked
                assert before <= read_ns <= after  # perf_counter_ns's clock
                assert rt is None or abs(rt - time.time_ns()) < 5_000_000_000
                rest = fn(c, c.fileno(), 64 * 1024)
                assert rest is not None
                assert rest[0] == b"x" * 1976
            # a reset is the same OSError; EOF is empty data
            for fn, (c, s) in zip((kstamp._recv_stamped_py, HOT.recv_stamped), socks, strict=True):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
                time.sleep(0.02)
                with pytest.raises(ConnectionResetError):
                    fn(c, c.fileno(), 1024)
        finally:
            for c, s in socks:
                c.close()
                s.close()


@compiled
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")
def test_recv_stamped_sees_eof_as_empty_data() -> None:
    assert HOT is not None
    for fn in (kstamp._recv_stamped_py, HOT.recv_stamped):
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            b.close()
            got = fn(a, a.fileno(), 1024)
            assert got is not None
            assert got[0] == b""


@compiled
def test_monotonic_is_perf_counter() -> None:
    assert HOT is not None
    a = time.perf_counter_ns()
    m = HOT.monotonic_ns()
    b = time.perf_counter_ns()
    assert a <= m <= b


# -- the event scanner (a strict JSON subset before orjson) ---------------------------------------------------------
def _serialize(obj: Any, style: int) -> bytes:
    if style == 0:
        return json.dumps(obj, separators=(",", ":")).encode()
    if style == 1:
        return json.dumps(obj, ensure_ascii=False).encode()  # raw UTF-8: the scanner leaves it to orjson
    return json.dumps(obj, indent=1).encode().replace(b"\n", b"\r\n\t")


mutations = hs.lists(
    hs.tuples(hs.integers(0, 10_000), hs.sampled_from(["del", "dup", "byte"]), hs.binary(min_size=1, max_size=2)),
    max_size=2,
)


def _mutate(data: bytes, muts: list[tuple[int, str, bytes]]) -> bytes:
    for pos, how, b in muts:
        if not data:
            break
        i = pos % len(data)
        data = (
            data[:i] + data[i + 1 :] if how == "del" else data[:i] + (data[i : i + 1] if how == "dup" else b) + data[i:]
        )
    return data


@compiled
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(hs.tuples(events, hs.integers(0, 2), mutations), min_size=1, max_size=3), hs.booleans())
def test_the_scanner_changes_nothing(
    items: list[tuple[Any, int, list[tuple[int, str, bytes]]]], known_id: bool
) -> None:
    """Payloads of every JSON shape — compact, with raw UTF-8, indented with CRLF and tabs, and with bytes deleted,
    doubled or replaced — accounted with the scanner, without it (orjson for every payload) and by the Python twin:
    the same state and the same errors."""
    assert HOT is not None
    payloads = [_mutate(_serialize(obj, style), muts) for obj, style, muts in items]

    def run(consume: Callable[..., Any]) -> Any:
        st = _State()
        if known_id:
            st.request_id = "known"
        return [outcome(lambda p=p: consume([p], 3, st, None)) for p in payloads], state(st)  # type: ignore[misc]

    expected = run(openai._consume_py)
    assert run(HOT.consume) == expected
    HOT.set_scan(False)
    try:
        assert run(HOT.consume) == expected
    finally:
        HOT.set_scan(True)


@compiled
@pytest.mark.parametrize(
    "payload",
    [
        b'{"id":"a","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":{"completion_tokens":1,"completion_tokens":2}}',
        b'{"choices":[{"delta":{"content":"x"}}],"choices":[]}',
        b'{"choices":[{"delta":{"content":"x"},"delta":{"content":"y"}}]}',
        b'{"choices":[{"delta":{"content":"x","content":"y"}}]}',
        b'{"choices":[{"delta":{"content":"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t"}}]}',
        b'{"choices":[{"delta":{"content":"\\u00e9"}}]}',
        b'{"choices":[{"delta":{"content":"\xc3\xa9"}}]}',
        b'{"choices":[{"delta":{"content":"\xff"}}]}',
        b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":1e2}}',
        b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":99999999999999999999}}',
        b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":-0}}',
        b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":01}}',
        b'{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens_details":[1]}}',
        b'{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens_details":0}}',
        b'{"choices":[{"delta":{"content":"x"},"finish_reason":""}]}',
        b'{"choices":[{"delta":{"content":"x"},"finish_reason":0}]}',
        b'{"choices":[{"delta":{"content":5}}]}',
        b'{"choices":[{"delta":false}]}',
        b'{"choices":[1,{"delta":{"content":"x"}}]}',
        b'{"choices":[{"delta":{"content":"x"}},[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}',
        b'{"choices":[],"error":{"message":"boom"}}',
        b'{"choices":{"0":1}}',
        b'{"choices":[{"delta":{"content":"x"}}]} x',
        b'{"choices":[{"delta":{"content":"x"}},]}',
        b'{"choices":[{"delta":{"content":"x"}}]',
        b' \t\r\n{"choices" : [ { "delta" : { "content" : "x" } } ] } \n',
        b'{"choices":[{"delta":{"content":"x"}}],"id":7,"id":"late"}',
        b'{"id":"\\u0041","choices":[{"delta":{"content":"x"}}]}',
        b"{}",
        b"",
    ],
)
def test_the_scanner_on_edge_cases(payload: bytes) -> None:
    assert HOT is not None

    def run(consume: Callable[..., Any]) -> Any:
        st = _State()
        return outcome(lambda: consume([payload], 3, st, None)), state(st)

    assert run(HOT.consume) == run(openai._consume_py)


@compiled
def test_the_scanner_takes_the_common_shapes() -> None:
    """The events a vLLM-style server streams are taken by the scanner (not left to orjson): the speed-up is real."""
    assert HOT is not None
    for name in (
        "vllm continuous usage",
        "no usage",
        "reasoning deltas",
        "completions text",
        "usage jumps by several tokens",
    ):
        for e in CORPUS[name]:
            if e.startswith(b"HTTP/"):
                continue
            for payload in SSEParser().feed_data(e):
                if payload != b"[DONE]":
                    assert HOT.scan(payload) is not None, payload


@compiled
def test_no_reference_is_leaked() -> None:
    """Every compiled path — whole responses, events the scanner takes and leaves, errors raised from C and from a
    handler — run 300 times: the singletons' reference counts do not drift and no Python allocation is left behind
    (a missing ``Py_DECREF`` shows in either)."""
    import gc
    import tracemalloc

    assert HOT is not None
    reads = _reads(CORPUS["vllm continuous usage"])
    odd = [
        b'{"choices":[{"delta":{"content":"\\u00e9"}}]}',
        b"{x",
        b"[1]",
        b'{"usage":[1]}',
        b'{"error":"e"}',
        b'{"choices":[{"delta":{"reasoning":"a\\nb"},"finish_reason":"stop"}],"usage":{"completion_tokens":2,'
        b'"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":1}}}',
    ]

    def fail(now: int, piece: bytes) -> bool:
        raise ValueError("a handler's error")

    def once() -> None:
        play(reads)
        for b in odd:
            st = _State()
            outcome(lambda b=b, st=st: HOT.consume([b], 1, st, None))  # type: ignore[misc]
            outcome(lambda b=b, st=st: HOT.event(b"data: " + b + b"\n\n", 1, SSEParser(), st, len))  # type: ignore[misc]
        HOT.push(b"5\r\nabcde\r\nzz", 1, lambda n, p: False)
        outcome(lambda: HOT.push(b"5\r\nabcde\r\n", 1, fail))
        m = kstamp.RealtimeMap(offset_ns=lambda: 10, resync_ns=5)
        for rt in (None, 15, 10_000):
            HOT.stamp(m, rt, 20, 0)

    def counts(rounds: int) -> list[int]:
        for _ in range(rounds):
            once()
        gc.collect()
        return [sys.getrefcount(x) for x in (True, False, None)]

    settled = counts(20)
    drift = [b - a for a, b in zip(settled, counts(300), strict=True)]
    assert all(abs(d) <= 2 for d in drift), drift  # a reference lost or leaked per round would be ≥ 300
    tracemalloc.start()
    try:
        snap = tracemalloc.take_snapshot()
        counts(300)
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(snap, "filename") if s.size_diff > 0)
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024  # tracemalloc's own bookkeeping; a leak of one object per round would be ≥ 300 × 50 B


ascii_text = hs.text(
    alphabet=hs.characters(min_codepoint=0x20, max_codepoint=0x7E) | hs.sampled_from("\n\t\r\b\f"), max_size=3
)
small_int = hs.integers(-2, 300)
realistic_choice = hs.fixed_dictionaries({}, optional={
    "index": hs.just(0),
    "delta": hs.none() | hs.fixed_dictionaries({}, optional={
        "role": hs.just("assistant"), "content": hs.none() | ascii_text,
        "reasoning_content": hs.none() | ascii_text, "reasoning": hs.none() | ascii_text,
    }),
    "text": hs.none() | ascii_text,
    "logprobs": hs.none(),
    "finish_reason": hs.sampled_from([None, "", "stop", "length"]),
})  # fmt: skip
realistic_events = hs.fixed_dictionaries({}, optional={
    "id": ascii_text,
    "object": hs.just("chat.completion.chunk"),
    "choices": hs.none() | hs.lists(realistic_choice, max_size=2),
    "usage": hs.none() | hs.fixed_dictionaries({}, optional={
        "prompt_tokens": small_int | hs.none() | hs.sampled_from([0.5, 2.25, -0.0]),
        "completion_tokens": small_int | hs.none() | hs.booleans(),
        "total_tokens": small_int,
        "prompt_tokens_details": hs.none()
        | hs.fixed_dictionaries({}, optional={"cached_tokens": small_int | hs.none()}),
        "completion_tokens_details": hs.none() | hs.fixed_dictionaries({}, optional={"reasoning_tokens": small_int}),
    }),
})  # fmt: skip


@compiled
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(realistic_events, min_size=1, max_size=4), hs.booleans(), hs.booleans())
def test_the_scanner_walk_is_the_python_walk(objs: list[Any], known_id: bool, tokenizer: bool) -> None:
    """Events in the scanner's subset (ASCII text with the escapes it reads, every field present, absent, null, empty
    or of a type the walk ignores): every one is taken by the scanner, and the accounting over what it kept leaves the
    state the Python walk over the whole decoded object leaves."""
    assert HOT is not None
    payloads = [json.dumps(o, separators=(",", ":")).encode() for o in objs]
    for p in payloads:
        assert HOT.scan(p) is not None, p

    def run(consume: Callable[..., Any]) -> Any:
        st = _State()
        if known_id:
            st.request_id = "known"
        count = counter if tokenizer else None
        return [outcome(lambda p=p: consume([p], 3, st, count)) for p in payloads], state(st)  # type: ignore[misc]

    assert run(HOT.consume) == run(openai._consume_py)
