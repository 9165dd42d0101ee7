"""Timing judgements a busy machine cannot support: said in the test run's summary, never failed or silently passed.

A test that measures latency on a shared 2-core machine keeps its structural checks; the part that compares timings
runs only when :meth:`Judgement.quiet` holds, and otherwise :meth:`Judgement.cannot_judge` records why, with the
figures. The suite's ``conftest.py`` hands each test a ``judgement`` and prints every record under "not judged on
this machine" at the end of the run.
"""

from __future__ import annotations

import os

#: what could not be judged in this process, in order ("node id: why (load)")
NOT_JUDGED: list[str] = []


class Judgement:
    """One test's judgement of timings: ``quiet()`` before judging, ``cannot_judge(why)`` instead of judging."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid

    @staticmethod
    def load() -> tuple[float, int]:
        """The 1-minute load average and the CPU count."""
        return os.getloadavg()[0], os.cpu_count() or 1

    def quiet(self, share: float = 1.0) -> bool:
        """The 1-minute load average is at most ``share`` × the CPUs."""
        load, cpus = self.load()
        return load <= cpus * share

    def holds(self, ok: bool, what: str, share: float = 1.0) -> None:
        """Judge a timing property: passes when it ``ok``; when not, records it as not judged on a busy machine and
        fails (``AssertionError(what)``) only on a quiet one."""
        if ok:
            return
        if not self.quiet(share):
            self.cannot_judge(what)
            return
        raise AssertionError(f"{what} (on a quiet machine)")

    def cannot_judge(self, why: str) -> None:
        """Record that this test measured but could not judge ``why`` (give the figures)."""
        load, cpus = self.load()
        NOT_JUDGED.append(f"{self.nodeid}: {why} (load {load:.1f} on {cpus} CPUs)")
