"""The closed loop's next requests are built one per event-loop turn (never a burst of builds in one turn while token
reads wait), in the order the slots asked; and the dispatch's interpreter settings are undone after the run."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from tailscope.runner.loadgen import _Builder, _Slot
from tailscope.runner.sender import Prepared
from tailscope.workload.spec import RequestSpec


class _Gen:
    """What the builder uses of the load generator: its stop and its stream."""

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self.built: list[int] = []

    def _next(self, specs: Iterator[RequestSpec]) -> Prepared | None:
        spec = next(specs, None)
        if spec is None:
            return None
        self.built.append(spec.id)
        return Prepared(spec=spec, prompt="p", followups=[])


def test_one_build_per_loop_turn_in_the_order_asked() -> None:
    async def go() -> None:
        gen = _Gen()
        specs = iter([RequestSpec(id=i, input_tokens=4, output_tokens=2) for i in range(10)])
        b = _Builder(gen, specs, asyncio.get_running_loop())  # type: ignore[arg-type]
        slots = [_Slot() for _ in range(4)]
        for s in slots:
            b.want(s)
        assert gen.built == []  # nothing built in the caller's turn
        for turn in range(1, 5):
            await asyncio.sleep(0)  # one loop turn
            assert len(gen.built) == turn
        assert [b.take(s).spec.id for s in slots] == [0, 1, 2, 3]  # type: ignore[union-attr]

    asyncio.run(go())


def test_a_slot_not_yet_built_draws_from_the_stream_and_leaves_the_queue() -> None:
    async def go() -> None:
        gen = _Gen()
        specs = iter([RequestSpec(id=i, input_tokens=4, output_tokens=2) for i in range(10)])
        b = _Builder(gen, specs, asyncio.get_running_loop())  # type: ignore[arg-type]
        first, second = _Slot(), _Slot()
        b.want(first)
        b.want(second)
        got = b.take(second)  # its request ended before its turn came
        assert got is not None
        assert got.spec.id == 0
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert first.ready
        assert first.prep is not None
        assert first.prep.spec.id == 1
        assert not second.ready  # left the queue: not built twice
        assert gen.built == [0, 1]
        gen._stop.set()
        b.want(second)
        await asyncio.sleep(0)
        assert not second.ready  # the run stopped: nothing more is built

    asyncio.run(go())
