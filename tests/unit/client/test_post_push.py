"""The raw transport's ``post_push``: a 200 answer's body goes to the handler given with the request, and the
exchange wakes its task once, at the body's end; the record is the one ``post`` + ``consume`` gives."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from tailscope.client.http1_conn import Http1Connection
from tailscope.client.http1_pool import ConnectionPool
from tailscope.client.openai import ClientOptions, Timeouts, execute
from tailscope.client.rawhttp import RawHttpTransport, StreamClosed
from tailscope.clock import MonotonicClock
from tailscope.records import ErrorClass, Status


def _frame(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def _event(text: str, rid: str = "body-id") -> bytes:
    obj = {"id": rid, "choices": [{"index": 0, "delta": {"content": text}}]}
    return _frame(b"data: " + json.dumps(obj).encode() + b"\n\n")


HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
OK_READS = [
    HEAD + b"X-Request-Id: head-id\r\n\r\n",
    _event("a"),
    _event("b"),
    _frame(b"data: [DONE]\n\n"),
    b"0\r\n\r\n",
]


class _Wire(asyncio.Transport):
    """Answers every request with ``reads``, one per loop turn."""

    def __init__(self, conn: Http1Connection, reads: list[bytes], close_after: bool = False) -> None:
        super().__init__()
        self.conn, self.reads, self.close_after = conn, reads, close_after
        self.closed = False

    def write(self, data: Any) -> None:
        asyncio.get_running_loop().call_soon(self._step, 0)

    def _step(self, i: int) -> None:
        if self.closed:
            return
        self.conn.data_received(self.reads[i])
        if i + 1 < len(self.reads):
            asyncio.get_running_loop().call_soon(self._step, i + 1)
        elif self.close_after:
            self.close()
            self.conn.connection_lost(None)

    def close(self) -> None:
        self.closed = True


class _Pool(ConnectionPool):
    def __init__(self, reads: list[bytes], close_after: bool = False) -> None:
        super().__init__("h", 1, None, 1.0)
        self.reads, self.close_after = reads, close_after

    async def _connect(self) -> Http1Connection:
        c = Http1Connection(self)
        c.connection_made(_Wire(c, self.reads, self.close_after))
        c.opened = (0, 0, None)
        return c


def _transport(reads: list[bytes], close_after: bool = False) -> RawHttpTransport:
    t = RawHttpTransport("http://h:1")
    t._pool = _Pool(reads, close_after)
    return t


class _PostOnly:
    """The same transport without ``post_push``: execute takes the head, then consumes the body."""

    def __init__(self, inner: RawHttpTransport) -> None:
        self._inner = inner

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> AbstractAsyncContextManager[Any]:
        return self._inner.post(path, body, headers)

    async def get(self, path: str, timeout_s: float) -> tuple[int, Mapping[str, str], bytes]:
        return await self._inner.get(path, timeout_s)

    async def close(self) -> None:
        await self._inner.close()


def test_body_pushed_and_one_wake_up_at_its_end() -> None:
    async def go() -> None:
        t = _transport(OK_READS)
        got: list[bytes] = []

        def on_body(stamp: int, data: bytes) -> bool:
            got.append(data)
            return False

        async with t.post_push("/x", b"{}", {}, on_body) as resp:
            assert resp.status == 200
            assert resp.headers.get("x-request-id") == "head-id"
            assert len(got) == 3  # entering returned only when the body ended
            await resp.consume(on_body)
            assert len(got) == 3
        assert t.idle_connections == 1  # complete: kept alive

    asyncio.run(go())


def test_handler_done_before_the_last_chunk_drains_the_connection() -> None:
    async def go() -> None:
        t = _transport(OK_READS)
        calls: list[bytes] = []

        def on_body(stamp: int, data: bytes) -> bool:
            calls.append(data)
            return b"[DONE]" in data

        async with t.post_push("/x", b"{}", {}, on_body) as resp:
            await resp.consume(on_body)
        assert len(calls) == 3
        assert t.idle_connections == 0
        await asyncio.sleep(0.01)  # the last chunk arrives: the connection goes back to the pool
        assert t.idle_connections == 1

    asyncio.run(go())


def test_other_status_returns_at_the_head() -> None:
    async def go() -> None:
        t = _transport([b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\n", b"busy"])
        calls: list[bytes] = []
        async with t.post_push("/x", b"{}", {}, lambda s, d: bool(calls.append(d))) as resp:
            assert resp.status == 503
            assert await resp.read_text() == "busy"
        assert calls == []

    asyncio.run(go())


def test_handler_error_and_cut_stream_are_raised_by_consume() -> None:
    async def go(reads: list[bytes], close_after: bool, handler: Any, exc: type[BaseException]) -> None:
        t = _transport(reads, close_after)
        async with t.post_push("/x", b"{}", {}, handler) as resp:
            assert resp.status == 200
            with pytest.raises(exc):
                await resp.consume(handler)

    def bad(stamp: int, data: bytes) -> bool:
        raise ValueError("malformed")

    asyncio.run(go(OK_READS, False, bad, ValueError))
    asyncio.run(go(OK_READS[:2], True, lambda s, d: False, StreamClosed))


@pytest.mark.parametrize(
    "reads",
    [
        OK_READS,
        [HEAD + b"\r\n", *OK_READS[1:]],  # no X-Request-Id: the body's id
        [OK_READS[0], _event("a"), b"0\r\n\r\n"],  # ended without [DONE]
        [OK_READS[0], _frame(b"data: {oops\n\n"), b"0\r\n\r\n"],  # malformed
        [b"HTTP/1.1 429 Slow down\r\nContent-Length: 2\r\nRetry-After: 1\r\n\r\n", b"no"],
        [OK_READS[0], b"".join(OK_READS[1:])],  # the whole body in one read
    ],
)
def test_execute_records_as_with_post(reads: list[bytes]) -> None:
    async def one(transport: Any) -> Any:
        clock = MonotonicClock()
        out = await execute(
            transport,
            ClientOptions(model="m"),
            request_id=1,
            prompt="hi",
            max_tokens=4,
            scheduled_ns=0,
            t0_ns=clock.now_ns(),
            clock=clock,
            timeouts=Timeouts(),
        )
        return out

    pushed = asyncio.run(one(_transport(reads)))
    plain = asyncio.run(one(_PostOnly(_transport(reads))))
    times = {f.name for f in dataclasses.fields(pushed.record) if f.name.endswith("_ns") and f.name != "scheduled_ns"}
    a = {k: v for k, v in dataclasses.asdict(pushed.record).items() if k not in times}
    b = {k: v for k, v in dataclasses.asdict(plain.record).items() if k not in times}
    assert a == b
    assert pushed.text == plain.text
    for k in times:  # the same times are present (or absent)
        assert (getattr(pushed.record, k) is None) == (getattr(plain.record, k) is None), k
    assert len(pushed.record.chunk_times_ns) == len(plain.record.chunk_times_ns)
    if reads is OK_READS:
        assert pushed.record.status is Status.OK
        assert pushed.record.server_request_id == "head-id"
    if reads[0].startswith(HEAD + b"\r\n"):
        assert pushed.record.server_request_id == "body-id"
    if b"oops" in reads[1]:
        assert pushed.record.error is ErrorClass.MALFORMED_SSE
