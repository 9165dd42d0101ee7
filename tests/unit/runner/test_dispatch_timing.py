"""The dispatcher's timing contract on a real clock: never early, the closed loop's first wave due at the run start,
and the summary's first-wave figures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from tailscope.api._support import run_sync
from tailscope.client.openai import ClientOptions, Timeouts
from tailscope.clock import MonotonicClock
from tailscope.metrics.summary import first_wave, summarize
from tailscope.records import RequestRecord, Status
from tailscope.runner.loadgen import DispatchConfig, LoadGenerator
from tailscope.workload.prompts import PromptSynthesizer
from tailscope.workload.spec import RequestSpec

BODY = (
    b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"b"}}]}\n\ndata: [DONE]\n\n'
)


class _Resp:
    status = 200
    headers: Mapping[str, str] = {}

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        await asyncio.sleep(0.002)
        yield BODY

    async def read_text(self, limit: int = 4096) -> str:
        return ""


class _Transport:
    """Answers every POST after 2 ms, on the real clock."""

    @asynccontextmanager
    async def _post(self) -> AsyncIterator[_Resp]:
        yield _Resp()

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> Any:
        return self._post()

    async def get(self, path: str, timeout_s: float) -> tuple[int, Mapping[str, str], bytes]:
        return 200, {}, b""

    async def close(self) -> None:
        return None


def _run(specs: list[RequestSpec], dispatch: DispatchConfig) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    gen = LoadGenerator(
        _Transport(), ClientOptions(model="m"), Timeouts(), PromptSynthesizer(), out.append, MonotonicClock()
    )
    run_sync(gen.run(iter(specs), dispatch))  # uvloop when installed: its timers tick in whole milliseconds
    return out


def test_open_loop_never_sends_before_the_intended_time() -> None:
    # issue 28: 1,000 open-loop requests, due times off the millisecond grid, 1.3 ms apart: a timer that fires a tick
    # early would send early
    specs = [RequestSpec(id=i, input_tokens=4, output_tokens=2, at_ns=i * 1_300_000 + 170_000) for i in range(1000)]
    records = _run(specs, DispatchConfig())
    assert len(records) == 1000
    assert all(r.ok for r in records)
    for r in records:
        assert r.sent_ns is not None
        assert r.sent_ns >= r.scheduled_ns, (r.id, r.sent_ns, r.scheduled_ns)
        assert r.scheduled_ns == specs[r.id].at_ns


def test_closed_loop_first_wave_is_due_at_the_run_start() -> None:
    specs = [RequestSpec(id=i, input_tokens=4, output_tokens=2) for i in range(24)]
    records = _run(specs, DispatchConfig(concurrency=8))
    assert len(records) == 24
    first = sorted(records, key=lambda r: r.id)[:8]
    assert all(r.scheduled_ns == 0 for r in first)  # every slot's first request: intended at the start
    later = [r for r in records if r.id >= 8]
    assert all(r.scheduled_ns > 0 for r in later)
    assert all(r.sent_ns is not None and r.sent_ns >= r.scheduled_ns for r in records)


def test_stagger_starts_slot_i_at_its_share_and_never_early() -> None:
    # --stagger 0.08 over 8 slots: slot i's first request is due i × 10 ms after the start (its scheduled time)
    # (enough requests that the stream outlasts the stagger: each answer takes ≈ 2 ms)
    specs = [RequestSpec(id=i, input_tokens=4, output_tokens=2) for i in range(600)]
    records = _run(specs, DispatchConfig(concurrency=8, stagger_s=0.08))
    assert len(records) == 600
    assert all(r.ok for r in records)
    starts = {i * 10_000_000 for i in range(8)}
    assert starts <= {r.scheduled_ns for r in records}
    assert sum(r.scheduled_ns == 0 for r in records) == 1
    assert all(r.sent_ns is not None and r.sent_ns >= r.scheduled_ns for r in records)


def test_a_workers_share_of_the_stagger_follows_its_first_slot() -> None:
    d = DispatchConfig(concurrency=3, stagger_s=1.0, first_slot=5, all_slots=8)
    assert [d.slot_start_ns(i) for i in range(3)] == [625_000_000, 750_000_000, 875_000_000]
    assert DispatchConfig(concurrency=4).slot_start_ns(3) == 0  # no stagger: every slot at the start
    assert DispatchConfig(concurrency=4, stagger_s=2.0).slot_start_ns(2) == 1_000_000_000


def _rec(i: int, scheduled: int, sent: int, first: int, end: int) -> RequestRecord:
    return RequestRecord(
        id=i, scheduled_ns=scheduled, sent_ns=sent, first_token_ns=first, end_ns=end, status=Status.OK,
        chunk_times_ns=(first, end), chunk_tokens=(1, 1), output_tokens=2,
    )  # fmt: skip


def test_first_wave_against_the_rest() -> None:
    ms = 1_000_000
    # 4 slots start at 0 and get out 0/10/20/30 ms late; then 8 more requests, each sent on time
    wave = [_rec(i, 0, i * 10 * ms, i * 10 * ms + 50 * ms, i * 10 * ms + 100 * ms) for i in range(4)]
    rest = [_rec(4 + i, 200 * ms + i * ms, 200 * ms + i * ms, 250 * ms + i * ms, 300 * ms + i * ms) for i in range(8)]
    fw = first_wave(wave + rest)
    assert fw is not None
    assert fw.count == 4
    assert fw.rest == 8
    assert fw.send_lag_ms.max == 30.0
    assert fw.rest_send_lag_ms.max == 0.0
    assert fw.ttft_ms.max == 80.0
    assert fw.ttft_from_sent_ms.max == 50.0
    assert fw.rest_ttft_ms.max == 50.0
    s = summarize(wave + rest)
    assert s.first_wave == fw
    assert any(w.startswith("FIRST WAVE: the 4 requests") for w in s.warnings)
    # the schedule judgement is on the rest: no client-bottleneck warning for the opening burst alone
    assert not any(w.startswith("CLIENT BOTTLENECK: send lag") for w in s.warnings)
    assert "first_wave" in s.to_dict()
    assert first_wave(rest) is None or first_wave(rest).count >= 2  # type: ignore[union-attr]
