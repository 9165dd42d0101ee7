"""The wall-clock engine loop: back-to-back steps on absolute deadlines, releases, aborts, metrics."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from fake_engine import FakeEngine

from tailscope.serve.loop import EngineLoop, EngineLoopFailed
from tailscope.serve.metrics import ServeMetrics
from tailscope.testing.judgement import Judgement


def _metrics() -> ServeMetrics:
    return ServeMetrics("m", max_model_len=4096)


async def _drain(loop: EngineLoop, lives: list, timeout: float = 5.0) -> None:
    async def one(live) -> None:  # type: ignore[no-untyped-def]
        seen = 0
        while not (live.done or live.aborted):
            await live.wait_beyond(seen)
            seen = live.released

    await asyncio.wait_for(asyncio.gather(*(one(x) for x in lives)), timeout)


def test_steps_are_back_to_back_and_tokens_complete() -> None:
    async def main() -> tuple[EngineLoop, list]:
        engine = FakeEngine(base_ms=2.0)
        loop = EngineLoop(engine, _metrics())
        loop.start()
        lives = [loop.submit(prompt_tokens=32, output_tokens=20) for _ in range(4)]
        await _drain(loop, lives)
        await loop.stop()
        return loop, lives

    loop, lives = asyncio.run(main())
    assert all(x.done and x.released == 20 for x in lives)
    steps = list(loop.steps)
    assert len(steps) == 20
    for prev, nxt in itertools.pairwise(steps):
        # the engine timeline has no gaps: each step starts where the previous ended
        assert nxt.result.start_ns == prev.result.start_ns + prev.result.duration_ns
    for rec in steps:
        assert rec.released_ns >= rec.due_ns
    lags = sorted(rec.released_ns - rec.due_ns for rec in steps)
    assert lags[len(lags) // 2] < 3_000_000  # median release within 3 ms of the schedule on a busy CI box
    m = loop.metrics
    assert m.ttft.count == 4
    assert m.itl.count == 4 * 19
    assert m.success["length"] == 4
    assert m.e2e.count == 4


def test_speed_scales_wall_time(judgement: Judgement) -> None:
    async def main(speed: float) -> float:
        loop = EngineLoop(FakeEngine(base_ms=4.0, decode_ms_per_seq=0.0, prefill_ms_per_token=0.0), _metrics(),
                          speed=speed)  # fmt: skip
        loop.start()
        t0 = asyncio.get_running_loop().time()
        live = loop.submit(prompt_tokens=8, output_tokens=25)
        await _drain(loop, [live])
        elapsed = asyncio.get_running_loop().time() - t0
        await loop.stop()
        return elapsed

    slow = asyncio.run(main(1.0))
    fast = asyncio.run(main(4.0))
    assert slow >= 0.095  # 25 steps of 4 ms at speed 1 never take less (a busy machine only adds time)
    assert fast >= 0.023
    judgement.holds(abs(slow - 0.100) <= 0.03, f"25 steps of 4 ms at speed 1 took {slow * 1e3:.1f} ms (100 ± 30 asked)")
    judgement.holds(abs(fast - 0.025) <= 0.015, f"the same at speed 4 took {fast * 1e3:.1f} ms (25 ± 15 asked)")


def test_abort_frees_engine_and_counts() -> None:
    async def main() -> tuple[EngineLoop, FakeEngine, object]:
        engine = FakeEngine(base_ms=2.0)
        loop = EngineLoop(engine, _metrics())
        loop.start()
        live = loop.submit(prompt_tokens=8, output_tokens=1000)
        await live.wait_beyond(2)
        loop.abort(live)
        loop.abort(live)  # idempotent
        await asyncio.sleep(0.01)
        await loop.stop()
        return loop, engine, live

    loop, engine, live = asyncio.run(main())
    assert live.aborted
    assert not live.done
    assert engine.aborted == [live.id]  # type: ignore[attr-defined]
    assert not engine.has_work()
    assert loop.metrics.success["abort"] == 1
    assert loop.live_count == 0


def test_engine_rejection_propagates() -> None:
    async def main() -> None:
        loop = EngineLoop(FakeEngine(max_prompt_tokens=10), _metrics())
        with pytest.raises(ValueError, match="never fit"):
            loop.submit(prompt_tokens=11, output_tokens=1)
        assert loop.live_count == 0

    asyncio.run(main())


def test_stop_aborts_live_requests() -> None:
    async def main() -> object:
        loop = EngineLoop(FakeEngine(base_ms=50.0), _metrics())
        loop.start()
        live = loop.submit(prompt_tokens=8, output_tokens=100)
        await asyncio.sleep(0.01)
        await loop.stop()
        return live

    live = asyncio.run(main())
    assert live.aborted  # type: ignore[attr-defined]


class _BrokenEngine(FakeEngine):
    """Raises on its third step (a scheduler bug, say)."""

    def step(self, now_ns):  # type: ignore[no-untyped-def]
        if self.steps_run >= 2:
            raise KeyError("bug in step")
        self.steps_run += 1
        return super().step(now_ns)


def test_a_failing_step_aborts_live_requests_says_why_and_refuses_new_ones(capsys: pytest.CaptureFixture[str]) -> None:
    async def main() -> object:
        engine = _BrokenEngine(base_ms=1.0)
        engine.steps_run = 0  # type: ignore[attr-defined]
        loop = EngineLoop(engine, _metrics())
        loop.start()
        live = loop.submit(prompt_tokens=8, output_tokens=100)
        await _drain(loop, [live])  # ends: aborted, not left waiting for ever
        assert loop.failure is not None
        assert isinstance(loop.failure.cause, KeyError)
        with pytest.raises(EngineLoopFailed, match=r"engine loop failed .*KeyError.*restart"):
            loop.submit(prompt_tokens=8, output_tokens=1)
        await loop.stop()
        return live

    live = asyncio.run(main())
    assert live.aborted
    assert not live.done
    err = capsys.readouterr().err
    assert "engine loop failed" in err
    assert "Traceback" in err
    assert "bug in step" in err


def test_speed_must_be_positive() -> None:
    with pytest.raises(ValueError, match="speed"):
        EngineLoop(FakeEngine(), _metrics(), speed=0)


def test_sink_gets_every_release_and_a_broken_sink_only_drops_its_request() -> None:
    async def main() -> tuple[list[int], object, object]:
        loop = EngineLoop(FakeEngine(base_ms=1.0), _metrics())
        loop.start()
        seen: list[int] = []
        good = loop.submit(prompt_tokens=8, output_tokens=5)
        good.sink = lambda live: seen.append(live.released)
        bad = loop.submit(prompt_tokens=8, output_tokens=50)

        def broken(live: object) -> None:
            raise ConnectionResetError("gone")

        bad.sink = broken
        await asyncio.wait_for(good.wait_finished(), 5)
        await asyncio.wait_for(bad.wait_finished(), 5)
        await loop.stop()
        return seen, good, bad

    seen, good, bad = asyncio.run(main())
    assert seen[:5] == [1, 2, 3, 4, 5]  # every release, the last one also after the finish
    assert good.done  # type: ignore[attr-defined]
    assert bad.aborted  # type: ignore[attr-defined]
