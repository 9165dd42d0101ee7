"""What a bench run does beside the LLM load: plain HTTP mixed traffic and the over-saturation check.

Kept apart from :mod:`tailscope.runner.bench` so the run itself stays small: :class:`MixedTraffic` runs
:func:`tailscope.runner.mixed.run_mixed` on the run's event loop with the run's ``t0`` (so its times share the run's
origin), and :func:`saturation_check` turns the steady stages of a run into warnings
(:mod:`tailscope.metrics.saturation`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from tailscope.clock import Clock
from tailscope.metrics.saturation import detect_saturation, saturation_warnings
from tailscope.records import RequestRecord
from tailscope.runner.mixed import MixedRecord, run_mixed, summarize_mixed
from tailscope.workload.model import MixedTarget

#: mixed traffic of a run bounded only by a request count is scheduled this far ahead and stopped with the LLM load.
MIXED_HORIZON_S = 3600.0


class MixedTraffic:
    """Plain HTTP targets sent beside the LLM load, from the run's start until the load stops.

    Args:
        targets: the profile's ``mixed_traffic`` entries.
        clock: the run's clock.
        t0_ns: the run's start on ``clock`` (mixed records share the run's time origin).
        duration_s: the run's duration bound, or None when only a request count bounds it (then the traffic runs
            until :meth:`finish`, at most :data:`MIXED_HORIZON_S`).
        seed: the run's seed.
    """

    def __init__(
        self,
        targets: Sequence[MixedTarget],
        *,
        clock: Clock,
        t0_ns: int,
        duration_s: float | None,
        seed: int = 0,
    ) -> None:
        self._stop = asyncio.Event()
        self._task: asyncio.Task[list[MixedRecord]] | None = None
        if targets:
            self._task = asyncio.create_task(
                run_mixed(
                    targets,
                    duration_s=duration_s if duration_s is not None else MIXED_HORIZON_S,
                    stop=self._stop,
                    clock=clock,
                    t0_ns=t0_ns,
                    seed=seed,
                )
            )

    async def finish(self, *, grace_s: float = 15.0) -> dict[str, Any]:
        """Stop scheduling, let requests in flight finish (each has its own timeout) and summarize per target.

        Returns:
            ``{target name: MixedSummary.to_dict()}`` (empty without targets).
        """
        if self._task is None:
            return {}
        self._stop.set()
        try:
            records = await asyncio.wait_for(asyncio.shield(self._task), grace_s)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            return {}
        return {name: s.to_dict() for name, s in summarize_mixed(records).items()}

    async def cancel(self) -> None:
        """Stop at once (the run failed)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def saturation_check(
    records: Sequence[RequestRecord],
    windows: Sequence[tuple[float, float]] | None,
    *,
    open_loop: bool,
    constant_rate: bool,
) -> tuple[str, ...]:
    """Over-saturation warnings for the steady stages of a run.

    Args:
        records: the run's records.
        windows: the steady (constant-rate) stages as (start_s, end_s) from the run start; ``None`` = decide from
            the load: a flag-only open-loop run at one constant rate is one steady window over the whole run.
        open_loop: the run was open loop (a closed loop regulates itself: its TTFT cannot grow without bound).
        constant_rate: the whole open-loop run offered one constant rate.

    Returns:
        One warning per saturated window (empty when none is, or there is nothing steady to test).
    """
    if not open_loop:
        return ()
    if windows is None:
        if not constant_rate:
            return ()
        return saturation_warnings(detect_saturation(records, windows=None, labels=["the run"]))
    if not windows:
        return ()
    labels = [f"steady stage {i + 1}" for i in range(len(windows))]
    return saturation_warnings(detect_saturation(records, windows=list(windows), labels=labels))
