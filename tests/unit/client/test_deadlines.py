"""The request's first-token and total deadlines in real time: one timer, armed once, re-armed for the total deadline
only when it fires with a token in; expiry is a timeout record, an outside cancel an incomplete one."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from tailscope.client.openai import ClientOptions, Outcome, Timeouts, execute
from tailscope.clock import MonotonicClock
from tailscope.records import ErrorClass, Status


def _delta(text: str) -> bytes:
    return b"data: " + json.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"


class _Response:
    def __init__(self, plan: list[tuple[float, bytes]]) -> None:
        self._plan = plan
        self.status = 200
        self.headers: Mapping[str, str] = {}

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for delay, data in self._plan:
            await asyncio.sleep(delay)
            yield data

    async def read_text(self, limit: int = 4096) -> str:
        return ""


class _Paced:
    """Each chunk after its delay in real seconds (the plan's last entry may wait far past any deadline)."""

    def __init__(self, plan: list[tuple[float, bytes]]) -> None:
        self._plan = plan

    @asynccontextmanager
    async def _post(self) -> AsyncIterator[_Response]:
        yield _Response(self._plan)

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> AbstractAsyncContextManager[_Response]:
        return self._post()

    async def get(self, path: str, timeout_s: float) -> tuple[int, Mapping[str, str], bytes]:
        return 200, {}, b""

    async def close(self) -> None:
        return None


def _execute(plan: list[tuple[float, bytes]], timeouts: Timeouts) -> Any:
    clock = MonotonicClock()
    return execute(
        _Paced(plan),
        ClientOptions(model="m"),
        request_id=1,
        prompt="hi",
        max_tokens=4,
        scheduled_ns=0,
        t0_ns=clock.now_ns(),
        clock=clock,
        timeouts=timeouts,
    )


def test_tokens_past_the_first_token_deadline_complete() -> None:
    # the first token is in before the first-token deadline; the stream runs on past it and ends well within total
    plan = [(0.0, _delta("a")), (0.08, _delta("b")), (0.02, b"data: [DONE]\n\n")]
    r = asyncio.run(_execute(plan, Timeouts(first_token_s=0.03, total_s=5))).record
    assert r.status is Status.OK, r.error_detail
    assert r.output_tokens == 2


def test_total_deadline_after_the_first_token() -> None:
    plan = [(0.0, _delta("a")), (60.0, b"data: [DONE]\n\n")]
    r = asyncio.run(_execute(plan, Timeouts(first_token_s=0.03, total_s=0.1))).record
    assert r.error is ErrorClass.TIMEOUT_TOTAL
    assert r.end_ns is not None
    assert r.end_ns >= 100_000_000


def test_total_deadline_before_the_first_token_deadline() -> None:
    plan = [(60.0, _delta("a"))]
    r = asyncio.run(_execute(plan, Timeouts(first_token_s=5, total_s=0.05))).record
    assert r.error is ErrorClass.TIMEOUT_FIRST_TOKEN  # no token yet: named by what was missing, as before


def test_outside_cancel_is_incomplete_and_the_task_stays_cancelled() -> None:
    async def main() -> tuple[Outcome, int]:
        task = asyncio.create_task(_execute([(60.0, _delta("a"))], Timeouts(first_token_s=5, total_s=10)))
        await asyncio.sleep(0.02)
        task.cancel()
        out = await task
        return out, task.cancelling()

    out, cancelling = asyncio.run(main())
    assert out.record.status is Status.INCOMPLETE
    assert out.record.error is ErrorClass.CANCELLED
    assert cancelling == 1  # the outside cancel request is not taken back


def test_outside_cancel_as_the_deadline_fires_is_incomplete() -> None:
    # both cancel the task in the same loop turn, before it runs again: the outside request wins, as with
    # asyncio.timeout (the deadline's own request is taken back, the outside one stays)
    async def main() -> tuple[Outcome, int]:
        task = asyncio.create_task(_execute([(60.0, _delta("a"))], Timeouts(first_token_s=0.05, total_s=10)))
        await asyncio.sleep(0.01)
        time.sleep(0.08)  # blocks the loop past the deadline: its timer is due together with the cancel below
        asyncio.get_running_loop().call_soon(task.cancel)  # runs first, then the due deadline, then the task
        out = await task
        return out, task.cancelling()

    out, cancelling = asyncio.run(main())
    assert out.record.status is Status.INCOMPLETE
    assert cancelling == 1


def test_no_timer_left_behind() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        await _execute([(0.0, _delta("a")), (0.0, b"data: [DONE]\n\n")], Timeouts(first_token_s=0.05, total_s=10))
        await asyncio.sleep(0.1)  # past the first-token deadline: a timer left armed would fire here
        return len(loop._scheduled)  # type: ignore[attr-defined]

    assert asyncio.run(main()) == 0
